//! Failures: members gone for good, members that do not answer, members that lost their
//! identity, and shards whose primary is gone (its most up-to-date replica takes over).

use std::collections::BTreeSet;

use super::context::{Answered, AnsweredMember, Observed, names, short, slot_owners};
use super::model::{Member, Plan, Step, Topology, Wait};
use crate::api::{ClusterState, Lifecycle};
use crate::topology::{FailoverMode, NodeId};

/// Established members (they have a node id and were Active) that do not answer: their pod
/// or its node is down, and they may come back. The rest of the cluster carries on without
/// them (members join, replicas attach, the gone are retired), but nothing that could need
/// them moves: no rollout step, no slot move, no scale-in.
pub(super) fn silent_members(topology: &Topology) -> Vec<&Member> {
    topology
        .members
        .iter()
        .filter(|m| {
            m.lifecycle == Lifecycle::Active
                && !m.answered()
                && m.gone.is_none()
                && m.node_id.is_some()
        })
        .collect()
}

/// 0. A formed cluster none of whose established members answers (their node is down, or the
///    operator cannot authenticate: its credentials were lost) is waited for, whatever else
///    the spec asks: members created, introduced or given slots now could only form among
///    themselves, a second cluster claiming the slots the silent one still serves.
pub(super) fn wait_for_the_established(o: &Observed) -> Option<Plan> {
    let established: Vec<&Member> = o
        .topology
        .members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::Active && m.gone.is_none() && m.node_id.is_some())
        .collect();
    if established.is_empty() || established.iter().any(|m| m.answered()) {
        return None;
    }
    Some(Plan::waiting_for_members(
        ClusterState::Degraded,
        Wait::Established {
            members: established.iter().map(|m| m.name.clone()).collect(),
        },
        format!(
            "waiting for any of the cluster's {} established member(s) to answer ({}): nothing is created, introduced or given slots until one does, so no second cluster forms beside the one holding the data",
            established.len(),
            names(&established)
        ),
    ))
}

/// 2a. Members whose Valkey is gone for good (see [`Member::gone`]) are never waited for,
///     judged from the members that answer: a gone primary that still owns slots hands them
///     to its most up-to-date replica (`FORCE` with a majority of slot-owning primaries alive,
///     `TAKEOVER` without one); a gone member that owns none is retired (stage 1 then creates
///     its replacement). A gone primary with no answering replica is waited for by name (its
///     data went with it, unless a replica comes back).
pub(super) fn replace_gone(o: &Observed) -> Option<Plan> {
    let gone: Vec<&Member> = o
        .members
        .iter()
        .copied()
        .filter(|m| m.gone.is_some())
        .collect();
    if gone.is_empty() {
        return None;
    }
    let answering: Vec<AnsweredMember> = o
        .members
        .iter()
        .copied()
        .filter_map(AnsweredMember::of)
        .collect();
    let slot_owners = slot_owners(&answering);
    let live: BTreeSet<NodeId> = answering.iter().map(|m| m.view.id.clone()).collect();
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let mut retire = Vec::new();
    let mut without_replica = Vec::new();
    for g in gone {
        let reason = g.gone.as_deref().unwrap_or("gone");
        let Some(id) = g.id().filter(|id| slot_owners.contains(id)) else {
            notes.push(format!("{} is gone ({reason}); replacing it", g.name));
            retire.push(g.name.clone());
            continue;
        };
        let Some(best) = most_up_to_date(&answering, &id) else {
            if let Some((promoted, forget)) = unaccepted_takeover(&answering, g, &id) {
                notes.push(format!(
                    "shard {}: {} took over from its gone primary {} but {} still see {} \
                     owning the shard's slots (the takeover's config epoch did not win); \
                     making them forget {}",
                    g.shard,
                    promoted.name,
                    g.name,
                    names(&forget),
                    g.name,
                    g.name
                ));
                steps.extend(forget.iter().map(|m| Step::Forget {
                    via: m.addr.clone(),
                    node: id.clone(),
                }));
                continue;
            }
            notes.push(format!(
                "shard {}: its primary {} is gone ({reason}) and no replica of it answers",
                g.shard, g.name
            ));
            without_replica.push(g.name.clone());
            continue;
        };
        notes.push(format!(
            "shard {}: its primary {} is gone ({reason}); promoting {}",
            g.shard, g.name, best.name
        ));
        steps.push(Step::Failover {
            member: best.addr.clone(),
            shard: best.shard,
            mode: failover_mode(&slot_owners, &live),
        });
    }
    if !retire.is_empty() {
        steps.push(Step::MarkLeaving { names: retire });
    }
    let lost_shards = shards_without_their_data(o, |m| m.gone.is_some());
    notes.splice(0..0, lost_data_note(&lost_shards));
    let mut plan =
        Plan::new(ClusterState::Degraded, steps, notes.join("; ")).waiting(Wait::GonePrimaries {
            members: without_replica,
        });
    plan.lost_shards = lost_shards;
    Some(plan)
}

