//! The topology state machine (pure): from the members the operator intends (ValkeyNodes)
//! and what each member's Valkey reports, the next safe step toward the desired cluster.
//!
//! Every decision is re-derived from live state on every reconcile, so a step that was cut
//! short by a crash is simply planned again: creating a node whose name exists, meeting a
//! member already known, or assigning slots already owned never happens twice. Roles are read
//! from Valkey (who holds slots, who replicates whom), never inferred from names.

pub mod rebalance;

use std::collections::{BTreeMap, BTreeSet};

use crate::api::Lifecycle;
use crate::topology::slots::{
    SLOT_COUNT, SlotRange, count_slots, even_ranges, range_len, subtract,
};
use crate::topology::{FailoverMode, MemberAddr, NodeId, OpenSlot};

/// An atomic slot migration whose job has not advanced for this long is cancelled and
/// planned again (Valkey documents that jobs can fail under heavy writes to the slots).
pub const MIGRATION_IDLE_LIMIT_SECS: u64 = 120;

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
    /// Slots owned by any node, this member's own included, as this member sees the cluster:
    /// a failed primary that is not one of our members still owns its slots.
    pub cluster_owned: Vec<SlotRange>,
    /// Node ids this member knows (CLUSTER NODES, handshakes excluded).
    pub known: BTreeSet<NodeId>,
    /// Slot owners as this member sees the whole cluster: slot range → owner id.
    pub cluster_ok: bool,
    /// For a replica: the link to its primary is up and the initial sync is done.
    pub replica_in_sync: bool,
    /// Ids of every node owning at least one slot, as this member sees the cluster.
    pub slot_owners: BTreeSet<NodeId>,
    /// Slots this member is exporting key by key (`SETSLOT MIGRATING`).
    pub migrating: Vec<OpenSlot>,
    /// Slots this member is importing key by key (`SETSLOT IMPORTING`).
    pub importing: Vec<OpenSlot>,
    /// Atomic slot migration jobs this member is running as the source.
    pub exports: Vec<ExportJob>,
    /// Why this member's most recent slot migration job failed, when it did.
    pub failed_migration: Option<String>,
    /// Its Valkey version has atomic slot migration (`CLUSTER MIGRATESLOTS`, 9.0+).
    pub atomic_migration: bool,
    /// Replication offset (`master_repl_offset`): on replicas, how much of the stream they have.
    pub repl_offset: i64,
}

/// An atomic slot migration job in progress, seen from its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportJob {
    pub target: NodeId,
    pub ranges: Vec<SlotRange>,
    /// Seconds since the job last made progress.
    pub idle_secs: u64,
}

/// How slots move between shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MigrationMethod {
    /// Atomic slot migration when source and target support it, key by key otherwise.
    #[default]
    Auto,
    /// Always key by key (`SETSLOT IMPORTING/MIGRATING` + `MIGRATE`).
    Keys,
}

/// How one batch of slots is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveMethod {
    /// `CLUSTER MIGRATESLOTS`, run by Valkey in the background.
    Atomic,
    /// `SETSLOT IMPORTING/MIGRATING`, `MIGRATE` key by key, `SETSLOT NODE`.
    Keys,
}

/// Slots going from a source primary to one target primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTarget {
    pub member: MemberAddr,
    pub id: NodeId,
    pub ranges: Vec<SlotRange>,
}

/// One intended member (a ValkeyNode) and what is known about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub shard: usize,
    pub lifecycle: Lifecycle,
    /// Its spec is the desired one (same spec hash); a stale member is replaced, never changed.
    pub current: bool,
    /// Last Valkey node id recorded for it (ValkeyNode status), for members that no longer
    /// answer.
    pub node_id: Option<NodeId>,
    /// Client address once its pod runs and is ready.
    pub addr: Option<MemberAddr>,
    /// What its Valkey reported this round (None: not reachable).
    pub view: Option<MemberView>,
    /// Why its pod does not run, when Kubernetes says (ImagePullBackOff, Unschedulable, ...).
    pub pod_problem: Option<String>,
    /// Its Valkey is gone for good and will not come back under its identity (the process
    /// died and is not restarted in place, or the pod was lost and is not recreated): never
    /// waited for; its shard's replica takes over and a new member replaces it.
    pub gone: Option<String>,
}

impl Member {
    /// A member in the given shard, Joining, current, not yet observed.
    pub fn new(name: impl Into<String>, shard: usize) -> Member {
        Member {
            name: name.into(),
            shard,
            lifecycle: Lifecycle::Joining,
            current: true,
            node_id: None,
            addr: None,
            view: None,
            pod_problem: None,
            gone: None,
        }
    }

    fn id(&self) -> Option<NodeId> {
        self.view
            .as_ref()
            .map(|v| v.id.clone())
            .or_else(|| self.node_id.clone())
    }

    fn in_sync_replica(&self) -> bool {
        self.view
            .as_ref()
            .is_some_and(|v| v.primary_id.is_some() && v.replica_in_sync)
    }
}

