//! Test and benchmark support: real `valkey-server` processes on 127.0.0.1 and a
//! driver-only cluster formation. Used by `tests/driver_*.rs`, `tests/acl_*.rs`, vk-bench and
//! the `driver-formation-floor` binary; behind the `testing` feature, so not compiled into the
//! operator.
//!
//! Binaries come from `VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1` / `VALKEY_SERVER_9_1_TLS`,
//! falling back to the cache that `e2e/tools/install.sh` fills
//! (`~/.cache/valkey-operator/valkey-<v>/bin`; the TLS-capable build in `valkey-9.1.2-tls`).
//! Servers started with [`TlsMaterial`] are TLS-only, as the operator renders TLS members.

use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{ClusterDriver, Credentials, DriverError, MemberAddr, NodeId, Role, even_ranges};

/// Why test servers could not be started or a cluster formed from them; each message says
/// what to look at (a missing binary says how to install one, a failed start shows the log).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{var} points at {}, which is not a file", path.display())]
    NotAFile { var: &'static str, path: PathBuf },
    #[error(
        "valkey-server for {build:?} not found at {} and {var} is unset; run `bash e2e/tools/install.sh` (or set {var} to a valkey-server binary)",
        path.display()
    )]
    NotInstalled {
        build: ValkeyBuild,
        path: PathBuf,
        var: &'static str,
    },
    #[error("no free port pair in 21000..22700")]
    NoFreePort,
    /// A file or process operation; `what` says which (`create /tmp/...`, `start ...`).
    #[error("cannot {what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("valkey-server on port {port} exited at startup:\n{log}")]
    ExitedAtStartup { port: u16, log: String },
    #[error("valkey-server on port {port} did not accept connections within 30s:\n{log}")]
    NotAccepting { port: u16, log: String },
    #[error("timed out after {timeout:?} waiting for {what}: {state}")]
    TimedOut {
        what: String,
        timeout: Duration,
        state: String,
    },
    #[error("cannot form {shards} shards from {members} members")]
    Shape { shards: usize, members: usize },
    #[error("{0}")]
    Driver(#[from] DriverError),
    #[error("cannot connect a cluster client: {0}")]
    Client(String),
}

/// An I/O failure described by what was being done.
fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |error| HarnessError::Io { what, error }
}

/// The Valkey builds the project tests against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValkeyBuild {
    V9_0,
    V9_1,
    /// Valkey 9.1.2 built with TLS (`BUILD_TLS=yes`): the only build that can run
    /// [`LocalServers::start_tls`].
    V9_1Tls,
}

impl ValkeyBuild {
    /// The plaintext builds every driver test runs against.
    pub const ALL: [ValkeyBuild; 2] = [ValkeyBuild::V9_0, ValkeyBuild::V9_1];

    fn env_var(self) -> &'static str {
        match self {
            ValkeyBuild::V9_0 => "VALKEY_SERVER_9_0",
            ValkeyBuild::V9_1 => "VALKEY_SERVER_9_1",
            ValkeyBuild::V9_1Tls => "VALKEY_SERVER_9_1_TLS",
        }
    }

    /// The Valkey version of this build.
    pub fn version(self) -> &'static str {
        match self {
            ValkeyBuild::V9_0 => "9.0.0",
            ValkeyBuild::V9_1 | ValkeyBuild::V9_1Tls => "9.1.2",
        }
    }

    fn cache_dir(self) -> &'static str {
        match self {
            ValkeyBuild::V9_0 => "valkey-9.0.0",
            ValkeyBuild::V9_1 => "valkey-9.1.2",
            ValkeyBuild::V9_1Tls => "valkey-9.1.2-tls",
        }
    }

    /// Path of the `valkey-server` binary, or a message saying how to get one.
    pub fn binary(self) -> Result<PathBuf, HarnessError> {
        if let Some(path) = std::env::var_os(self.env_var()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(HarnessError::NotAFile {
                    var: self.env_var(),
                    path,
                })
            };
        }
        let cache = std::env::var_os("VALKEY_OPERATOR_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("valkey-operator"))
            })
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/valkey-operator"))
            })
            .unwrap_or_else(|| PathBuf::from("/nonexistent"));
        let path = cache.join(self.cache_dir()).join("bin/valkey-server");
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::NotInstalled {
                build: self,
                path,
                var: self.env_var(),
            })
        }
    }
}

