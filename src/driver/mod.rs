//! What touches Valkey: the [`ClusterDriver`] trait and its `fred` implementation.
//!
//! The driver *executes and observes*; it decides nothing. Planning (which step comes next)
//! is pure code elsewhere that reads [`MemberObservation`]s and emits driver calls.
//! Every call addresses one member by [`MemberAddr`], is bounded by a timeout, and fails
//! with a [`DriverError`] naming the member and the command.

pub mod fred;
pub mod migrate;
pub mod parse;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

pub use self::fred::FredDriver;
pub use crate::topology::slots;
pub use crate::topology::{FailoverMode, MemberAddr};
pub use parse::{
    ClusterInfo, ClusterNode, ConnectedReplica, Health, MigrationOperation, MigrationState,
    NodeFlags, NodeId, OpenSlot, PrimaryLink, ReplicationInfo, Role, ServerInfo, Shard, ShardNode,
    SlotMigration, Usage, Version,
};
pub use slots::{SlotRange, even_ranges};

/// ACL line for the `default` user on operator-managed members: disabled (nobody can
/// authenticate as it, unauthenticated connections get `NOAUTH`), with the one permission
/// Valkey 9.0.0 needs for atomic slot migration. 9.0.0 runs the `CLUSTER SYNCSLOTS`
/// commands that the importing node sends back to the exporting node as the `default`
/// user, and the migration fails with `NOPERM User default has no permissions to run the
/// 'cluster|syncslots' command` otherwise; 9.1.2 does not need it.
pub const DEFAULT_USER_ACL: &str =
    "user default off resetkeys resetchannels -@all +cluster|syncslots";

/// The ACL user the operator authenticates as (`AUTH username password`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// TLS for driver connections: set for a TLS cluster, where every connection (commands,
/// `MIGRATE`'s own connections aside: members make those) is TLS with rustls, verifying the
/// member's certificate. Plaintext and TLS clusters differ only by this value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM bundle of the CA certificates to trust (every `CERTIFICATE` block: old and new CA
    /// during a CA rotation).
    pub ca_pem: String,
    /// Name every member's certificate is verified against (the operator uses the cluster's
    /// `<cluster>.<namespace>.svc.cluster.local`); `None`: the member's host.
    pub server_name: Option<String>,
    /// Verify certificates as of this time (seconds since the epoch) instead of now. Set only
    /// while a cluster is Blocked on a certificate that has expired, to its `notAfter`: the
    /// operator still verifies the chain and the name, and keeps handling failures (a
    /// replica promoted) until a renewed certificate arrives. `None`: now.
    pub verify_as_of: Option<u64>,
}

/// Told of every command the driver runs: its name (no arguments), its round trip and
/// whether it succeeded (the operator's metrics; the driver knows nothing of them).
pub trait CommandObserver: Send + Sync {
    fn observe_command(&self, command: &str, took: Duration, ok: bool);
}