/// The desired shape and the current members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub cluster: String,
    pub shards: usize,
    pub replicas_per_shard: usize,
    pub members: Vec<Member>,
    pub migration: MigrationMethod,
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
    /// `CLUSTER FAILOVER` run on a replica. `Default` (coordinated with the primary, no
    /// acknowledged write lost) for rollouts; `Force`/`Takeover` only when the primary is gone
    /// for good and Valkey cannot promote its replica by itself.
    Failover {
        member: MemberAddr,
        shard: usize,
        mode: FailoverMode,
    },
    /// Move slots from `source` (a primary) to target primaries.
    MoveSlots {
        source: MemberAddr,
        source_id: NodeId,
        method: MoveMethod,
        targets: Vec<MoveTarget>,
        /// Every primary, told the new owner of each slot moved key by key.
        primaries: Vec<MemberAddr>,
    },
    /// `CLUSTER SETSLOT slot STABLE` for slots left open toward a node that is gone.
    CloseSlots {
        member: MemberAddr,
        slots: Vec<u16>,
    },
    /// `CLUSTER CANCELSLOTMIGRATIONS` on a source whose job stopped making progress.
    CancelSlotMigrations {
        member: MemberAddr,
    },
    MarkActive {
        names: Vec<String>,
    },
    /// The member is being retired: it owns no slots and its shard keeps an in-sync copy.
    MarkLeaving {
        names: Vec<String>,
    },
    /// `CLUSTER FORGET node` on `via`.
    Forget {
        via: MemberAddr,
        node: NodeId,
    },
    /// Delete a retired member's ValkeyNode (and so its pod).
    DeleteNode {
        name: String,
    },
}

/// Where the cluster stands; drives status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Members are being created or formed into the cluster for the first time.
    Forming,
    /// Everything in place and healthy.
    Ready,
    /// A formed cluster is changing: members replaced (rollout), added or retired.
    Updating,
    /// The cluster was formed but members are missing, unreachable or out of sync.
    Degraded,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub phase: Phase,
    pub actions: Vec<Action>,
    /// What the cluster is doing or waiting for, in words for status.
    pub message: String,
}

