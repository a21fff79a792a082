//! Planning clusters at the member bound (1000 members: 500 shards x 1 replica and 1 shard x
//! 999 replicas), from scratch and from half-way states of every formation stage, each plan
//! checked step by step. Only what is planned is asserted, never how long it takes.

use std::collections::BTreeSet;

use super::*;
use crate::topology::slots::even_ranges;
use crate::topology::{MemberAddr, NodeId};

const SHAPES: [(usize, usize); 2] = [(500, 1), (1, 999)];

fn id(name: &str) -> NodeId {
    NodeId(format!("{name}-id"))
}

/// Every member of the shape, in name order of creation (shard by shard, index by index):
/// running, answering, a primary that knows only itself and holds nothing.
fn created(shards: usize, replicas: usize) -> Topology {
    let members = (0..shards)
        .flat_map(|shard| (0..=replicas).map(move |index| (shard, index)))
        .enumerate()
        .map(|(i, (shard, index))| {
            let name = member_name("c", shard, index);
            let view = MemberView {
                known: BTreeSet::from([id(&name)]),
                // Past the distinct-epochs step (formation's first, tested in tests.rs).
                config_epoch: i as u64 + 1,
                ..MemberView::bare(&id(&name).0)
            };
            Member {
                addr: Some(MemberAddr::new(
                    format!("10.{}.{}.1", i / 250, i % 250),
                    6379,
                )),
                view: Some(view),
                ..Member::new(name, shard)
            }
        })
        .collect();
    Topology {
        cluster: "c".into(),
        shards,
        replicas_per_shard: replicas,
        members,
        migration: MigrationMethod::Auto,
    }
}

fn index_of(m: &Member) -> usize {
    m.name.rsplit('-').next().unwrap().parse().unwrap()
}

fn view(m: &mut Member) -> &mut MemberView {
    m.view.as_mut().unwrap()
}

/// Everybody knows everybody.
fn introduced(shards: usize, replicas: usize) -> Topology {
    let mut t = created(shards, replicas);
    let everybody: BTreeSet<NodeId> = t.members.iter().map(|m| id(&m.name)).collect();
    for m in &mut t.members {
        view(m).known = everybody.clone();
    }
    t
}

/// Introduced, each shard's range on its member 0 for the shards `assigned` says.
fn assigned(shards: usize, replicas: usize, assigned: impl Fn(usize) -> bool) -> Topology {
    let mut t = introduced(shards, replicas);
    let ranges = even_ranges(shards);
    for m in t.members.iter_mut().filter(|m| index_of(m) == 0) {
        if assigned(m.shard) {
            view(m).slots = vec![ranges[m.shard].clone()];
        }
    }
    t
}

/// Every slot assigned; the replicas `attached` says follow their primary, in sync.
fn replicated(shards: usize, replicas: usize, attached: impl Fn(&Member) -> bool) -> Topology {
    let mut t = assigned(shards, replicas, |_| true);
    for m in &mut t.members {
        if index_of(m) > 0 && attached(m) {
            let primary = id(&member_name("c", m.shard, 0));
            let v = view(m);
            v.is_primary = false;
            v.primary_id = Some(primary);
            v.replica_in_sync = true;
        }
    }
    t
}

