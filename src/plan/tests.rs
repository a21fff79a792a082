//! Planner tests: single rules, plus a simulation that applies each plan to a model of Valkey
//! (meet, gossip, slots, replication) until the cluster is formed, from any crash point.

use proptest::prelude::*;

use super::*;

/// A model of the Valkey side: per member id, known ids, slots, primary.
#[derive(Clone, Debug, Default)]
struct Sim {
    nodes: BTreeMap<String, SimNode>,
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
            members: self
                .nodes
                .iter()
                .map(|(name, n)| Member {
                    name: name.clone(),
                    shard: n.shard,
                    lifecycle: n.lifecycle,
                    addr: Some(n.addr.clone()),
                    view: Some(MemberView {
                        id: n.id.clone(),
                        is_primary: n.primary.is_none(),
                        primary_id: n.primary.clone(),
                        slots: n.slots.clone(),
                        known: n.known.clone(),
                        cluster_ok: owned == SLOT_COUNT as usize
                            && n.known.len() == self.nodes.len(),
                        replica_in_sync: n.primary.is_some(),
                    }),
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

    fn apply(&mut self, action: &Action) {
        match action {
            Action::CreateNode { name, shard } => {
                assert!(!self.nodes.contains_key(name), "node {name} created twice");
                let i = self.nodes.len() as u16 + 1;
                let id = NodeId(format!("{name}-id"));
                self.nodes.insert(
                    name.clone(),
                    SimNode {
                        id: id.clone(),
                        addr: MemberAddr::new(format!("198.18.1.{i}"), 6379),
                        known: BTreeSet::from([id]),
                        slots: vec![],
                        primary: None,
                        lifecycle: Lifecycle::Joining,
                        shard: *shard,
                    },
                );
            }
            Action::Meet { via, target } => {
                let target_id = self.by_addr(target).id.clone();
                let via_id = self.by_addr(via).id.clone();
                self.by_addr(via).known.insert(target_id);
                self.by_addr(target).known.insert(via_id);
            }
            Action::AssignSlots { member, ranges } => {
                let node = self.by_addr(member);
                assert!(node.primary.is_none(), "slots assigned to a replica");
                node.slots.extend(ranges.iter().cloned());
            }
            Action::Replicate { member, primary } => {
                let node = self.by_addr(member);
                assert!(
                    node.slots.is_empty(),
                    "a member owning slots was made a replica"
                );
                node.primary = Some(primary.clone());
            }
            Action::MarkActive { names } => {
                for name in names {
                    self.nodes.get_mut(name).unwrap().lifecycle = Lifecycle::Active;
                }
            }
        }
        self.assert_no_slot_owned_twice();
    }

    /// Gossip: everyone learns everything anyone it knows knows (one round).
    fn gossip(&mut self) {
        let snapshot = self.nodes.clone();
        for node in self.nodes.values_mut() {
            let mut learned = node.known.clone();
            for other in snapshot.values().filter(|o| node.known.contains(&o.id)) {
                learned.extend(other.known.iter().cloned());
            }
            node.known = learned;
        }
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

/// Runs the planner to completion, applying only `apply_first` actions of each plan when
/// given (a crash after some of a batch), returning the number of rounds.
fn form(sim: &mut Sim, shards: usize, replicas: usize, partial: impl Fn(usize) -> usize) -> usize {
    for round in 0..200 {
        let plan = plan(&sim.topology(shards, replicas));
        if plan.phase == Phase::Ready && plan.actions.is_empty() {
            return round;
        }
        let n = partial(round)
            .min(plan.actions.len())
            .max(1.min(plan.actions.len()));
        for action in plan.actions.iter().take(n) {
            sim.apply(action);
        }
        sim.gossip();
    }
    panic!(
        "formation did not converge: {:?}",
        plan(&sim.topology(shards, replicas))
    );
}

fn assert_formed(sim: &Sim, shards: usize, replicas: usize) {
    assert_eq!(sim.nodes.len(), shards * (1 + replicas));
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

#[test]
fn first_step_creates_every_member() {
    let p = plan(&Sim::default().topology(2, 2));
    assert_eq!(p.actions.len(), 6);
    assert_eq!(p.phase, Phase::Forming);
}

#[test]
fn unreachable_members_are_waited_for_by_name() {
    let mut sim = Sim::default();
    form(&mut sim, 1, 1, |_| usize::MAX);
    let mut t = sim.topology(1, 1);
    t.members[1].view = None;
    let p = plan(&t);
    assert!(p.actions.is_empty());
    assert_eq!(
        p.phase,
        Phase::Degraded,
        "a formed cluster that loses a member is degraded"
    );
    assert!(p.message.contains("c-0-1"), "{}", p.message);
}

#[test]
fn a_formed_cluster_plans_nothing() {
    let mut sim = Sim::default();
    form(&mut sim, 3, 1, |_| usize::MAX);
    let p = plan(&sim.topology(3, 1));
    assert_eq!(p.phase, Phase::Ready);
    assert!(p.actions.is_empty());
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
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.phase, Phase::Ready);
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
