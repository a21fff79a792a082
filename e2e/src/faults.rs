//! Fault hooks for tests, with the mechanisms a real machine has, reaching pods through their
//! node's container runtime ([`crate::cri`]): SIGKILL a container, freeze its cgroup, cut its
//! routes, stop or reboot a node. They need root and a running local cluster.
//!
//! ```no_run
//! use valkey_e2e::faults::{self, PodRef};
//! # fn main() -> anyhow::Result<()> {
//! let a = PodRef::find("ns", "valkey-0")?;
//! let b = PodRef::find("ns", "valkey-1")?;
//! a.kill("valkey")?;                 // SIGKILL the container (the kubelet restarts it)
//! a.pause("valkey")?;                // cgroup frozen: a hung process, TCP stays open
//! a.resume("valkey")?;               // thawed
//! faults::cut_link(&a, &b)?;         // a and b can no longer reach each other
//! faults::heal_link(&a, &b)?;
//! faults::cut_apiserver(&a)?;        // a cannot reach the apiserver (probes still work)
//! faults::heal_apiserver(&a)?;
//! faults::stop_node("node-b")?;      // no heartbeats, its pods frozen
//! faults::start_node("node-b")?;
//! # Ok(()) }
//! ```

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::cri::Sandbox;
use crate::harness::{lc_dir, read_trimmed};

/// The apiserver's address as pods see it.
pub const APISERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// A pod as its node runs it: its network namespace, address and containers.
#[derive(Clone, Debug)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    sandbox: Sandbox,
}

fn run(cmd: &mut Command) -> anyhow::Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

impl PodRef {
    /// Finds the pod's sandbox on the nodes.
    pub fn find(namespace: &str, name: &str) -> anyhow::Result<Self> {
        let sandbox = crate::cri::find_sandbox(namespace, name)?
            .ok_or_else(|| anyhow!("pod {namespace}/{name} has no sandbox on any node"))?;
        Ok(Self {
            namespace: namespace.into(),
            name: name.into(),
            sandbox,
        })
    }

    /// The pod's network namespace name (`cni-...`).
    pub fn netns(&self) -> anyhow::Result<String> {
        Ok(self.sandbox.netns.clone())
    }

    /// The pod's IP.
    pub fn ip(&self) -> anyhow::Result<Ipv4Addr> {
        Ok(self.sandbox.ip)
    }

    /// The node the pod runs on.
    pub fn node(&self) -> anyhow::Result<String> {
        Ok(self.sandbox.node.clone())
    }

    /// The pid of a container's current process (pid 1 of the container).
    pub fn pid(&self, container: &str) -> anyhow::Result<i32> {
        Ok(self.sandbox.container(container)?.pid)
    }

    /// Path of a container's current log file.
    pub fn log_path(&self, container: &str) -> anyhow::Result<PathBuf> {
        Ok(self.sandbox.container(container)?.log_path)
    }

    /// Path of the log of a container's previous run, once it has restarted: the kubelet keeps
    /// one file per attempt (`<container>/<attempt>.log`), so it is the attempt before the
    /// running one's.
    pub fn previous_log_path(&self, container: &str) -> anyhow::Result<PathBuf> {
        let current = self.log_path(container)?;
        let attempt: u32 = current
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{} is not <attempt>.log", current.display()))?;
        let previous = attempt
            .checked_sub(1)
            .context("the container has not restarted")?;
        Ok(current.with_file_name(format!("{previous}.log")))
    }

    /// Sends a signal to a container's first process (pid 1 of the container: SIGKILL ends
    /// the whole container).
    pub fn signal(&self, container: &str, sig: Signal) -> anyhow::Result<()> {
        let pid = self.pid(container)?;
        nix::sys::signal::kill(Pid::from_raw(pid), sig)
            .with_context(|| format!("signal {sig} to {pid}"))?;
        Ok(())
    }