/// How the driver connects and how long it waits.
#[derive(Clone)]
pub struct DriverConfig {
    pub credentials: Credentials,
    pub tls: Option<TlsSettings>,
    /// Told of every command and its outcome, when set.
    pub observer: Option<std::sync::Arc<dyn CommandObserver>>,
    /// Bound on establishing (and authenticating) a connection to one member.
    pub connect_timeout: Duration,
    /// Bound on one command round trip (connection included).
    pub command_timeout: Duration,
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .field("observed", &self.observer.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

impl DriverConfig {
    pub fn new(credentials: Credentials) -> Self {
        DriverConfig {
            credentials,
            tls: None,
            observer: None,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a driver call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverErrorKind {
    /// Could not connect or authenticate.
    Connect(String),
    /// No reply within the timeout.
    Timeout(Duration),
    /// The member replied with an error (e.g. `ERR Unknown node ...`).
    Server(String),
    /// The connection broke during the call.
    Io(String),
    /// The reply did not have the expected shape.
    Parse(String),
    /// The driver was configured with something it cannot do.
    Config(String),
}

/// A failed driver call: which member, which command, what went wrong.
/// The command is only its name (`CLUSTER SETSLOT`), never its arguments (they may carry
/// credentials, as `MIGRATE ... AUTH2` does).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct DriverError {
    pub member: MemberAddr,
    pub command: String,
    pub kind: DriverErrorKind,
}

impl DriverError {
    /// True when retrying the same call later may succeed without anyone changing
    /// anything (connection trouble, timeouts). Server replies are not transient.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            DriverErrorKind::Connect(_) | DriverErrorKind::Timeout(_) | DriverErrorKind::Io(_)
        )
    }

    /// The server's error text, if the member replied with an error.
    pub fn server_message(&self) -> Option<&str> {
        match &self.kind {
            DriverErrorKind::Server(m) => Some(m),
            _ => None,
        }
    }

    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self.kind {
            DriverErrorKind::Connect(_) => "connect",
            DriverErrorKind::Timeout(_) => "timeout",
            DriverErrorKind::Server(_) => "server",
            DriverErrorKind::Io(_) => "io",
            DriverErrorKind::Parse(_) => "parse",
            DriverErrorKind::Config(_) => "config",
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, c) = (&self.member, &self.command);
        match &self.kind {
            DriverErrorKind::Connect(e) => {
                write!(f, "valkey member {m}: cannot connect to run {c}: {e}")
            }
            DriverErrorKind::Timeout(d) => {
                write!(f, "valkey member {m}: {c} got no reply within {d:?}")
            }
            DriverErrorKind::Server(e) => write!(f, "valkey member {m}: {c} failed: {e}"),
            DriverErrorKind::Io(e) => {
                write!(f, "valkey member {m}: connection broke during {c}: {e}")
            }
            DriverErrorKind::Parse(e) => {
                write!(f, "valkey member {m}: unexpected reply to {c}: {e}")
            }
            DriverErrorKind::Config(e) => write!(f, "valkey member {m}: cannot run {c}: {e}"),
        }
    }
}

pub type DriverResult<T> = Result<T, DriverError>;
/// Future returned by driver calls (boxed so the trait is object safe:
/// controllers hold an `Arc<dyn ClusterDriver>`, tests substitute fakes).
pub type DriverFuture<'a, T> = BoxFuture<'a, DriverResult<T>>;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_is_object_safe_and_shareable() {
        fn shareable<T: Send + Sync + ?Sized>() {}
        shareable::<dyn ClusterDriver>();
        let driver: std::sync::Arc<dyn ClusterDriver> =
            std::sync::Arc::new(FredDriver::new(DriverConfig::new(Credentials {
                username: "operator".into(),
                password: "secret".into(),
            })));
        drop(driver);
    }

    #[test]
    fn member_addresses_round_trip() {
        let a: MemberAddr = "10.0.0.1:6379".parse().unwrap();
        assert_eq!(a, MemberAddr::new("10.0.0.1", 6379));
        assert_eq!(a.to_string(), "10.0.0.1:6379");
        let v6: MemberAddr = "[fd00::1]:6379".parse().unwrap();
        assert_eq!(v6.host, "fd00::1");
        assert_eq!(v6.to_string(), "[fd00::1]:6379");
        assert!("no-port".parse::<MemberAddr>().is_err());
        assert!("host:port".parse::<MemberAddr>().is_err());
    }

    #[test]
    fn errors_name_member_and_command_and_hide_secrets() {
        let err = DriverError {
            member: MemberAddr::new("10.0.0.1", 6379),
            command: "CLUSTER REPLICATE".into(),
            kind: DriverErrorKind::Server("ERR Unknown node abc".into()),
        };
        assert_eq!(
            err.to_string(),
            "valkey member 10.0.0.1:6379: CLUSTER REPLICATE failed: ERR Unknown node abc"
        );
        assert!(!err.is_transient());
        assert_eq!(err.metric_label(), "server");
        assert_eq!(err.server_message(), Some("ERR Unknown node abc"));
        let timeout = DriverError {
            kind: DriverErrorKind::Timeout(Duration::from_secs(10)),
            ..err
        };
        assert!(timeout.is_transient());
        assert!(timeout.to_string().contains("no reply within 10s"));
        let creds = Credentials {
            username: "operator".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{creds:?}").contains("hunter2"));
    }

    #[test]
    fn fred_replies_convert_to_client_independent_replies() {
        use ::fred::types::Value;
        let map: ::fred::types::Map = [("k", Value::Integer(1))].into_iter().collect();
        let value = Value::Array(vec![
            Value::String("OK".into()),
            Value::Bytes(b"raw".to_vec().into()),
            Value::Null,
            Value::Map(map),
        ]);
        assert_eq!(
            fred::to_reply(value),
            parse::Reply::Array(vec![
                parse::Reply::Text("OK".into()),
                parse::Reply::Text("raw".into()),
                parse::Reply::Nil,
                parse::Reply::Map(vec![(parse::Reply::Text("k".into()), parse::Reply::Int(1))]),
            ])
        );
    }
}