/// The admin user the test servers are started with (operator-style ACL).
pub const ADMIN_USER: &str = "operator";

/// The `default` user line the test servers get unless told otherwise: disabled, with
/// only the permission Valkey 9.0.0's atomic slot migration needs (see
/// [`super::DEFAULT_USER_ACL`]).
pub const DEFAULT_USER_LINE: &str = super::DEFAULT_USER_ACL;

/// A `default` user with no permission at all. Enough for Valkey 9.1; Valkey 9.0.0's
/// atomic slot migration fails with it.
pub const STRICT_DEFAULT_USER_LINE: &str = "user default off resetkeys resetchannels -@all";

fn unique_token() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::digest(format!("{}-{nanos}-{seq}", std::process::id()));
    hex::encode(&digest[..12])
}

/// Client ports come from 21000..22700 so that client and bus ports (port + 10000) stay
/// below Linux's ephemeral range (32768+), where outgoing connections could take them.
const PORT_LOW: u32 = 21000;
const PORT_SPAN: u32 = 1700;

fn next_port_pair() -> Option<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Start each process at a different offset so parallel test binaries rarely collide.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() * 7919) % PORT_SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..PORT_SPAN {
        let port = PORT_LOW + NEXT.fetch_add(1, Ordering::SeqCst) % PORT_SPAN;
        let (port, bus) = (port as u16, (port + 10000) as u16);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(bus) {
            return Some(port);
        }
    }
    None
}

/// A certificate, its key and the CA bundle (PEM), as a `kubernetes.io/tls` Secret holds
/// them. TLS test servers read them from `tls.crt`, `tls.key` and `ca.crt` in their directory.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// One `valkey-server` child process with its own temporary directory.
/// Killed (and its directory removed) on drop, including during a panic.
pub struct ServerProcess {
    pub addr: MemberAddr,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    pub fn port(&self) -> u16 {
        self.addr.port
    }

    pub fn bus_port(&self) -> u16 {
        self.addr.port + 10000
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("valkey.log")
    }

    /// Last lines of the server log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path(), lines)
    }

    /// Kills the process now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The process id (stays the same across a certificate reload: no restart).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Replaces the TLS files in the server's directory, each by an atomic rename (as the
    /// kubelet swaps a Secret volume's content). The server keeps what it loaded until it
    /// reloads them.
    pub fn write_tls(&self, tls: &TlsMaterial) -> Result<(), HarnessError> {
        write_tls_files(&self.dir, tls)
    }
}

