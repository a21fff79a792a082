//! Apply step: the cluster-wide objects [`super::build`] describes, server-side applied with a
//! stable field manager, and the ownership rule every write of the operator follows: an
//! object of the same name that this cluster did not create is never written over.

use std::ops::ControlFlow;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use tracing::warn;

use super::{ClusterContext, Resolved, build, credentials, status};
use crate::api::ValkeyCluster;
use crate::controller::{CLUSTER_MANAGER, Context, Error, object_key};
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
    let cause = status::Blocker {
        condition,
        reason,
        message: &message,
    };
    status::publish(ctx, cluster, status::blocked(cluster, cause, &cctx.nodes)).await?;
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
        || super::cluster_nodes(
            nodes,
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        )
        .iter()
        .any(|n| owned_by(n.as_ref(), cluster))
}

/// A namespaced object the operator creates and server-side applies.
pub trait Applied:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Applied for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Server-side apply of an object the cluster controller owns alone.
pub async fn apply<K: Applied>(ctx: &Context, namespace: &str, obj: K) -> Result<K, Error> {
    apply_as(ctx, namespace, obj, CLUSTER_MANAGER).await
}

/// Server-side apply as field manager `manager`, refusing (`Error::NameTaken`) when an object
/// of that name exists that `obj`'s controlling owner did not create.
pub async fn apply_as<K: Applied>(
    ctx: &Context,
    namespace: &str,
    obj: K,
    manager: &str,
) -> Result<K, Error> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let name = obj.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        ensure_ours(&existing, controller_uid(obj.meta()))?;
    }
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&obj),
        )
        .await?)
}

/// Refuses to write over `existing` unless this cluster (the controller owner `obj` names)
/// created it: the operator never adopts a tenant's object that happens to have the name.
pub fn ensure_ours<K: Resource<DynamicType = ()>>(
    existing: &K,
    obj_owner: Option<&str>,
) -> Result<(), Error> {
    let owner = controller_uid(existing.meta());
    if owner.is_some() && owner == obj_owner {
        return Ok(());
    }
    Err(Error::NameTaken {
        kind: kind_name::<K>(),
        namespace: existing.meta().namespace.clone().unwrap_or_default(),
        name: existing.meta().name.clone().unwrap_or_default(),
    })
}

/// Whether `obj` was created by `owner` (its controlling owner reference names it).
pub fn owned_by<K: Resource, O: Resource>(obj: &K, owner: &O) -> bool {
    owner.meta().uid.is_some() && controller_uid(obj.meta()) == owner.meta().uid.as_deref()
}

/// The uid of the object's controlling owner, if it has one.
pub fn controller_uid(meta: &kube::api::ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The kind a NameTaken error names (`Error::NameTaken` holds a `&'static str`).
fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Service" => "Service",
        "Secret" => "Secret",
        "ConfigMap" => "ConfigMap",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        "NetworkPolicy" => "NetworkPolicy",
        _ => "object",
    }
}

#[cfg(test)]
mod ownership_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn service(owner: Option<(&str, bool)>) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("taken".into());
        s.metadata.namespace = Some("team".into());
        s.metadata.owner_references = owner.map(|(uid, controller)| {
            vec![OwnerReference {
                uid: uid.into(),
                controller: Some(controller),
                ..Default::default()
            }]
        });
        s
    }

    #[test]
    fn only_objects_this_cluster_controls_are_written() {
        assert!(ensure_ours(&service(Some(("uid-1", true))), Some("uid-1")).is_ok());
        for foreign in [
            service(None),
            service(Some(("uid-2", true))),
            service(Some(("uid-1", false))),
        ] {
            let err = ensure_ours(&foreign, Some("uid-1")).unwrap_err();
            assert_eq!(err.metric_label(), "name_taken");
            assert!(
                err.to_string().starts_with(
                    "Service team/taken already exists and was not created by valkey-operator"
                ),
                "{err}"
            );
        }
        assert!(ensure_ours(&service(None), None).is_err());
    }

    #[test]
    fn a_pod_is_a_members_only_if_that_member_controls_it() {
        // Any owner kind will do: the ValkeyNode in the operator.
        let mut node = service(None);
        node.metadata.uid = Some("uid-1".into());
        assert!(owned_by(&service(Some(("uid-1", true))), &node));
        assert!(!owned_by(&service(Some(("uid-1", false))), &node));
        assert!(!owned_by(&service(Some(("uid-2", true))), &node));
        assert!(!owned_by(&service(None), &node));
        node.metadata.uid = None;
        assert!(!owned_by(&service(None), &node), "no uid owns nothing");
    }
}
