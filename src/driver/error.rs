//! Why a driver call failed: [`DriverError`] names the member, the command and what went
//! wrong. Below `driver/mod.rs`, so the implementation ([`super::fred`]) never imports the
//! module that re-exports them.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::topology::MemberAddr;

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