impl Plan {
    fn new(phase: Phase, actions: Vec<Action>, message: impl Into<String>) -> Plan {
        Plan {
            phase,
            actions,
            message: message.into(),
        }
    }
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

fn names(members: &[&Member]) -> String {
    members
        .iter()
        .map(|m| m.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Established members (they have a node id and were Active) that do not answer: their pod
/// or its node is down, and they may come back. The rest of the cluster carries on without
/// them (members join, replicas attach, the gone are retired), but nothing that could need
/// them moves: no rollout step, no slot move, no scale-in.
fn silent_members(topology: &Topology) -> Vec<&Member> {
    topology
        .members
        .iter()
        .filter(|m| {
            m.lifecycle == Lifecycle::Active
                && m.view.is_none()
                && m.gone.is_none()
                && m.node_id.is_some()
        })
        .collect()
}

/// The next step. Stages run in order; the first with something to do or wait for wins.
/// With silent members (see [`silent_members`]) the cluster is at best Degraded, and the
/// status says who is missing.
pub fn plan(topology: &Topology) -> Plan {
    let mut plan = plan_stages(topology);
    let silent = silent_members(topology);
    if !silent.is_empty() && !plan.message.starts_with("waiting for") {
        if plan.phase == Phase::Ready {
            plan.phase = Phase::Degraded;
        }
        plan.message.push_str(&format!(
            "; {} not answering (the rest of the cluster carries on without them; rollouts and slot moves wait)",
            names(&silent)
        ));
    }
    plan
}

fn plan_stages(topology: &Topology) -> Plan {
    let members: Vec<&Member> = topology
        .members
        .iter()
        .filter(|m| m.lifecycle != Lifecycle::Leaving)
        .collect();
    let leaving: Vec<&Member> = topology
        .members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::Leaving)
        .collect();
    let mut by_shard: BTreeMap<usize, Vec<&Member>> = BTreeMap::new();
    for m in &members {
        by_shard.entry(m.shard).or_default().push(m);
    }
    let ever_formed = topology
        .members
        .iter()
        .any(|m| m.lifecycle == Lifecycle::Active);
    // Work on a formed cluster is an update; before that it is formation.
    let changing = if ever_formed {
        Phase::Updating
    } else {
        Phase::Forming
    };
    let per_shard = 1 + topology.replicas_per_shard;
    let shard_members = |shard: usize| by_shard.get(&shard).cloned().unwrap_or_default();
    // Rolling replacement goes one shard at a time: the lowest shard with a stale member.
    let rollout_shard = (0..topology.shards).find(|s| shard_members(*s).iter().any(|m| !m.current));
    let rollout_note = |shard: usize| {
        let done = (0..topology.shards)
            .filter(|s| shard_members(*s).iter().all(|m| m.current))
            .count();
        // Members still on the old spec, against the members a finished rollout will have.
        let stale = members.iter().filter(|m| !m.current).count();
        let wanted = topology.shards * per_shard;
        format!(
            "rolling out shard {shard} ({done} of {} shards done, {} of {wanted} members on the new spec)",
            topology.shards,
            wanted.saturating_sub(stale)
        )
    };

    // 1. Every shard has its members (replacements for the rollout shard included).
    let used: BTreeSet<String> = topology.members.iter().map(|m| m.name.clone()).collect();
    let mut creates = Vec::new();
    for shard in 0..topology.shards {
        let list = shard_members(shard);
        let have = if Some(shard) == rollout_shard {
            list.iter().filter(|m| m.current).count()
        } else {
            list.len()
        };
        let mut index = 0;
        for _ in have..per_shard {
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
        let message = match rollout_shard {
            Some(shard) if ever_formed => format!(
                "{}: creating {} replacement member(s)",
                rollout_note(shard),
                creates.len()
            ),
            _ => format!("creating {} member(s)", creates.len()),
        };
        return Plan::new(changing, creates, message);
    }

    // 2a. Members gone for good are never waited for: each gone primary's most up-to-date
    //     replica takes over at once, and a gone member owning no slots is retired (step 1
    //     then creates its replacement).
    let gone: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| m.gone.is_some())
        .collect();
    if !gone.is_empty() {
        return replace_gone(&members, &gone);
    }

    // 2. Every member runs and answers. A new member still starting is progress; an established
    //    one gone silent is degradation.
    let unreachable: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| m.view.is_none())
        .collect();
    // A replacement created for a spec that has since changed again, and that never answered
    // (its image could not be pulled, it could not be scheduled), holds nothing: retire it
    // so the rollout can go on with the current spec.
    let abandoned: Vec<&Member> = unreachable
        .iter()
        .copied()
        .filter(|m| !m.current && m.lifecycle == Lifecycle::Joining && m.node_id.is_none())
        .collect();
    if !abandoned.is_empty() {
        return Plan::new(
            changing,
            vec![Action::MarkLeaving {
                names: abandoned.iter().map(|m| m.name.clone()).collect(),
            }],
            format!(
                "retiring {}: created for a spec that changed again and never started",
                names(&abandoned)
            ),
        );
    }
    let silent = silent_members(topology);
    // Only silent established members missing, and somebody answers: carry on without them.
    let holding = !silent.is_empty();
    let carry_on =
        holding && unreachable.len() == silent.len() && unreachable.len() < members.len();
    if !unreachable.is_empty() && !carry_on {
        let problems: Vec<String> = unreachable
            .iter()
            .filter_map(|m| m.pod_problem.as_ref().map(|p| format!("{}: {p}", m.name)))
            .collect();
        let mut message = format!(
            "waiting for {} of {} member(s) to run and answer: {}",
            unreachable.len(),
            members.len(),
            names(&unreachable)
        );
        if !problems.is_empty() {
            message.push_str(&format!(
                " ({}); existing members keep serving",
                problems.join("; ")
            ));
        }
        let phase = if unreachable.iter().any(|m| m.lifecycle == Lifecycle::Active) {
            Phase::Degraded
        } else {
            changing
        };
        return Plan::new(phase, vec![], message);
    }
    let members: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| m.view.is_some())
        .collect();
    let mut by_shard: BTreeMap<usize, Vec<&Member>> = BTreeMap::new();
    for m in &members {
        by_shard.entry(m.shard).or_default().push(m);
    }
    let shard_members = |shard: usize| by_shard.get(&shard).cloned().unwrap_or_default();
    let view = |m: &Member| m.view.clone().expect("every member answered");
    let addr = |m: &Member| m.addr.clone().expect("members that answer have an address");
    let slot_owners: BTreeSet<NodeId> = members
        .iter()
        .flat_map(|m| {
            let v = view(m);
            let own = (!v.slots.is_empty()).then_some(v.id.clone());
            v.slot_owners.into_iter().chain(own)
        })
        .collect();

    // 2b. Failures. A member whose Valkey lost its identity (its pod was lost and replaced:
    //     new node id, no data) is retired, and a new member takes its place. A shard whose
    //     primary is gone for good is taken over by its most up-to-date replica at once,
    //     without waiting for Valkey's failure detection, or at all when too few primaries are
    //     left to vote.
    if let Some(plan) = failures(topology, &members, &slot_owners) {
        return plan;
    }

