//! Pure parsers for what Valkey reports about itself: `CLUSTER NODES`, `CLUSTER INFO`,
//! `CLUSTER SHARDS`, `CLUSTER GETSLOTMIGRATIONS`, `INFO replication`, `INFO server`.
//!
//! Text replies are parsed from `&str`; structured replies from [`Reply`], a small
//! client-independent mirror of a RESP value (so fixtures can be stored as JSON and the
//! parsers tested without a server or a client library).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::topology::slots::{SlotRange, parse_range};

pub use crate::topology::{NodeId, OpenSlot};

/// A parse failure: what was being parsed and what did not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what}: {detail}")]
pub struct ParseError {
    pub what: &'static str,
    pub detail: String,
}

fn perr(what: &'static str, detail: impl Into<String>) -> ParseError {
    ParseError {
        what,
        detail: detail.into(),
    }
}

/// A RESP value, independent of the client library. RESP2 maps arrive as flat arrays of
/// alternating keys and values; [`Reply::as_pairs`] accepts both shapes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Nil,
    Int(i64),
    Double(f64),
    Bool(bool),
    Text(String),
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// The value as text (integers and doubles are rendered).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Text(s) => Some(s.clone()),
            Reply::Int(i) => Some(i.to_string()),
            Reply::Double(d) => Some(d.to_string()),
            Reply::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Text(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Key/value pairs of a RESP3 map or of a RESP2 flat array `[k1, v1, k2, v2, ...]`.
    pub fn as_pairs(&self) -> Option<Vec<(String, &Reply)>> {
        match self {
            Reply::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| k.as_text().map(|k| (k, v)))
                .collect(),
            Reply::Array(items) if items.len() % 2 == 0 => items
                .chunks(2)
                .map(|kv| kv[0].as_text().map(|k| (k, &kv[1])))
                .collect(),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// CLUSTER NODES
// ---------------------------------------------------------------------------------------

/// Flags of a node line in `CLUSTER NODES`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFlags {
    pub myself: bool,
    /// `master` in Valkey's output.
    pub primary: bool,
    /// `slave` in Valkey's output.
    pub replica: bool,
    pub pfail: bool,
    pub fail: bool,
    pub handshake: bool,
    pub noaddr: bool,
    pub nofailover: bool,
    /// Flags this parser does not know (kept, not dropped).
    pub other: Vec<String>,
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: NodeId,
    /// Announced IP (empty for `noaddr` nodes).
    pub ip: String,
    pub port: u16,
    pub bus_port: u16,
    pub hostname: Option<String>,
    pub flags: NodeFlags,
    /// The primary this node replicates from (`-` means none).
    pub primary_id: Option<NodeId>,
    pub ping_sent: u64,
    pub pong_received: u64,
    pub config_epoch: u64,
    /// `connected` vs `disconnected` cluster bus link.
    pub link_connected: bool,
    /// Slots this node serves (as seen by the reporting node).
    pub slots: Vec<SlotRange>,
    /// `[slot->-target]`: slots this node is exporting (only on its own line).
    pub migrating: Vec<OpenSlot>,
    /// `[slot-<-source]`: slots this node is importing (only on its own line).
    pub importing: Vec<OpenSlot>,
}

impl ClusterNode {
    /// `ip:port` of the member, the way the driver addresses it.
    pub fn address(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// True if the reporting node currently considers this node failing or unreachable.
    pub fn is_failing(&self) -> bool {
        self.flags.fail || self.flags.pfail
    }
}

/// Parses the whole `CLUSTER NODES` reply.
pub fn parse_cluster_nodes(text: &str) -> Result<Vec<ClusterNode>, ParseError> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(parse_cluster_node_line)
        .collect()
}

const NODE_LINE: &str = "CLUSTER NODES line";

/// `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping-sent> <pong-recv> <config-epoch>
/// <link-state> <slot> <slot> ...`
fn parse_cluster_node_line(line: &str) -> Result<ClusterNode, ParseError> {
    const WHAT: &str = NODE_LINE;
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(perr(
            WHAT,
            format!("expected at least 8 fields in {line:?}"),
        ));
    }
    let id = NodeId(fields[0].to_owned());
    let (ip, port, bus_port, hostname) = parse_node_address(fields[1])
        .ok_or_else(|| perr(WHAT, format!("bad address {:?} in {line:?}", fields[1])))?;
    let flags = parse_node_flags(fields[2]);
    let primary_id = match fields[3] {
        "-" => None,
        id => Some(NodeId(id.to_owned())),
    };
    let num = |i: usize, name: &str| {
        fields[i]
            .parse::<u64>()
            .map_err(|_| perr(WHAT, format!("bad {name} {:?} in {line:?}", fields[i])))
    };
    let ping_sent = num(4, "ping-sent")?;
    let pong_received = num(5, "pong-recv")?;
    let config_epoch = num(6, "config-epoch")?;
    let link_connected = match fields[7] {
        "connected" => true,
        "disconnected" => false,
        other => return Err(perr(WHAT, format!("bad link state {other:?} in {line:?}"))),
    };
    let slots = parse_slot_fields(&fields[8..])?;
    Ok(ClusterNode {
        id,
        ip,
        port,
        bus_port,
        hostname,
        flags,
        primary_id,
        ping_sent,
        pong_received,
        config_epoch,
        link_connected,
        slots: slots.owned,
        migrating: slots.migrating,
        importing: slots.importing,
    })
}

