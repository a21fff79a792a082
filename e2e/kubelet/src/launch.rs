//! Starting a container process.
//!
//! The kubelet runs `ip netns exec <netns> <vk-kubelet> exec-container <spec.json>`:
//! `ip netns exec` enters the pod's network namespace and unshares a mount namespace whose
//! mounts do not propagate back to the host; our wrapper then bind-mounts the pod's volumes
//! at their mount paths (visible to that container only), changes directory and execs the
//! container's argv with its environment. Every step execs, so the pid the kubelet spawned
//! is the container's main process, and it leads its own process group (the "container").

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use std::os::fd::AsRawFd;

use nix::fcntl::OFlag;
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use crate::volumes::MountSpec;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LaunchSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub mounts: Vec<MountSpec>,
}

/// Finds `cmd` on the container's PATH (not the kubelet's), like a container runtime does.
pub fn resolve_in_path(cmd: &str, env: &[(String, String)]) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(cmd))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

fn ensure_mount_point(is_dir: bool, target: &Path) -> anyhow::Result<()> {
    if target.exists() || target.symlink_metadata().is_ok() {
        return Ok(());
    }
    if is_dir {
        std::fs::create_dir_all(target)?;
    } else {
        if let Some(p) = target.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::File::create(target)?;
    }
    Ok(())
}

/// The wrapper's body (runs inside the pod's namespaces). Only returns on error.
pub fn exec_container(spec_path: &Path) -> anyhow::Error {
    match exec_inner(spec_path) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn exec_inner(spec_path: &Path) -> anyhow::Result<std::convert::Infallible> {
    let spec: LaunchSpec =
        serde_json::from_slice(&std::fs::read(spec_path).context("reading launch spec")?)?;
    // Open every source before mounting anything: a mount may hide later sources (an
    // emptyDir at /work hides a state dir under /work/...). Binding from /proc/self/fd/N
    // uses the already-resolved file.
    let mut sources = Vec::new();
    for m in &spec.mounts {
        let fd = nix::fcntl::open(&m.source, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .with_context(|| format!("opening volume source {}", m.source.display()))?;
        let is_dir = std::fs::metadata(&m.source)
            .map(|md| md.is_dir())
            .unwrap_or(true);
        sources.push((fd, is_dir));
    }
    for (m, (fd, is_dir)) in spec.mounts.iter().zip(&sources) {
        ensure_mount_point(*is_dir, &m.target)
            .with_context(|| format!("creating mount point {}", m.target.display()))?;
        let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            Some(src.as_str()),
            &m.target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .with_context(|| format!("bind {} -> {}", m.source.display(), m.target.display()))?;
    }
    for m in &spec.mounts {
        if m.read_only {
            mount(
                None::<&str>,
                &m.target,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .with_context(|| format!("read-only remount of {}", m.target.display()))?;
        }
    }
    if let Some(wd) = spec.working_dir.as_deref().filter(|w| !w.is_empty()) {
        std::fs::create_dir_all(wd).ok();
        std::env::set_current_dir(wd).with_context(|| format!("chdir {wd}"))?;
    }
    let Some(cmd) = spec.argv.first() else {
        bail!("container has no command and its image no entrypoint")
    };
    let exe = resolve_in_path(cmd, &spec.env)
        .ok_or_else(|| anyhow!("executable file {cmd:?} not found in $PATH"))?;
    let cstr = |s: &str| CString::new(s).map_err(|e| anyhow!("{e}"));
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| cstr(a))
        .collect::<anyhow::Result<_>>()?;
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<anyhow::Result<_>>()?;
    let exe_c = cstr(&exe.to_string_lossy())?;
    nix::unistd::execve(&exe_c, &argv, &envp).with_context(|| format!("exec {}", exe.display()))?;
    unreachable!("execve returned without error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_on_container_path() {
        let env = vec![("PATH".to_string(), "/nonexistent:/bin:/usr/bin".to_string())];
        let sh = resolve_in_path("sh", &env).unwrap();
        assert!(sh.ends_with("sh"));
        assert!(resolve_in_path("definitely-not-a-command-xyz", &env).is_none());
        assert_eq!(
            resolve_in_path("/x/y", &env).unwrap(),
            PathBuf::from("/x/y")
        );
    }
}
