//! `make bench`, on the running local cluster (`make up`). Prints figures and writes them to
//! docs/benchmarks.md (plots and figures.json in docs/benchmarks/, `valkey_e2e::report`); a
//! run with `--only` replaces its section and keeps the others. Asserts nothing.
//! Floors measured on local valkey-server processes are in `valkey_e2e::floors`.
//!
//! * Formation: time-to-Active of a 3-shard x 1-replica ValkeyCluster next to the formation
//!   floor measured in the same run (`valkey-cli --cluster create` of 6 fresh valkey-servers of
//!   the same build into the same shape, until settled), and their ratio.
//! * Shard scale-out 3 -> 5 with 100,000 keys: the atomic slot-move phase (from Valkey's own
//!   job records) next to raw `CLUSTER MIGRATESLOTS` of the same slots and keys by hand
//!   (`floors::migrate_slots_floor`, with `valkey-cli --cluster reshard` as the key-by-key
//!   floor when the build has one); the whole scale-out atomic and key by key (the
//!   `valkey.gomomento.com/slot-migration: keys` annotation).
//! * Rolling replacement (9.0.0 -> 9.1.2 by repointing a ValkeyImage) of 3 x 1 under a
//!   writer: duration per shard (from the status naming each shard) next to the per-shard
//!   floor (`floors::rollout_shard_floor`: new replicas, sync, CLUSTER FAILOVER, FORGET by
//!   hand), the writer's longest pause and writes lost.
//!
//! * Failover: write-back time (SIGKILL of a primary's valkey-server until its replica is a
//!   primary serving the shard's slots, asked every 20 ms) of a 3 x 1 ValkeyCluster on the menu's default
//!   settings, median of `--runs` (at least 5), next to the native floor in the same run: a
//!   bare 3 x 1 cluster of the same build and `cluster-node-timeout` (5000) failing over by
//!   itself. Also the write-back after `kubectl delete pod` of a primary (the API says the
//!   pod is gone: no node timeout to wait for).
//!
//! * Webhook: p50/p90/p99 latency of admission reviews sent straight to the operator's webhook
//!   over HTTPS at a steady 200 requests/s (open loop: a request leaves every 5 ms whatever
//!   the previous ones do), for a ValkeyRole review (pure) and a ValkeyCluster review (reads
//!   the menu from the API server), while the fleet's clusters are present.
//!
//! * Fleet: one 1 x 0 ValkeyCluster's time-to-Active alone, then 1 x 0 ValkeyClusters added
//!   up to 10, 50, 100, then 200: seconds until each step settles, the operator's RSS at
//!   each, reconciles per minute at rest.
//!
//! * Durability: a 2 × 1 cluster with volumes and `appendfsync everysec` next to a memory-only
//!   one: SETs per second of one client (and their ratio), then a full restart of each after
//!   100,000 replicated keys (every member pod force-deleted): seconds to Active, keys lost.
//!
//! * Real clients: docs/connect.md's four client programs (valkey-py, valkey-go, Lettuce,
//!   iovalkey) as written and the bench's own writer, at once, on a 3 x 1 TLS cluster through
//!   a scale-out, a scale-in, a rolling replacement and `kubectl delete pod` of a primary:
//!   failed attempts, acknowledged writes lost and the longest pause of each.
//!
//! Usage: vk-bench [--runs N] [--only formation|scaling|rollout|failover|webhook|fleet|durability|clients]
//! [--render] (`--render` measures nothing and writes the report again from figures.json,
//! after a change to its text).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::safety::{Shape, healed, members_with};
use valkey_e2e::valkey::{OPERATOR_NAMESPACE, operator_driver, restart_all_members, wait_state};
use valkey_e2e::workload::{
    Menu, PASSWORD, PRELOADED, Writer, active_cluster, active_cluster_on, apply, cluster,
    cluster_client, durable_config, missing_confirmed, missing_of, preload, sets_per_second,
    write_confirmed,
};
use valkey_e2e::{floors, guides, report};
use valkey_operator::api::{ClusterState, NodeRole, ValkeyCluster};
use valkey_operator::driver::testing::{LocalServers, ValkeyBuild, form_cluster};
use valkey_operator::driver::{ClusterDriver, DriverConfig, FredDriver, MemberAddr};

const SHARDS: usize = 3;

