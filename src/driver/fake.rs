//! A [`ClusterDriver`] for unit tests of the controller's call sequences: it records every
//! call and answers from state the test sets up, so a test can pin which commands a step sends
//! to which member, in which order, and what the step does when one fails. It is no stand-in
//! for Valkey: what Valkey does with those commands is for the tests against real servers
//! (`tests/driver_*.rs`) and the e2e suites.
//!
//! Each call is recorded as one line, `method member [arguments]`
//! (`failover 10.0.0.2:6379 Default`, `set_slot 10.0.0.1:6379 7 IMPORTING id-a`); see
//! [`FakeDriver::calls`]. How it answers:
//!
//! - A call whose line begins with the words given to [`FakeDriver::fail`] fails with that
//!   error (every time, so a retry fails too). The failed call is still recorded.
//! - The observation queries (`ping`, `server_info`, `my_id`, `cluster_nodes`, `cluster_info`,
//!   `replication_info`, `slot_migrations`) answer from the member's [`MemberObservation`]
//!   given to [`FakeDriver::answer_as`]; a member without one does not answer (a `Connect`
//!   error naming the method). `observe` is the trait's own, built from those queries, as in
//!   production.
//! - `keys_in_slot` and `count_keys_in_slot` answer from the keys given to
//!   [`FakeDriver::hold_keys`]; `migrate_keys` takes the keys it names off the member.
//! - Every other command succeeds: the ones that change something return `()` (or `true`),
//!   the remaining queries (`cluster_shards`, `config_get`, `acl_users`,
//!   `served_certificate`) return nothing.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use futures::future::BoxFuture;

use super::commands::{
    ClusterDriver, MemberObservation, MigrateKeys, ResetMode, SetSlot, SlotMigrationRequest,
};
use super::error::{DriverError, DriverErrorKind, DriverFuture, DriverResult};
use super::parse::{
    ClusterInfo, ClusterNode, NodeFlags, PrimaryLink, ReplicationInfo, Role, ServerInfo, Shard,
    SlotMigration, Usage, Version,
};
use crate::topology::slots::{SlotRange, format_range};
use crate::topology::{FailoverMode, MemberAddr, NodeId};

/// The fake driver; see the module documentation for how it answers.
#[derive(Default)]
pub struct FakeDriver {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    calls: Vec<String>,
    members: BTreeMap<MemberAddr, MemberObservation>,
    keys: BTreeMap<(MemberAddr, u16), Vec<Vec<u8>>>,
    failures: Vec<(String, DriverErrorKind)>,
}

impl FakeDriver {
    /// The member at `observation.member` answers with `observation`.
    pub fn answer_as(&self, observation: MemberObservation) {
        let mut state = self.lock();
        state
            .members
            .insert(observation.member.clone(), observation);
    }

    /// `member` holds `keys` in `slot`.
    pub fn hold_keys(&self, member: &MemberAddr, slot: u16, keys: &[&str]) {
        let keys = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        self.lock().keys.insert((member.clone(), slot), keys);
    }

    /// Every call whose line is `call` or starts with `call` and a space fails with `kind`
    /// (`fail("failover 10.0.0.2:6379", ...)`: any failover on that member).
    pub fn fail(&self, call: &str, kind: DriverErrorKind) {
        self.lock().failures.push((call.to_string(), kind));
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The calls so far to `member`, in order.
    pub fn calls_to(&self, member: &MemberAddr) -> Vec<String> {
        let member = member.to_string();
        let to_member = |call: &&String| call.split(' ').nth(1) == Some(member.as_str());
        self.lock()
            .calls
            .iter()
            .filter(to_member)
            .cloned()
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked mid-call poisons nothing worth guarding.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the call; fails it when the test said so, or hands back the state to answer from.
    fn record(
        &self,
        method: &str,
        member: &MemberAddr,
        args: &str,
    ) -> DriverResult<MutexGuard<'_, State>> {
        let mut state = self.lock();
        let call = match args {
            "" => format!("{method} {member}"),
            _ => format!("{method} {member} {args}"),
        };
        let failure = state
            .failures
            .iter()
            .find(|(prefix, _)| call == *prefix || call.starts_with(&format!("{prefix} ")))
            .map(|(_, kind)| kind.clone());
        state.calls.push(call);
        match failure {
            Some(kind) => Err(error(member, method, kind)),
            None => Ok(state),
        }
    }

    /// A command that changes something: succeeds unless the test said it fails.
    fn command<'a, T: Send + 'a>(
        &self,
        method: &str,
        member: &MemberAddr,
        args: &str,
        ok: T,
    ) -> DriverFuture<'a, T> {
        ready(self.record(method, member, args).map(|_| ok))
    }

