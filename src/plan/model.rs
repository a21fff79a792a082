//! The types every planner stage shares: the members and what their Valkey reports, the
//! steps, the plan and what it waits for, and the limits stages plan within. Its own module so
//! the stages (and the helpers they share in `context`) never import `plan/mod.rs`, the module
//! that orchestrates them; `plan/mod.rs` re-exports everything here.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{ClusterState, Lifecycle};
use crate::topology::slots::SlotRange;
use crate::topology::{FailoverMode, MemberAddr, NodeId, OpenSlot};

/// An atomic slot migration whose job has not advanced for this long is cancelled and
/// planned again (Valkey documents that jobs can fail under heavy writes to the slots).
pub const MIGRATION_IDLE_LIMIT_SECS: u64 = 120;

/// Steps of one kind acted on per round, for the kinds a plan holds one of per member or per
/// pair of members (CreateNode, Meet, Replicate, Forget, DeleteNode): a 1000-member formation
/// plans 1000 creations (each an API create, a status patch and an Event) and a large scale-in
/// a Forget per leaving member per member that knows it. Acted on at once, one reconcile would
/// hold its worker for minutes and the API server would take a burst from one tenant; the rest
/// is simply planned again next round, since every plan is re-derived from live state. Stages
/// whose step lists grow with the square of the members stop planning at this many, too.
pub const BULK_STEPS_PER_ROUND: usize = 64;

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
    /// Slots per owning node, this member's own included, as this member sees the cluster:
    /// a failed primary that is not one of our members still owns its slots, and a member that
    /// has not heard of a move yet still names the old owner.
    pub owned_by: BTreeMap<NodeId, Vec<SlotRange>>,
    /// Node ids this member knows (CLUSTER NODES, handshakes excluded).
    pub known: BTreeSet<NodeId>,
    /// The IP this member has for each node it knows: a member whose pod came back with its
    /// volume keeps its node id under a new IP, which its peers do not learn by themselves
    /// when everybody moved at once (a full restart).
    pub addresses: BTreeMap<NodeId, String>,
    /// Its Valkey reports `cluster_state:ok`.
    pub cluster_ok: bool,
    /// For a replica: the link to its primary is up and the initial sync is done.
    pub replica_in_sync: bool,
    /// This member's config epoch (`CLUSTER NODES`, its `myself` line; a replica reports its
    /// primary's there, not the one it would take over with).
    pub config_epoch: u64,
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
    /// Node ids this member's Valkey flags as failing (`fail?`: no answer within
    /// `cluster-node-timeout`; `fail`: a majority of primaries agreed).
    pub failing: BTreeSet<NodeId>,
}

#[cfg(test)]
impl MemberView {
    /// A primary with id `id` that owns nothing and knows nobody: tests fill in the rest.
    pub(crate) fn bare(id: &str) -> MemberView {
        MemberView {
            id: NodeId(id.into()),
            is_primary: true,
            primary_id: None,
            slots: vec![],
            owned_by: BTreeMap::new(),
            known: BTreeSet::new(),
            addresses: BTreeMap::new(),
            cluster_ok: true,
            replica_in_sync: false,
            config_epoch: 0,
            migrating: vec![],
            importing: vec![],
            exports: vec![],
            failed_migration: None,
            atomic_migration: true,
            repl_offset: 0,
            failing: BTreeSet::new(),
        }
    }
}

