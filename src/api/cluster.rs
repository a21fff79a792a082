//! ValkeyCluster: a product team's request for a Valkey cluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::acl::{AclBinding, unique_usernames_rule};
use super::autoscaling::{Autoscaling, AutoscalingStatus};
use super::constants::DEFAULT_REPLICAS_PER_SHARD;
use super::node::{Lifecycle, NodeRole};
use super::placement::Placement;
use super::validation::{
    CLUSTER_NAME, DNS1123_SUBDOMAIN, RuleExt, frozen_while_creating_rule, member_count_rule,
    qualified_keys_rule, reserved_annotations_rule,
};

/// A sharded Valkey cluster (cluster mode) in this namespace, built from a ValkeyConfig the
/// platform team published. The operator derives everything else (ValkeyNodes, pods, Services,
/// ConfigMap, Secrets, PodDisruptionBudget, slot assignment, failover) from this spec and
/// reports progress in status.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyCluster",
    doc = "A sharded Valkey cluster requested by a product team: a ValkeyConfig from the platform menu plus topology (shards, replicas), ACL bindings, TLS, placement and pod annotations. The operator creates and runs everything else.",
    plural = "valkeyclusters",
    shortname = "vkc",
    category = "valkey",
    namespaced,
    status = "ValkeyClusterStatus",
    cel,
    validation = Rule::new(CLUSTER_NAME.cel("self.metadata.name"))
        .msg(format!("metadata.name of a ValkeyCluster must be {}", CLUSTER_NAME.describe)),
    validation = frozen_while_creating_rule(),
    printcolumn(name = "STATE", type_ = "string", json_path = ".status.state", description = "Creating, Restoring, Active, Updating, Blocked, Degraded, Invalid, Failed or Deleting"),
    printcolumn(name = "READY", type_ = "string", json_path = ".status.ready", description = "Members ready / members the spec asks for"),
    printcolumn(name = "VERSION", type_ = "string", json_path = ".status.version", description = "Valkey version the members run (old -> new during a rollout)"),
    printcolumn(name = "SHARDS", type_ = "integer", json_path = ".spec.shards", description = "Number of shards (primaries); with spec.autoscaling, the starting count"),
    printcolumn(name = "DESIRED SHARDS", type_ = "integer", json_path = ".status.autoscaling.desiredShards", description = "The shard count autoscaling converges to (spec.autoscaling)"),
    printcolumn(name = "REPLICAS", type_ = "integer", json_path = ".spec.replicasPerShard", description = "Replicas per shard"),
    printcolumn(name = "CONFIG", type_ = "string", json_path = ".spec.configRef", description = "ValkeyConfig the cluster uses"),
    printcolumn(name = "PROGRESS", type_ = "string", json_path = ".status.conditions[?(@.type==\"Progressing\")].reason", description = "What the operator is doing: Forming, RollingOut, Scaling, ReplacingMembers, Updating; Settled when done"),
    printcolumn(name = "MESSAGE", type_ = "string", json_path = ".status.message", priority = 1),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("has(self.tls) == has(oldSelf.tls)")
    .message("spec.tls cannot be added or removed after creation: a cluster is TLS-only or plaintext for its whole life (create a new ValkeyCluster instead); tls.secretRef may change, which rotates to that Secret")
    .field_path(".tls")
    .reason(Reason::FieldValueForbidden))]
