//! The [`ClusterDriver`] trait: the commands the operator runs on one member, and the values
//! they take and return. Below `driver/mod.rs`, so the implementation ([`super::fred`]) never
//! imports the module that re-exports them.

use std::time::Duration;

use futures::future::BoxFuture;

use super::error::DriverFuture;
use super::parse::{
    ClusterInfo, ClusterNode, ReplicationInfo, ServerInfo, Shard, SlotMigration, Version,
};
use crate::topology::slots::SlotRange;
use crate::topology::{FailoverMode, MemberAddr, NodeId};

/// `CLUSTER RESET` flavours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetMode {
    Soft,
    Hard,
}

/// `CLUSTER SETSLOT <slot> ...` actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetSlot {
    /// On the target: the slot is being imported from `source`.
    Importing(NodeId),
    /// On the source: the slot is being migrated to `target`.
    Migrating(NodeId),
    /// Assign the slot to a node (ends a migration).
    Node(NodeId),
    /// Clear importing/migrating state.
    Stable,
}

/// One migration group of `CLUSTER MIGRATESLOTS`: these ranges go to that node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMigrationRequest {
    pub ranges: Vec<SlotRange>,
    pub target: NodeId,
}

/// Options of a key-by-key `MIGRATE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateKeys {
    /// Where the keys go (the target member's client address).
    pub target: MemberAddr,
    pub keys: Vec<Vec<u8>>,
    /// Valkey's own I/O timeout for the transfer.
    pub timeout: Duration,
    /// Overwrite keys that already exist on the target (`REPLACE`).
    pub replace: bool,
}

/// What a member reports about itself and the cluster, in one round of observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObservation {
    pub member: MemberAddr,
    pub id: NodeId,
    pub nodes: Vec<ClusterNode>,
    pub info: ClusterInfo,
    pub replication: ReplicationInfo,
    pub server: ServerInfo,
    /// `CLUSTER GETSLOTMIGRATIONS` (empty on servers without atomic slot migration).
    pub migrations: Vec<SlotMigration>,
}

/// First Valkey version with atomic slot migration (`CLUSTER MIGRATESLOTS`).
pub const ATOMIC_MIGRATION_SINCE: Version = Version::new(9, 0, 0);

impl MemberObservation {
    /// This member's own line of `CLUSTER NODES`.
    pub fn myself(&self) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.flags.myself)
    }
}

