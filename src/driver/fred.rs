//! [`ClusterDriver`] on `fred`: one centralized (single-node) client per member, cached
//! and reused, rebuilt after connection trouble.
//!
//! Every command goes through fred's custom-command API. fred lacks several of the
//! commands we need (`CLUSTER ADDSLOTSRANGE`, `SHARDS`, `MIGRATESLOTS`,
//! `GETSLOTMIGRATIONS`, `CANCELSLOTMIGRATIONS`, `SETSLOT ... <node-id>`, `MEET` with a bus
//! port, `MIGRATE ... AUTH2`), and one path for all commands keeps timeouts, error
//! labelling and reply parsing uniform.
//!
//! A TLS cluster differs only by [`DriverConfig::tls`]: the same clients connect with rustls
//! (ring), trusting the CA bundle given and verifying each member's certificate against the
//! configured server name (members are reached by IP; see [`super::tls`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, Config, ConnectionConfig, PerformanceConfig, ServerConfig};
use fred::types::config::{Server, TlsConfig, TlsConnector, TlsHostMapping};
use fred::types::{ClusterHash, CustomCommand, Value};
use futures::future::BoxFuture;

use super::commands::{ClusterDriver, MigrateKeys, ResetMode, SetSlot, SlotMigrationRequest};
use super::config::DriverConfig;
use super::error::{DriverError, DriverErrorKind, DriverFuture, DriverResult};
use super::parse::{
    self, ClusterInfo, ClusterNode, ReplicationInfo, Reply, ServerInfo, Shard, SlotMigration,
};
use super::tls::{TlsClient, TlsSettingsError};
use crate::topology::slots::{SlotRange, format_range};
use crate::topology::{FailoverMode, MemberAddr, NodeId};

/// The fred-backed driver. Cheap to share behind an `Arc`.
pub struct FredDriver {
    config: DriverConfig,
    /// Built once from `config.tls`; Err (bad CA bundle) fails every connection with it.
    tls: Option<Result<TlsClient, TlsSettingsError>>,
    clients: Mutex<HashMap<MemberAddr, CachedClient>>,
}

/// A member's connection and when a command last took it. The `Arc` counts who holds it: the
/// cache alone (count 1) means no command is using it right now, so it may be closed.
struct CachedClient {
    client: Arc<fred::clients::Client>,
    last_taken: Instant,
}

