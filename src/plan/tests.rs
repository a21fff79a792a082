//! Planner tests: single rules, plus a simulation that applies each plan to a model of Valkey
//! (meet, gossip, slots, replication) until the cluster is formed, from any crash point.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::topology::slots::{SLOT_COUNT, SlotRange, even_ranges, range_len, subtract};
use crate::topology::{FailoverMode, MemberAddr, NodeId, OpenSlot};

/// A model of the Valkey side: per member id, known ids, slots, primary.
#[derive(Clone, Debug, Default)]
struct Sim {
    nodes: BTreeMap<String, SimNode>,
    /// The desired spec generation: nodes created under another one are stale.
    generation: u32,
    created: usize,
    /// The Kubernetes node each member's pod runs on, by member name (none: unknown).
    hosts: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
struct SimNode {
    id: NodeId,
    addr: MemberAddr,
    known: BTreeSet<NodeId>,
    slots: Vec<SlotRange>,
    primary: Option<NodeId>,
    lifecycle: Lifecycle,
    shard: usize,
    generation: u32,
    /// Ids this node refuses to re-learn (CLUSTER FORGET's ban list).
    banned: BTreeSet<NodeId>,
    config_epoch: u64,
    /// IPs this node still has for peers that moved (a full restart): none until a test
    /// moves nodes; a MEET between two nodes puts them right on both sides.
    stale: BTreeMap<NodeId, String>,
}

impl Sim {
    fn topology(&self, shards: usize, replicas: usize) -> Topology {
        let owned: usize = self
            .nodes
            .values()
            .flat_map(|n| n.slots.iter())
            .map(|r| (*r.end() - *r.start()) as usize + 1)
            .sum();
        Topology {
            cluster: "c".into(),
            shards,
            replicas_per_shard: replicas,
            migration: MigrationMethod::Auto,
            members: self
                .nodes
                .iter()
                .map(|(name, n)| Member {
                    name: name.clone(),
                    shard: n.shard,
                    lifecycle: n.lifecycle,
                    current: n.generation == self.generation,
                    node_id: Some(n.id.clone()),
                    addr: Some(n.addr.clone()),
                    view: Some(MemberView {
                        id: n.id.clone(),
                        is_primary: n.primary.is_none(),
                        primary_id: n.primary.clone(),
                        slots: n.slots.clone(),
                        owned_by: self
                            .nodes
                            .values()
                            .filter(|o| !o.slots.is_empty())
                            .map(|o| (o.id.clone(), o.slots.clone()))
                            .collect(),
                        known: n.known.clone(),
                        addresses: self
                            .nodes
                            .values()
                            .filter(|o| o.id != n.id && n.known.contains(&o.id))
                            .map(|o| {
                                let ip = n.stale.get(&o.id).unwrap_or(&o.addr.host);
                                (o.id.clone(), ip.clone())
                            })
                            .collect(),
                        cluster_ok: owned == SLOT_COUNT as usize
                            && self.nodes.values().all(|o| n.known.contains(&o.id)),
                        replica_in_sync: n.primary.is_some(),
                        config_epoch: n.config_epoch,
                        ..MemberView::bare(&n.id.0)
                    }),
                    pod_problem: None,
                    host: self.hosts.get(name).cloned(),
                    pod_not_ready: false,
                    name_resolves: true,
                    gone: None,
                })
                .collect(),
        }
    }

    fn by_addr(&mut self, addr: &MemberAddr) -> &mut SimNode {
        self.nodes
            .values_mut()
            .find(|n| &n.addr == addr)
            .expect("known address")
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::CreateNode { name, shard } => {
                assert!(!self.nodes.contains_key(name), "node {name} created twice");
                self.created += 1;
                let i = self.created;
                let id = NodeId(format!("{name}-id-{i}"));
                self.nodes.insert(
                    name.clone(),
                    SimNode {
                        id: id.clone(),
                        addr: MemberAddr::new(format!("198.18.{}.{}", i / 250, i % 250 + 1), 6379),
                        known: BTreeSet::from([id]),
                        slots: vec![],
                        primary: None,
                        lifecycle: Lifecycle::Joining,
                        shard: *shard,
                        generation: self.generation,
                        banned: BTreeSet::new(),
                        config_epoch: 0,
                        stale: BTreeMap::new(),
                    },
                );
            }
            Step::Meet { via, target } => {
                let target_id = self.by_addr(target).id.clone();
                let via_id = self.by_addr(via).id.clone();
                self.by_addr(via).known.insert(target_id.clone());
                self.by_addr(via).stale.remove(&target_id);
                self.by_addr(target).known.insert(via_id.clone());
                self.by_addr(target).stale.remove(&via_id);
            }
            Step::AssignSlots { member, ranges } => {
                let node = self.by_addr(member);
                assert!(node.primary.is_none(), "slots assigned to a replica");
                node.slots.extend(ranges.iter().cloned());
            }
            Step::Replicate { member, primary } => {
                let node = self.by_addr(member);
                assert!(
                    node.slots.is_empty(),
                    "a member owning slots was made a replica"
                );
                node.primary = Some(primary.clone());
            }
            Step::MarkActive { names } => {
                for name in names {
                    self.nodes.get_mut(name).unwrap().lifecycle = Lifecycle::Active;
                }
            }
            Step::MarkLeaving { names } => {
                for name in names {
                    let n = self.nodes.get_mut(name).unwrap();
                    assert!(
                        n.slots.is_empty(),
                        "{name} marked leaving while owning slots"
                    );
                    n.lifecycle = Lifecycle::Leaving;
                }
            }
            Step::Failover { member, .. } => {
                let node = self.by_addr(member).clone();
                let old_id = node.primary.clone().expect("failover runs on a replica");
                let old = self
                    .nodes
                    .values_mut()
                    .find(|n| n.id == old_id)
                    .expect("primary exists");
                let slots = std::mem::take(&mut old.slots);
                old.primary = Some(node.id.clone());
                for n in self.nodes.values_mut() {
                    if n.primary.as_ref() == Some(&old_id) {
                        n.primary = Some(node.id.clone());
                    }
                }
                let new = self.by_addr(member);
                new.primary = None;
                new.slots = slots;
            }
            Step::MoveSlots {
                source,
                source_id,
                targets,
                ..
            } => {
                for t in targets {
                    let src = self.by_addr(source);
                    assert_eq!(&src.id, source_id);
                    for r in &t.ranges {
                        assert!(
                            r.clone()
                                .all(|slot| src.slots.iter().any(|o| o.contains(&slot))),
                            "slots {r:?} moved from a node that does not own them"
                        );
                    }
                    src.slots = src
                        .slots
                        .iter()
                        .flat_map(|o| subtract(o, &t.ranges))
                        .collect();
                    let target = self.by_addr(&t.member);
                    assert!(target.primary.is_none(), "slots moved to a replica");
                    assert_eq!(target.id, t.id);
                    target.slots.extend(t.ranges.iter().cloned());
                }
                // Valkey turns a primary that lost its last slot into a replica of the node
                // that took them (cluster-allow-replica-migration).
                let last = targets.last().map(|t| t.id.clone());
                let src = self.by_addr(source);
                if src.slots.is_empty() {
                    src.primary = last;
                }
            }
            Step::CloseSlots { .. } | Step::CancelSlotMigrations { .. } => {
                panic!("nothing is left open in the model")
            }
            Step::SetConfigEpoch { member, epoch } => {
                let n = self.by_addr(member);
                // Valkey refuses it otherwise.
                assert_eq!(
                    n.known.len(),
                    1,
                    "SET-CONFIG-EPOCH on a node that knows others"
                );
                assert_eq!(
                    n.config_epoch, 0,
                    "SET-CONFIG-EPOCH on a node with an epoch"
                );
                n.config_epoch = *epoch;
            }
            Step::Forget { via, node } => {
                let n = self.by_addr(via);
                assert_ne!(&n.id, node, "a member never forgets itself");
                assert_ne!(
                    n.primary.as_ref(),
                    Some(node),
                    "a replica never forgets its primary"
                );
                n.known.remove(node);
                n.banned.insert(node.clone());
            }
            Step::DeleteNode { name } => {
                let n = self.nodes.remove(name).expect("deleted node exists");
                assert!(
                    n.slots.is_empty(),
                    "{name} deleted while owning slots: data lost"
                );
                assert_eq!(
                    n.lifecycle,
                    Lifecycle::Leaving,
                    "only leaving members are deleted"
                );
            }
        }
        self.assert_no_slot_owned_twice();
    }

