//! Figures about a cluster for status, `kubectl get` and metrics (pure): members asked for and
//! ready, members still on an outdated spec, slots still to move, and why it is degraded.

use std::collections::BTreeMap;

use super::model::{Member, Topology};
use super::rebalance::rebalance;
use crate::api::Lifecycle;
use crate::topology::slots::SlotRange;

/// Where a cluster stands, in numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Members the spec asks for: shards x (1 + replicas per shard).
    pub desired: usize,
    /// Members of the desired shape that run, answer, see a healthy cluster and serve their
    /// role: a primary, or a replica in sync with its primary. Leaving members do not count.
    pub ready: usize,
    /// Members still on an outdated spec (a rollout replaces them).
    pub outdated: usize,
    /// Slots still to move between shards before every shard holds its even share.
    pub slots_to_move: usize,
}

pub fn figures(topology: &Topology) -> Figures {
    let ready = topology
        .members
        .iter()
        .filter(|m| m.lifecycle != Lifecycle::Leaving && m.shard < topology.shards)
        .filter(|m| {
            m.view
                .as_ref()
                .is_some_and(|v| v.cluster_ok && (v.is_primary || v.replica_in_sync))
        })
        .count();
    let desired = desired_members(topology);
    let mut owned: BTreeMap<usize, Vec<SlotRange>> = BTreeMap::new();
    for m in &topology.members {
        if let Some(v) = m.view.as_ref().filter(|v| v.is_primary) {
            owned
                .entry(m.shard)
                .or_default()
                .extend(v.slots.iter().cloned());
        }
    }
    let slots_to_move = if owned.values().all(Vec::is_empty) {
        // Not formed yet (or nobody answers): slots are assigned, not moved.
        0
    } else {
        rebalance(&owned, topology.shards)
            .iter()
            .map(|m| m.slot_count())
            .sum()
    };
    Figures {
        desired,
        ready: ready.min(desired),
        outdated: topology.members.iter().filter(|m| !m.current).count(),
        slots_to_move,
    }
}

/// Members the spec asks for, `shards x (1 + replicas per shard)`, saturating at `usize::MAX`
/// instead of overflowing (the API bounds it to 1000; a [`Topology`] is public and may be built
/// from anything).
pub fn desired_members(topology: &Topology) -> usize {
    topology
        .shards
        .saturating_mul(topology.replicas_per_shard.saturating_add(1))
}