impl FredDriver {
    pub fn new(config: DriverConfig) -> Self {
        FredDriver {
            tls: config.tls.as_ref().map(TlsClient::new),
            config,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The TLS client side, `Ok(None)` for plaintext, Err when the settings are unusable.
    fn tls_client(&self) -> Result<Option<&TlsClient>, fred::error::Error> {
        match &self.tls {
            None => Ok(None),
            Some(Ok(tls)) => Ok(Some(tls)),
            Some(Err(e)) => Err(fred::error::Error::new(
                fred::error::ErrorKind::Config,
                format!("TLS settings: {e}"),
            )),
        }
    }

    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Runs one command on one member and returns its reply.
    /// `args[0]` is the command name; `label` names the command in errors (no arguments).
    pub async fn command(
        &self,
        member: &MemberAddr,
        label: &str,
        args: Vec<Value>,
    ) -> DriverResult<Reply> {
        self.raw(member, label, args).await.map(to_reply)
    }

    /// Like [`FredDriver::command`], with fred's own reply type (binary safe). Timed and
    /// counted by the configured observer.
    pub async fn raw(
        &self,
        member: &MemberAddr,
        label: &str,
        args: Vec<Value>,
    ) -> DriverResult<Value> {
        let started = std::time::Instant::now();
        let result = self.run(member, label, args).await;
        if let Some(observer) = &self.config.observer {
            observer.observe_command(label, started.elapsed(), result.is_ok());
        }
        result
    }

    async fn run(&self, member: &MemberAddr, label: &str, args: Vec<Value>) -> DriverResult<Value> {
        let err = |kind| DriverError {
            member: member.clone(),
            command: label.to_owned(),
            kind,
        };
        let timeout = self.config.command_timeout;
        let client = match tokio::time::timeout(timeout, self.client(member)).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(err(classify(&e, true, timeout))),
            Err(_) => return Err(err(DriverErrorKind::Timeout(timeout))),
        };
        let mut args = args.into_iter();
        let name = args.next().and_then(|v| v.as_string()).unwrap_or_default();
        let cmd = CustomCommand::new(name, ClusterHash::Random, false);
        let outcome =
            tokio::time::timeout(timeout, client.custom::<Value, Value>(cmd, args.collect())).await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let kind = classify(&e, false, timeout);
                if !matches!(kind, DriverErrorKind::Server(_)) {
                    self.evict(member, &client).await;
                }
                Err(err(kind))
            }
            Err(_) => {
                // A late reply would be paired with the wrong request: drop the connection.
                self.evict(member, &client).await;
                Err(err(DriverErrorKind::Timeout(timeout)))
            }
        }
    }

    /// A connected client for the member, from the cache or freshly built.
    async fn client(
        &self,
        member: &MemberAddr,
    ) -> Result<Arc<fred::clients::Client>, fred::error::Error> {
        if let Some(c) = self.cached(member) {
            if c.is_connected() {
                return Ok(c);
            }
            self.evict(member, &c).await;
        }
        let tls = self.tls_client()?;
        let server = Server::new_with_tls(
            member.host.clone(),
            member.port,
            tls.map(|t| t.name_for(member).to_string()),
        );
        let config = Config {
            fail_fast: true,
            username: Some(self.config.credentials.username.clone()),
            password: Some(self.config.credentials.password.clone()),
            server: ServerConfig::Centralized { server },
            tls: tls.map(|t| TlsConfig {
                connector: TlsConnector::from((*t.config).clone()),
                hostnames: TlsHostMapping::None,
            }),
            ..Config::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: self.config.connect_timeout,
            internal_command_timeout: self.config.connect_timeout,
            // Never resend an admin command (FAILOVER, MIGRATE...) after a broken connection.
            max_command_attempts: 1,
            ..ConnectionConfig::default()
        };
        let performance = PerformanceConfig {
            default_command_timeout: self.config.command_timeout,
            ..PerformanceConfig::default()
        };
        let client = fred::clients::Client::new(config, Some(performance), Some(connection), None);
        let _background = client.init().await?;
        let mut cache = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        match cache.get_mut(member) {
            // Someone connected concurrently: keep theirs, close ours.
            Some(existing) if existing.client.is_connected() => {
                existing.last_taken = Instant::now();
                let existing = existing.client.clone();
                drop(cache);
                let ours = client;
                tokio::spawn(async move {
                    let _ = ours.quit().await;
                });
                Ok(existing)
            }
            _ => {
                let client = Arc::new(client);
                cache.insert(
                    member.clone(),
                    CachedClient {
                        client: client.clone(),
                        last_taken: Instant::now(),
                    },
                );
                Ok(client)
            }
        }
    }

    fn cached(&self, member: &MemberAddr) -> Option<Arc<fred::clients::Client>> {
        let mut cache = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let entry = cache.get_mut(member)?;
        entry.last_taken = Instant::now();
        Some(entry.client.clone())
    }

    /// Closes the connections no command has taken for `idle_for` and none is using now; the
    /// next command to a member connects again. A settled cluster is looked at every 30 s:
    /// 200 of them holding a connection per member between looks cost the operator ~13 MiB
    /// of buffers for nothing. Returns how many were closed.
    pub async fn close_idle(&self, idle_for: Duration) -> usize {
        let idle: Vec<Arc<fred::clients::Client>> = {
            let mut cache = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let unused = |c: &CachedClient| {
                Arc::strong_count(&c.client) == 1 && now.duration_since(c.last_taken) >= idle_for
            };
            let closing: Vec<MemberAddr> = cache
                .iter()
                .filter(|(_, c)| unused(c))
                .map(|(m, _)| m.clone())
                .collect();
            // Removed under the lock: nobody can take them from here on.
            closing
                .iter()
                .filter_map(|m| cache.remove(m))
                .map(|c| c.client)
                .collect()
        };
        let closed = idle.len();
        for client in idle {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        }
        closed
    }

    /// Drops `failed` from the cache if it is still the cached client. Only the client that
    /// failed is closed: concurrent callers may already use a fresh one, which must survive.
    async fn evict(&self, member: &MemberAddr, failed: &fred::clients::Client) {
        {
            let mut cache = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            if cache
                .get(member)
                .is_some_and(|c| c.client.id() == failed.id())
            {
                cache.remove(member);
            }
        }
        // QUIT on a dead link can hang: bound it.
        let _ = tokio::time::timeout(Duration::from_secs(1), failed.quit()).await;
    }

    async fn text(
        &self,
        member: &MemberAddr,
        label: &str,
        args: Vec<Value>,
    ) -> DriverResult<String> {
        let reply = self.command(member, label, args).await?;
        reply.as_text().ok_or_else(|| DriverError {
            member: member.clone(),
            command: label.to_owned(),
            kind: DriverErrorKind::Parse(format!("expected text, got {reply:?}")),
        })
    }

    async fn ok(&self, member: &MemberAddr, label: &str, args: Vec<Value>) -> DriverResult<()> {
        self.command(member, label, args).await.map(|_| ())
    }

    fn parsed<T>(
        member: &MemberAddr,
        label: &str,
        parsed: Result<T, parse::ParseError>,
    ) -> DriverResult<T> {
        parsed.map_err(|e| DriverError {
            member: member.clone(),
            command: label.to_owned(),
            kind: DriverErrorKind::Parse(e.to_string()),
        })
    }
}