    /// Gossip: everyone learns what the members it knows know (one round), except ids it
    /// has banned by forgetting them.
    fn gossip(&mut self) {
        let snapshot = self.nodes.clone();
        for node in self.nodes.values_mut() {
            let mut learned = node.known.clone();
            for other in snapshot.values().filter(|o| node.known.contains(&o.id)) {
                learned.extend(
                    other
                        .known
                        .iter()
                        .filter(|id| !node.banned.contains(*id))
                        .cloned(),
                );
            }
            node.known = learned;
        }
    }

    /// Every slot is owned by exactly one existing node.
    fn assert_all_slots_owned(&self) {
        let covered: usize = self
            .nodes
            .values()
            .flat_map(|n| n.slots.iter())
            .map(|r| (*r.end() - *r.start()) as usize + 1)
            .sum();
        assert_eq!(covered, SLOT_COUNT as usize, "all slots stay owned");
    }

    fn assert_no_slot_owned_twice(&self) {
        let mut seen = vec![false; SLOT_COUNT as usize];
        for node in self.nodes.values() {
            for range in &node.slots {
                for slot in range.clone() {
                    assert!(!seen[slot as usize], "slot {slot} owned twice");
                    seen[slot as usize] = true;
                }
            }
        }
    }
}

/// Runs the planner to completion, applying only `apply_first` steps of each plan when
/// given (a crash after some of a batch), returning the number of rounds.
fn form(sim: &mut Sim, shards: usize, replicas: usize, partial: impl Fn(usize) -> usize) -> usize {
    for round in 0..200 {
        let plan = plan(&sim.topology(shards, replicas));
        if plan.state == ClusterState::Active && plan.steps.is_empty() {
            return round;
        }
        let n = partial(round)
            .min(plan.steps.len())
            .max(1.min(plan.steps.len()));
        for step in plan.steps.iter().take(n) {
            sim.apply(step);
        }
        sim.gossip();
    }
    panic!(
        "formation did not converge: {:?}",
        plan(&sim.topology(shards, replicas))
    );
}

/// Like `form`, checking after every round that no slot is ever unowned.
fn converge(
    sim: &mut Sim,
    shards: usize,
    replicas: usize,
    partial: impl Fn(usize) -> usize,
) -> usize {
    for round in 0..400 {
        let plan = plan(&sim.topology(shards, replicas));
        if plan.state == ClusterState::Active && plan.steps.is_empty() {
            return round;
        }
        assert_ne!(
            plan.state,
            ClusterState::Degraded,
            "an orderly change never degrades: {}",
            plan.message
        );
        let n = partial(round)
            .min(plan.steps.len())
            .max(1.min(plan.steps.len()));
        for step in plan.steps.iter().take(n) {
            sim.apply(step);
            sim.assert_all_slots_owned();
        }
        sim.gossip();
    }
    panic!(
        "did not converge: {:?}",
        plan(&sim.topology(shards, replicas))
    );
}

fn assert_formed(sim: &Sim, shards: usize, replicas: usize) {
    assert_eq!(sim.nodes.len(), shards * (1 + replicas));
    assert!(
        sim.nodes.values().all(|n| n.generation == sim.generation),
        "every member runs the desired spec"
    );
    let ids: BTreeSet<&NodeId> = sim.nodes.values().map(|n| &n.id).collect();
    for n in sim.nodes.values() {
        assert!(
            n.known.iter().all(|id| ids.contains(id)),
            "{} still knows a retired member",
            n.id.0
        );
    }
    let covered: usize = sim
        .nodes
        .values()
        .flat_map(|n| n.slots.iter())
        .map(|r| (*r.end() - *r.start()) as usize + 1)
        .sum();
    assert_eq!(covered, SLOT_COUNT as usize);
    for shard in 0..shards {
        let members: Vec<&SimNode> = sim.nodes.values().filter(|n| n.shard == shard).collect();
        let primaries: Vec<&&SimNode> = members.iter().filter(|n| n.primary.is_none()).collect();
        assert_eq!(primaries.len(), 1, "shard {shard} has one primary");
        assert_eq!(
            primaries[0].slots.len(),
            1,
            "shard {shard} primary owns one range"
        );
        for replica in members.iter().filter(|n| n.primary.is_some()) {
            assert_eq!(
                replica.primary.as_ref(),
                Some(&primaries[0].id),
                "replica follows its shard's primary"
            );
        }
    }
    assert!(sim.nodes.values().all(|n| n.lifecycle == Lifecycle::Active));
}

/// Like `assert_formed`, for shards whose slots need not be one range each.
fn assert_scaled(sim: &Sim, shards: usize, replicas: usize) {
    assert_eq!(sim.nodes.len(), shards * (1 + replicas));
    sim.assert_all_slots_owned();
    let ids: BTreeSet<&NodeId> = sim.nodes.values().map(|n| &n.id).collect();
    for (shard, target) in rebalance::target_counts(shards).into_iter().enumerate() {
        let members: Vec<&SimNode> = sim.nodes.values().filter(|n| n.shard == shard).collect();
        let primaries: Vec<&&SimNode> = members.iter().filter(|n| n.primary.is_none()).collect();
        assert_eq!(primaries.len(), 1, "shard {shard} has one primary");
        let owned: usize = primaries[0].slots.iter().map(range_len).sum();
        assert_eq!(owned, target, "shard {shard} holds its even share");
        for n in &members {
            assert!(
                n.known.iter().all(|id| ids.contains(id)),
                "a retired member is still known"
            );
            if n.primary.is_some() {
                assert_eq!(n.primary.as_ref(), Some(&primaries[0].id));
            }
        }
    }
    assert!(sim.nodes.values().all(|n| n.lifecycle == Lifecycle::Active));
}

#[test]
fn three_to_five_to_three_shards() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    converge(&mut sim, 5, 1, |_| usize::MAX);
    assert_scaled(&sim, 5, 1);
    converge(&mut sim, 3, 1, |_| usize::MAX);
    assert_scaled(&sim, 3, 1);
    let names: BTreeSet<&str> = sim.nodes.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["c-0-0", "c-0-1", "c-1-0", "c-1-1", "c-2-0", "c-2-1"]),
        "the added shards are the ones removed"
    );
}

/// Plans and applies rounds on `sim` towards `shape` (shards, replicas) until a plan satisfies
/// `reached` (that plan is not applied), for at most 100 rounds.
fn run_until(sim: &mut Sim, shape: (usize, usize), reached: impl Fn(&Plan) -> bool) {
    for _ in 0..100 {
        let p = plan(&sim.topology(shape.0, shape.1));
        if reached(&p) {
            return;
        }
        for step in &p.steps {
            sim.apply(step);
        }
        sim.gossip();
    }
}

