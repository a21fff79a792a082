//! ValkeyMeteringRecord: the usage of one ValkeyCluster in GB-hours (Momento v0.9,
//! `../shared/spec/MOMENTO-V09.md` section 7). Written only by the operator, in its own
//! namespace; it outlives its cluster until the platform team releases it with
//! [`RELEASE_ANNOTATION`].

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The finalizer every record carries: a plain `kubectl delete` leaves it terminating, so a
/// bill is never lost by accident.
pub const RETAIN_FINALIZER: &str = "valkey.gomomento.com/metering-retain";
/// `"true"`: the operator removes [`RETAIN_FINALIZER`] and deletes the record.
pub const RELEASE_ANNOTATION: &str = "valkey.gomomento.com/release";
/// Labels naming the metered cluster; the operator finds a cluster's record by the uid.
pub const LABEL_CLUSTER_NAMESPACE: &str = "valkey.gomomento.com/cluster-namespace";
pub const LABEL_CLUSTER_NAME: &str = "valkey.gomomento.com/cluster-name";
pub const LABEL_CLUSTER_UID: &str = "valkey.gomomento.com/cluster-uid";

/// The spec of a record is written once, at creation.
pub const SPEC_IMMUTABLE: &str = "spec of a ValkeyMeteringRecord is written once by the operator \
     and cannot change; to start a new record, annotate this one with \
     valkey.gomomento.com/release=\"true\"";

/// Usage of one ValkeyCluster, in GB-hours (GB = 10^9 bytes). Created by the operator when it
/// first reconciles the cluster; kept after the cluster is deleted until released.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyMeteringRecord",
    doc = "Usage of one ValkeyCluster in GB-hours, written by the operator in its own namespace. It outlives the cluster until annotated valkey.gomomento.com/release=\"true\". Export with kubectl get valkeymeteringrecords -o json.",
    plural = "valkeymeteringrecords",
    category = "valkey",
    namespaced,
    status = "ValkeyMeteringRecordStatus",
    cel,
    validation = Rule::new("self.spec == oldSelf.spec").message(SPEC_IMMUTABLE).field_path(".spec"),
    printcolumn(name = "CLUSTER", type_ = "string", json_path = ".spec.cluster.name", description = "The metered ValkeyCluster"),
    printcolumn(name = "NAMESPACE", type_ = "string", json_path = ".spec.cluster.namespace", description = "Its namespace"),
    printcolumn(name = "GB-HOURS", type_ = "string", json_path = ".status.totalGBHours", description = "Usage accounted so far"),
    printcolumn(name = "SINCE", type_ = "date", json_path = ".spec.startedAt", description = "When this record started counting"),
    printcolumn(name = "DELETED", type_ = "string", json_path = ".status.clusterDeletedAt", description = "When the cluster was deleted")
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyMeteringRecordSpec {
    /// The metered cluster.
    pub cluster: MeteredCluster,
    /// 1 for a cluster's first record, +1 for each record created after a release.
    #[schemars(range(min = 1))]
    pub sequence: i64,
    /// When this record started counting (RFC 3339).
    pub started_at: String,
}

/// Which ValkeyCluster a record meters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeteredCluster {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What a record has accounted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyMeteringRecordStatus {
    /// Always `GB-hours` (GB = 10^9 bytes, hour = 3600 s).
    #[serde(default)]
    pub unit: String,
    /// Everything accounted: a decimal string with six places (no float rounding).
    #[serde(default, rename = "totalGBHours")]
    pub total_gb_hours: String,
    /// The exact total in byte-seconds (an integer string), from which the GB-hours are
    /// derived.
    #[serde(default)]
    pub total_byte_seconds: String,
    /// Usage is accounted up to this instant (RFC 3339).
    #[serde(default)]
    pub accounted_until: String,
    /// When the cluster was deleted (RFC 3339); nothing is added after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_deleted_at: Option<String>,
    /// UTC days, oldest first; at most 400, older ones folded into `totalBeforeDays`.
    #[serde(default)]
    pub days: Vec<MeteredDay>,
    /// GB-hours of the days folded away.
    #[serde(default)]
    pub total_before_days: String,
    /// Byte-seconds of the days folded away (integer string).
    #[serde(default)]
    pub byte_seconds_before_days: String,
    /// Operator downtime that was accounted afterwards, from the members whose pods existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<MeteringGap>,
}

/// One UTC day of a record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeteredDay {
    /// `YYYY-MM-DD`.
    pub date: String,
    /// The day's usage, six decimals.
    pub gb_hours: String,
    /// The most members counted at once that day.
    pub peak_nodes: i64,
    /// GB-hours by where each member's figure came from: Reserved (resources.memory),
    /// MaxMemory, Observed, Floor (100 MB).
    #[serde(default)]
    pub by_source: BTreeMap<String, String>,
    /// The same in exact byte-seconds (integer strings).
    #[serde(default)]
    pub byte_seconds: BTreeMap<String, String>,
}

/// A stretch of operator downtime accounted after the fact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeteringGap {
    pub from: String,
    pub to: String,
}
