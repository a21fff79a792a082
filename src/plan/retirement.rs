//! Retiring members: drained shards after a scale-in, members marked Leaving (forgotten on
//! every member, then deleted), excess replicas, and node entries no member claims.

use std::collections::BTreeSet;

use super::context::{Answered, AnsweredMember, names};
use super::model::{BULK_STEPS_PER_ROUND, Member, Plan, Step, Wait};
use crate::api::ClusterState;
use crate::topology::{FailoverMode, NodeId};

/// 3b. Shards beyond spec.shards whose slots have all moved away retire (scale-in). A drained
///     primary may have turned itself into a replica of the shard that took its last slots:
///     its role does not matter, only that nobody sees it own a slot.
pub(super) fn retire_drained(a: &Answered) -> Option<Plan> {
    if a.holding {
        return None;
    }
    let shards = a.observed.topology.shards;
    let drained: Vec<AnsweredMember> = a
        .by_shard
        .iter()
        .filter(|(shard, list)| {
            **shard >= shards
                && list.iter().all(|m| {
                    !a.slot_owners.contains(&m.view.id)
                        && m.node_id
                            .as_ref()
                            .is_none_or(|id| !a.slot_owners.contains(id))
                })
        })
        .flat_map(|(_, list)| list.iter().copied())
        .collect();
    (!drained.is_empty()).then(|| {
        Plan::new(
            ClusterState::Updating,
            vec![Step::MarkLeaving {
                names: drained.iter().map(|m| m.name.clone()).collect(),
            }],
            format!(
                "scaling in to {shards} shard(s): retiring drained member(s) {}",
                names(&drained)
            ),
        )
    })
}

/// 7. Retire what is Leaving: forget it on every member that still knows it, then delete.
///    A leaving member that still owns slots is failed over first.
pub(super) fn retire_leaving(a: &Answered) -> Option<Plan> {
    let o = &a.observed;
    if o.leaving.is_empty() {
        return None;
    }
    let mut steps = Vec::new();
    for l in &o.leaving {
        if l.view.as_ref().is_some_and(|v| !v.slots.is_empty()) {
            let in_sync: Vec<_> = a
                .shard_members(l.shard)
                .iter()
                .filter(|m| m.in_sync_replica())
                .collect();
            let Some(r) = super::rollout::resolvable_first(&in_sync) else {
                return Some(Plan::new(
                    ClusterState::Degraded,
                    vec![],
                    format!(
                        "{} is leaving but is the only copy of shard {}; waiting for an in-sync replica",
                        l.name, l.shard
                    ),
                )
                .waiting(Wait::OnlyCopy {
                    member: l.name.clone(),
                }));
            };
            if !r.name_resolves {
                return Some(Plan::new(
                    ClusterState::Updating,
                    vec![],
                    format!(
                        "{} is leaving; waiting for the hostname {} announces to resolve before failing over to it",
                        l.name, r.name
                    ),
                )
                .waiting(Wait::Hostname {
                    member: r.name.clone(),
                }));
            }
            steps.push(Step::Failover {
                member: r.addr.clone(),
                shard: l.shard,
                mode: FailoverMode::Default,
            });
            continue;
        }
        // Forgets grow with leaving members x members: bounded per round (the members owning
        // slots are still looked at, so a leaving only copy still stops the plan).
        let room = BULK_STEPS_PER_ROUND.saturating_sub(steps.len());
        if room > 0 {
            steps.extend(forget_or_delete(a, l, room));
        }
    }
    let message = match o.rollout_shard {
        Some(shard) => format!("{}: retiring {}", o.rollout_note(shard), names(&o.leaving)),
        None => format!("retiring {}", names(&o.leaving)),
    };
    Some(Plan::new(ClusterState::Updating, steps, message))
}

/// `CLUSTER FORGET` a leaving member on every member that still knows it (at most `room` of
/// them; `room` > 0); once none does, delete it.
fn forget_or_delete(a: &Answered, leaving: &Member, room: usize) -> Vec<Step> {
    let forgets: Vec<Step> = match leaving.id() {
        Some(id) => a
            .members
            .iter()
            .filter(|m| m.view.known.contains(&id))
            .take(room)
            .map(|m| Step::Forget {
                via: m.addr.clone(),
                node: id.clone(),
            })
            .collect(),
        None => vec![],
    };
    if forgets.is_empty() {
        return vec![Step::DeleteNode {
            name: leaving.name.clone(),
        }];
    }
    forgets
}

/// 10. Fewer replicas wanted: retire the excess replicas (never a primary), highest names
///     first.
pub(super) fn retire_excess_replicas(a: &Answered) -> Option<Plan> {
    let per_shard = a.observed.per_shard;
    let mut excess = Vec::new();
    for list in a.by_shard.values() {
        if list.len() > per_shard {
            let mut replicas: Vec<AnsweredMember> = list
                .iter()
                .copied()
                .filter(|m| m.view.primary_id.is_some())
                .collect();
            replicas.sort_by(|x, y| y.name.cmp(&x.name));
            excess.extend(
                replicas
                    .into_iter()
                    .take(list.len() - per_shard)
                    .map(|m| m.name.clone()),
            );
        }
    }
    (!excess.is_empty()).then(|| {
        Plan::new(
            ClusterState::Updating,
            vec![Step::MarkLeaving {
                names: excess.clone(),
            }],
            format!("retiring replica(s) {}", excess.join(", ")),
        )
    })
}

/// 11. Forget node entries no member claims (members replaced or lost earlier).
pub(super) fn forget_stale_entries(a: &Answered) -> Option<Plan> {
    let claimed: BTreeSet<NodeId> = a
        .observed
        .topology
        .members
        .iter()
        .filter_map(Member::id)
        .collect();
    let stale_entries: Vec<Step> = a
        .members
        .iter()
        .flat_map(|m| {
            m.view
                .known
                .iter()
                .filter(|id| !claimed.contains(*id))
                .map(|id| Step::Forget {
                    via: m.addr.clone(),
                    node: id.clone(),
                })
        })
        .take(BULK_STEPS_PER_ROUND)
        .collect();
    (!stale_entries.is_empty()).then(|| {
        Plan::new(
            a.observed.changing,
            stale_entries,
            "forgetting node entries of members that are gone",
        )
    })
}
