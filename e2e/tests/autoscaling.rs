//! Shard autoscaling on the local cluster (Momento v0.9, issue 30): a 2-shard cluster with
//! `minShards 2, maxShards 3`, memory thresholds 50 % out / 25 % in of a 128 MB `maxmemory`,
//! a bandwidth trigger of 20 Mbps, and the short windows the issue allows (60 s quiet window and
//! cooldowns). Reads on a replica past the bandwidth threshold add none; load past the
//! threshold adds exactly one shard (a `ScaleOut` Event), none while it moves or during the
//! cooldown; once the load is gone one shard is removed after the quiet window, never below
//! `minShards`; a writer through all of it loses no acknowledged write. ValkeyNode status shows
//! utilization that changes every ~30 s. Real API server, kubelet pods, valkey-server.
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, wait_for};
use valkey_e2e::valkey::{member_pods, wait_state};
use valkey_e2e::workload::{PASSWORD, Writer, apply, cluster, cluster_client, config, image};
use valkey_operator::api::{
    ClusterState, NodeRole, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode,
};

const NAME: &str = "auto";
/// Keys of 100 kB the load writes: about 160 MB, 62 % of each of two 128 MB primaries (42 % of
/// three: above the scale-in threshold, below the scale-out one). The writer's own keys stay a
/// few percent (they grow by about 15 MB per shard in 5 minutes).
const LOAD_KEYS: usize = 1600;
const VALUE_BYTES: usize = 100_000;

/// Events of `reason` published for the cluster.
async fn events(client: &Client, ns: &str, reason: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let fields = format!("reason={reason},involvedObject.name={NAME}");
    Ok(api
        .list(&ListParams::default().fields(&fields))
        .await?
        .items
        .into_iter()
        .map(|e| e.message.unwrap_or_default())
        .collect())
}

fn desired(cluster: &ValkeyCluster) -> Option<i32> {
    cluster
        .status
        .as_ref()?
        .autoscaling
        .as_ref()?
        .desired_shards
}