    /// A query answered from the member's observation; a member without one does not answer.
    fn observed<'a, T: Send + 'a>(
        &self,
        method: &str,
        member: &MemberAddr,
        part: impl FnOnce(&MemberObservation) -> T,
    ) -> DriverFuture<'a, T> {
        let answer = self.record(method, member, "").and_then(|state| {
            let unknown = || {
                let why = "no member answers there (the fake was given no observation of it)";
                error(member, method, DriverErrorKind::Connect(why.into()))
            };
            state.members.get(member).map(part).ok_or_else(unknown)
        });
        ready(answer)
    }
}

fn ready<'a, T: Send + 'a>(result: DriverResult<T>) -> DriverFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

fn error(member: &MemberAddr, method: &str, kind: DriverErrorKind) -> DriverError {
    DriverError {
        member: member.clone(),
        command: method.to_string(),
        kind,
    }
}

fn ranges(ranges: &[SlotRange]) -> String {
    let ranges: Vec<String> = ranges.iter().map(format_range).collect();
    ranges.join(" ")
}

fn set_slot_args(slot: u16, action: &SetSlot) -> String {
    match action {
        SetSlot::Importing(source) => format!("{slot} IMPORTING {source}"),
        SetSlot::Migrating(target) => format!("{slot} MIGRATING {target}"),
        SetSlot::Node(owner) => format!("{slot} NODE {owner}"),
        SetSlot::Stable => format!("{slot} STABLE"),
    }
}

fn migrate_keys_args(request: &MigrateKeys) -> String {
    let keys: Vec<String> = request
        .keys
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    let replace = if request.replace { " REPLACE" } else { "" };
    format!("{} {}{replace}", request.target, keys.join(","))
}

fn migrate_slots_args(requests: &[SlotMigrationRequest]) -> String {
    let requests: Vec<String> = requests
        .iter()
        .map(|r| format!("{} to {}", ranges(&r.ranges), r.target))
        .collect();
    requests.join("; ")
}

