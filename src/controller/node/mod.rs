//! ValkeyNode controller: one ConfigMap (valkey.conf) and one Pod per member, both owned by
//! the ValkeyNode. The node's spec is immutable, so the pod is created once and only its
//! annotations (the cluster's `podAnnotations`) are patched live.

pub mod build;
pub mod fence;
pub mod start;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{ValkeyCluster, ValkeyNode, ValkeyNodeStatus};
use crate::controller::owner::{apply_as, ensure_ours};
use crate::controller::patch::StatusPatch;
use crate::controller::{Context, Error, NODE_MANAGER, object_key};

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(controller = "node", object = %object_key(node.as_ref()))
)]
pub async fn reconcile(node: Arc<ValkeyNode>, ctx: Arc<Context>) -> Result<Action, Error> {
    if node.metadata.deletion_timestamp.is_some() {
        ctx.last_member_pods.forget(&fence::node_uid(&node));
        return Ok(Action::await_change());
    }
    let namespace = node.namespace().unwrap_or_default();
    let name = node.name_any();
    let clusters: Api<ValkeyCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(cluster) = clusters.get_opt(&node.spec.cluster_name).await? else {
        // Its cluster is gone; garbage collection removes the node shortly.
        return Ok(Action::await_change());
    };
    let annotations = cluster.spec.pod_annotations.clone();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing_pod = pods.get_opt(&name).await?;
    if let Some(wait) = apply_config_map(&ctx, &node, &cluster, existing_pod.as_ref()).await? {
        return Ok(wait);
    }
    match existing_pod {
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
            if let Some(wait) = old_process_stopped(&ctx, &node, &cluster).await {
                return Ok(wait);
            }
            if let Some(wait) = ensure_claim(&ctx, &node, &cluster).await? {
                return Ok(wait);
            }
            let external = match external_endpoint(&ctx, &node).await? {
                Ok(external) => external,
                Err(wait) => return Ok(wait),
            };
            let pod = (node.as_ref(), &annotations, external.as_ref());
            if let Some(wait) = create_pod(&ctx, pod, &cluster, &pods).await? {
                return Ok(wait);
            }
        }
        Some(pod) if let Some(failure) = start::failed_before_joining(&node, &pod) => {
            return start_again(&ctx, &node, &cluster, &pods, &failure).await;
        }
        Some(pod) if pod.metadata.deletion_timestamp.is_none() => {
            if node.spec.storage.is_some() {
                ctx.last_member_pods.saw(&fence::node_uid(&node), &pod);
            }
            // Live change: the cluster's annotations on the running pod (added, changed and
            // removed). The cluster controller does the same on each of its reconciles, which
            // a spec change triggers at once.
            if let Some(patch) = build::pod_annotations_patch(pod.annotations(), &annotations) {
                pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
        }
        Some(_) => {}
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// A durable member's pod is created again only once the process of the pod it last had
/// stopped (see [`fence`]): the wait to return while it still answers, none once it does not
/// (or after [`fence::LONGEST_WAIT`], with a Warning Event).
async fn old_process_stopped(
    ctx: &Context,
    node: &ValkeyNode,
    cluster: &ValkeyCluster,
) -> Option<Action> {
    // Members without a volume share no files with their last pod.
    node.spec.storage.as_ref()?;
    match ctx.last_member_pods.check(&fence::node_uid(node)).await {
        fence::Fence::Clear => None,
        fence::Fence::Wait { ip, first } => {
            if first {
                info!(node = %object_key(node), %ip, "pod gone, its process still answers: the new pod waits for it to stop (one process per volume)");
            }
            Some(Action::requeue(Duration::from_millis(500)))
        }
        fence::Fence::GaveUp { ip } => {
            let note = format!(
                "member {}: its pod left the API {}s ago but its process still answers at {ip}; creating the new pod on the same volume anyway (is the kubelet of its node still running?)",
                node.name_any(),
                fence::LONGEST_WAIT.as_secs()
            );
            warn!(node = %object_key(node), "{note}");
            crate::controller::events::warning(ctx, cluster, "OldProcessStillRunning", &note).await;
            None
        }
    }
}

/// A member whose Valkey exited before it ever joined: once its backoff has passed, the
/// failure is counted in its status, a warning Event names Valkey's last words, and the pod
/// is deleted (the next reconcile creates it again, see [`reconcile`]).
async fn start_again(
    ctx: &Arc<Context>,
    node: &ValkeyNode,
    cluster: &ValkeyCluster,
    pods: &Api<Pod>,
    failure: &start::StartFailure,
) -> Result<Action, Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    if let Some(left) = failure.wait_left(now) {
        return Ok(Action::requeue(left));
    }
    let note = format!("member {}: {}", node.name_any(), failure.describe(now));
    warn!(node = %object_key(node), "{note}");
    match pods.delete(&node.name_any(), &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    // Counted once the pod is gone (a refused delete counts nothing); a crash in between
    // costs one uncounted try.
    let api: Api<ValkeyNode> =
        Api::namespaced(ctx.client.clone(), &node.namespace().unwrap_or_default());
    let counted = StatusPatch {
        status: crate::api::ValkeyNodeStatus {
            start_failures: Some(failure.restarts + 1),
            ..Default::default()
        },
    };
    api.patch_status(
        &node.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&counted),
    )
    .await?;
    crate::controller::events::warning(ctx, cluster, "MemberFailedToStart", &note).await;
    Ok(Action::requeue(Duration::from_secs(2)))
}

/// Applies the member's ConfigMap. A ConfigMap or Pod of the member's name that this member
/// did not create (a tenant's) is never touched: the member waits (the returned requeue),
/// saying which object is in the way.
async fn apply_config_map(
    ctx: &Arc<Context>,
    node: &ValkeyNode,
    cluster: &ValkeyCluster,
    existing_pod: Option<&Pod>,
) -> Result<Option<Action>, Error> {
    let namespace = node.namespace().unwrap_or_default();
    let node_uid = node.metadata.uid.as_deref();
    let taken = match existing_pod.map(|p| ensure_ours(p, node_uid)) {
        Some(Err(e)) => Err(e),
        _ => apply_as(ctx, &namespace, build::config_map(node)?, NODE_MANAGER)
            .await
            .map(|_| ()),
    };
    if let Err(err @ Error::NameTaken { .. }) = taken {
        warn!(node = %object_key(node), "{err}");
        let message = format!("{NO_POD}{err}");
        if set_refusal(ctx, node, Some((NoPod::NameTaken, &message))).await? {
            let note = format!("member {}: {message}", node.name_any());
            crate::controller::events::warning(ctx, cluster, "NameTaken", &note).await;
        }
        return Ok(Some(Action::requeue(Duration::from_secs(30))));
    }
    taken.map(|()| None)
}

/// Creates the member's volume claim when its spec has storage and the claim does not exist
/// yet (created once: the cluster controller grows it and sets its retention later, see
/// `controller::cluster::volumes`). A claim still being deleted is waited for: the pod would
/// otherwise mount a volume that is going away.
async fn ensure_claim(
    ctx: &Arc<Context>,
    node: &ValkeyNode,
    cluster: &ValkeyCluster,
) -> Result<Option<Action>, Error> {
    let Some(claim) = build::claim(node)? else {
        return Ok(None);
    };
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &node.namespace().unwrap_or_default());
    let name = claim.name_any();
    match claims.get_opt(&name).await? {
        Some(existing) if existing.metadata.deletion_timestamp.is_some() => {
            info!(node = %object_key(node), claim = %name, "volume claim still being deleted; waiting");
            Ok(Some(Action::requeue(Duration::from_secs(5))))
        }
        Some(_) => Ok(None),
        None => match claims.create(&PostParams::default(), &claim).await {
            Ok(_) => {
                info!(node = %object_key(node), claim = %name, "created volume claim");
                Ok(None)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                warn!(node = %object_key(node), error = %e.message, "the API server refused the volume claim");
                let message = format!("{CLAIM_REFUSED}{}", e.message);
                if set_refusal(ctx, node, Some((NoPod::ClaimRefused, &message))).await? {
                    let note = format!("member {}: {message}", node.name_any());
                    crate::controller::events::warning(ctx, cluster, "VolumeRefused", &note).await;
                }
                Ok(Some(Action::requeue(Duration::from_secs(30))))
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// Creates the member's pod. When the API server refuses it (Pod Security, a quota, a policy
/// engine), says why where the cluster's status and the node's show it, and returns the
/// calm retry.
async fn create_pod(
    ctx: &Arc<Context>,
    (node, annotations, external): (
        &ValkeyNode,
        &std::collections::BTreeMap<String, String>,
        Option<&build::ExternalEndpoint>,
    ),
    cluster: &ValkeyCluster,
    pods: &Api<Pod>,
) -> Result<Option<Action>, Error> {
    let pod = build::pod(node, annotations, external)?;
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            info!(node = %object_key(node), "created pod");
            set_refusal(ctx, node, None).await?;
            Ok(None)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
            warn!(node = %object_key(node), error = %e.message, "the API server refused the pod");
            let message = format!("{POD_REFUSED}{}", e.message);
            if set_refusal(ctx, node, Some((NoPod::PodRefused, &message))).await? {
                let note = format!("member {}: {message}", node.name_any());
                crate::controller::events::warning(ctx, cluster, "PodRefused", &note).await;
            }
            Ok(Some(Action::requeue(Duration::from_secs(30))))
        }
        Err(e) => Err(e.into()),
    }
}

/// A member with `spec.external`: its own Service, applied before its pod so that Valkey
/// announces the Service's address to clients from its first start (never the pod's), and
/// the endpoint to announce. `Err(requeue)` while a load balancer has no address yet (the
/// node's status says so).
async fn external_endpoint(
    ctx: &Arc<Context>,
    node: &ValkeyNode,
) -> Result<Result<Option<build::ExternalEndpoint>, Action>, Error> {
    let Some(service_type) = node.spec.external else {
        return Ok(Ok(None));
    };
    let service = build::external_service(node, service_type)?;
    let namespace = node.namespace().unwrap_or_default();
    let applied = apply_as(ctx, &namespace, service, NODE_MANAGER).await?;
    match build::ExternalEndpoint::of(&applied) {
        Some(endpoint) => Ok(Ok(Some(endpoint))),
        None => {
            let message = format!(
                "waiting for an address on Service {} ({service_type}) to announce to clients outside the cluster",
                applied.name_any()
            );
            info!(node = %object_key(node), "{message}");
            Ok(Err(Action::requeue(Duration::from_secs(5))))
        }
    }
}

/// Prefix of a ValkeyNode's `status.message` while the API server refuses its pod.
pub const POD_REFUSED: &str = "the API server refused its pod: ";
/// Prefix of a ValkeyNode's `status.message` while another object holds its pod's or
/// ConfigMap's name.
pub const NO_POD: &str = "its pod cannot be created: ";

/// Prefix of a ValkeyNode's `status.message` while the API server refuses its volume claim
/// (a storage quota, a policy engine).
pub const CLAIM_REFUSED: &str = "the API server refused its volume claim: ";

/// Why a member has no pod: the reason of its [`CONDITION_POD_CREATED`] condition while it is
/// False. The cluster controller reads the condition, never the message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPod {
    /// The API server refused the pod (Pod Security, a quota, a policy engine).
    PodRefused,
    /// Another object holds the name of the member's pod or ConfigMap.
    NameTaken,
    /// The API server refused the member's volume claim.
    ClaimRefused,
}

impl NoPod {
    fn reason(self) -> &'static str {
        match self {
            NoPod::PodRefused => "PodRefused",
            NoPod::NameTaken => "NameTaken",
            NoPod::ClaimRefused => "VolumeClaimRefused",
        }
    }
}