/// Polls the cluster every half second until `done` holds for its status, recording each new
/// `desiredShards` (and when) in `seen`.
async fn watch_desired(
    api: &Api<ValkeyCluster>,
    seen: &mut Vec<(i32, Duration)>,
    started: Instant,
    timeout: Duration,
    done: impl Fn(&ValkeyCluster) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let c = api.get(NAME).await?;
        if let Some(d) = desired(&c)
            && seen.last().map(|(s, _)| *s) != Some(d)
        {
            println!("desiredShards {d} at {:?}", started.elapsed());
            seen.push((d, started.elapsed()));
        }
        if done(&c) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let status = serde_json::to_string(&c.status)?;
            bail!("timed out; desired so far {seen:?}; status {status}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads of a 100 kB key on one replica (READONLY) for 70 s, far past the 20 Mbps bandwidth
/// threshold on that replica while the primaries stay quiet: its ValkeyNode shows the traffic,
/// and no shard is added (only primaries add shards).
async fn replica_load_adds_no_shard(
    client: &Client,
    ns: &str,
    api: &Api<ValkeyCluster>,
    nodes: &Api<ValkeyNode>,
) -> anyhow::Result<()> {
    let valkey = cluster_client(client, ns, NAME).await?;
    let _: () = valkey
        .set("replica-read", "r".repeat(VALUE_BYTES), None, None, false)
        .await?;
    let _ = valkey.quit().await;
    // The replica serving that key's slot: READONLY GET answers there, MOVED elsewhere.
    let replica_pods: Vec<String> = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.status)
        .filter(|s| s.role == Some(NodeRole::Replica))
        .filter_map(|s| s.pod)
        .collect();
    let mut reader = None;
    for pod in member_pods(client, ns, NAME).await? {
        if !replica_pods.contains(&pod.metadata.name.clone().unwrap_or_default()) {
            continue;
        }
        let Some(ip) = pod.status.and_then(|s| s.pod_ip) else {
            continue;
        };
        let config = Config {
            server: ServerConfig::new_centralized(ip, 6379),
            username: Some("app".into()),
            password: Some(PASSWORD.into()),
            ..Default::default()
        };
        let member = Builder::from_config(config).build()?;
        member.init().await?;
        let _: () = member
            .custom(fred::cmd!("READONLY"), Vec::<String>::new())
            .await?;
        // MOVED (an error) unless this replica's primary owns the key's slot.
        let got: Result<Option<String>, _> = member.get("replica-read").await;
        if got.is_ok() {
            reader = Some(member);
            break;
        }
        let _ = member.quit().await;
    }
    let Some(reader) = reader else {
        bail!("no replica serves the key's slot with READONLY");
    };
    let started = Instant::now();
    let mut bytes = 0usize;
    while started.elapsed() < Duration::from_secs(70) {
        let gets = (0..10).map(|_| reader.get::<Option<String>, _>("replica-read"));
        for value in futures::future::join_all(gets).await {
            bytes += value?.map_or(0, |v| v.len());
        }
    }
    let _ = reader.quit().await;
    println!(
        "replica reads: {:.0} Mbps over {:?}",
        bytes as f64 * 8.0 / started.elapsed().as_secs_f64() / 1e6,
        started.elapsed()
    );
    let mut replica_peak = 0.0f64;
    for node in nodes.list(&Default::default()).await? {
        let Some(status) = node.status else {
            continue;
        };
        let mbps = status
            .utilization
            .and_then(|u| u.bandwidth_mbps)
            .unwrap_or(0.0);
        println!("{:?} {:?}: {mbps} Mbps", node.metadata.name, status.role);
        if status.role == Some(NodeRole::Replica) {
            replica_peak = replica_peak.max(mbps);
        }
    }
    ensure!(
        replica_peak >= 20.0,
        "a replica's sample shows the reads ({replica_peak} Mbps)"
    );
    let c = api.get(NAME).await?;
    ensure!(
        desired(&c) == Some(2),
        "load on a replica added a shard: {:?}",
        c.status
    );
    ensure!(
        events(client, ns, "ScaleOut").await?.is_empty(),
        "no ScaleOut"
    );
    Ok(())
}

fn active_with(c: &ValkeyCluster, shards: usize) -> bool {
    let s = c.status.clone().unwrap_or_default();
    s.state == Some(ClusterState::Active)
        && s.observed_generation == c.metadata.generation
        && s.nodes.iter().filter(|n| n.slots.is_some()).count() == shards
        && desired(c) == Some(shards as i32)
}

/// Utilization on every member's ValkeyNode, sampled again ~30 s later: the first sample has
/// a memory budget and percentage, the next one a rate.
async fn utilization_is_sampled_and_sampled_again(nodes: &Api<ValkeyNode>) -> anyhow::Result<()> {
    let member = format!("{NAME}-0-0");
    let first = wait_for(
        "utilization on the ValkeyNode",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            let nodes = nodes.clone();
            let member = member.clone();
            async move {
                match nodes.get(&member).await?.status.and_then(|s| s.utilization) {
                    Some(u) => Ok(Some(u)),
                    None => bail!("no utilization yet"),
                }
            }
        },
    )
    .await?;
    println!("utilization of {member}: {first:?}");
    ensure!(
        first.memory_budget == "MaxMemory" && first.memory_percent.is_some(),
        "{first:?}"
    );
    let sampled = Instant::now();
    let next = wait_for(
        "the next sample",
        Duration::from_secs(75),
        Duration::from_secs(1),
        || {
            let nodes = nodes.clone();
            let member = member.clone();
            let before = first.sampled_at.clone();
            async move {
                let u = nodes.get(&member).await?.status.and_then(|s| s.utilization);
                match u {
                    Some(u) if u.sampled_at != before => Ok(Some(u)),
                    _ => bail!("same sample"),
                }
            }
        },
    )
    .await?;
    println!("next sample after {:?}: {next:?}", sampled.elapsed());
    ensure!(
        next.bandwidth_mbps.is_some(),
        "a second sample has a rate: {next:?}"
    );
    Ok(())
}

