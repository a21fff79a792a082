//! Data safety with the menu's default settings (no `appendonly`): a member whose Valkey
//! process dies is never restarted under its old identity (its replicas would copy the empty
//! dataset it comes back with); its replica is promoted at once and a new member replaces it.
//! 3,000 keys are written and confirmed on the replicas (replication offsets equal) before
//! each fault, the verifying writer runs throughout, and every confirmed key must survive:
//! SIGKILL of a primary, of a replica, of two primaries within 10 s, and of a primary and then
//! of the replica that replaced it. (The same with `appendonly yes`, where members do restart
//! in place: e2e/tests/failures.rs.)
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kube::{Api, Client};

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::workload::{Writer, active_cluster};
use valkey_operator::api::{ClusterState, NodeRole, ValkeyCluster};

const NAME: &str = "safe";
const KEYS: usize = 3_000;

/// (member, pod, pod IP) of every member with `role`, by shard.
async fn members_with(
    client: &Client,
    ns: &str,
    role: NodeRole,
) -> anyhow::Result<Vec<(i32, String, String)>> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?;
    let mut out: Vec<(i32, String, String)> = c
        .status
        .context("status")?
        .nodes
        .into_iter()
        .filter(|n| n.role == Some(role))
        .filter_map(|n| Some((n.shard, n.name, n.pod?)))
        .collect();
    out.sort();
    Ok(out)
}

async fn write_confirmed(client: &Client, ns: &str, round: &str) -> anyhow::Result<()> {
    valkey_e2e::workload::write_confirmed(client, ns, NAME, &format!("safe:{round}"), KEYS).await
}

async fn missing(client: &Client, ns: &str, round: &str) -> anyhow::Result<usize> {
    valkey_e2e::workload::missing_confirmed(client, ns, NAME, &format!("safe:{round}"), KEYS).await
}

/// Waits for the cluster to notice, then for Active with every member replaced that `gone`
/// names, 2 primaries and 4 members.
async fn healed(client: &Client, ns: &str, gone: &[&str], since: Instant) -> anyhow::Result<()> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        "members replaced and the cluster Active",
        Duration::from_secs(300),
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let c = api.get(NAME).await?;
                let s = c.status.clone().unwrap_or_default();
                let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
                let primaries = s
                    .nodes
                    .iter()
                    .filter(|n| n.role == Some(NodeRole::Primary))
                    .count();
                if s.state == Some(ClusterState::Active)
                    && s.observed_generation == c.metadata.generation
                    && s.nodes.len() == 4
                    && primaries == 2
                    && gone.iter().all(|g| !names.contains(g))
                {
                    Ok(Some(()))
                } else {
                    bail!("{:?} {names:?}: {}", s.state, s.message.unwrap_or_default())
                }
            }
        },
    )
    .await?;
    println!(
        "healed ({gone:?} replaced) {:?} after the fault",
        since.elapsed()
    );
    Ok(())
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
    let (_, member, pod) = members_with(&client, &ns.name, NodeRole::Primary).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&member], t).await?;
    ensure!(
        missing(&client, &ns.name, "a").await? == 0,
        "primary SIGKILL lost confirmed keys"
    );

    // 2. A replica.
    write_confirmed(&client, &ns.name, "b").await?;
    let (_, member, pod) = members_with(&client, &ns.name, NodeRole::Replica).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&member], t).await?;
    ensure!(
        missing(&client, &ns.name, "b").await? == 0,
        "replica SIGKILL lost confirmed keys"
    );

    // 3. Both primaries, the second within 10 s of the first.
    write_confirmed(&client, &ns.name, "c").await?;
    let primaries = members_with(&client, &ns.name, NodeRole::Primary).await?;
    let t = Instant::now();
    kill(&ns.name, &primaries[0].2).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    kill(&ns.name, &primaries[1].2).await?;
    healed(&client, &ns.name, &[&primaries[0].1, &primaries[1].1], t).await?;
    ensure!(
        missing(&client, &ns.name, "c").await? == 0,
        "two primary SIGKILLs lost confirmed keys"
    );

    // 4. A primary, then the replica that replaced it once the shard has a copy again.
    write_confirmed(&client, &ns.name, "d").await?;
    let (shard, member, pod) = members_with(&client, &ns.name, NodeRole::Primary).await?[0].clone();
    let t = Instant::now();
    kill(&ns.name, &pod).await?;
    healed(&client, &ns.name, &[&member], t).await?;
    let promoted = members_with(&client, &ns.name, NodeRole::Primary)
        .await?
        .into_iter()
        .find(|(s, _, _)| *s == shard)
        .context("shard has a primary")?;
    write_confirmed(&client, &ns.name, "e").await?;
    let t = Instant::now();
    kill(&ns.name, &promoted.2).await?;
    healed(&client, &ns.name, &[&promoted.1], t).await?;
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
