//! Status write: the ValkeyCluster status, server-side applied on the status subresource only
//! when it says something new, with an Event on each transition people act on (state, steps
//! repeating without effect, data lost, certificate expiring or renewed); and the ValkeyNode
//! status fields the cluster controller owns (lifecycle, observed role, node id, pod).

use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use super::conditions::{
    CERTIFICATE_EXPIRING_SOON, DATA_LOST, STEPS_TAKING_EFFECT, expiry_flip, newly_lost,
    one_per_type, turned_false,
};
use super::observed::Observed;
use crate::api::{
    ClusterState, Lifecycle, NodeRole, ValkeyCluster, ValkeyClusterStatus, ValkeyNode,
    ValkeyNodeStatus,
};
use crate::controller::events::{self, RECONCILE};
use crate::controller::patch::{StatusApply, StatusPatch};
use crate::controller::{CLUSTER_MANAGER, Context, Error};

/// Whether `status` says nothing `previous` did not (then no write: condition transition
/// times and unchanged figures are not worth a request).
fn unchanged(previous: &ValkeyClusterStatus, status: &ValkeyClusterStatus) -> bool {
    let conditions = |s: &ValkeyClusterStatus| {
        s.conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    previous.state == status.state
        && previous.message == status.message
        && previous.observed_generation == status.observed_generation
        && previous.nodes == status.nodes
        && previous.persistence == status.persistence
        && previous.certificate_not_after == status.certificate_not_after
        && previous.active_since == status.active_since
        && previous.autoscaling == status.autoscaling
        && previous.acl_revision == status.acl_revision
        && conditions(previous) == conditions(status)
}

/// Patches status (server-side apply on the status subresource) and emits an Event when the
/// state changes.
#[tracing::instrument(name = "cluster.status", skip_all)]
pub async fn cluster_status(
    ctx: &Context,
    cluster: &ValkeyCluster,
    mut status: ValkeyClusterStatus,
) -> Result<(), Error> {
    one_per_type(&mut status.conditions);
    let previous = cluster.status.clone().unwrap_or_default();
    if unchanged(&previous, &status) {
        return Ok(());
    }
    let api: Api<ValkeyCluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let patch = StatusApply::new::<ValkeyCluster>(&status);
    let written = api
        .patch_status(
            &cluster.name_any(),
            &PatchParams::apply(CLUSTER_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.cluster_status_writes.record(cluster, written);
    announce_transitions(ctx, cluster, &previous, &status).await;
    Ok(())
}

/// The Events a status change deserves: a new state, steps that stopped taking effect, data
/// lost, a certificate about to expire or renewed.
async fn announce_transitions(
    ctx: &Context,
    cluster: &ValkeyCluster,
    previous: &ValkeyClusterStatus,
    status: &ValkeyClusterStatus,
) {
    if previous.state != status.state
        && let Some(state) = status.state
    {
        let warns = matches!(
            state,
            ClusterState::Blocked | ClusterState::Degraded | ClusterState::Failed
        );
        let type_ = if warns {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = status.message.as_deref().unwrap_or_default();
        events::publish(ctx, cluster, type_, RECONCILE, &format!("{state:?}"), note).await;
    }
    let (before, now) = (&previous.conditions, &status.conditions);
    if let Some(c) = turned_false(before, now, STEPS_TAKING_EFFECT) {
        events::warning(ctx, cluster, &c.reason, &c.message).await;
    }
    if let Some(c) = newly_lost(before, now) {
        events::warning(ctx, cluster, DATA_LOST, &c.message).await;
    }
    match expiry_flip(before, now) {
        Some((true, c)) => {
            events::warning(ctx, cluster, CERTIFICATE_EXPIRING_SOON, &c.message).await;
        }
        Some((false, c)) => events::normal(ctx, cluster, "CertificateRenewed", &c.message).await,
        None => {}
    }
}

pub async fn set_node_lifecycle(
    api: &Api<ValkeyNode>,
    name: &str,
    lifecycle: Lifecycle,
) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&lifecycle_patch(lifecycle)),
    )
    .await?;
    Ok(())
}

/// A member's lifecycle, the only field written.
fn lifecycle_patch(lifecycle: Lifecycle) -> StatusPatch<ValkeyNodeStatus> {
    StatusPatch {
        status: ValkeyNodeStatus {
            lifecycle: Some(lifecycle),
            ..Default::default()
        },
    }
}

/// Records each member's observed role, Valkey node id and pod in its ValkeyNode status.
#[tracing::instrument(name = "cluster.node_statuses", skip_all)]
pub async fn update_node_statuses(
    _ctx: &Context,
    api: &Api<ValkeyNode>,
    observed: &[Observed],
) -> Result<(), Error> {
    for o in observed {
        let current = o.node.status.clone().unwrap_or_default();
        let node_id = o.member.view.as_ref().map(|v| v.id.as_str().to_string());
        let generation = o.node.metadata.generation;
        let changed = (o.role.is_some() && current.role != o.role)
            || (node_id.is_some() && current.node_id != node_id)
            || (o.pod.is_some() && current.pod != o.pod)
            || current.observed_generation != generation;
        if !changed {
            continue;
        }
        let patch = observed_patch(o.role, node_id, o.pod.clone(), generation);
        api.patch_status(
            &o.member.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

/// What was observed of a member, and the generation of the spec it was observed with (a
/// member's spec never changes: written once); what was not (`None`) is left as it is.
fn observed_patch(
    role: Option<NodeRole>,
    node_id: Option<String>,
    pod: Option<String>,
    observed_generation: Option<i64>,
) -> StatusPatch<ValkeyNodeStatus> {
    StatusPatch {
        status: ValkeyNodeStatus {
            role,
            node_id,
            pod,
            observed_generation,
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON each status write sends, as it was written before the patches were typed.
    #[test]
    fn status_writes_send_exactly_the_fields_they_set() {
        fn sent(patch: impl serde::Serialize) -> serde_json::Value {
            serde_json::to_value(patch).unwrap()
        }
        assert_eq!(
            sent(lifecycle_patch(Lifecycle::Leaving)),
            json!({"status": {"lifecycle": "Leaving"}})
        );
        assert_eq!(
            sent(observed_patch(
                Some(NodeRole::Replica),
                Some("ab".repeat(20)),
                Some("c-0-1".into()),
                Some(1)
            )),
            json!({"status": {"role": "replica", "nodeId": "ab".repeat(20), "pod": "c-0-1", "observedGeneration": 1}})
        );
        // Nothing observed, nothing written (a merge patch with `null` would erase it).
        assert_eq!(
            sent(observed_patch(None, None, None, None)),
            json!({"status": {}})
        );
        assert_eq!(
            sent(observed_patch(Some(NodeRole::Primary), None, None, None)),
            json!({"status": {"role": "primary"}})
        );
        let status = ValkeyClusterStatus {
            state: Some(ClusterState::Active),
            message: Some("3 shards".into()),
            observed_generation: Some(4),
            endpoint: Some("c.ns.svc:6379".into()),
            tls: Some(false),
            ready: Some("6/6".into()),
            ..Default::default()
        };
        assert_eq!(
            sent(StatusApply::new::<ValkeyCluster>(&status)),
            json!({
                "apiVersion": crate::api::constants::API_VERSION,
                "kind": "ValkeyCluster",
                "status": status,
            })
        );
    }

    #[test]
    fn a_first_active_since_is_written_even_when_nothing_else_changed() {
        let before = ValkeyClusterStatus {
            state: Some(ClusterState::Active),
            ..Default::default()
        };
        let after = ValkeyClusterStatus {
            active_since: Some("2026-12-06T03:00:00Z".into()),
            ..before.clone()
        };
        assert!(unchanged(&before, &before.clone()));
        assert!(
            !unchanged(&before, &after),
            "an upgraded Active cluster gets activeSince"
        );
    }

    use crate::controller::testing::cluster as shop;

    #[tokio::test]
    async fn a_status_that_says_nothing_new_is_not_written() {
        let (ctx, mut server) = crate::controller::testing::context();
        let cluster =
            shop(json!({"state": "Active", "message": "3 shards", "observedGeneration": 2}));
        let same = cluster.status.clone().unwrap();
        cluster_status(&ctx, &cluster, same).await.unwrap();
        assert!(
            server.idle(),
            "no request for a status that says nothing new"
        );
    }

    /// A new state: one server-side apply of the status subresource under the cluster
    /// manager, then one Warning Event on the cluster saying why (Degraded warns).
    #[tokio::test]
    async fn a_new_state_is_applied_to_the_status_subresource_and_announced_once() {
        let (ctx, mut server) = crate::controller::testing::context();
        let cluster = shop(json!({"state": "Active", "message": "3 shards"}));
        let status = ValkeyClusterStatus {
            state: Some(ClusterState::Degraded),
            message: Some("shard 1 has no replica".into()),
            observed_generation: Some(2),
            ..Default::default()
        };
        let written = shop(serde_json::to_value(&status).unwrap());
        let step = tokio::spawn(async move { cluster_status(&ctx, &cluster, status).await });
        let write = server.next().await;
        assert_eq!(
            write.route(),
            format!(
                "PATCH /apis/{}/namespaces/team/valkeyclusters/shop/status",
                crate::api::constants::API_VERSION
            )
        );
        assert_eq!(
            write.query("fieldManager").as_deref(),
            Some(CLUSTER_MANAGER)
        );
        assert_eq!(write.query("force").as_deref(), Some("true"));
        assert_eq!(write.body["status"]["state"], "Degraded");
        write.respond(
            http::StatusCode::OK,
            serde_json::to_value(&written).unwrap(),
        );
        let event = server.next().await;
        assert_eq!(
            event.route(),
            "POST /apis/events.k8s.io/v1/namespaces/team/events"
        );
        assert_eq!(event.body["type"], "Warning");
        assert_eq!(event.body["reason"], "Degraded");
        assert_eq!(event.body["note"], "shard 1 has no replica");
        assert_eq!(event.body["regarding"]["name"], "shop");
        assert_eq!(event.body["action"], RECONCILE);
        event.echo();
        step.await.unwrap().unwrap();
        assert!(server.idle(), "one write, one Event");
    }

    /// A member as observed: its ValkeyNode (`generation` 1, status as given) answering as
    /// `role` in pod `pod`.
    fn member(name: &str, status: ValkeyNodeStatus, role: NodeRole, pod: &str) -> Observed {
        let status = serde_json::to_value(status).unwrap();
        let node: ValkeyNode =
            serde_json::from_value(crate::controller::testing::member(name, status)).unwrap();
        Observed {
            node: std::sync::Arc::new(node),
            member: crate::plan::Member::new(name, 0),
            start_failure: None,
            pod: Some(pod.into()),
            role: Some(role),
            version: None,
            run_id: None,
            aof_bytes: None,
            usage: None,
        }
    }

    /// Only a member whose recorded role, pod or generation changed gets a merge patch of its
    /// status, naming only what was observed.
    #[tokio::test]
    async fn only_members_whose_observed_fields_changed_get_a_status_patch() {
        let (ctx, mut server) = crate::controller::testing::context();
        let recorded = ValkeyNodeStatus {
            role: Some(NodeRole::Primary),
            pod: Some("shop-0-0".into()),
            observed_generation: Some(1),
            ..Default::default()
        };
        let unchanged = member("shop-0-0", recorded.clone(), NodeRole::Primary, "shop-0-0");
        let failed_over = member("shop-0-1", recorded, NodeRole::Replica, "shop-0-1");
        let api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), "team");
        let step = tokio::spawn(async move {
            let ctx = ctx;
            update_node_statuses(&ctx, &api, &[unchanged, failed_over]).await
        });
        let patch = server.next().await;
        assert_eq!(
            patch.route(),
            format!(
                "PATCH /apis/{}/namespaces/team/valkeynodes/shop-0-1/status",
                crate::api::constants::API_VERSION
            )
        );
        assert_eq!(
            patch.body,
            json!({"status": {"role": "replica", "pod": "shop-0-1", "observedGeneration": 1}})
        );
        let answer = crate::controller::testing::member("shop-0-1", patch.body["status"].clone());
        patch.respond(http::StatusCode::OK, answer);
        step.await.unwrap().unwrap();
        assert!(
            server.idle(),
            "the member whose fields stand as recorded is not written"
        );
    }
}