    // 3. Everybody knows everybody. Meet through a seed: one that holds slots if any (it is
    //    part of the established cluster), else the first by name.
    let seed = members
        .iter()
        .find(|m| !view(m).slots.is_empty())
        .or_else(|| members.iter().min_by(|a, b| a.name.cmp(&b.name)))
        .copied()
        .expect("at least one member");
    let seed_view = view(seed);
    let meets: Vec<Action> = members
        .iter()
        .filter(|m| m.name != seed.name && !seed_view.known.contains(&view(m).id))
        .map(|m| Action::Meet {
            via: addr(seed),
            target: addr(m),
        })
        .collect();
    if !meets.is_empty() {
        return Plan::new(
            changing,
            meets,
            format!("introducing {} member(s) to the cluster", members.len()),
        );
    }
    let all_ids: BTreeSet<NodeId> = members.iter().map(|m| view(m).id).collect();
    let strangers: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| !all_ids.iter().all(|id| view(m).known.contains(id)))
        .collect();
    if !strangers.is_empty() {
        return Plan::new(
            changing,
            vec![],
            format!(
                "waiting for members to learn about each other: {}",
                names(&strangers)
            ),
        );
    }

    // 3b. Shards beyond spec.shards whose slots have all moved away retire (scale-in). A
    //     drained primary may have turned itself into a replica of the shard that took its
    //     last slots: its role does not matter, only that nobody sees it own a slot.
    let drained: Vec<&Member> = by_shard
        .iter()
        .filter(|(shard, list)| {
            !holding
                && **shard >= topology.shards
                && list.iter().all(|m| {
                    !slot_owners.contains(&view(m).id)
                        && m.node_id
                            .as_ref()
                            .is_none_or(|id| !slot_owners.contains(id))
                })
        })
        .flat_map(|(_, list)| list.iter().copied())
        .collect();
    if !drained.is_empty() {
        return Plan::new(
            Phase::Updating,
            vec![Action::MarkLeaving {
                names: drained.iter().map(|m| m.name.clone()).collect(),
            }],
            format!(
                "scaling in to {} shard(s): retiring drained member(s) {}",
                topology.shards,
                names(&drained)
            ),
        );
    }

    // 4. Every slot has an owner: each shard's range goes to its primary (the member owning
    //    slots, or for a new cluster the first primary of the shard by name).
    // Owned means owned by anyone any member knows of: the slots of a failed primary that is
    // no longer one of our members (its pod lost its data and came back as a new node) are NOT
    // free. Assigning them to the empty node would make the old primary's replica follow it
    // and wipe the shard's data; the shard waits for its replica to take over instead.
    let owned: Vec<SlotRange> = topology
        .members
        .iter()
        .filter_map(|m| m.view.as_ref())
        .flat_map(|v| v.slots.iter().chain(&v.cluster_owned).cloned())
        .collect();
    let mut assigns = Vec::new();
    for (shard, range) in even_ranges(topology.shards).iter().enumerate() {
        let unowned = subtract(range, &owned);
        if unowned.is_empty() {
            continue;
        }
        let list = shard_members(shard);
        let owner = shard_primary(&list).or_else(|| {
            list.iter()
                .copied()
                .filter(|m| view(m).is_primary && view(m).primary_id.is_none())
                .min_by(|a, b| a.name.cmp(&b.name))
        });
        if let Some(owner) = owner {
            assigns.push(Action::AssignSlots {
                member: addr(owner),
                ranges: unowned,
            });
        }
    }
    if !assigns.is_empty() {
        return Plan::new(changing, assigns, "assigning hash slots");
    }

    // 5. Every other member of a shard replicates its primary.
    let mut replicates = Vec::new();
    let mut no_primary = Vec::new();
    for (shard, list) in &by_shard {
        let Some(primary) = shard_leader(list, &slot_owners) else {
            no_primary.push(shard.to_string());
            continue;
        };
        let primary_id = view(primary).id;
        for m in list.iter().filter(|m| m.name != primary.name) {
            if view(m).primary_id.as_ref() != Some(&primary_id) {
                replicates.push(Action::Replicate {
                    member: addr(m),
                    primary: primary_id.clone(),
                });
            }
        }
    }
    if !replicates.is_empty() {
        return Plan::new(
            changing,
            replicates,
            "attaching replicas to their primaries",
        );
    }
    if !no_primary.is_empty() {
        return Plan::new(
            Phase::Degraded,
            vec![],
            format!(
                "shard(s) {} have no primary owning slots",
                no_primary.join(", ")
            ),
        );
    }

    // 6. Replicas in sync before anything is retired or failed over.
    let syncing: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| view(m).primary_id.is_some() && !view(m).replica_in_sync)
        .collect();
    if !syncing.is_empty() {
        let message = match rollout_shard {
            Some(shard) if ever_formed => format!(
                "{}: waiting for replicas to sync: {}",
                rollout_note(shard),
                names(&syncing)
            ),
            _ => format!("waiting for replicas to sync: {}", names(&syncing)),
        };
        return Plan::new(changing, vec![], message);
    }

    // 6b. Slot moves in flight finish before anything else changes: slots left open by a
    //     key-by-key move cut short are moved on (or closed when their peer is gone), and
    //     atomic jobs are waited for (or cancelled when they stopped making progress).
    if let Some(plan) = in_flight_migrations(&members).filter(|_| !holding) {
        return plan;
    }

    // 7. Retire what is Leaving: forget it on every member that still knows it, then delete.
    //    A leaving member that still owns slots is failed over first.
    if !leaving.is_empty() {
        let mut actions = Vec::new();
        for l in &leaving {
            if l.view.as_ref().is_some_and(|v| !v.slots.is_empty()) {
                let replacement = shard_members(l.shard)
                    .into_iter()
                    .filter(|m| m.in_sync_replica())
                    .min_by(|a, b| a.name.cmp(&b.name));
                match replacement {
                    Some(r) => actions.push(Action::Failover {
                        member: addr(r),
                        shard: l.shard,
                        mode: FailoverMode::Default,
                    }),
                    None => {
                        return Plan::new(
                            Phase::Degraded,
                            vec![],
                            format!(
                                "{} is leaving but is the only copy of shard {}; waiting for an in-sync replica",
                                l.name, l.shard
                            ),
                        );
                    }
                }
                continue;
            }
            let forgets: Vec<Action> = match l.id() {
                Some(id) => members
                    .iter()
                    .filter(|m| view(m).known.contains(&id))
                    .map(|m| Action::Forget {
                        via: addr(m),
                        node: id.clone(),
                    })
                    .collect(),
                None => vec![],
            };
            if forgets.is_empty() {
                actions.push(Action::DeleteNode {
                    name: l.name.clone(),
                });
            } else {
                actions.extend(forgets);
            }
        }
        let message = match rollout_shard {
            Some(shard) => format!("{}: retiring {}", rollout_note(shard), names(&leaving)),
            None => format!("retiring {}", names(&leaving)),
        };
        return Plan::new(Phase::Updating, actions, message);
    }

    // 8. Rolling replacement of the rollout shard: fail over from a stale primary to an in-sync
    //    current replica, then retire the stale members.
    if let Some(shard) = rollout_shard.filter(|_| !holding) {
        let list = shard_members(shard);
        let Some(primary) = shard_leader(&list, &slot_owners) else {
            return Plan::new(
                Phase::Degraded,
                vec![],
                format!("{}: shard {shard} has no primary", rollout_note(shard)),
            );
        };
        if !primary.current {
            let Some(target) = list
                .iter()
                .filter(|m| m.current && m.in_sync_replica())
                .min_by(|a, b| a.name.cmp(&b.name))
            else {
                return Plan::new(
                    Phase::Updating,
                    vec![],
                    format!(
                        "{}: waiting for an in-sync replacement",
                        rollout_note(shard)
                    ),
                );
            };
            return Plan::new(
                Phase::Updating,
                vec![Action::Failover {
                    member: addr(target),
                    shard,
                    mode: FailoverMode::Default,
                }],
                format!(
                    "{}: failing over from {} to {}",
                    rollout_note(shard),
                    primary.name,
                    target.name
                ),
            );
        }
        let stale: Vec<&Member> = list.iter().copied().filter(|m| !m.current).collect();
        return Plan::new(
            Phase::Updating,
            vec![Action::MarkLeaving {
                names: stale.iter().map(|m| m.name.clone()).collect(),
            }],
            format!("{}: retiring {}", rollout_note(shard), names(&stale)),
        );
    }

    // 9. Shard count changed: move slots so every shard holds its even share (scale-out
    //    fills new shards, scale-in empties the shards beyond spec.shards).
    if let Some(plan) = rebalance_slots(topology, &by_shard, &slot_owners).filter(|_| !holding) {
        return plan;
    }

    // 10. Fewer replicas wanted: retire the excess replicas (never a primary).
    let mut excess = Vec::new();
    for list in by_shard.values() {
        if list.len() > per_shard {
            let mut replicas: Vec<&Member> = list
                .iter()
                .copied()
                .filter(|m| view(m).primary_id.is_some())
                .collect();
            replicas.sort_by(|a, b| b.name.cmp(&a.name));
            excess.extend(
                replicas
                    .into_iter()
                    .take(list.len() - per_shard)
                    .map(|m| m.name.clone()),
            );
        }
    }
    if !excess.is_empty() {
        return Plan::new(
            Phase::Updating,
            vec![Action::MarkLeaving {
                names: excess.clone(),
            }],
            format!("retiring replica(s) {}", excess.join(", ")),
        );
    }

    // 11. Forget node entries no member claims (members replaced or lost earlier).
    let claimed: BTreeSet<NodeId> = topology.members.iter().filter_map(Member::id).collect();
    let stale_entries: Vec<Action> = members
        .iter()
        .flat_map(|m| {
            view(m)
                .known
                .into_iter()
                .filter(|id| !claimed.contains(id))
                .map(move |id| Action::Forget {
                    via: addr(m),
                    node: id,
                })
        })
        .collect();
    if !stale_entries.is_empty() {
        return Plan::new(
            changing,
            stale_entries,
            "forgetting node entries of members that are gone",
        );
    }

    // 12. Healthy everywhere: cluster_state ok, all slots covered.
    let not_ok: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| !view(m).cluster_ok)
        .collect();
    let covered = count_slots(owned.iter().cloned());
    if !not_ok.is_empty() || covered != usize::from(SLOT_COUNT) {
        let mut parts = Vec::new();
        if !not_ok.is_empty() {
            parts.push(format!("cluster_state not ok on {}", names(&not_ok)));
        }
        if covered != usize::from(SLOT_COUNT) {
            parts.push(format!("{covered} of {SLOT_COUNT} slots covered"));
        }
        let phase = if ever_formed {
            Phase::Degraded
        } else {
            Phase::Forming
        };
        return Plan::new(phase, vec![], format!("waiting: {}", parts.join("; ")));
    }

    // 13. Formed: members still Joining become Active.
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
        return Plan::new(
            Phase::Ready,
            vec![Action::MarkActive { names: joining }],
            message,
        );
    }
    Plan::new(Phase::Ready, vec![], message)
}

