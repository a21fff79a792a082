//! Before the pipeline: whether this reconcile may run it at all. A deleted cluster only has
//! memory to drop (and says Deleting while something holds it), a replica whose menu stores are still listing would resolve against an
//! empty menu, a replica that lost the lease must not write, and a paused cluster is left
//! alone.

use std::ops::ControlFlow;
use std::time::Duration;

use kube::Resource;
use kube::runtime::controller::Action;

use super::context::ClusterContext;
use super::status;
use crate::api::ValkeyCluster;
use crate::controller::{Context, Error, object_key};

/// `Continue` when the pipeline may run; otherwise when to look again.
#[tracing::instrument(name = "cluster.gate", skip_all)]
pub async fn may_proceed(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
) -> Result<ControlFlow<Action>, Error> {
    let ctx = &cctx.ctx;
    if cluster.meta().deletion_timestamp.is_some() {
        forget_deleted(ctx, cluster).await;
        cctx.sweeps.forget(cluster);
        // Held (foreground deletion, a finalizer): say so while it lasts. Only the leader
        // writes; the object may be gone already, which is what was asked.
        if ctx.confirm_leading().await.is_ok()
            && let Err(e) =
                super::publish::cluster_status(ctx, cluster, status::deleting(cluster)).await
        {
            tracing::debug!(cluster = %object_key(cluster), "Deleting status not written: {e}");
        }
        return Ok(ControlFlow::Break(Action::await_change()));
    }
    if !ctx.menu_synced.load(std::sync::atomic::Ordering::Acquire) {
        // The menu stores are still listing: resolving now would report false Blocked states.
        return Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(1))));
    }
    ctx.confirm_leading().await?;
    // Failed is terminal: delete and create again (the spec is frozen).
    if cluster.status.as_ref().and_then(|s| s.state) == Some(crate::api::ClusterState::Failed) {
        return Ok(ControlFlow::Break(Action::await_change()));
    }
    // Paused by annotation: say so and touch nothing until it goes (removing it is a change
    // that reconciles at once).
    if status::is_paused(cluster) {
        super::publish::cluster_status(ctx, cluster, status::paused(cluster)).await?;
        return Ok(ControlFlow::Break(Action::await_change()));
    }
    Ok(ControlFlow::Continue(()))
}

/// Owner references remove everything the cluster created; drop what memory holds.
async fn forget_deleted(ctx: &Context, cluster: &ValkeyCluster) {
    ctx.forget_driver(&object_key(cluster)).await;
    ctx.reconciled(&format!("cluster/{}", object_key(cluster)));
    ctx.metrics.rollout(&object_key(cluster), false);
}
