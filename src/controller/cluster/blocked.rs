//! Blocked is not unmanaged. A formed cluster whose menu reference broke (a ValkeyConfig,
//! ValkeyImage or ValkeyRole deleted or renamed) or whose TLS certificate Secret is missing,
//! invalid or expired keeps its failure handling: a dead primary's
//! replica is promoted and a lost member is replaced, with the spec its members already run
//! (the most common spec among them, read from their ValkeyNodes). What needs the broken
//! reference waits: no rollout (the members' spec is the desired one), no new ACL (the
//! members keep the ACL they loaded), no new certificate (the operator talks to the members
//! with the copy they serve, `<cluster>-member-tls`, verified as of its expiry once expired).
//! The status stays Blocked and says what was done.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::context::ClusterContext;
use super::observed::cluster_nodes;
use super::planning::plan_off_the_runtime;
use super::{act, build, credentials, observe, pods, publish, status, tls};
use crate::api::{ClusterState, ValkeyCluster, ValkeyNode, ValkeyNodeSpec};
use crate::controller::owner::owned_by;
use crate::controller::{Error, object_key};
use crate::plan::Plan;

/// The certificate step ([`tls::certificate`]) as the pipeline takes it: the members' TLS
/// (`None` for a plaintext cluster), or the requeue once an unusable certificate has blocked
/// the cluster, with failure handling carried on (a cluster still being created waits for its
/// Secret instead, then fails: [`super::creation::wait_for_certificate_or_fail`]).
pub async fn certificate_or_blocked(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
) -> Result<std::ops::ControlFlow<Action, Option<tls::ClusterTls>>, Error> {
    Ok(match tls::certificate(cctx, cluster).await? {
        tls::Certificate::Usable(tls) => std::ops::ControlFlow::Continue(tls),
        // Being created: waited for within the grace, then Failed (Momento v0.9).
        tls::Certificate::Unusable(blocker)
            if blocker.condition == tls::TLS_CERTIFICATE_VALID
                && super::creation::still_creating(cluster) =>
        {
            std::ops::ControlFlow::Break(
                super::creation::wait_for_certificate_or_fail(cctx, cluster, &blocker).await?,
            )
        }
        tls::Certificate::Unusable(blocker) => std::ops::ControlFlow::Break(
            keep_handling_failures(cctx, cluster, blocker.cause()).await?,
        ),
    })
}

/// Publishes the Blocked status `cause` describes and, for a formed cluster, carries on with
/// failure handling on the members' own spec; the requeue to return.
pub async fn keep_handling_failures(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    cause: super::conditions::Blocker<'_>,
) -> Result<Action, Error> {
    let ctx = &cctx.ctx;
    let calm = Action::requeue(Duration::from_secs(60));
    let members = cluster_nodes(
        &cctx.nodes,
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    let owned: Vec<Arc<ValkeyNode>> = members
        .into_iter()
        .filter(|n| owned_by(n.as_ref(), cluster))
        .collect();
    let Some(spec) = members_spec(&owned) else {
        // Nothing formed yet: nothing to keep running.
        publish::cluster_status(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes)).await?;
        return Ok(calm);
    };
    let plan = match repair(cctx, cluster, &owned, &spec).await? {
        Ok(plan) => plan,
        Err(why) => {
            let message = format!(
                "{}. Failures cannot be handled meanwhile: {why}",
                cause.message
            );
            let cause = super::conditions::Blocker {
                message: &message,
                ..cause
            };
            publish::cluster_status(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes))
                .await?;
            return Ok(calm);
        }
    };
    let meanwhile = meanwhile(&plan);
    let message = format!("{}{meanwhile}", cause.message);
    let cause = super::conditions::Blocker {
        message: &message,
        ..cause
    };
    publish::cluster_status(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes)).await?;
    Ok(
        if plan.steps.is_empty() && plan.state == ClusterState::Active {
            calm
        } else {
            Action::requeue(Duration::from_secs(2))
        },
    )
}