/// A new shard's primary whose view still misses some primary's slots (it has not heard that
/// primary's heartbeat yet) receives no slots until its view is whole; the others do.
#[test]
fn a_new_primary_receives_slots_only_once_it_knows_every_owner() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let moving = |p: &Plan| p.steps.iter().any(|s| matches!(s, Step::MoveSlots { .. }));
    run_until(&mut sim, (5, 1), moving);
    let mut t = sim.topology(5, 1);
    assert!(moving(&plan(&t)), "the scale-out moves slots");
    let new_primary = sim.nodes["c-3-0"].id.clone();
    let first_primary = sim.nodes["c-0-0"].id.clone();
    for m in t.members.iter_mut().filter(|m| m.name == "c-3-0") {
        m.view.as_mut().unwrap().owned_by.remove(&first_primary);
    }
    let p = plan(&t);
    let targets: Vec<&NodeId> = p
        .steps
        .iter()
        .flat_map(|s| match s {
            Step::MoveSlots { targets, .. } => targets.iter().map(|t| &t.id).collect(),
            _ => vec![],
        })
        .collect();
    assert!(!targets.contains(&&new_primary), "{targets:?}");
    assert!(
        moving(&p),
        "the other new shard still receives: {}",
        p.message
    );
    assert!(
        p.message
            .contains("c-3-0 receives slots once it has learned every slot's owner"),
        "{}",
        p.message
    );
}

/// A new shard's primary whose announced hostname does not resolve yet (TLS: its pod is not
/// Ready in the client Service) receives no slots, so no client is sent to a name that gives
/// NXDOMAIN; the other new shard does. Once it resolves, it receives them.
#[test]
fn a_new_primary_receives_slots_only_once_its_announced_name_resolves() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let moving = |p: &Plan| p.steps.iter().any(|s| matches!(s, Step::MoveSlots { .. }));
    run_until(&mut sim, (5, 1), moving);
    let targets_of = |p: &Plan| -> Vec<NodeId> {
        p.steps
            .iter()
            .flat_map(|s| match s {
                Step::MoveSlots { targets, .. } => targets.iter().map(|t| t.id.clone()).collect(),
                _ => vec![],
            })
            .collect()
    };
    let new_primary = sim.nodes["c-3-0"].id.clone();
    let mut t = sim.topology(5, 1);
    assert!(targets_of(&plan(&t)).contains(&new_primary));
    for m in t.members.iter_mut().filter(|m| m.name == "c-3-0") {
        m.name_resolves = false;
    }
    let p = plan(&t);
    assert!(!targets_of(&p).contains(&new_primary), "{:?}", p.steps);
    assert!(
        moving(&p),
        "the other new shard still receives: {}",
        p.message
    );
    assert!(
        p.message
            .contains("c-3-0 receives slots once the hostname it announces resolves"),
        "{}",
        p.message
    );
}

/// The `MoveSlots` steps of `plan` from the member owning `source_id`, with their targets.
fn moves_from<'p>(p: &'p Plan, source_id: &NodeId) -> Vec<&'p [MoveTarget]> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::MoveSlots {
                source_id: from,
                targets,
                ..
            } if from == source_id => Some(targets.as_slice()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_removed_shard_gives_its_last_slots_only_once_every_member_sees_its_earlier_moves() {
    // 5 -> 3: shard 3 gives its slots to shards 0 and 1. Valkey turns it into a replica of
    // whoever takes its last slot, and a member seeing that switch drops every slot it still
    // believes shard 3 owns: a batch given to shard 0 earlier, if that member has not heard
    // of it yet, would be ownerless in its view.
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    converge(&mut sim, 5, 1, |_| usize::MAX);
    let source = sim.nodes["c-3-0"].clone();
    let first = plan(&sim.topology(3, 1));
    let batches = moves_from(&first, &source.id);
    assert_eq!(batches.len(), 1, "{}", first.message);
    assert_eq!(
        batches[0].len(),
        1,
        "one target at a time: {:?}",
        batches[0]
    );
    let step = first
        .steps
        .iter()
        .find(|s| matches!(s, Step::MoveSlots { source_id, .. } if *source_id == source.id))
        .unwrap()
        .clone();
    sim.apply(&step);
    assert!(
        !sim.nodes["c-3-0"].slots.is_empty(),
        "the first batch does not empty the shard"
    );
    // One member (a replica of shard 2) has not heard of the first batch yet.
    let mut t = sim.topology(3, 1);
    let lagging = t.members.iter_mut().find(|m| m.name == "c-2-1").unwrap();
    lagging
        .view
        .as_mut()
        .unwrap()
        .owned_by
        .insert(source.id.clone(), source.slots.clone());
    let held = plan(&t);
    assert!(
        moves_from(&held, &source.id).is_empty(),
        "last batch planned while c-2-1 still sees the old owner: {:?}",
        held.steps
    );
    assert!(
        held.message
            .contains("c-3-0 gives its last slots once c-2-1 see(s)"),
        "{}",
        held.message
    );
    // Once it has heard, the last batch goes.
    let last = plan(&sim.topology(3, 1));
    let batches = moves_from(&last, &source.id);
    assert_eq!(batches.len(), 1, "{}", last.message);
    let left: usize = batches[0]
        .iter()
        .flat_map(|t| t.ranges.iter().map(range_len))
        .sum();
    assert_eq!(
        left,
        sim.nodes["c-3-0"]
            .slots
            .iter()
            .map(range_len)
            .sum::<usize>()
    );
}

#[test]
fn formation_of_three_shards_with_one_replica() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    assert_formed(&sim, 3, 1);
    let names: BTreeSet<&str> = sim.nodes.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["c-0-0", "c-0-1", "c-1-0", "c-1-1", "c-2-0", "c-2-1"])
    );
}

/// Primaries per Kubernetes node in a simulated cluster.
fn primaries_per_host(sim: &Sim) -> BTreeMap<String, usize> {
    let mut per_host = BTreeMap::new();
    for (name, n) in &sim.nodes {
        if n.primary.is_none() && !n.slots.is_empty() {
            *per_host.entry(sim.hosts[name].clone()).or_default() += 1;
        }
    }
    per_host
}

