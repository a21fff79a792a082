//! Typed views of the observed cluster that the stages read: [`Observed`] before it is known
//! who answered, [`Answered`] once every member that matters answered (each with its view and
//! address, so no stage has to assume it).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use super::model::{Member, MemberView, Topology};
use crate::api::{ClusterState, Lifecycle};
use crate::topology::slots::SlotRange;
use crate::topology::{MemberAddr, NodeId};

/// The intended members and what they reported, before it is known who answered.
pub(super) struct Observed<'a> {
    pub topology: &'a Topology,
    /// Members not leaving.
    pub members: Vec<&'a Member>,
    /// Members being retired (`Leaving`).
    pub leaving: Vec<&'a Member>,
    /// Members not leaving, by shard.
    pub by_shard: BTreeMap<usize, Vec<&'a Member>>,
    /// Some member was Active once: the cluster was formed.
    pub ever_formed: bool,
    /// Work on a formed cluster is an update; before that it is formation.
    pub changing: ClusterState,
    /// Members each shard should have: its primary and its replicas.
    pub per_shard: usize,
    /// Rolling replacement goes one shard at a time: the lowest shard with a stale member.
    pub rollout_shard: Option<usize>,
}

impl<'a> Observed<'a> {
    pub fn new(topology: &'a Topology) -> Self {
        let (leaving, members): (Vec<&Member>, Vec<&Member>) = topology
            .members
            .iter()
            .partition(|m| m.lifecycle == Lifecycle::Leaving);
        let mut by_shard: BTreeMap<usize, Vec<&Member>> = BTreeMap::new();
        for m in &members {
            by_shard.entry(m.shard).or_default().push(m);
        }
        let ever_formed = topology
            .members
            .iter()
            .any(|m| m.lifecycle == Lifecycle::Active);
        let changing = if ever_formed {
            ClusterState::Updating
        } else {
            ClusterState::Creating
        };
        let rollout_shard = (0..topology.shards).find(|s| {
            by_shard
                .get(s)
                .is_some_and(|list| list.iter().any(|m| !m.current))
        });
        Observed {
            topology,
            members,
            leaving,
            by_shard,
            ever_formed,
            changing,
            per_shard: topology.replicas_per_shard.saturating_add(1),
            rollout_shard,
        }
    }

    /// Members of `shard` that are not leaving, answering or not.
    pub fn shard_members(&self, shard: usize) -> &[&'a Member] {
        self.by_shard.get(&shard).map_or(&[], Vec::as_slice)
    }
}

/// A member that answered: what its Valkey reported and where it is.
#[derive(Clone, Copy, Debug)]
pub(super) struct AnsweredMember<'a> {
    pub member: &'a Member,
    pub view: &'a MemberView,
    pub addr: &'a MemberAddr,
}

impl<'a> AnsweredMember<'a> {
    /// The member with its view and address; `None` when it did not answer.
    pub fn of(member: &'a Member) -> Option<Self> {
        Some(AnsweredMember {
            member,
            view: member.view.as_ref()?,
            addr: member.addr.as_ref()?,
        })
    }
}

impl Deref for AnsweredMember<'_> {
    type Target = Member;
    fn deref(&self) -> &Member {
        self.member
    }
}

/// The cluster once every member that matters answered: all members not leaving, except
/// silent established ones the rest of the cluster carries on without (`holding`).
pub(super) struct Answered<'a> {
    pub observed: Observed<'a>,
    /// Members not leaving that answered.
    pub members: Vec<AnsweredMember<'a>>,
    /// Members not leaving that answered, by shard.
    pub by_shard: BTreeMap<usize, Vec<AnsweredMember<'a>>>,
    /// Every node owning a slot, as any answering member sees the cluster.
    pub slot_owners: BTreeSet<NodeId>,
    /// Silent members are missing: nothing that could need them moves (no rollout step, no
    /// slot move, no scale-in).
    pub holding: bool,
    /// For each shard no member of which owns slots yet, the member to become its primary
    /// (see [`spread_new_leaders`]).
    new_leaders: BTreeMap<usize, NodeId>,
}

impl<'a> Answered<'a> {
    pub fn new(observed: Observed<'a>, holding: bool) -> Self {
        let members: Vec<AnsweredMember<'a>> = observed
            .members
            .iter()
            .copied()
            .filter_map(AnsweredMember::of)
            .collect();
        let mut by_shard: BTreeMap<usize, Vec<AnsweredMember<'a>>> = BTreeMap::new();
        for m in &members {
            by_shard.entry(m.shard).or_default().push(*m);
        }
        let slot_owners = slot_owners(&members);
        let new_leaders = spread_new_leaders(&by_shard);
        Answered {
            observed,
            members,
            by_shard,
            slot_owners,
            holding,
            new_leaders,
        }
    }

    /// Members of `shard` that are not leaving and answered.
    pub fn shard_members(&self, shard: usize) -> &[AnsweredMember<'a>] {
        self.by_shard.get(&shard).map_or(&[], Vec::as_slice)
    }

