//! Member volumes of a cluster whose config has `storage` (the claims themselves are created
//! by the node controller, once per member): each round, every claim of this cluster gets the
//! retention the config asks for now (owned by its member with `whenDeleted: Delete`, by
//! nobody with `Retain`) and grows to the config's `storage.size` when its StorageClass allows
//! expansion; a claim whose member was retired and that nobody owns (`Retain`) is deleted.
//! Claims are told apart by the cluster's and the member's uids, never by name alone: a
//! volume retained from a deleted cluster of the same name is left alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::constants::LABEL_CLUSTER;
use crate::api::{Storage, ValkeyCluster, ValkeyNode, VolumeRetention};
use crate::controller::node::build::{VOLUME_CLUSTER_UID_LABEL, VOLUME_MEMBER_UID_LABEL};
use crate::controller::owner::controller_owner;
use crate::controller::{Context, Error};
use crate::resolve::memory::parse_quantity_bytes;

/// What the volumes step found, for the `VolumesSized` condition.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VolumeProgress {
    /// Claims asked to grow this round or still growing (request above capacity).
    pub growing: Vec<String>,
    /// Claims that should grow but whose class cannot expand, with the class.
    pub stuck: Vec<(String, String)>,
}

impl VolumeProgress {
    /// `(ok, reason, message)` of the `VolumesSized` condition.
    pub fn condition(&self, size: &str) -> (bool, &'static str, String) {
        if let Some((_, class)) = self.stuck.first() {
            let claims: Vec<&str> = self.stuck.iter().map(|(c, _)| c.as_str()).collect();
            return (
                false,
                "ExpansionUnsupported",
                format!(
                    "storage.size is {size} but StorageClass {class:?} does not allow volume expansion (allowVolumeExpansion), so {} claim(s) keep their size: {}; nothing is replaced. Use a class that expands, or keep the size",
                    claims.len(),
                    claims.join(", ")
                ),
            );
        }
        if !self.growing.is_empty() {
            return (
                false,
                "Growing",
                format!(
                    "growing {} volume(s) to {size} online: {}",
                    self.growing.len(),
                    self.growing.join(", ")
                ),
            );
        }
        (true, "Sized", format!("every member's volume is {size}"))
    }
}

/// Condition type of a cluster with storage: every member's volume has the config's size.
pub const VOLUMES_SIZED: &str = "VolumesSized";

/// What the volumes step did this round: its `VolumesSized` condition, and whether claims are
/// still growing (the cluster is looked at again soon, so the condition follows the kubelet).
#[derive(Debug)]
pub struct VolumeStep {
    pub condition: Condition,
    pub growing: bool,
}

impl VolumeStep {
    /// Seconds until the cluster should be looked at again for its volumes' sake: 5 while a
    /// claim grows (each kubelet finishes an online expansion on its own resync, up to about a
    /// minute later), `None` otherwise.
    pub fn look_again_in(&self) -> Option<u64> {
        self.growing.then_some(5)
    }
}

/// The volumes step (see the module) and its `VolumesSized` condition; nothing for a cluster
/// without storage. Errors are logged and leave the claims for the next round: volumes never
/// hold up the rest of the reconcile.
pub async fn sync(
    ctx: &Context,
    cluster: &ValkeyCluster,
    storage: Option<&Storage>,
    members: &[std::sync::Arc<ValkeyNode>],
) -> Option<VolumeStep> {
    let storage = storage?;
    let progress = match try_sync(ctx, cluster, storage, members).await {
        Ok(progress) => progress,
        Err(e) => {
            warn!(error = %e, "member volumes not synced this round");
            VolumeProgress::default()
        }
    };
    let (ok, reason, message) = progress.condition(&storage.size);
    Some(VolumeStep {
        condition: super::conditions::cluster_condition(
            cluster,
            VOLUMES_SIZED,
            ok,
            reason,
            &message,
        ),
        growing: !progress.growing.is_empty(),
    })
}

/// Puts the volumes step's condition and the members' persistence mode (from the desired
/// member spec) into this round's status; returns the step's own wait (see
/// [`VolumeStep::look_again_in`]).
pub fn into_status(
    status: &mut crate::api::ValkeyClusterStatus,
    volumes: Option<VolumeStep>,
    desired: &crate::api::ValkeyNodeSpec,
) -> Option<u64> {
    let wait = volumes.as_ref().and_then(VolumeStep::look_again_in);
    status.conditions.extend(volumes.map(|v| v.condition));
    status.persistence = Some(crate::controller::node::build::persistence_mode(desired));
    wait
}

async fn try_sync(
    ctx: &Context,
    cluster: &ValkeyCluster,
    storage: &Storage,
    members: &[std::sync::Arc<ValkeyNode>],
) -> Result<VolumeProgress, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let cluster_uid = cluster.metadata.uid.clone().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = format!(
        "{LABEL_CLUSTER}={},{VOLUME_CLUSTER_UID_LABEL}={cluster_uid}",
        cluster.name_any()
    );
    let mut progress = VolumeProgress::default();
    let mut expandable: BTreeMap<String, bool> = BTreeMap::new();
    for claim in claims
        .list(&ListParams::default().labels(&selector))
        .await?
    {
        let member_uid = claim.labels().get(VOLUME_MEMBER_UID_LABEL).cloned();
        let member = members
            .iter()
            .find(|m| m.metadata.uid.is_some() && m.metadata.uid == member_uid);
        match member {
            Some(member) => {
                set_retention(&claims, &claim, member, storage.retention()).await?;
                grow(
                    ctx,
                    &claims,
                    &claim,
                    storage,
                    &mut expandable,
                    &mut progress,
                )
                .await?;
            }
            None => delete_if_retired(ctx, &claims, &claim, &namespace).await?,
        }
    }
    Ok(progress)
}