impl MemberView {
    /// Whether this member sees node `id` owning at least one slot.
    pub fn sees_owning(&self, id: &NodeId) -> bool {
        self.owned_by.contains_key(id)
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveMethod {
    /// `CLUSTER MIGRATESLOTS`, run by Valkey in the background.
    Atomic,
    /// `SETSLOT IMPORTING/MIGRATING`, `MIGRATE` key by key, `SETSLOT NODE`.
    Keys,
}

/// Slots going from a source primary to one target primary.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    /// The Kubernetes node its pod runs on: new primaries are spread across nodes, so losing
    /// one node leaves Valkey a majority of primaries to fail over by itself.
    pub host: Option<String>,
    /// Kubernetes reports its pod not Ready: its readiness probe fails, or its node stopped
    /// reporting and the node lifecycle controller marked the node's pods not Ready.
    pub pod_not_ready: bool,
    /// The name it announces to clients resolves (with TLS, members announce a hostname that
    /// the cluster DNS answers only once the pod is Ready); always true for members announcing
    /// only their IP. Slots move to a member only once it is, so no client is sent to a name
    /// that does not resolve yet.
    pub name_resolves: bool,
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
            host: None,
            pod_not_ready: false,
            name_resolves: true,
            gone: None,
        }
    }

    pub(super) fn id(&self) -> Option<NodeId> {
        self.view
            .as_ref()
            .map(|v| v.id.clone())
            .or_else(|| self.node_id.clone())
    }

    /// Its Valkey reported this round and it has an address to act on.
    pub(super) fn answered(&self) -> bool {
        self.view.is_some() && self.addr.is_some()
    }

    pub(super) fn in_sync_replica(&self) -> bool {
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

/// One step on the world. A plan is a batch of independent steps that are safe together.
/// Hashed to tell a plan that repeats the last one from progress (`controller::cluster::repeats`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
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
    /// `CLUSTER SET-CONFIG-EPOCH epoch` on a new member that knows nobody yet.
    SetConfigEpoch {
        member: MemberAddr,
        epoch: u64,
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

/// The kind of change a plan is a step of (the `Progressing` condition's reason), read from
/// the members, never from the plan's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// Nothing to do: the cluster is as its spec asks.
    Settled,
    /// Members created and formed into the cluster for the first time.
    Forming,
    /// Members on an outdated spec are replaced, one shard at a time.
    RollingOut,
    /// The shape changes: shards or replicas added or removed, slots moving between shards.
    Scaling,
    /// Members that failed (gone for good, lost their identity) are replaced.
    ReplacingMembers,
    /// Anything else on a formed cluster (replicas re-attached, stale entries forgotten...).
    Updating,
    /// Members are missing or out of sync; the operator waits or repairs.
    Degraded,
}

impl Change {
    /// The `Progressing` condition's status (true while the operator changes the cluster).
    pub fn progressing(self) -> bool {
        !matches!(self, Change::Settled | Change::Degraded)
    }

    /// The `Progressing` condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Change::Settled => "Settled",
            Change::Forming => "Forming",
            Change::RollingOut => "RollingOut",
            Change::Scaling => "Scaling",
            Change::ReplacingMembers => "ReplacingMembers",
            Change::Updating => "Updating",
            Change::Degraded => "Degraded",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Where the cluster stands, as status shows it; the planner decides Creating, Active,
    /// Updating or Degraded (the other states are decided around it).
    pub state: ClusterState,
    pub steps: Vec<Step>,
    /// What the cluster is doing or waiting for, in words for status.
    pub message: String,
    /// The kind of change this step is part of (set by [`plan`](super::plan)).
    pub change: Change,
    /// Shards whose data is gone this round: every member of the shard that held it is gone
    /// for good (memory-only members whose pods were all lost, a full restart without
    /// volumes). They are re-created empty; the controller says so loudly (a Warning Event
    /// and the `DataLost` condition), never silently.
    pub lost_shards: Vec<usize>,
    /// The plan waits for members it names (nobody established answers, or members do not
    /// run and answer yet): its message already says who is missing.
    pub names_the_missing: bool,
    /// What the plan waits for, as data: the message says it in words, for people only.
    pub awaiting: Awaiting,
}

/// What a plan waits for, as data (its message says the same in words, for people only):
/// how soon the cluster is looked at again follows it (`controller::cluster::cadence`), so
/// the same wait compares equal round after round, any progress does not, and rewording a
/// message changes neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Awaiting {
    /// What the stage that planned waits for.
    pub on: Wait,
    /// Established members that do not answer, which the rest of the cluster carries on
    /// without (see `failures::silent_members`), by name.
    pub silent: Vec<String>,
}

