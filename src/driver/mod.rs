//! What touches Valkey: the [`ClusterDriver`] trait and its `fred` implementation.
//!
//! The driver *executes and observes*; it decides nothing. Planning (which step comes next)
//! is pure code elsewhere that reads [`MemberObservation`]s and emits driver calls.
//! Every call addresses one member by [`MemberAddr`], is bounded by a timeout, and fails
//! with a [`DriverError`] naming the member and the command.

mod commands;
mod config;
mod error;
#[cfg(test)]
pub mod fake;
pub mod fred;
pub mod migrate;
pub mod parse;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use self::commands::{
    ATOMIC_MIGRATION_SINCE, ClusterDriver, MemberObservation, MigrateKeys, ResetMode, SetSlot,
    SlotMigrationRequest,
};
pub use self::config::{CommandObserver, Credentials, DriverConfig, TlsSettings};
pub use self::error::{DriverError, DriverErrorKind, DriverFuture, DriverResult};
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
#[cfg(test)]
mod tests {
    use std::time::Duration;

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