#[x_kube(validation = super::backup::restore_from_rule())]
#[x_kube(validation = member_count_rule())]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterSpec {
    /// Name of the cluster-scoped ValkeyConfig (menu item) to run, for example `standard`.
    /// Resolved live: if it (or its base chain or image) is missing, the cluster is Blocked
    /// until the platform team publishes it. Changing it replaces nodes one shard at a time.
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("configRef"))]
    pub config_ref: String,

    /// Number of shards (primaries), 1 to 500. The 16384 hash slots are spread evenly over
    /// them; changing it scales out or in by migrating slots, without losing keys.
    #[schemars(range(min = 1, max = 500))]
    pub shards: i32,

    /// Replicas per shard, 0 or more (default 1; more than 5 is accepted with a warning). A
    /// cluster has at most 1000 members: shards x (1 + replicasPerShard) <= 1000. Each replica is placed apart from its primary where the nodes allow it; with 0 a lost
    /// primary loses its shard's data.
    #[serde(default = "default_replicas_per_shard")]
    #[schemars(range(min = 0))]
    pub replicas_per_shard: i32,

    /// Per-cluster ACL bindings, added to the platform-level bindings of the config.
    /// Usernames must be unique across both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = unique_usernames_rule(),
        merge_strategy = ListMerge::Map(vec!["username".into()])
    )]
    pub acl: Vec<AclBinding>,

    /// TLS for clients, replication and the cluster bus (TLS-only: the plain port is closed).
    /// Can only be set when the cluster is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// Where pods may run: zones, node selector, zone spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,

    /// Annotations put on every pod of this cluster: added, changed and removed keys reach the
    /// running pods within a reconcile, without replacing them. Keys under
    /// `valkey.gomomento.com/` are reserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::validation::annotations_map_schema")]
    #[x_kube(
        validation = qualified_keys_rule("podAnnotations"),
        validation = reserved_annotations_rule()
    )]
    pub pod_annotations: BTreeMap<String, String>,

    /// Shard autoscaling on utilization: `spec.shards` becomes the starting count and the
    /// operator moves the shard count within `[minShards, maxShards]` (docs/autoscaling.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// Backups on a schedule into a ValkeyBackupLocation, the oldest deleted beyond `keep`
    /// (docs/backup.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<super::backup::BackupSchedule>,
    /// Create the cluster with a Completed ValkeyBackup's data (docs/backup.md): same shard
    /// count as the backup; set at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<super::backup::RestoreFrom>,
    /// Reach the members from outside the Kubernetes cluster: one Service of this type per
    /// member, whose address Valkey announces to clients (the cluster bus and replication stay
    /// on pod addresses). The type must be one the ValkeyConfig allows
    /// (`spec.externalAccess.allowedTypes`); not with `tls` yet. Setting, changing or removing
    /// it replaces the members one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<super::external::ExternalAccess>,
}

fn default_replicas_per_shard() -> i32 {
    DEFAULT_REPLICAS_PER_SHARD
}

impl ValkeyCluster {
    /// The shard count the operator converges to: `spec.shards`, or with `spec.autoscaling`
    /// the target autoscaling keeps in `status.autoscaling.desiredShards` (before its first
    /// decision, `spec.shards` moved into `[minShards, maxShards]`).
    pub fn target_shards(&self) -> i32 {
        let Some(autoscaling) = &self.spec.autoscaling else {
            return self.spec.shards;
        };
        let recorded = self
            .status
            .as_ref()
            .and_then(|s| s.autoscaling.as_ref())
            .and_then(|a| a.desired_shards);
        let policy = autoscaling.policy(self.spec.replicas_per_shard);
        let shards = recorded.unwrap_or(self.spec.shards).max(1) as usize;
        crate::plan::autoscale::initial_target(&policy, shards) as i32
    }

    /// Created with `spec.restoreFrom` and the restore neither completed nor given up: restore
    /// Jobs may still run (and log in to the members as the restore user).
    pub fn restore_outstanding(&self) -> bool {
        let restore = self.status.as_ref().and_then(|s| s.restore.as_ref());
        self.spec.restore_from.is_some() && !restore.is_some_and(|r| r.completed() || r.gave_up())
    }
}

/// TLS settings of a Valkey cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Name of a `kubernetes.io/tls` Secret in the cluster's namespace holding `tls.crt`,
    /// `tls.key` and `ca.crt`, valid for `<cluster>.<namespace>.svc.cluster.local` and
    /// `*.<cluster>.<namespace>.svc.cluster.local` (cert-manager is the recommended issuer).
    /// Renewed certificates are reloaded without restarts.
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("secretRef"))]
    pub secret_ref: String,
}