/// Executes and observes Valkey cluster commands on individual members.
///
/// Implementations connect with the operator's admin ACL user, reuse connections per
/// member, bound every call with a timeout and never retry non-idempotent commands.
pub trait ClusterDriver: Send + Sync {
    // ---- observe ----------------------------------------------------------------------
    fn ping<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()>;
    /// `CLUSTER MYID`.
    fn my_id<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, NodeId>;
    /// `CLUSTER NODES`, parsed.
    fn cluster_nodes<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<ClusterNode>>;
    /// `CLUSTER SHARDS`, parsed.
    fn cluster_shards<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<Shard>>;
    /// `CLUSTER INFO`, parsed.
    fn cluster_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ClusterInfo>;
    /// `INFO replication`, parsed.
    fn replication_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ReplicationInfo>;
    /// `INFO server`, parsed.
    fn server_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ServerInfo>;
    /// `CLUSTER COUNTKEYSINSLOT`.
    fn count_keys_in_slot<'a>(&'a self, member: &'a MemberAddr, slot: u16)
    -> DriverFuture<'a, u64>;
    /// `CLUSTER GETKEYSINSLOT`.
    fn keys_in_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        count: u32,
    ) -> DriverFuture<'a, Vec<Vec<u8>>>;
    /// `CLUSTER GETSLOTMIGRATIONS` (Valkey 9+), parsed.
    fn slot_migrations<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Vec<SlotMigration>>;
    /// `CONFIG GET pattern` as name → value.
    fn config_get<'a>(
        &'a self,
        member: &'a MemberAddr,
        pattern: &'a str,
    ) -> DriverFuture<'a, Vec<(String, String)>>;

    /// Everything a planner needs from one member, observed in sequence.
    fn observe<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, MemberObservation> {
        Box::pin(async move {
            let server = self.server_info(member).await?;
            let migrations = if server.version >= ATOMIC_MIGRATION_SINCE {
                self.slot_migrations(member).await?
            } else {
                Vec::new()
            };
            Ok(MemberObservation {
                member: member.clone(),
                id: self.my_id(member).await?,
                nodes: self.cluster_nodes(member).await?,
                info: self.cluster_info(member).await?,
                replication: self.replication_info(member).await?,
                server,
                migrations,
            })
        })
    }

    // ---- act --------------------------------------------------------------------------
    /// `CLUSTER MEET ip port [bus-port]`: the member introduces itself to `ip:port`.
    fn meet<'a>(
        &'a self,
        member: &'a MemberAddr,
        ip: &'a str,
        port: u16,
        bus_port: Option<u16>,
    ) -> DriverFuture<'a, ()>;
    /// `CLUSTER ADDSLOTSRANGE a b [c d ...]`.
    fn add_slots_range<'a>(
        &'a self,
        member: &'a MemberAddr,
        ranges: &'a [SlotRange],
    ) -> DriverFuture<'a, ()>;
    /// `CLUSTER REPLICATE node-id`.
    fn replicate<'a>(&'a self, member: &'a MemberAddr, primary: &'a NodeId)
    -> DriverFuture<'a, ()>;
    /// `CLUSTER FAILOVER [FORCE|TAKEOVER]`, sent to a replica.
    fn failover<'a>(&'a self, member: &'a MemberAddr, mode: FailoverMode) -> DriverFuture<'a, ()>;
    /// `CLUSTER SET-CONFIG-EPOCH epoch`: only on a member that knows no other node and has
    /// config epoch 0.
    fn set_config_epoch<'a>(&'a self, member: &'a MemberAddr, epoch: u64) -> DriverFuture<'a, ()>;
    /// `CLUSTER FORGET node-id`.
    fn forget<'a>(&'a self, member: &'a MemberAddr, node: &'a NodeId) -> DriverFuture<'a, ()>;
    /// `CLUSTER RESET SOFT|HARD`.
    fn reset<'a>(&'a self, member: &'a MemberAddr, mode: ResetMode) -> DriverFuture<'a, ()>;
    /// `CLUSTER SETSLOT slot IMPORTING|MIGRATING|NODE id` or `STABLE`.
    fn set_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        action: &'a SetSlot,
    ) -> DriverFuture<'a, ()>;
    /// `MIGRATE host port "" 0 timeout [REPLACE] AUTH2 user pass KEYS k...`, sent to the
    /// source. Returns false when Valkey answered `NOKEY` (none of the keys existed).
    fn migrate_keys<'a>(
        &'a self,
        member: &'a MemberAddr,
        request: &'a MigrateKeys,
    ) -> DriverFuture<'a, bool>;
    /// `CLUSTER MIGRATESLOTS SLOTSRANGE a b ... NODE id [...]` (Valkey 9+), sent to the
    /// source primary. Returns once the jobs are accepted; follow them with
    /// [`ClusterDriver::slot_migrations`].
    fn migrate_slots<'a>(
        &'a self,
        member: &'a MemberAddr,
        requests: &'a [SlotMigrationRequest],
    ) -> DriverFuture<'a, ()>;
    /// `CLUSTER CANCELSLOTMIGRATIONS` (Valkey 9+). Returns false when nothing was running.
    fn cancel_slot_migrations<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, bool>;
    /// `ACL LOAD`.
    fn acl_load<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()>;
    /// `ACL USERS`: the usernames the member has loaded.
    fn acl_users<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<String>>;
    /// `CONFIG SET name value [name value ...]`.
    fn config_set<'a>(
        &'a self,
        member: &'a MemberAddr,
        settings: &'a [(String, String)],
    ) -> DriverFuture<'a, ()>;
    /// `CONFIG REWRITE`.
    fn config_rewrite<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()>;

    /// Drops any cached connection to the member (e.g. once it has left the cluster).
    fn disconnect<'a>(&'a self, member: &'a MemberAddr) -> BoxFuture<'a, ()>;

    /// The leaf certificate (DER) the member serves, read by a TLS handshake of its own with
    /// the driver's verification; `Ok(None)` when the driver is not configured for TLS.
    fn served_certificate<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Option<Vec<u8>>>;
}