impl ClusterDriver for FakeDriver {
    fn ping<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        self.observed("ping", member, |_| ())
    }

    fn my_id<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, NodeId> {
        self.observed("my_id", member, |o| o.id.clone())
    }

    fn cluster_nodes<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<ClusterNode>> {
        self.observed("cluster_nodes", member, |o| o.nodes.clone())
    }

    fn cluster_shards<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<Shard>> {
        self.command("cluster_shards", member, "", Vec::new())
    }

    fn cluster_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ClusterInfo> {
        self.observed("cluster_info", member, |o| o.info.clone())
    }

    fn replication_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ReplicationInfo> {
        self.observed("replication_info", member, |o| o.replication.clone())
    }

    fn server_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ServerInfo> {
        self.observed("server_info", member, |o| o.server.clone())
    }

    fn count_keys_in_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
    ) -> DriverFuture<'a, u64> {
        let answer = self
            .record("count_keys_in_slot", member, &slot.to_string())
            .map(|state| {
                let keys = state.keys.get(&(member.clone(), slot));
                keys.map_or(0, |k| k.len() as u64)
            });
        ready(answer)
    }

    fn keys_in_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        count: u32,
    ) -> DriverFuture<'a, Vec<Vec<u8>>> {
        let args = format!("{slot} {count}");
        let answer = self.record("keys_in_slot", member, &args).map(|state| {
            let keys = state
                .keys
                .get(&(member.clone(), slot))
                .into_iter()
                .flatten();
            keys.take(count as usize).cloned().collect()
        });
        ready(answer)
    }

    fn slot_migrations<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Vec<SlotMigration>> {
        self.observed("slot_migrations", member, |o| o.migrations.clone())
    }

    fn config_get<'a>(
        &'a self,
        member: &'a MemberAddr,
        pattern: &'a str,
    ) -> DriverFuture<'a, Vec<(String, String)>> {
        self.command("config_get", member, pattern, Vec::new())
    }

    fn meet<'a>(
        &'a self,
        member: &'a MemberAddr,
        ip: &'a str,
        port: u16,
        bus_port: Option<u16>,
    ) -> DriverFuture<'a, ()> {
        let bus_port = bus_port.map_or("-".to_string(), |p| p.to_string());
        self.command("meet", member, &format!("{ip} {port} {bus_port}"), ())
    }

    fn add_slots_range<'a>(
        &'a self,
        member: &'a MemberAddr,
        slots: &'a [SlotRange],
    ) -> DriverFuture<'a, ()> {
        self.command("add_slots_range", member, &ranges(slots), ())
    }

    fn replicate<'a>(
        &'a self,
        member: &'a MemberAddr,
        primary: &'a NodeId,
    ) -> DriverFuture<'a, ()> {
        self.command("replicate", member, primary.as_str(), ())
    }

    fn failover<'a>(&'a self, member: &'a MemberAddr, mode: FailoverMode) -> DriverFuture<'a, ()> {
        self.command("failover", member, &format!("{mode:?}"), ())
    }

    fn set_config_epoch<'a>(&'a self, member: &'a MemberAddr, epoch: u64) -> DriverFuture<'a, ()> {
        self.command("set_config_epoch", member, &epoch.to_string(), ())
    }

    fn forget<'a>(&'a self, member: &'a MemberAddr, node: &'a NodeId) -> DriverFuture<'a, ()> {
        self.command("forget", member, node.as_str(), ())
    }

    fn reset<'a>(&'a self, member: &'a MemberAddr, mode: ResetMode) -> DriverFuture<'a, ()> {
        self.command("reset", member, &format!("{mode:?}"), ())
    }

    fn set_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        action: &'a SetSlot,
    ) -> DriverFuture<'a, ()> {
        self.command("set_slot", member, &set_slot_args(slot, action), ())
    }

    fn migrate_keys<'a>(
        &'a self,
        member: &'a MemberAddr,
        request: &'a MigrateKeys,
    ) -> DriverFuture<'a, bool> {
        let args = migrate_keys_args(request);
        let answer = self.record("migrate_keys", member, &args).map(|mut state| {
            let mut moved = false;
            let held = state.keys.iter_mut().filter(|((m, _), _)| m == member);
            for (_, keys) in held {
                let before = keys.len();
                keys.retain(|k| !request.keys.contains(k));
                moved |= keys.len() < before;
            }
            moved
        });
        ready(answer)
    }

    fn migrate_slots<'a>(
        &'a self,
        member: &'a MemberAddr,
        requests: &'a [SlotMigrationRequest],
    ) -> DriverFuture<'a, ()> {
        self.command("migrate_slots", member, &migrate_slots_args(requests), ())
    }

    fn cancel_slot_migrations<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, bool> {
        self.command("cancel_slot_migrations", member, "", true)
    }

    fn acl_load<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        self.command("acl_load", member, "", ())
    }

    fn acl_users<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<String>> {
        self.command("acl_users", member, "", Vec::new())
    }

    fn config_set<'a>(
        &'a self,
        member: &'a MemberAddr,
        settings: &'a [(String, String)],
    ) -> DriverFuture<'a, ()> {
        let settings: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.command("config_set", member, &settings.join(" "), ())
    }

    fn config_rewrite<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        self.command("config_rewrite", member, "", ())
    }

    fn disconnect<'a>(&'a self, member: &'a MemberAddr) -> BoxFuture<'a, ()> {
        // Cannot fail: the call is only recorded.
        drop(self.record("disconnect", member, ""));
        Box::pin(std::future::ready(()))
    }

    fn served_certificate<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Option<Vec<u8>>> {
        self.command("served_certificate", member, "", None)
    }
}

