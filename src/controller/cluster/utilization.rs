//! Utilization samples (Momento v0.9, MOMENTO-V09.md section 2). The cluster's reconcile
//! already asks every member `INFO` (with `memory cpu stats`) over the operator's connection,
//! and a settled cluster is looked at every 30 s, so sampling costs no extra round trip: each
//! observation whose member's period is due becomes a sample. History stays in operator memory
//! (a restart only delays a scale-in, the safe direction); each member's ValkeyNode shows its
//! latest figures and window peaks (`status.utilization`), one write per period. Those writes
//! trigger no reconcile (`run.rs` filters them out of the watch streams).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::time::rfc3339;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::debug;

use super::observed::Observed;
use crate::api::autoscaling::{PeakFigures, UtilizationStatus};
use crate::api::{NodeRole, ValkeyNode};
use crate::plan::autoscale::{Load, MemberLoad};
use crate::plan::utilization::{History, MemoryBudget, Sample, figures};

/// A member's sampling period.
pub const PERIOD_SECS: u64 = 30;

/// An observation this long after the member's last sample is the next sample (a reconcile a
/// little early still counts for the period it falls in).
const DUE_AFTER_MS: u64 = 27_000;

/// A member unseen this long is forgotten (its cluster or the member itself is gone).
const FORGET_AFTER_SECS: u64 = 2 * 3600;

/// What a cluster's members are measured against: the resolved config's container limits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Budget {
    pub memory_limit: Option<u64>,
    pub cpu_cores: Option<f64>,
}

impl Budget {
    pub fn of(resources: &crate::api::Resources) -> Budget {
        Budget {
            memory_limit: resources
                .memory
                .as_deref()
                .and_then(|m| crate::resolve::memory::parse_quantity_bytes(m).ok())
                .and_then(|b| u64::try_from(b).ok()),
            cpu_cores: resources
                .cpu
                .as_deref()
                .and_then(crate::plan::utilization::cpu_cores),
        }
    }
}

/// One member's samples.
#[derive(Debug, Default)]
struct Held {
    /// The latest answer, for the next rates.
    last: Option<Sample>,
    /// When the latest period was recorded (answer or not), Unix milliseconds.
    recorded_ms: u64,
    history: History,
    budget: Option<MemoryBudget>,
}

/// Every member's samples, by `namespace/name` of its ValkeyNode.
#[derive(Default)]
pub struct Samples {
    members: Mutex<HashMap<String, Held>>,
}

impl Samples {
    /// Records this round's observations of members whose period is due (a member that did not
    /// answer records a missing sample) and returns the statuses to publish, by member name.
    /// `window`: the scale-in window of the cluster's autoscaling, for the peaks.
    pub fn record(
        &self,
        namespace: &str,
        observed: &[Observed],
        budget: Budget,
        window: Option<u64>,
        now_ms: u64,
    ) -> Vec<(String, UtilizationStatus)> {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let now_secs = now_ms / 1000;
        members.retain(|_, h| now_ms.saturating_sub(h.recorded_ms) < FORGET_AFTER_SECS * 1000);
        let mut publish = Vec::new();
        for o in observed {
            let held = members
                .entry(format!("{namespace}/{}", o.member.name))
                .or_default();
            if held.recorded_ms != 0 && now_ms.saturating_sub(held.recorded_ms) < DUE_AFTER_MS {
                continue;
            }
            held.recorded_ms = now_ms;
            let Some(usage) = o.usage else {
                held.history.record(now_secs, None);
                continue;
            };
            let sample = Sample {
                at_ms: now_ms,
                used_memory: usage.counted_memory(),
                maxmemory: usage.maxmemory,
                cpu_seconds: usage.cpu_micros as f64 / 1e6,
                net_bytes: usage.net_bytes,
            };
            let (load, budget_kind) = figures(
                held.last.as_ref(),
                &sample,
                budget.memory_limit,
                budget.cpu_cores,
            );
            held.last = Some(sample);
            held.budget = Some(budget_kind);
            held.history.record(now_secs, Some(load));
            publish.push((
                o.member.name.clone(),
                status_of(held, load, usage.used_memory, window, now_secs),
            ));
        }
        publish
    }

    /// What the autoscaling decision reads of each member: its latest figures (none when it
    /// did not answer in its latest period) and its peaks over `window`.
    pub fn loads(
        &self,
        namespace: &str,
        observed: &[Observed],
        window: u64,
        now_secs: u64,
    ) -> Vec<MemberLoad> {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        observed
            .iter()
            .map(|o| {
                let held = members.get(&format!("{namespace}/{}", o.member.name));
                let view = o.member.view.as_ref();
                MemberLoad {
                    name: o.member.name.clone(),
                    shard: o.member.shard,
                    primary: o.role == Some(NodeRole::Primary),
                    slots: view.map_or(0, |v| v.slots.iter().map(|r| r.len()).sum()),
                    latest: held.and_then(|h| h.history.latest()),
                    window_peak: held.and_then(|h| h.history.peak(now_secs, window)),
                }
            })
            .collect()
    }
}