fn classify(e: &fred::error::Error, connecting: bool, timeout: Duration) -> DriverErrorKind {
    use fred::error::ErrorKind as K;
    let detail = e.details().to_owned();
    match e.kind() {
        K::Timeout => DriverErrorKind::Timeout(timeout),
        K::Config => DriverErrorKind::Config(detail),
        _ if connecting => DriverErrorKind::Connect(format!("{:?}: {detail}", e.kind())),
        K::IO | K::Canceled => DriverErrorKind::Io(detail),
        _ => DriverErrorKind::Server(detail),
    }
}

/// Converts fred's reply into the client-independent [`Reply`].
pub fn to_reply(value: Value) -> Reply {
    match value {
        Value::Null => Reply::Nil,
        Value::Integer(i) => Reply::Int(i),
        Value::Double(d) => Reply::Double(d),
        Value::Boolean(b) => Reply::Bool(b),
        Value::String(s) => Reply::Text(s.to_string()),
        Value::Bytes(b) => Reply::Text(String::from_utf8_lossy(&b).into_owned()),
        Value::Queued => Reply::Text("QUEUED".to_owned()),
        Value::Array(items) => Reply::Array(items.into_iter().map(to_reply).collect()),
        Value::Map(map) => Reply::Map(
            map.inner()
                .into_iter()
                .map(|(k, v)| (Reply::Text(k.as_str_lossy().into_owned()), to_reply(v)))
                .collect(),
        ),
    }
}

fn s(text: impl Into<String>) -> Value {
    Value::String(text.into().into())
}

fn n(number: impl Into<i64>) -> Value {
    Value::Integer(number.into())
}

fn range_args(ranges: &[SlotRange]) -> Vec<Value> {
    ranges
        .iter()
        .flat_map(|r| [n(*r.start()), n(*r.end())])
        .collect()
}