    /// The member of `shard` that is (or is to become) its primary: the one owning slots or,
    /// for a shard that holds no slots yet (a new cluster, a new shard of a scale-out), the
    /// one [`spread_new_leaders`] chose. Never an empty node while a member of the shard
    /// still follows a primary that holds data (a failed one): that replica is the shard's
    /// data and must take over instead.
    pub fn shard_leader(&self, shard: usize) -> Option<AnsweredMember<'a>> {
        let list = self.shard_members(shard);
        shard_primary(list).or_else(|| {
            let follows_data = list.iter().any(|m| {
                m.view
                    .primary_id
                    .as_ref()
                    .is_some_and(|p| self.slot_owners.contains(p))
            });
            if follows_data {
                return None;
            }
            self.new_leader(shard)
        })
    }

    /// The member [`spread_new_leaders`] chose to become `shard`'s primary, if the shard
    /// has no slot-owning primary.
    pub fn new_leader(&self, shard: usize) -> Option<AnsweredMember<'a>> {
        let id = self.new_leaders.get(&shard)?;
        self.shard_members(shard)
            .iter()
            .copied()
            .find(|m| m.view.id == *id)
    }
}

/// Whom each shard without a slot-owning primary makes its primary, among its members that are
/// primaries following nobody: spread over Kubernetes nodes, counting the primaries already
/// there, so that losing one node leaves Valkey a majority of primaries to fail over by
/// itself (a node holding most primaries takes that away: the shards wait for the operator).
/// Greedy in shard order (fewest primaries on the member's node, then by name), then single
/// moves while one lowers a crowded node: the sum of squared counts drops with each, so it
/// ends. Members whose node is unknown all count as one node, so without nodes the choice is
/// the first by name.
fn spread_new_leaders<'a>(
    by_shard: &BTreeMap<usize, Vec<AnsweredMember<'a>>>,
) -> BTreeMap<usize, NodeId> {
    let host = |m: &AnsweredMember<'a>| -> Option<&'a str> { m.member.host.as_deref() };
    let mut per_host: BTreeMap<Option<&'a str>, usize> = BTreeMap::new();
    let mut leaderless: Vec<(usize, Vec<AnsweredMember<'a>>)> = Vec::new();
    for (shard, list) in by_shard {
        match shard_primary(list) {
            Some(p) => *per_host.entry(host(&p)).or_default() += 1,
            None => {
                let mut candidates: Vec<AnsweredMember> = list
                    .iter()
                    .copied()
                    .filter(|m| m.view.is_primary && m.view.primary_id.is_none())
                    .collect();
                candidates.sort_by(|a, b| a.name.cmp(&b.name));
                if !candidates.is_empty() {
                    leaderless.push((*shard, candidates));
                }
            }
        }
    }
    let mut chosen: Vec<usize> = Vec::with_capacity(leaderless.len());
    for (_, candidates) in &leaderless {
        let best = (0..candidates.len())
            .min_by_key(|&i| per_host.get(&host(&candidates[i])).copied().unwrap_or(0))
            .unwrap_or(0);
        *per_host.entry(host(&candidates[best])).or_default() += 1;
        chosen.push(best);
    }
    let mut improved = true;
    while improved {
        improved = false;
        for (k, (_, candidates)) in leaderless.iter().enumerate() {
            let here = host(&candidates[chosen[k]]);
            let count = |h: Option<&'a str>, per_host: &BTreeMap<Option<&'a str>, usize>| {
                per_host.get(&h).copied().unwrap_or(0)
            };
            let better = (0..candidates.len())
                .find(|&i| count(host(&candidates[i]), &per_host) + 1 < count(here, &per_host));
            if let Some(i) = better {
                *per_host.entry(here).or_default() -= 1;
                *per_host.entry(host(&candidates[i])).or_default() += 1;
                chosen[k] = i;
                improved = true;
            }
        }
    }
    leaderless
        .iter()
        .zip(chosen)
        .map(|((shard, candidates), i)| (*shard, candidates[i].view.id.clone()))
        .collect()
}

/// Ids of every node owning a slot, as the given members see the cluster (themselves included).
pub(super) fn slot_owners(members: &[AnsweredMember]) -> BTreeSet<NodeId> {
    members
        .iter()
        .flat_map(|m| {
            let own = (!m.view.slots.is_empty()).then(|| m.view.id.clone());
            m.view.owned_by.keys().cloned().chain(own)
        })
        .collect()
}

/// Slots owned by anyone any member knows of (leaving members and members that are not all
/// there included): the slots of a failed primary that is no longer one of our members are
/// not free.
pub(super) fn owned_slots(topology: &Topology) -> Vec<SlotRange> {
    topology
        .members
        .iter()
        .filter_map(|m| m.view.as_ref())
        .flat_map(|v| v.slots.iter().chain(v.owned_by.values().flatten()).cloned())
        .collect()
}

/// Primary of a shard as Valkey reports it: the member of that shard owning slots.
pub(super) fn shard_primary<'a>(list: &[AnsweredMember<'a>]) -> Option<AnsweredMember<'a>> {
    list.iter()
        .copied()
        .filter(|m| m.view.is_primary && !m.view.slots.is_empty())
        .min_by(|a, b| a.name.cmp(&b.name))
}

/// Member names for messages: `a, b, c`.
pub(super) fn names<M: Deref<Target = Member>>(members: &[M]) -> String {
    members
        .iter()
        .map(|m| m.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// First 8 characters of a node id, the way people quote them.
pub(super) fn short(id: &NodeId) -> &str {
    id.as_str().get(..8).unwrap_or(id.as_str())
}