/// Observed state of a Valkey cluster, written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterStatus {
    /// Overall state: Creating, Active, Updating, Blocked, Degraded or Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ClusterState>,

    /// What is happening or what is wrong, in words a product team can act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Standard conditions (for example Ready, Progressing, ConfigResolved, AclApplied).
    /// A list map keyed by `type`: one condition per type, which server-side apply merges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// The ACL revision (the `_rev-<hex>` marker of the rendered ACL file) the `AclApplied`
    /// condition describes: loaded on every member when that condition is True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl_revision: Option<String>,

    /// Every member of the Valkey cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<ClusterNodeStatus>,

    /// Where applications connect: the client Service (`host:port`; a cluster-mode client
    /// discovers every member from there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,

    /// Whether clients must connect with TLS (`spec.tls` is set) to the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,

    /// Members ready out of the members the spec asks for (`5/6`), as `kubectl get` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,

    /// Valkey version the members run; during a rollout, the versions from old to new
    /// (`8.1.1 -> 9.0.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// Where the cluster stands, in numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ClusterProgress>,

    /// TLS clusters: when the first certificate of the chain the members serve expires (the
    /// leaf in `tls.crt` or a CA in `ca.crt` it chains to), RFC 3339. Condition
    /// `CertificateExpiringSoon` turns True 30 days before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_not_after: Option<String>,

    /// When the cluster first became Active (RFC 3339); never cleared. A cluster that has been
    /// Active is never "still being created": a TLS problem makes it `Invalid` (recoverable),
    /// never `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_since: Option<String>,

    /// Clusters created with `spec.restoreFrom`: the backup, its progress, keys per shard.
    /// Written by the restore controller (its own field manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<super::backup::RestoreStatus>,

    /// What the members keep across the loss of a pod, from the config: `memory-only`,
    /// `append-only file on emptyDir (lost with the pod)`, or `volumes of <size> + append-only
    /// file` (docs/durability.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<String>,

    /// What autoscaling decided and why it holds (clusters with `spec.autoscaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingStatus>,
}

/// A cluster's figures: members asked for and ready, members still on an outdated spec (a
/// rollout's progress: 0 when done), hash slots still to move between shards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProgress {
    /// Members the spec asks for: shards x (1 + replicasPerShard).
    pub desired_members: i32,
    /// Members that run, answer and serve their role (a primary, or an in-sync replica).
    pub ready_members: i32,
    /// Members still running an outdated spec.
    pub outdated_members: i32,
    /// Hash slots still to move before every shard holds its even share.
    pub slots_to_move: i32,
}

/// Overall state of a Valkey cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ClusterState {
    /// Members are being created and the cluster formed.
    Creating,
    /// All shards serve with their replicas; all slots are covered.
    Active,
    /// A rollout, scaling or slot migration is in progress.
    Updating,
    /// A reference (config, base config, image, role, TLS secret) is broken; see the message.
    Blocked,
    /// Serving, but with missing or failing members.
    Degraded,
    /// The cluster is being deleted.
    Deleting,
    /// Has been Active, and its TLS Secret is now missing, incomplete, unparseable, for other
    /// names or expired: members keep serving on their copy and failures are still handled,
    /// nothing else changes; Active again once the Secret is usable.
    Invalid,
    /// Formed, and loading `spec.restoreFrom`'s keys; Active once they are all in.
    Restoring,
    /// Creation cannot succeed (a member's Valkey binary below the supported floor); terminal:
    /// fix the cause, delete the cluster and create it again.
    Failed,
}

/// One member of a Valkey cluster as the operator last observed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNodeStatus {
    /// Name of the ValkeyNode.
    pub name: String,
    /// Name of the pod running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Shard index.
    pub shard: i32,
    /// Role observed in Valkey (primary or replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<NodeRole>,
    /// Valkey version the member runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Lifecycle: Joining, Active or Leaving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Hash slots a primary serves, as Valkey reports them (`0-5460,10923`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<String>,
    /// For a replica: bytes of replication stream it is behind its primary (0 = in sync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<i64>,
    /// The member's PersistentVolumeClaim, the size it was created with and how much of it the
    /// append-only file uses, in whole percent (members of a config with `storage`):
    /// `shop-0-0-data-1a2b3c4d (1Gi, append-only file uses 12%)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}
