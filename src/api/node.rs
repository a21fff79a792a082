//! ValkeyNode: the operator's record of one Valkey cluster member. Operator-internal: users
//! read it, only the operator writes it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::placement::{NodeAffinity, Toleration, TopologySpread, ZoneSpread};
use super::resources::Resources;

/// One member of a Valkey cluster with its fully resolved, immutable spec (image, resources,
/// rendered settings, placement, shard). Created, updated (status) and deleted by the operator
/// only: when anything about a member must change, the operator creates a replacement
/// ValkeyNode and retires this one. Read it to observe lifecycle (Joining, Active, Leaving);
/// do not create or edit it.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyNode",
    doc = "Operator-internal record of one Valkey cluster member with its fully resolved, immutable spec. Read it to observe lifecycle (Joining, Active, Leaving); only the operator creates, changes or deletes it.",
    plural = "valkeynodes",
    shortname = "vkn",
    category = "valkey",
    namespaced,
    status = "ValkeyNodeStatus",
    cel,
    printcolumn(
        name = "CLUSTER",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "ValkeyCluster this member belongs to"
    ),
    printcolumn(
        name = "SHARD",
        type_ = "integer",
        json_path = ".spec.shard",
        description = "Shard index"
    ),
    printcolumn(
        name = "ROLE",
        type_ = "string",
        json_path = ".status.role",
        description = "Role observed in Valkey"
    ),
    printcolumn(
        name = "PHASE",
        type_ = "string",
        json_path = ".status.lifecycle",
        description = "Lifecycle: Joining, Active or Leaving"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        priority = 1
    ),
    printcolumn(
        name = "POD",
        type_ = "string",
        json_path = ".status.pod",
        priority = 1
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a ValkeyNode is immutable: the operator replaces nodes instead of changing them")
    .reason(Reason::FieldValueForbidden))]
#[serde(rename_all = "camelCase")]
pub struct ValkeyNodeSpec {
    /// Name of the ValkeyCluster (same namespace) this member belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// Shard index, from 0.
    #[schemars(range(min = 0, max = 499))]
    pub shard: i32,

    /// Role the member was created for (a replacement primary starts as a replica and is
    /// failed over to). The actual role is always read from Valkey and shown in status.role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_hint: Option<NodeRole>,

    /// Name of the ValkeyConfig the spec was resolved from (the cluster's configRef).
    #[schemars(length(max = 253))]
    pub config_ref: String,

    /// Name of the ValkeyImage the image came from.
    #[schemars(length(max = 253))]
    pub image_ref: String,

    /// Full container image reference (`repository:tag` or `repository@digest`).
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// Secrets in the member's namespace the kubelet pulls the image with (the ValkeyImage's
    /// `imagePullSecrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 253)))]
    pub image_pull_secrets: Vec<String>,

    /// Valkey version the image provides.
    #[schemars(length(max = 128))]
    pub version: String,

    /// CPU and memory of the Valkey container.
    pub resources: Resources,

    /// Resolved Valkey settings (the merged `valkey` map of the config chain, without the
    /// forced settings, which the operator adds when rendering valkey.conf).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub valkey: BTreeMap<String, String>,

    /// Hash of the rendered valkey.conf the pod runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,

    /// Resolved placement.
    #[serde(default)]
    pub placement: NodePlacement,

    /// Name of the Secret with the certificate when the cluster uses TLS: the operator's own
    /// copy (`<cluster>-member-tls`) of the cluster's `tls.secretRef`, so pointing
    /// `tls.secretRef` at another Secret rotates the certificate without changing this spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_ref: Option<String>,

    /// Whether the member's Valkey may be restarted in place when its process dies (OOM kill,
    /// SIGKILL, crash) or its pod is recreated: only when it keeps its data across a restart
    /// (`appendonly yes`), or when its shard has no replica that could copy an empty dataset
    /// from it. Otherwise (`false`) a dead process is never brought back under its old identity
    /// (pod `restartPolicy: Never`, a lost pod is not recreated): the operator promotes the
    /// shard's most up-to-date replica and replaces the member. Unset on members created
    /// before this field existed: restarted in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_in_place: Option<bool>,

    /// The member's volume (`ValkeyConfig.spec.storage` when the member was created): its
    /// PersistentVolumeClaim is mounted at Valkey's data directory. Unset: memory-only
    /// (`emptyDir`). The size and retention here are those at creation; a later change
    /// of either on the menu does not replace the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<super::storage::Storage>,

    /// The metrics exporter the member runs beside Valkey (`ValkeyConfig.spec.metrics` when
    /// the member was created). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exporter: Option<super::metrics::MemberExporter>,

    /// The Service type giving this member an address outside the Kubernetes cluster (the
    /// cluster's `spec.externalAccess` when the member was created): the node controller
    /// creates it before the pod, and Valkey announces its address to clients. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<super::external::ExternalServiceType>,
}

impl ValkeyNodeSpec {
    /// Restarted in place (see `restart_in_place`); members from before the field: yes.
    pub fn restarts_in_place(&self) -> bool {
        self.restart_in_place.unwrap_or(true)
    }
}

/// Resolved placement of one member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    /// Allowed zones (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Node selector copied to the pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Zone spread mode (resolved: the cluster's, or the operator default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_spread: Option<ZoneSpread>,
    /// Tolerations of the config chain (`ValkeyConfig.spec.scheduling`; bounded as there, so
    /// the API server can cost the per-item rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub tolerations: Vec<Toleration>,
    /// PriorityClass of the config chain (`ValkeyConfig.spec.scheduling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub priority_class_name: Option<String>,
    /// Node affinity of the config chain (`ValkeyConfig.spec.scheduling`), on top of `zones`
    /// and `nodeSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// Further topology spread of the config chain (`ValkeyConfig.spec.scheduling`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread: Vec<TopologySpread>,
}

/// Role of a member in its shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    /// Owns the shard's slots and takes writes.
    Primary,
    /// Replicates the shard's primary.
    Replica,
}

/// Lifecycle of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Lifecycle {
    /// Created; pod starting, meeting the cluster, syncing.
    Joining,
    /// Serving as a full member.
    Active,
    /// Being retired (replaced or scaled in): slots drained, then forgotten.
    Leaving,
}

/// Observed state of a member, written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyNodeStatus {
    /// Lifecycle: Joining, Active or Leaving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Role observed in Valkey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<NodeRole>,
    /// Name of the pod running this member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Valkey cluster node ID (40 hex characters) once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Human-readable detail about the current lifecycle step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Times this member's pod was started again because its Valkey exited before the member
    /// ever joined the cluster (a bad setting, an image without TLS...): each next try waits
    /// twice as long, from 10 s up to 5 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failures: Option<i32>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions (for example Ready, Synced).
    /// A list map keyed by `type`: one condition per type, which server-side apply merges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The member's latest utilization (memory, CPU, bandwidth), sampled every ~30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<super::autoscaling::UtilizationStatus>,
}
