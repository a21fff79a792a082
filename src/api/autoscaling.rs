//! `spec.autoscaling` of a ValkeyCluster (`spec.topology.autoscaling` in v1beta1), what the
//! operator reports about it (`status.autoscaling`), and the utilization a member's ValkeyNode
//! shows (`status.utilization`). Momento v0.9, `../shared/spec/MOMENTO-V09.md` sections 1-3.
//!
//! The refusals are CEL rules (the object alone decides); their messages are fixed, because the
//! API server estimates a `messageExpression` that prints integers far over its cost budget.
//! [`range_problem`] is the webhook's twin that names the numbers.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::RuleExt;
use crate::plan::autoscale::{Policy, Trigger};

/// The largest scale-in window: the operator keeps this much utilization history per member.
pub const MAX_WINDOW_SECONDS: i32 = 3600;

/// Shard autoscaling: the operator adds a shard when a primary crosses a `scaleOut` threshold
/// and removes one when every primary stayed below the `scaleIn` thresholds for a whole window,
/// always within `[minShards, maxShards]`, one shard at a time, on a settled cluster only.
/// `spec.shards` is then only the starting count; `status.autoscaling.desiredShards` is the
/// target (docs/autoscaling.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.maxShards >= self.minShards")
    .message("spec.autoscaling.maxShards must be at least minShards")
    .field_path(".maxShards")
    .reason(Reason::FieldValueInvalid))]
#[x_kube(validation = below_rule("memoryPercent"))]
#[x_kube(validation = below_rule("cpuPercent"))]
#[x_kube(validation = below_rule("bandwidthMbps"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Fewest shards, 1 to 500.
    #[schemars(range(min = 1, max = 500))]
    pub min_shards: i32,

    /// Most shards, 1 to 500, at least `minShards` (and at most 1000 members with the
    /// replicas).
    #[schemars(range(min = 1, max = 500))]
    pub max_shards: i32,

    /// When to add a shard: any primary above any threshold set here. Absent: shards are never
    /// added automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out: Option<Thresholds>,

    /// When to remove a shard: every primary below every threshold set here for the whole
    /// `scaleInWindowSeconds`. Absent: shards are never removed automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in: Option<Thresholds>,

    /// How long every primary must stay below the `scaleIn` thresholds, 60 to 3600 s.
    #[serde(default = "default_scale_in_window")]
    #[schemars(range(min = 60, max = 3600))]
    pub scale_in_window_seconds: i32,

    /// Time after a scale-out (once the cluster settled) before another, 0 to 86400 s.
    #[serde(default = "default_scale_out_cooldown")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_out_cooldown_seconds: i32,

    /// Time after any scaling before a scale-in, 0 to 86400 s.
    #[serde(default = "default_scale_in_cooldown")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_in_cooldown_seconds: i32,
}

fn default_scale_in_window() -> i32 {
    300
}

fn default_scale_out_cooldown() -> i32 {
    180
}

fn default_scale_in_cooldown() -> i32 {
    900
}

/// Utilization thresholds; a trigger is active when set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    /// Memory in use relative to the member's `maxmemory` (else its container memory limit),
    /// 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub memory_percent: Option<i32>,

    /// CPU used relative to the container's CPU limit, 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub cpu_percent: Option<i32>,

    /// Network traffic in plus out (replication included), decimal megabits per second, 1 to
    /// 100000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub bandwidth_mbps: Option<i32>,
}

impl Thresholds {
    fn get(&self, trigger: Trigger) -> Option<i32> {
        match trigger {
            Trigger::Memory => self.memory_percent,
            Trigger::Cpu => self.cpu_percent,
            Trigger::Bandwidth => self.bandwidth_mbps,
        }
    }

    fn is_empty(&self) -> bool {
        Trigger::ALL.iter().all(|t| self.get(*t).is_none())
    }

    fn to_plan(&self) -> crate::plan::autoscale::Thresholds {
        let positive = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok());
        crate::plan::autoscale::Thresholds {
            memory_percent: positive(self.memory_percent),
            cpu_percent: positive(self.cpu_percent),
            bandwidth_mbps: positive(self.bandwidth_mbps),
        }
    }
}

/// A trigger's field name in the API.
pub fn field(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::Memory => "memoryPercent",
        Trigger::Cpu => "cpuPercent",
        Trigger::Bandwidth => "bandwidthMbps",
    }
}