impl ClusterDriver for FredDriver {
    fn ping<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        Box::pin(self.ok(member, "PING", vec![s("PING")]))
    }

    fn my_id<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, NodeId> {
        Box::pin(async move {
            let id = self
                .text(member, "CLUSTER MYID", vec![s("CLUSTER"), s("MYID")])
                .await?;
            Ok(NodeId(id.trim().to_owned()))
        })
    }

    fn cluster_nodes<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<ClusterNode>> {
        Box::pin(async move {
            const L: &str = "CLUSTER NODES";
            let text = self.text(member, L, vec![s("CLUSTER"), s("NODES")]).await?;
            Self::parsed(member, L, parse::parse_cluster_nodes(&text))
        })
    }

    fn cluster_shards<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<Shard>> {
        Box::pin(async move {
            const L: &str = "CLUSTER SHARDS";
            let reply = self
                .command(member, L, vec![s("CLUSTER"), s("SHARDS")])
                .await?;
            Self::parsed(member, L, parse::parse_cluster_shards(&reply))
        })
    }

    fn cluster_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ClusterInfo> {
        Box::pin(async move {
            const L: &str = "CLUSTER INFO";
            let text = self.text(member, L, vec![s("CLUSTER"), s("INFO")]).await?;
            Self::parsed(member, L, parse::parse_cluster_info(&text))
        })
    }

    fn replication_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ReplicationInfo> {
        Box::pin(async move {
            const L: &str = "INFO replication";
            let text = self
                .text(member, L, vec![s("INFO"), s("replication")])
                .await?;
            Self::parsed(member, L, parse::parse_replication_info(&text))
        })
    }

    fn server_info<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ServerInfo> {
        Box::pin(async move {
            const L: &str = "INFO server persistence memory cpu stats";
            let text = self
                .text(
                    member,
                    L,
                    vec![
                        s("INFO"),
                        s("server"),
                        s("persistence"),
                        s("memory"),
                        s("cpu"),
                        s("stats"),
                    ],
                )
                .await?;
            Self::parsed(member, L, parse::parse_server_info(&text))
        })
    }

    fn count_keys_in_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
    ) -> DriverFuture<'a, u64> {
        Box::pin(async move {
            const L: &str = "CLUSTER COUNTKEYSINSLOT";
            let reply = self
                .command(member, L, vec![s("CLUSTER"), s("COUNTKEYSINSLOT"), n(slot)])
                .await?;
            let count = reply.as_int().and_then(|c| u64::try_from(c).ok());
            Self::parsed(
                member,
                L,
                count.ok_or_else(|| parse::ParseError {
                    what: L,
                    detail: format!("expected a count, got {reply:?}"),
                }),
            )
        })
    }

    fn keys_in_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        count: u32,
    ) -> DriverFuture<'a, Vec<Vec<u8>>> {
        Box::pin(async move {
            const L: &str = "CLUSTER GETKEYSINSLOT";
            let args = vec![s("CLUSTER"), s("GETKEYSINSLOT"), n(slot), n(count)];
            // Keys are binary: read them as bytes rather than through `Reply`.
            match self.raw(member, L, args).await? {
                Value::Array(items) => Ok(items
                    .into_iter()
                    .filter_map(|v| v.as_bytes().map(<[u8]>::to_vec))
                    .collect()),
                other => Err(DriverError {
                    member: member.clone(),
                    command: L.to_owned(),
                    kind: DriverErrorKind::Parse(format!(
                        "expected an array of keys, got {other:?}"
                    )),
                }),
            }
        })
    }

    fn slot_migrations<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Vec<SlotMigration>> {
        Box::pin(async move {
            const L: &str = "CLUSTER GETSLOTMIGRATIONS";
            let reply = self
                .command(member, L, vec![s("CLUSTER"), s("GETSLOTMIGRATIONS")])
                .await?;
            Self::parsed(member, L, parse::parse_slot_migrations(&reply))
        })
    }

    fn config_get<'a>(
        &'a self,
        member: &'a MemberAddr,
        pattern: &'a str,
    ) -> DriverFuture<'a, Vec<(String, String)>> {
        Box::pin(async move {
            const L: &str = "CONFIG GET";
            let reply = self
                .command(member, L, vec![s("CONFIG"), s("GET"), s(pattern)])
                .await?;
            let pairs = reply.as_pairs().map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, v.as_text().unwrap_or_default()))
                    .collect::<Vec<_>>()
            });
            Self::parsed(
                member,
                L,
                pairs.ok_or_else(|| parse::ParseError {
                    what: L,
                    detail: format!("expected name/value pairs, got {reply:?}"),
                }),
            )
        })
    }

    fn meet<'a>(
        &'a self,
        member: &'a MemberAddr,
        ip: &'a str,
        port: u16,
        bus_port: Option<u16>,
    ) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CLUSTER"), s("MEET"), s(ip), n(port)];
        args.extend(bus_port.map(n));
        Box::pin(self.ok(member, "CLUSTER MEET", args))
    }

    fn add_slots_range<'a>(
        &'a self,
        member: &'a MemberAddr,
        ranges: &'a [SlotRange],
    ) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CLUSTER"), s("ADDSLOTSRANGE")];
        args.extend(range_args(ranges));
        Box::pin(self.ok(member, "CLUSTER ADDSLOTSRANGE", args))
    }

    fn replicate<'a>(
        &'a self,
        member: &'a MemberAddr,
        primary: &'a NodeId,
    ) -> DriverFuture<'a, ()> {
        let args = vec![s("CLUSTER"), s("REPLICATE"), s(primary.as_str())];
        Box::pin(self.ok(member, "CLUSTER REPLICATE", args))
    }

    fn failover<'a>(&'a self, member: &'a MemberAddr, mode: FailoverMode) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CLUSTER"), s("FAILOVER")];
        match mode {
            FailoverMode::Default => {}
            FailoverMode::Force => args.push(s("FORCE")),
            FailoverMode::Takeover => args.push(s("TAKEOVER")),
        }
        Box::pin(self.ok(member, "CLUSTER FAILOVER", args))
    }

    fn set_config_epoch<'a>(&'a self, member: &'a MemberAddr, epoch: u64) -> DriverFuture<'a, ()> {
        let args = vec![s("CLUSTER"), s("SET-CONFIG-EPOCH"), s(epoch.to_string())];
        Box::pin(self.ok(member, "CLUSTER SET-CONFIG-EPOCH", args))
    }

    fn forget<'a>(&'a self, member: &'a MemberAddr, node: &'a NodeId) -> DriverFuture<'a, ()> {
        let args = vec![s("CLUSTER"), s("FORGET"), s(node.as_str())];
        Box::pin(self.ok(member, "CLUSTER FORGET", args))
    }

    fn reset<'a>(&'a self, member: &'a MemberAddr, mode: ResetMode) -> DriverFuture<'a, ()> {
        let flag = match mode {
            ResetMode::Soft => "SOFT",
            ResetMode::Hard => "HARD",
        };
        Box::pin(self.ok(
            member,
            "CLUSTER RESET",
            vec![s("CLUSTER"), s("RESET"), s(flag)],
        ))
    }

    fn set_slot<'a>(
        &'a self,
        member: &'a MemberAddr,
        slot: u16,
        action: &'a SetSlot,
    ) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CLUSTER"), s("SETSLOT"), n(slot)];
        match action {
            SetSlot::Importing(id) => args.extend([s("IMPORTING"), s(id.as_str())]),
            SetSlot::Migrating(id) => args.extend([s("MIGRATING"), s(id.as_str())]),
            SetSlot::Node(id) => args.extend([s("NODE"), s(id.as_str())]),
            SetSlot::Stable => args.push(s("STABLE")),
        }
        Box::pin(self.ok(member, "CLUSTER SETSLOT", args))
    }

    fn migrate_keys<'a>(
        &'a self,
        member: &'a MemberAddr,
        request: &'a MigrateKeys,
    ) -> DriverFuture<'a, bool> {
        Box::pin(async move {
            if request.keys.is_empty() {
                return Ok(false);
            }
            let creds = &self.config.credentials;
            let mut args = vec![
                s("MIGRATE"),
                s(request.target.host.as_str()),
                n(request.target.port),
                s(""),
                n(0),
                n(i64::try_from(request.timeout.as_millis()).unwrap_or(i64::MAX)),
            ];
            if request.replace {
                args.push(s("REPLACE"));
            }
            args.extend([
                s("AUTH2"),
                s(creds.username.as_str()),
                s(creds.password.as_str()),
                s("KEYS"),
            ]);
            args.extend(request.keys.iter().map(|k| Value::Bytes(k.clone().into())));
            let reply = self.command(member, "MIGRATE", args).await?;
            Ok(reply.as_text().as_deref() != Some("NOKEY"))
        })
    }

    fn migrate_slots<'a>(
        &'a self,
        member: &'a MemberAddr,
        requests: &'a [SlotMigrationRequest],
    ) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CLUSTER"), s("MIGRATESLOTS")];
        for request in requests {
            args.push(s("SLOTSRANGE"));
            args.extend(range_args(&request.ranges));
            args.extend([s("NODE"), s(request.target.as_str())]);
        }
        let label = "CLUSTER MIGRATESLOTS";
        Box::pin(async move {
            if requests.is_empty() || requests.iter().any(|r| r.ranges.is_empty()) {
                return Err(DriverError {
                    member: member.clone(),
                    command: label.to_owned(),
                    kind: DriverErrorKind::Config(
                        "every migration group needs at least one slot range".to_owned(),
                    ),
                });
            }
            self.ok(member, label, args).await
        })
    }

    fn cancel_slot_migrations<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, bool> {
        Box::pin(async move {
            let args = vec![s("CLUSTER"), s("CANCELSLOTMIGRATIONS")];
            match self.ok(member, "CLUSTER CANCELSLOTMIGRATIONS", args).await {
                Ok(()) => Ok(true),
                // Valkey 9.0/9.1 answer an error when there is nothing to cancel.
                Err(e)
                    if e.server_message()
                        .is_some_and(|m| m.contains("No migrations ongoing")) =>
                {
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn acl_load<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        Box::pin(self.ok(member, "ACL LOAD", vec![s("ACL"), s("LOAD")]))
    }

    fn acl_users<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, Vec<String>> {
        Box::pin(async move {
            const L: &str = "ACL USERS";
            match self.command(member, L, vec![s("ACL"), s("USERS")]).await? {
                Reply::Array(items) => Ok(items.iter().filter_map(Reply::as_text).collect()),
                other => Err(DriverError {
                    member: member.clone(),
                    command: L.to_owned(),
                    kind: DriverErrorKind::Parse(format!(
                        "expected an array of names, got {other:?}"
                    )),
                }),
            }
        })
    }

    fn config_set<'a>(
        &'a self,
        member: &'a MemberAddr,
        settings: &'a [(String, String)],
    ) -> DriverFuture<'a, ()> {
        let mut args = vec![s("CONFIG"), s("SET")];
        for (k, v) in settings {
            args.extend([s(k.as_str()), s(v.as_str())]);
        }
        Box::pin(async move {
            if settings.is_empty() {
                return Ok(());
            }
            self.ok(member, "CONFIG SET", args).await
        })
    }

    fn config_rewrite<'a>(&'a self, member: &'a MemberAddr) -> DriverFuture<'a, ()> {
        Box::pin(self.ok(member, "CONFIG REWRITE", vec![s("CONFIG"), s("REWRITE")]))
    }

    fn disconnect<'a>(&'a self, member: &'a MemberAddr) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(client) = self.cached(member) {
                self.evict(member, &client).await;
            }
        })
    }

    fn served_certificate<'a>(
        &'a self,
        member: &'a MemberAddr,
    ) -> DriverFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            const L: &str = "TLS handshake";
            let err = |kind| DriverError {
                member: member.clone(),
                command: L.to_owned(),
                kind,
            };
            let tls = match self.tls_client() {
                Ok(Some(tls)) => tls,
                Ok(None) => return Ok(None),
                Err(e) => return Err(err(DriverErrorKind::Config(e.details().to_owned()))),
            };
            let started = std::time::Instant::now();
            let result = tls
                .served_certificate(member, self.config.connect_timeout)
                .await;
            if let Some(observer) = &self.config.observer {
                observer.observe_command(L, started.elapsed(), result.is_ok());
            }
            result
                .map(Some)
                .map_err(|e| err(DriverErrorKind::Connect(e)))
        })
    }
}

