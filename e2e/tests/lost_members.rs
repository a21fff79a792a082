//! Members lost for good, the ways a platform team loses them: a pod evicted through the
//! PodDisruptionBudget, a pod deleted while its node is NotReady (it stays Terminating: no
//! kubelet confirms; that node held two of the three primaries, too many for Valkey to fail
//! over by itself), and a Node object deleted while its machine is down (the pod garbage
//! collector removes its pods). Each time the operator promotes the lost primary's replica and
//! replaces the member, on the menu's default settings (no `appendonly`), while the verifying
//! writer runs; every write confirmed on a replica before the fault survives.
//! The second case does the node deletion under a durable cluster (volumes bound to their node,
//! `local-path`): the recreated pods cannot be scheduled anywhere, so the operator replaces
//! those members from their replicas (new members, new volumes) and their claims go.
//! Runs alone (`make e2e`'s serial group): stopping and deleting a node touches every suite.
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{EvictParams, ListParams};
use kube::{Api, Client};

use fred::types::Value;
use valkey_e2e::faults;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::safety::{self, Member, Shape, healed, replaced};
use valkey_e2e::workload::{Writer, active_cluster, missing_confirmed, write_confirmed};
use valkey_operator::api::{NodeRole, ValkeyCluster};
use valkey_operator::driver::MemberAddr;

const NAME: &str = "lost";
const KEYS: usize = 3_000;
const SHAPE: Shape = Shape {
    primaries: 3,
    members: 6,
};

/// Starts the stopped nodes again when dropped, pass or fail.
struct StartNodes(Vec<String>);

impl Drop for StartNodes {
    fn drop(&mut self) {
        for node in &self.0 {
            let _ = faults::start_node(node);
        }
    }
}

async fn node_ready_is(client: &Client, node: &str, want: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        &format!("{node} Ready={want}"),
        Duration::from_secs(180),
        Duration::from_secs(1),
        || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get_opt(node).await?.context("node not registered")?;
                let r = faults::node_ready(&n);
                if r == want {
                    Ok(Some(()))
                } else {
                    bail!("Ready={r}")
                }
            }
        },
    )
    .await
}

/// The nodes the operator's pods run on: stopping one of them would stop the operator too.
async fn operator_nodes(client: &Client) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::all(client.clone());
    Ok(pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect())
}

async fn node_of(pods: &Api<Pod>, pod: &str) -> anyhow::Result<String> {
    pods.get(pod)
        .await?
        .spec
        .and_then(|s| s.node_name)
        .context("pod not scheduled")
}

/// A primary whose node does not run the operator, with that node. When every primary shares
/// the operator's node, a replica elsewhere takes over its shard first (`CLUSTER FAILOVER`).
async fn primary_off_the_operators_node(
    client: &Client,
    ns: &str,
) -> anyhow::Result<(Member, String)> {
    let avoid = operator_nodes(client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for m in safety::members_with(client, ns, NAME, NodeRole::Primary).await? {
        let node = node_of(&pods, &m.pod).await?;
        if !avoid.contains(&node) {
            return Ok((m, node));
        }
    }
    for m in safety::members_with(client, ns, NAME, NodeRole::Replica).await? {
        let node = node_of(&pods, &m.pod).await?;
        if avoid.contains(&node) {
            continue;
        }
        promote(client, ns, &m).await?;
        println!(
            "moved shard {}'s primary off the operator's node: {}",
            m.shard, m.name
        );
        return Ok((m, node));
    }
    bail!("every member shares a node with the operator ({avoid:?})")
}

/// Two primaries on one node the operator does not run on, with that node: on a node holding
/// members of two shards, those that are replicas are promoted (`CLUSTER FAILOVER`).
async fn two_primaries_on_one_node(
    client: &Client,
    ns: &str,
) -> anyhow::Result<(Vec<Member>, String)> {
    let avoid = operator_nodes(client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut by_node: BTreeMap<String, Vec<(Member, NodeRole)>> = BTreeMap::new();
    for role in [NodeRole::Primary, NodeRole::Replica] {
        for m in safety::members_with(client, ns, NAME, role).await? {
            let node = node_of(&pods, &m.pod).await?;
            by_node.entry(node).or_default().push((m, role));
        }
    }
    for (node, mut here) in by_node {
        if avoid.contains(&node) {
            continue;
        }
        // Primaries first, so a primary already there is kept; one member per shard.
        here.sort_by_key(|(_, role)| *role != NodeRole::Primary);
        let mut picked: Vec<(Member, NodeRole)> = Vec::new();
        for (m, role) in here {
            if picked.len() < 2 && picked.iter().all(|(p, _)| p.shard != m.shard) {
                picked.push((m, role));
            }
        }
        if picked.len() < 2 {
            continue;
        }
        for (m, role) in &picked {
            if *role == NodeRole::Replica {
                promote(client, ns, m).await?;
            }
        }
        let picked: Vec<Member> = picked.into_iter().map(|(m, _)| m).collect();
        println!(
            "{node} holds two primaries: {} (shard {}) and {} (shard {})",
            picked[0].name, picked[0].shard, picked[1].name, picked[1].shard
        );
        return Ok((picked, node));
    }
    bail!("no node besides the operator's ({avoid:?}) holds members of two shards")
}

/// `CLUSTER FAILOVER` on replica `m`, until the status shows it as its shard's primary.
async fn promote(client: &Client, ns: &str, m: &Member) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ip = pods
        .get(&m.pod)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .context("pod IP")?;
    let driver = valkey_e2e::valkey::operator_driver(client, ns, NAME).await?;
    driver
        .command(
            &MemberAddr::new(ip, 6379),
            "CLUSTER FAILOVER",
            vec![Value::from("CLUSTER"), Value::from("FAILOVER")],
        )
        .await?;
    wait_for(
        "the status to show the new primary",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let name = m.name.clone();
            async move {
                let primaries = safety::members_with(client, ns, NAME, NodeRole::Primary).await?;
                Ok(primaries.iter().any(|p| p.name == name).then_some(()))
            }
        },
    )
    .await
}