/// The CEL rule: a trigger set in both `scaleIn` and `scaleOut` must be lower in `scaleIn`.
fn below_rule(field: &str) -> kube::core::Rule {
    kube::core::Rule::new(format!(
        "!has(self.scaleIn) || !has(self.scaleOut) || !has(self.scaleIn.{field}) \
         || !has(self.scaleOut.{field}) || self.scaleIn.{field} < self.scaleOut.{field}"
    ))
    .msg(format!(
        "spec.autoscaling.scaleIn.{field} must be below scaleOut.{field}: otherwise one \
         measurement could both add and remove a shard"
    ))
    .field_path(format!(".scaleIn.{field}"))
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// The refusal the CEL rules make, with the numbers (the webhook's message), or `None`.
pub fn range_problem(autoscaling: &Autoscaling) -> Option<String> {
    if autoscaling.max_shards < autoscaling.min_shards {
        return Some(format!(
            "spec.autoscaling.maxShards ({}) must be at least minShards ({})",
            autoscaling.max_shards, autoscaling.min_shards
        ));
    }
    let (scale_in, scale_out) = (
        autoscaling.scale_in.as_ref()?,
        autoscaling.scale_out.as_ref()?,
    );
    Trigger::ALL.into_iter().find_map(|trigger| {
        let (low, high) = (scale_in.get(trigger)?, scale_out.get(trigger)?);
        let f = field(trigger);
        (low >= high).then(|| {
            format!(
                "spec.autoscaling.scaleIn.{f} ({low}) must be below scaleOut.{f} ({high}): \
                 otherwise one measurement could both add and remove a shard"
            )
        })
    })
}

/// What a valid `spec.autoscaling` accepts but a reader may not expect (admission warnings).
pub fn shape_warnings(autoscaling: &Autoscaling, shards: i32) -> Vec<String> {
    let mut warnings = Vec::new();
    let scale_out = autoscaling.scale_out.clone().unwrap_or_default();
    if scale_out.is_empty() {
        warnings.push(
            "spec.autoscaling has no scaleOut trigger: shards are never added automatically"
                .to_string(),
        );
    }
    if let Some(scale_in) = &autoscaling.scale_in {
        for trigger in Trigger::ALL {
            if scale_in.get(trigger).is_some() && scale_out.get(trigger).is_none() {
                let f = field(trigger);
                warnings.push(format!(
                    "scaleIn.{f} has no scaleOut.{f}: shards can be removed on low {} but are \
                     never added on high {}",
                    trigger.word(),
                    trigger.word()
                ));
            }
        }
    }
    if shards < autoscaling.min_shards || shards > autoscaling.max_shards {
        warnings.push(format!(
            "spec.shards ({shards}) is outside [{}, {}]: the cluster is created with {} shards",
            autoscaling.min_shards,
            autoscaling.max_shards,
            shards.clamp(
                autoscaling.min_shards,
                autoscaling.max_shards.max(autoscaling.min_shards)
            )
        ));
    }
    warnings
}

impl Autoscaling {
    /// The policy the planner applies: defaults are in already; `maxShards` is capped so that
    /// the cluster keeps at most 1000 members with its replicas.
    pub fn policy(&self, replicas_per_shard: i32) -> Policy {
        let per_shard = 1 + usize::try_from(replicas_per_shard).unwrap_or(0);
        let member_cap = (super::constants::MAX_MEMBERS as usize / per_shard).max(1);
        let count = |v: i32| usize::try_from(v).unwrap_or(1).max(1);
        let secs = |v: i32| u64::try_from(v).unwrap_or(0);
        let min_shards = count(self.min_shards).min(member_cap);
        Policy {
            min_shards,
            max_shards: count(self.max_shards).min(member_cap).max(min_shards),
            scale_out: self
                .scale_out
                .as_ref()
                .map(Thresholds::to_plan)
                .unwrap_or_default(),
            scale_in: self
                .scale_in
                .as_ref()
                .filter(|t| !t.is_empty())
                .map(Thresholds::to_plan),
            scale_in_window_secs: secs(self.scale_in_window_seconds),
            scale_out_cooldown_secs: secs(self.scale_out_cooldown_seconds),
            scale_in_cooldown_secs: secs(self.scale_in_cooldown_seconds),
        }
    }
}

/// What autoscaling decided and why it holds (`status.autoscaling`); absent without
/// `spec.autoscaling`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// The shard count the operator converges to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_shards: Option<i32>,
    /// When a shard was last added by autoscaling (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_out_time: Option<String>,
    /// When a shard was last removed by autoscaling (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_in_time: Option<String>,
    /// The last change of `desiredShards`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<ScalingDecision>,
    /// Why no decision can be taken now: NotConverged, OutCooldown, InCooldown,
    /// HistoryTooShort, AtMaxShards, AtMinShards, WouldNotFit, NoBudget or Paused; absent when
    /// one could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holding: Option<String>,
}