/// The comma-separated flags field; flags this version does not know are kept as text.
fn parse_node_flags(field: &str) -> NodeFlags {
    let mut flags = NodeFlags::default();
    for flag in field.split(',') {
        match flag {
            "myself" => flags.myself = true,
            "master" => flags.primary = true,
            "slave" => flags.replica = true,
            "fail?" => flags.pfail = true,
            "fail" => flags.fail = true,
            "handshake" => flags.handshake = true,
            "noaddr" => flags.noaddr = true,
            "nofailover" => flags.nofailover = true,
            "noflags" | "" => {}
            other => flags.other.push(other.to_owned()),
        }
    }
    flags
}

/// The slot fields of a `CLUSTER NODES` line: ranges served, and the slots open for a move.
#[derive(Default)]
struct SlotFields {
    owned: Vec<SlotRange>,
    migrating: Vec<OpenSlot>,
    importing: Vec<OpenSlot>,
}

/// `0-5460`, `5461`, `[42->-<target id>]` (migrating), `[42-<-<source id>]` (importing).
fn parse_slot_fields(tokens: &[&str]) -> Result<SlotFields, ParseError> {
    const WHAT: &str = NODE_LINE;
    let mut fields = SlotFields::default();
    for token in tokens {
        let Some(inner) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
            fields.owned.push(
                parse_range(token)
                    .ok_or_else(|| perr(WHAT, format!("bad slot range {token:?}")))?,
            );
            continue;
        };
        if let Some((slot, peer)) = inner.split_once("->-") {
            fields.migrating.push(OpenSlot {
                slot: slot
                    .parse()
                    .map_err(|_| perr(WHAT, format!("bad migrating slot {token:?}")))?,
                peer: NodeId(peer.to_owned()),
            });
        } else if let Some((slot, peer)) = inner.split_once("-<-") {
            fields.importing.push(OpenSlot {
                slot: slot
                    .parse()
                    .map_err(|_| perr(WHAT, format!("bad importing slot {token:?}")))?,
                peer: NodeId(peer.to_owned()),
            });
        } else {
            return Err(perr(WHAT, format!("bad open-slot marker {token:?}")));
        }
    }
    Ok(fields)
}

/// `ip:port@cport[,hostname[,aux...]]`; the ip may be empty (`:0@0`) or IPv6.
fn parse_node_address(text: &str) -> Option<(String, u16, u16, Option<String>)> {
    let mut parts = text.split(',');
    let addr = parts.next()?;
    let hostname = parts
        .next()
        .filter(|h| !h.is_empty() && !h.contains('='))
        .map(str::to_owned);
    let (host_port, bus) = addr.split_once('@')?;
    let (ip, port) = host_port.rsplit_once(':')?;
    Some((
        ip.to_owned(),
        port.parse().ok()?,
        bus.parse().ok()?,
        hostname,
    ))
}

// ---------------------------------------------------------------------------------------
// CLUSTER INFO and INFO sections (key:value text)
// ---------------------------------------------------------------------------------------