/// Renders ranges the way Valkey prints them, for messages (`0-99 200`).
pub fn describe_ranges(ranges: &[SlotRange]) -> String {
    ranges
        .iter()
        .map(format_range)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Every command this file sends, as Valkey's ACL names it (`cluster|nodes`, `info`): the
    /// first one or two `s(..)` string literals of each argument vector built here.
    fn commands_sent() -> BTreeSet<String> {
        const CONTAINERS: &[&str] = &["CLUSTER", "CONFIG", "ACL"];
        let source = include_str!("fred.rs");
        let literal = |text: &str| -> Option<String> {
            let rest = text.trim_start().strip_prefix("s(\"")?;
            Some(rest[..rest.find('"')?].to_string())
        };
        let mut sent = BTreeSet::new();
        for (i, _) in source.match_indices("vec![") {
            let after = &source[i + 5..];
            let Some(name) = literal(after) else { continue };
            let name_end = after.find(')').map_or(after.len(), |e| e + 1);
            let next = after[name_end..].trim_start().strip_prefix(',');
            match next.and_then(literal) {
                Some(sub) if CONTAINERS.contains(&name.as_str()) => {
                    sent.insert(format!("{name}|{sub}").to_lowercase())
                }
                _ => sent.insert(name.to_lowercase()),
            };
        }
        sent
    }

    #[test]
    fn the_operator_acl_user_has_exactly_the_commands_the_driver_sends() {
        let sent = commands_sent();
        assert!(
            sent.contains("cluster|migrateslots") && sent.contains("migrate"),
            "{sent:?}"
        );
        // Sent by the client library (AUTH and CLIENT ID on connecting) and by a member on the operator's
        // behalf: MIGRATE ... AUTH2 logs in to the target as the operator's user, which then
        // runs SELECT and RESTORE-ASKING.
        let mut needed = sent.clone();
        needed.extend(["auth", "client|id", "select", "restore-asking"].map(String::from));
        let granted: BTreeSet<String> = crate::resolve::acl::OPERATOR_COMMANDS
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            granted, needed,
            "resolve/acl.rs OPERATOR_COMMANDS must list exactly what driver/fred.rs sends"
        );
    }
}
