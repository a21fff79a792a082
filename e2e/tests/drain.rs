//! `kubectl drain` of every node in turn, as a platform team does node maintenance, while the
//! verifying writer writes to a 3 x 1 cluster on the menu's default settings (no
//! `appendonly`). Evictions go through the PodDisruptionBudget (no `--disable-eviction`): one
//! member at a time, each replaced before the next may go. Every drain completes, the cluster
//! is Active after each, no acknowledged write is lost, and no node is left cordoned.
//! The second case drains one node under a durable cluster (volumes bound to that node): its
//! members cannot come back there, so the operator replaces them from their replicas (new
//! members, new volumes elsewhere), the drain completes and the old claims go.
//! Runs alone (`make e2e`'s serial group): a drain evicts every suite's pods.
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::ListParams;

use valkey_e2e::harness::{TestNamespace, client, kubectl, kubectl_run, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{Writer, active_cluster};
use valkey_operator::api::{ClusterState, NodeRole};

const NAME: &str = "drained";

/// Uncordons every node when dropped, pass or fail.
struct Uncordon(Vec<String>);

impl Drop for Uncordon {
    fn drop(&mut self) {
        for node in &self.0 {
            let _ = kubectl().args(["uncordon", node]).output();
        }
    }
}

/// `kubectl drain` of `node` through the PodDisruptionBudgets; how long it took.
async fn drain(node: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    // On a blocking thread: the writer shares this test's runtime and must keep writing.
    let drained_node = node.to_string();
    let out = tokio::task::spawn_blocking(move || {
        kubectl()
            .args([
                "drain",
                &drained_node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                // Leftover bare pods of other suites would refuse the drain; PDBs still hold.
                "--force",
                "--timeout=600s",
            ])
            .output()
    })
    .await?
    .context("kubectl drain")?;
    ensure!(
        out.status.success(),
        "kubectl drain {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(t.elapsed())
}

/// Waits until cluster NAME is Active with 6 members, 3 primaries, every member's pod running
/// and none on `node` (right after a drain the status may still be the one from before its
/// last eviction).
async fn active_with_none_on(client: &kube::Client, ns: &str, node: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("6 members, 3 primaries, Active, none on {node}"),
        Duration::from_secs(300),
        Duration::from_secs(1),
        || async move {
            let c = wait_state(
                client,
                ns,
                NAME,
                ClusterState::Active,
                Duration::from_secs(300),
            )
            .await?;
            let members = c.status.context("status")?.nodes;
            let primaries = members
                .iter()
                .filter(|n| n.role == Some(NodeRole::Primary))
                .count();
            let pods = valkey_e2e::valkey::member_pods(client, ns, NAME).await?;
            let on_node = pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .count();
            if members.len() == 6 && primaries == 3 && on_node == 0 && pods.len() == 6 {
                Ok(Some(()))
            } else {
                bail!(
                    "{} members, {primaries} primaries, {} pods, {on_node} on the drained node",
                    members.len(),
                    pods.len()
                )
            }
        },
    )
    .await
}

#[tokio::test]
async fn draining_each_node_in_turn_loses_nothing_and_leaves_the_cluster_active()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-drain").await?;
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (3, 1)).await?;

    // The PDB works with ValkeyNode-owned pods: one disruption allowed.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns.name);
    wait_for(
        "the PodDisruptionBudget to allow one disruption",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || {
            let pdbs = pdbs.clone();
            async move {
                let status = pdbs.get(NAME).await?.status.unwrap_or_default();
                if status.disruptions_allowed == 1 && status.expected_pods == 6 {
                    Ok(Some(()))
                } else {
                    bail!("{status:?}")
                }
            }
        },
    )
    .await?;

    // The zoned nodes members run on (the real node is tainted for tests of images alone).
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("topology.kubernetes.io/zone"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    ensure!(nodes.len() >= 3, "three nodes to drain: {nodes:?}");
    let _uncordon = Uncordon(nodes.clone());

    // Keys confirmed on both copies of their shard before the first drain must all be there
    // after the last one; each drain also runs under its own verifying writer (a writer's
    // cluster client knows the members it started with, and three drains replace them all).
    valkey_e2e::workload::write_confirmed(&client, &ns.name, NAME, "drain", 3000).await?;
    for node in &nodes {
        let writer = Writer::start(&client, &ns.name, NAME).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t = Instant::now();
        let drained = drain(node).await?;
        active_with_none_on(&client, &ns.name, node).await?;
        println!(
            "drain {node}: {drained:?} (kubectl drain), Active with 6 members {:?} after it started",
            t.elapsed()
        );
        kubectl_run(&["uncordon", node])?;
        let report = writer.finish(&client, &ns.name, NAME).await?;
        println!(
            "drain {node}: {} acknowledged writes, 0 lost, longest pause {:?}",
            report.acknowledged.len(),
            report.longest_pause
        );
    }
    let missing =
        valkey_e2e::workload::missing_confirmed(&client, &ns.name, NAME, "drain", 3000).await?;
    ensure!(
        missing == 0,
        "{missing} of 3000 confirmed keys lost over the drains"
    );
    let cordoned = kubectl_run(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={.items[*].spec.unschedulable}",
    ])?;
    ensure!(
        !cordoned.contains("true"),
        "a node left cordoned: {cordoned}"
    );
    Api::<valkey_operator::api::ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(NAME, &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

#[tokio::test]
async fn draining_a_node_under_durable_members_replaces_them_and_completes() -> anyhow::Result<()> {
    use valkey_e2e::workload::active_cluster_on;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-drain-durable").await?;
    let menu = valkey_e2e::workload::Menu::publish_durable(&client, "e2e", "9.0.0").await?;
    active_cluster_on(&client, &ns.name, NAME, &menu.config, (3, 1)).await?;

    // The node with the most members (pods are named after their members).
    let mut by_node: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for pod in valkey_e2e::valkey::member_pods(&client, &ns.name, NAME).await? {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        by_node
            .entry(node.context("member pod not scheduled")?)
            .or_default()
            .push(pod.metadata.name.unwrap_or_default());
    }
    let (node, members) = by_node
        .into_iter()
        .max_by_key(|(_, m)| m.len())
        .context("no member pod")?;
    let _uncordon = Uncordon(vec![node.clone()]);
    println!("draining {node}, which holds durable members {members:?}");

    valkey_e2e::workload::write_confirmed(&client, &ns.name, NAME, "drain-durable", 3000).await?;
    let writer = Writer::start(&client, &ns.name, NAME).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = Instant::now();
    let drained = drain(&node).await?;
    active_with_none_on(&client, &ns.name, &node).await?;
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    valkey_e2e::safety::replaced(&client, &ns.name, NAME, &members, Duration::from_secs(60))
        .await?;
    valkey_e2e::valkey::claims_gone(&client, &ns.name, &members).await?;
    println!(
        "drain of {node} under durable members: {drained:?} (kubectl drain), {members:?} replaced and Active {:?} after it started",
        t.elapsed()
    );
    kubectl_run(&["uncordon", &node])?;
    let report = writer.finish(&client, &ns.name, NAME).await?;
    let missing =
        valkey_e2e::workload::missing_confirmed(&client, &ns.name, NAME, "drain-durable", 3000)
            .await?;
    println!(
        "drain under durable members: {} acknowledged writes, 0 lost, longest pause {:?}; {missing} of 3000 confirmed keys missing",
        report.acknowledged.len(),
        report.longest_pause
    );
    ensure!(
        missing == 0,
        "{missing} of 3000 confirmed keys lost in the drain"
    );
    Api::<valkey_operator::api::ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(NAME, &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}
