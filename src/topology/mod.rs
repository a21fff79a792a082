//! Topology vocabulary shared by the planner and the driver (pure data, no I/O): node ids,
//! member addresses, failover modes and hash-slot arithmetic ([`slots`]).

pub mod slots;

use std::fmt;

use serde::{Deserialize, Serialize};

/// A Valkey node id (40 hex characters as printed by `CLUSTER MYID`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub String);

impl NodeId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for NodeId {
    fn from(s: &str) -> Self {
        NodeId(s.to_owned())
    }
}

/// A slot being moved, as shown in `CLUSTER NODES` by the node that has it open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSlot {
    pub slot: u16,
    /// The peer: the target of a migrating slot or the source of an importing one.
    pub peer: NodeId,
}

/// Address of one Valkey member (`ip:port` or `hostname:port`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MemberAddr {
    pub host: String,
    pub port: u16,
}

impl MemberAddr {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        MemberAddr {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for MemberAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why a string is not a [`MemberAddr`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberAddrError {
    #[error("member address {0:?} lacks a port (expected host:port)")]
    NoPort(String),
    #[error(
        "member address {0:?} has a bad port (expected host:port, the port a number up to 65535)"
    )]
    BadPort(String),
}

impl std::str::FromStr for MemberAddr {
    type Err = MemberAddrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| MemberAddrError::NoPort(s.to_owned()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port
            .parse()
            .map_err(|_| MemberAddrError::BadPort(s.to_owned()))?;
        Ok(MemberAddr::new(host, port))
    }
}

/// `CLUSTER FAILOVER` flavours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailoverMode {
    /// Coordinated with the primary: no acknowledged write lost.
    Default,
    /// Without the primary's agreement (primary unreachable), still with a majority vote.
    Force,
    /// Without any agreement (no majority): last resort.
    Takeover,
}
