//! Failures of a primary on the local cluster, each under the continuous writer, on a 3 x 1
//! cluster whose config turns on `appendonly` (so a restarted process comes back with every
//! write it acknowledged): SIGKILL of the primary's process, SIGSTOP for 30 s, and the loss
//! of the primary's pod (a new pod is a new, empty Valkey node: the replica is promoted, the
//! member is replaced by a new ValkeyNode, the old node id is forgotten everywhere), and a
//! `kubectl delete pod` of the primary with its grace period (it hands over before it exits).
//! Each reports the longest write pause (time until writes are accepted again) and the
//! acknowledged writes lost.
#![cfg(feature = "e2e")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::json;

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, random_suffix, wait_for};
use valkey_e2e::valkey::{operator_driver, wait_state};
use valkey_e2e::workload::{Writer, WriterReport, apply, cluster, image};
use valkey_operator::api::{ClusterState, NodeRole, ValkeyCluster, ValkeyConfig, ValkeyImage};
use valkey_operator::driver::{ClusterDriver, MemberAddr};

const NAME: &str = "fail";

/// Shard 0's member in `role` and its pod, as the cluster status reports them.
async fn shard0_member(
    client: &Client,
    ns: &str,
    role: NodeRole,
) -> anyhow::Result<(String, String)> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?;
    let node = c
        .status
        .context("status")?
        .nodes
        .into_iter()
        .find(|n| n.shard == 0 && n.role == Some(role))
        .with_context(|| format!("shard 0 has a {role:?} in status"))?;
    Ok((node.name, node.pod.context("the member has a pod")?))
}

/// Shard 0's primary and its pod.
async fn shard0_primary(client: &Client, ns: &str) -> anyhow::Result<(String, String)> {
    shard0_member(client, ns, NodeRole::Primary).await
}

async fn active_with_full_count(
    client: &Client,
    ns: &str,
    what: &str,
    since: Instant,
) -> anyhow::Result<ValkeyCluster> {
    // Degraded (or Updating) first, then Active again for the same generation.
    let c = wait_state(
        client,
        ns,
        NAME,
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let nodes = &c.status.as_ref().context("status")?.nodes;
    assert_eq!(nodes.len(), 6, "full replica count after {what}: {nodes:?}");
    assert_eq!(
        nodes
            .iter()
            .filter(|n| n.role == Some(NodeRole::Primary))
            .count(),
        3,
        "three primaries after {what}"
    );
    println!(
        "{what}: Active with 6 members {:?} after the fault",
        since.elapsed()
    );
    Ok(c)
}

/// Stops the writer, counts its losses and prints what `what` cost it.
async fn finish(
    writer: Writer,
    client: &Client,
    ns: &str,
    what: &str,
) -> anyhow::Result<WriterReport> {
    let r = writer.finish_counting_losses(client, ns, NAME).await?;
    println!(
        "{what}: longest write pause {:?}, {} failed attempts, {} of {} acknowledged writes lost",
        r.longest_pause,
        r.failed_attempts,
        r.lost.len(),
        r.acknowledged.len()
    );
    Ok(r)
}

async fn wait_not_active(client: &Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the cluster to notice",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let api = api.clone();
            async move {
                let s = api.get(NAME).await?.status.unwrap_or_default();
                if s.state != Some(ClusterState::Active) {
                    println!("noticed: {:?}: {}", s.state, s.message.unwrap_or_default());
                    Ok(Some(()))
                } else {
                    bail!("still Active")
                }
            }
        },
    )
    .await
}

/// SIGKILL of shard 0's primary under a writer: Active with every member again, no
/// acknowledged write lost.
async fn a_killed_primary_restarts_and_loses_nothing(
    client: &Client,
    ns: &str,
) -> anyhow::Result<()> {
    let writer = Writer::start(client, ns, NAME).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, pod) = shard0_primary(client, ns).await?;
    let t = Instant::now();
    PodRef::find(ns, &pod)?.kill("valkey")?;
    println!("SIGKILL sent to {pod}'s valkey-server");
    tokio::time::sleep(Duration::from_secs(10)).await;
    active_with_full_count(client, ns, "SIGKILL", t).await?;
    let r = finish(writer, client, ns, "SIGKILL").await?;
    assert!(
        r.lost.is_empty(),
        "append-only members lose nothing to a process kill"
    );
    Ok(())
}

/// SIGSTOP of shard 0's primary for 30 s under a writer: the cluster notices, and is Active
/// with every member again once it is resumed.
async fn a_primary_paused_for_30s_heals(client: &Client, ns: &str) -> anyhow::Result<()> {
    let writer = Writer::start(client, ns, NAME).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, pod) = shard0_primary(client, ns).await?;
    let paused = PodRef::find(ns, &pod)?;
    let t = Instant::now();
    paused.pause("valkey")?;
    println!("SIGSTOP sent to {pod}'s valkey-server");
    wait_not_active(client, ns).await?;
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(t.elapsed())).await;
    paused.resume("valkey")?;
    active_with_full_count(client, ns, "SIGSTOP 30 s", t).await?;
    finish(writer, client, ns, "SIGSTOP 30 s").await?;
    Ok(())
}