fn creates(plan: &Plan) -> Vec<(String, usize)> {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::CreateNode { name, shard } => (name.clone(), *shard),
            other => panic!("expected only creations, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_1000_member_cluster_is_created_from_scratch_with_every_name_once() {
    for (shards, replicas) in SHAPES {
        let mut t = created(shards, replicas);
        let expected: Vec<(String, usize)> = t
            .members
            .iter()
            .map(|m| (m.name.clone(), m.shard))
            .collect();
        t.members.clear();
        let plan = plan(&t);
        assert_eq!(plan.state, ClusterState::Creating);
        assert_eq!(plan.message, "creating 1000 member(s)");
        assert_eq!(creates(&plan), expected, "{shards} x (1 + {replicas})");
    }
}

#[test]
fn a_half_created_1000_member_cluster_gets_the_lowest_free_names() {
    for (shards, replicas) in SHAPES {
        let mut t = created(shards, replicas);
        // Odd indices exist (not answering yet), even ones are missing: the gaps are filled.
        let (missing, kept): (Vec<Member>, Vec<Member>) = t
            .members
            .drain(..)
            .partition(|m| index_of(m).is_multiple_of(2));
        t.members = kept
            .into_iter()
            .map(|m| Member { view: None, ..m })
            .collect();
        let plan = plan(&t);
        let expected: Vec<(String, usize)> =
            missing.iter().map(|m| (m.name.clone(), m.shard)).collect();
        assert_eq!(expected.len(), 500);
        assert_eq!(creates(&plan), expected, "{shards} x (1 + {replicas})");
    }
}

#[test]
fn a_1000_member_cluster_is_introduced_through_its_seed() {
    for (shards, replicas) in SHAPES {
        let mut t = created(shards, replicas);
        let seed_addr = t.members[0].addr.clone().unwrap();
        // Half way: the seed (first by name) has met every other member already.
        let met: Vec<NodeId> = t.members.iter().step_by(2).map(|m| id(&m.name)).collect();
        view(&mut t.members[0]).known.extend(met);
        let plan = plan(&t);
        let expected: Vec<Step> = t
            .members
            .iter()
            .skip(1)
            .step_by(2)
            .map(|m| Step::Meet {
                via: seed_addr.clone(),
                target: m.addr.clone().unwrap(),
            })
            .collect();
        assert_eq!(expected.len(), 500);
        assert_eq!(plan.steps, expected, "{shards} x (1 + {replicas})");
    }
}

#[test]
fn strangers_in_a_1000_member_cluster_are_introduced_64_at_a_time() {
    for (shards, replicas) in SHAPES {
        let mut t = created(shards, replicas);
        let everybody: BTreeSet<NodeId> = t.members.iter().map(|m| id(&m.name)).collect();
        // The seed knows everybody, the others only themselves and the seed; the last member
        // knows everybody too.
        let seed = id(&t.members[0].name);
        view(&mut t.members[0]).known = everybody.clone();
        view(t.members.last_mut().unwrap()).known = everybody;
        for m in &mut t.members[1..999] {
            view(m).known.insert(seed.clone());
        }
        let plan = plan(&t);
        assert_eq!(plan.steps.len(), 64, "{shards} x (1 + {replicas})");
        let by_addr = |a: &MemberAddr| t.members.iter().find(|m| m.addr.as_ref() == Some(a));
        for step in &plan.steps {
            let Step::Meet { via, target } = step else {
                panic!("expected meets, got {step:?}")
            };
            let (via, target) = (by_addr(via).unwrap(), by_addr(target).unwrap());
            assert_ne!(via.name, target.name);
            assert!(!via.view.as_ref().unwrap().known.contains(&id(&target.name)));
        }
        let unaware = plan
            .message
            .rsplit(": ")
            .next()
            .unwrap()
            .split(", ")
            .count();
        assert_eq!(unaware, 998, "{}", &plan.message[..120]);
    }
}

#[test]
fn a_1000_member_cluster_gets_every_slot_assigned_once() {
    for (shards, replicas) in SHAPES {
        let ranges = even_ranges(shards);
        for half in [false, true] {
            // Half way: the first half of the shards own their range already.
            let t = assigned(shards, replicas, |s| half && s < shards / 2);
            let plan = plan(&t);
            let expected: Vec<Step> = t
                .members
                .iter()
                .filter(|m| index_of(m) == 0 && !(half && m.shard < shards / 2))
                .map(|m| Step::AssignSlots {
                    member: m.addr.clone().unwrap(),
                    ranges: vec![ranges[m.shard].clone()],
                })
                .collect();
            assert_eq!(
                plan.steps, expected,
                "{shards} x (1 + {replicas}), half {half}"
            );
        }
    }
}

#[test]
fn every_replica_of_a_1000_member_cluster_is_attached_to_its_primary() {
    for (shards, replicas) in SHAPES {
        for half in [false, true] {
            // Half way: every other replica follows its primary already.
            let attached = |m: &Member| half && (m.shard + index_of(m)).is_multiple_of(2);
            let t = replicated(shards, replicas, attached);
            let plan = plan(&t);
            let expected: Vec<Step> = t
                .members
                .iter()
                .filter(|m| index_of(m) > 0 && !attached(m))
                .map(|m| Step::Replicate {
                    member: m.addr.clone().unwrap(),
                    primary: id(&member_name("c", m.shard, 0)),
                })
                .collect();
            assert!(!expected.is_empty());
            assert_eq!(
                plan.steps, expected,
                "{shards} x (1 + {replicas}), half {half}"
            );
        }
    }
}

#[test]
fn a_formed_1000_member_cluster_is_marked_active_then_settles() {
    for (shards, replicas) in SHAPES {
        let mut t = replicated(shards, replicas, |_| true);
        let formed = plan(&t);
        assert_eq!(formed.state, ClusterState::Active);
        let names: Vec<String> = t.members.iter().map(|m| m.name.clone()).collect();
        assert_eq!(formed.steps, vec![Step::MarkActive { names }]);
        for m in &mut t.members {
            m.lifecycle = Lifecycle::Active;
        }
        let settled = plan(&t);
        assert_eq!(
            (settled.state, settled.steps, settled.change),
            (ClusterState::Active, vec![], Change::Settled)
        );
        assert_eq!(figures(&t).desired, 1000);
        assert_eq!(figures(&t).ready, 1000);
    }
}
