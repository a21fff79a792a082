//! Data safety with the menu's default settings (no `appendonly`): a member whose Valkey
//! process dies is never restarted under its old identity (its replicas would copy the empty
//! dataset it comes back with); its replica is promoted at once and a new member replaces it.
//! 3,000 keys are written and confirmed on the replicas (replication offsets equal) before
//! each fault, the verifying writer runs throughout, and every confirmed key must survive:
//! SIGKILL of a primary, of a replica, of two primaries within 10 s, and of a primary and then
//! of the replica that replaced it. (The same with `appendonly yes`, where members do restart
//! in place: e2e/tests/failures.rs.) And a key-by-key scale-out whose source primary is
//! SIGKILLed while it exports: the replica that replaces it finishes the move, no confirmed key
//! is lost and no key is left in a slot its member does not own. And a primary that a client's
//! oversized command drives past its container's memory limit, `OOMKilled` by the kernel (a
//! real node's memory cgroup): the same rules hold and no confirmed key is lost; then filled
//! with ordinary writes, a primary refuses them at the `maxmemory` the operator derived from
//! its memory limit, and keeps running.
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kube::{Api, Client};

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client};
use valkey_e2e::safety::{self, Member, Shape};
use valkey_e2e::workload::{Writer, active_cluster};
use valkey_operator::api::{NodeRole, ValkeyCluster};
use valkey_operator::driver::ClusterDriver;

const NAME: &str = "safe";
const KEYS: usize = 3_000;

async fn write_confirmed(client: &Client, ns: &str, round: &str) -> anyhow::Result<()> {
    valkey_e2e::workload::write_confirmed(client, ns, NAME, &format!("safe:{round}"), KEYS).await
}

async fn missing(client: &Client, ns: &str, round: &str) -> anyhow::Result<usize> {
    valkey_e2e::workload::missing_confirmed(client, ns, NAME, &format!("safe:{round}"), KEYS).await
}

const SHAPE: Shape = Shape {
    primaries: 2,
    members: 4,
};

async fn healed(client: &Client, ns: &str, gone: &[&str], since: Instant) -> anyhow::Result<()> {
    safety::healed(client, ns, NAME, SHAPE, gone, since).await?;
    Ok(())
}

async fn members_with(client: &Client, ns: &str, role: NodeRole) -> anyhow::Result<Vec<Member>> {
    safety::members_with(client, ns, NAME, role).await
}

async fn kill(ns: &str, pod: &str) -> anyhow::Result<()> {
    PodRef::find(ns, pod)?.kill("valkey")?;
    println!("SIGKILL sent to {pod}'s valkey-server");
    Ok(())
}