/// A Valkey 9.0.0 primary `id` at `member` in a formed cluster (`cluster_state:ok`), owning
/// `slots`; its run id is `run-<id>`.
pub fn primary(member: &MemberAddr, id: &str, slots: Vec<SlotRange>) -> MemberObservation {
    let myself = own_line(member, id, None, slots);
    observation(member, myself, Role::Primary, None)
}

/// A Valkey 9.0.0 replica `id` at `member`, in sync with `of`.
pub fn replica(member: &MemberAddr, id: &str, of: &MemberObservation) -> MemberObservation {
    let myself = own_line(member, id, Some(of.id.clone()), Vec::new());
    let link = PrimaryLink {
        host: of.member.host.clone(),
        port: of.member.port,
        link_up: true,
        sync_in_progress: false,
        last_io_seconds_ago: 0,
        replica_offset: 0,
    };
    let mut observation = observation(member, myself, Role::Replica, Some(link));
    // It knows its primary, as CLUSTER NODES shows it.
    let mut primary_line = of.myself().cloned().expect("`of` lists itself");
    primary_line.flags.myself = false;
    observation.nodes.push(primary_line);
    observation
}

/// The member's own line of `CLUSTER NODES`.
fn own_line(
    member: &MemberAddr,
    id: &str,
    primary_id: Option<NodeId>,
    slots: Vec<SlotRange>,
) -> ClusterNode {
    let flags = NodeFlags {
        myself: true,
        primary: primary_id.is_none(),
        replica: primary_id.is_some(),
        ..Default::default()
    };
    ClusterNode {
        id: NodeId::from(id),
        ip: member.host.clone(),
        port: member.port,
        // Valkey's default: the client port plus 10000.
        bus_port: member.port + 10000,
        hostname: None,
        flags,
        primary_id,
        ping_sent: 0,
        pong_received: 0,
        config_epoch: 1,
        link_connected: true,
        slots,
        migrating: Vec::new(),
        importing: Vec::new(),
    }
}

fn observation(
    member: &MemberAddr,
    myself: ClusterNode,
    role: Role,
    primary_link: Option<PrimaryLink>,
) -> MemberObservation {
    let assigned: usize = myself
        .slots
        .iter()
        .map(crate::topology::slots::range_len)
        .sum();
    MemberObservation {
        member: member.clone(),
        id: myself.id.clone(),
        info: ClusterInfo {
            state_ok: true,
            slots_assigned: assigned as u32,
            slots_ok: assigned as u32,
            slots_pfail: 0,
            slots_fail: 0,
            known_nodes: 1,
            size: u32::from(assigned > 0),
            current_epoch: 1,
            my_epoch: 1,
        },
        replication: ReplicationInfo {
            role,
            primary_link,
            connected_replicas: Vec::new(),
            repl_offset: 0,
            failover_state: "no-failover".into(),
        },
        server: ServerInfo {
            version: Version::new(9, 0, 0),
            run_id: format!("run-{}", myself.id),
            tcp_port: member.port,
            uptime_seconds: 60,
            cluster_mode: true,
            aof_bytes: None,
            usage: Usage::default(),
        },
        migrations: Vec::new(),
        nodes: vec![myself],
    }
}