/// The status note for shards whose data is gone (see [`shards_without_their_data`]).
pub(super) fn lost_data_note(lost_shards: &[usize]) -> Option<String> {
    let shards: Vec<String> = lost_shards.iter().map(|s| s.to_string()).collect();
    (!shards.is_empty()).then(|| {
        format!(
            "DATA LOST: every member holding the data of shard(s) {} is gone or came back empty (its data was not on a volume); the shard(s) are re-created empty",
            shards.join(", ")
        )
    })
}

/// Shards none of whose established members (Active, with a node id) still holds data but some
/// of which lost it (`lost_data`: gone for good, or back empty under a new node id): nobody
/// holds the shard's data any more. Once marked Leaving a member is no longer established, so
/// a shard whose members go one round apart is reported in the round its last one goes.
fn shards_without_their_data(o: &Observed, lost_data: impl Fn(&Member) -> bool) -> Vec<usize> {
    let established: Vec<&Member> = o
        .members
        .iter()
        .copied()
        .filter(|m| m.lifecycle == Lifecycle::Active && m.node_id.is_some())
        .collect();
    let held: BTreeSet<usize> = established
        .iter()
        .filter(|m| !lost_data(m))
        .map(|m| m.shard)
        .collect();
    let lost: BTreeSet<usize> = established
        .iter()
        .filter(|m| lost_data(m) && !held.contains(&m.shard))
        .map(|m| m.shard)
        .collect();
    lost.into_iter().collect()
}

/// A takeover Valkey did not spread: the gone primary's shard-mate `promoted` owns the shard's
/// slots in its own view, while the members returned still see the gone node `gone` owning
/// them. `TAKEOVER` bumps the config epoch only when the replica's is not already the
/// highest, so a replica left with the same epoch as its primary (two members still tied
/// when formation made one a replica) claims the slots with an epoch nobody prefers to the
/// gone owner's, and nothing else ever breaks the tie: the gone node is dead, so it never
/// answers the collision. Once those members forget it, the slots are ownerless in their
/// view and the promoted member's next heartbeat claims them.
fn unaccepted_takeover<'a>(
    answering: &[AnsweredMember<'a>],
    gone: &Member,
    id: &NodeId,
) -> Option<(AnsweredMember<'a>, Vec<AnsweredMember<'a>>)> {
    let promoted = answering.iter().copied().find(|m| {
        m.shard == gone.shard && m.view.is_primary && !m.view.slots.is_empty() && m.view.id != *id
    })?;
    let forget: Vec<AnsweredMember<'a>> = answering
        .iter()
        .copied()
        .filter(|m| m.view.sees_owning(id) && m.view.primary_id.as_ref() != Some(id))
        .collect();
    (!forget.is_empty()).then_some((promoted, forget))
}

/// 2. Every member runs and answers. A replacement created for a spec that has since changed
///    again, and that never answered (its image could not be pulled, it could not be
///    scheduled), holds nothing: retire it so the rollout can go on with the current spec.
pub(super) fn retire_abandoned(o: &Observed) -> Option<Plan> {
    let abandoned: Vec<&Member> = o
        .members
        .iter()
        .copied()
        .filter(|m| {
            !m.answered() && !m.current && m.lifecycle == Lifecycle::Joining && m.node_id.is_none()
        })
        .collect();
    (!abandoned.is_empty()).then(|| {
        Plan::new(
            o.changing,
            vec![Step::MarkLeaving {
                names: abandoned.iter().map(|m| m.name.clone()).collect(),
            }],
            format!(
                "retiring {}: created for a spec that changed again and never started",
                names(&abandoned)
            ),
        )
    })
}

