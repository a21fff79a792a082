//! Dereference and resolve steps: the menu (ValkeyConfig, ValkeyImage, ValkeyRole) and the
//! members come from the reflector stores, and [`resolve`] turns them into what the cluster
//! runs. Resolution is pure; only a broken reference is written, as a Blocked status.

use super::context::Resolved;
use std::ops::ControlFlow;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::info;

use super::context::ClusterContext;
use super::observed::cluster_nodes;
use super::{publish, status};
use crate::api::ValkeyCluster;
use crate::api::validation::check_member_count;
use crate::controller::{Error, object_key};
use crate::resolve::{
    ResolveError, merge_bindings, refuse_major_downgrade, resolve_config, resolve_roles,
};

/// Resolve step (pure over the menu): config chain, bindings, roles; never to an older major
/// version than a member runs (`running`). A spec asking for more members than a cluster may
/// have (the API server skipped CEL and the webhook) does not resolve: it is never planned.
pub fn resolve<'a>(
    cluster: &ValkeyCluster,
    menu: &impl crate::resolve::Menu,
    running: impl IntoIterator<Item = &'a str>,
) -> Result<Resolved, ResolveError> {
    check_member_count(cluster.target_shards(), cluster.spec.replicas_per_shard)
        .map_err(|problem| ResolveError::TooManyMembers { problem })?;
    let config = resolve_config(menu, &cluster.spec.config_ref)?;
    refuse_major_downgrade(&config, running)?;
    if let Some(problem) = crate::api::external::external_access_problem(
        cluster.spec.external_access.as_ref(),
        cluster.spec.tls.is_some(),
        &cluster.spec.config_ref,
        &config.external_access,
    ) {
        return Err(ResolveError::ExternalAccessNotAllowed { problem });
    }
    let bindings = merge_bindings(&config.acl, &cluster.spec.acl)?;
    let roles = resolve_roles(menu, &bindings)?;
    Ok(Resolved {
        config,
        acl_file_inputs: (bindings, roles),
    })
}

/// Resolves the cluster against the menu and the versions its members run; a broken
/// reference publishes Blocked (`ConfigResolved` false, naming the broken link) and stops the
/// pipeline until a menu change or a minute later.
#[tracing::instrument(name = "cluster.resolve", skip_all)]
pub async fn or_block(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
) -> Result<ControlFlow<Action, Resolved>, Error> {
    let ctx = &cctx.ctx;
    let namespace = cluster.namespace().unwrap_or_default();
    let members = cluster_nodes(&cctx.nodes, &namespace, &cluster.name_any());
    let running = members.iter().map(|n| n.spec.version.as_str());
    match resolve(cluster, &ctx.menu, running) {
        // The backup a new cluster's `spec.restoreFrom` names is a reference too: no member
        // starts while it cannot be restored.
        Ok(resolved) => Ok(match restore_source_or_blocked(cctx, cluster).await? {
            ControlFlow::Continue(()) => ControlFlow::Continue(resolved),
            ControlFlow::Break(requeue) => ControlFlow::Break(requeue),
        }),
        Err(err) => {
            info!(cluster = %object_key(cluster), reason = err.reason(), "blocked: {err}");
            let cause = super::conditions::Blocker {
                condition: "ConfigResolved",
                reason: err.reason(),
                message: &err.to_string(),
            };
            if matches!(err, ResolveError::TooManyMembers { .. }) {
                publish::cluster_status(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes))
                    .await?;
                return Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(60))));
            }
            // Blocked is not unmanaged: failures are still handled (see `blocked`).
            let requeue = super::blocked::keep_handling_failures(cctx, cluster, cause).await?;
            Ok(ControlFlow::Break(requeue))
        }
    }
}

/// Condition type of a cluster created with `spec.restoreFrom` whose backup cannot be restored.
pub const RESTORE_SOURCE_READY: &str = "RestoreSourceReady";

/// A cluster created with `spec.restoreFrom` starts no member while its backup cannot be
/// restored (missing, not Completed, another shard count, another namespace's without the
/// platform team's leave): it is Blocked with the reason, and nothing runs. Once members
/// exist (or the restore started) this no longer holds anything back.
pub async fn restore_source_or_blocked(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
) -> Result<std::ops::ControlFlow<Action, ()>, Error> {
    let Some(from) = &cluster.spec.restore_from else {
        return Ok(std::ops::ControlFlow::Continue(()));
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let started = cluster
        .status
        .as_ref()
        .and_then(|s| s.restore.as_ref())
        .is_some_and(|r| r.attempts.is_some());
    if started || !cluster_nodes(&cctx.nodes, &namespace, &cluster.name_any()).is_empty() {
        return Ok(std::ops::ControlFlow::Continue(()));
    }
    let (backup_namespace, backup_name) = crate::backup::restore::source_of(cluster, from);
    let (backup, location) =
        crate::backup::restore::find_source(&cctx.ctx.client, &backup_namespace, &backup_name)
            .await?;
    let problem = crate::backup::restore::source_problem(
        &namespace,
        cluster.spec.shards,
        (&backup_namespace, &backup_name),
        backup.as_ref(),
        location.as_ref(),
    );
    let Some(problem) = problem else {
        return Ok(std::ops::ControlFlow::Continue(()));
    };
    let message = format!("spec.restoreFrom: {problem}. No member starts until it can be restored");
    let cause = super::conditions::Blocker {
        condition: RESTORE_SOURCE_READY,
        reason: "BackupNotRestorable",
        message: &message,
    };
    publish::cluster_status(
        &cctx.ctx,
        cluster,
        status::blocked(cluster, cause, &cctx.nodes),
    )
    .await?;
    Ok(std::ops::ControlFlow::Break(Action::requeue(
        Duration::from_secs(30),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ValkeyClusterSpec;
    use crate::resolve::MenuMap;

    fn cluster(shards: i32, replicas_per_shard: i32) -> ValkeyCluster {
        ValkeyCluster::new(
            "c",
            ValkeyClusterSpec {
                config_ref: "standard".into(),
                shards,
                replicas_per_shard,
                acl: vec![],
                tls: None,
                placement: None,
                pod_annotations: Default::default(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        )
    }

    #[test]
    fn a_spec_with_more_than_1000_members_never_resolves() {
        let menu = MenuMap::default();
        let err = resolve(&cluster(500, 100_000), &menu, []).err().unwrap();
        assert_eq!(err.reason(), "TooManyMembers");
        assert!(
            err.to_string()
                .starts_with("a cluster has at most 1000 members"),
            "{err}"
        );
        // Within the bound, resolution goes on (to the missing config here).
        let err = resolve(&cluster(500, 1), &menu, []).err().unwrap();
        assert_eq!(err.reason(), "ConfigNotFound");
    }
}
