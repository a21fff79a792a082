//! Where a Valkey cluster's pods may run.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::{
    DNS1123_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME, ZONE_NAME, label_values_rule,
    qualified_keys_rule,
};

/// Placement of a Valkey cluster's pods. Changing `zones` or `nodeSelector` replaces nodes one
/// shard at a time; changing `zoneSpread` affects only pods created afterwards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Zones the pods may run in (required node affinity on `topology.kubernetes.io/zone`).
    /// Empty: any zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 63)))]
    #[x_kube(
        validation = ZONE_NAME.each_rule("zones"),
        merge_strategy = ListMerge::Set
    )]
    pub zones: Vec<String>,

    /// Node labels a node must carry to run these pods (copied verbatim into the pods'
    /// nodeSelector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::validation::node_selector_schema")]
    #[x_kube(
        validation = qualified_keys_rule("nodeSelector"),
        validation = label_values_rule("nodeSelector")
    )]
    pub node_selector: BTreeMap<String, String>,

    /// How members of one shard are spread over zones: `bestEffort` (topology spread with
    /// maxSkew 1, ScheduleAnyway) or `required` (DoNotSchedule, plus a soft cluster-wide zone
    /// spread). Unset: the operator's `defaultZoneSpread` setting. Members of a shard are always
    /// spread over hosts where possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_spread: Option<ZoneSpread>,
}

/// Zone spread mode for the members of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ZoneSpread {
    /// Prefer spreading a shard's members over zones (whenUnsatisfiable: ScheduleAnyway).
    BestEffort,
    /// Refuse to schedule a member that would unbalance its shard's zones (DoNotSchedule).
    Required,
}

impl ZoneSpread {
    /// The topology spread constraint's `whenUnsatisfiable` value for this mode.
    pub fn when_unsatisfiable(self) -> &'static str {
        match self {
            ZoneSpread::BestEffort => "ScheduleAnyway",
            ZoneSpread::Required => "DoNotSchedule",
        }
    }
}

/// A word that is not a [`ZoneSpread`] mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("zoneSpread must be bestEffort or required, got {0:?}")]
pub struct UnknownZoneSpread(pub String);

impl std::str::FromStr for ZoneSpread {
    type Err = UnknownZoneSpread;

    /// Parses `bestEffort` or `required` (the operator settings ConfigMap uses the same words).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bestEffort" => Ok(ZoneSpread::BestEffort),
            "required" => Ok(ZoneSpread::Required),
            other => Err(UnknownZoneSpread(other.to_owned())),
        }
    }
}

/// Scheduling of a config's members (platform team, `ValkeyConfig.spec.scheduling`): what a
/// product team's cluster cannot choose. Set on a config, it replaces the base's as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    /// Taints the members tolerate (copied to the pods), for example a node pool reserved
    /// for Valkey with `dedicated=valkey:NoSchedule`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub tolerations: Vec<Toleration>,

    /// PriorityClass of the members' pods (it must exist; pods are not created until it does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("priorityClassName"))]
    pub priority_class_name: Option<String>,

    /// Node affinity of the members, on top of the cluster's `placement` (a node must satisfy
    /// both): for example a node pool chosen by label, or an instance type preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,

    /// Further topology spread of the members, beyond the hosts and zones the operator always
    /// spreads a shard over: for example racks (`topology.example.com/rack`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = super::validation::unique_by_rule("topologySpread", "topologyKey"))]
    pub topology_spread: Vec<TopologySpread>,
}

/// Which nodes may, and which should preferably, run the members.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    /// A node must match at least one of these terms (empty: any node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub required: Vec<NodeSelectorTerm>,

    /// Nodes matching these terms are preferred, by the sum of their weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub preferred: Vec<PreferredNodes>,
}

/// Node label requirements that must all hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    /// Requirements on the node's labels, all of which must hold.
    #[schemars(length(min = 1, max = 16))]
    pub match_expressions: Vec<NodeRequirement>,
}

/// A weighted preference for nodes matching a term.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreferredNodes {
    /// 1 to 100: how much a node matching the term is preferred.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    /// The nodes preferred.
    pub preference: NodeSelectorTerm,
}

/// A requirement on one node label, as in a pod's node affinity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(self.operator in ['In', 'NotIn']) || size(self.values) > 0")
    .message("operators In and NotIn need at least one value"))]
#[x_kube(validation = Rule::new("!(self.operator in ['Exists', 'DoesNotExist']) || size(self.values) == 0")
    .message("operators Exists and DoesNotExist take no values: leave values empty"))]