/// The load goes; after the quiet window and the cooldown one shard is removed (the whole
/// window after the load was removed, once, never below minShards).
async fn quiet_removes_one_shard(
    client: &Client,
    ns: &str,
    api: &Api<ValkeyCluster>,
    valkey: &fred::clients::Client,
    seen: &mut Vec<(i32, Duration)>,
    started: Instant,
) -> anyhow::Result<()> {
    let unloaded = Instant::now();
    let unloaded_at = started.elapsed();
    for i in 0..LOAD_KEYS {
        let _: i64 = valkey.del(format!("load:{i}")).await?;
    }
    let _ = valkey.quit().await;
    watch_desired(api, seen, started, Duration::from_secs(420), |c| {
        active_with(c, 2)
    })
    .await?;
    println!(
        "scale-in done {:?} after the load was removed",
        unloaded.elapsed()
    );
    let in_at = seen.last().map(|(_, t)| *t).unwrap_or_default();
    println!(
        "scale-in decided {:?} after the load began to be removed",
        in_at.saturating_sub(unloaded_at)
    );
    // The whole 60 s quiet window (less the second a sample's time is rounded to).
    ensure!(
        in_at.saturating_sub(unloaded_at) >= Duration::from_secs(58),
        "scale-in before a whole quiet window: {seen:?}, load removed at {unloaded_at:?}"
    );
    let shards: Vec<i32> = seen.iter().map(|(d, _)| *d).collect();
    ensure!(
        shards == [2, 3, 2],
        "one shard out, one in, never below minShards: {shards:?}"
    );
    let scale_in = events(client, ns, "ScaleIn").await?;
    ensure!(scale_in.len() == 1, "{scale_in:?}");
    println!("ScaleIn: {}", scale_in[0]);
    Ok(())
}

#[tokio::test]
async fn load_adds_one_shard_and_quiet_removes_it_without_losing_a_write() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-autoscale").await?;
    let suffix = valkey_e2e::harness::random_suffix(4);
    let (img, cfg) = (
        format!("e2e-auto-{suffix}-img"),
        format!("e2e-auto-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    let mut menu_config = config(&cfg, &img);
    menu_config["spec"]["valkey"]["maxmemory"] = json!("128mb");
    apply(&client, "config", menu_config).await?;

    let mut spec = cluster(&ns.name, NAME, &cfg, 2, 1);
    spec["spec"]["autoscaling"] = json!({
        "minShards": 2, "maxShards": 3,
        "scaleOut": {"memoryPercent": 50, "bandwidthMbps": 20}, "scaleIn": {"memoryPercent": 25},
        "scaleInWindowSeconds": 60, "scaleOutCooldownSeconds": 60, "scaleInCooldownSeconds": 60
    });
    apply(&client, &ns.name, spec).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let active = wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    ensure!(desired(&active) == Some(2), "{:?}", active.status);

    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), &ns.name);
    utilization_is_sampled_and_sampled_again(&nodes).await?;

    replica_load_adds_no_shard(&client, &ns.name, &api, &nodes).await?;

    let writer = Writer::start(&client, &ns.name, NAME).await?;
    let started = Instant::now();
    let valkey = cluster_client(&client, &ns.name, NAME).await?;
    let value = "x".repeat(VALUE_BYTES);
    for i in 0..LOAD_KEYS {
        let _: () = valkey
            .set(format!("load:{i}"), value.as_str(), None, None, false)
            .await?;
    }
    println!(
        "loaded {LOAD_KEYS} x {VALUE_BYTES} B in {:?}",
        started.elapsed()
    );

    let mut seen = vec![(2, Duration::ZERO)];
    watch_desired(&api, &mut seen, started, Duration::from_secs(240), |c| {
        active_with(c, 3)
    })
    .await?;
    let out_at = seen.iter().find(|(d, _)| *d == 3).map(|(_, t)| *t);
    println!(
        "scale-out decided {out_at:?} after the load began; 3 shards serving at {:?}",
        started.elapsed()
    );
    // The cooldown and the move: no second shard (maxShards 3 caps it anyway, but the
    // decision must not even be attempted twice).
    tokio::time::sleep(Duration::from_secs(20)).await;
    ensure!(
        events(&client, &ns.name, "ScaleOut").await?.len() == 1,
        "exactly one ScaleOut"
    );

    quiet_removes_one_shard(&client, &ns.name, &api, &valkey, &mut seen, started).await?;

    let report = writer.finish(&client, &ns.name, NAME).await?;
    println!(
        "writer: {} acknowledged, longest pause {:?}",
        report.acknowledged.len(),
        report.longest_pause
    );
    api.delete(NAME, &Default::default()).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