/// Every shard of the `silent` primaries has another member as its primary (the status keeps
/// a silent member's last role, so the old one is still listed as a primary too).
async fn promoted_elsewhere(client: &Client, ns: &str, silent: &[Member]) -> anyhow::Result<()> {
    wait_for(
        "replicas of the silent primaries promoted",
        Duration::from_secs(150),
        Duration::from_millis(500),
        || async move {
            let primaries = safety::members_with(client, ns, NAME, NodeRole::Primary).await?;
            let waiting: Vec<&str> = silent
                .iter()
                .filter(|s| {
                    !primaries
                        .iter()
                        .any(|p| p.shard == s.shard && p.name != s.name)
                })
                .map(|s| s.name.as_str())
                .collect();
            if waiting.is_empty() {
                Ok(Some(()))
            } else {
                bail!("no other primary yet for the shards of {waiting:?}")
            }
        },
    )
    .await
}

/// The members (ValkeyNode names) whose pods run on `node`.
async fn members_on(client: &Client, ns: &str, node: &str) -> anyhow::Result<Vec<String>> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for n in c.status.context("status")?.nodes {
        let Some(pod) = n.pod else { continue };
        let on = pods.get_opt(&pod).await?.and_then(|p| p.spec?.node_name);
        if on.as_deref() == Some(node) {
            out.push(n.name);
        }
    }
    Ok(out)
}

async fn confirm(client: &Client, ns: &str, round: &str) -> anyhow::Result<()> {
    write_confirmed(client, ns, NAME, &format!("lost:{round}"), KEYS).await
}

async fn none_missing(client: &Client, ns: &str, round: &str) -> anyhow::Result<()> {
    let missing = missing_confirmed(client, ns, NAME, &format!("lost:{round}"), KEYS).await?;
    ensure!(
        missing == 0,
        "round {round}: {missing} confirmed key(s) lost"
    );
    Ok(())
}

/// Round `round` of a node lost for good: keys confirmed, the machine of a node holding a
/// primary (not the operator's) stopped and its Node object deleted; its members must be
/// replaced (printed: how long after the deletion), then the machine boots and registers
/// again and the cluster heals with every confirmed key. Returns the members it held.
async fn lose_a_node(client: &Client, ns: &str, round: &str) -> anyhow::Result<Vec<String>> {
    confirm(client, ns, round).await?;
    let (_, node) = primary_off_the_operators_node(client, ns).await?;
    let lost = members_on(client, ns, &node).await?;
    let stopped = StartNodes(vec![node.clone()]);
    faults::stop_node(&node)?;
    Api::<Node>::all(client.clone())
        .delete(&node, &Default::default())
        .await?;
    let t = Instant::now();
    let names: Vec<&str> = lost.iter().map(String::as_str).collect();
    replaced(client, ns, NAME, &names, Duration::from_secs(300)).await?;
    println!(
        "{round}: {names:?} (on deleted node {node}) replaced {:?} after the deletion",
        t.elapsed()
    );
    // The machine comes back (boots: its kubelet starts again and registers the Node anew).
    faults::reboot_node(&node)?;
    drop(stopped);
    node_ready_is(client, &node, "True").await?;
    healed(client, ns, NAME, SHAPE, &names, t).await?;
    none_missing(client, ns, round).await?;
    Ok(lost)
}