#[tokio::test]
async fn killed_members_without_persistence_lose_no_confirmed_write() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-safe").await?;
    // The menu's defaults: no appendonly.
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (2, 1)).await?;
    let writer = Writer::start(&client, &ns.name, NAME).await?;

    // 1. A primary.
    write_confirmed(&client, &ns.name, "a").await?;
    let Member { name, pod, .. } =
        members_with(&client, &ns.name, NodeRole::Primary).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&name], t).await?;
    ensure!(
        missing(&client, &ns.name, "a").await? == 0,
        "primary SIGKILL lost confirmed keys"
    );

    // 2. A replica.
    write_confirmed(&client, &ns.name, "b").await?;
    let Member { name, pod, .. } =
        members_with(&client, &ns.name, NodeRole::Replica).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&name], t).await?;
    ensure!(
        missing(&client, &ns.name, "b").await? == 0,
        "replica SIGKILL lost confirmed keys"
    );

    // 3. Both primaries, the second within 10 s of the first.
    write_confirmed(&client, &ns.name, "c").await?;
    let primaries = members_with(&client, &ns.name, NodeRole::Primary).await?;
    let t = Instant::now();
    kill(&ns.name, &primaries[0].pod).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    kill(&ns.name, &primaries[1].pod).await?;
    healed(
        &client,
        &ns.name,
        &[&primaries[0].name, &primaries[1].name],
        t,
    )
    .await?;
    ensure!(
        missing(&client, &ns.name, "c").await? == 0,
        "two primary SIGKILLs lost confirmed keys"
    );

    // 4. A primary, then the replica that replaced it once the shard has a copy again.
    write_confirmed(&client, &ns.name, "d").await?;
    let Member { shard, name, pod } =
        members_with(&client, &ns.name, NodeRole::Primary).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&name], t).await?;
    let promoted = members_with(&client, &ns.name, NodeRole::Primary)
        .await?
        .into_iter()
        .find(|m| m.shard == shard)
        .context("shard has a primary")?;
    write_confirmed(&client, &ns.name, "e").await?;
    let t = Instant::now();
    kill(&ns.name, &promoted.pod).await?;
    healed(&client, &ns.name, &[&promoted.name], t).await?;
    for round in ["a", "b", "c", "d", "e"] {
        ensure!(
            missing(&client, &ns.name, round).await? == 0,
            "round {round}: confirmed keys lost"
        );
    }

    // The writer's own writes are acknowledged by the primary alone (asynchronous
    // replication): the last ones before a kill may not have reached the replica.
    let report = writer
        .finish_counting_losses(&client, &ns.name, NAME)
        .await?;
    println!(
        "writer: {} acknowledged, {} lost (unconfirmed writes in flight at a kill), longest pause {:?}",
        report.acknowledged.len(),
        report.lost.len(),
        report.longest_pause
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(NAME, &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

/// The pod `name` and its IP.
async fn pod_and_ip(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
) -> anyhow::Result<(k8s_openapi::api::core::v1::Pod, String)> {
    let pod = pods.get(name).await?;
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .with_context(|| format!("{name}'s pod IP"))?;
    Ok((pod, ip))
}

/// Writes `value_len`-byte values (`SET fill:<n>`) to the member at `ip` as the app user, up
/// to `attempts` keys (keys of slots it does not own are answered `MOVED` and skipped), until
/// one is refused. Returns how many were accepted and the refusal (or the last reply).
async fn fill_until_refused(
    ip: &str,
    value_len: usize,
    attempts: usize,
) -> anyhow::Result<(usize, String)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let conn = tokio::net::TcpStream::connect((ip, 6379)).await?;
    let (read, mut write) = conn.into_split();
    let mut replies = BufReader::new(read).lines();
    let password = valkey_e2e::workload::PASSWORD;
    write
        .write_all(format!("AUTH app {password}\r\n").as_bytes())
        .await?;
    let auth = replies.next_line().await?.unwrap_or_default();
    ensure!(auth == "+OK", "AUTH as app: {auth}");
    let value = vec![b'x'; value_len];
    let mut accepted = 0;
    let mut last = String::new();
    for n in 0..attempts {
        let key = format!("fill:{n}");
        let mut command = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_len}\r\n",
            key.len()
        )
        .into_bytes();
        command.extend_from_slice(&value);
        command.extend_from_slice(b"\r\n");
        write.write_all(&command).await?;
        last = replies.next_line().await?.unwrap_or_default();
        match last.as_str() {
            "+OK" => accepted += 1,
            moved if moved.starts_with("-MOVED") => {}
            _ => break,
        }
    }
    Ok((accepted, last))
}