#[x_kube(validation = Rule::new("!(self.operator in ['Gt', 'Lt']) || (size(self.values) == 1 && self.values[0].matches('^-?[0-9]+$'))")
    .message("operators Gt and Lt take exactly one integer value"))]
pub struct NodeRequirement {
    /// The node label's key, for example `node.kubernetes.io/instance-type`.
    #[schemars(length(max = 317))]
    #[x_kube(validation = QUALIFIED_NAME.rule("key"))]
    pub key: String,
    /// How the label's value is matched.
    pub operator: NodeOperator,
    /// Values for `In`, `NotIn` (one or more), `Gt` and `Lt` (exactly one integer).
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    #[x_kube(validation = LABEL_VALUE.each_rule("values"))]
    pub values: Vec<String>,
}

/// How a node requirement matches a label's value.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum NodeOperator {
    #[default]
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// Members spread over one more topology key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpread {
    /// Node label whose values are the domains to spread over, for example
    /// `topology.example.com/rack`.
    #[schemars(length(max = 317))]
    #[x_kube(validation = QUALIFIED_NAME.rule("topologyKey"))]
    #[x_kube(validation = Rule::new("!(self in ['kubernetes.io/hostname', 'topology.kubernetes.io/zone'])")
        .message("the operator spreads every shard over kubernetes.io/hostname and topology.kubernetes.io/zone itself (a cluster's placement.zoneSpread chooses how over zones): spread over another key"))]
    pub topology_key: String,

    /// Most members one domain may have more than another (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_skew: Option<i32>,

    /// `ScheduleAnyway` (default: a preference) or `DoNotSchedule` (a member that would
    /// unbalance the domains waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_unsatisfiable: Option<WhenUnsatisfiable>,

    /// Whose members are spread: each `shard`'s (default; a shard's primary and replicas
    /// apart) or the whole `cluster`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<SpreadScope>,
}

/// What the scheduler does with a member it cannot place within the skew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum WhenUnsatisfiable {
    ScheduleAnyway,
    DoNotSchedule,
}

/// The members a topology spread counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SpreadScope {
    /// The members of one shard.
    Shard,
    /// Every member of the cluster.
    Cluster,
}

/// A toleration, as in a pod's `spec.tolerations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''")
    .message("a toleration with operator Exists matches any value: leave value empty"))]
#[x_kube(validation = Rule::new("has(self.key) || (has(self.operator) && self.operator == 'Exists')")
    .message("a toleration without a key must use operator Exists (it then tolerates every taint)"))]
pub struct Toleration {
    /// Taint key; empty with operator `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    #[x_kube(validation = QUALIFIED_NAME.rule("key"))]
    pub key: Option<String>,

    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,

    /// Taint value to match with `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = LABEL_VALUE.rule("value"))]
    pub value: Option<String>,

    /// Taint effect to match (empty: every effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,

    /// For `NoExecute`: how long a member stays on a node after the taint appears (unset:
    /// for ever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration matches a taint's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

/// A taint effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Toleration {
    /// The pod's toleration.
    pub fn to_pod(&self) -> k8s_openapi::api::core::v1::Toleration {
        k8s_openapi::api::core::v1::Toleration {
            key: self.key.clone(),
            operator: self.operator.map(|o| format!("{o:?}")),
            value: self.value.clone(),
            effect: self.effect.map(|e| format!("{e:?}")),
            toleration_seconds: self.toleration_seconds,
        }
    }
}

impl NodeSelectorTerm {
    /// The pod's node selector term, with `also` added to its requirements.
    pub fn to_pod(
        &self,
        also: &[k8s_openapi::api::core::v1::NodeSelectorRequirement],
    ) -> k8s_openapi::api::core::v1::NodeSelectorTerm {
        let own = self.match_expressions.iter().map(NodeRequirement::to_pod);
        k8s_openapi::api::core::v1::NodeSelectorTerm {
            match_expressions: Some(own.chain(also.iter().cloned()).collect()),
            match_fields: None,
        }
    }
}

impl NodeRequirement {
    /// The pod's node selector requirement.
    pub fn to_pod(&self) -> k8s_openapi::api::core::v1::NodeSelectorRequirement {
        k8s_openapi::api::core::v1::NodeSelectorRequirement {
            key: self.key.clone(),
            operator: format!("{:?}", self.operator),
            values: (!self.values.is_empty()).then(|| self.values.clone()),
        }
    }
}