/// 2. Every member runs and answers. A new member still starting is progress; an established
///    one gone silent is degradation. When only silent members (see [`silent_members`]) are
///    missing and somebody answers, the cluster carries on without them.
pub(super) fn wait_for_answers(o: &Observed) -> Option<Plan> {
    let unreachable: Vec<&Member> = o
        .members
        .iter()
        .copied()
        .filter(|m| !m.answered())
        .collect();
    let silent = silent_members(o.topology);
    let carry_on = !silent.is_empty()
        && unreachable.len() == silent.len()
        && unreachable.len() < o.members.len();
    if unreachable.is_empty() || carry_on {
        return None;
    }
    let problems: Vec<String> = unreachable
        .iter()
        .filter_map(|m| m.pod_problem.as_ref().map(|p| format!("{}: {p}", m.name)))
        .collect();
    let mut message = format!(
        "waiting for {} of {} member(s) to run and answer: {}",
        unreachable.len(),
        o.members.len(),
        names(&unreachable)
    );
    if !problems.is_empty() {
        message.push_str(&format!(
            " ({}); existing members keep serving",
            problems.join("; ")
        ));
    }
    let state = if unreachable.iter().any(|m| m.lifecycle == Lifecycle::Active) {
        ClusterState::Degraded
    } else {
        o.changing
    };
    let on = Wait::Answers {
        members: unreachable
            .iter()
            .map(|m| (m.name.clone(), m.pod_problem.clone()))
            .collect(),
    };
    Some(Plan::waiting_for_members(state, on, message))
}

/// 2b. Failures. A member whose Valkey lost its identity (its pod was lost and replaced: new
///     node id, no data) is retired, and a new member takes its place. A shard whose primary
///     is gone for good (every member, leaving ones included, answered with another id) is
///     taken over by its most up-to-date replica at once, without waiting for Valkey's
///     failure detection, or at all when too few primaries are left to vote.
pub(super) fn replace_failed(a: &Answered) -> Option<Plan> {
    let topology = a.observed.topology;
    if topology.members.iter().any(|m| !m.answered()) {
        // Somebody does not answer: it may still be the primary in question.
        return None;
    }
    let live: BTreeSet<NodeId> = topology
        .members
        .iter()
        .filter_map(|m| m.view.as_ref().map(|v| v.id.clone()))
        .collect();
    let lost: Vec<AnsweredMember> = a
        .members
        .iter()
        .copied()
        .filter(|m| {
            m.node_id.as_ref().is_some_and(|id| *id != m.view.id) && m.view.slots.is_empty()
        })
        .collect();
    let (mut steps, mut notes) = promote_orphaned_replicas(a, &live);
    let lost_shards =
        shards_without_their_data(&a.observed, |m| lost.iter().any(|l| l.name == m.name));
    notes.splice(0..0, lost_data_note(&lost_shards));
    if !lost.is_empty() {
        notes.push(format!(
            "retiring {} (lost its data and node id; a new member replaces it)",
            names(&lost)
        ));
        steps.push(Step::MarkLeaving {
            names: lost.iter().map(|m| m.name.clone()).collect(),
        });
    }
    (!steps.is_empty()).then(|| Plan {
        lost_shards,
        ..Plan::new(ClusterState::Degraded, steps, notes.join("; "))
    })
}

/// 2c. Silent primaries Valkey cannot replace by itself. Valkey promotes a replica only with
///     a majority of slot-owning primaries voting; a node down with two of three primaries
///     on it leaves no majority, and their shards would refuse writes until the pods are
///     declared gone (minutes). So once both sides agree a silent primary is down (every
///     member that answers flags it failing, and Kubernetes reports its pod not Ready:
///     failing readiness probe, or its node stopped reporting), its most up-to-date replica
///     takes over (`TAKEOVER`). With a majority left, Valkey's own failover does it.
pub(super) fn take_over_from_silent_primaries(a: &Answered) -> Option<Plan> {
    let live: BTreeSet<NodeId> = a.members.iter().map(|m| m.view.id.clone()).collect();
    if failover_mode(&a.slot_owners, &live) != FailoverMode::Takeover {
        return None;
    }
    let down: Vec<(&Member, NodeId)> = silent_members(a.observed.topology)
        .into_iter()
        .filter_map(|m| Some((m, m.node_id.clone()?)))
        .filter(|(m, id)| {
            m.pod_not_ready
                && a.slot_owners.contains(id)
                && a.members.iter().all(|peer| peer.view.failing.contains(id))
        })
        .collect();
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    for (silent, id) in down {
        let Some(best) = most_up_to_date(&a.members, &id) else {
            continue;
        };
        notes.push(format!(
            "shard {}: its primary {} is down (its pod is not Ready and every member flags it \
             failing) and too few primaries are left for Valkey to fail over; promoting {}",
            silent.shard, silent.name, best.name
        ));
        steps.push(Step::Failover {
            member: best.addr.clone(),
            shard: best.shard,
            mode: FailoverMode::Takeover,
        });
    }
    (!steps.is_empty()).then(|| Plan::new(ClusterState::Degraded, steps, notes.join("; ")))
}

