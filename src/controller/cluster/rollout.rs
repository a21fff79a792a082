//! Plan step's bookkeeping for rolling replacements: the per-cluster rollout gauge, and the
//! `maxConcurrentRollouts` gate that keeps many clusters from replacing members at once.

use std::ops::ControlFlow;
use std::time::Duration;

use kube::runtime::controller::Action;

use super::status;
use crate::api::ValkeyCluster;
use crate::controller::{Context, Error, object_key};
use crate::plan::{Change, Plan, Topology};

/// Records whether the cluster has outdated members (and frees its rollout slot once it has
/// none); a rolling-replacement step waits for a slot, saying so in the status.
#[tracing::instrument(name = "cluster.admit", skip_all)]
pub async fn admit(
    ctx: &Context,
    cluster: &ValkeyCluster,
    topology: &Topology,
    plan: &Plan,
) -> Result<ControlFlow<Action>, Error> {
    let key = object_key(cluster);
    let stale = topology.members.iter().any(|m| !m.current);
    ctx.metrics.rollout(&key, stale);
    if !stale {
        ctx.rollout_done(&key);
    }
    if plan.change == Change::RollingOut {
        let started = topology.members.iter().any(|m| m.current);
        if let Err(rolling) = ctx.admit_rollout(&key, started) {
            let waiting = status::waiting_for_rollout_slot(cluster, rolling);
            super::publish::cluster_status(ctx, cluster, waiting).await?;
            return Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(10))));
        }
    }
    Ok(ControlFlow::Continue(()))
}
