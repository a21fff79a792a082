//! Pods of the real nodes (e2e/real-node.sh), seen through their container runtime: each real
//! node has its own containerd under `$LC_DIR/real/<node>/`, asked with crictl (built by
//! e2e/tools/install.sh). [`crate::faults`] reaches every pod through it.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::harness::tool_cache;

/// A pod sandbox on a real node: the node, its runtime's socket, the sandbox id, the pod's
/// address and its network namespace (a name under /run/netns, as `ip netns` knows it).
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub node: String,
    pub socket: PathBuf,
    pub id: String,
    pub ip: Ipv4Addr,
    pub netns: String,
}

/// A running container of a sandbox.
#[derive(Clone, Debug)]
pub struct Container {
    pub id: String,
    pub pid: i32,
    pub log_path: PathBuf,
}

fn crictl_path() -> anyhow::Result<PathBuf> {
    std::fs::read_dir(tool_cache())?
        .flatten()
        .map(|e| e.path().join("bin/crictl"))
        .find(|p| p.exists())
        .context("crictl not built (e2e/tools/install.sh builds it)")
}

/// crictl against one node's containerd.
pub fn crictl(socket: &std::path::Path, args: &[&str]) -> anyhow::Result<Output> {
    let out = Command::new(crictl_path()?)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .args(["--timeout", "10s"])
        .args(args)
        .output()
        .context("running crictl")?;
    Ok(out)
}

fn crictl_ok(socket: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let out = crictl(socket, args)?;
    if !out.status.success() {
        bail!(
            "crictl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The real nodes of the running local cluster and their runtime sockets.
pub fn real_nodes() -> Vec<(String, PathBuf)> {
    let dir = crate::harness::lc_dir().join("real");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut nodes: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("containerd.sock"),
            )
        })
        .filter(|(_, sock)| sock.exists())
        .collect();
    nodes.sort();
    nodes
}

/// The ready sandbox of pod `namespace/name` on any real node.
pub fn find_sandbox(namespace: &str, name: &str) -> anyhow::Result<Option<Sandbox>> {
    let anchored = format!("^{name}$");
    for (node, socket) in real_nodes() {
        let ids = crictl_ok(
            &socket,
            &[
                "pods",
                "--namespace",
                namespace,
                "--name",
                &anchored,
                "--state",
                "ready",
                "-q",
            ],
        )?;
        let Some(id) = ids.lines().next().filter(|l| !l.is_empty()) else {
            continue;
        };
        let info: Value = serde_json::from_str(&crictl_ok(&socket, &["inspectp", id])?)?;
        let ip = info["status"]["network"]["ip"]
            .as_str()
            .context("sandbox without an address")?
            .parse()?;
        let netns = info["info"]["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .and_then(|ns| ns.iter().find(|n| n["type"] == "network"))
            .and_then(|n| n["path"].as_str())
            .and_then(|p| p.rsplit('/').next())
            .context("sandbox without a network namespace")?
            .to_string();
        return Ok(Some(Sandbox {
            node,
            socket,
            id: id.to_string(),
            ip,
            netns,
        }));
    }
    Ok(None)
}

impl Sandbox {
    /// The running container named `name` in this sandbox (the newest, after restarts).
    pub fn container(&self, name: &str) -> anyhow::Result<Container> {
        let anchored = format!("^{name}$");
        let ids = crictl_ok(
            &self.socket,
            &[
                "ps", "--pod", &self.id, "--name", &anchored, "--state", "running", "-q",
            ],
        )?;
        let id = ids
            .lines()
            .next()
            .filter(|l| !l.is_empty())
            .with_context(|| format!("container {name} is not running"))?;
        let info: Value = serde_json::from_str(&crictl_ok(&self.socket, &["inspect", id])?)?;
        Ok(Container {
            id: id.to_string(),
            pid: info["info"]["pid"]
                .as_i64()
                .context("container without a pid")? as i32,
            log_path: info["status"]["logPath"]
                .as_str()
                .unwrap_or_default()
                .into(),
        })
    }

    /// Runs a command in a container, as `kubectl exec` does (through the runtime).
    pub fn exec(&self, container: &str, argv: &[&str]) -> anyhow::Result<Output> {
        let c = self.container(container)?;
        let mut args = vec!["exec", c.id.as_str()];
        args.extend_from_slice(argv);
        crictl(&self.socket, &args)
    }
}

/// The cgroup v1 freezer directory of a process (its container's cgroup).
pub fn freezer_of(pid: i32) -> anyhow::Result<PathBuf> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let path = cgroups
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "freezer")
                .then_some(path)
        })
        .context("no freezer cgroup")?;
    Ok(PathBuf::from("/sys/fs/cgroup/freezer").join(path.trim_start_matches('/')))
}

/// Whether `pid`'s freezer cgroup is frozen, by itself or by an ancestor (a stopped node's
/// frozen cgroup root reads `FROZEN` in every cgroup below it).
pub fn is_frozen(pid: i32) -> anyhow::Result<bool> {
    let cgroup = freezer_of(pid)?;
    let state = std::fs::read_to_string(cgroup.join("freezer.state"))
        .with_context(|| format!("reading {}/freezer.state", cgroup.display()))?;
    Ok(state.trim() == "FROZEN")
}

/// Freezes (`FROZEN`) or thaws (`THAWED`) every process of a freezer cgroup and its children:
/// processes keep their sockets open and answer nothing, as a hung machine.
pub fn set_frozen(cgroup: &std::path::Path, frozen: bool) -> anyhow::Result<()> {
    let state = if frozen { "FROZEN" } else { "THAWED" };
    std::fs::write(cgroup.join("freezer.state"), state)
        .with_context(|| format!("{state} {}", cgroup.display()))
}