    /// SIGKILL: the container dies; the kubelet restarts it per restartPolicy.
    pub fn kill(&self, container: &str) -> anyhow::Result<()> {
        self.signal(container, Signal::SIGKILL)
    }

    /// The container hangs (connections stay open, nothing answers): its cgroup frozen.
    pub fn pause(&self, container: &str) -> anyhow::Result<()> {
        crate::cri::set_frozen(&crate::cri::freezer_of(self.pid(container)?)?, true)
    }

    /// Undoes [`PodRef::pause`].
    pub fn resume(&self, container: &str) -> anyhow::Result<()> {
        crate::cri::set_frozen(&crate::cri::freezer_of(self.pid(container)?)?, false)
    }

    /// Whether [`PodRef::pause`] (or a stopped node) holds the container: its cgroup frozen.
    pub fn is_paused(&self, container: &str) -> anyhow::Result<bool> {
        crate::cri::is_frozen(self.pid(container)?)
    }

    /// Runs a command inside the container through the runtime, like `kubectl exec`.
    pub fn exec(&self, container: &str, argv: &[&str]) -> anyhow::Result<Output> {
        self.sandbox.exec(container, argv)
    }

    /// Reads a file as the container sees it, through `/proc/<pid>/root` (images need not
    /// have `cat`).
    pub fn read_file(&self, container: &str, path: &str) -> anyhow::Result<String> {
        let pid = self.pid(container)?;
        let on_host = format!("/proc/{pid}/root/{}", path.trim_start_matches('/'));
        std::fs::read_to_string(&on_host)
            .with_context(|| format!("reading {path} in {}/{}", self.namespace, self.name))
    }

    /// Opens a TCP connection *from inside this pod's network namespace* to `dst`, sends
    /// `request` (if not empty) and returns what arrives until `timeout` or EOF. Used to
    /// check pod-to-pod reachability (e.g. `b"PING\r\n"` to a Valkey port).
    pub fn tcp_request(
        &self,
        dst: std::net::SocketAddr,
        request: &[u8],
        timeout: std::time::Duration,
    ) -> anyhow::Result<Vec<u8>> {
        let ns_path = PathBuf::from("/run/netns").join(self.netns()?);
        let request = request.to_vec();
        // setns(2) applies to the calling thread only: do it on a fresh thread.
        std::thread::spawn(move || -> anyhow::Result<Vec<u8>> {
            use std::io::{Read, Write};
            let f = std::fs::File::open(&ns_path)
                .with_context(|| format!("opening {}", ns_path.display()))?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
            let mut s = std::net::TcpStream::connect_timeout(&dst, timeout)
                .with_context(|| format!("connect {dst}"))?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            if !request.is_empty() {
                s.write_all(&request)?;
            }
            let mut buf = vec![0u8; 4096];
            let n = s
                .read(&mut buf)
                .with_context(|| format!("read from {dst}"))?;
            buf.truncate(n);
            Ok(buf)
        })
        .join()
        .map_err(|_| anyhow!("tcp_request thread panicked"))?
    }

    fn ip_in_ns(&self, args: &[&str]) -> anyhow::Result<()> {
        let ns = self.netns()?;
        run(Command::new("ip").args(["-n", &ns]).args(args))?;
        Ok(())
    }

    /// Adds a blackhole route to `dst` in this pod's namespace (idempotent).
    pub fn blackhole(&self, dst: Ipv4Addr) -> anyhow::Result<()> {
        let ns = self.netns()?;
        let cidr = format!("{dst}/32");
        run(Command::new("ip").args(["-n", &ns, "route", "replace", "blackhole", &cidr]))?;
        Ok(())
    }