/// The member that is (or is to become) its shard's primary: the one owning slots or, for a
/// shard that holds no slots yet (a new shard of a scale-out), the first primary by name.
/// Never an empty node while a member of the shard still follows a primary that holds data
/// (a failed one): that replica is the shard's data and must take over instead.
fn shard_leader<'a>(list: &[&'a Member], slot_owners: &BTreeSet<NodeId>) -> Option<&'a Member> {
    shard_primary(list).or_else(|| {
        let follows_data = list.iter().any(|m| {
            m.view
                .as_ref()
                .and_then(|v| v.primary_id.as_ref())
                .is_some_and(|p| slot_owners.contains(p))
        });
        if follows_data {
            return None;
        }
        list.iter()
            .copied()
            .filter(|m| {
                m.view
                    .as_ref()
                    .is_some_and(|v| v.is_primary && v.primary_id.is_none())
            })
            .min_by(|a, b| a.name.cmp(&b.name))
    })
}

/// Members that lost their identity, and shards whose primary is gone for good (every member,
/// leaving ones included, answered with another id). `None` when nothing failed.
fn failures(
    topology: &Topology,
    members: &[&Member],
    slot_owners: &BTreeSet<NodeId>,
) -> Option<Plan> {
    if topology.members.iter().any(|m| m.view.is_none()) {
        // Somebody does not answer: it may still be the primary in question.
        return None;
    }
    let addr = |m: &Member| m.addr.clone().expect("members that answer have an address");
    let live: BTreeSet<NodeId> = topology
        .members
        .iter()
        .filter_map(|m| m.view.as_ref().map(|v| v.id.clone()))
        .collect();
    let lost: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| {
            let v = m.view.as_ref().expect("answered");
            m.node_id.as_ref().is_some_and(|id| *id != v.id) && v.slots.is_empty()
        })
        .collect();
    let gone_owners: BTreeSet<&NodeId> = slot_owners
        .iter()
        .filter(|id| !live.contains(*id))
        .collect();
    let mut actions = Vec::new();
    let mut notes = Vec::new();
    let mut orphaned: BTreeSet<&NodeId> = BTreeSet::new();
    for m in members {
        let v = m.view.as_ref().expect("answered");
        if let Some(p) = v.primary_id.as_ref().filter(|p| gone_owners.contains(p)) {
            orphaned.insert(p);
        }
    }
    for gone in orphaned {
        // The most up-to-date replica of the gone primary takes over.
        let Some(best) = members
            .iter()
            .copied()
            .filter(|m| m.view.as_ref().and_then(|v| v.primary_id.as_ref()) == Some(gone))
            .max_by(|a, b| {
                let off = |m: &Member| m.view.as_ref().map_or(0, |v| v.repl_offset);
                off(a).cmp(&off(b)).then_with(|| b.name.cmp(&a.name))
            })
        else {
            continue;
        };
        // FORCE still needs a majority of the slot-owning primaries to vote; without one
        // (e.g. a single-shard cluster) only TAKEOVER can promote the replica.
        let voters = slot_owners.len();
        let alive = slot_owners.iter().filter(|id| live.contains(*id)).count();
        let mode = if alive * 2 > voters {
            FailoverMode::Force
        } else {
            FailoverMode::Takeover
        };
        notes.push(format!(
            "shard {}: its primary {} is gone; promoting {}",
            best.shard,
            short(gone),
            best.name
        ));
        actions.push(Action::Failover {
            member: addr(best),
            shard: best.shard,
            mode,
        });
    }
    if !lost.is_empty() {
        notes.push(format!(
            "retiring {} (lost its data and node id; a new member replaces it)",
            names(&lost)
        ));
        actions.push(Action::MarkLeaving {
            names: lost.iter().map(|m| m.name.clone()).collect(),
        });
    }
    (!actions.is_empty()).then(|| Plan::new(Phase::Degraded, actions, notes.join("; ")))
}

