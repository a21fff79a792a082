//! The topology state machine (pure): from the members the operator intends (ValkeyNodes)
//! and what each member's Valkey reports, the next safe step toward the desired cluster.
//!
//! Every decision is re-derived from live state on every reconcile, so a step that was cut
//! short by a crash is simply planned again: creating a node whose name exists, meeting a
//! member already known, or assigning slots already owned never happens twice. Roles are read
//! from Valkey (who holds slots, who replicates whom), never inferred from names.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::Lifecycle;
use crate::driver::MemberAddr;
use crate::driver::parse::NodeId;
use crate::driver::slots::{SLOT_COUNT, SlotRange, even_ranges};

/// What one member's Valkey reports, reduced to what planning needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    /// Holds slots or reports itself as a primary without a primary link.
    pub is_primary: bool,
    /// The primary this member replicates, when it is a replica.
    pub primary_id: Option<NodeId>,
    /// Slots this member owns according to itself.
    pub slots: Vec<SlotRange>,
    /// Node ids this member knows (CLUSTER NODES, handshakes excluded).
    pub known: BTreeSet<NodeId>,
    /// Slot owners as this member sees the whole cluster: slot range → owner id.
    pub cluster_ok: bool,
    /// For a replica: the link to its primary is up and the initial sync is done.
    pub replica_in_sync: bool,
}

/// One intended member (a ValkeyNode) and what is known about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub shard: usize,
    pub lifecycle: Lifecycle,
    /// Client address once its pod runs and is ready.
    pub addr: Option<MemberAddr>,
    /// What its Valkey reported this round (None: not reachable).
    pub view: Option<MemberView>,
}

/// The desired shape and the current members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub cluster: String,
    pub shards: usize,
    pub replicas_per_shard: usize,
    pub members: Vec<Member>,
}

/// One action on the world. A plan is a batch of independent actions that are safe together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateNode {
        name: String,
        shard: usize,
    },
    Meet {
        via: MemberAddr,
        target: MemberAddr,
    },
    AssignSlots {
        member: MemberAddr,
        ranges: Vec<SlotRange>,
    },
    Replicate {
        member: MemberAddr,
        primary: NodeId,
    },
    MarkActive {
        names: Vec<String>,
    },
}

/// Where formation stands; drives status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Members are being created or formed into the cluster.
    Forming,
    /// Everything in place and healthy.
    Ready,
    /// The cluster was formed but members are missing, unreachable or out of sync.
    Degraded,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub phase: Phase,
    pub actions: Vec<Action>,
    /// What the cluster is waiting for, in words for status.
    pub message: String,
}

/// Deterministic member name: `<cluster>-<shard>-<index>`; the index is the lowest one not in
/// use in that shard, so a re-planned creation after a crash names the same object.
pub fn member_name(cluster: &str, shard: usize, index: usize) -> String {
    format!("{cluster}-{shard}-{index}")
}

/// Primary of a shard as Valkey reports it: the member of that shard owning slots.
fn shard_primary<'a>(members: &[&'a Member]) -> Option<&'a Member> {
    members
        .iter()
        .copied()
        .filter(|m| {
            m.view
                .as_ref()
                .is_some_and(|v| v.is_primary && !v.slots.is_empty())
        })
        .min_by(|a, b| a.name.cmp(&b.name))
}