/// Seconds from `since` until `replica` is a primary serving slots: its shard takes writes
/// again. (Asked with CLUSTER NODES rather than a write: the operator's ACL user may not
/// write keys, and both sides of the comparison must use the same signal.)
async fn write_back(
    driver: &FredDriver,
    replica: &MemberAddr,
    since: Instant,
) -> anyhow::Result<f64> {
    loop {
        if let Ok(nodes) = driver.cluster_nodes(replica).await
            && nodes
                .iter()
                .any(|n| n.flags.myself && n.primary_id.is_none() && !n.slots.is_empty())
        {
            return Ok(since.elapsed().as_secs_f64());
        }
        if since.elapsed() > Duration::from_secs(180) {
            bail!("{replica} never took over its shard");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Native failover floor: a bare 3 x 1 cluster of the same build and node timeout fails
/// over by itself after SIGKILL of a primary.
async fn native_failover_floor() -> anyhow::Result<f64> {
    let mut servers = LocalServers::start(ValkeyBuild::V9_0, SHARDS * 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let driver = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let formation = form_cluster(&driver, &servers.addrs(), SHARDS, Duration::from_secs(300))
        .await
        .map_err(anyhow::Error::msg)?;
    let (primary, id) = formation.primaries[0].clone();
    let replica = formation
        .replicas
        .iter()
        .find(|(_, _, of)| *of == id)
        .map(|(r, _, _)| r.clone())
        .context("shard 0 has a replica")?;
    let server = servers
        .servers
        .iter_mut()
        .find(|s| s.addr == primary)
        .context("primary's process")?;
    let since = Instant::now();
    server.kill();
    write_back(&driver, &replica, since).await
}

enum PrimaryFault {
    Sigkill,
    PodDeleted,
}

/// Write-back seconds of one fault on shard `shard`'s primary of the operator's cluster, and
/// the time until the cluster was whole again.
async fn operator_write_back(
    client: &Client,
    ns: &str,
    shard: i32,
    fault: PrimaryFault,
) -> anyhow::Result<(f64, f64)> {
    let primary = members_with(client, ns, "failover", NodeRole::Primary)
        .await?
        .into_iter()
        .find(|m| m.shard == shard)
        .context("shard's primary")?;
    let replica = members_with(client, ns, "failover", NodeRole::Replica)
        .await?
        .into_iter()
        .find(|m| m.shard == shard)
        .context("shard's replica")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ip = |p: Pod| p.status.and_then(|s| s.pod_ip).context("pod IP");
    let replica_addr = MemberAddr::new(ip(pods.get(&replica.pod).await?)?, 6379);
    let driver = operator_driver(client, ns, "failover").await?;
    let since = Instant::now();
    match fault {
        PrimaryFault::Sigkill => PodRef::find(ns, &primary.pod)?.kill("valkey")?,
        PrimaryFault::PodDeleted => {
            pods.delete(&primary.pod, &Default::default()).await?;
        }
    }
    let back = write_back(&driver, &replica_addr, since).await?;
    let shape = Shape {
        primaries: SHARDS,
        members: SHARDS * 2,
    };
    let whole = healed(client, ns, "failover", shape, &[&primary.name], since).await?;
    Ok((back, whole.as_secs_f64()))
}

/// The formation floor: `valkey-cli --cluster create` of the same shape on the same build
/// (`floors::cli_formation_floor`); the operator's driver calls alone
/// ([`driver_formation_floor`]) only when the build has no valkey-cli, and said so.
async fn formation_floor() -> anyhow::Result<f64> {
    match floors::cli_formation_floor(ValkeyBuild::V9_0).await? {
        Some(seconds) => Ok(seconds),
        None => {
            println!(
                "formation floor: no valkey-cli beside valkey-server 9.0: driver calls instead"
            );
            Ok(driver_formation_floor().await?.as_secs_f64())
        }
    }
}

async fn driver_formation_floor() -> anyhow::Result<Duration> {
    let servers = LocalServers::start(ValkeyBuild::V9_0, SHARDS * 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let driver = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let started = Instant::now();
    form_cluster(&driver, &servers.addrs(), SHARDS, Duration::from_secs(300))
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(started.elapsed())
}

/// Whether every one of `want` member pods runs its valkey container.
fn members_running(pods: &[Pod], want: usize) -> bool {
    let running = pods.iter().filter(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.name == "valkey" && c.state.as_ref().is_some_and(|s| s.running.is_some())
                })
            })
    });
    running.count() >= want
}

/// Seconds from the apply of a `shards` x `replicas` ValkeyCluster on `config` until it is
/// Active, and until every member's valkey container first ran (Kubernetes' share: the
/// ValkeyNodes, scheduling, the image, the container start; what follows is formation).
async fn time_to_active(
    client: &Client,
    config: &str,
    shards: usize,
    replicas: usize,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    let ns = TestNamespace::create(client, "bench").await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let cluster = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "bench", "namespace": ns.name},
        "spec": {"configRef": config, "shards": shards, "replicasPerShard": replicas},
    });
    let members = shards * (1 + replicas);
    let selector = valkey_operator::controller::names::member_selector("bench")
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let running_after = std::sync::Mutex::new(None);
    let started = Instant::now();
    api.patch(
        "bench",
        &PatchParams::apply("vk-bench"),
        &Patch::Apply(&cluster),
    )
    .await?;
    wait_for(
        "the bench cluster to be Active",
        Duration::from_secs(300),
        Duration::from_millis(100),
        || {
            let (api, pods, selector) = (api.clone(), pods.clone(), selector.clone());
            let running_after = &running_after;
            async move {
                if running_after.lock().unwrap().is_none() {
                    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
                    if members_running(&listed.items, members) {
                        *running_after.lock().unwrap() = Some(started.elapsed());
                    }
                }
                let c = api.get("bench").await?;
                match c.status.and_then(|s| s.state) {
                    Some(ClusterState::Active) => Ok(Some(())),
                    Some(ClusterState::Blocked) => {
                        bail!("blocked: is the `standard` sample config installed? (make up)")
                    }
                    _ => Ok(None),
                }
            }
        },
    )
    .await?;
    let active = started.elapsed();
    let running = running_after.into_inner().unwrap();
    Ok((active, running))
}

/// A 3 -> 5 shard scale-out of a 3 x 1 cluster holding PRELOADED keys.
struct ScaleOut {
    /// From `spec.shards: 5` to Active (members created, synced, slots moved).
    whole_seconds: f64,
    /// The slot-move phase alone (atomic migration only): from the first export job seen on
    /// a source primary to the last one seen finished, asking `CLUSTER GETSLOTMIGRATIONS`
    /// every 20 ms (Valkey's own job times are in whole seconds).
    slot_move_seconds: Option<f64>,
}