fn status_of(
    held: &Held,
    load: Load,
    used_memory: u64,
    window: Option<u64>,
    now_secs: u64,
) -> UtilizationStatus {
    let peak = window.and_then(|w| held.history.peak(now_secs, w));
    UtilizationStatus {
        sampled_at: rfc3339(now_secs as i64),
        memory_percent: load.memory_percent,
        memory_budget: format!("{:?}", held.budget.unwrap_or(MemoryBudget::None)),
        memory_used_bytes: i64::try_from(used_memory).unwrap_or(i64::MAX),
        cpu_percent: load.cpu_percent,
        bandwidth_mbps: load.bandwidth_mbps,
        history_since: held.history.since().map(|s| rfc3339(s as i64)),
        window_peak: peak.map(|p| PeakFigures {
            memory_percent: p.memory_percent,
            cpu_percent: p.cpu_percent,
            bandwidth_mbps: p.bandwidth_mbps,
        }),
    }
}

/// The merge patch that sets a member's utilization: a figure absent now is removed
/// (`null`), never left from an earlier sample.
pub fn utilization_patch(status: &UtilizationStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        for key in [
            "memoryPercent",
            "cpuPercent",
            "bandwidthMbps",
            "historySince",
            "windowPeak",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
        if let Some(Value::Object(peak)) = map.get_mut("windowPeak") {
            for key in ["memoryPercent", "cpuPercent", "bandwidthMbps"] {
                peak.entry(key).or_insert(Value::Null);
            }
        }
    }
    json!({"status": {"utilization": value}})
}

/// Writes each member's utilization onto its ValkeyNode's status. A failed write is logged
/// and left to the next period: utilization is never worth failing a reconcile for.
pub async fn publish(api: &Api<ValkeyNode>, statuses: Vec<(String, UtilizationStatus)>) {
    for (name, status) in statuses {
        let patch = utilization_patch(&status);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            debug!(member = %name, "utilization not written: {e}");
        }
    }
}

/// A ValkeyNode as the controllers' watch streams compare it: everything but its utilization
/// and the metadata every write changes, hashed; a write of utilization alone compares equal
/// and reconciles nothing (`predicate_filter`).
pub fn without_utilization(node: &ValkeyNode) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let meta = &node.metadata;
    (
        &meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.finalizers,
        meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        meta.owner_references.as_ref().map(|o| o.len()),
    )
        .hash(&mut hasher);
    let status = node.status.clone().map(|mut s| {
        s.utilization = None;
        s
    });
    serde_json::to_string(&status)
        .unwrap_or_default()
        .hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_removes_figures_absent_now() {
        let status = UtilizationStatus {
            sampled_at: "2026-12-05T10:00:00Z".into(),
            memory_percent: Some(12.5),
            memory_budget: "MaxMemory".into(),
            memory_used_bytes: 1024,
            window_peak: Some(PeakFigures {
                memory_percent: Some(20.0),
                ..PeakFigures::default()
            }),
            ..UtilizationStatus::default()
        };
        assert_eq!(
            utilization_patch(&status),
            json!({"status": {"utilization": {
                "sampledAt": "2026-12-05T10:00:00Z",
                "memoryPercent": 12.5,
                "memoryBudget": "MaxMemory",
                "memoryUsedBytes": 1024,
                "cpuPercent": null,
                "bandwidthMbps": null,
                "historySince": null,
                "windowPeak": {"memoryPercent": 20.0, "cpuPercent": null, "bandwidthMbps": null}
            }}})
        );
    }

    #[test]
    fn a_utilization_write_alone_compares_equal() {
        let mut node: ValkeyNode = serde_json::from_value(json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyNode",
            "metadata": {"name": "c-0-0", "namespace": "n", "generation": 1, "resourceVersion": "1"},
            "spec": {"clusterName": "c", "shard": 0, "configRef": "s", "imageRef": "i",
                     "image": "i", "version": "9.0.1", "resources": {}, "valkey": {},
                     "placement": {}},
            "status": {"lifecycle": "Active"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let before = without_utilization(&node);
        node.metadata.resource_version = Some("2".into());
        node.status.as_mut().unwrap().utilization = Some(UtilizationStatus::default());
        assert_eq!(without_utilization(&node), before);
        node.status.as_mut().unwrap().role = Some(NodeRole::Primary);
        assert_ne!(without_utilization(&node), before);
    }
}
