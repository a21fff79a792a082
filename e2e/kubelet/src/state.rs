//! On-disk layout of the kubelet's state, shared by the kubelet and the fault hooks.
//!
//! ```text
//! $LC_DIR/kubelet/
//!   nodes/<node>/stopped             fault hook: node is "powered off" while this file exists
//!   pods/<ns>_<name>_<uid>/
//!     node, netns, ip                 where the pod runs
//!     <container>.pid                 pid (= process group) of the container's current process
//!     <container>.log[.previous]      stdout+stderr of the current / previous instance
//!     volumes/<volume>/               materialised volumes (atomic-writer layout)
//!     run/<container>.json            launch spec handed to the in-namespace exec wrapper
//! ```

use std::path::{Path, PathBuf};

/// The cluster state dir: `$LC_DIR`, else `<repo>/.localcluster` where `<repo>` is the
/// checkout the current directory is in (found by `e2e/versions.env`; `cargo test` runs in
/// the package dir). Resolved at run time: several checkouts may share one target dir.
pub fn lc_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LC_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("e2e").join("versions.env").is_file() {
                return dir.join(".localcluster");
            }
        }
    }
    // This crate is <repo>/e2e/kubelet.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the kubelet crate is two levels below the repository")
        .join(".localcluster")
}

/// Network namespace name of a pod: `vkp-<first 12 chars of the uid>`.
pub fn netns_name(uid: &str) -> String {
    format!("vkp-{}", &uid[..uid.len().min(12)])
}

/// Host side veth name of a pod (≤ 15 chars, the kernel's IFNAMSIZ limit).
pub fn host_veth_name(uid: &str) -> String {
    let compact: String = uid.chars().filter(|c| *c != '-').take(12).collect();
    format!("vkh{compact}")
}

/// Paths inside `$LC_DIR/kubelet`.
#[derive(Clone, Debug)]
pub struct StateDir {
    pub root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$LC_DIR/kubelet`.
    pub fn default_location() -> Self {
        Self::new(lc_dir().join("kubelet"))
    }

    pub fn pods_dir(&self) -> PathBuf {
        self.root.join("pods")
    }

    pub fn pod_dir(&self, ns: &str, name: &str, uid: &str) -> PathBuf {
        self.pods_dir().join(format!("{ns}_{name}_{uid}"))
    }

    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join("nodes").join(node)
    }

    pub fn node_stopped_file(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("stopped")
    }

    /// All pod dirs as (dir, namespace, name, uid).
    pub fn list_pod_dirs(&self) -> Vec<(PathBuf, String, String, String)> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.pods_dir()) else {
            return out;
        };
        for e in rd.flatten() {
            let fname = e.file_name().to_string_lossy().to_string();
            // Namespace and name cannot contain '_' (DNS labels/subdomains), the uid cannot either.
            let parts: Vec<&str> = fname.splitn(3, '_').collect();
            if parts.len() == 3 {
                out.push((
                    e.path(),
                    parts[0].to_string(),
                    parts[1].to_string(),
                    parts[2].to_string(),
                ));
            }
        }
        out
    }

    /// The dir of the pod `ns/name` (the most recently modified one if several pods with
    /// that name existed, e.g. a StatefulSet pod that was recreated).
    pub fn find_pod_dir(&self, ns: &str, name: &str) -> Option<PathBuf> {
        self.list_pod_dirs()
            .into_iter()
            .filter(|(_, n, p, _)| n == ns && p == name)
            .max_by_key(|(d, ..)| {
                std::fs::metadata(d)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
            })
            .map(|(d, ..)| d)
    }
}

/// Reads a small text file and trims it.
pub fn read_trimmed(p: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(p)?.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_kernel_limits() {
        let uid = "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809";
        assert_eq!(netns_name(uid), "vkp-1a2b3c4d-5e6");
        let v = host_veth_name(uid);
        assert_eq!(v, "vkh1a2b3c4d5e6f");
        assert!(v.len() <= 15);
    }

    #[test]
    fn pod_dirs_parse() {
        let tmp = std::env::temp_dir().join(format!("vk-state-test-{}", std::process::id()));
        let s = StateDir::new(&tmp);
        std::fs::create_dir_all(s.pod_dir("ns1", "pod-a", "u1")).unwrap();
        assert_eq!(
            s.find_pod_dir("ns1", "pod-a").unwrap(),
            s.pod_dir("ns1", "pod-a", "u1")
        );
        assert!(s.find_pod_dir("ns1", "pod").is_none());
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