#[test]
fn new_primaries_are_spread_over_kubernetes_nodes_not_picked_by_name() {
    // As the scheduler placed a real 3 x 1 cluster: every shard's first member on node-c.
    let mut sim = Sim::default();
    let place = |sim: &mut Sim, placed: &[(&str, &str)]| {
        for (name, host) in placed {
            sim.hosts.insert(name.to_string(), host.to_string());
        }
    };
    place(
        &mut sim,
        &[
            ("c-0-0", "node-c"),
            ("c-0-1", "node-a"),
            ("c-1-0", "node-c"),
            ("c-1-1", "node-b"),
            ("c-2-0", "node-c"),
            ("c-2-1", "node-a"),
        ],
    );
    form(&mut sim, 3, 1, |_| usize::MAX);
    assert_formed(&sim, 3, 1);
    assert_eq!(
        primaries_per_host(&sim),
        BTreeMap::from([
            ("node-a".to_string(), 1),
            ("node-b".to_string(), 1),
            ("node-c".to_string(), 1)
        ]),
        "losing any one node leaves two of three primaries: Valkey fails over by itself"
    );
    // Two more shards (a scale-out): their primaries go where the fewest are.
    place(
        &mut sim,
        &[
            ("c-3-0", "node-a"),
            ("c-3-1", "node-b"),
            ("c-4-0", "node-a"),
            ("c-4-1", "node-c"),
        ],
    );
    converge(&mut sim, 5, 1, |_| usize::MAX);
    let per_host = primaries_per_host(&sim);
    assert_eq!(per_host.values().sum::<usize>(), 5);
    assert!(per_host.values().all(|&n| n <= 2), "{per_host:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Wherever the scheduler put the members, no new primary could move to a shard-mate's
    /// node and leave the crowdest node less crowded: each shard's primary is on a node with
    /// at most one primary more than any of its replicas' nodes.
    #[test]
    fn new_primaries_are_spread_as_far_as_their_members_allow(
        shards in 1usize..7,
        replicas in 0usize..3,
        nodes in 1usize..5,
        placement in proptest::collection::vec(0usize..5, 24),
    ) {
        let mut sim = Sim::default();
        for shard in 0..shards {
            for index in 0..=replicas {
                let node = placement[shard * 3 + index] % nodes;
                sim.hosts.insert(member_name("c", shard, index), format!("node-{node}"));
            }
        }
        form(&mut sim, shards, replicas, |_| usize::MAX);
        assert_formed(&sim, shards, replicas);
        let per_host = primaries_per_host(&sim);
        for (name, n) in &sim.nodes {
            if n.primary.is_some() {
                continue;
            }
            let here = per_host[&sim.hosts[name]];
            for (other, o) in &sim.nodes {
                if o.shard == n.shard && o.primary.is_some() {
                    let there = per_host.get(&sim.hosts[other]).copied().unwrap_or(0);
                    prop_assert!(here <= there + 1, "{name} on a node with {here} primaries, its replica {other} on one with {there}");
                }
            }
        }
    }
}

#[test]
fn a_new_clusters_members_get_distinct_config_epochs_before_they_meet_and_later_ones_do_not() {
    let mut sim = Sim::default();
    // Created, then epochs before any introduction.
    for step in plan(&sim.topology(3, 1)).steps {
        sim.apply(&step);
    }
    let p = plan(&sim.topology(3, 1));
    assert!(
        p.steps
            .iter()
            .all(|s| matches!(s, Step::SetConfigEpoch { .. })),
        "{:?}",
        p.steps
    );
    assert_eq!(p.steps.len(), 6, "{}", p.message);
    form(&mut sim, 3, 1, |_| usize::MAX);
    let epochs: BTreeSet<u64> = sim.nodes.values().map(|n| n.config_epoch).collect();
    assert_eq!(
        epochs,
        (1..=6).collect(),
        "every member a distinct, non-zero epoch"
    );
    // Members that join a formed cluster keep 0 (Valkey would refuse: they are met at once).
    let mut t = sim.topology(4, 1);
    for _ in 0..100 {
        let p = plan(&t);
        if p.state == ClusterState::Active && p.steps.is_empty() {
            break;
        }
        assert!(
            !p.steps
                .iter()
                .any(|s| matches!(s, Step::SetConfigEpoch { .. })),
            "{:?}",
            p.steps
        );
        for step in &p.steps {
            sim.apply(step);
        }
        sim.gossip();
        t = sim.topology(4, 1);
    }
    assert_scaled(&sim, 4, 1);
}

#[test]
fn a_new_clusters_primaries_get_their_slots_before_they_meet() {
    let mut sim = Sim::default();
    // Created, then given distinct config epochs.
    for _ in 0..2 {
        for step in plan(&sim.topology(3, 1)).steps {
            sim.apply(&step);
        }
    }
    let assign = plan(&sim.topology(3, 1));
    assert_eq!(assign.message, "assigning hash slots");
    assert_eq!(assign.steps.len(), 3, "{:?}", assign.steps);
    assert!(
        assign
            .steps
            .iter()
            .all(|s| matches!(s, Step::AssignSlots { .. }))
    );
    for step in &assign.steps {
        sim.apply(step);
    }
    // Then they meet (the handshake carries the slots), and slots are never given twice.
    let meets = plan(&sim.topology(3, 1));
    assert!(
        meets.steps.iter().all(|s| matches!(s, Step::Meet { .. })) && !meets.steps.is_empty(),
        "{meets:?}"
    );
    form(&mut sim, 3, 1, |_| usize::MAX);
    let owners: BTreeSet<&str> = sim
        .nodes
        .values()
        .filter(|n| !n.slots.is_empty())
        .map(|n| n.addr.host.as_str())
        .collect();
    assert_eq!(owners.len(), 3, "one owner per shard");
}

#[test]
fn members_that_have_not_heard_of_each_other_are_introduced_directly_not_left_to_gossip() {
    let mut sim = Sim::default();
    // Created, given distinct config epochs, then the primaries their slots.
    for _ in 0..3 {
        for step in plan(&sim.topology(2, 1)).steps {
            sim.apply(&step);
        }
    }
    // The seed meets everybody; nobody gossips (as if Valkey had not got round to it yet).
    let meets = plan(&sim.topology(2, 1)).steps;
    assert_eq!(meets.len(), 3, "the seed meets the other three: {meets:?}");
    for step in &meets {
        sim.apply(step);
    }
    let next = plan(&sim.topology(2, 1));
    assert!(
        next.message.contains("not heard of each other"),
        "{}",
        next.message
    );
    // Each of the three non-seeds meets the two it does not know: 6 direct introductions.
    assert_eq!(next.steps.len(), 6, "{:?}", next.steps);
    assert!(next.steps.iter().all(|a| matches!(a, Step::Meet { .. })));
    for step in &next.steps {
        sim.apply(step);
    }
    let everyone: BTreeSet<NodeId> = sim.nodes.values().map(|n| n.id.clone()).collect();
    assert!(sim.nodes.values().all(|n| n.known == everyone));
    let after = plan(&sim.topology(2, 1));
    assert!(
        after.steps.iter().all(|a| !matches!(a, Step::Meet { .. })),
        "nothing left to introduce: {after:?}"
    );
}

#[test]
fn members_back_at_new_addresses_with_their_ids_are_introduced_again_to_everyone() {
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    // A full restart with volumes: every pod comes back with its node id at a new IP, and
    // every member still has every other at its old one.
    let old: BTreeMap<NodeId, String> = sim
        .nodes
        .values()
        .map(|n| (n.id.clone(), n.addr.host.clone()))
        .collect();
    for (i, n) in sim.nodes.values_mut().enumerate() {
        n.addr = MemberAddr::new(format!("10.9.0.{}", i + 1), 6379);
        n.stale = old
            .iter()
            .filter(|(id, _)| **id != n.id)
            .map(|(id, ip)| (id.clone(), ip.clone()))
            .collect();
    }
    let p = plan(&sim.topology(2, 1));
    assert!(
        p.message.contains("came back at a new address"),
        "{}",
        p.message
    );
    // Each of the four is introduced to the three others (through each of them).
    assert_eq!(p.steps.len(), 12, "{:?}", p.steps);
    assert!(p.steps.iter().all(|s| matches!(s, Step::Meet { .. })));
    for step in &p.steps {
        sim.apply(step);
    }
    let after = plan(&sim.topology(2, 1));
    assert_eq!(after.state, ClusterState::Active, "{}", after.message);
    assert!(after.steps.is_empty(), "{after:?}");
    // Slots, roles and ids are what they were: nothing was re-formed.
    sim.assert_all_slots_owned();
    assert_eq!(
        sim.nodes.values().filter(|n| n.primary.is_some()).count(),
        2
    );
}

#[test]
fn first_step_creates_every_member() {
    let p = plan(&Sim::default().topology(2, 2));
    assert_eq!(p.steps.len(), 6);
    assert_eq!(p.state, ClusterState::Creating);
}

#[test]
fn unreachable_members_are_waited_for_by_name() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 1, |_| usize::MAX);
    let mut t = sim.topology(1, 1);
    t.members[1].view = None;
    let p = plan(&t);
    assert!(p.steps.is_empty());
    assert_eq!(
        p.state,
        ClusterState::Degraded,
        "a formed cluster that loses a member is degraded"
    );
    assert!(p.message.contains("c-0-1"), "{}", p.message);
    assert!(
        !p.names_the_missing,
        "the rest carries on; the note names the silent one"
    );
    assert_eq!(p.awaiting.silent, vec!["c-0-1".to_string()]);
    // Nobody answers: the plan waits for the members it names, named once (no second
    // "not answering" note), and says so as data too.
    t.members[0].view = None;
    let p = plan(&t);
    assert!(p.names_the_missing);
    assert_eq!(p.message.matches("c-0-1").count(), 1, "{}", p.message);
    assert_eq!(
        p.awaiting,
        Awaiting {
            on: Wait::Established {
                members: vec!["c-0-0".into(), "c-0-1".into()],
            },
            silent: vec![],
        }
    );
}

#[test]
fn a_formed_cluster_plans_nothing() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let p = plan(&sim.topology(3, 1));
    assert_eq!(p.state, ClusterState::Active);
    assert!(p.steps.is_empty());
    assert!(p.message.contains("16384"));
}