/// The ValkeyNode condition saying whether its pod could be created: False (reason
/// [`NoPod`], message for people) while it cannot, True once it was.
pub const CONDITION_POD_CREATED: &str = "PodCreated";

/// Why the member has no pod, from its status: the message of its False
/// [`CONDITION_POD_CREATED`] condition.
pub fn why_no_pod(status: Option<&ValkeyNodeStatus>) -> Option<String> {
    pod_not_created(status).map(|c| c.message.clone())
}

fn pod_not_created(status: Option<&ValkeyNodeStatus>) -> Option<&Condition> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_POD_CREATED && c.status == "False")
}

/// Records why the member has no pod (`refusal`: the reason and the message, which starts
/// with [`POD_REFUSED`], [`NO_POD`] or [`CLAIM_REFUSED`]) in the node's status, or that it has
/// one (`None`) when it had not; whether that changed it.
async fn set_refusal(
    ctx: &Context,
    node: &ValkeyNode,
    refusal: Option<(NoPod, &str)>,
) -> Result<bool, Error> {
    let current =
        pod_not_created(node.status.as_ref()).map(|c| (c.reason.as_str(), c.message.as_str()));
    let wanted = refusal.map(|(why, message)| (why.reason(), message));
    if wanted == current || (wanted.is_none() && current.is_none()) {
        return Ok(false);
    }
    let api: Api<ValkeyNode> =
        Api::namespaced(ctx.client.clone(), &node.namespace().unwrap_or_default());
    api.patch_status(
        &node.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&refusal_patch(refusal, Timestamp::now())),
    )
    .await?;
    Ok(true)
}

