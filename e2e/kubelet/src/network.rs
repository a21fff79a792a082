//! Pod networking: one network namespace per pod, a veth pair to the launcher's bridge
//! `vkbr0`, an address from 198.18.1.1–198.18.127.254 with prefix /15 and no default route
//! (so nothing a pod sends can leave the machine; the on-link /15 reaches other pods and the
//! apiserver on 198.18.0.1). Service ClusterIPs (198.19.0.0/16, inside that /15) are routed
//! through the host, where kube-proxy translates them.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use anyhow::{Context, bail};
use tokio::process::Command;

use crate::state::{host_veth_name, netns_name};

pub const BRIDGE: &str = "vkbr0";
pub const PREFIX_LEN: u8 = 15;
/// Source address of the kubelet's tcp/http probes: a second address on the bridge, so a
/// pod cut from the apiserver (a blackhole route to 198.18.0.1 in its namespace) still
/// answers its probes, as on a real node where kubelet and apiserver are different hosts.
pub const PROBE_SOURCE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// The Service ClusterIP range (e2e/cluster.sh's SERVICE_CIDR), and the host side of the
/// bridge that kube-proxy's rules on the host translate it at. Without the route a pod would
/// look for a ClusterIP on the link, where nothing answers.
pub const SERVICE_CIDR: &str = "198.19.0.0/16";
pub const GATEWAY: &str = "198.18.0.1";

const FIRST: u32 = u32::from_be_bytes([198, 18, 1, 1]);
/// The upper half of 198.18.0.0/16 belongs to the real nodes' CNI ranges (e2e/real-node.sh).
const LAST: u32 = u32::from_be_bytes([198, 18, 127, 254]);

/// Pod IP allocation without collisions. Next-fit (a cursor that moves on), so a freed
/// address is not handed out again at once while peers may still cache it.
pub struct IpAllocator {
    inner: Mutex<(BTreeSet<u32>, u32)>,
}

fn usable(v: u32) -> bool {
    let last_octet = v & 0xff;
    (FIRST..=LAST).contains(&v) && last_octet != 0 && last_octet != 255
}

impl IpAllocator {
    pub fn new(used: impl IntoIterator<Item = Ipv4Addr>) -> Self {
        let used: BTreeSet<u32> = used.into_iter().map(u32::from).collect();
        let cursor = used.iter().next_back().copied().unwrap_or(FIRST - 1);
        Self {
            inner: Mutex::new((used, cursor)),
        }
    }

    pub fn reserve(&self, ip: Ipv4Addr) {
        self.inner.lock().expect("ip lock").0.insert(ip.into());
    }

    pub fn release(&self, ip: Ipv4Addr) {
        self.inner.lock().expect("ip lock").0.remove(&u32::from(ip));
    }

    pub fn allocate(&self) -> anyhow::Result<Ipv4Addr> {
        let mut g = self.inner.lock().expect("ip lock");
        let (used, cursor) = &mut *g;
        let span = LAST - FIRST + 1;
        let mut v = *cursor;
        for _ in 0..span {
            v = if (FIRST..LAST).contains(&v) {
                v + 1
            } else {
                FIRST
            };
            if usable(v) && !used.contains(&v) {
                used.insert(v);
                *cursor = v;
                return Ok(Ipv4Addr::from(v));
            }
        }
        bail!("pod address range exhausted")
    }
}