/// Members whose Valkey is gone for good (see [`Member::gone`]), judged from the members that
/// answer: a gone primary that still owns slots hands them to its most up-to-date replica
/// (`FORCE` with a majority of slot-owning primaries alive, `TAKEOVER` without one); a gone
/// member that owns none is retired. A gone primary with no answering replica is waited for by
/// name (its data went with it, unless a replica comes back).
fn replace_gone(members: &[&Member], gone: &[&Member]) -> Plan {
    let answering: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| m.view.is_some() && m.addr.is_some())
        .collect();
    let views = || answering.iter().filter_map(|m| m.view.as_ref());
    let slot_owners: BTreeSet<NodeId> = views()
        .flat_map(|v| {
            let own = (!v.slots.is_empty()).then(|| v.id.clone());
            v.slot_owners.iter().cloned().chain(own)
        })
        .collect();
    let live: BTreeSet<NodeId> = views().map(|v| v.id.clone()).collect();
    let mut actions = Vec::new();
    let mut notes = Vec::new();
    let mut retire = Vec::new();
    for g in gone {
        let reason = g.gone.as_deref().unwrap_or("gone");
        let Some(id) = g.id().filter(|id| slot_owners.contains(id)) else {
            notes.push(format!("{} is gone ({reason}); replacing it", g.name));
            retire.push(g.name.clone());
            continue;
        };
        let best = answering
            .iter()
            .copied()
            .filter(|m| m.view.as_ref().and_then(|v| v.primary_id.as_ref()) == Some(&id))
            .max_by(|a, b| {
                let off = |m: &Member| m.view.as_ref().map_or(0, |v| v.repl_offset);
                off(a).cmp(&off(b)).then_with(|| b.name.cmp(&a.name))
            });
        let Some((best, addr)) = best.and_then(|b| b.addr.clone().map(|a| (b, a))) else {
            notes.push(format!(
                "shard {}: its primary {} is gone ({reason}) and no replica of it answers",
                g.shard, g.name
            ));
            continue;
        };
        let alive = slot_owners.iter().filter(|o| live.contains(*o)).count();
        let mode = if alive * 2 > slot_owners.len() {
            FailoverMode::Force
        } else {
            FailoverMode::Takeover
        };
        notes.push(format!(
            "shard {}: its primary {} is gone ({reason}); promoting {}",
            g.shard, g.name, best.name
        ));
        actions.push(Action::Failover {
            member: addr,
            shard: best.shard,
            mode,
        });
    }
    if !retire.is_empty() {
        actions.push(Action::MarkLeaving { names: retire });
    }
    Plan::new(Phase::Degraded, actions, notes.join("; "))
}