/// `key:value` lines of `CLUSTER INFO` or an `INFO` reply; `#` section headers skipped.
pub fn parse_kv_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn get_num<T: std::str::FromStr>(
    kv: &BTreeMap<String, String>,
    what: &'static str,
    key: &str,
) -> Result<T, ParseError> {
    let raw = kv
        .get(key)
        .ok_or_else(|| perr(what, format!("missing field {key}")))?;
    raw.parse()
        .map_err(|_| perr(what, format!("field {key} is not a number: {raw:?}")))
}

/// The parts of `CLUSTER INFO` the operator acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// `cluster_state:ok`.
    pub state_ok: bool,
    pub slots_assigned: u32,
    pub slots_ok: u32,
    pub slots_pfail: u32,
    pub slots_fail: u32,
    pub known_nodes: u32,
    /// Number of primaries serving at least one slot.
    pub size: u32,
    pub current_epoch: u64,
    pub my_epoch: u64,
}

pub fn parse_cluster_info(text: &str) -> Result<ClusterInfo, ParseError> {
    const WHAT: &str = "CLUSTER INFO";
    let kv = parse_kv_lines(text);
    let state = kv
        .get("cluster_state")
        .ok_or_else(|| perr(WHAT, "missing field cluster_state"))?;
    Ok(ClusterInfo {
        state_ok: state == "ok",
        slots_assigned: get_num(&kv, WHAT, "cluster_slots_assigned")?,
        slots_ok: get_num(&kv, WHAT, "cluster_slots_ok")?,
        slots_pfail: get_num(&kv, WHAT, "cluster_slots_pfail")?,
        slots_fail: get_num(&kv, WHAT, "cluster_slots_fail")?,
        known_nodes: get_num(&kv, WHAT, "cluster_known_nodes")?,
        size: get_num(&kv, WHAT, "cluster_size")?,
        current_epoch: get_num(&kv, WHAT, "cluster_current_epoch")?,
        my_epoch: get_num(&kv, WHAT, "cluster_my_epoch")?,
    })
}

/// Replication role as reported by `INFO replication` or `CLUSTER SHARDS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Replica,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        })
    }
}

/// What a replica reports about its link to the primary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrimaryLink {
    pub host: String,
    pub port: u16,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1` (full sync running).
    pub sync_in_progress: bool,
    /// `master_last_io_seconds_ago` (-1 when never).
    pub last_io_seconds_ago: i64,
    /// `slave_repl_offset`: how far this replica has processed the stream.
    pub replica_offset: i64,
}

/// A replica as its primary lists it (`slaveN:ip=..,port=..,state=..,offset=..,lag=..`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online`, `wait_bgsave`, `send_bulk`, ...
    pub state: String,
    pub offset: i64,
    pub lag: i64,
}

impl ConnectedReplica {
    pub fn is_online(&self) -> bool {
        self.state == "online"
    }
}

/// The parts of `INFO replication` the operator acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationInfo {
    pub role: Role,
    /// Present on replicas.
    pub primary_link: Option<PrimaryLink>,
    /// Replicas connected to this node (on a primary; chained replicas may have some too).
    pub connected_replicas: Vec<ConnectedReplica>,
    /// `master_repl_offset`: this node's position in its replication stream.
    pub repl_offset: i64,
    /// `master_failover_state` (`no-failover` when idle).
    pub failover_state: String,
}

