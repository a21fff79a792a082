//! Apply step: the cluster-wide objects [`super::build`] describes, server-side applied with a
//! stable field manager, under the ownership rule of [`crate::controller::owner::apply_as`].

use std::ops::ControlFlow;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::warn;

use super::context::ClusterContext;
use super::context::Resolved;
use super::{build, credentials, status};
use crate::api::ValkeyCluster;
use crate::controller::owner::{apply, owned_by};
use crate::controller::{Context, Error, object_key};
use crate::resolve::acl::{OperatorCredentials, render_acl_file_hashed};

/// Applies the cluster-wide objects; returns the operator's credentials and the rendered ACL
/// file. A name taken by an object that is not this cluster's publishes Blocked
/// (`ObjectsOwned` false) and stops the pipeline.
#[tracing::instrument(name = "cluster.apply", skip_all)]
pub async fn cluster_objects(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    resolved: &Resolved,
) -> Result<ControlFlow<Action, (OperatorCredentials, String)>, Error> {
    let ctx = &cctx.ctx;
    let formed = was_formed(cluster, &cctx.nodes);
    let err = match apply_cluster_objects(ctx, cluster, resolved, formed).await {
        Ok(applied) => return Ok(ControlFlow::Continue(applied)),
        Err(err) => err,
    };
    // The Secret's return is what unblocks CredentialsMissing: the operator does not watch its
    // own namespace's Secrets, so it looks again sooner.
    let (condition, reason, look_again) = match &err {
        Error::NameTaken { .. } => ("ObjectsOwned", "NameTaken", 30),
        Error::CredentialsMissing { .. } => ("CredentialsAvailable", "CredentialsMissing", 10),
        _ => return Err(err),
    };
    warn!(cluster = %object_key(cluster), "blocked: {err}");
    let message = err.to_string();
    let cause = super::conditions::Blocker {
        condition,
        reason,
        message: &message,
    };
    super::publish::cluster_status(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes))
        .await?;
    Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(
        look_again,
    ))))
}

/// The cluster-wide objects: operator credentials, ACL Secret, Services, PDB. Returns the
/// credentials and the rendered ACL file.
async fn apply_cluster_objects(
    ctx: &Context,
    cluster: &ValkeyCluster,
    resolved: &Resolved,
    formed: bool,
) -> Result<(OperatorCredentials, String), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let credentials = credentials::ensure_operator_secret(ctx, cluster, formed).await?;
    let (bindings, roles) = &resolved.acl_file_inputs;
    let metrics = resolved.config.metrics.as_ref();
    let users = credentials.hashes_of_users(cluster.restore_outstanding(), metrics.is_some());
    let acl_file = render_acl_file_hashed(bindings, roles, &users);
    apply(
        ctx,
        &namespace,
        build::acl_secret(cluster, &acl_file, &credentials, metrics.is_some())?,
    )
    .await?;
    apply(ctx, &namespace, build::headless_service(cluster)?).await?;
    apply(ctx, &namespace, build::client_service(cluster)?).await?;
    apply(ctx, &namespace, build::pdb(cluster)?).await?;
    let scrapers = metrics.map(|m| m.scrapers.as_slice()).unwrap_or_default();
    let policy = build::network_policy(
        cluster,
        &ctx.operator_namespace,
        ctx.settings.clients_from,
        scrapers,
    )?;
    apply(ctx, &namespace, policy).await?;
    Ok((credentials, acl_file))
}

/// Whether this cluster has members that may hold the operator's passwords: any ValkeyNode of
/// it, or a status that lists members (the store may not have them yet after a restart).
fn was_formed(
    cluster: &ValkeyCluster,
    nodes: &kube::runtime::reflector::Store<crate::api::ValkeyNode>,
) -> bool {
    let listed = cluster.status.as_ref().is_some_and(|s| !s.nodes.is_empty());
    // A member of an earlier cluster of the same name, still being collected, is not this
    // one's.
    listed
        || super::observed::cluster_nodes(
            nodes,
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        )
        .iter()
        .any(|n| owned_by(n.as_ref(), cluster))
}