#[test]
fn roles_come_from_valkey_not_names() {
    // After a failover, c-0-1 owns the slots and c-0-0 replicates it: nothing to do.
    let mut sim = Sim::default();
    form(&mut sim, 1, 1, |_| usize::MAX);
    let a = sim.nodes["c-0-0"].clone();
    let b = sim.nodes["c-0-1"].clone();
    let n = sim.nodes.get_mut("c-0-1").unwrap();
    n.primary = None;
    n.slots = a.slots.clone();
    let n = sim.nodes.get_mut("c-0-0").unwrap();
    n.primary = Some(b.id.clone());
    n.slots.clear();
    let p = plan(&sim.topology(1, 1));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.state, ClusterState::Active);
}

#[test]
fn a_stalled_replacement_for_an_outdated_spec_is_retired_once_the_spec_changes_again() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 0, |_| usize::MAX);
    let mut t = sim.topology(1, 0);
    // The replacement for an image that cannot be pulled never ran; the image was fixed since.
    let mut stuck = Member::new("c-0-1", 0);
    stuck.current = false;
    stuck.pod_problem = Some("ImagePullBackOff: image not found".into());
    t.members[0].current = false;
    t.members.push(stuck);
    t.members.push(Member::new("c-0-2", 0));
    let p = plan(&t);
    assert_eq!(
        p.steps,
        vec![Step::MarkLeaving {
            names: vec!["c-0-1".into()]
        }]
    );
    assert_eq!(p.state, ClusterState::Updating);
}

#[test]
fn a_stalled_rollout_says_why_and_keeps_the_old_members() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 0, |_| usize::MAX);
    let mut t = sim.topology(1, 0);
    t.members[0].current = false;
    let mut stuck = Member::new("c-0-1", 0);
    stuck.pod_problem = Some("ImagePullBackOff: image not found".into());
    t.members.push(stuck);
    let p = plan(&t);
    assert!(p.steps.is_empty());
    assert_eq!(p.state, ClusterState::Updating);
    assert!(p.message.contains("ImagePullBackOff"), "{}", p.message);
}

#[test]
fn subtract_leaves_the_gaps() {
    assert_eq!(
        subtract(&(0..=99), &[10..=19, 50..=200]),
        vec![0..=9, 20..=49]
    );
    assert_eq!(subtract(&(0..=99), &[]), vec![0..=99]);
    assert_eq!(subtract(&(0..=99), &[0..=99]), Vec::<SlotRange>::new());
    assert_eq!(subtract(&(5..=9), &[0..=5, 9..=9]), vec![6..=8]);
}

proptest! {
    /// From any shape, and with the operator crashing after any prefix of any batch, formation
    /// converges with every slot covered exactly once, one primary per shard and every replica
    /// attached to it; no node is created twice and no slot is ever owned twice.
    #[test]
    fn rollouts_and_replica_changes_converge_without_losing_a_slot(
        shards in 1usize..5,
        replicas in 0usize..3,
        new_replicas in 0usize..3,
        cuts in proptest::collection::vec(1usize..4, 1..50),
    ) {
        let mut sim = Sim::default();
        form(&mut sim, shards, replicas, |_| usize::MAX);
        // Repoint the image (every member stale) and change the replica count at once.
        sim.generation += 1;
        converge(&mut sim, shards, new_replicas, |round| cuts[round % cuts.len()]);
        assert_formed(&sim, shards, new_replicas);
    }

    /// Scaling shards out and in (with any replica count, crashing after any prefix of any
    /// batch) never leaves a slot unowned or owned twice, never deletes a member owning
    /// slots, and ends with every shard holding its even share.
    #[test]
    fn shard_scaling_converges_without_losing_a_slot(
        shards in 1usize..5,
        new_shards in 1usize..6,
        replicas in 0usize..3,
        cuts in proptest::collection::vec(1usize..4, 1..50),
    ) {
        let mut sim = Sim::default();
        form(&mut sim, shards, replicas, |_| usize::MAX);
        converge(&mut sim, new_shards, replicas, |round| cuts[round % cuts.len()]);
        assert_scaled(&sim, new_shards, replicas);
    }

    #[test]
    fn formation_converges_from_any_crash_point(
        shards in 1usize..7,
        replicas in 0usize..3,
        cuts in proptest::collection::vec(1usize..4, 1..50),
    ) {
        let mut sim = Sim::default();
        form(&mut sim, shards, replicas, |round| cuts[round % cuts.len()]);
        assert_formed(&sim, shards, replicas);
    }
}

#[test]
fn a_stale_member_gets_a_replacement() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 0, |_| usize::MAX);
    let mut t = sim.topology(1, 0);
    t.members[0].current = false;
    let p = plan(&t);
    assert_eq!(
        p.steps,
        vec![Step::CreateNode {
            name: "c-0-1".into(),
            shard: 0
        }],
        "{}",
        p.message
    );
    assert_eq!(p.state, ClusterState::Updating);
}

#[test]
fn slots_of_a_failed_primary_are_never_given_to_its_empty_replacement() {
    // Shard 0's primary lost its data and came back as a new, empty node: the old id (no
    // longer a member) still owns the slots in everyone's view, and the replica still follows
    // it. Assigning the slots to the empty node, or attaching the replica to it, would wipe
    // the shard: the plan must wait for the replica to take over.
    let mut sim = Sim::default();
    form(&mut sim, 1, 1, |_| usize::MAX);
    let mut t = sim.topology(1, 1);
    let old_primary = t.members[0].view.clone().unwrap();
    let slots = old_primary.slots.clone();
    let reborn = t.members[0].view.as_mut().unwrap();
    reborn.id = NodeId("reborn".into());
    reborn.slots.clear();
    reborn.owned_by = BTreeMap::from([(old_primary.id.clone(), slots.clone())]);
    reborn.known.insert(NodeId("reborn".into()));
    reborn.cluster_ok = false;
    t.members[0].node_id = Some(NodeId("reborn".into()));
    for m in &mut t.members {
        let v = m.view.as_mut().unwrap();
        v.known.insert(NodeId("reborn".into()));
        v.cluster_ok = false;
    }
    let p = plan(&t);
    assert!(
        p.steps
            .iter()
            .all(|a| !matches!(a, Step::AssignSlots { .. } | Step::Replicate { .. })),
        "{:?}",
        p.steps
    );
    assert_eq!(p.state, ClusterState::Degraded, "{}", p.message);
}

/// Shard 0's primary pod was lost and replaced: its member answers with a new, empty node id;
/// the old id still owns the slots in everybody's view and the replica still follows it.
fn primary_pod_replaced(shards: usize) -> Topology {
    let mut sim = Sim::default();
    form(&mut sim, shards, 1, |_| usize::MAX);
    let mut t = sim.topology(shards, 1);
    let reborn = t.members[0].view.as_mut().unwrap();
    assert!(!reborn.slots.is_empty(), "c-0-0 is shard 0's primary");
    reborn.id = NodeId("reborn".into());
    reborn.slots.clear();
    reborn.primary_id = None;
    reborn.known = BTreeSet::from([NodeId("reborn".into())]);
    t
}

#[test]
fn a_member_that_lost_its_identity_is_replaced_and_its_replica_promoted_at_once() {
    let t = primary_pod_replaced(3);
    let replica = t.members[1].addr.clone().unwrap();
    let p = plan(&t);
    assert_eq!(p.state, ClusterState::Degraded);
    assert_eq!(
        p.steps,
        vec![
            Step::Failover {
                member: replica,
                shard: 0,
                mode: FailoverMode::Force
            },
            Step::MarkLeaving {
                names: vec!["c-0-0".into()]
            }
        ],
        "{}",
        p.message
    );
    assert!(p.message.contains("promoting c-0-1"), "{}", p.message);
}