pub fn parse_replication_info(text: &str) -> Result<ReplicationInfo, ParseError> {
    const WHAT: &str = "INFO replication";
    let kv = parse_kv_lines(text);
    let role = match kv.get("role").map(String::as_str) {
        Some("master") => Role::Primary,
        Some("slave") => Role::Replica,
        other => return Err(perr(WHAT, format!("unknown role {other:?}"))),
    };
    let primary_link = if role == Role::Replica {
        Some(PrimaryLink {
            host: kv
                .get("master_host")
                .cloned()
                .ok_or_else(|| perr(WHAT, "missing field master_host"))?,
            port: get_num(&kv, WHAT, "master_port")?,
            link_up: kv.get("master_link_status").map(String::as_str) == Some("up"),
            sync_in_progress: kv.get("master_sync_in_progress").map(String::as_str) == Some("1"),
            last_io_seconds_ago: get_num(&kv, WHAT, "master_last_io_seconds_ago").unwrap_or(-1),
            replica_offset: get_num(&kv, WHAT, "slave_repl_offset")?,
        })
    } else {
        None
    };
    let mut connected: Vec<(usize, ConnectedReplica)> = Vec::new();
    for (key, value) in &kv {
        let Some(index) = key
            .strip_prefix("slave")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let fields: BTreeMap<&str, &str> = value
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let field = |name: &str| {
            fields
                .get(name)
                .copied()
                .ok_or_else(|| perr(WHAT, format!("{key} lacks {name}: {value:?}")))
        };
        let number = |name: &str| -> Result<i64, ParseError> {
            field(name)?
                .parse()
                .map_err(|_| perr(WHAT, format!("{key} has a bad {name}: {value:?}")))
        };
        connected.push((
            index,
            ConnectedReplica {
                ip: field("ip")?.to_owned(),
                port: field("port")?
                    .parse()
                    .map_err(|_| perr(WHAT, format!("{key} has a bad port: {value:?}")))?,
                state: field("state")?.to_owned(),
                offset: number("offset")?,
                lag: number("lag")?,
            },
        ));
    }
    connected.sort_by_key(|(i, _)| *i);
    Ok(ReplicationInfo {
        role,
        primary_link,
        connected_replicas: connected.into_iter().map(|(_, r)| r).collect(),
        repl_offset: get_num(&kv, WHAT, "master_repl_offset")?,
        failover_state: kv
            .get("master_failover_state")
            .cloned()
            .unwrap_or_else(|| "no-failover".to_owned()),
    })
}

/// A `major.minor.patch` version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses `9.0.0` (a missing patch counts as 0; suffixes such as `-rc1` are ignored).
    pub fn parse(text: &str) -> Option<Version> {
        let core = text.trim().split(['-', '+', ' ']).next()?;
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        Some(Version::new(major, minor, patch))
    }

    /// Valkey 9.0 introduced atomic slot migration (`CLUSTER MIGRATESLOTS`).
    pub fn supports_atomic_slot_migration(&self) -> bool {
        self.major >= 9
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The parts of `INFO server persistence` the operator acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `valkey_version` (falls back to `redis_version` for servers that lack it).
    pub version: Version,
    pub run_id: String,
    pub tcp_port: u16,
    pub uptime_seconds: u64,
    /// `server_mode` (`cluster` when cluster mode is on; absent on old servers).
    pub cluster_mode: bool,
    /// Bytes of the append-only file (`aof_current_size`), when `appendonly` is on.
    #[serde(default)]
    pub aof_bytes: Option<u64>,
    /// What the member uses (`INFO memory`, `cpu`, `stats`): utilization samples.
    #[serde(default)]
    pub usage: Usage,
}

/// A member's resource use as `INFO memory cpu stats` reports it; absent fields read 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `used_memory`.
    pub used_memory: u64,
    /// `mem_not_counted_for_evict` (replication and AOF buffers): not held against maxmemory.
    pub not_counted_for_evict: u64,
    /// `maxmemory` (0: none).
    pub maxmemory: u64,
    /// `used_cpu_sys + used_cpu_user`, microseconds of CPU the process used so far.
    pub cpu_micros: u64,
    /// `total_net_input_bytes + total_net_output_bytes + total_net_repl_input_bytes +
    /// total_net_repl_output_bytes`.
    pub net_bytes: u64,
}

impl Usage {
    fn from_kv(kv: &BTreeMap<String, String>) -> Usage {
        let int = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let secs = |k: &str| kv.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        Usage {
            used_memory: int("used_memory"),
            not_counted_for_evict: int("mem_not_counted_for_evict"),
            maxmemory: int("maxmemory"),
            cpu_micros: ((secs("used_cpu_sys") + secs("used_cpu_user")) * 1e6).round() as u64,
            net_bytes: [
                "total_net_input_bytes",
                "total_net_output_bytes",
                "total_net_repl_input_bytes",
                "total_net_repl_output_bytes",
            ]
            .into_iter()
            .map(int)
            .sum(),
        }
    }

    /// The memory maxmemory is held against: `used_memory` less what Valkey does not count for
    /// eviction.
    pub fn counted_memory(&self) -> u64 {
        self.used_memory.saturating_sub(self.not_counted_for_evict)
    }
}

