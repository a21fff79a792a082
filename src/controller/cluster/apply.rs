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
    let inputs = build::ObjectInputs {
        acl_file: &acl_file,
        credentials: &credentials,
        scrapers: metrics.map(|m| m.scrapers.as_slice()),
        operator_namespace: &ctx.operator_namespace,
        clients_from: ctx.settings.clients_from,
    };
    apply_objects(ctx, &namespace, build::cluster_objects(cluster, &inputs)?).await?;
    Ok((credentials, acl_file))
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
}
