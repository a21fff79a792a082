//! Slot moves already under way finish before anything else changes: slots left open by a
//! key-by-key move cut short are moved on (or closed when their peer is gone), and atomic
//! jobs are waited for (or cancelled when they stopped making progress).

use std::collections::BTreeMap;

use super::context::{Answered, AnsweredMember};
use super::model::{MIGRATION_IDLE_LIMIT_SECS, MoveMethod, MoveTarget, Plan, Step, Wait};
use crate::api::ClusterState;
use crate::topology::slots::range_len;
use crate::topology::{MemberAddr, NodeId};

/// 6b. Slot moves in flight finish before anything else changes (held while silent members
///     are missing).
pub(super) fn finish_slot_moves(a: &Answered) -> Option<Plan> {
    if a.holding {
        return None;
    }
    resume_key_moves(&a.members).or_else(|| follow_atomic_jobs(&a.members))
}

/// A key-by-key move cut short: source, target and the slots left open between them.
type OpenMove<'a> = (AnsweredMember<'a>, AnsweredMember<'a>, Vec<u16>);

/// Slots left `MIGRATING`/`IMPORTING` by a key-by-key move: moved on when both ends answer
/// (and the source still owns the slot, for an importing one), closed otherwise. Only
/// primaries' open slots count: Valkey shows a primary's on its replicas too, and a replica
/// takes neither `MIGRATE` nor `CLUSTER SETSLOT` (a promoted replica is a primary by then).
fn resume_key_moves(members: &[AnsweredMember]) -> Option<Plan> {
    let primaries_only: Vec<AnsweredMember> = members
        .iter()
        .copied()
        .filter(|m| m.view.is_primary)
        .collect();
    let by_id: BTreeMap<&NodeId, AnsweredMember> =
        primaries_only.iter().map(|m| (&m.view.id, *m)).collect();
    // By (source name, target name), and by member name.
    let mut resume: BTreeMap<(&str, &str), OpenMove> = BTreeMap::new();
    let mut close: BTreeMap<&str, (AnsweredMember, Vec<u16>)> = BTreeMap::new();
    for &m in &primaries_only {
        for open in &m.view.migrating {
            match by_id.get(&open.peer) {
                Some(&target) => open_move(&mut resume, m, target).push(open.slot),
                None => close_slots(&mut close, m).push(open.slot),
            }
        }
        for open in &m.view.importing {
            let source = by_id
                .get(&open.peer)
                .filter(|s| s.view.slots.iter().any(|r| r.contains(&open.slot)));
            match source {
                Some(&source) => {
                    let slots = open_move(&mut resume, source, m);
                    if !slots.contains(&open.slot) {
                        slots.push(open.slot);
                    }
                }
                None => close_slots(&mut close, m).push(open.slot),
            }
        }
    }
    let primaries = primaries(members);
    let mut steps = Vec::new();
    for (source, target, mut slots) in resume.into_values() {
        slots.sort_unstable();
        steps.push(Step::MoveSlots {
            source: source.addr.clone(),
            source_id: source.view.id.clone(),
            method: MoveMethod::Keys,
            targets: vec![MoveTarget {
                member: target.addr.clone(),
                id: target.view.id.clone(),
                ranges: slots.iter().map(|s| *s..=*s).collect(),
            }],
            primaries: primaries.clone(),
        });
    }
    for (member, slots) in close.into_values() {
        steps.push(Step::CloseSlots {
            member: member.addr.clone(),
            slots,
        });
    }
    (!steps.is_empty()).then(|| {
        Plan::new(
            ClusterState::Updating,
            steps,
            "finishing slot moves that were interrupted",
        )
    })
}

/// The slots of the open move from `source` to `target`.
fn open_move<'m, 'a>(
    resume: &'m mut BTreeMap<(&'a str, &'a str), OpenMove<'a>>,
    source: AnsweredMember<'a>,
    target: AnsweredMember<'a>,
) -> &'m mut Vec<u16> {
    let key = (source.member.name.as_str(), target.member.name.as_str());
    &mut resume
        .entry(key)
        .or_insert_with(|| (source, target, Vec::new()))
        .2
}

/// The slots to close on `member`.
fn close_slots<'m, 'a>(
    close: &'m mut BTreeMap<&'a str, (AnsweredMember<'a>, Vec<u16>)>,
    member: AnsweredMember<'a>,
) -> &'m mut Vec<u16> {
    &mut close
        .entry(member.member.name.as_str())
        .or_insert_with(|| (member, Vec::new()))
        .1
}

/// Every primary owning slots: told the new owner of each slot moved key by key.
fn primaries(members: &[AnsweredMember]) -> Vec<MemberAddr> {
    members
        .iter()
        .filter(|m| !m.view.slots.is_empty())
        .map(|m| m.addr.clone())
        .collect()
}

/// Atomic slot migration jobs: waited for, or cancelled when they made no progress for
/// [`MIGRATION_IDLE_LIMIT_SECS`] (they are planned again).
fn follow_atomic_jobs(members: &[AnsweredMember]) -> Option<Plan> {
    let mut steps = Vec::new();
    let mut waiting = Vec::new();
    for m in members {
        let exports = &m.view.exports;
        if exports.is_empty() {
            continue;
        }
        if exports
            .iter()
            .any(|j| j.idle_secs >= MIGRATION_IDLE_LIMIT_SECS)
        {
            steps.push(Step::CancelSlotMigrations {
                member: m.addr.clone(),
            });
            continue;
        }
        let slots: usize = exports.iter().flat_map(|j| &j.ranges).map(range_len).sum();
        waiting.push((m.name.clone(), slots));
    }
    if !steps.is_empty() {
        return Some(Plan::new(
            ClusterState::Updating,
            steps,
            format!(
                "cancelling slot migrations that made no progress for {MIGRATION_IDLE_LIMIT_SECS} s; they will be planned again"
            ),
        ));
    }
    (!waiting.is_empty()).then(|| {
        Plan::new(
            ClusterState::Updating,
            vec![],
            format!(
                "moving slots (atomic slot migration): {}",
                waiting
                    .iter()
                    .map(|(name, slots)| format!("{slots} slot(s) from {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .waiting(Wait::SlotMigrations { sources: waiting })
    })
}
