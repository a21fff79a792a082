//! Shard scaling on the local cluster: 3 -> 5 -> 3 shards with 100,000 keys preloaded, under a
//! continuous writer, while a monitor checks every half second that every slot has an owner
//! in the view of every primary. Atomic slot migration on Valkey 9.0.0 with the `default`
//! user disabled (the operator's rendered ACL). Real API server, kubelet pods, valkey-server.
#![cfg(feature = "e2e")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use fred::prelude::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, LogParams};

use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::{kill_operator, member_pods, operator_driver, wait_state};
use valkey_e2e::workload::{
    Menu, PRELOADED, Writer, apply, cluster, cluster_client, preload, verify_preloaded,
};
use valkey_operator::api::ClusterState;
use valkey_operator::driver::slots::{SLOT_COUNT, count_slots};
use valkey_operator::driver::{ClusterDriver, FredDriver, MemberAddr, MigrationState};

async fn member_addrs(client: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<MemberAddr>> {
    Ok(member_pods(client, ns, name)
        .await?
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| MemberAddr::new(ip, 6379))
        .collect())
}

/// The fewest slots with an owner seen by any slot-owning member, sampled until stopped.
struct CoverageMonitor {
    stop: Arc<AtomicBool>,
    min_covered: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CoverageMonitor {
    fn start(client: Client, ns: String, name: String, driver: FredDriver) -> CoverageMonitor {
        let stop = Arc::new(AtomicBool::new(false));
        let min_covered = Arc::new(AtomicUsize::new(usize::from(SLOT_COUNT)));
        let (stop2, min2) = (stop.clone(), min_covered.clone());
        let task = tokio::spawn(async move {
            while !stop2.load(Ordering::Relaxed) {
                if let Ok(pods) = member_pods(&client, &ns, &name).await {
                    for pod in pods {
                        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                            continue;
                        };
                        let addr = MemberAddr::new(ip, 6379);
                        let Ok(nodes) = driver.cluster_nodes(&addr).await else {
                            continue;
                        };
                        let owns = nodes.iter().any(|n| n.flags.myself && !n.slots.is_empty());
                        if !owns {
                            continue;
                        }
                        let covered = count_slots(nodes.iter().flat_map(|n| n.slots.clone()));
                        if covered < usize::from(SLOT_COUNT) {
                            // The whole view: which node's slots went missing, and who it knows.
                            let view: Vec<String> = nodes
                                .iter()
                                .map(|n| {
                                    format!(
                                        "{} {}:{} myself={} primary={:?} epoch={} slots={}",
                                        n.id,
                                        n.ip,
                                        n.port,
                                        n.flags.myself,
                                        n.primary_id,
                                        n.config_epoch,
                                        count_slots(n.slots.clone())
                                    )
                                })
                                .collect();
                            println!(
                                "coverage: {addr} sees {covered} slots owned at {:?}:\n  {}",
                                std::time::SystemTime::now(),
                                view.join("\n  ")
                            );
                            println!(
                                "coverage: {addr}'s last log lines:\n{}",
                                pod_log_tail(&client, &ns, &pod).await
                            );
                        }
                        min2.fetch_min(covered, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        CoverageMonitor {
            stop,
            min_covered,
            task,
        }
    }

    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.min_covered.load(Ordering::Relaxed)
    }
}

/// The last lines of a member pod's log, for a coverage gap's report.
async fn pod_log_tail(client: &Client, ns: &str, pod: &Pod) -> String {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let params = LogParams {
        tail_lines: Some(40),
        ..LogParams::default()
    };
    match Api::<Pod>::namespaced(client.clone(), ns)
        .logs(&name, &params)
        .await
    {
        Ok(log) => log,
        Err(e) => format!("(no log of {name}: {e})"),
    }
}

/// Every member: no slot importing or migrating, no atomic migration job running; returns
/// the slot count of each primary.
async fn assert_settled(driver: &FredDriver, addrs: &[MemberAddr]) -> anyhow::Result<Vec<usize>> {
    let mut owned = Vec::new();
    for addr in addrs {
        let nodes = driver.cluster_nodes(addr).await?;
        let me = nodes.iter().find(|n| n.flags.myself).expect("myself");
        assert!(
            me.migrating.is_empty() && me.importing.is_empty(),
            "{addr} has open slots: {:?} {:?}",
            me.migrating,
            me.importing
        );
        let running: Vec<_> = driver
            .slot_migrations(addr)
            .await?
            .into_iter()
            .filter(|j| matches!(j.state, MigrationState::InProgress(_)))
            .collect();
        assert!(running.is_empty(), "{addr} still migrates: {running:?}");
        if !me.slots.is_empty() {
            owned.push(count_slots(me.slots.clone()));
        }
    }
    owned.sort_unstable();
    Ok(owned)
}

async fn scale_to(
    client: &Client,
    ns: &str,
    cfg: &str,
    shards: i32,
    driver: &FredDriver,
) -> anyhow::Result<()> {
    let started = Instant::now();
    apply(client, ns, cluster(ns, "scale", cfg, shards, 1)).await?;
    let c = wait_state(
        client,
        ns,
        "scale",
        ClusterState::Active,
        Duration::from_secs(600),
    )
    .await?;
    println!("scaling to {shards} shards took {:?}", started.elapsed());
    let members = c.status.unwrap().nodes.len();
    assert_eq!(
        members,
        2 * shards as usize,
        "members for {shards} shards x 1 replica"
    );
    wait_for(
        "one pod per member",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || async move {
            let pods = member_pods(client, ns, "scale").await?.len();
            if pods == members {
                Ok(Some(()))
            } else {
                bail!("{pods} pods for {members} members")
            }
        },
    )
    .await?;
    let owned = assert_settled(driver, &member_addrs(client, ns, "scale").await?).await?;
    println!("slots per primary: {owned:?}");
    assert_eq!(owned.len(), shards as usize);
    assert_eq!(owned.iter().sum::<usize>(), usize::from(SLOT_COUNT));
    assert!(
        owned[owned.len() - 1] - owned[0] <= 1,
        "even split: {owned:?}"
    );
    Ok(())
}

#[tokio::test]
async fn three_to_five_to_three_shards_with_100k_keys_loses_nothing() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-scale").await?;
    let menu = Menu::publish(&client, "e2e", "9.0.0").await?;
    let cfg = menu.config.clone();
    apply(&client, &ns.name, cluster(&ns.name, "scale", &cfg, 3, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "scale",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let driver = operator_driver(&client, &ns.name, "scale").await?;

    let valkey = cluster_client(&client, &ns.name, "scale").await?;
    let started = Instant::now();
    preload(&valkey).await?;
    println!("preloaded {PRELOADED} keys in {:?}", started.elapsed());
    let _ = valkey.quit().await;

    let writer = Writer::start(&client, &ns.name, "scale").await?;
    let monitor = CoverageMonitor::start(
        client.clone(),
        ns.name.clone(),
        "scale".into(),
        operator_driver(&client, &ns.name, "scale").await?,
    );
    scale_to(&client, &ns.name, &cfg, 5, &driver).await?;
    scale_to(&client, &ns.name, &cfg, 3, &driver).await?;
    let min_covered = monitor.finish().await;
    writer.finish(&client, &ns.name, "scale").await?;
    println!("fewest slots owned in any primary's view throughout: {min_covered}");
    assert_eq!(
        min_covered,
        usize::from(SLOT_COUNT),
        "full slot coverage throughout"
    );

    let valkey = cluster_client(&client, &ns.name, "scale").await?;
    let missing = verify_preloaded(&valkey).await?;
    let _ = valkey.quit().await;
    assert_eq!(missing, 0, "preloaded keys lost");

    menu.remove(&client).await?;
    Ok(())
}

/// Key-by-key moves (the fallback for servers without atomic slot migration, chosen here with
/// the `valkey.gomomento.com/slot-migration: keys` annotation) with the operator killed three
/// times while slots are moving: the interrupted slot moves are resumed, none is left open,
/// nothing is lost.
#[tokio::test]
async fn operator_killed_mid_migration_resumes_without_loss() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-scale-kill").await?;
    let menu = Menu::publish(&client, "e2e", "9.1.2").await?;
    let cfg = menu.config.clone();
    let keyed = |shards: i32| {
        let mut c = cluster(&ns.name, "scale", &cfg, shards, 1);
        c["metadata"]["annotations"] =
            serde_json::json!({"valkey.gomomento.com/slot-migration": "keys"});
        c
    };
    apply(&client, &ns.name, keyed(2)).await?;
    wait_state(
        &client,
        &ns.name,
        "scale",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let driver = operator_driver(&client, &ns.name, "scale").await?;
    let valkey = cluster_client(&client, &ns.name, "scale").await?;
    preload(&valkey).await?;
    let _ = valkey.quit().await;

    let writer = Writer::start(&client, &ns.name, "scale").await?;
    let started = Instant::now();
    apply(&client, &ns.name, keyed(3)).await?;
    let api: kube::Api<valkey_operator::api::ValkeyCluster> =
        kube::Api::namespaced(client.clone(), &ns.name);
    let mut kills = 0;
    while kills < 3 && started.elapsed() < Duration::from_secs(240) {
        let status = api.get("scale").await?.status.unwrap_or_default();
        let message = status.message.unwrap_or_default();
        if message.contains("slot(s) left to move") || message.contains("interrupted") {
            kill_operator(&client).await?;
            kills += 1;
            println!("killed the operator while: {message}");
            tokio::time::sleep(Duration::from_secs(4)).await;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(kills > 0, "the operator was killed while slots were moving");
    let c = wait_state(
        &client,
        &ns.name,
        "scale",
        ClusterState::Active,
        Duration::from_secs(600),
    )
    .await?;
    println!(
        "key-by-key scale-out 2 -> 3 with {kills} operator kills took {:?}",
        started.elapsed()
    );
    assert_eq!(c.status.unwrap().nodes.len(), 6);
    let owned = assert_settled(&driver, &member_addrs(&client, &ns.name, "scale").await?).await?;
    assert_eq!(owned.len(), 3);
    assert!(owned[2] - owned[0] <= 1, "even split: {owned:?}");
    writer.finish(&client, &ns.name, "scale").await?;
    let valkey = cluster_client(&client, &ns.name, "scale").await?;
    assert_eq!(verify_preloaded(&valkey).await?, 0, "preloaded keys lost");
    let _ = valkey.quit().await;
    menu.remove(&client).await?;
    Ok(())
}