async fn scale_out(client: &Client, keys_by_key: bool) -> anyhow::Result<ScaleOut> {
    let ns = TestNamespace::create(client, "bench-scale").await?;
    let menu = Menu::publish(client, "bench", "9.1.2").await?;
    let shaped = |shards: i32| {
        let mut c = cluster(&ns.name, "scale", &menu.config, shards, 1);
        if keys_by_key {
            c["metadata"]["annotations"] = json!({"valkey.gomomento.com/slot-migration": "keys"});
        }
        c
    };
    apply(client, &ns.name, shaped(3)).await?;
    wait_state(
        client,
        &ns.name,
        "scale",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let valkey = cluster_client(client, &ns.name, "scale").await?;
    preload(&valkey).await?;
    let _ = fred::prelude::ClientLike::quit(&valkey).await;
    let jobs = JobWatch::start(client, &ns.name, "scale").await?;
    let started = Instant::now();
    apply(client, &ns.name, shaped(5)).await?;
    wait_state(
        client,
        &ns.name,
        "scale",
        ClusterState::Active,
        Duration::from_secs(1200),
    )
    .await?;
    let whole_seconds = started.elapsed().as_secs_f64();
    let span = jobs.stop().await?;
    let slot_move_seconds = if keys_by_key {
        None
    } else {
        Some(span.context("no export job seen during an atomic scale-out")?)
    };
    menu.remove(client).await?;
    Ok(ScaleOut {
        whole_seconds,
        slot_move_seconds,
    })
}

/// Asks the cluster's current members (the source primaries of a scale-out) for their
/// export jobs every 20 ms until stopped.
struct JobWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Option<f64>>>,
}

impl JobWatch {
    async fn start(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<JobWatch> {
        let driver = operator_driver(client, ns, cluster).await?;
        let members: Vec<MemberAddr> = valkey_e2e::valkey::member_pods(client, ns, cluster)
            .await?
            .into_iter()
            .filter_map(|p| p.status?.pod_ip)
            .map(|ip| MemberAddr::new(ip, 6379))
            .collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move { watch_exports(&driver, &members, &stopped).await });
        Ok(JobWatch { stop, task })
    }

    /// Seconds from the first export job seen to the last one seen finished (None: no job).
    async fn stop(self) -> anyhow::Result<Option<f64>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await?
    }
}