/// Why a cluster is degraded, as a condition reason: the first of members gone for good
/// (`MemberLost`), established members not answering (`MemberUnreachable`), a shard without a
/// primary owning slots (`ShardWithoutPrimary`), replicas out of sync (`ReplicaOutOfSync`);
/// `Unhealthy` otherwise (Valkey reports the cluster not ok).
pub fn degraded_reason(topology: &Topology) -> &'static str {
    let members = &topology.members;
    let established = |m: &&Member| m.lifecycle == Lifecycle::Active;
    if members.iter().any(|m| m.gone.is_some()) {
        return "MemberLost";
    }
    if members.iter().filter(established).any(|m| m.view.is_none()) {
        return "MemberUnreachable";
    }
    let shard_has_primary = |shard: usize| {
        members.iter().any(|m| {
            m.shard == shard
                && m.view
                    .as_ref()
                    .is_some_and(|v| v.is_primary && !v.slots.is_empty())
        })
    };
    let serving_shards: Vec<usize> = members
        .iter()
        .filter(established)
        .map(|m| m.shard)
        .collect();
    if serving_shards.iter().any(|s| !shard_has_primary(*s)) {
        return "ShardWithoutPrimary";
    }
    if members.iter().any(|m| {
        m.view
            .as_ref()
            .is_some_and(|v| v.primary_id.is_some() && !v.replica_in_sync)
    }) {
        return "ReplicaOutOfSync";
    }
    "Unhealthy"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{MemberView, MigrationMethod};
    use crate::topology::{MemberAddr, NodeId};

    fn view(id: &str, slots: Vec<SlotRange>, primary: Option<&str>) -> MemberView {
        MemberView {
            is_primary: primary.is_none(),
            primary_id: primary.map(|p| NodeId(p.into())),
            slots,
            replica_in_sync: primary.is_some(),
            ..MemberView::bare(id)
        }
    }

    fn member(name: &str, shard: usize, view: Option<MemberView>) -> Member {
        Member {
            lifecycle: Lifecycle::Active,
            addr: Some(MemberAddr::new(format!("10.0.0.{shard}"), 6379)),
            view,
            ..Member::new(name, shard)
        }
    }

    fn two_shards_one_replica() -> Topology {
        Topology {
            cluster: "c".into(),
            shards: 2,
            replicas_per_shard: 1,
            migration: MigrationMethod::Auto,
            members: vec![
                member("c-0-0", 0, Some(view("a", vec![0..=8191], None))),
                member("c-0-1", 0, Some(view("b", vec![], Some("a")))),
                member("c-1-0", 1, Some(view("c", vec![8192..=16383], None))),
                member("c-1-1", 1, Some(view("d", vec![], Some("c")))),
            ],
        }
    }

    #[test]
    fn a_healthy_cluster_has_every_member_ready_and_nothing_to_move() {
        let f = figures(&two_shards_one_replica());
        assert_eq!(
            f,
            Figures {
                desired: 4,
                ready: 4,
                outdated: 0,
                slots_to_move: 0
            }
        );
    }

    proptest::proptest! {
        #[test]
        fn no_shape_makes_the_figures_overflow(shards in proptest::prelude::any::<usize>(),
                                               replicas in proptest::prelude::any::<usize>()) {
            let t = Topology {
                shards,
                replicas_per_shard: replicas,
                members: vec![],
                ..two_shards_one_replica()
            };
            let f = figures(&t);
            let exact = replicas.checked_add(1).and_then(|r| shards.checked_mul(r));
            proptest::prop_assert_eq!(f.desired, exact.unwrap_or(usize::MAX));
            proptest::prop_assert_eq!(f.ready, 0);
        }
    }

    #[test]
    fn a_scale_out_counts_the_slots_the_new_shard_still_needs() {
        let mut t = two_shards_one_replica();
        t.shards = 3;
        t.members
            .push(member("c-2-0", 2, Some(view("e", vec![], None))));
        let f = figures(&t);
        assert_eq!(f.desired, 6);
        // The new primary answers and is part of the cluster: ready, though it owns nothing.
        assert_eq!(f.ready, 5);
        assert_eq!(f.slots_to_move, 5461);
    }

    #[test]
    fn a_scale_in_counts_what_the_leaving_shard_still_holds() {
        let mut t = two_shards_one_replica();
        t.shards = 1;
        let f = figures(&t);
        assert_eq!(f.desired, 2);
        assert_eq!(f.ready, 2, "the leaving shard's members are not counted");
        assert_eq!(f.slots_to_move, 8192);
    }

    #[test]
    fn outdated_and_out_of_sync_members() {
        let mut t = two_shards_one_replica();
        t.members[1].current = false;
        t.members[3].view.as_mut().unwrap().replica_in_sync = false;
        let f = figures(&t);
        assert_eq!(f.outdated, 1);
        assert_eq!(f.ready, 3);
        assert_eq!(degraded_reason(&t), "ReplicaOutOfSync");
    }

    #[test]
    fn degraded_reasons_name_the_worst_problem_first() {
        let mut t = two_shards_one_replica();
        assert_eq!(degraded_reason(&t), "Unhealthy");
        t.members[2].view = None;
        assert_eq!(degraded_reason(&t), "MemberUnreachable");
        t.members[2].gone = Some("its pod was lost".into());
        assert_eq!(degraded_reason(&t), "MemberLost");
        let mut t = two_shards_one_replica();
        t.members[2].view.as_mut().unwrap().slots.clear();
        assert_eq!(degraded_reason(&t), "ShardWithoutPrimary");
    }

    #[test]
    fn nothing_answers_nothing_is_ready_nothing_to_move() {
        let mut t = two_shards_one_replica();
        for m in &mut t.members {
            m.view = None;
        }
        let f = figures(&t);
        assert_eq!((f.ready, f.slots_to_move), (0, 0));
    }
}