/// The claim's owner references as `retention` asks: its member with `Delete` (garbage
/// collected with it, and with the cluster), nobody with `Retain`.
async fn set_retention(
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    member: &ValkeyNode,
    retention: VolumeRetention,
) -> Result<(), Error> {
    let owned = claim
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == member.metadata.uid.as_ref());
    let patch = match retention {
        VolumeRetention::Delete if !owned => {
            json!({"metadata": {"ownerReferences": [controller_owner(member)?]}})
        }
        VolumeRetention::Retain if !claim.owner_references().is_empty() => {
            json!({"metadata": {"ownerReferences": null}})
        }
        _ => return Ok(()),
    };
    claims
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    info!(claim = %claim.name_any(), ?retention, "volume retention set");
    Ok(())
}

/// Grows the claim to `storage.size` when its class allows expansion (asked once per class
/// per round); records claims still growing and those that cannot.
async fn grow(
    ctx: &Context,
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    storage: &Storage,
    expandable: &mut BTreeMap<String, bool>,
    progress: &mut VolumeProgress,
) -> Result<(), Error> {
    let name = claim.name_any();
    let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| parse_quantity_bytes(&q.0).ok())
    };
    let requested = quantity(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    );
    let capacity = quantity(
        claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    );
    let (Some(requested), Ok(wanted)) = (requested, parse_quantity_bytes(&storage.size)) else {
        return Ok(());
    };
    if wanted <= requested {
        if capacity.is_some_and(|c| c < requested) {
            progress.growing.push(name);
        }
        return Ok(());
    }
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    let allowed = match expandable.get(&class) {
        Some(allowed) => *allowed,
        None => {
            let classes: Api<StorageClass> = Api::all(ctx.client.clone());
            let allowed = classes
                .get_opt(&class)
                .await?
                .and_then(|c| c.allow_volume_expansion)
                .unwrap_or(false);
            expandable.insert(class.clone(), allowed);
            allowed
        }
    };
    if !allowed {
        progress.stuck.push((name, class));
        return Ok(());
    }
    let patch = json!({"spec": {"resources": {"requests": {"storage": storage.size}}}});
    claims
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    info!(claim = %name, size = %storage.size, "volume growing");
    progress.growing.push(name);
    Ok(())
}

/// A claim of this cluster whose member is not among its members: a retired member's. Owned
/// (`Delete`), garbage collection removes it; unowned (`Retain`), it is deleted here, once the
/// API server confirms the member is gone (the member store can lag behind a new member).
async fn delete_if_retired(
    ctx: &Context,
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    namespace: &str,
) -> Result<(), Error> {
    if !claim.owner_references().is_empty() || claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let member_uid = claim.labels().get(VOLUME_MEMBER_UID_LABEL);
    let member_name = claim
        .labels()
        .get(crate::api::constants::LABEL_NODE)
        .cloned()
        .unwrap_or_default();
    let nodes: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), namespace);
    let live = nodes.get_opt(&member_name).await?;
    if live.is_some_and(|n| n.metadata.uid.as_ref() == member_uid) {
        return Ok(());
    }
    claims
        .delete(&claim.name_any(), &Default::default())
        .await?;
    info!(claim = %claim.name_any(), member = %member_name, "deleted the retained volume of a retired member");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_claims_are_looked_at_again_soon_and_settled_ones_are_not() {
        let step = |growing| VolumeStep {
            condition: Condition {
                type_: VOLUMES_SIZED.into(),
                status: "False".into(),
                reason: "Growing".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Default::default(),
                ),
                observed_generation: None,
            },
            growing,
        };
        assert_eq!(step(true).look_again_in(), Some(5));
        assert_eq!(step(false).look_again_in(), None);
    }

    #[test]
    fn the_condition_names_what_cannot_grow_then_what_grows() {
        let sized = VolumeProgress::default().condition("1Gi");
        assert_eq!((sized.0, sized.1), (true, "Sized"));
        let growing = VolumeProgress {
            growing: vec!["c-0-0-data-1".into()],
            stuck: vec![],
        };
        let (ok, reason, message) = growing.condition("2Gi");
        assert_eq!((ok, reason), (false, "Growing"));
        assert!(message.contains("c-0-0-data-1"), "{message}");
        let stuck = VolumeProgress {
            growing: vec!["a".into()],
            stuck: vec![("c-0-1-data-2".into(), "local-path".into())],
        };
        let (ok, reason, message) = stuck.condition("2Gi");
        assert_eq!((ok, reason), (false, "ExpansionUnsupported"));
        assert!(
            message.contains("\"local-path\" does not allow volume expansion")
                && message.contains("c-0-1-data-2")
                && message.contains("nothing is replaced"),
            "{message}"
        );
    }
}
