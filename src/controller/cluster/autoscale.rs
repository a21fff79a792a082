//! The autoscaling step (Momento v0.9, MOMENTO-V09.md section 3): after the plan, with this
//! round's samples in, the pure decision ([`crate::plan::autoscale::decide`]) may move the shard
//! target by one. The target lives in `status.autoscaling.desiredShards`
//! ([`ValkeyCluster::target_shards`]); the next round plans towards it by the ordinary scaling
//! path, exactly as for a `spec.shards` edit. Every decision is an Event and a metric.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;

use super::observed::Observed;
use super::utilization::Samples;
use crate::api::autoscaling::{AutoscalingStatus, ScalingDecision};
use crate::api::{ClusterState, ValkeyCluster};
use crate::controller::{Context, object_key};
use crate::plan::autoscale::{ClusterNow, Direction, Holding, MemberLoad, Outcome, decide};
use crate::plan::{Plan, Topology};

/// What autoscaling remembers between rounds: the clusters whose `ScaleOutLimited` warning was
/// recorded for the episode under way (the trigger has not cleared since: one warning per
/// episode, not one per round), and each cluster's latest decision until the watch shows it.
#[derive(Default)]
pub struct Episodes {
    limited: Mutex<HashSet<String>>,
    decided: Mutex<HashMap<String, AutoscalingStatus>>,
}

impl Episodes {
    /// The cluster with the operator's own latest decision: a round that starts between the
    /// status write of a decision and its watch event (another event triggered it) would
    /// otherwise plan toward the old shard count, and could retire the new, still empty shard.
    pub fn freshest(&self, cluster: Arc<ValkeyCluster>) -> Arc<ValkeyCluster> {
        let key = object_key(cluster.as_ref());
        let mut decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ours) = decided.get(&key) else {
            return cluster;
        };
        let seen = cluster
            .status
            .as_ref()
            .and_then(|s| s.autoscaling.as_ref())
            .and_then(|a| a.last_decision.as_ref());
        if cluster.spec.autoscaling.is_none() || seen == ours.last_decision.as_ref() {
            decided.remove(&key);
            return cluster;
        }
        let mut fresher = (*cluster).clone();
        fresher
            .status
            .get_or_insert_with(Default::default)
            .autoscaling = Some(ours.clone());
        Arc::new(fresher)
    }

    fn decided(&self, key: &str, status: &AutoscalingStatus) {
        self.decided
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned(), status.clone());
    }

    fn recorded(&self, key: &str) -> bool {
        self.limited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    fn remember(&self, key: &str, limited: bool) {
        let mut set = self.limited.lock().unwrap_or_else(|e| e.into_inner());
        if limited {
            set.insert(key.to_owned());
        } else {
            set.remove(key);
        }
    }
}

/// This round's `status.autoscaling` (none without `spec.autoscaling`), after recording the
/// decision it took, if any.
pub async fn step(
    ctx: &Context,
    (samples, episodes): (&Samples, &Episodes),
    cluster: &ValkeyCluster,
    (plan, topology, observed): (&Plan, &Topology, &[Observed]),
) -> Option<AutoscalingStatus> {
    let autoscaling = cluster.spec.autoscaling.as_ref()?;
    let policy = autoscaling.policy(cluster.spec.replicas_per_shard);
    let previous = cluster
        .status
        .as_ref()
        .and_then(|s| s.autoscaling.clone())
        .unwrap_or_default();
    let now = unix_now();
    let key = object_key(cluster);
    let members: Vec<MemberLoad> = samples.loads(
        &cluster.namespace().unwrap_or_default(),
        observed,
        policy.scale_in_window_secs,
        now,
    );
    let settled = plan.state == ClusterState::Active && plan.steps.is_empty();
    let at = ClusterNow {
        now,
        desired_shards: cluster.target_shards().max(1) as usize,
        serving_shards: serving_shards(topology),
        settled,
        active: plan.state == ClusterState::Active,
        paused: false,
        last_scale_out: seconds(previous.last_scale_out_time.as_deref()),
        last_scale_in: seconds(previous.last_scale_in_time.as_deref()),
        limited_recorded: episodes.recorded(&key),
    };
    let outcome = decide(&policy, &at, &members);
    episodes.remember(&key, outcome.holding == Some(Holding::AtMaxShards));
    if let Some(note) = &outcome.limited {
        crate::controller::events::warning(ctx, cluster, "ScaleOutLimited", note).await;
    }
    if let Some(decision) = &outcome.decision {
        crate::controller::events::normal(
            ctx,
            cluster,
            decision.direction.reason(),
            &decision.note,
        )
        .await;
        ctx.metrics.action(match decision.direction {
            Direction::Out => "autoscale_out",
            Direction::In => "autoscale_in",
        });
    }
    let status = next_status(previous, &outcome, now);
    if outcome.decision.is_some() {
        episodes.decided(&key, &status);
    }
    Some(status)
}