/// Runs `ip ARGS`, failing with its stderr.
pub async fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .await
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// Creates (or completes) the pod's namespace and link. Idempotent, so a kubelet restart
/// re-running it on an adopted pod changes nothing.
pub async fn setup_pod_network(uid: &str, addr: Ipv4Addr) -> anyhow::Result<()> {
    let ns = netns_name(uid);
    let host = host_veth_name(uid);
    // Temporary pod-side name (unique in the host namespace while it is created there).
    let peer = format!("vkc{}", &host[3..]);
    if !netns_exists(&ns) {
        ip(&["netns", "add", &ns]).await?;
    }
    let has_eth0 = ip(&["-n", &ns, "link", "show", "eth0"]).await.is_ok();
    if !has_eth0 {
        let _ = ip(&["link", "del", &host]).await;
        ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", &peer, "netns", &ns,
        ])
        .await?;
        ip(&["-n", &ns, "link", "set", &peer, "name", "eth0"]).await?;
    }
    ip(&["link", "set", &host, "master", BRIDGE]).await?;
    ip(&["link", "set", &host, "up"]).await?;
    ip(&["-n", &ns, "link", "set", "lo", "up"]).await?;
    let cidr = format!("{addr}/{PREFIX_LEN}");
    let addrs = ip(&["-n", &ns, "-4", "-o", "addr", "show", "dev", "eth0"]).await?;
    if !addrs.contains(&format!("inet {cidr} ")) {
        let _ = ip(&["-n", &ns, "addr", "flush", "dev", "eth0"]).await;
        ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"]).await?;
    }
    ip(&["-n", &ns, "link", "set", "eth0", "up"]).await?;
    ip(&[
        "-n",
        &ns,
        "route",
        "replace",
        SERVICE_CIDR,
        "via",
        GATEWAY,
        "dev",
        "eth0",
    ])
    .await?;
    Ok(())
}

/// Removes the pod's namespace and host veth (deleting the namespace destroys its veth end
/// and with it the peer; the explicit delete covers a half-built pair).
pub async fn teardown_pod_network(uid: &str) {
    let ns = netns_name(uid);
    let host = host_veth_name(uid);
    // Anything still inside (a container's orphaned children) dies with the pod, as it
    // would with the pod's pid namespace; otherwise it would keep the namespace alive.
    for (pid, _) in netns_processes(&ns) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    if netns_exists(&ns)
        && let Err(e) = ip(&["netns", "del", &ns]).await
    {
        tracing::warn!(%ns, error = %e, "deleting netns");
    }
    let _ = ip(&["link", "del", &host]).await;
}

/// Live (non-zombie) processes in the named network namespace, with their process group.
pub fn netns_processes(ns: &str) -> Vec<(i32, i32)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = std::fs::metadata(std::path::Path::new("/run/netns").join(ns)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(md) = std::fs::metadata(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if md.ino() != want.ino() || md.dev() != want.dev() {
            continue;
        }
        // /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.first() == Some(&"Z") {
            continue;
        }
        let pgrp = rest.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
        out.push((pid, pgrp));
    }
    out
}

/// Adds the probe source address to the bridge if it is missing.
pub async fn ensure_probe_source() {
    let cidr = format!("{PROBE_SOURCE}/{PREFIX_LEN}");
    match ip(&["-4", "-o", "addr", "show", "dev", BRIDGE]).await {
        Ok(out) if out.contains(&format!("inet {cidr} ")) => {}
        Ok(_) => {
            if let Err(e) = ip(&["addr", "add", &cidr, "dev", BRIDGE]).await {
                tracing::warn!(error = %e, "adding probe source address");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "bridge {BRIDGE} not found (is the launcher's network up?)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_without_collisions() {
        let a = IpAllocator::new([Ipv4Addr::new(198, 18, 1, 1)]);
        let x = a.allocate().unwrap();
        assert_eq!(x, Ipv4Addr::new(198, 18, 1, 2));
        let y = a.allocate().unwrap();
        assert_eq!(y, Ipv4Addr::new(198, 18, 1, 3));
        a.release(x);
        // Next-fit: the freed address is not reused at once.
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(198, 18, 1, 4));
    }

    #[test]
    fn skips_network_and_broadcast_octets_and_wraps() {
        let a = IpAllocator::new([Ipv4Addr::new(198, 18, 1, 254)]);
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(198, 18, 2, 1));
        let b = IpAllocator::new([Ipv4Addr::new(198, 18, 255, 254)]);
        assert_eq!(b.allocate().unwrap(), Ipv4Addr::new(198, 18, 1, 1));
    }
}