pub fn plan(topology: &Topology) -> Plan {
    let mut by_shard: BTreeMap<usize, Vec<&Member>> = BTreeMap::new();
    for m in topology
        .members
        .iter()
        .filter(|m| m.lifecycle != Lifecycle::Leaving)
    {
        by_shard.entry(m.shard).or_default().push(m);
    }
    let ever_formed = topology
        .members
        .iter()
        .any(|m| m.lifecycle == Lifecycle::Active);
    let waiting_phase = if ever_formed {
        Phase::Degraded
    } else {
        Phase::Forming
    };
    let per_shard = 1 + topology.replicas_per_shard;

    // 1. Every shard has its members.
    let mut creates = Vec::new();
    for shard in 0..topology.shards {
        let members = by_shard.get(&shard).map(Vec::as_slice).unwrap_or(&[]);
        let used: BTreeSet<String> = topology.members.iter().map(|m| m.name.clone()).collect();
        let mut index = 0;
        for _ in members.len()..per_shard {
            while used.contains(&member_name(&topology.cluster, shard, index))
                || creates.iter().any(|a| matches!(a, Action::CreateNode { name, .. } if *name == member_name(&topology.cluster, shard, index)))
            {
                index += 1;
            }
            creates.push(Action::CreateNode {
                name: member_name(&topology.cluster, shard, index),
                shard,
            });
        }
    }
    if !creates.is_empty() {
        let message = format!("creating {} member(s)", creates.len());
        return Plan {
            phase: waiting_phase,
            actions: creates,
            message,
        };
    }

    let members: Vec<&Member> = by_shard.values().flatten().copied().collect();
    let total = members.len();

    // 2. Every member runs and answers.
    let unreachable: Vec<&str> = members
        .iter()
        .filter(|m| m.view.is_none())
        .map(|m| m.name.as_str())
        .collect();
    if !unreachable.is_empty() {
        return Plan {
            phase: waiting_phase,
            actions: vec![],
            message: format!(
                "waiting for {} of {total} member(s) to run and answer: {}",
                unreachable.len(),
                unreachable.join(", ")
            ),
        };
    }
    let view = |m: &Member| m.view.clone().expect("checked above");

    // 3. Everybody knows everybody. Meet through a seed: one that holds slots if any (it is
    //    part of the established cluster), else the first by name.
    let seed = members
        .iter()
        .find(|m| !view(m).slots.is_empty())
        .or_else(|| members.iter().min_by(|a, b| a.name.cmp(&b.name)))
        .copied()
        .expect("at least one member");
    let seed_view = view(seed);
    let seed_addr = seed
        .addr
        .clone()
        .expect("reachable members have an address");
    let meets: Vec<Action> = members
        .iter()
        .filter(|m| m.name != seed.name && !seed_view.known.contains(&view(m).id))
        .map(|m| Action::Meet {
            via: seed_addr.clone(),
            target: m.addr.clone().expect("reachable"),
        })
        .collect();
    if !meets.is_empty() {
        return Plan {
            phase: waiting_phase,
            actions: meets,
            message: format!("introducing {total} members to each other"),
        };
    }
    let all_ids: BTreeSet<NodeId> = members.iter().map(|m| view(m).id).collect();
    let strangers: Vec<&str> = members
        .iter()
        .filter(|m| !all_ids.iter().all(|id| view(m).known.contains(id)))
        .map(|m| m.name.as_str())
        .collect();
    if !strangers.is_empty() {
        return Plan {
            phase: waiting_phase,
            actions: vec![],
            message: format!(
                "waiting for members to learn about each other: {}",
                strangers.join(", ")
            ),
        };
    }

    // 4. Every slot has an owner: each shard's range goes to its primary (the member owning
    //    slots, or for a new cluster the first primary of the shard by name).
    let owned: Vec<SlotRange> = members.iter().flat_map(|m| view(m).slots).collect();
    let ranges = even_ranges(topology.shards);
    let mut assigns = Vec::new();
    for (shard, range) in ranges.iter().enumerate() {
        let shard_members = by_shard.get(&shard).cloned().unwrap_or_default();
        let unowned = subtract(range, &owned);
        if unowned.is_empty() {
            continue;
        }
        let owner = shard_primary(&shard_members).or_else(|| {
            shard_members
                .iter()
                .copied()
                .filter(|m| view(m).is_primary && view(m).primary_id.is_none())
                .min_by(|a, b| a.name.cmp(&b.name))
        });
        if let Some(owner) = owner {
            assigns.push(Action::AssignSlots {
                member: owner.addr.clone().expect("reachable"),
                ranges: unowned,
            });
        }
    }
    if !assigns.is_empty() {
        return Plan {
            phase: waiting_phase,
            actions: assigns,
            message: "assigning hash slots".into(),
        };
    }

    // 5. Every other member of a shard replicates its primary.
    let mut replicates = Vec::new();
    let mut missing_primary = Vec::new();
    for (shard, shard_members) in &by_shard {
        let Some(primary) = shard_primary(shard_members) else {
            missing_primary.push(shard.to_string());
            continue;
        };
        let primary_id = view(primary).id;
        for m in shard_members.iter().filter(|m| m.name != primary.name) {
            if view(m).primary_id.as_ref() != Some(&primary_id) {
                replicates.push(Action::Replicate {
                    member: m.addr.clone().expect("reachable"),
                    primary: primary_id.clone(),
                });
            }
        }
    }
    if !replicates.is_empty() {
        return Plan {
            phase: waiting_phase,
            actions: replicates,
            message: "attaching replicas to their primaries".into(),
        };
    }
    if !missing_primary.is_empty() {
        return Plan {
            phase: Phase::Degraded,
            actions: vec![],
            message: format!(
                "shard(s) {} have no primary owning slots",
                missing_primary.join(", ")
            ),
        };
    }

    // 6. Healthy everywhere: cluster_state ok, all slots covered, replicas in sync.
    let not_ok: Vec<&str> = members
        .iter()
        .filter(|m| !view(m).cluster_ok)
        .map(|m| m.name.as_str())
        .collect();
    let covered: usize = owned
        .iter()
        .map(|r| usize::from(*r.end()) - usize::from(*r.start()) + 1)
        .sum();
    let syncing: Vec<&str> = members
        .iter()
        .filter(|m| view(m).primary_id.is_some() && !view(m).replica_in_sync)
        .map(|m| m.name.as_str())
        .collect();
    if !not_ok.is_empty() || covered != usize::from(SLOT_COUNT) || !syncing.is_empty() {
        let mut parts = Vec::new();
        if !not_ok.is_empty() {
            parts.push(format!("cluster_state not ok on {}", not_ok.join(", ")));
        }
        if covered != usize::from(SLOT_COUNT) {
            parts.push(format!("{covered} of {SLOT_COUNT} slots covered"));
        }
        if !syncing.is_empty() {
            parts.push(format!("replicas syncing: {}", syncing.join(", ")));
        }
        return Plan {
            phase: waiting_phase,
            actions: vec![],
            message: format!("waiting: {}", parts.join("; ")),
        };
    }

    // 7. Formed: members still Joining become Active.
    let joining: Vec<String> = members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::Joining)
        .map(|m| m.name.clone())
        .collect();
    let message = format!(
        "{} shard(s) with {} replica(s) each; all {SLOT_COUNT} slots served",
        topology.shards, topology.replicas_per_shard
    );
    if !joining.is_empty() {
        return Plan {
            phase: Phase::Ready,
            actions: vec![Action::MarkActive { names: joining }],
            message,
        };
    }
    Plan {
        phase: Phase::Ready,
        actions: vec![],
        message,
    }
}

/// The parts of `range` not covered by any of `owned`.
pub fn subtract(range: &SlotRange, owned: &[SlotRange]) -> Vec<SlotRange> {
    let mut free = Vec::new();
    let mut start = *range.start();
    let end = *range.end();
    let mut sorted: Vec<&SlotRange> = owned
        .iter()
        .filter(|o| o.end() >= range.start() && o.start() <= range.end())
        .collect();
    sorted.sort_by_key(|r| *r.start());
    for o in sorted {
        if *o.start() > start {
            free.push(start..=(*o.start() - 1).min(end));
        }
        if *o.end() >= end {
            return free;
        }
        start = start.max(*o.end() + 1);
    }
    if start <= end {
        free.push(start..=end);
    }
    free
}

#[cfg(test)]
mod tests;
