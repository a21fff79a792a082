//! Version `v1beta1` of ValkeyCluster and ValkeyConfig, served next to `v1alpha1` (the storage
//! version) and converted by the operator's `/convert` webhook ([`crate::webhook::conversion`]).
//!
//! What changed:
//! * ValkeyCluster: `shards` and `replicasPerShard` are grouped under `spec.topology`.
//! * ValkeyConfig: `spec.valkey` (the Valkey settings) is called `spec.settings`.
//!
//! Everything else (and every status) is the same as in `v1alpha1`, with the same rules.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::acl::{AclBinding, unique_usernames_rule};
use super::cluster::{TlsSpec, ValkeyClusterStatus};
use super::config::ValkeyConfigStatus;
use super::constants::DEFAULT_REPLICAS_PER_SHARD;
use super::placement::Placement;
use super::resources::Resources;
use super::validation::{
    CLUSTER_NAME, DNS1123_SUBDOMAIN, RuleExt, frozen_while_creating_rule, member_count_rule,
    qualified_keys_rule, refused_settings_rules, reserved_annotations_rule, setting_keys_rule,
    setting_values_rule,
};

/// A sharded Valkey cluster (cluster mode) in this namespace; see the v1alpha1 version.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1beta1",
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
    printcolumn(name = "SHARDS", type_ = "integer", json_path = ".spec.topology.shards", description = "Number of shards (primaries); with spec.topology.autoscaling, the starting count"),
    printcolumn(name = "DESIRED SHARDS", type_ = "integer", json_path = ".status.autoscaling.desiredShards", description = "The shard count autoscaling converges to (spec.topology.autoscaling)"),
    printcolumn(name = "REPLICAS", type_ = "integer", json_path = ".spec.topology.replicasPerShard", description = "Replicas per shard"),
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
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterSpec {
    /// Name of the cluster-scoped ValkeyConfig (menu item) to run, for example `standard`.
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("configRef"))]
    pub config_ref: String,

    /// How many shards and replicas.
    pub topology: Topology,

    /// Per-cluster ACL bindings, added to the platform-level bindings of the config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = unique_usernames_rule(),
        merge_strategy = ListMerge::Map(vec!["username".into()])
    )]
    pub acl: Vec<AclBinding>,

    /// TLS for clients, replication and the cluster bus. Can only be set at creation.
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

    /// Backups on a schedule (as in v1alpha1).
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

/// Shards and replicas of a Valkey cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = member_count_rule())]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// Number of shards (primaries), 1 to 500; changing it migrates slots without losing keys.
    #[schemars(range(min = 1, max = 500))]
    pub shards: i32,

    /// Replicas per shard, 0 or more (default 1; more than 5 is accepted with a warning); at
    /// most 1000 members: shards x (1 + replicasPerShard) <= 1000.
    #[serde(default = "default_replicas_per_shard")]
    #[schemars(range(min = 0))]
    pub replicas_per_shard: i32,

    /// Shard autoscaling on utilization; `autoscaling` in v1alpha1's spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<super::autoscaling::Autoscaling>,
}

fn default_replicas_per_shard() -> i32 {
    DEFAULT_REPLICAS_PER_SHARD
}

/// A configuration menu item (platform team); see the v1alpha1 version.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1beta1",
    kind = "ValkeyConfig",
    doc = "A curated configuration menu item (cluster-scoped, platform team): image, resources, Valkey settings and platform ACL bindings, with inheritance via spec.baseRef. Product teams select one in ValkeyCluster.spec.configRef.",
    plural = "valkeyconfigs",
    shortname = "vkcfg",
    category = "valkey",
    status = "ValkeyConfigStatus",
    cel,
    validation = Rule::new("!has(self.spec.baseRef) || self.spec.baseRef != self.metadata.name")
        .message("spec.baseRef must name another ValkeyConfig: a config cannot inherit from itself")
        .field_path(".spec.baseRef"),
    printcolumn(name = "BASE", type_ = "string", json_path = ".spec.baseRef", description = "ValkeyConfig this one inherits from"),
    printcolumn(name = "IMAGE", type_ = "string", json_path = ".spec.imageRef", description = "ValkeyImage set on this config (inherited when empty)"),
    printcolumn(name = "CPU", type_ = "string", json_path = ".spec.resources.cpu", priority = 1),
    printcolumn(name = "MEMORY", type_ = "string", json_path = ".spec.resources.memory", priority = 1),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyConfigSpec {
    /// Name of the ValkeyConfig this one inherits from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("baseRef"))]
    pub base_ref: Option<String>,

    /// Name of the ValkeyImage (allowlist entry) nodes run; inherited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("imageRef"))]
    pub image_ref: Option<String>,

    /// CPU and memory of every Valkey container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Valkey settings (valkey.conf names, lowercase) and their values; `valkey` in v1alpha1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::validation::settings_map_schema")]
    #[x_kube(
        validation = setting_keys_rule("settings"),
        validation = setting_values_rule("settings"),
        validation = refused_settings_rules("spec.settings")[0].clone(),
        validation = refused_settings_rules("spec.settings")[1].clone(),
        validation = refused_settings_rules("spec.settings")[2].clone()
    )]
    pub settings: BTreeMap<String, String>,

    /// Platform-level ACL bindings applied to every Valkey cluster using this config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = unique_usernames_rule(),
        merge_strategy = ListMerge::Map(vec!["username".into()])
    )]
    pub acl: Option<Vec<AclBinding>>,

    /// Scheduling of the members (tolerations, priority class); see the v1alpha1 version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<super::placement::Scheduling>,

    /// Volumes of the members; see the v1alpha1 version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<super::storage::Storage>,

    /// Valkey's own metrics (exporter sidecar, scrapers); see the v1alpha1 version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<super::metrics::Metrics>,

    /// Which Service types clusters on this config may ask for in `spec.externalAccess` to be
    /// reached from outside the Kubernetes cluster (one Service per member). Set here, it
    /// replaces the base's; unset: inherited (nowhere in the chain: no external access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<super::external::ExternalAccessPolicy>,
}