pub fn parse_server_info(text: &str) -> Result<ServerInfo, ParseError> {
    const WHAT: &str = "INFO server persistence memory cpu stats";
    let kv = parse_kv_lines(text);
    let raw = kv
        .get("valkey_version")
        .or_else(|| kv.get("redis_version"))
        .ok_or_else(|| perr(WHAT, "missing field valkey_version"))?;
    let version = Version::parse(raw).ok_or_else(|| perr(WHAT, format!("bad version {raw:?}")))?;
    Ok(ServerInfo {
        version,
        run_id: kv.get("run_id").cloned().unwrap_or_default(),
        tcp_port: get_num(&kv, WHAT, "tcp_port")?,
        uptime_seconds: get_num(&kv, WHAT, "uptime_in_seconds")?,
        cluster_mode: kv.get("server_mode").map(String::as_str) == Some("cluster"),
        aof_bytes: (kv.get("aof_enabled").map(String::as_str) == Some("1"))
            .then(|| kv.get("aof_current_size")?.parse().ok())
            .flatten(),
        usage: Usage::from_kv(&kv),
    })
}

// ---------------------------------------------------------------------------------------
// CLUSTER SHARDS
// ---------------------------------------------------------------------------------------

/// Health of a node as `CLUSTER SHARDS` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Online,
    Failed,
    Loading,
    Other(String),
}

/// A node inside a `CLUSTER SHARDS` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardNode {
    pub id: NodeId,
    pub ip: String,
    pub port: Option<u16>,
    pub tls_port: Option<u16>,
    pub endpoint: String,
    pub hostname: Option<String>,
    pub role: Role,
    pub replication_offset: i64,
    pub health: Health,
}

/// One shard of `CLUSTER SHARDS`: its slots and its nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub slots: Vec<SlotRange>,
    pub nodes: Vec<ShardNode>,
}

impl Shard {
    pub fn primary(&self) -> Option<&ShardNode> {
        self.nodes.iter().find(|n| n.role == Role::Primary)
    }
}

pub fn parse_cluster_shards(reply: &Reply) -> Result<Vec<Shard>, ParseError> {
    const WHAT: &str = "CLUSTER SHARDS";
    let shards = reply
        .as_array()
        .ok_or_else(|| perr(WHAT, format!("expected an array, got {reply:?}")))?;
    shards
        .iter()
        .map(|shard| {
            let pairs = shard
                .as_pairs()
                .ok_or_else(|| perr(WHAT, format!("expected a map per shard, got {shard:?}")))?;
            let mut slots = Vec::new();
            let mut nodes = Vec::new();
            for (key, value) in pairs {
                match key.as_str() {
                    "slots" => {
                        let bounds = value
                            .as_array()
                            .ok_or_else(|| perr(WHAT, "slots is not an array"))?;
                        if bounds.len() % 2 != 0 {
                            return Err(perr(WHAT, "slots has an odd number of bounds"));
                        }
                        for pair in bounds.chunks(2) {
                            let (a, b) = (pair[0].as_int(), pair[1].as_int());
                            match (a, b) {
                                (Some(a), Some(b)) if 0 <= a && a <= b && b <= 16383 => {
                                    slots.push(a as u16..=b as u16)
                                }
                                _ => return Err(perr(WHAT, format!("bad slot bounds {pair:?}"))),
                            }
                        }
                    }
                    "nodes" => {
                        for node in value
                            .as_array()
                            .ok_or_else(|| perr(WHAT, "nodes is not an array"))?
                        {
                            nodes.push(parse_shard_node(node)?);
                        }
                    }
                    _ => {}
                }
            }
            Ok(Shard { slots, nodes })
        })
        .collect()
}