/// Observes, plans and acts as a reconcile does, with `spec` as the desired member spec; the
/// plan, or why the members cannot be reached at all (credentials missing, no usable
/// certificate).
async fn repair(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    members: &[Arc<ValkeyNode>],
    spec: &ValkeyNodeSpec,
) -> Result<Result<Plan, String>, Error> {
    let ctx = &cctx.ctx;
    let credentials = match credentials::ensure_operator_secret(ctx, cluster, true).await {
        Ok(credentials) => credentials,
        Err(err @ Error::CredentialsMissing { .. }) => return Ok(Err(err.to_string())),
        Err(e) => return Err(e),
    };
    let tls = match tls::certificate(cctx, cluster).await? {
        tls::Certificate::Usable(tls) => tls,
        tls::Certificate::Unusable(_) => match tls::members_copy(ctx, cluster).await? {
            Some(copy) => Some(copy),
            None => {
                return Ok(Err(format!(
                    "the members' own certificate copy {} is missing or unusable too",
                    crate::controller::names::tls_secret(&cluster.name_any())
                )));
            }
        },
    };
    let driver = ctx
        .driver(
            &object_key(cluster),
            &credentials.operator_password,
            tls.as_ref().map(|t| t.driver.clone()),
        )
        .await;
    let observed = observe::members(driver.as_ref(), members, cctx, spec).await;
    pods::sync(ctx, cluster, &observed, &cctx.pods).await;
    let mut topology = observe::topology(cluster, &observed);
    // The shape the cluster had when it last resolved: a scale asked for meanwhile waits too.
    let last_desired = cluster
        .status
        .as_ref()
        .and_then(|s| s.progress.as_ref())
        .map(|p| p.desired_members);
    (topology.shards, topology.replicas_per_shard) = present_shape(members, last_desired);
    let (_, plan) = plan_off_the_runtime(topology).await;
    let node_api: Api<ValkeyNode> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let actor = act::Actor::new(ctx, cluster, &node_api, driver.as_ref(), spec).naming(&observed);
    act::carry_out(&actor, &plan.steps).await?;
    publish::update_node_statuses(ctx, &node_api, &observed).await?;
    Ok(Ok(plan))
}

/// The spec most of the members run (shard and role hint cleared): what a replacement gets
/// while the menu cannot say; `None` without members.
pub fn members_spec(members: &[Arc<ValkeyNode>]) -> Option<ValkeyNodeSpec> {
    let mut counts: Vec<(String, usize, &ValkeyNodeSpec)> = Vec::new();
    for node in members {
        let hash = build::spec_hash(&node.spec);
        match counts.iter_mut().find(|(h, _, _)| *h == hash) {
            Some(entry) => entry.1 += 1,
            None => counts.push((hash, 1, &node.spec)),
        }
    }
    let (_, _, spec) = counts.into_iter().max_by_key(|(_, n, _)| *n)?;
    let mut spec = spec.clone();
    spec.shard = 0;
    spec.role_hint = None;
    Some(spec)
}

/// (shards, replicas per shard) while blocked: the shards the members belong to, and the
/// members per shard the cluster last resolved to (`last_desired` members in all), else as
/// many as the fullest shard has.
pub fn present_shape(members: &[Arc<ValkeyNode>], last_desired: Option<i32>) -> (usize, usize) {
    let shards = members
        .iter()
        .map(|n| usize::try_from(n.spec.shard).unwrap_or(0) + 1)
        .max()
        .unwrap_or(0);
    let fullest = (0..shards)
        .map(|s| {
            members
                .iter()
                .filter(|n| n.spec.shard as usize == s)
                .count()
        })
        .max()
        .unwrap_or(1);
    let per_shard = match last_desired.and_then(|d| usize::try_from(d).ok()) {
        Some(desired) if shards > 0 && desired % shards == 0 && desired >= shards => {
            desired / shards
        }
        _ => fullest.max(1),
    };
    (shards, per_shard - 1)
}

/// What failure handling is doing, for the Blocked message.
fn meanwhile(plan: &Plan) -> String {
    if plan.steps.is_empty() && plan.state == ClusterState::Active {
        String::new()
    } else {
        format!(
            ". Meanwhile failures are still handled with the members' current spec: {}",
            plan.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, shard: i32, image: &str) -> Arc<ValkeyNode> {
        let spec: ValkeyNodeSpec = serde_json::from_value(serde_json::json!({
            "clusterName": "c", "shard": shard, "configRef": "m", "imageRef": "i",
            "image": image, "version": "9.0.0", "resources": {}
        }))
        .unwrap();
        Arc::new(ValkeyNode::new(name, spec))
    }

    #[test]
    fn a_replacement_while_blocked_gets_the_spec_most_members_run() {
        let members = [
            node("c-0-0", 0, "valkey/valkey:9.0.0"),
            node("c-0-1", 0, "valkey/valkey:9.0.0"),
            node("c-1-0", 1, "valkey/valkey:9.0.0"),
            node("c-1-1", 1, "valkey/valkey:9.1.2"),
        ];
        let spec = members_spec(&members).unwrap();
        assert_eq!(spec.image, "valkey/valkey:9.0.0");
        assert_eq!(spec.shard, 0);
        assert_eq!(
            build::spec_hash(&spec),
            build::spec_hash(&members[2].spec),
            "replacements count as current: no rollout while blocked"
        );
        assert_eq!(members_spec(&[]), None);
    }

    #[test]
    fn the_shape_while_blocked_is_the_one_last_resolved_not_the_spec() {
        let members = [
            node("c-0-0", 0, "v"),
            node("c-0-1", 0, "v"),
            node("c-1-0", 1, "v"),
            // c-1-1 was lost and retired: its replacement is still owed.
        ];
        assert_eq!(present_shape(&members, Some(4)), (2, 1));
        // No figures to go by: the fullest shard.
        assert_eq!(present_shape(&members, None), (2, 1));
        assert_eq!(
            present_shape(&members, Some(7)),
            (2, 1),
            "not a whole shape"
        );
        assert_eq!(present_shape(&[], Some(4)), (0, 0));
    }
}