    /// Removes a blackhole route added by [`PodRef::blackhole`] (idempotent).
    pub fn unblackhole(&self, dst: Ipv4Addr) -> anyhow::Result<()> {
        let cidr = format!("{dst}/32");
        match self.ip_in_ns(&["route", "del", "blackhole", &cidr]) {
            Ok(()) => Ok(()),
            Err(e) if e.to_string().contains("No such process") => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Cuts the link between two pods in both directions (blackhole routes in both
/// namespaces): packets are dropped silently, established connections hang.
pub fn cut_link(a: &PodRef, b: &PodRef) -> anyhow::Result<()> {
    a.blackhole(b.ip()?)?;
    b.blackhole(a.ip()?)?;
    Ok(())
}

/// Heals a link cut with [`cut_link`].
pub fn heal_link(a: &PodRef, b: &PodRef) -> anyhow::Result<()> {
    a.unblackhole(b.ip()?)?;
    b.unblackhole(a.ip()?)?;
    Ok(())
}

/// Cuts a pod from the apiserver (198.18.0.1). On this one machine that is also the nodes'
/// address, which the kubelet probes from: the pod's probes fail too, as a pod cut from its
/// node (kubelet_faults shows it turning NotReady).
pub fn cut_apiserver(p: &PodRef) -> anyhow::Result<()> {
    p.blackhole(APISERVER_IP)
}

/// Heals [`cut_apiserver`].
pub fn heal_apiserver(p: &PodRef) -> anyhow::Result<()> {
    p.unblackhole(APISERVER_IP)
}

/// "Powers off" a node: its kubelet stops its heartbeats and lease renewals (the node
/// controller marks it NotReady/Unknown after ~40 s and taints it) and its pods hang: the
/// kubelet is SIGSTOPped and the node's cgroup root frozen (every container of every pod).
pub fn stop_node(node: &str) -> anyhow::Result<()> {
    crate::cri::set_frozen(&node_freezer(node), true)?;
    signal_kubelet(node, Signal::SIGSTOP)
}

/// Undoes [`stop_node`]: pods continue, heartbeats resume.
pub fn start_node(node: &str) -> anyhow::Result<()> {
    crate::cri::set_frozen(&node_freezer(node), false)?;
    signal_kubelet(node, Signal::SIGCONT)
}

/// A stopped node's machine boots again: the kubelet is thawed, killed and started anew by
/// `e2e/cluster.sh real-nodes-up` (its containerd and containers keep running), so it
/// registers its Node again if the object was deleted while it was down, as a rebooted
/// machine's kubelet does (a running kubelet does not re-register).
pub fn reboot_node(node: &str) -> anyhow::Result<()> {
    crate::cri::set_frozen(&node_freezer(node), false)?;
    kill_kubelet(node)?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("real-nodes-up")
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} real-nodes-up: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A process's state letter from `/proc/<pid>/stat` (`R`, `S`, `T` stopped, `Z` zombie...);
/// None once it is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// The cgroup root of a node's pods (e2e/real-node.sh's `cgroupRoot`).
fn node_freezer(node: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/cgroup/freezer/vk-{node}"))
}

fn kubelet_pid(node: &str) -> anyhow::Result<i32> {
    let pid_file = lc_dir().join(format!("pids/kubelet-{node}.pid"));
    Ok(read_trimmed(&pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?
        .parse()?)
}

fn signal_kubelet(node: &str, sig: Signal) -> anyhow::Result<()> {
    let pid = kubelet_pid(node)?;
    nix::sys::signal::kill(Pid::from_raw(pid), sig)
        .with_context(|| format!("{sig} to the kubelet of {node}"))
}

/// SIGKILL to a node's kubelet, then waits until it is gone (or a zombie), so that
/// e2e/cluster.sh sees it stopped and starts a new one.
fn kill_kubelet(node: &str) -> anyhow::Result<()> {
    let pid = kubelet_pid(node)?;
    signal_kubelet(node, Signal::SIGKILL)?;
    for _ in 0..100 {
        if matches!(process_state(pid), None | Some('Z' | 'X')) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bail!("the kubelet of {node} (pid {pid}) did not exit after SIGKILL")
}

/// A Node's `Ready` condition status (`True`, `False`, `Unknown`; empty when it has none).
pub fn node_ready(n: &k8s_openapi::api::core::v1::Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}
