//! End of the observe step: what the cluster controller writes onto its members' pods, from
//! what it just observed (the holds-data readiness gate) and from the spec (pod annotations).
//! The pod's spec is the ValkeyNode controller's and is never changed here. A failed write is
//! logged and retried next reconcile.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use tracing::warn;

use super::observe;
use crate::api::ValkeyCluster;
use crate::api::constants::{ANNOTATION_SECRETS_REFRESH, CONDITION_HOLDS_DATA};
use crate::controller::Context;
use crate::controller::patch::StatusPatch;

/// Brings every observed member's pod in line: holds-data gate first, then annotations.
#[tracing::instrument(name = "cluster.pods", skip_all)]
pub async fn sync(
    ctx: &Context,
    cluster: &ValkeyCluster,
    observed: &[super::observed::Observed],
    pods: &Store<Pod>,
) {
    let namespace = cluster.namespace().unwrap_or_default();
    publish_holds_data(ctx, &namespace, observed, pods).await;
    sync_pod_annotations(ctx, cluster, observed, pods).await;
}

/// Sets each answering member's holds-data readiness gate (pod condition
/// [`CONDITION_HOLDS_DATA`]) to what its Valkey reports, where it changed. The gate keeps an
/// empty or syncing member out of the PodDisruptionBudget's healthy count and out of the client
/// Service, so a drain evicts the next member only once the last one's replacement has synced.
/// A failed write only delays readiness.
async fn publish_holds_data(
    ctx: &Context,
    namespace: &str,
    observed: &[super::observed::Observed],
    pods: &Store<Pod>,
) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let with_data = observe::shards_owning_slots(observed);
    for o in observed {
        let (Some(view), Some(pod_name)) = (&o.member.view, &o.pod) else {
            continue;
        };
        let Some(pod) = pods.get(&ObjectRef::new(pod_name).within(namespace)) else {
            continue;
        };
        let holds = observe::holds_data(view, with_data.contains(&o.member.shard));
        if observe::holds_data_condition(&pod) == Some(holds) {
            continue;
        }
        let patch = holds_data_patch(holds);
        if let Err(e) = api
            .patch_status(pod_name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            warn!(pod = %pod_name, error = %e, "could not set the holds-data readiness gate");
        }
    }
}

/// The pod's holds-data condition, the only one written (a strategic merge keys conditions by
/// type, so the pod's other conditions stay).
fn holds_data_patch(holds: bool) -> StatusPatch<PodStatus> {
    let (status, reason, message) = if holds {
        (
            "True",
            "HoldsData",
            "owns slots, is a replica in sync with its primary, or joined the cluster and waits for slots",
        )
    } else {
        (
            "False",
            "NoData",
            "owns no slots, is not an in-sync replica and has not joined the cluster",
        )
    };
    StatusPatch {
        status: PodStatus {
            conditions: Some(vec![PodCondition {
                type_: CONDITION_HOLDS_DATA.into(),
                status: status.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                ..Default::default()
            }]),
            ..Default::default()
        },
    }
}

/// `spec.podAnnotations` on every running member pod, within a reconcile of the change:
/// added, changed and removed keys (see `node::build::pod_annotations_patch`).
async fn sync_pod_annotations(
    ctx: &Context,
    cluster: &ValkeyCluster,
    observed: &[super::observed::Observed],
    pods: &Store<Pod>,
) {
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    for pod_name in observed.iter().filter_map(|o| o.pod.as_ref()) {
        let Some(pod) = pods.get(&ObjectRef::new(pod_name).within(&namespace)) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let desired = &cluster.spec.pod_annotations;
        let Some(patch) =
            crate::controller::node::build::pod_annotations_patch(pod.annotations(), desired)
        else {
            continue;
        };
        if let Err(e) = api
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(pod = %pod_name, error = %e, "could not update the pod's annotations");
        }
    }
}

/// Asks the kubelet to refresh the Secret volumes of `members` (pods that still read an older
/// ACL file or certificate): an update to the pod makes the kubelet sync it at once, and a
/// sync re-reads its Secret volumes. Without it a rotation waits for the kubelet's periodic
/// sync, a minute or more. Each pod at most once per [`SECRET_REFRESH_EVERY`].
///
/// [`SECRET_REFRESH_EVERY`]: crate::controller::SECRET_REFRESH_EVERY
pub async fn refresh_secret_volumes(ctx: &Context, namespace: &str, members: &[&str]) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for name in members {
        if !ctx.secret_refresh_due(&format!("{namespace}/{name}")) {
            continue;
        }
        let patch = secrets_refresh_patch(now);
        if let Err(e) = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(pod = %name, error = %e, "could not ask for the pod's Secret volumes to refresh");
        }
    }
}

fn secrets_refresh_patch(unix_seconds: u64) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {
        ANNOTATION_SECRETS_REFRESH: unix_seconds.to_string()
    }}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refresh_request_touches_one_annotation_only() {
        assert_eq!(
            secrets_refresh_patch(1_800_000_000),
            json!({"metadata": {"annotations": {
                "valkey.gomomento.com/secrets-refresh-requested": "1800000000"
            }}})
        );
    }

    /// The JSON the holds-data write sends, as it was written before the patch was typed.
    #[test]
    fn the_holds_data_gate_is_the_one_condition_written() {
        let sent = |holds| serde_json::to_value(holds_data_patch(holds)).unwrap();
        assert_eq!(
            sent(true),
            json!({"status": {"conditions": [{
                "type": CONDITION_HOLDS_DATA, "status": "True", "reason": "HoldsData",
                "message": "owns slots, is a replica in sync with its primary, or joined the cluster and waits for slots",
            }]}})
        );
        assert_eq!(
            sent(false),
            json!({"status": {"conditions": [{
                "type": CONDITION_HOLDS_DATA, "status": "False", "reason": "NoData",
                "message": "owns no slots, is not an in-sync replica and has not joined the cluster",
            }]}})
        );
    }
}