/// The status after this round's outcome: the target, the decision's time and figures, why it
/// holds.
pub fn next_status(previous: AutoscalingStatus, outcome: &Outcome, now: u64) -> AutoscalingStatus {
    let mut status = AutoscalingStatus {
        desired_shards: Some(outcome.desired_shards as i32),
        holding: outcome.holding.map(|h| h.as_str().to_owned()),
        ..previous
    };
    if let Some(decision) = &outcome.decision {
        let time = crate::time::rfc3339(now as i64);
        match decision.direction {
            Direction::Out => status.last_scale_out_time = Some(time.clone()),
            Direction::In => status.last_scale_in_time = Some(time.clone()),
        }
        status.last_decision = Some(ScalingDecision {
            direction: format!("{:?}", decision.direction),
            from: decision.from as i32,
            to: decision.to as i32,
            trigger: decision.trigger.map(|t| t.word().to_owned()),
            time,
        });
    }
    status
}

/// `status.autoscaling` of a paused cluster: as it was, holding `Paused`.
pub fn paused(cluster: &ValkeyCluster) -> Option<AutoscalingStatus> {
    cluster.spec.autoscaling.as_ref()?;
    let previous = cluster.status.as_ref().and_then(|s| s.autoscaling.clone());
    Some(AutoscalingStatus {
        holding: Some(Holding::Paused.as_str().to_owned()),
        desired_shards: Some(cluster.target_shards()),
        ..previous.unwrap_or_default()
    })
}

/// Shards whose primary serves slots, as the members report them.
fn serving_shards(topology: &Topology) -> usize {
    topology
        .members
        .iter()
        .filter(|m| {
            m.view
                .as_ref()
                .is_some_and(|v| v.is_primary && !v.slots.is_empty())
        })
        .map(|m| m.shard)
        .collect::<HashSet<_>>()
        .len()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn seconds(time: Option<&str>) -> Option<u64> {
    u64::try_from(crate::time::unix_seconds(time?)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::autoscale::{Decision, Trigger};

    #[test]
    fn a_round_on_a_stale_watch_plans_toward_the_latest_decision() {
        let mut cluster: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"configRef": "s", "shards": 2, "replicasPerShard": 1,
                     "autoscaling": {"minShards": 2, "maxShards": 4}},
            "status": {"autoscaling": {"desiredShards": 2}}
        }))
        .unwrap();
        let episodes = Episodes::default();
        let stale = Arc::new(cluster.clone());
        assert_eq!(
            episodes.freshest(stale.clone()).target_shards(),
            2,
            "nothing decided"
        );
        let ours = AutoscalingStatus {
            desired_shards: Some(3),
            last_decision: Some(ScalingDecision {
                direction: "Out".into(),
                from: 2,
                to: 3,
                trigger: Some("memory".into()),
                time: "2026-12-05T10:00:00Z".into(),
            }),
            ..AutoscalingStatus::default()
        };
        episodes.decided("n/c", &ours);
        assert_eq!(episodes.freshest(stale.clone()).target_shards(), 3);
        // Once the watch shows it, the memory goes.
        cluster.status.as_mut().unwrap().autoscaling = Some(ours);
        let seen = Arc::new(cluster);
        assert_eq!(episodes.freshest(seen).target_shards(), 3);
        assert_eq!(episodes.freshest(stale).target_shards(), 2, "forgotten");
    }

    #[test]
    fn a_decision_is_recorded_with_its_time_and_trigger() {
        let outcome = Outcome {
            desired_shards: 3,
            decision: Some(Decision {
                direction: Direction::Out,
                from: 2,
                to: 3,
                trigger: Some(Trigger::Memory),
                note: String::new(),
            }),
            holding: None,
            limited: None,
        };
        let status = next_status(AutoscalingStatus::default(), &outcome, 1_796_000_000);
        assert_eq!(status.desired_shards, Some(3));
        let time = status.last_scale_out_time.clone().unwrap();
        assert_eq!(seconds(Some(&time)), Some(1_796_000_000));
        let decision = status.last_decision.clone().unwrap();
        assert_eq!(
            (decision.direction.as_str(), decision.from, decision.to),
            ("Out", 2, 3)
        );
        assert_eq!(decision.trigger.as_deref(), Some("memory"));

        let held = Outcome {
            desired_shards: 3,
            decision: None,
            holding: Some(Holding::OutCooldown),
            limited: None,
        };
        let later = next_status(status.clone(), &held, 1_796_000_030);
        assert_eq!(later.holding.as_deref(), Some("OutCooldown"));
        assert_eq!(later.last_decision, status.last_decision, "kept");
    }
}