/// Shard 0's primary pod deleted at once under a writer: its member is replaced by a new
/// ValkeyNode, and every member forgets the lost node id.
async fn a_lost_primary_pod_is_replaced_and_forgotten(
    client: &Client,
    ns: &str,
) -> anyhow::Result<()> {
    let writer = Writer::start(client, ns, NAME).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (member, pod) = shard0_primary(client, ns).await?;
    let driver = operator_driver(client, ns, NAME).await?;
    let before_ids: BTreeSet<String> = member_ids(client, ns, &driver).await?;
    let t = Instant::now();
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await?;
    println!("deleted pod {pod} (member {member})");
    wait_not_active(client, ns).await?;
    let c = active_with_full_count(client, ns, "pod loss", t).await?;
    finish(writer, client, ns, "pod loss").await?;
    let names: Vec<String> = c
        .status
        .unwrap()
        .nodes
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert!(
        !names.contains(&member),
        "{member} was replaced by a new ValkeyNode: {names:?}"
    );
    // Every member knows exactly the current members: the lost node id is forgotten.
    let after_ids = wait_for(
        "stale entries to be forgotten",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            let driver = &driver;
            async move {
                let ids = member_ids(client, ns, driver).await?;
                for addr in member_addrs(client, ns).await? {
                    let known: BTreeSet<String> = driver
                        .cluster_nodes(&addr)
                        .await?
                        .into_iter()
                        .map(|n| n.id.0)
                        .collect();
                    if known != ids {
                        bail!("{addr} knows {known:?}, members are {ids:?}");
                    }
                }
                Ok(Some(ids))
            }
        },
    )
    .await?;
    assert_eq!(after_ids.len(), 6);
    assert_eq!(
        before_ids.intersection(&after_ids).count(),
        5,
        "one node id replaced"
    );
    Ok(())
}

/// Shard 0's primary pod deleted with its grace period under a writer: its replica takes over
/// at its request, no acknowledged write lost.
async fn a_gracefully_deleted_primary_hands_over_losing_nothing(
    client: &Client,
    ns: &str,
) -> anyhow::Result<()> {
    let writer = Writer::start(client, ns, NAME).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (member, pod) = shard0_primary(client, ns).await?;
    let (_, replica_pod) = shard0_member(client, ns, NodeRole::Replica).await?;
    let t = Instant::now();
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&pod, &DeleteParams::default())
        .await?;
    println!("deleted pod {pod} (member {member}) with its default grace period");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let handed_over = wait_for(
        "the replica to take over at the primary's request",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let pods = pods.clone();
            let replica_pod = replica_pod.clone();
            async move {
                let log = pods.logs(&replica_pod, &Default::default()).await?;
                Ok(log
                    .lines()
                    .find(|l| l.contains("Forced failover primary request accepted"))
                    .map(str::to_string))
            }
        },
    )
    .await?;
    println!("{replica_pod} after {:?}: {handed_over}", t.elapsed());
    active_with_full_count(client, ns, "graceful pod deletion", t).await?;
    let r = finish(writer, client, ns, "graceful pod deletion").await?;
    assert!(
        r.lost.is_empty(),
        "a primary stopped gracefully hands over with every acknowledged write: {:?}",
        r.lost
    );
    Ok(())
}

#[tokio::test]
async fn a_primary_killed_paused_or_lost_heals_back_to_active() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-fail").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(
        &client,
        "config",
        json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig", "metadata": {"name": cfg},
               "spec": {"imageRef": img, "resources": {"cpu": "100m", "memory": "256Mi"},
                        "valkey": {"repl-diskless-sync-delay": "0", "appendonly": "yes",
                                   "cluster-node-timeout": "5000"}}}),
    )
    .await?;
    apply(&client, &ns.name, cluster(&ns.name, NAME, &cfg, 3, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;

    // 1. SIGKILL the primary's process: the kubelet restarts it at once, it reloads its
    //    append-only file and keeps its node id.
    a_killed_primary_restarts_and_loses_nothing(&client, &ns.name).await?;

    // 2. SIGSTOP the primary for 30 s: Valkey promotes its replica (node timeout 5 s); when
    //    it wakes up it rejoins as a replica.
    a_primary_paused_for_30s_heals(&client, &ns.name).await?;

    // 3. Lose the primary's pod: the new pod is an empty node with a new id. Its replica is
    //    promoted, the member replaced by a new ValkeyNode, the old id forgotten.
    a_lost_primary_pod_is_replaced_and_forgotten(&client, &ns.name).await?;

    // 4. `kubectl delete pod` of a primary with the default grace period: on SIGTERM the
    //    primary lets its replica catch up, hands it the slots and exits (shutdown-on-sigterm
    //    failover): no write waits for Valkey's failure detection, none is lost.
    a_gracefully_deleted_primary_hands_over_losing_nothing(&client, &ns.name).await?;

    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

async fn member_addrs(client: &Client, ns: &str) -> anyhow::Result<Vec<MemberAddr>> {
    Ok(valkey_e2e::valkey::member_pods(client, ns, NAME)
        .await?
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| MemberAddr::new(ip, 6379))
        .collect())
}

async fn member_ids(
    client: &Client,
    ns: &str,
    driver: &valkey_operator::driver::FredDriver,
) -> anyhow::Result<BTreeSet<String>> {
    let mut ids = BTreeSet::new();
    for addr in member_addrs(client, ns).await? {
        ids.insert(driver.my_id(&addr).await?.0);
    }
    Ok(ids)
}
