//! Apply step: the cluster-wide objects [`super::build`] describes, server-side applied with a
//! stable field manager, under the ownership rule of [`crate::controller::owner::apply_as`].

use std::fmt::Debug;
use std::ops::ControlFlow;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, ObjectMeta};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::context::ClusterContext;
use super::context::Resolved;
use super::sweeps::Sweep;
use super::{build, credentials, status};
use crate::api::ValkeyCluster;
use crate::api::constants::{LABEL_APP_COMPONENT, LABEL_APP_MANAGED_BY, LABEL_CLUSTER, MANAGER};
use crate::controller::owner::{apply, controller_uid, owned_by};
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
    let sweep = cctx.sweeps.due(cluster);
    let err = match apply_cluster_objects(ctx, cluster, resolved, (formed, sweep)).await {
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
    (formed, sweep): (bool, Option<Sweep<'_>>),
) -> Result<(OperatorCredentials, String), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let credentials = credentials::ensure_operator_secret(ctx, cluster, formed).await?;
    let (bindings, roles) = &resolved.acl_file_inputs;
    let metrics = resolved.config.metrics.as_ref();
    let users = credentials.hashes_of_users(cluster.restore_outstanding(), metrics.is_some());
    let acl_file = render_acl_file_hashed(bindings, roles, &users);
    let inputs = build::ObjectInputs {
        acl_file: &acl_file,
        credentials: &credentials,
        scrapers: metrics.map(|m| m.scrapers.as_slice()),
        operator_namespace: &ctx.operator_namespace,
        clients_from: ctx.settings.clients_from,
    };
    let objects = build::cluster_objects(cluster, &inputs)?;
    let keep = kept_names(&objects);
    apply_objects(ctx, &namespace, objects).await?;
    if let Some(sweep) = sweep {
        delete_strays(ctx, cluster, &keep).await?;
        sweep.done();
    }
    Ok((credentials, acl_file))
}

/// The names of the bundle's objects, by kind, for the kinds a stray of is deleted.
struct Kept {
    services: Vec<String>,
    pdbs: Vec<String>,
    network_policies: Vec<String>,
}

/// Destructured without `..`, as where applied: a new kind needs a decision here too.
fn kept_names(objects: &build::ClusterObjects) -> Kept {
    let build::ClusterObjects {
        // Never swept: the operator deletes no Secret in a cluster's namespace (its RBAC has
        // no such verb, docs/security.md); the ACL Secret's name has never changed.
        acl_secret: _,
        headless_service,
        client_service,
        pdb,
        network_policy,
    } = objects;
    let name = |meta: &ObjectMeta| meta.name.clone().unwrap_or_default();
    Kept {
        services: vec![
            name(&headless_service.metadata),
            name(&client_service.metadata),
        ],
        pdbs: vec![name(&pdb.metadata)],
        network_policies: vec![name(&network_policy.metadata)],
    }
}

/// Deletes what the operator made for this cluster and the bundle no longer holds (a name an
/// earlier version used, an object a setting no longer asks for): objects of the bundle's
/// kinds and components, labelled as this cluster's, whose controlling owner is this cluster.
/// Never one another owner (or nobody) controls, nor another kind: Secrets, retained volumes
/// and the members are not swept.
async fn delete_strays(ctx: &Context, cluster: &ValkeyCluster, keep: &Kept) -> Result<(), Error> {
    let labels = format!(
        "{LABEL_CLUSTER}={},{LABEL_APP_MANAGED_BY}={MANAGER}",
        cluster.name_any()
    );
    let with = |components: &str| format!("{labels},{LABEL_APP_COMPONENT} in ({components})");
    delete_strays_of::<Service>(ctx, cluster, &with("client,members"), &keep.services).await?;
    delete_strays_of::<PodDisruptionBudget>(ctx, cluster, &with("members"), &keep.pdbs).await?;
    let policies = &keep.network_policies;
    delete_strays_of::<NetworkPolicy>(ctx, cluster, &with("members"), policies).await
}