#[tokio::test]
async fn oom_killed_primary_loses_no_confirmed_write() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    const OOM: &str = "oom";
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-safe-oom").await?;
    // Members' containers are limited to the config's 256Mi (workload::config).
    let menu = active_cluster(&client, &ns.name, OOM, "9.0.0", (2, 1)).await?;
    valkey_e2e::workload::write_confirmed(&client, &ns.name, OOM, "oom", KEYS).await?;
    let primary = safety::members_with(&client, &ns.name, OOM, NodeRole::Primary).await?[0].clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let (_, ip) = pod_and_ip(&pods, &primary.pod).await?;
    let t = Instant::now();
    // 400 MB, well past the 256Mi limit and within Valkey's 512 MB proto-max-bulk-len.
    let sent = valkey_e2e::workload::oversized_set(&ip, 400 << 20).await?;
    println!(
        "connection to {} broke after {} MiB of the value",
        primary.pod,
        sent >> 20
    );
    let reason = valkey_e2e::harness::wait_for(
        "the kubelet to report the primary's valkey-server OOMKilled",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let (pods, name) = (pods.clone(), primary.pod.clone());
            async move {
                let pod = pods.get_opt(&name).await?.context("the primary's pod")?;
                match valkey_e2e::real_node::termination(&pod, "valkey") {
                    Some((reason, _)) if reason == "OOMKilled" => Ok(Some(reason)),
                    other => anyhow::bail!("{name}: last termination {other:?}"),
                }
            }
        },
    )
    .await?;
    println!("{}: {reason} after {:?}", primary.pod, t.elapsed());
    safety::healed(&client, &ns.name, OOM, SHAPE, &[&primary.name], t).await?;
    let missing =
        valkey_e2e::workload::missing_confirmed(&client, &ns.name, OOM, "oom", KEYS).await?;
    ensure!(missing == 0, "the OOM kill lost {missing} confirmed key(s)");

    // The config sets no maxmemory: the operator derived 3/4 of the 256Mi limit, so a
    // primary filled with ordinary writes refuses them and keeps running.
    let primary = safety::members_with(&client, &ns.name, OOM, NodeRole::Primary).await?[0].clone();
    let (pod, ip) = pod_and_ip(&pods, &primary.pod).await?;
    let driver = valkey_e2e::valkey::operator_driver(&client, &ns.name, OOM).await?;
    let addr = valkey_operator::driver::MemberAddr::new(ip.clone(), 6379);
    let maxmemory = driver.config_get(&addr, "maxmemory").await?;
    ensure!(
        maxmemory == [("maxmemory".to_string(), (192u64 << 20).to_string())],
        "derived maxmemory of a 256Mi member: {maxmemory:?}"
    );
    let restarts = |pod: &Pod| -> i32 {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |c| c.iter().map(|c| c.restart_count).sum())
    };
    let before = restarts(&pod);
    let (accepted, refusal) = fill_until_refused(&ip, 1 << 20, 600).await?;
    println!("{}: {accepted} MiB accepted, then {refusal:?}", primary.pod);
    ensure!(
        refusal.starts_with("-OOM"),
        "a full member refuses writes: {refusal}"
    );
    let pod = pods.get(&primary.pod).await?;
    ensure!(
        restarts(&pod) == before && valkey_e2e::real_node::termination(&pod, "valkey").is_none(),
        "the filled primary kept running: {:?}",
        pod.status
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(OOM, &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

/// Members' keys that sit in slots their shard does not own (`CLUSTER COUNTKEYSINSLOT` on
/// every slot a member's shard does not serve), as `(member, slot, keys)`.
async fn stranded_keys(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, u16, i64)>> {
    use fred::types::Value;
    use futures::future::try_join_all;
    use valkey_operator::driver::ClusterDriver;
    use valkey_operator::driver::slots::SLOT_COUNT;
    let driver = valkey_e2e::valkey::operator_driver(client, ns, name).await?;
    let mut stranded = Vec::new();
    let pods = valkey_e2e::valkey::member_pods(client, ns, name).await?;
    for addr in valkey_e2e::valkey::serving_addrs(&pods) {
        let nodes = driver.cluster_nodes(&addr).await?;
        let me = nodes.iter().find(|n| n.flags.myself).context("myself")?;
        let owner = match &me.primary_id {
            Some(p) => nodes.iter().find(|n| &n.id == p).context("primary")?,
            None => me,
        };
        let foreign: Vec<u16> = (0..SLOT_COUNT)
            .filter(|s| !owner.slots.iter().any(|r| r.contains(s)))
            .collect();
        for chunk in foreign.chunks(1024) {
            let counts = try_join_all(chunk.iter().map(|slot| {
                driver.command(
                    &addr,
                    "CLUSTER COUNTKEYSINSLOT",
                    vec![
                        Value::from("CLUSTER"),
                        Value::from("COUNTKEYSINSLOT"),
                        Value::from(i64::from(*slot)),
                    ],
                )
            }))
            .await?;
            for (slot, reply) in chunk.iter().zip(counts) {
                let keys = reply.as_int().unwrap_or(0);
                if keys != 0 {
                    stranded.push((addr.to_string(), *slot, keys));
                }
            }
        }
    }
    Ok(stranded)
}

#[tokio::test]
async fn source_primary_killed_mid_key_by_key_move_loses_nothing() -> anyhow::Result<()> {
    const MOVED: &str = "moved";
    const MOVED_KEYS: usize = 30_000;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-safe-move").await?;
    let menu = valkey_e2e::workload::Menu::publish(&client, "e2e-safe-move", "9.1.2").await?;
    let keyed = |shards: i32| {
        let mut c = valkey_e2e::workload::cluster(&ns.name, MOVED, &menu.config, shards, 1);
        c["metadata"]["annotations"] =
            serde_json::json!({"valkey.gomomento.com/slot-migration": "keys"});
        c
    };
    valkey_e2e::workload::apply(&client, &ns.name, keyed(2)).await?;
    valkey_e2e::valkey::wait_state(
        &client,
        &ns.name,
        MOVED,
        valkey_operator::api::ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    valkey_e2e::workload::write_confirmed(&client, &ns.name, MOVED, "move", MOVED_KEYS).await?;
    let writer = Writer::start(&client, &ns.name, MOVED).await?;

    let started = Instant::now();
    valkey_e2e::workload::apply(&client, &ns.name, keyed(3)).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let driver = valkey_e2e::valkey::operator_driver(&client, &ns.name, MOVED).await?;
    let killed = valkey_e2e::harness::wait_for(
        "a source primary exporting slots",
        Duration::from_secs(240),
        Duration::from_millis(100),
        || {
            let (api, client, ns, driver) = (api.clone(), client.clone(), ns.name.clone(), &driver);
            async move {
                use valkey_operator::driver::{ClusterDriver, MemberAddr};
                let status = api.get(MOVED).await?.status.unwrap_or_default();
                let message = status.message.unwrap_or_default();
                for pod in valkey_e2e::valkey::member_pods(&client, &ns, MOVED).await? {
                    let name = kube::ResourceExt::name_any(&pod);
                    let Some(ip) = pod.status.and_then(|s| s.pod_ip) else {
                        continue;
                    };
                    let nodes = driver.cluster_nodes(&MemberAddr::new(ip, 6379)).await?;
                    let exporting = nodes
                        .iter()
                        .any(|n| n.flags.myself && !n.migrating.is_empty());
                    let member = status
                        .nodes
                        .iter()
                        .find(|n| n.pod.as_deref() == Some(&name));
                    if let (true, Some(member)) = (exporting, member) {
                        kill(&ns, &name).await?;
                        println!("killed exporting primary {} while: {message}", member.name);
                        return Ok(Some(member.name.clone()));
                    }
                }
                anyhow::bail!("no primary exporting yet: {message}")
            }
        },
    )
    .await?;
    safety::healed(
        &client,
        &ns.name,
        MOVED,
        Shape {
            primaries: 3,
            members: 6,
        },
        &[&killed],
        started,
    )
    .await?;
    println!(
        "key-by-key scale-out 2 -> 3 with the source primary killed took {:?}",
        started.elapsed()
    );
    let missing =
        valkey_e2e::workload::missing_confirmed(&client, &ns.name, MOVED, "move", MOVED_KEYS)
            .await?;
    ensure!(missing == 0, "{missing} confirmed key(s) lost");
    let stranded = stranded_keys(&client, &ns.name, MOVED).await?;
    ensure!(
        stranded.is_empty(),
        "keys in slots their member does not own: {stranded:?}"
    );
    let report = writer
        .finish_counting_losses(&client, &ns.name, MOVED)
        .await?;
    println!(
        "writer: {} acknowledged, {} lost (unconfirmed writes in flight at the kill)",
        report.acknowledged.len(),
        report.lost.len()
    );
    api.delete(MOVED, &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}