/// First 8 characters of a node id, the way people quote them.
fn short(id: &NodeId) -> &str {
    id.as_str().get(..8).unwrap_or(id.as_str())
}

/// Finishing slot moves already under way (every member answered).
fn in_flight_migrations(members: &[&Member]) -> Option<Plan> {
    let by_id: BTreeMap<NodeId, &Member> = members
        .iter()
        .filter_map(|m| Some((m.view.as_ref()?.id.clone(), *m)))
        .collect();
    let addr = |m: &Member| m.addr.clone().expect("members that answer have an address");
    // Key-by-key moves cut short: (source, target) -> slots.
    let mut resume: BTreeMap<(String, String), Vec<u16>> = BTreeMap::new();
    let mut close: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for m in members {
        let v = m.view.as_ref()?;
        for open in &v.migrating {
            match by_id.get(&open.peer) {
                Some(target) => resume
                    .entry((m.name.clone(), target.name.clone()))
                    .or_default()
                    .push(open.slot),
                None => close.entry(m.name.clone()).or_default().push(open.slot),
            }
        }
        for open in &v.importing {
            let source = by_id.get(&open.peer);
            let source_owns = source.is_some_and(|s| {
                s.view
                    .as_ref()
                    .is_some_and(|sv| sv.slots.iter().any(|r| r.contains(&open.slot)))
            });
            match source {
                Some(source) if source_owns => {
                    let slots = resume
                        .entry((source.name.clone(), m.name.clone()))
                        .or_default();
                    if !slots.contains(&open.slot) {
                        slots.push(open.slot);
                    }
                }
                _ => close.entry(m.name.clone()).or_default().push(open.slot),
            }
        }
    }
    let find = |name: &str| *members.iter().find(|m| m.name == name).expect("member");
    let primaries: Vec<MemberAddr> = members
        .iter()
        .filter(|m| m.view.as_ref().is_some_and(|v| !v.slots.is_empty()))
        .map(|m| addr(m))
        .collect();
    let mut actions = Vec::new();
    for ((source, target), mut slots) in resume {
        slots.sort_unstable();
        let (source, target) = (find(&source), find(&target));
        actions.push(Action::MoveSlots {
            source: addr(source),
            source_id: source.view.as_ref()?.id.clone(),
            method: MoveMethod::Keys,
            targets: vec![MoveTarget {
                member: addr(target),
                id: target.view.as_ref()?.id.clone(),
                ranges: slots.iter().map(|s| *s..=*s).collect(),
            }],
            primaries: primaries.clone(),
        });
    }
    for (member, slots) in close {
        actions.push(Action::CloseSlots {
            member: addr(find(&member)),
            slots,
        });
    }
    if !actions.is_empty() {
        return Some(Plan::new(
            Phase::Updating,
            actions,
            "finishing slot moves that were interrupted",
        ));
    }
    let mut waiting = Vec::new();
    for m in members {
        let v = m.view.as_ref()?;
        if v.exports.is_empty() {
            continue;
        }
        if v.exports
            .iter()
            .any(|j| j.idle_secs >= MIGRATION_IDLE_LIMIT_SECS)
        {
            actions.push(Action::CancelSlotMigrations { member: addr(m) });
            continue;
        }
        let slots: usize = v
            .exports
            .iter()
            .flat_map(|j| &j.ranges)
            .map(range_len)
            .sum();
        waiting.push(format!("{slots} slot(s) from {}", m.name));
    }
    if !actions.is_empty() {
        return Some(Plan::new(
            Phase::Updating,
            actions,
            format!(
                "cancelling slot migrations that made no progress for {MIGRATION_IDLE_LIMIT_SECS} s; they will be planned again"
            ),
        ));
    }
    (!waiting.is_empty()).then(|| {
        Plan::new(
            Phase::Updating,
            vec![],
            format!(
                "moving slots (atomic slot migration): {}",
                waiting.join(", ")
            ),
        )
    })
}

