//! Rolling replacement: one shard at a time, members on an outdated spec are replaced by new
//! ones that join as in-sync replicas, a coordinated failover moves the primary role to one of
//! them, and the stale members retire.

use super::context::{Answered, AnsweredMember, Observed, names};
use super::model::{Plan, Step, Wait};
use crate::api::ClusterState;
use crate::topology::FailoverMode;

impl Observed<'_> {
    /// Rollout progress for messages: shards done, members on the new spec.
    pub(super) fn rollout_note(&self, shard: usize) -> String {
        let shards = self.topology.shards;
        let done = (0..shards)
            .filter(|s| self.shard_members(*s).iter().all(|m| m.current))
            .count();
        // Members still on the old spec, against the members a finished rollout will have.
        let stale = self.members.iter().filter(|m| !m.current).count();
        let wanted = shards.saturating_mul(self.per_shard);
        format!(
            "rolling out shard {shard} ({done} of {shards} shards done, {} of {wanted} members on the new spec)",
            wanted.saturating_sub(stale)
        )
    }
}

/// 8. Rolling replacement of the rollout shard: fail over from a stale primary to an in-sync
///    current replica, then retire the stale members.
pub(super) fn roll_out(a: &Answered) -> Option<Plan> {
    if a.holding {
        return None;
    }
    let o = &a.observed;
    let shard = o.rollout_shard?;
    let note = o.rollout_note(shard);
    let list = a.shard_members(shard);
    let Some(primary) = a.shard_leader(shard) else {
        return Some(
            Plan::new(
                ClusterState::Degraded,
                vec![],
                format!("{note}: shard {shard} has no primary"),
            )
            .waiting(Wait::NoPrimary {
                shards: vec![shard],
            }),
        );
    };
    if !primary.current {
        let in_sync: Vec<&AnsweredMember> = list
            .iter()
            .filter(|m| m.current && m.in_sync_replica())
            .collect();
        let Some(target) = resolvable_first(&in_sync) else {
            return Some(
                Plan::new(
                    ClusterState::Updating,
                    vec![],
                    format!("{note}: waiting for an in-sync replacement"),
                )
                .waiting(Wait::Replacement { shard }),
            );
        };
        if !target.name_resolves {
            return Some(Plan::new(
                ClusterState::Updating,
                vec![],
                format!(
                    "{note}: waiting for the hostname {} announces to resolve before failing over to it",
                    target.name
                ),
            )
            .waiting(Wait::Hostname {
                member: target.name.clone(),
            }));
        }
        return Some(Plan::new(
            ClusterState::Updating,
            vec![Step::Failover {
                member: target.addr.clone(),
                shard,
                mode: FailoverMode::Default,
            }],
            format!(
                "{note}: failing over from {} to {}",
                primary.name, target.name
            ),
        ));
    }
    let stale: Vec<AnsweredMember> = list.iter().copied().filter(|m| !m.current).collect();
    Some(Plan::new(
        ClusterState::Updating,
        vec![Step::MarkLeaving {
            names: stale.iter().map(|m| m.name.clone()).collect(),
        }],
        format!("{note}: retiring {}", names(&stale)),
    ))
}

/// The failover target among in-sync replicas: the first by name whose announced hostname
/// resolves (clients are sent there by name once it is primary), else the first by name, to
/// wait for.
pub(super) fn resolvable_first<'m, 'a>(
    in_sync: &[&'m AnsweredMember<'a>],
) -> Option<&'m AnsweredMember<'a>> {
    let first = |resolving: bool| {
        in_sync
            .iter()
            .filter(|m| m.name_resolves || !resolving)
            .min_by(|x, y| x.name.cmp(&y.name))
            .copied()
    };
    first(true).or_else(|| first(false))
}