fn parse_shard_node(node: &Reply) -> Result<ShardNode, ParseError> {
    const WHAT: &str = "CLUSTER SHARDS node";
    let pairs = node
        .as_pairs()
        .ok_or_else(|| perr(WHAT, format!("expected a map, got {node:?}")))?;
    let fields: BTreeMap<String, &Reply> = pairs.into_iter().collect();
    let text = |k: &str| fields.get(k).and_then(|v| v.as_text());
    let port = |k: &str| {
        fields
            .get(k)
            .and_then(|v| v.as_int())
            .and_then(|p| u16::try_from(p).ok())
    };
    let role = match text("role").as_deref() {
        Some("master") | Some("primary") => Role::Primary,
        Some("replica") | Some("slave") => Role::Replica,
        other => return Err(perr(WHAT, format!("unknown role {other:?}"))),
    };
    let health = match text("health").as_deref() {
        Some("online") => Health::Online,
        Some("failed") => Health::Failed,
        Some("loading") => Health::Loading,
        other => Health::Other(other.unwrap_or_default().to_owned()),
    };
    Ok(ShardNode {
        id: NodeId(text("id").ok_or_else(|| perr(WHAT, "missing id"))?),
        ip: text("ip").unwrap_or_default(),
        port: port("port"),
        tls_port: port("tls-port"),
        endpoint: text("endpoint").unwrap_or_default(),
        hostname: text("hostname").filter(|h| !h.is_empty()),
        role,
        replication_offset: fields
            .get("replication-offset")
            .and_then(|v| v.as_int())
            .unwrap_or(0),
        health,
    })
}

// ---------------------------------------------------------------------------------------
// CLUSTER GETSLOTMIGRATIONS (Valkey 9 atomic slot migration)
// ---------------------------------------------------------------------------------------

/// Direction of a slot migration job, seen from the reporting node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationOperation {
    Import,
    Export,
}

/// State of a slot migration job. Valkey reports many intermediate states
/// (`connecting`, `snapshotting`, `replicating`, `failover-granted`, ...) and three
/// terminal ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationState {
    Success,
    Failed,
    Cancelled,
    InProgress(String),
}

impl MigrationState {
    pub fn is_finished(&self) -> bool {
        !matches!(self, MigrationState::InProgress(_))
    }
}

/// One job of `CLUSTER GETSLOTMIGRATIONS`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMigration {
    pub name: String,
    pub operation: MigrationOperation,
    pub slot_ranges: Vec<SlotRange>,
    /// Empty when listed by a replica (it only knows the jobs it replicated).
    pub source_node: NodeId,
    /// Empty when listed by a replica.
    pub target_node: NodeId,
    pub state: MigrationState,
    /// Valkey's explanation (set when a job failed or was cancelled).
    pub message: String,
    pub create_time: i64,
    pub last_update_time: i64,
    /// Last acknowledgement from the peer (advances while data streams).
    pub last_ack_time: i64,
}

pub fn parse_slot_migrations(reply: &Reply) -> Result<Vec<SlotMigration>, ParseError> {
    const WHAT: &str = "CLUSTER GETSLOTMIGRATIONS";
    let jobs = reply
        .as_array()
        .ok_or_else(|| perr(WHAT, format!("expected an array, got {reply:?}")))?;
    jobs.iter()
        .map(|job| {
            let pairs = job
                .as_pairs()
                .ok_or_else(|| perr(WHAT, format!("expected a map per job, got {job:?}")))?;
            let fields: BTreeMap<String, &Reply> = pairs.into_iter().collect();
            let text = |k: &str| fields.get(k).and_then(|v| v.as_text());
            let required = |k: &str| text(k).ok_or_else(|| perr(WHAT, format!("missing {k}")));
            let operation = match required("operation")?.to_ascii_uppercase().as_str() {
                "IMPORT" => MigrationOperation::Import,
                "EXPORT" => MigrationOperation::Export,
                other => return Err(perr(WHAT, format!("unknown operation {other:?}"))),
            };
            let slot_ranges = required("slot_ranges")?
                .split([' ', ','])
                .filter(|s| !s.is_empty())
                .map(|r| parse_range(r).ok_or_else(|| perr(WHAT, format!("bad slot range {r:?}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let state = match required("state")?.as_str() {
                "success" => MigrationState::Success,
                "failed" => MigrationState::Failed,
                "cancelled" | "canceled" => MigrationState::Cancelled,
                other => MigrationState::InProgress(other.to_owned()),
            };
            let int = |k: &str| fields.get(k).and_then(|v| v.as_int()).unwrap_or(0);
            Ok(SlotMigration {
                name: required("name")?,
                operation,
                slot_ranges,
                // Replicas list the jobs they replicated without the peers.
                source_node: NodeId(text("source_node").unwrap_or_default()),
                target_node: NodeId(text("target_node").unwrap_or_default()),
                state,
                message: text("message").unwrap_or_default(),
                create_time: int("create_time"),
                last_update_time: int("last_update_time"),
                last_ack_time: int("last_ack_time"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
