//! Shared steps of the data-safety suites: who holds which role, and "the lost members were
//! replaced and the cluster is Active again".

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::{Api, Client};

use valkey_operator::api::{ClusterState, NodeRole, ValkeyCluster};

use crate::valkey::wait_cluster;

/// A member as the cluster's status lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub shard: i32,
    /// The ValkeyNode's name.
    pub name: String,
    pub pod: String,
}

/// Every member of cluster `name` with `role`, by shard.
pub async fn members_with(
    client: &Client,
    ns: &str,
    name: &str,
    role: NodeRole,
) -> anyhow::Result<Vec<Member>> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let mut out: Vec<Member> = c
        .status
        .context("status")?
        .nodes
        .into_iter()
        .filter(|n| n.role == Some(role))
        .filter_map(|n| {
            Some(Member {
                shard: n.shard,
                name: n.name,
                pod: n.pod?,
            })
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The cluster's shape once healed.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub primaries: usize,
    pub members: usize,
}

impl Shape {
    /// `shards` shards of one replica each.
    pub fn one_replica(shards: usize) -> Shape {
        Shape {
            primaries: shards,
            members: shards * 2,
        }
    }
}

/// [`healed`] into `shards` x 1, timed from now.
pub async fn settled(
    client: &Client,
    ns: &str,
    name: &str,
    shards: usize,
    gone: &[&str],
) -> anyhow::Result<()> {
    healed(
        client,
        ns,
        name,
        Shape::one_replica(shards),
        gone,
        Instant::now(),
    )
    .await?;
    Ok(())
}

/// Waits until no member `gone` names is in the cluster any more and the cluster is Active
/// with `shape`; prints how long that took since `since` and returns it.
pub async fn healed(
    client: &Client,
    ns: &str,
    name: &str,
    shape: Shape,
    gone: &[&str],
    since: Instant,
) -> anyhow::Result<Duration> {
    let what = "members replaced and the cluster Active";
    wait_cluster(client, ns, name, what, Duration::from_secs(300), |c| {
        let s = c.status.clone().unwrap_or_default();
        let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        let primaries = s
            .nodes
            .iter()
            .filter(|n| n.role == Some(NodeRole::Primary))
            .count();
        if s.state == Some(ClusterState::Active)
            && s.observed_generation == c.metadata.generation
            && s.nodes.len() == shape.members
            && primaries == shape.primaries
            && gone.iter().all(|g| !names.contains(g))
        {
            Ok(())
        } else {
            bail!("{:?} {names:?}: {}", s.state, s.message.unwrap_or_default())
        }
    })
    .await?;
    let took = since.elapsed();
    println!("healed ({gone:?} replaced) {took:?} after the fault");
    Ok(took)
}

/// Waits until no member `gone` names is in the cluster's status any more (replaced), whatever
/// the state of the rest.
pub async fn replaced(
    client: &Client,
    ns: &str,
    name: &str,
    gone: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_cluster(client, ns, name, "members replaced", timeout, |c| {
        let s = c.status.unwrap_or_default();
        let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        if gone.iter().all(|g| !names.contains(g)) {
            Ok(())
        } else {
            bail!("{:?} {names:?}: {}", s.state, s.message.unwrap_or_default())
        }
    })
    .await
}
