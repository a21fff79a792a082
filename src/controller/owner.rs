//! Owner references for the objects both build steps create: the reference is what deletes a
//! member's ConfigMap and Pod with its ValkeyNode, and a cluster's Services, PDB, Secrets and
//! ValkeyNodes with its ValkeyCluster, so nothing is ever built without one. And the ownership
//! rule every write of the operator follows ([`apply_as`]): an object of the same name that
//! the owner did not create is never written over.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;

use crate::controller::{CLUSTER_MANAGER, Context, Error};

/// Why an object cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Every object read from the API server has a uid; one built by hand may not.
    #[error(
        "{kind} {namespace}/{name} has no metadata.uid, so the objects it owns cannot name it as their owner; only a {kind} read from the API server can be built (this is a bug in the caller)"
    )]
    NoUid {
        kind: String,
        namespace: String,
        name: String,
    },
}

/// A reconcile that cannot build its objects fails as `invalid` (and is retried).
impl From<BuildError> for super::Error {
    fn from(e: BuildError) -> Self {
        super::Error::Invalid(e.to_string())
    }
}

/// The controller owner reference naming `owner`; an error when it has no uid.
pub fn controller_owner<K: Resource<DynamicType = ()>>(
    owner: &K,
) -> Result<OwnerReference, BuildError> {
    owner
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid {
            kind: K::kind(&()).into_owned(),
            namespace: owner.namespace().unwrap_or_default(),
            name: owner.name_any(),
        })
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

    /// The mocked API server sees the ownership rule: a GET, then a forced server-side apply
    /// under the given field manager carrying the owner reference.
    #[tokio::test]
    async fn apply_as_reads_then_applies_under_its_field_manager() {
        let (ctx, mut server) = crate::controller::testing::context();
        let owned = service(Some(("uid-1", true)));
        let step = tokio::spawn(async move { apply_as(&ctx, "team", owned, "valkey-node").await });
        let get = server.next().await;
        assert_eq!(get.route(), "GET /api/v1/namespaces/team/services/taken");
        get.not_found();
        let apply = server.next().await;
        assert_eq!(
            apply.route(),
            "PATCH /api/v1/namespaces/team/services/taken"
        );
        assert_eq!(apply.query("fieldManager").as_deref(), Some("valkey-node"));
        assert_eq!(apply.query("force").as_deref(), Some("true"));
        assert_eq!(apply.body["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        apply.echo();
        step.await.unwrap().unwrap();
        assert!(server.idle(), "one read, one apply, nothing else");
    }

    #[tokio::test]
    async fn apply_as_writes_nothing_over_an_object_its_owner_did_not_create() {
        let (ctx, mut server) = crate::controller::testing::context();
        let owned = service(Some(("uid-1", true)));
        let step = tokio::spawn(async move { apply_as(&ctx, "team", owned, "valkey-node").await });
        let get = server.next().await;
        let tenants = serde_json::to_value(service(Some(("uid-2", true)))).unwrap();
        get.respond(http::StatusCode::OK, tenants);
        let err = step.await.unwrap().unwrap_err();
        assert_eq!(err.metric_label(), "name_taken");
        assert!(server.idle(), "no write after the refusal");
    }
}