#[test]
fn without_a_majority_of_primaries_the_replica_takes_over() {
    let t = primary_pod_replaced(1);
    let p = plan(&t);
    assert!(
        p.steps.iter().any(|a| matches!(
            a,
            Step::Failover {
                mode: FailoverMode::Takeover,
                ..
            }
        )),
        "{:?}",
        p.steps
    );
}

#[test]
fn nothing_is_forced_while_a_member_does_not_answer() {
    // A paused primary (SIGSTOP) is not gone: Valkey's own failure detection decides.
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let mut t = sim.topology(3, 1);
    t.members[0].view = None;
    let p = plan(&t);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.state, ClusterState::Degraded);
}

/// A formed 3 x 1 cluster with the primaries of shards 1 and 2 silent (their node is down):
/// the one primary left is no majority. The flags say whether Kubernetes reports their pods
/// not Ready and whether the answering members flag them failing. Returns their replicas.
fn two_primaries_down(pod_not_ready: bool, flagged_failing: bool) -> (Topology, Vec<MemberAddr>) {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let mut t = sim.topology(3, 1);
    let silent: Vec<NodeId> = ["c-1-0", "c-2-0"]
        .iter()
        .map(|n| sim.nodes[*n].id.clone())
        .collect();
    for m in &mut t.members {
        if m.name == "c-1-0" || m.name == "c-2-0" {
            assert!(!m.view.as_ref().unwrap().slots.is_empty(), "a primary");
            m.view = None;
            m.pod_not_ready = pod_not_ready;
        } else if flagged_failing {
            m.view.as_mut().unwrap().failing = silent.iter().cloned().collect();
        }
    }
    let replicas = t
        .members
        .iter()
        .filter(|m| {
            m.view
                .as_ref()
                .and_then(|v| v.primary_id.as_ref())
                .is_some_and(|p| silent.contains(p))
        })
        .map(|m| m.addr.clone().unwrap())
        .collect();
    (t, replicas)
}

#[test]
fn primaries_too_many_for_valkey_to_fail_over_are_taken_over_once_everybody_agrees() {
    let (t, replicas) = two_primaries_down(true, true);
    assert_eq!(replicas.len(), 2);
    let p = plan(&t);
    assert_eq!(p.state, ClusterState::Degraded);
    let promoted: Vec<(&MemberAddr, FailoverMode)> = p
        .steps
        .iter()
        .filter_map(|a| match a {
            Step::Failover { member, mode, .. } => Some((member, *mode)),
            _ => None,
        })
        .collect();
    assert_eq!(
        promoted,
        replicas
            .iter()
            .map(|r| (r, FailoverMode::Takeover))
            .collect::<Vec<_>>(),
        "{}",
        p.message
    );
    assert!(
        p.message.contains("its primary c-1-0 is down") && p.message.contains("promoting c-1-1"),
        "{}",
        p.message
    );
}

#[test]
fn a_silent_primary_is_not_taken_over_on_one_sides_word() {
    // Valkey's members still reach it (a network problem between it and the operator only),
    // or Kubernetes still reports its pod Ready: wait.
    for (pod_not_ready, flagged_failing) in [(true, false), (false, true), (false, false)] {
        let (t, _) = two_primaries_down(pod_not_ready, flagged_failing);
        let p = plan(&t);
        assert!(
            !p.steps.iter().any(|a| matches!(a, Step::Failover { .. })),
            "pod not ready {pod_not_ready}, flagged {flagged_failing}: {:?}",
            p.steps
        );
    }
}

#[test]
fn with_a_majority_left_valkey_fails_over_by_itself() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let mut t = sim.topology(3, 1);
    let silent = sim.nodes["c-0-0"].id.clone();
    for m in &mut t.members {
        if m.name == "c-0-0" {
            m.view = None;
            m.pod_not_ready = true;
        } else {
            m.view.as_mut().unwrap().failing = [silent.clone()].into();
        }
    }
    let p = plan(&t);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
}

#[test]
fn the_most_up_to_date_replica_is_promoted() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 2, |_| usize::MAX);
    let mut t = sim.topology(3, 2);
    let old = t.members[0].view.clone().unwrap().id;
    let reborn = t.members[0].view.as_mut().unwrap();
    reborn.id = NodeId("reborn".into());
    reborn.slots.clear();
    for (i, m) in t
        .members
        .iter_mut()
        .enumerate()
        .filter(|(_, m)| m.shard == 0)
    {
        let v = m.view.as_mut().unwrap();
        if v.primary_id.as_ref() == Some(&old) {
            v.repl_offset = 100 + i as i64 * (if m.name == "c-0-1" { 10 } else { 1 });
        }
    }
    let best = t
        .members
        .iter()
        .filter(|m| m.view.as_ref().unwrap().primary_id.as_ref() == Some(&old))
        .max_by_key(|m| m.view.as_ref().unwrap().repl_offset)
        .unwrap()
        .addr
        .clone()
        .unwrap();
    let p = plan(&t);
    assert!(
        p.steps.contains(&Step::Failover {
            member: best,
            shard: 0,
            mode: FailoverMode::Force
        }),
        "{:?}",
        p.steps
    );
}

/// A rollout fails over to its in-sync replacement only once the hostname the replacement
/// announces resolves (clients are sent to it by name as soon as it is primary).
#[test]
fn a_rollout_fails_over_only_to_a_replacement_whose_name_resolves() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 1, |_| usize::MAX);
    sim.generation += 1;
    for _ in 0..200 {
        let mut t = sim.topology(1, 1);
        let p = plan(&t);
        let failover = p.steps.iter().find_map(|s| match s {
            Step::Failover { member, .. } => Some(member.clone()),
            _ => None,
        });
        if let Some(target) = failover {
            // Both replacements in sync: one whose name does not resolve yet is passed over.
            let unresolved = t
                .members
                .iter()
                .position(|m| m.addr.as_ref() == Some(&target));
            t.members[unresolved.unwrap()].name_resolves = false;
            let other = plan(&t);
            assert!(
                other.message.contains("failing over from c-0-0 to c-0-3"),
                "{}",
                other.message
            );
            // Neither resolves: the failover waits.
            for m in t.members.iter_mut().filter(|m| m.current) {
                m.name_resolves = false;
            }
            let waiting = plan(&t);
            assert!(waiting.steps.is_empty(), "{:?}", waiting.steps);
            assert!(
                waiting
                    .message
                    .contains("waiting for the hostname c-0-2 announces to resolve"),
                "{}",
                waiting.message
            );
            return;
        }
        for a in &p.steps {
            sim.apply(a);
        }
        sim.gossip();
    }
    panic!("the rollout never failed over");
}

#[test]
fn rollout_progress_counts_shards_and_members() {
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    sim.generation += 1;
    // Run until the first shard is done and the second is rolling.
    for _ in 0..200 {
        let p = plan(&sim.topology(2, 1));
        if p.message.contains("rolling out shard 1") {
            assert!(p.message.contains("1 of 2 shards done"), "{}", p.message);
            assert!(
                p.message.contains("2 of 4 members on the new spec"),
                "{}",
                p.message
            );
            return;
        }
        for a in &p.steps {
            sim.apply(a);
        }
        sim.gossip();
    }
    panic!("the rollout never reached shard 1");
}

/// The plan for `t` is to retire `name`, and nothing else.
fn assert_retires_only(t: &Topology, name: &str) {
    let p = plan(t);
    assert_eq!(
        p.steps,
        vec![Step::MarkLeaving {
            names: vec![name.into()]
        }],
        "{}",
        p.message
    );
}

/// A formed 3 x 1 cluster whose shard 0 primary (c-0-0) is gone for good: its process died
/// without persistence (pod Failed) and it answers nothing.
fn primary_gone(shards: usize) -> Topology {
    let mut sim = Sim::default();
    form(&mut sim, shards, 1, |_| usize::MAX);
    let mut t = sim.topology(shards, 1);
    assert!(!t.members[0].view.as_ref().unwrap().slots.is_empty());
    t.members[0].view = None;
    t.members[0].addr = None;
    t.members[0].gone = Some("its Valkey process exited (Error, exit code 137)".into());
    t
}