/// What one planning stage waits for, naming who or what it waits on and how far it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Nothing: the plan acts, or the cluster is as its spec asks.
    #[default]
    Nothing,
    /// Any of a formed cluster's established members to answer (stage 0), by name.
    Established { members: Vec<String> },
    /// Members to run and answer (stage 2): (name, why Kubernetes says its pod does not run).
    Answers {
        members: Vec<(String, Option<String>)>,
    },
    /// Gone primaries still owning slots none of whose replicas answers (stage 2a), by name.
    GonePrimaries { members: Vec<String> },
    /// Shards without a primary owning slots (stages 5 and 8).
    NoPrimary { shards: Vec<usize> },
    /// Replicas to finish their initial sync (stage 6), by name.
    ReplicaSync { replicas: Vec<String> },
    /// Atomic slot migration jobs (stage 6b): (source member, slots it still exports).
    SlotMigrations { sources: Vec<(String, usize)> },
    /// A leaving member that is its shard's only copy, for an in-sync replica (stage 7).
    OnlyCopy { member: String },
    /// The rollout shard, for an in-sync replica on the current spec (stage 8).
    Replacement { shard: usize },
    /// The hostname a failover target announces to resolve (stages 7 and 8).
    Hostname { member: String },
    /// Slot moves toward the even split (stage 9): slots left to move, and the members that
    /// hold batches back (targets still learning every slot's owner, targets whose hostname
    /// does not resolve yet, and per source giving its last slots, the members that do not
    /// see its earlier moves yet).
    Rebalance {
        slots_left: usize,
        learning: Vec<String>,
        resolving: Vec<String>,
        emptying: Vec<(String, Vec<String>)>,
    },
    /// Every member's `cluster_state` to be ok and every slot covered (stage 12): the members
    /// not ok, by name, and the slots covered.
    Health {
        not_ok: Vec<String>,
        slots_covered: usize,
    },
}

impl Change {
    /// The change a state implies by itself; an update's kind is read from the members
    /// ([`change_of`](super::change_of)).
    pub fn of(state: ClusterState) -> Change {
        match state {
            ClusterState::Active => Change::Settled,
            ClusterState::Creating => Change::Forming,
            ClusterState::Updating => Change::Updating,
            ClusterState::Degraded => Change::Degraded,
            // Never planned: the steps around the planner decide these (blocked, deleting,
            // restoring, failed, TLS invalid), and none is a change of the members.
            ClusterState::Blocked
            | ClusterState::Deleting
            | ClusterState::Invalid
            | ClusterState::Restoring
            | ClusterState::Failed => Change::Degraded,
        }
    }
}

impl Plan {
    pub(super) fn new(state: ClusterState, steps: Vec<Step>, message: impl Into<String>) -> Plan {
        let change = Change::of(state);
        Plan {
            state,
            steps,
            message: message.into(),
            change,
            lost_shards: vec![],
            names_the_missing: false,
            awaiting: Awaiting::default(),
        }
    }

    /// A plan that waits for the members its message names (`on` names them as data).
    pub(super) fn waiting_for_members(
        state: ClusterState,
        on: Wait,
        message: impl Into<String>,
    ) -> Plan {
        Plan {
            names_the_missing: true,
            ..Plan::new(state, vec![], message).waiting(on)
        }
    }

    /// This plan, waiting `on` (see [`Awaiting`]).
    pub(super) fn waiting(mut self, on: Wait) -> Plan {
        self.awaiting.on = on;
        self
    }
}

/// Deterministic member name: `<cluster>-<shard>-<index>`; the index is the lowest one not in
/// use in that shard, so a re-planned creation after a crash names the same object.
pub fn member_name(cluster: &str, shard: usize, index: usize) -> String {
    format!("{cluster}-{shard}-{index}")
}