async fn watch_exports(
    driver: &FredDriver,
    members: &[MemberAddr],
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Option<f64>> {
    use std::collections::BTreeMap;
    let known_before: Vec<String> = exports(driver, members).await?.into_keys().collect();
    // Job name -> (first seen, first seen finished).
    let mut seen: BTreeMap<String, (Instant, Option<Instant>)> = BTreeMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (name, finished) in exports(driver, members).await? {
            if known_before.contains(&name) {
                continue;
            }
            let now = Instant::now();
            let entry = seen.entry(name).or_insert((now, None));
            if finished && entry.1.is_none() {
                entry.1 = Some(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = seen.values().map(|(s, _)| *s).min();
    let last = seen.values().map(|(_, f)| *f).collect::<Option<Vec<_>>>();
    Ok(match (first, last) {
        (Some(first), Some(last)) => last
            .into_iter()
            .max()
            .map(|last| last.duration_since(first).as_secs_f64()),
        _ => None,
    })
}

/// The export jobs the members list (name -> finished), replicas' copies left out.
async fn exports(
    driver: &FredDriver,
    members: &[MemberAddr],
) -> anyhow::Result<std::collections::BTreeMap<String, bool>> {
    use valkey_operator::driver::MigrationOperation;
    let mut jobs = std::collections::BTreeMap::new();
    for member in members {
        // A member being replaced may not answer for a moment: its jobs are seen next time.
        let Ok(listed) = driver.slot_migrations(member).await else {
            continue;
        };
        for job in listed {
            if job.operation == MigrationOperation::Export && !job.source_node.0.is_empty() {
                jobs.insert(job.name.clone(), job.state.is_finished());
            }
        }
    }
    Ok(jobs)
}

/// A rolling replacement of a 3 x 1 cluster (repointing its image 9.0.0 -> 9.1.2) under a
/// writer.
struct Rollout {
    /// From repointing the image to Active.
    seconds: f64,
    /// Each shard's replacement in the order the operator did them: from the status first
    /// naming the shard ("rolling out shard N") to it naming the next one (the last: to
    /// Active).
    per_shard: Vec<f64>,
    /// The writer's longest time without an acknowledged write, and its writes lost (0).
    longest_pause_seconds: f64,
    lost: usize,
}

async fn rollout(client: &Client) -> anyhow::Result<Rollout> {
    let ns = TestNamespace::create(client, "bench-roll").await?;
    let menu = Menu::publish(client, "bench", "9.0.0").await?;
    apply(
        client,
        &ns.name,
        cluster(&ns.name, "roll", &menu.config, SHARDS as i32, 1),
    )
    .await?;
    wait_state(
        client,
        &ns.name,
        "roll",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let writer = valkey_e2e::workload::Writer::start(client, &ns.name, "roll").await?;
    let started = Instant::now();
    menu.repoint(client, "9.1.2").await?;
    let shard_starts = follow_rollout(client, &ns.name, "roll", started).await?;
    let seconds = started.elapsed().as_secs_f64();
    let mut per_shard: Vec<f64> = shard_starts.windows(2).map(|w| w[1] - w[0]).collect();
    if let Some(last) = shard_starts.last() {
        per_shard.push(seconds - last);
    }
    let report = writer
        .finish_counting_losses(client, &ns.name, "roll")
        .await?;
    menu.remove(client).await?;
    Ok(Rollout {
        seconds,
        per_shard,
        longest_pause_seconds: report.longest_pause.as_secs_f64(),
        lost: report.lost.len(),
    })
}

/// Polls the cluster's status every 100 ms until it is Active again after a rollout began;
/// returns when (seconds after `started`) each shard was first named as rolling out, in
/// order. The first shard's replacement starts at the repoint itself (0).
async fn follow_rollout(
    client: &Client,
    ns: &str,
    name: &str,
    started: Instant,
) -> anyhow::Result<Vec<f64>> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let mut seen: Vec<usize> = Vec::new();
    let mut starts: Vec<f64> = Vec::new();
    let mut updating = false;
    loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "the rollout did not finish in 900 s"
        );
        let status = api.get(name).await?.status.unwrap_or_default();
        let shard = status.message.as_deref().and_then(|m| {
            m.split("rolling out shard ")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()
        });
        if let Some(shard) = shard.filter(|s| !seen.contains(s)) {
            starts.push(if seen.is_empty() {
                0.0
            } else {
                started.elapsed().as_secs_f64()
            });
            seen.push(shard);
        }
        match status.state {
            Some(ClusterState::Updating) => updating = true,
            Some(ClusterState::Active) if updating && seen.len() == SHARDS => return Ok(starts),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Latencies (seconds) of `count` reviews of `fixture` sent at `rate` per second.
async fn webhook_load(
    client: &Client,
    fixture: &str,
    rate: u32,
    count: usize,
) -> anyhow::Result<(Vec<f64>, usize)> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;

    let (https_client, ip) = valkey_e2e::webhook::webhook_client(client).await?;
    let path = format!(
        "{}/../webhooks/fixtures/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = Bytes::from(std::fs::read(&path).with_context(|| path.clone())?);
    let route = if fixture.starts_with("valkeyrole") {
        "/validate/valkeyrole"
    } else {
        "/validate/valkeycluster"
    };
    let uri: hyper::Uri = format!("https://{ip}:9443{route}").parse()?;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        ticker.tick().await;
        let (c, uri, body) = (https_client.clone(), uri.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let request = hyper::Request::post(uri)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .expect("request");
            let started = Instant::now();
            let response = c.request(request).await.ok()?;
            let ok = response.status().is_success();
            let _ = response.into_body().collect().await.ok()?;
            ok.then(|| started.elapsed().as_secs_f64())
        }));
    }
    let mut latencies = Vec::with_capacity(count);
    let mut failed = 0;
    for t in tasks {
        match t.await? {
            Some(l) => latencies.push(l),
            None => failed += 1,
        }
    }
    latencies.sort_by(f64::total_cmp);
    Ok((latencies, failed))
}

/// Resident memory of the operator's processes (every replica: pods are processes on this
/// machine), in MiB, the largest.
async fn operator_rss_mib(client: &Client) -> anyhow::Result<f64> {
    use kube::ResourceExt as _;
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    let mut largest: f64 = 0.0;
    for p in pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let pid = PodRef::find(OPERATOR_NAMESPACE, &p.name_any())?.pid("operator")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("VmRSS in /proc/<pid>/status")?;
        largest = largest.max(kib / 1024.0);
    }
    Ok(largest)
}

/// Reconciles the operator has run so far (every controller and result), from /metrics.
async fn reconciles_so_far(client: &Client) -> anyhow::Result<f64> {
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    let mut total = 0.0;
    for p in &pods.items {
        let Ok(page) = valkey_e2e::valkey::pod_metrics(p) else {
            continue;
        };
        total += page
            .lines()
            .filter(|l| l.starts_with("valkey_operator_reconciles_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(total)
}

/// Fleet scale: ValkeyClusters of 1 shard x 0 replicas added up to each of `steps`; for each,
/// the seconds until every one is Active (or waits only for a pod the nodes have no room
/// for: the local nodes hold 110 pods each) and the operator's RSS; then the reconciles per
/// minute once everything is at rest.
/// The fleet's namespace and menu are returned: the webhook is measured with the clusters
/// present. Small clusters: the menu's config asks for 10m CPU and 64Mi, so that 200 members
/// fit the local nodes (4 x 2 CPUs, 110 pods each) with room left for the operator's pod
/// when the sampling cost is measured (it restarts the operator).
async fn fleet(
    client: &Client,
    steps: &[usize],
) -> anyhow::Result<(report::Fleet, TestNamespace, Menu)> {
    let menu = Menu::publish(client, "fleet", "9.1.2").await?;
    let mut small = valkey_e2e::workload::config(&menu.config, &menu.image);
    small["spec"]["resources"] = json!({"cpu": "10m", "memory": "64Mi"});
    apply(client, "config", small).await?;
    // One 1 x 0 cluster alone first: the unit the fleet's settling time is compared with.
    let one = time_to_active(client, &menu.config, 1, 0)
        .await?
        .0
        .as_secs_f64();
    let ns = TestNamespace::create(client, "bench-fleet").await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    println!(
        "fleet one_cluster_active_seconds={one:.2} clusters=0 operator_rss_mib={:.1}",
        operator_rss_mib(client).await?
    );
    let mut measured = report::Fleet {
        one_cluster_active_seconds: one,
        // Clusters the operator can bring up at once here: one per core. Reconciles run
        // concurrently, but each member is a process started on this 2-core machine next to
        // the API server, etcd and the kubelet; more cores would justify more.
        parallelism: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        ..Default::default()
    };
    let mut created = 0;
    for &n in steps {
        let started = Instant::now();
        for i in created..n {
            let name = format!("f{i}");
            let c = json!({
                "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": name, "namespace": ns.name},
                "spec": {"configRef": menu.config, "shards": 1, "replicasPerShard": 0},
            });
            api.patch(&name, &PatchParams::apply("vk-bench"), &Patch::Apply(&c))
                .await?;
        }
        let (active, no_room) = settled(&api, n).await?;
        let step = report::FleetStep {
            clusters: n,
            added: n - created,
            settled_seconds: started.elapsed().as_secs_f64(),
            operator_rss_mib: operator_rss_mib(client).await?,
            waiting_for_room: no_room,
        };
        created = n;
        println!(
            "fleet clusters={n} active={active} waiting_for_room={no_room} settled_seconds={:.1} operator_rss_mib={:.1}",
            step.settled_seconds, step.operator_rss_mib
        );
        measured.steps.push(step);
    }
    let before = reconciles_so_far(client).await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    measured.reconciles_per_minute_at_rest = reconciles_so_far(client).await? - before;
    measured.rss_at_rest_mib = operator_rss_mib(client).await?;
    println!(
        "fleet clusters={created} at rest: reconciles_per_minute={:.0} operator_rss_mib={:.1}",
        measured.reconciles_per_minute_at_rest, measured.rss_at_rest_mib
    );
    measured.sampling = sampling_cost(client).await?;
    Ok((measured, ns, menu))
}

/// Utilization sampling's cost with the fleet at rest (issue 30): the operator restarted with
/// `utilizationSampling` off, then on again; after each restart its resync (every cluster
/// reconciled once) is let pass, then reconciles are counted for a minute and RSS read.
async fn sampling_cost(client: &Client) -> anyhow::Result<Vec<report::SamplingCost>> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let settings: Api<ConfigMap> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut costs = Vec::new();
    for on in [false, true] {
        let value = if on { "on" } else { "off" };
        let patch = json!({"data": {"utilizationSampling": value}});
        settings
            .patch(
                valkey_operator::settings::SETTINGS_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        valkey_e2e::valkey::restart_operator(client).await?;
        tokio::time::sleep(Duration::from_secs(120)).await;
        let before = reconciles_so_far(client).await?;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let cost = report::SamplingCost {
            sampling: on,
            reconciles_per_minute: reconciles_so_far(client).await? - before,
            operator_rss_mib: operator_rss_mib(client).await?,
        };
        println!(
            "fleet utilizationSampling={value}: reconciles_per_minute={:.0} operator_rss_mib={:.1}",
            cost.reconciles_per_minute, cost.operator_rss_mib
        );
        costs.push(cost);
    }
    Ok(costs)
}

/// Waits until each of the `n` clusters is Active or waits only for room on the nodes (the
/// local nodes hold 110 pods each); returns (active, waiting for room).
async fn settled(api: &Api<ValkeyCluster>, n: usize) -> anyhow::Result<(usize, usize)> {
    wait_for(
        &format!("{n} clusters to settle"),
        Duration::from_secs(900),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                let list = api.list(&Default::default()).await?.items;
                let state = |c: &ValkeyCluster| c.status.clone().unwrap_or_default();
                let active = list
                    .iter()
                    .filter(|c| state(c).state == Some(ClusterState::Active))
                    .count();
                let no_room = list
                    .iter()
                    .filter(|c| {
                        state(c)
                            .message
                            .is_some_and(|m| m.contains("Unschedulable"))
                    })
                    .count();
                Ok((active + no_room == n).then_some((active, no_room)))
            }
        },
    )
    .await
}

/// Formation: floor and operator's time-to-Active, `runs` times, with the time until every
/// member's container ran.
async fn measure_formation(client: &Client, runs: usize) -> anyhow::Result<report::Formation> {
    let mut measured = Vec::new();
    let mut members_running_seconds = Vec::new();
    for run in 1..=runs {
        let floor = formation_floor().await?;
        let (active, running) = time_to_active(client, "standard", SHARDS, 1).await?;
        let (active, running) = (active.as_secs_f64(), running.map(|r| r.as_secs_f64()));
        println!(
            "run={run} formation_floor_seconds={floor:.2} operator_time_to_active_seconds={active:.2} ratio={:.2} members_running_seconds={running:?}",
            active / floor
        );
        measured.push(report::FormationRun {
            floor_seconds: floor,
            operator_seconds: active,
        });
        members_running_seconds.push(running);
    }
    Ok(report::Formation {
        runs: measured,
        members_running_seconds,
    })
}

/// Scale-out 3 -> 5 with PRELOADED keys: atomic and key by key, and the raw floors.
async fn measure_slot_move(client: &Client) -> anyhow::Result<report::SlotMove> {
    let floor = floors::migrate_slots_floor(PRELOADED).await?;
    for why in &floor.stalled_attempts {
        println!(
            "migrateslots floor: an attempt stalled and was retried on a fresh cluster: {why}"
        );
    }
    let atomic = scale_out(client, false).await?;
    let by_key = scale_out(client, true).await?;
    let slot_move = atomic
        .slot_move_seconds
        .context("no export job record after an atomic scale-out")?;
    println!(
        "scale_out_3_to_5 keys={PRELOADED} atomic_whole_seconds={:.2} atomic_slot_move_seconds={slot_move:.2} migrateslots_floor_seconds={:.2} ratio={:.2} key_by_key_whole_seconds={:.2} reshard_floor_seconds={}",
        atomic.whole_seconds,
        floor.seconds,
        slot_move / floor.seconds,
        by_key.whole_seconds,
        match &floor.key_by_key {
            Some(Ok(k)) => format!("{:.2}", k.seconds),
            Some(Err(why)) => format!("not-measured ({why})"),
            None => "n/a".into(),
        },
    );
    Ok(report::SlotMove {
        keys: PRELOADED as u64,
        slots_moved: floor.slots_moved as u32,
        atomic_seconds: slot_move,
        migrateslots_floor_seconds: floor.seconds,
        // The key-by-key phase alone leaves no record to time it by: only the whole
        // scale-out is measured for it.
        key_by_key_seconds: None,
        reshard_floor_seconds: floor.key_by_key.and_then(Result::ok).map(|k| k.seconds),
        scale_out_atomic_seconds: atomic.whole_seconds,
        scale_out_key_by_key_seconds: Some(by_key.whole_seconds),
    })
}

/// Failover write-back after SIGKILL (and after pod deletion) next to the native floor.
async fn measure_failover(client: &Client, runs: usize) -> anyhow::Result<report::Failover> {
    let ns = TestNamespace::create(client, "bench-failover").await?;
    let menu = active_cluster(client, &ns.name, "failover", "9.0.0", (3, 1)).await?;
    let mut measured = report::Failover::default();
    for run in 0..runs.max(5) {
        let floor = native_failover_floor().await?;
        let shard = (run % SHARDS) as i32;
        let (back, whole) =
            operator_write_back(client, &ns.name, shard, PrimaryFault::Sigkill).await?;
        println!(
            "run={} native_failover_floor_seconds={floor:.2} sigkill_write_back_seconds={back:.2} member_replaced_seconds={whole:.2}",
            run + 1
        );
        measured.runs.push(report::FailoverRun {
            native_floor_seconds: floor,
            operator_sigkill_write_back_seconds: back,
        });
    }
    for run in 0..3 {
        let shard = (run % SHARDS) as i32;
        let (back, whole) =
            operator_write_back(client, &ns.name, shard, PrimaryFault::PodDeleted).await?;
        println!(
            "pod_deleted run={} write_back_seconds={back:.2} member_replaced_seconds={whole:.2}",
            run + 1
        );
        measured.pod_deleted_write_back_seconds.push(back);
    }
    menu.remove(client).await?;
    Ok(measured)
}

/// Webhook latency per review kind at 200 requests/s, with whatever clusters exist.
async fn measure_webhook(client: &Client) -> anyhow::Result<report::Webhook> {
    const RATE: u32 = 200;
    let present = Api::<ValkeyCluster>::all(client.clone())
        .list(&Default::default())
        .await?
        .items
        .len();
    let mut measured = report::Webhook::default();
    for (name, fixture) in [
        ("ValkeyRole create", "valkeyrole-create.json"),
        ("ValkeyCluster create", "valkeycluster-create.json"),
    ] {
        // Warm up (TLS handshakes, menu caches), then 30 s at 200 requests/s.
        webhook_load(client, fixture, RATE, 200).await?;
        let (latencies, failed) = webhook_load(client, fixture, RATE, 6000).await?;
        let kind =
            report::WebhookKind::from_latencies(name, &latencies, failed, f64::from(RATE), present);
        println!(
            "webhook {name} at {RATE} req/s with {present} clusters present: requests={} failed={failed} p50_ms={:.2} p90_ms={:.2} p99_ms={:.2} max_ms={:.2}",
            kind.requests, kind.p50_ms, kind.p90_ms, kind.p99_ms, kind.max_ms
        );
        measured.kinds.push(kind);
    }
    Ok(measured)
}

/// Rolling replacement per shard: the operator's next to the floor's.
async fn measure_rollout(client: &Client) -> anyhow::Result<report::Rollout> {
    let floor = floors::rollout_shard_floor().await?;
    let operator = rollout(client).await?;
    println!(
        "rollout 9.0.0 -> 9.1.2 of {SHARDS} shards x 1 replica under a writer: total_seconds={:.2} per_shard_seconds={:?} floor_per_shard_seconds={:?} writer_longest_pause_seconds={:.2} writes_lost={}",
        operator.seconds,
        operator.per_shard,
        floor
            .per_shard
            .iter()
            .map(|s| s.seconds)
            .collect::<Vec<_>>(),
        operator.longest_pause_seconds,
        operator.lost
    );
    anyhow::ensure!(operator.lost == 0, "the rollout lost acknowledged writes");
    Ok(report::Rollout {
        shards: operator
            .per_shard
            .iter()
            .zip(&floor.per_shard)
            .map(|(op, fl)| report::ShardRollout {
                floor_seconds: fl.seconds,
                operator_seconds: *op,
            })
            .collect(),
        writer_longest_pause_seconds: Some(operator.longest_pause_seconds),
        runs_worst_ratio: Vec::new(),
    })
}

const USAGE: &str = "usage: vk-bench [--runs N] [--only formation|scaling|rollout|failover|webhook|fleet|durability|clients] \
     [--render: measure nothing, write docs/benchmarks.md again from figures.json]";

/// Keys written before each full restart of the durability section.
const DURABILITY_KEYS: usize = 100_000;
/// How long one client writes on each cluster of the durability section.
const DURABILITY_WRITE: Duration = Duration::from_secs(20);

/// A 2 x 1 cluster on `config` (Active), with its write throughput, then its full restart
/// after [`DURABILITY_KEYS`] replicated keys: (SETs/s, seconds to Active, keys lost).
async fn durability_run(
    client: &Client,
    ns: &str,
    name: &str,
    config: &str,
) -> anyhow::Result<(f64, f64, usize)> {
    active_cluster_on(client, ns, name, config, (2, 1)).await?;
    let rate = sets_per_second(client, ns, name, DURABILITY_WRITE).await?;
    write_confirmed(client, ns, name, "k", DURABILITY_KEYS).await?;
    let took = restart_all_members(client, ns, name, 4).await?;
    let lost = missing_confirmed(client, ns, name, "k", DURABILITY_KEYS).await?;
    println!(
        "durability {name}: {rate:.0} SETs/s; full restart: Active again in {took:?}, {lost} of {DURABILITY_KEYS} keys lost"
    );
    Ok((rate, took.as_secs_f64(), lost))
}

async fn measure_durability(client: &Client) -> anyhow::Result<report::Durability> {
    let ns = TestNamespace::create(client, "bench-durable").await?;
    let menu = Menu::publish(client, "bench-durable", "9.1.2").await?;
    let durable = format!("{}-volumes", menu.config);
    apply(client, "config", durable_config(&durable, &menu.image)).await?;
    let memory = durability_run(client, &ns.name, "memory", &menu.config).await?;
    let volumes = durability_run(client, &ns.name, "volumes", &durable).await?;
    drop(ns);
    valkey_e2e::harness::delete_cluster_scoped::<valkey_operator::api::ValkeyConfig>(
        client, &durable,
    )
    .await?;
    menu.remove(client).await?;
    Ok(report::Durability {
        keys: DURABILITY_KEYS,
        restart_with_volumes_seconds: volumes.1,
        keys_lost_with_volumes: volumes.2,
        restart_memory_only_seconds: memory.1,
        keys_lost_memory_only: memory.2,
        write_seconds: DURABILITY_WRITE.as_secs_f64(),
        sets_per_second_with_volumes: volumes.0,
        sets_per_second_memory_only: memory.0,
    })
}

/// The real-client section's cluster.
const CLIENTS_CLUSTER: &str = "clients";
/// Writes every client acknowledges after each operation before the next one starts.
const CLIENTS_PROGRESS: usize = 20;

/// The planned operations the real clients write through, each followed by every guide
/// program getting CLIENTS_PROGRESS more writes acknowledged: each one's name, start and end.
async fn planned_operations(
    client: &Client,
    ns: &str,
    menu: &Menu,
    spec: &mut serde_json::Value,
    programs: &mut [guides::Program],
) -> anyhow::Result<Vec<(String, Instant, Instant)>> {
    let mut done = Vec::new();
    for (shards, what) in [(4, "scale-out 3 → 4"), (3, "scale-in 4 → 3")] {
        let started = Instant::now();
        spec["spec"]["shards"] = json!(shards);
        apply(client, ns, spec.clone()).await?;
        valkey_e2e::safety::settled(client, ns, CLIENTS_CLUSTER, shards, &[]).await?;
        guides::every_program_writes(programs, CLIENTS_PROGRESS, what).await?;
        done.push((what.to_string(), started, Instant::now()));
    }
    let started = Instant::now();
    let before: Vec<String> = members_with(client, ns, CLIENTS_CLUSTER, NodeRole::Primary)
        .await?
        .into_iter()
        .chain(members_with(client, ns, CLIENTS_CLUSTER, NodeRole::Replica).await?)
        .map(|m| m.name)
        .collect();
    let mut config = valkey_e2e::workload::config(&menu.config, &menu.image);
    config["spec"]["resources"]["memory"] = json!("300Mi");
    apply(client, "config", config).await?;
    let gone: Vec<&str> = before.iter().map(String::as_str).collect();
    valkey_e2e::safety::settled(client, ns, CLIENTS_CLUSTER, 3, &gone).await?;
    guides::every_program_writes(programs, CLIENTS_PROGRESS, "rolling replacement").await?;
    done.push(("rolling replacement".to_string(), started, Instant::now()));
    let started = Instant::now();
    let primaries = members_with(client, ns, CLIENTS_CLUSTER, NodeRole::Primary).await?;
    let victim = primaries.first().context("no primary")?;
    valkey_e2e::harness::kubectl_run(&["delete", "pod", "-n", ns, &victim.pod])?;
    valkey_e2e::safety::settled(client, ns, CLIENTS_CLUSTER, 3, &[victim.name.as_str()]).await?;
    guides::every_program_writes(programs, CLIENTS_PROGRESS, "kubectl delete pod").await?;
    let what = "`kubectl delete pod` of a primary".to_string();
    done.push((what, started, Instant::now()));
    Ok(done)
}

/// What guide program `p` saw: in all since `since`, and during each operation.
async fn guide_figures(
    client: &Client,
    ns: &str,
    p: &guides::Program,
    since: Instant,
    operations: &[(String, Instant, Instant)],
) -> anyhow::Result<report::ClientRun> {
    let acknowledged = p.acknowledged();
    let prefix = guides::key_prefix(&p.language);
    let lost = missing_of(client, ns, CLIENTS_CLUSTER, &prefix, &acknowledged).await?;
    let (failed_attempts, first_failure) = p.failed_attempts();
    let by_operation = operations
        .iter()
        .map(|(_, from, to)| report::DuringOperation {
            failed_attempts: p.failed_attempts_within(*from, *to).0,
            longest_pause_seconds: p.longest_pause_within(*from, *to).as_secs_f64(),
        })
        .collect();
    Ok(report::ClientRun {
        client: guides::client_name(&p.language),
        acknowledged: acknowledged.len(),
        failed_attempts,
        lost,
        longest_pause_seconds: p.longest_pause_within(since, Instant::now()).as_secs_f64(),
        first_failure,
        by_operation,
    })
}

/// Real clients (the docs' four programs and the bench's writer) through planned operations
/// on a TLS cluster.
async fn measure_real_clients(client: &Client) -> anyhow::Result<report::RealClients> {
    let built = guides::prepare()?;
    let ns = TestNamespace::create(client, "bench-clients").await?;
    let ns = ns.name.as_str();
    valkey_e2e::certs::issue_for_clusters(client, ns, &[CLIENTS_CLUSTER]).await?;
    let menu = Menu::publish(client, "bench-clients", "9.1.2").await?;
    let mut spec = cluster(ns, CLIENTS_CLUSTER, &menu.config, 3, 1);
    spec["spec"]["tls"] = json!({"secretRef": format!("{CLIENTS_CLUSTER}-tls")});
    apply(client, ns, spec.clone()).await?;
    valkey_e2e::safety::settled(client, ns, CLIENTS_CLUSTER, 3, &[]).await?;
    let secret = format!("{CLIENTS_CLUSTER}-tls");
    let app = guides::AppEnvironment::of(client, ns, CLIENTS_CLUSTER, &secret, PASSWORD).await?;
    let mut programs = app.start_all(&built)?;
    let writer = Writer::start(client, ns, CLIENTS_CLUSTER).await?;
    guides::every_program_writes(&mut programs, CLIENTS_PROGRESS, "after starting").await?;
    // Pauses count from here: a program's start-up (a JVM's) is not one.
    let since = Instant::now();
    let operations = planned_operations(client, ns, &menu, &mut spec, &mut programs).await;
    programs.iter_mut().for_each(guides::Program::stop);
    let operations = operations?;
    let mut clients = Vec::new();
    for p in &programs {
        clients.push(guide_figures(client, ns, p, since, &operations).await?);
    }
    let own = writer
        .finish_counting_losses(client, ns, CLIENTS_CLUSTER)
        .await?;
    clients.push(report::ClientRun {
        client: report::BENCH_WRITER.to_string(),
        acknowledged: own.acknowledged.len(),
        failed_attempts: own.failed_attempts as usize,
        lost: own.lost.len(),
        longest_pause_seconds: own.longest_pause.as_secs_f64(),
        first_failure: None,
        by_operation: Vec::new(),
    });
    for c in &clients {
        println!(
            "real client {}: {} acknowledged, {} failed attempts, {} lost, longest pause {:.2} s; by operation: {:?}",
            c.client,
            c.acknowledged,
            c.failed_attempts,
            c.lost,
            c.longest_pause_seconds,
            c.by_operation
        );
    }
    menu.remove(client).await?;
    app.remove()?;
    Ok(report::RealClients {
        operations: operations.into_iter().map(|(what, _, _)| what).collect(),
        clients,
        runs: 1,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut runs = 3usize;
    let mut only: Option<String> = None;
    let mut render_only = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--render" => render_only = true,
            "--runs" => runs = args.next().context("--runs needs a value")?.parse()?,
            "--only" => only = Some(args.next().context("--only needs a value")?),
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    let command = std::iter::once("vk-bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let wanted = |what: &str| only.as_deref().is_none_or(|o| o == what);
    let root = report::repo_root();
    let run = report::Metadata::collect(&root, &command, &["9.0.0", "9.1.2"]);
    let mut measured = report::Report::default();
    if render_only {
        measured.publish(&root, &run)?;
        println!("wrote docs/benchmarks.md and its plots again from figures.json");
        return Ok(());
    }
    let client = client().await?;
    if wanted("formation") {
        measured.formation = Some(measure_formation(&client, runs).await?);
    }
    if wanted("scaling") {
        measured.slot_move = Some(measure_slot_move(&client).await?);
    }
    if wanted("failover") {
        measured.failover = Some(measure_failover(&client, runs).await?);
    }
    // The fleet stays while the webhook is measured: reviews with 200 clusters present.
    let fleet_ns = if wanted("fleet") {
        let (fleet, ns, menu) = fleet(&client, &[10, 50, 100, 200]).await?;
        measured.fleet = Some(fleet);
        Some((ns, menu))
    } else {
        None
    };
    if wanted("webhook") {
        measured.webhook = Some(measure_webhook(&client).await?);
    }
    if let Some((ns, menu)) = fleet_ns {
        drop(ns);
        menu.remove(&client).await?;
    }
    if wanted("rollout") {
        let mut each = Vec::new();
        for _ in 0..runs {
            each.push(measure_rollout(&client).await?);
        }
        measured.rollout = report::Rollout::worst_of(each);
    }
    if wanted("durability") {
        measured.durability = Some(measure_durability(&client).await?);
    }
    if wanted("clients") {
        let mut each = Vec::new();
        for _ in 0..runs {
            each.push(measure_real_clients(&client).await?);
        }
        measured.real_clients = report::RealClients::worst_of(each);
    }
    measured.publish(&root, &run)?;
    println!("wrote docs/benchmarks.md and docs/benchmarks/ (figures.json, SVG plots)");
    Ok(())
}