/// Slot moves toward the even split over `topology.shards` shards, one batch per source.
fn rebalance_slots(
    topology: &Topology,
    by_shard: &BTreeMap<usize, Vec<&Member>>,
    slot_owners: &BTreeSet<NodeId>,
) -> Option<Plan> {
    let owned: BTreeMap<usize, Vec<SlotRange>> = by_shard
        .iter()
        .map(|(shard, list)| {
            let slots = list
                .iter()
                .filter_map(|m| m.view.as_ref())
                .flat_map(|v| v.slots.iter().cloned())
                .collect();
            (*shard, slots)
        })
        .collect();
    let moves = rebalance::rebalance(&owned, topology.shards);
    if moves.is_empty() {
        return None;
    }
    let addr = |m: &Member| m.addr.clone().expect("members that answer have an address");
    let leader = |shard: usize| {
        by_shard
            .get(&shard)
            .and_then(|list| shard_leader(list, slot_owners))
    };
    let primaries: Vec<MemberAddr> = by_shard
        .values()
        .flatten()
        .filter(|m| m.view.as_ref().is_some_and(|v| !v.slots.is_empty()))
        .map(|m| addr(m))
        .collect();
    let mut batches: BTreeMap<usize, Vec<MoveTarget>> = BTreeMap::new();
    let mut atomic_ok: BTreeMap<usize, bool> = BTreeMap::new();
    for m in &moves {
        let (Some(_), Some(target)) = (leader(m.from), leader(m.to)) else {
            continue;
        };
        let tv = target.view.as_ref()?;
        batches.entry(m.from).or_default().push(MoveTarget {
            member: addr(target),
            id: tv.id.clone(),
            ranges: m.ranges.clone(),
        });
        let ok = atomic_ok.entry(m.from).or_insert(true);
        *ok &= tv.atomic_migration;
    }
    let mut actions = Vec::new();
    let mut failures = Vec::new();
    for (from, targets) in batches {
        let source = leader(from)?;
        let sv = source.view.as_ref()?;
        let method = if topology.migration == MigrationMethod::Auto
            && sv.atomic_migration
            && atomic_ok.get(&from).copied().unwrap_or(false)
        {
            MoveMethod::Atomic
        } else {
            MoveMethod::Keys
        };
        if let Some(why) = &sv.failed_migration {
            failures.push(format!("{}: {why}", source.name));
        }
        actions.push(Action::MoveSlots {
            source: addr(source),
            source_id: sv.id.clone(),
            method,
            targets,
            primaries: primaries.clone(),
        });
    }
    let moving: usize = moves.iter().map(rebalance::SlotMove::slot_count).sum();
    let from: BTreeSet<usize> = moves.iter().map(|m| m.from).collect();
    let to: BTreeSet<usize> = moves.iter().map(|m| m.to).collect();
    let list = |set: &BTreeSet<usize>| {
        set.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut message = format!(
        "scaling to {} shard(s): {moving} slot(s) left to move from shard(s) {} to shard(s) {}",
        topology.shards,
        list(&from),
        list(&to)
    );
    if !failures.is_empty() {
        message.push_str(&format!(
            "; retrying after a failed migration ({})",
            failures.join("; ")
        ));
    }
    Some(Plan::new(Phase::Updating, actions, message))
}

#[cfg(test)]
mod tests;