#[test]
fn a_shard_whose_every_member_is_gone_is_reported_as_data_lost_and_no_other() {
    // One primary gone, its replica alive: nothing lost.
    assert_eq!(plan(&primary_gone(2)).lost_shards, Vec::<usize>::new());
    // A full restart of memory-only members: every member gone, every shard's data with them.
    let mut t = primary_gone(2);
    for m in &mut t.members {
        m.view = None;
        m.addr = None;
        m.gone = Some("its pod was lost (deleted, evicted or its node removed)".into());
    }
    let p = plan(&t);
    assert_eq!(p.lost_shards, vec![0, 1], "{}", p.message);
    assert!(p.message.starts_with("DATA LOST: "), "{}", p.message);
    assert!(p.message.contains("shard(s) 0, 1"), "{}", p.message);
    // The members go rounds apart: shard 0's first member was already marked Leaving and its
    // replacement created (Joining, empty) when its second goes. The second's round reports
    // the shard; shard 1 still has its data.
    let mut t = primary_gone(2);
    t.members[0].lifecycle = Lifecycle::Leaving;
    t.members.push(Member::new("c-0-2", 0));
    t.members[1].view = None;
    t.members[1].addr = None;
    t.members[1].gone = Some("its pod was lost (deleted, evicted or its node removed)".into());
    let p = plan(&t);
    assert_eq!(p.lost_shards, vec![0], "{}", p.message);
    // Memory + AOF members (no volume) restarted all at once: each answers again, empty, under
    // a new node id. Their shards' data is gone just the same.
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    let mut t = sim.topology(2, 1);
    for m in &mut t.members {
        let view = m.view.as_mut().unwrap();
        *view = MemberView::bare(&format!("{}-new", view.id.0));
    }
    let p = plan(&t);
    assert_eq!(p.lost_shards, vec![0, 1], "{}", p.message);
    assert!(p.message.starts_with("DATA LOST: "), "{}", p.message);
    // The same, but they come back one by one: the first empty ones are introduced and given
    // the slots before the last answers. The round that gives a shard's slots out says so.
    let mut t = sim.topology(2, 1);
    for m in &mut t.members {
        let view = m.view.as_mut().unwrap();
        *view = MemberView::bare(&format!("{}-new", view.id.0));
    }
    t.members[3].view = None;
    t.members[3].addr = None;
    let assigning = (0..10)
        .map(|_| {
            let p = plan(&t);
            for step in &p.steps {
                if let Step::Meet { via, target } = step {
                    let id = |a: &MemberAddr, t: &Topology| {
                        t.members
                            .iter()
                            .find(|m| m.addr.as_ref() == Some(a))
                            .and_then(|m| m.view.as_ref())
                            .map(|v| v.id.clone())
                    };
                    let (v, g) = (id(via, &t).unwrap(), id(target, &t).unwrap());
                    for m in &mut t.members {
                        if let Some(view) = m.view.as_mut() {
                            view.known.extend([v.clone(), g.clone()]);
                        }
                    }
                }
            }
            p
        })
        .find(|p| {
            p.steps
                .iter()
                .any(|s| matches!(s, Step::AssignSlots { .. }))
        })
        .expect("slots are given out");
    assert!(!assigning.lost_shards.is_empty(), "{}", assigning.message);
    assert!(
        assigning.message.starts_with("DATA LOST: "),
        "{}",
        assigning.message
    );
}

#[test]
fn a_primary_gone_for_good_is_not_waited_for_its_replica_is_promoted_at_once() {
    let t = primary_gone(3);
    let replica = t.members[1].addr.clone().unwrap();
    let p = plan(&t);
    assert_eq!(p.state, ClusterState::Degraded);
    assert_eq!(
        p.steps,
        vec![Step::Failover {
            member: replica,
            shard: 0,
            mode: FailoverMode::Force
        }],
        "{}",
        p.message
    );
    assert!(
        p.message
            .contains("its primary c-0-0 is gone (its Valkey process exited")
            && p.message.contains("promoting c-0-1"),
        "{}",
        p.message
    );
    // A single shard has no majority to vote: TAKEOVER.
    let p = plan(&primary_gone(1));
    assert!(matches!(
        p.steps[..],
        [Step::Failover {
            mode: FailoverMode::Takeover,
            ..
        }]
    ));
}

#[test]
fn a_gone_member_owning_no_slots_is_retired_and_replaced() {
    // After the promotion: the replica owns shard 0, the gone member nothing.
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let primary = sim.nodes["c-0-0"].addr.clone();
    let replica = sim.nodes["c-0-1"].addr.clone();
    sim.apply(&Step::Failover {
        member: replica,
        shard: 0,
        mode: FailoverMode::Force,
    });
    sim.gossip();
    let mut t = sim.topology(3, 1);
    let gone = t
        .members
        .iter_mut()
        .find(|m| m.addr.as_ref() == Some(&primary))
        .unwrap();
    gone.view = None;
    gone.addr = None;
    gone.gone = Some("its pod was lost".into());
    assert_retires_only(&t, "c-0-0");
    // Retired, it is replaced: a new member for shard 0 first.
    t.members[0].lifecycle = Lifecycle::Leaving;
    let p = plan(&t);
    assert!(
        matches!(&p.steps[..], [Step::CreateNode { shard: 0, .. }]),
        "{:?}",
        p.steps
    );
}

#[test]
fn a_gone_replica_is_retired_without_touching_its_primary() {
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    let mut t = sim.topology(2, 1);
    let replica = t
        .members
        .iter_mut()
        .find(|m| m.view.as_ref().unwrap().primary_id.is_some())
        .unwrap();
    let name = replica.name.clone();
    replica.view = None;
    replica.addr = None;
    replica.gone = Some("its Valkey process exited (OOMKilled, exit code 137)".into());
    let p = plan(&t);
    assert_eq!(p.steps, vec![Step::MarkLeaving { names: vec![name] }]);
}

#[test]
fn a_gone_primary_without_an_answering_replica_is_reported_not_forced() {
    let mut t = primary_gone(3);
    t.members[1].view = None;
    t.members[1].addr = None;
    let p = plan(&t);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert!(
        p.message.contains("no replica of it answers"),
        "{}",
        p.message
    );
}

#[test]
fn a_takeover_the_rest_of_the_cluster_did_not_accept_is_healed_by_forgetting_the_gone_primary() {
    // c-0-1 took over from the dead c-0-0, but its config epoch tied c-0-0's: it owns shard
    // 0's slots in its own view while everybody else still sees c-0-0 owning them.
    let mut t = primary_gone(3);
    let gone_id = t.members[0].node_id.clone().unwrap();
    let shard0 = even_ranges(3)[0].clone();
    let promoted = t.members[1].view.as_mut().unwrap();
    promoted.is_primary = true;
    promoted.primary_id = None;
    promoted.slots = vec![shard0.clone()];
    promoted.owned_by.remove(&gone_id);
    promoted.owned_by.insert(promoted.id.clone(), vec![shard0]);
    let p = plan(&t);
    let expected: Vec<Step> = t.members[2..]
        .iter()
        .map(|m| Step::Forget {
            via: m.addr.clone().unwrap(),
            node: gone_id.clone(),
        })
        .collect();
    assert_eq!(p.steps, expected, "{}", p.message);
    assert!(
        p.message
            .contains("c-0-1 took over from its gone primary c-0-0")
            && p.message.contains("making them forget c-0-0"),
        "{}",
        p.message
    );
    // Once they forgot it and took the promoted member's claim, the gone member is retired.
    for m in &mut t.members[2..] {
        m.view.as_mut().unwrap().owned_by.remove(&gone_id);
    }
    assert_retires_only(&t, "c-0-0");
}