fn write_tls_files(dir: &Path, tls: &TlsMaterial) -> Result<(), HarnessError> {
    for (name, content) in [
        ("tls.crt", &tls.cert_pem),
        ("tls.key", &tls.key_pem),
        ("ca.crt", &tls.ca_pem),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).map_err(io(format!("write {}", tmp.display())))?;
        std::fs::rename(&tmp, dir.join(name)).map_err(io(format!("rename to {name}")))?;
    }
    Ok(())
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("VALKEY_TEST_KEEP_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A set of fresh, cluster-enabled `valkey-server`s that know nothing of each other.
pub struct LocalServers {
    pub build: ValkeyBuild,
    pub credentials: Credentials,
    pub servers: Vec<ServerProcess>,
    default_user_line: String,
    /// Set: TLS-only servers (`port 0`, TLS client port, bus and replication).
    tls: Option<TlsMaterial>,
    /// Lines appended to every server's valkey.conf.
    extra_conf: String,
    /// Set: the servers load the ACL file the operator renders (its users, with these
    /// passwords, and its `default` line) and replicate as `_valkey-replication`, as members do.
    /// The admin user is kept, for test data and inspection.
    operator_acl: Option<crate::resolve::acl::OperatorCredentials>,
}

impl LocalServers {
    /// Starts `count` servers and waits until each accepts connections.
    pub async fn start(build: ValkeyBuild, count: usize) -> Result<LocalServers, HarnessError> {
        Self::start_with_default_user(build, count, DEFAULT_USER_LINE).await
    }

    /// Like [`LocalServers::start`] with a chosen ACL line for the `default` user.
    pub async fn start_with_default_user(
        build: ValkeyBuild,
        count: usize,
        default_user_line: &str,
    ) -> Result<LocalServers, HarnessError> {
        let set = LocalServers::configured(build, default_user_line, None, "");
        set.launch(count).await
    }

    /// Like [`LocalServers::start`] with `extra` lines appended to each valkey.conf (settings
    /// a benchmark must share with the operator's members, such as replication delays).
    pub async fn start_with_conf(
        build: ValkeyBuild,
        count: usize,
        extra: &str,
    ) -> Result<LocalServers, HarnessError> {
        let set = LocalServers::configured(build, DEFAULT_USER_LINE, None, extra);
        set.launch(count).await
    }

    /// Starts `count` TLS-only servers of a TLS-capable `build` serving `tls`, configured as
    /// the operator configures TLS members (`port 0`, `tls-port`, `tls-cluster yes`,
    /// `tls-replication yes`, `tls-auth-clients no`), and waits until each accepts
    /// connections. `extra` lines are appended to each valkey.conf.
    pub async fn start_tls(
        build: ValkeyBuild,
        count: usize,
        tls: &TlsMaterial,
        extra: &str,
    ) -> Result<LocalServers, HarnessError> {
        let set = LocalServers::configured(build, DEFAULT_USER_LINE, Some(tls.clone()), extra);
        set.launch(count).await
    }

    /// Starts `count` servers of `build` configured like these ones (same admin credentials,
    /// ACL, TLS and extra lines), so that they can join these servers' cluster: a replica
    /// authenticates to its primary with the shared `masterauth`, which servers of another
    /// [`LocalServers`] (another password) could not. A rolling upgrade starts its new
    /// build this way.
    pub async fn start_siblings(
        &self,
        build: ValkeyBuild,
        count: usize,
    ) -> Result<LocalServers, HarnessError> {
        let mut set = LocalServers::configured(
            build,
            &self.default_user_line,
            self.tls.clone(),
            &self.extra_conf,
        );
        set.credentials = self.credentials.clone();
        set.operator_acl = self.operator_acl.clone();
        set.launch(count).await
    }

    /// A set with no server yet and fresh admin credentials.
    fn configured(
        build: ValkeyBuild,
        default_user_line: &str,
        tls: Option<TlsMaterial>,
        extra_conf: &str,
    ) -> LocalServers {
        LocalServers {
            build,
            credentials: Credentials {
                username: ADMIN_USER.to_owned(),
                password: unique_token(),
            },
            servers: Vec::new(),
            default_user_line: default_user_line.to_owned(),
            tls,
            extra_conf: extra_conf.to_owned(),
            operator_acl: None,
        }
    }

    /// Starts `count` servers that run the operator's own ACL users, as members do (see
    /// [`LocalServers::operator_acl`]): a driver with [`LocalServers::operator_credentials`]
    /// has exactly the operator's rights; replication and atomic slot migration authenticate
    /// as `_valkey-replication`. [`LocalServers::credentials`] stays the unrestricted admin.
    pub async fn start_with_operator_acl(
        build: ValkeyBuild,
        count: usize,
    ) -> Result<LocalServers, HarnessError> {
        let mut set = LocalServers::configured(build, DEFAULT_USER_LINE, None, "");
        set.operator_acl = Some(crate::resolve::acl::OperatorCredentials {
            operator_password: unique_token(),
            replication_password: unique_token(),
            backup_password: unique_token(),
            restore_password: unique_token(),
            metrics_password: unique_token(),
        });
        set.launch(count).await
    }

    /// The operator's users' passwords, when started with [`LocalServers::start_with_operator_acl`].
    pub fn operator_acl(&self) -> Option<&crate::resolve::acl::OperatorCredentials> {
        self.operator_acl.as_ref()
    }

    /// How the operator logs in (`_valkey-operator`), when started with its ACL.
    pub fn operator_credentials(&self) -> Option<Credentials> {
        self.operator_acl.as_ref().map(|c| Credentials {
            username: crate::api::constants::OPERATOR_ACL_USERNAME.to_owned(),
            password: c.operator_password.clone(),
        })
    }

    /// The servers' ACL file: the `default` line and the admin user, or with the operator's
    /// ACL, the file the operator renders (no binding) and the admin user.
    fn acl_file(&self) -> String {
        let hash = hex::encode(Sha256::digest(self.credentials.password.as_bytes()));
        let admin = format!("user {ADMIN_USER} on #{hash} ~* &* +@all\n");
        match &self.operator_acl {
            None => format!("{}\n{admin}", self.default_user_line),
            Some(creds) => {
                let roles = std::collections::BTreeMap::new();
                let file = crate::resolve::acl::render_acl_file(&[], &roles, creds);
                format!("{file}{admin}")
            }
        }
    }

    /// Starts `count` servers of the set's build and waits until each accepts connections.
    async fn launch(mut self, count: usize) -> Result<LocalServers, HarnessError> {
        let binary = self.build.binary()?;
        self.servers.reserve(count);
        for _ in 0..count {
            let server = self.spawn_one(&binary).await?;
            self.servers.push(server);
        }
        Ok(self)
    }

    /// A cluster client (fred) of the servers, seeded with the first one and authenticated
    /// as the admin user: for writing and reading test data. Plaintext servers only.
    pub async fn cluster_client(&self) -> Result<fred::clients::Client, HarnessError> {
        use fred::prelude::{ClientLike, Config, ServerConfig};
        let seed = self
            .servers
            .first()
            .ok_or_else(|| HarnessError::Client("no server to seed it with".to_owned()))?;
        let config = Config {
            username: Some(self.credentials.username.clone()),
            password: Some(self.credentials.password.clone()),
            server: ServerConfig::new_clustered(vec![(seed.addr.host.clone(), seed.addr.port)]),
            ..Config::default()
        };
        let client = fred::clients::Client::new(config, None, None, None);
        client
            .init()
            .await
            .map_err(|e| HarnessError::Client(format!("seeded with {}: {e}", seed.addr)))?;
        Ok(client)
    }

    pub fn addrs(&self) -> Vec<MemberAddr> {
        self.servers.iter().map(|s| s.addr.clone()).collect()
    }

    /// Starts one server, on another port when the first ones were taken.
    async fn spawn_one(&self, binary: &Path) -> Result<ServerProcess, HarnessError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_spawn(binary).await {
                // Most likely a port race with another process: try another port.
                Err(HarnessError::ExitedAtStartup { .. }) if attempt < 8 => {}
                result => return result,
            }
        }
    }

    /// Starts one server on the next free port pair and waits until it accepts connections.
    async fn try_spawn(&self, binary: &Path) -> Result<ServerProcess, HarnessError> {
        let port = next_port_pair().ok_or(HarnessError::NoFreePort)?;
        let dir = std::env::temp_dir().join(format!("valkey-driver-test-{}", unique_token()));
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        std::fs::write(dir.join("users.acl"), self.acl_file()).map_err(io("write ACL file"))?;
        if let Some(tls) = &self.tls {
            write_tls_files(&dir, tls)?;
        }
        // A config file (not flags) so that CONFIG REWRITE works as in production.
        std::fs::write(dir.join("valkey.conf"), self.server_conf(port, &dir))
            .map_err(io("write valkey.conf"))?;
        let child = Command::new(binary)
            .arg(dir.join("valkey.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io(format!("start {}", binary.display())))?;
        let mut server = ServerProcess {
            addr: MemberAddr::new("127.0.0.1", port),
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            if !server.is_running() {
                return Err(HarnessError::ExitedAtStartup {
                    port,
                    log: server.log_tail(20),
                });
            }
            if Instant::now() > deadline {
                return Err(HarnessError::NotAccepting {
                    port,
                    log: server.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// valkey.conf of a test server on `port` keeping its files in `dir`.
    fn server_conf(&self, port: u16, dir: &Path) -> String {
        let listen = match &self.tls {
            None => format!("port {port}\n"),
            Some(_) => format!(
                "port 0\n\
                 tls-port {port}\n\
                 tls-cluster yes\n\
                 tls-replication yes\n\
                 tls-auth-clients no\n\
                 tls-cert-file {dir}/tls.crt\n\
                 tls-key-file {dir}/tls.key\n\
                 tls-ca-cert-file {dir}/ca.crt\n",
                dir = dir.display()
            ),
        };
        format!(
            "{listen}\
             bind 127.0.0.1\n\
             protected-mode no\n\
             cluster-enabled yes\n\
             cluster-config-file nodes.conf\n\
             cluster-node-timeout 5000\n\
             cluster-announce-ip 127.0.0.1\n\
             cluster-port {bus}\n\
             dir {dir}\n\
             aclfile {dir}/users.acl\n\
             logfile {dir}/valkey.log\n\
             masteruser {master_user}\n\
             masterauth {password}\n\
             save \"\"\n\
             appendonly no\n\
             daemonize no\n\
             {extra}\n",
            bus = port + 10000,
            dir = dir.display(),
            master_user = match &self.operator_acl {
                None => ADMIN_USER,
                Some(_) => crate::api::constants::REPLICATION_ACL_USERNAME,
            },
            password = match &self.operator_acl {
                None => &self.credentials.password,
                Some(creds) => &creds.replication_password,
            },
            extra = self.extra_conf,
        )
    }
}

/// Polls `probe` until it yields `Some`, or fails after `timeout` with the last state it
/// described. `probe` returns `Ok(None)` with a description via `last` when not there yet.
/// Polls back off from 20 ms to 250 ms.
pub async fn wait_for<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    probe: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    wait_for_polling(what, timeout, Duration::from_millis(250), probe).await
}

/// [`wait_for`] with polls backing off from 20 ms to at most `longest_pause`: a benchmark
/// floor passes 20 ms so that its figure is not inflated by the pause between two polls.
pub async fn wait_for_polling<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    longest_pause: Duration,
    mut probe: F,
) -> Result<T, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(20).min(longest_pause);
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(state) if Instant::now() > deadline => {
                return Err(HarnessError::TimedOut {
                    what: what.to_owned(),
                    timeout,
                    state: state.to_string(),
                });
            }
            Err(_) => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(longest_pause);
    }
}

/// What [`form_cluster`] built.
#[derive(Clone, Debug)]
pub struct Formation {
    /// Primaries in shard order, with their live node ids.
    pub primaries: Vec<(MemberAddr, NodeId)>,
    /// Replicas as (replica, its id, id of the primary it follows).
    pub replicas: Vec<(MemberAddr, NodeId, NodeId)>,
    /// Time spent per phase (`slots+meet`, `gossip`, `replicate+sync`), for benchmarks.
    pub phases: Vec<(&'static str, Duration)>,
}

/// Forms a cluster from fresh members with driver calls only: each gets its own config epoch
/// (member i: i + 1, as the operator gives them), the first `shards` members become primaries
/// with even slot ranges, the rest replicate them round-robin.
/// Returns when every member reports `cluster_state:ok` and every replica's link is up.
pub async fn form_cluster(
    driver: &dyn ClusterDriver,
    members: &[MemberAddr],
    shards: usize,
    timeout: Duration,
) -> Result<Formation, HarnessError> {
    if shards == 0 || shards > members.len() {
        return Err(HarnessError::Shape {
            shards,
            members: members.len(),
        });
    }
    let mut phases = Vec::new();
    let mut phase_start = Instant::now();
    let mut ids = Vec::with_capacity(members.len());
    for (m, epoch) in members.iter().zip(1..) {
        ids.push(driver.my_id(m).await?);
        driver.set_config_epoch(m, epoch).await?;
    }
    // Slots first (they travel with the gossip), then one member meets all others.
    for (m, range) in members.iter().zip(even_ranges(shards)) {
        driver
            .add_slots_range(m, std::slice::from_ref(&range))
            .await?;
    }
    let first = &members[0];
    for m in &members[1..] {
        driver
            .meet(first, &m.host, m.port, Some(m.port + 10000))
            .await?;
    }
    phases.push(("slots+meet", phase_start.elapsed()));
    phase_start = Instant::now();
    // Everyone must know everyone (no handshake left) before REPLICATE can name a primary.
    wait_all_known(driver, members, &ids, timeout, Duration::from_millis(250)).await?;

    phases.push(("gossip", phase_start.elapsed()));
    phase_start = Instant::now();
    let primaries: Vec<(MemberAddr, NodeId)> = members[..shards]
        .iter()
        .cloned()
        .zip(ids[..shards].iter().cloned())
        .collect();
    let mut replicas = Vec::new();
    for (i, (m, id)) in members[shards..].iter().zip(&ids[shards..]).enumerate() {
        let (primary_addr, _) = &primaries[i % shards];
        // The primary's id as the primary itself reports it right now.
        let primary_id = driver.my_id(primary_addr).await?;
        driver.replicate(m, &primary_id).await?;
        replicas.push((m.clone(), id.clone(), primary_id));
    }

    wait_formed(driver, members, &replicas, timeout).await?;
    phases.push(("replicate+sync", phase_start.elapsed()));
    Ok(Formation {
        primaries,
        replicas,
        phases,
    })
}

// Driver errors inside the probes below are states to wait out, as strings.

/// Waits until every member knows every other (no handshake left), meeting directly whoever
/// has not heard of a member yet. `ids` are the members' node ids, in the same order.
/// Polls back off to at most `longest_pause` (see [`wait_for_polling`]).
pub async fn wait_all_known(
    driver: &dyn ClusterDriver,
    members: &[MemberAddr],
    ids: &[NodeId],
    timeout: Duration,
    longest_pause: Duration,
) -> Result<(), HarnessError> {
    let n = members.len();
    let what = "every member to know every other";
    wait_for_polling(what, timeout, longest_pause, || async {
        let mut missing = Vec::new();
        for m in members {
            let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
            let known = nodes.iter().filter(|x| !x.flags.handshake).count();
            // Whoever has not heard of a member yet meets it directly rather than waiting
            // for gossip (what the operator does: this stays a floor, not a slower path).
            for (other, id) in members.iter().zip(ids) {
                if other != m && !nodes.iter().any(|x| &x.id == id && !x.flags.handshake) {
                    let _ = driver
                        .meet(m, &other.host, other.port, Some(other.port + 10000))
                        .await;
                }
            }
            if known != n || !ids.iter().all(|id| nodes.iter().any(|x| &x.id == id)) {
                missing.push(format!("{m} knows {known} of {n} members"));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("; "))
        }
    })
    .await
}

/// Waits until every member reports `cluster_state:ok` with every slot assigned, and every
/// replica's link to its primary is up.
async fn wait_formed(
    driver: &dyn ClusterDriver,
    members: &[MemberAddr],
    replicas: &[(MemberAddr, NodeId, NodeId)],
    timeout: Duration,
) -> Result<(), HarnessError> {
    wait_for("cluster_state:ok and replica links up", timeout, || async {
        for m in members {
            let info = driver.cluster_info(m).await.map_err(|e| e.to_string())?;
            if !info.state_ok || info.slots_assigned != 16384 {
                return Err(format!(
                    "{m}: state_ok={} slots={}",
                    info.state_ok, info.slots_assigned
                ));
            }
        }
        for (m, _, _) in replicas {
            let repl = driver
                .replication_info(m)
                .await
                .map_err(|e| e.to_string())?;
            let up =
                repl.role == Role::Replica && repl.primary_link.as_ref().is_some_and(|l| l.link_up);
            if !up {
                return Err(format!("replica {m} link not up: {repl:?}"));
            }
        }
        Ok(())
    })
    .await
}