async fn delete_strays_of<K>(
    ctx: &Context,
    cluster: &ValkeyCluster,
    selector: &str,
    keep: &[String],
) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let uid = cluster.uid().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    for object in api.list(&ListParams::default().labels(selector)).await? {
        let Some(name) = stray(object.meta(), &uid, keep) else {
            continue;
        };
        let kind = K::kind(&());
        info!(cluster = %object_key(cluster), %kind, %name, "deleting an object the cluster no longer has");
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e.into()),
        }
        let note = format!("Deleted {kind} {name}: the cluster no longer has it");
        crate::controller::events::normal(ctx, cluster, "DeletedObject", &note).await;
    }
    Ok(())
}

/// The name of `meta`'s object when it is a stray of the cluster `uid`: controlled by it and
/// not one of the names kept.
fn stray(meta: &ObjectMeta, uid: &str, keep: &[String]) -> Option<String> {
    let name = meta.name.clone()?;
    (controller_uid(meta) == Some(uid) && !uid.is_empty() && !keep.contains(&name)).then_some(name)
}

/// Applies each object of the bundle, the ACL Secret first (members mount it).
async fn apply_objects(
    ctx: &Context,
    namespace: &str,
    objects: build::ClusterObjects,
) -> Result<(), Error> {
    // No `..`: a kind added to the bundle is a compile error here until it is applied.
    let build::ClusterObjects {
        acl_secret,
        headless_service,
        client_service,
        pdb,
        network_policy,
    } = objects;
    apply(ctx, namespace, acl_secret).await?;
    apply(ctx, namespace, headless_service).await?;
    apply(ctx, namespace, client_service).await?;
    apply(ctx, namespace, pdb).await?;
    apply(ctx, namespace, network_policy).await?;
    Ok(())
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

/// The apply of the bundle against the mocked API server: each object is read, then
/// server-side applied under the cluster manager, whether it is new or already this cluster's.
#[cfg(test)]
mod api_tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::controller::CLUSTER_MANAGER;
    use crate::controller::testing;

    /// The path of each object of the bundle of `shop`, in the order they are applied.
    fn paths() -> [String; 5] {
        [
            "/api/v1/namespaces/team/secrets/shop-acl".into(),
            "/api/v1/namespaces/team/services/shop-nodes".into(),
            "/api/v1/namespaces/team/services/shop".into(),
            "/apis/policy/v1/namespaces/team/poddisruptionbudgets/shop".into(),
            "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies/shop".into(),
        ]
    }

    #[tokio::test]
    async fn each_object_is_read_then_applied_new_or_already_ours() {
        let (ctx, mut server) = testing::context();
        let task = tokio::spawn(async move {
            let cluster = testing::cluster(Value::Null);
            let credentials = testing::credentials();
            let inputs = build::ObjectInputs {
                acl_file: "user default off",
                credentials: &credentials,
                scrapers: None,
                operator_namespace: &ctx.operator_namespace,
                clients_from: ctx.settings.clients_from,
            };
            let objects = build::cluster_objects(&cluster, &inputs).unwrap();
            apply_objects(&ctx, "team", objects).await
        });
        for (i, path) in paths().iter().enumerate() {
            let read = server.next().await;
            assert_eq!(read.route(), format!("GET {path}"));
            if i == 0 {
                // An update: the Secret exists, made by this cluster.
                let existing = json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "shop-acl", "namespace": "team", "ownerReferences": [
                        {"apiVersion": crate::api::constants::API_VERSION,
                         "kind": "ValkeyCluster", "name": "shop", "uid": "uid-shop",
                         "controller": true}]}});
                read.respond(http::StatusCode::OK, existing);
            } else {
                read.not_found();
            }
            let write = server.next().await;
            assert_eq!(write.route(), format!("PATCH {path}"));
            assert_eq!(
                write.query("fieldManager").as_deref(),
                Some(CLUSTER_MANAGER)
            );
            assert_eq!(write.query("force").as_deref(), Some("true"));
            let owner = &write.body["metadata"]["ownerReferences"][0];
            assert_eq!(owner["uid"], "uid-shop", "{path}");
            write.echo();
        }
        task.await.unwrap().unwrap();
        assert!(server.idle());
    }

    /// An object of the cluster's, controlled by `owner` (`None`: by nobody).
    fn object(kind: &str, name: &str, owner: Option<&str>) -> Value {
        let owners: Vec<Value> = owner
            .map(|uid| {
                json!({"apiVersion": crate::api::constants::API_VERSION,
                "kind": "ValkeyCluster", "name": "shop", "uid": uid, "controller": true})
            })
            .into_iter()
            .collect();
        json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "team", "ownerReferences": owners}})
    }

    fn list(kind: &str, items: Vec<Value>) -> Value {
        json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {}, "items": items})
    }

    /// A stray (controlled by the cluster, not in the bundle) is deleted with an Event; the
    /// bundle's own objects and one nobody controls (a tenant's, with the same labels) stay.
    /// Each kind is listed by the cluster's labels and only the bundle's components.
    #[tokio::test]
    async fn only_what_the_cluster_controls_and_no_longer_has_is_deleted() {
        let (ctx, mut server) = testing::context();
        let task = tokio::spawn(async move {
            let cluster = testing::cluster(Value::Null);
            let keep = Kept {
                services: vec!["shop-nodes".into(), "shop".into()],
                pdbs: vec!["shop".into()],
                network_policies: vec!["shop".into()],
            };
            delete_strays(&ctx, &cluster, &keep).await
        });
        let services = server.next().await;
        assert_eq!(services.route(), "GET /api/v1/namespaces/team/services");
        assert_eq!(
            services.query("labelSelector").as_deref(),
            Some(
                "valkey.gomomento.com/cluster=shop,app.kubernetes.io/managed-by=valkey-operator,\
                 app.kubernetes.io/component in (client,members)"
            )
        );
        let items = vec![
            object("Service", "shop-nodes", Some("uid-shop")),
            object("Service", "shop", Some("uid-shop")),
            object("Service", "shop-members", Some("uid-shop")),
            object("Service", "shop-tenant", None),
            object("Service", "shop-other", Some("uid-other")),
        ];
        services.respond(http::StatusCode::OK, list("Service", items));
        let delete = server.next().await;
        assert_eq!(
            delete.route(),
            "DELETE /api/v1/namespaces/team/services/shop-members"
        );
        delete.respond(
            http::StatusCode::OK,
            object("Service", "shop-members", None),
        );
        let event = server.next().await;
        assert_eq!(event.body["reason"], "DeletedObject");
        assert_eq!(
            event.body["note"],
            "Deleted Service shop-members: the cluster no longer has it"
        );
        event.echo();
        for (path, component, kind) in [
            (
                "/apis/policy/v1/namespaces/team/poddisruptionbudgets",
                "members",
                "PodDisruptionBudget",
            ),
            (
                "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies",
                "members",
                "NetworkPolicy",
            ),
        ] {
            let listed = server.next().await;
            assert_eq!(listed.route(), format!("GET {path}"));
            let selector = listed.query("labelSelector").unwrap_or_default();
            assert!(
                selector.ends_with(&format!("in ({component})")),
                "{selector}"
            );
            listed.respond(http::StatusCode::OK, list(kind, vec![]));
        }
        task.await.unwrap().unwrap();
        assert!(server.idle());
    }

    /// A sweep is due once per generation of a cluster, again after the cluster is forgotten.
    #[test]
    fn a_generation_is_swept_once() {
        let sweeps = super::super::sweeps::Sweeps::default();
        let mut cluster = testing::cluster(Value::Null);
        sweeps.due(&cluster).unwrap().done();
        assert!(sweeps.due(&cluster).is_none());
        cluster.metadata.generation = Some(3);
        let due = sweeps.due(&cluster).expect("a new generation is swept");
        assert!(
            sweeps.due(&cluster).is_some(),
            "not done until done() is called"
        );
        due.done();
        assert!(sweeps.due(&cluster).is_none());
        sweeps.forget(&cluster);
        assert!(sweeps.due(&cluster).is_some());
    }
}