/// Failovers to the most up-to-date replica of each slot-owning primary that is no longer
/// `live`, with a note per promotion.
fn promote_orphaned_replicas(a: &Answered, live: &BTreeSet<NodeId>) -> (Vec<Step>, Vec<String>) {
    let gone_owners: BTreeSet<&NodeId> = a
        .slot_owners
        .iter()
        .filter(|id| !live.contains(*id))
        .collect();
    let orphaned: BTreeSet<&NodeId> = a
        .members
        .iter()
        .filter_map(|m| m.view.primary_id.as_ref())
        .filter(|p| gone_owners.contains(p))
        .collect();
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    for gone in orphaned {
        let Some(best) = most_up_to_date(&a.members, gone) else {
            continue;
        };
        notes.push(format!(
            "shard {}: its primary {} is gone; promoting {}",
            best.shard,
            short(gone),
            best.name
        ));
        steps.push(Step::Failover {
            member: best.addr.clone(),
            shard: best.shard,
            mode: failover_mode(&a.slot_owners, live),
        });
    }
    (steps, notes)
}

/// The replica of `primary` with the highest replication offset (by name on a tie).
fn most_up_to_date<'a>(
    members: &[AnsweredMember<'a>],
    primary: &NodeId,
) -> Option<AnsweredMember<'a>> {
    members
        .iter()
        .copied()
        .filter(|m| m.view.primary_id.as_ref() == Some(primary))
        .max_by(|a, b| {
            a.view
                .repl_offset
                .cmp(&b.view.repl_offset)
                .then_with(|| b.name.cmp(&a.name))
        })
}

/// `FORCE` still needs a majority of the slot-owning primaries to vote; without one (e.g. a
/// single-shard cluster) only `TAKEOVER` can promote the replica.
fn failover_mode(slot_owners: &BTreeSet<NodeId>, live: &BTreeSet<NodeId>) -> FailoverMode {
    let alive = slot_owners.iter().filter(|id| live.contains(*id)).count();
    if alive * 2 > slot_owners.len() {
        FailoverMode::Force
    } else {
        FailoverMode::Takeover
    }
}

#[cfg(test)]
mod established_tests {
    use super::*;
    use crate::plan::{MemberView, MigrationMethod, plan};
    use crate::topology::MemberAddr;
    use crate::topology::slots::even_ranges;

    /// Shard `shard`'s Active primary owning its even share of 3 shards, answering or not.
    fn established(shard: usize, answering: bool) -> Member {
        let id = format!("id{shard}");
        let mut m = Member::new(format!("c-{shard}-0"), shard);
        m.lifecycle = Lifecycle::Active;
        m.node_id = Some(NodeId(id.clone()));
        if answering {
            m.addr = Some(MemberAddr::new(format!("10.0.0.{shard}"), 6379));
            m.view = Some(MemberView {
                slots: vec![even_ranges(3)[shard].clone()],
                ..MemberView::bare(&id)
            });
        }
        m
    }

    fn scaled_out(answering: bool) -> Topology {
        Topology {
            cluster: "c".into(),
            shards: 4,
            replicas_per_shard: 0,
            members: (0..3).map(|s| established(s, answering)).collect(),
            migration: MigrationMethod::Auto,
        }
    }

    #[test]
    fn no_member_is_created_while_no_established_member_answers() {
        let p = plan(&scaled_out(false));
        assert!(p.steps.is_empty(), "{p:?}");
        assert_eq!(p.state, ClusterState::Degraded);
        assert!(p.message.contains("c-0-0, c-1-0, c-2-0"), "{}", p.message);
        assert!(p.message.contains("no second cluster"), "{}", p.message);
    }

    #[test]
    fn a_scale_out_goes_on_once_an_established_member_answers() {
        let mut topology = scaled_out(false);
        topology.members[1] = established(1, true);
        let p = plan(&topology);
        assert!(
            p.steps
                .iter()
                .any(|s| matches!(s, Step::CreateNode { shard: 3, .. })),
            "{p:?}"
        );
    }

    #[test]
    fn new_members_answering_alone_are_never_given_slots() {
        // The new shard's member runs and answers; every established one is silent.
        let mut topology = scaled_out(false);
        let mut new = Member::new("c-3-0", 3);
        new.addr = Some(MemberAddr::new("10.0.0.9", 6379));
        new.view = Some(MemberView::bare("new"));
        topology.members.push(new);
        let p = plan(&topology);
        assert!(p.steps.is_empty(), "{p:?}");
    }
}
