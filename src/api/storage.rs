//! Member volumes: what a ValkeyConfig says about where its members keep their data.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::{DNS1123_SUBDOMAIN, positive_quantity_rule};

/// Volumes of the members (platform team). With storage, each member gets its own
/// PersistentVolumeClaim mounted at Valkey's data directory (`/data`: nodes.conf, the
/// append-only file, RDB snapshots), so a member whose pod is deleted, evicted or OOM-killed
/// comes back with its node id and dataset. Pair it with `appendonly: "yes"` in `valkey`:
/// without a persistence setting the volume keeps only nodes.conf. Without storage (the
/// default) members are memory-only: a full restart loses the data, and says so.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Size of each member's volume, for example `10Gi`. Growing it expands the existing
    /// volumes online where their StorageClass allows expansion (else the cluster's
    /// `VolumesSized` condition says so; nothing is replaced); shrinking is refused.
    #[schemars(length(max = 32))]
    #[x_kube(validation = positive_quantity_rule("storage.size", "10Gi"))]
    pub size: String,

    /// StorageClass of the volumes. Unset: the Kubernetes cluster's default class. Changing
    /// it replaces the members one shard at a time (a volume cannot change class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("storage.storageClassName"))]
    pub storage_class_name: Option<String>,

    /// What happens to the volumes when the ValkeyCluster is deleted: `Delete` (the default)
    /// removes them with the cluster; `Retain` keeps them, labelled with the cluster's name and
    /// uid, for the platform team to inspect or delete. A retained volume is never reused by a
    /// new cluster, even one of the same name. Volumes of members retired by a rollout or a
    /// scale-in are deleted with them either way (their data moved to the other members
    /// first). Changing it applies to the existing volumes; no member is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_deleted: Option<VolumeRetention>,
}

/// What happens to member volumes when their cluster is deleted.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum VolumeRetention {
    /// Deleted with the cluster.
    #[default]
    Delete,
    /// Kept after the cluster is deleted.
    Retain,
}

impl Storage {
    /// The retention in effect (`Delete` when unset).
    pub fn retention(&self) -> VolumeRetention {
        self.when_deleted.unwrap_or_default()
    }
}
