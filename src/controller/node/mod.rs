//! ValkeyNode controller: one ConfigMap (valkey.conf) and one Pod per member, both owned by
//! the ValkeyNode. The node's spec is immutable, so the pod is created once and only its
//! annotations (the cluster's `podAnnotations`) are patched live.

pub mod build;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{ValkeyCluster, ValkeyNode};
use crate::controller::{Context, Error, NODE_MANAGER, object_key};

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(controller = "node", object = %object_key(node.as_ref()))
)]
pub async fn reconcile(node: Arc<ValkeyNode>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let _timer = ctx.metrics.reconcile_timer("node");
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    let namespace = node.namespace().unwrap_or_default();
    let name = node.name_any();
    let clusters: Api<ValkeyCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(cluster) = clusters.get_opt(&node.spec.cluster_name).await? else {
        // Its cluster is gone; garbage collection removes the node shortly.
        return Ok(Requeue::await_change());
    };
    let annotations = cluster.spec.pod_annotations.clone();

    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let cm = build::config_map(&node);
    config_maps
        .patch(
            cm.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::apply(NODE_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await?;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.get_opt(&name).await? {
        None if !node.spec.restarts_in_place()
            && node
                .status
                .as_ref()
                .and_then(|s| s.node_id.as_ref())
                .is_some() =>
        {
            // The member had an identity and keeps no data: a new pod would be an empty node
            // at an address its replicas may still replicate from. The cluster controller
            // promotes a replica and replaces the member instead.
            info!(node = %object_key(node.as_ref()), "pod lost; not recreated, the member is replaced");
        }
        None => {
            let pod = build::pod(&node, &annotations);
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => {
                    info!(node = %object_key(node.as_ref()), "created pod");
                    set_refusal(&ctx, &node, None).await?;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                // Refused by admission (Pod Security, a quota, a policy engine): say why where
                // the cluster's status and the node's show it, and retry calmly.
                Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                    warn!(node = %object_key(node.as_ref()), error = %e.message, "the API server refused the pod");
                    if set_refusal(&ctx, &node, Some(&e.message)).await? {
                        let note = format!("{POD_REFUSED}{}", e.message);
                        let note = format!("member {name}: {note}");
                        crate::controller::cluster::status::warning(
                            &ctx,
                            &cluster,
                            "PodRefused",
                            &note,
                        )
                        .await;
                    }
                    return Ok(Requeue::requeue(Duration::from_secs(30)));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Some(pod) if pod.metadata.deletion_timestamp.is_none() => {
            // Live change: add or update the cluster's annotations on the running pod.
            let current = pod.annotations();
            let missing: BTreeMap<&String, &String> = annotations
                .iter()
                .filter(|(k, v)| current.get(*k) != Some(*v))
                .collect();
            if !missing.is_empty() {
                pods.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"annotations": missing}})),
                )
                .await?;
            }
        }
        Some(_) => {}
    }
    Ok(Requeue::requeue(Duration::from_secs(300)))
}

/// Prefix of a ValkeyNode's `status.message` while the API server refuses its pod.
pub const POD_REFUSED: &str = "the API server refused its pod: ";

/// Records (or clears) why the API server refused the member's pod in the node's status;
/// whether that changed it.
async fn set_refusal(
    ctx: &Context,
    node: &ValkeyNode,
    refusal: Option<&str>,
) -> Result<bool, Error> {
    let current = node.status.as_ref().and_then(|s| s.message.as_deref());
    let wanted = refusal.map(|r| format!("{POD_REFUSED}{r}"));
    let refused_before = current.is_some_and(|m| m.starts_with(POD_REFUSED));
    if wanted.as_deref() == current || (wanted.is_none() && !refused_before) {
        return Ok(false);
    }
    let api: Api<ValkeyNode> =
        Api::namespaced(ctx.client.clone(), &node.namespace().unwrap_or_default());
    api.patch_status(
        &node.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"message": wanted}})),
    )
    .await?;
    Ok(true)
}

pub fn error_policy(node: Arc<ValkeyNode>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let key = object_key(node.as_ref());
    let retry = ctx.failure_backoff(&format!("node/{key}"));
    warn!(node = %key, error = %error, retry_in = ?retry, "reconcile failed");
    ctx.metrics.reconcile_failed("node", error.metric_label());
    Requeue::requeue(retry)
}