/// One change of the shard target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingDecision {
    /// `Out` or `In`.
    pub direction: String,
    pub from: i32,
    pub to: i32,
    /// The figure that crossed its threshold (`memory`, `cpu`, `bandwidth`); absent for a
    /// scale-in or a range edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// RFC 3339.
    pub time: String,
}

/// A member's latest utilization, sampled by the operator every ~30 s over its connection
/// (`status.utilization` of the ValkeyNode).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationStatus {
    /// When the latest sample was taken (RFC 3339).
    pub sampled_at: String,
    /// Memory in use relative to the budget, percent; absent without a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<f64>,
    /// What `memoryPercent` is relative to: MaxMemory, ContainerLimit or None.
    pub memory_budget: String,
    /// `used_memory` of the member, bytes.
    pub memory_used_bytes: i64,
    /// CPU relative to the container's limit, percent; absent without a limit or on a first
    /// sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Traffic in plus out, replication included, decimal megabits per second; absent on a
    /// first sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
    /// The oldest sample the operator holds for this member (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_since: Option<String>,
    /// Peaks over the owning cluster's scale-in window (clusters with `spec.autoscaling`),
    /// once the history covers the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_peak: Option<PeakFigures>,
}

/// Peak figures over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeakFigures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn autoscaling(min: i32, max: i32) -> Autoscaling {
        Autoscaling {
            min_shards: min,
            max_shards: max,
            scale_out: Some(Thresholds {
                memory_percent: Some(80),
                ..Thresholds::default()
            }),
            scale_in: Some(Thresholds {
                memory_percent: Some(40),
                ..Thresholds::default()
            }),
            scale_in_window_seconds: 300,
            scale_out_cooldown_seconds: 180,
            scale_in_cooldown_seconds: 900,
        }
    }

    #[test]
    fn defaults_are_momentos() {
        let a: Autoscaling = serde_json::from_value(serde_json::json!({
            "minShards": 2, "maxShards": 4
        }))
        .unwrap();
        assert_eq!(
            (
                a.scale_in_window_seconds,
                a.scale_out_cooldown_seconds,
                a.scale_in_cooldown_seconds
            ),
            (300, 180, 900)
        );
    }

    #[test]
    fn range_problem_names_the_numbers() {
        assert_eq!(
            range_problem(&autoscaling(6, 4)).unwrap(),
            "spec.autoscaling.maxShards (4) must be at least minShards (6)"
        );
        let mut a = autoscaling(2, 4);
        assert_eq!(range_problem(&a), None);
        a.scale_in.as_mut().unwrap().memory_percent = Some(80);
        assert!(range_problem(&a).unwrap().starts_with(
            "spec.autoscaling.scaleIn.memoryPercent (80) must be below scaleOut.memoryPercent (80)"
        ));
    }

    #[test]
    fn warnings_name_what_is_unusual() {
        let mut a = autoscaling(5, 12);
        assert_eq!(
            shape_warnings(&a, 3),
            ["spec.shards (3) is outside [5, 12]: the cluster is created with 5 shards"]
        );
        a.scale_out = None;
        a.scale_in.as_mut().unwrap().cpu_percent = Some(10);
        let w = shape_warnings(&a, 5);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("no scaleOut trigger"));
        assert!(
            w.iter()
                .any(|w| w.starts_with("scaleIn.cpuPercent has no scaleOut.cpuPercent"))
        );
    }

    #[test]
    fn policy_caps_max_shards_by_the_member_limit() {
        let mut a = autoscaling(2, 500);
        a.scale_in = Some(Thresholds::default());
        let p = a.policy(3);
        assert_eq!((p.min_shards, p.max_shards), (2, 250));
        assert_eq!(p.scale_in, None, "an empty scaleIn never removes shards");
        assert_eq!(p.scale_out.memory_percent, Some(80));
    }
}