#[test]
fn a_silent_member_does_not_stall_the_rest_of_the_cluster() {
    // Shard 0's replica stops answering (its node is down) while shard 1 gains a replica:
    // the new member is created, introduced and attached; the silent one is neither forgotten
    // nor retired, and the cluster says Degraded, naming it.
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    let silent_id = sim.nodes["c-0-1"].id.clone();
    let topology = |sim: &Sim| {
        let mut t = sim.topology(2, 2);
        let m = t.members.iter_mut().find(|m| m.name == "c-0-1").unwrap();
        m.view = None;
        t
    };
    let mut last = None;
    for _ in 0..50 {
        let p = plan(&topology(&sim));
        for a in &p.steps {
            match a {
                Step::Forget { node, .. } => {
                    assert_ne!(node, &silent_id, "forgot the silent member")
                }
                Step::MarkLeaving { names } => {
                    assert!(
                        !names.contains(&"c-0-1".to_string()),
                        "retired the silent member"
                    )
                }
                _ => {}
            }
            sim.apply(a);
        }
        sim.gossip();
        if p.steps.is_empty() {
            last = Some(p);
            break;
        }
    }
    let p = last.expect("the plan settles");
    assert_eq!(p.state, ClusterState::Degraded, "{}", p.message);
    assert!(p.message.contains("c-0-1"), "{}", p.message);
    // Shard 1 has its two replicas; shard 0 its new one besides the silent one.
    for shard in [0, 1] {
        let replicas = sim
            .nodes
            .values()
            .filter(|n| n.shard == shard && n.primary.is_some())
            .count();
        assert_eq!(replicas, 2, "shard {shard}: {}", p.message);
    }
}

#[test]
fn a_silent_member_holds_rollouts_and_slot_moves() {
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    let mut t = sim.topology(3, 1);
    t.members
        .iter_mut()
        .find(|m| m.name == "c-0-1")
        .unwrap()
        .view = None;
    // Scale-out: the new shard's members are created and join, but no slot moves.
    for _ in 0..50 {
        let p = plan(&t);
        assert!(
            !p.steps.iter().any(|a| matches!(a, Step::MoveSlots { .. })),
            "moved slots with a member silent: {:?}",
            p.steps
        );
        if p.steps.is_empty() {
            break;
        }
        for a in &p.steps {
            sim.apply(a);
        }
        sim.gossip();
        t = sim.topology(3, 1);
        t.members
            .iter_mut()
            .find(|m| m.name == "c-0-1")
            .unwrap()
            .view = None;
    }
    assert_eq!(sim.nodes.len(), 6);
}

/// Valkey copies a primary's open slots (`MIGRATING`/`IMPORTING`) to its replicas' view of
/// themselves. A replica cannot take `CLUSTER SETSLOT`, so only primaries' open slots are moved
/// on or closed: a replica's are its primary's, settled on the primary.
#[test]
fn open_slots_seen_on_replicas_are_settled_on_primaries_only() {
    let mut sim = Sim::default();
    form(&mut sim, 2, 1, |_| usize::MAX);
    let source = sim.nodes["c-0-0"].clone();
    let target = sim.nodes["c-1-0"].clone();
    let gone = NodeId("a-primary-that-is-gone".into());
    let slot = |peer: &NodeId| OpenSlot {
        slot: 7,
        peer: peer.clone(),
    };
    let mut t = sim.topology(2, 1);
    for m in &mut t.members {
        let view = m.view.as_mut().unwrap();
        match m.name.as_str() {
            "c-0-0" | "c-0-1" => view.migrating = vec![slot(&target.id)],
            "c-1-0" => view.importing = vec![slot(&source.id)],
            // Importing from a primary no longer there: on a replica, nothing to close.
            "c-1-1" => view.importing = vec![slot(&gone)],
            _ => {}
        }
    }
    let p = plan(&t);
    assert_eq!(p.steps.len(), 1, "{:?}", p.steps);
    match &p.steps[0] {
        Step::MoveSlots {
            source: from,
            targets,
            ..
        } => {
            assert_eq!(from, &source.addr);
            assert_eq!(targets.len(), 1);
            assert_eq!(targets[0].member, target.addr);
            assert_eq!(targets[0].ranges, vec![7..=7]);
        }
        other => panic!("expected the move to go on between the primaries, got {other:?}"),
    }
}

/// The kinds of change the steps of a run were part of, in order, without repeats.
fn changes_until_settled(sim: &mut Sim, shards: usize, replicas: usize) -> Vec<Change> {
    let mut seen: Vec<Change> = Vec::new();
    for _ in 0..400 {
        let p = plan(&sim.topology(shards, replicas));
        if seen.last() != Some(&p.change) {
            seen.push(p.change);
        }
        if p.state == ClusterState::Active && p.steps.is_empty() {
            return seen;
        }
        for a in &p.steps {
            sim.apply(a);
        }
        sim.gossip();
    }
    panic!("did not settle: {seen:?}");
}

#[test]
fn every_step_names_the_change_it_is_part_of() {
    let mut sim = Sim::default();
    assert_eq!(
        changes_until_settled(&mut sim, 2, 1),
        vec![Change::Forming, Change::Settled]
    );
    sim.generation += 1;
    assert_eq!(
        changes_until_settled(&mut sim, 2, 1),
        vec![Change::RollingOut, Change::Settled],
        "a rollout is RollingOut from its first replacement to its last retirement"
    );
    assert_eq!(
        changes_until_settled(&mut sim, 3, 1),
        vec![Change::Scaling, Change::Settled]
    );
    assert_eq!(
        changes_until_settled(&mut sim, 3, 0),
        vec![Change::Scaling, Change::Settled],
        "retiring excess replicas is scaling"
    );
    assert_eq!(
        changes_until_settled(&mut sim, 2, 0),
        vec![Change::Scaling, Change::Settled]
    );
    assert!(Change::RollingOut.progressing() && !Change::Settled.progressing());
}

#[test]
fn replacing_a_member_that_is_gone_or_lost_its_identity_says_so() {
    let p = plan(&primary_gone(3));
    // The first step (the replica takes over) leaves the cluster Degraded.
    assert_eq!(p.change, Change::Degraded, "{}", p.message);
    let mut t = primary_gone(3);
    t.members[0].lifecycle = Lifecycle::Leaving;
    t.members[1].view.as_mut().unwrap().primary_id = None;
    assert_eq!(
        change_of(&t, ClusterState::Updating),
        Change::ReplacingMembers
    );
    assert_eq!(
        change_of(&primary_pod_replaced(3), ClusterState::Updating),
        Change::ReplacingMembers
    );
}

/// A node down with two primaries on it: one's pod is deleted (gone for good), the other's
/// member stays silent. The gone one's shard is taken over and the member replaced and
/// retired; the silent primary's shard is not "without a primary" and its replica is not
/// waited for, so neither blocks the retirement (seen: the lost_members e2e timed out).
#[test]
fn a_silent_primary_does_not_hold_up_replacing_a_gone_one() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let topology = |sim: &Sim| {
        let mut t = sim.topology(3, 1);
        for m in &mut t.members {
            match m.name.as_str() {
                "c-2-0" => m.view = None,
                "c-1-0" => {
                    m.view = None;
                    m.addr = None;
                    m.gone = Some("its pod has been terminating for 80 s".into());
                }
                _ => {}
            }
        }
        t
    };
    for _ in 0..60 {
        let p = plan(&topology(&sim));
        assert!(
            !p.message.contains("have no primary owning slots"),
            "{}",
            p.message
        );
        if p.steps
            .iter()
            .any(|a| matches!(a, Step::DeleteNode { name } if name == "c-1-0"))
        {
            return;
        }
        for a in &p.steps {
            sim.apply(a);
        }
        sim.gossip();
    }
    panic!("c-1-0 was never retired: {}", plan(&topology(&sim)).message);
}
