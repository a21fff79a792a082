//! Leaves nothing behind: the launcher runs `vk-kubelet cleanup` on `down` and before `up`
//! (after a killed run, processes may be gone but namespaces and links remain, or the
//! reverse).

use std::os::unix::fs::MetadataExt;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::network::ip;
use crate::state::{StateDir, read_trimmed};

/// Inodes of our pod network namespaces (to recognise our processes, not reused pids).
fn our_netns_inodes() -> Vec<(String, u64)> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            if !name.starts_with("vkp-") {
                return None;
            }
            std::fs::metadata(e.path()).ok().map(|m| (name, m.ino()))
        })
        .collect()
}

/// Kills recorded and in-namespace container processes, deletes every `vkp-*` netns and
/// `vkh*` link, and removes the pod state (not the logs dir of the launcher).
pub async fn cleanup(state: &StateDir) -> anyhow::Result<()> {
    let nss = our_netns_inodes();
    // 1. processes recorded in pid files (if they are in one of our namespaces)
    for (dir, ..) in state.list_pod_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().extension().and_then(|x| x.to_str()) != Some("pid") {
                continue;
            }
            let Some(pid) = read_trimmed(&e.path())
                .ok()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let ino = std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .map(|m| m.ino())
                .ok();
            if ino.is_some_and(|i| nss.iter().any(|(_, n)| *n == i)) {
                tracing::info!(pid, "killing leftover container process group");
                let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
    // 2. anything else still inside our namespaces, then the namespaces
    for (ns, _) in &nss {
        if let Ok(out) = ip(&["netns", "pids", ns]).await {
            for pid in out.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        match ip(&["netns", "del", ns]).await {
            Ok(_) => tracing::info!(%ns, "netns deleted"),
            Err(e) => tracing::warn!(%ns, error = %e, "netns delete failed"),
        }
    }
    // 3. host veths
    if let Ok(out) = ip(&["-o", "link", "show"]).await {
        for line in out.lines() {
            let Some(name) = line.split(": ").nth(1) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with("vkh") || name.starts_with("vkc") {
                let _ = ip(&["link", "del", name]).await;
                tracing::info!(link = name, "link deleted");
            }
        }
    }
    // 4. state (a later kubelet must not try to adopt dead processes; fault markers go too)
    let _ = std::fs::remove_dir_all(state.pods_dir());
    let _ = std::fs::remove_dir_all(state.root.join("nodes"));
    Ok(())
}