#[tokio::test]
async fn members_evicted_stranded_or_on_a_deleted_node_are_replaced_without_loss()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-lost").await?;
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (3, 1)).await?;
    let writer = Writer::start(&client, &ns.name, NAME).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    // 1. Evicted through the PodDisruptionBudget (what `kubectl drain` does, one pod).
    confirm(&client, &ns.name, "evicted").await?;
    let (primary, _) = primary_off_the_operators_node(&client, &ns.name).await?;
    let t = Instant::now();
    pods.evict(&primary.pod, &EvictParams::default()).await?;
    println!(
        "evicted {} (primary of shard {})",
        primary.pod, primary.shard
    );
    healed(&client, &ns.name, NAME, SHAPE, &[&primary.name], t).await?;
    none_missing(&client, &ns.name, "evicted").await?;

    // 2. A node down with two of the three primaries on it: too few primaries are left for
    //    Valkey to fail over, so the operator promotes their replicas once Kubernetes says the
    //    node is down. Then one of them is deleted while the node is down: the pod stays
    //    Terminating, nothing confirms it, and it is replaced.
    confirm(&client, &ns.name, "stranded").await?;
    let (silent, node) = two_primaries_on_one_node(&client, &ns.name).await?;
    let stopped = StartNodes(vec![node.clone()]);
    faults::stop_node(&node)?;
    let t = Instant::now();
    node_ready_is(&client, &node, "Unknown").await?;
    println!("{node} NotReady {:?} after it stopped", t.elapsed());
    promoted_elsewhere(&client, &ns.name, &silent).await?;
    println!(
        "shards {:?} have new primaries {:?} after their node stopped",
        silent.iter().map(|m| m.shard).collect::<Vec<_>>(),
        t.elapsed()
    );
    let primary = &silent[0];
    pods.delete(&primary.pod, &Default::default()).await?;
    let t = Instant::now();
    replaced(
        &client,
        &ns.name,
        NAME,
        &[&primary.name],
        Duration::from_secs(240),
    )
    .await?;
    println!(
        "{} (deleted on NotReady {node}) replaced {:?} after its deletion",
        primary.name,
        t.elapsed()
    );
    drop(stopped);
    node_ready_is(&client, &node, "True").await?;
    healed(&client, &ns.name, NAME, SHAPE, &[&primary.name], t).await?;
    none_missing(&client, &ns.name, "stranded").await?;

    // 3. The node object deleted while the machine is down: its pods are garbage-collected.
    lose_a_node(&client, &ns.name, "node-deleted").await?;
    for round in ["evicted", "stranded"] {
        none_missing(&client, &ns.name, round).await?;
    }

    let report = writer
        .finish_counting_losses(&client, &ns.name, NAME)
        .await?;
    println!(
        "writer: {} acknowledged, {} lost (unconfirmed writes in flight at a fault), longest pause {:?}",
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

#[tokio::test]
async fn durable_members_on_a_deleted_node_are_replaced_and_their_claims_removed()
-> anyhow::Result<()> {
    use valkey_e2e::workload::active_cluster_on;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-lost-durable").await?;
    let menu = valkey_e2e::workload::Menu::publish_durable(&client, "e2e", "9.0.0").await?;
    active_cluster_on(&client, &ns.name, NAME, &menu.config, (3, 1)).await?;
    // A volume on a deleted node is gone with it: what survives is what a replica holds, so
    // writes count once a replica confirms them (WAIT 1), as an application needing them to
    // survive a node's loss does. (A write only its primary held could be lost: seen once.)
    let writer = Writer::start_replicated(&client, &ns.name, NAME).await?;

    let lost = lose_a_node(&client, &ns.name, "durable-node").await?;
    let lost: Vec<&str> = lost.iter().map(String::as_str).collect();
    valkey_e2e::valkey::claims_gone(&client, &ns.name, &lost).await?;
    let report = writer.finish(&client, &ns.name, NAME).await?;
    println!(
        "durable node loss: writer {} acknowledged, 0 lost, longest pause {:?}",
        report.acknowledged.len(),
        report.longest_pause
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(NAME, &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}
