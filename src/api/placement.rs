//! Where a Valkey cluster's pods may run.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::{ZONE_NAME, label_values_rule, qualified_keys_rule};

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