/// A ValkeyNode's `status.message` and its conditions. Not [`crate::api::ValkeyNodeStatus`],
/// which skips an unset message: here `None` is written as `null`, which removes it. A merge
/// patch replaces the whole list: [`CONDITION_POD_CREATED`] is the only condition a
/// ValkeyNode has.
#[derive(Debug, serde::Serialize)]
struct Refusal<'a> {
    message: Option<&'a str>,
    conditions: [Condition; 1],
}

fn refusal_patch(refusal: Option<(NoPod, &str)>, now: Timestamp) -> StatusPatch<Refusal<'_>> {
    let (status, reason, message) = match refusal {
        Some((why, message)) => ("False", why.reason(), message),
        None => ("True", "Created", "the member's pod was created"),
    };
    StatusPatch {
        status: Refusal {
            message: refusal.map(|(_, message)| message),
            conditions: [Condition {
                type_: CONDITION_POD_CREATED.into(),
                status: status.into(),
                reason: reason.into(),
                message: message.into(),
                observed_generation: None,
                last_transition_time: Time(now),
            }],
        },
    }
}

pub fn error_policy(node: Arc<ValkeyNode>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_after_failure("node", node.as_ref(), error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON a refusal write sends: the message for people and the condition the cluster
    /// controller reads; clearing sends `null` for the message, which removes it.
    #[test]
    fn a_refusal_is_written_and_cleared_as_the_message_and_the_pod_created_condition() {
        let now: Timestamp = "2026-12-06T22:00:00Z".parse().unwrap();
        let message = format!("{POD_REFUSED}quota exceeded");
        assert_eq!(
            serde_json::to_value(refusal_patch(Some((NoPod::PodRefused, &message)), now)).unwrap(),
            json!({"status": {"message": message, "conditions": [{
                "type": "PodCreated", "status": "False", "reason": "PodRefused",
                "message": message, "lastTransitionTime": "2026-12-06T22:00:00Z"
            }]}})
        );
        assert_eq!(
            serde_json::to_value(refusal_patch(None, now)).unwrap(),
            json!({"status": {"message": null, "conditions": [{
                "type": "PodCreated", "status": "True", "reason": "Created",
                "message": "the member's pod was created", "lastTransitionTime": "2026-12-06T22:00:00Z"
            }]}})
        );
    }

    #[test]
    fn why_a_member_has_no_pod_is_read_from_its_condition_not_its_message() {
        let why = |status: serde_json::Value| {
            let status: ValkeyNodeStatus = serde_json::from_value(status).unwrap();
            why_no_pod(Some(&status))
        };
        let message_only = json!({"message": format!("{POD_REFUSED}quota")});
        assert_eq!(why(message_only), None, "a message alone says nothing");
        let refused = why(json!({"conditions": [{
            "type": "PodCreated", "status": "False", "reason": "NameTaken",
            "message": "its pod cannot be created: taken", "lastTransitionTime": "2026-12-06T22:00:00Z"
        }]}));
        assert_eq!(refused.as_deref(), Some("its pod cannot be created: taken"));
        let created = why(json!({"conditions": [{
            "type": "PodCreated", "status": "True", "reason": "Created",
            "message": "created", "lastTransitionTime": "2026-12-06T22:00:00Z"
        }]}));
        assert_eq!(created, None);
        assert_eq!(why_no_pod(None), None);
    }
}
