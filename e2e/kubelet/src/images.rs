//! The image map: how an image reference becomes a local executable.
//!
//! There is no registry and no container runtime here, so an "image" is a directory of
//! executables (prepended to the container's `PATH`) plus an entrypoint used when the
//! container has no `command`. The file is re-read when it changes, so a test can add an
//! image while a pod sits in `ImagePullBackOff`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use serde::Deserialize;

/// One local "image".
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ImageEntry {
    /// Directory prepended to `PATH`.
    pub path: PathBuf,
    /// Default command when the container sets none (Docker's ENTRYPOINT).
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// Default args when the container sets neither command nor args (Docker's CMD).
    #[serde(default)]
    pub cmd: Vec<String>,
    /// Extra environment baked into the image.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ImageMapFile {
    #[serde(default)]
    pub images: BTreeMap<String, ImageEntry>,
}

/// Strips the implicit Docker Hub prefixes so `docker.io/library/x:1`, `docker.io/x:1` and
/// `x:1` name the same image.
pub fn normalize(reference: &str) -> String {
    let mut r = reference.trim();
    for p in [
        "docker.io/library/",
        "index.docker.io/library/",
        "docker.io/",
        "index.docker.io/",
    ] {
        if let Some(rest) = r.strip_prefix(p) {
            r = rest;
            break;
        }
    }
    r = r.strip_prefix("library/").unwrap_or(r);
    r.to_string()
}

/// Splits `repo[:tag][@digest]` into (repo, tag) with `latest` as the default tag.
fn repo_and_tag(reference: &str) -> (String, String) {
    let no_digest = reference.split('@').next().unwrap_or(reference);
    // A ':' after the last '/' is a tag separator; before it, it's a registry port.
    let last_slash = no_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match no_digest[last_slash..].rfind(':') {
        Some(i) => (
            no_digest[..last_slash + i].to_string(),
            no_digest[last_slash + i + 1..].to_string(),
        ),
        None => (no_digest.to_string(), "latest".to_string()),
    }
}

impl ImageMapFile {
    pub fn parse(yaml: &str) -> anyhow::Result<Self> {
        let f: ImageMapFile = serde_yaml::from_str(yaml)?;
        Ok(f)
    }

    /// Resolves an image reference: exact (normalised) match first, then the same repo and
    /// tag with `:latest` implied, then a key naming the repo without a tag (any tag).
    pub fn resolve(&self, reference: &str) -> Option<&ImageEntry> {
        let want = normalize(reference);
        let (repo, tag) = repo_and_tag(&want);
        let mut repo_only = None;
        for (k, v) in &self.images {
            let kn = normalize(k);
            if kn == want {
                return Some(v);
            }
            let (krepo, ktag) = repo_and_tag(&kn);
            if krepo == repo && ktag == tag {
                return Some(v);
            }
            if !kn.contains(':') && kn == repo {
                repo_only = Some(v);
            }
        }
        repo_only
    }
}

/// The image map file, reloaded when its mtime changes. Cheap to clone.
#[derive(Clone)]
pub struct ImageMap {
    path: PathBuf,
    inner: Arc<RwLock<(Option<SystemTime>, ImageMapFile)>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl ImageMap {
    pub fn new(path: &Path) -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        let m = Self {
            path: path.to_path_buf(),
            inner: Arc::new(RwLock::new((None, ImageMapFile::default()))),
            changed,
        };
        m.reload_if_changed();
        m
    }

    /// Re-reads the file if its mtime moved; returns true when the content changed.
    pub fn reload_if_changed(&self) -> bool {
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        {
            let g = self.inner.read().expect("image map lock");
            if g.0 == mtime && mtime.is_some() {
                return false;
            }
        }
        let parsed = match std::fs::read_to_string(&self.path) {
            Ok(s) => match ImageMapFile::parse(&s) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "image map does not parse; keeping the previous one");
                    return false;
                }
            },
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "image map unreadable");
                ImageMapFile::default()
            }
        };
        let mut g = self.inner.write().expect("image map lock");
        let differs = g.1 != parsed;
        *g = (mtime, parsed);
        if differs {
            tracing::info!(images = g.1.images.len(), "image map (re)loaded");
            self.changed.send_modify(|v| *v += 1);
        }
        differs
    }

    pub fn resolve(&self, reference: &str) -> Option<ImageEntry> {
        self.inner
            .read()
            .expect("image map lock")
            .1
            .resolve(reference)
            .cloned()
    }

    /// A receiver that ticks whenever the map content changes (pods waiting in image
    /// backoff retry at once).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Polls the file every second; run once per kubelet.
    pub async fn watch_file(self) {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            self.reload_if_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = r#"
images:
  "valkey/valkey:9.1.2":
    path: /opt/v912/bin
    entrypoint: ["valkey-server"]
  "docker.io/library/redis:7.0":
    path: /usr/bin
  "ghcr.io/example/operator":
    path: /opt/op
    entrypoint: ["valkey-operator"]
"#;

    #[test]
    fn normalises_docker_hub_prefixes() {
        assert_eq!(normalize("docker.io/library/redis:7"), "redis:7");
        assert_eq!(normalize("docker.io/valkey/valkey:9"), "valkey/valkey:9");
        assert_eq!(normalize("library/redis"), "redis");
        assert_eq!(normalize("ghcr.io/a/b:1"), "ghcr.io/a/b:1");
    }

    #[test]
    fn resolves_references() {
        let m = ImageMapFile::parse(MAP).unwrap();
        let e = m.resolve("docker.io/valkey/valkey:9.1.2").unwrap();
        assert_eq!(e.path, PathBuf::from("/opt/v912/bin"));
        assert_eq!(e.entrypoint, vec!["valkey-server".to_string()]);
        assert!(m.resolve("valkey/valkey:9.0.0").is_none());
        assert!(m.resolve("redis:7.0").is_some());
        assert!(m.resolve("redis").is_none());
        // A key without tag matches any tag of that repository.
        assert!(m.resolve("ghcr.io/example/operator:dev").is_some());
        assert!(m.resolve("localhost:5000/x").is_none());
    }

    #[test]
    fn splits_registry_ports_from_tags() {
        assert_eq!(
            repo_and_tag("localhost:5000/x"),
            ("localhost:5000/x".into(), "latest".into())
        );
        assert_eq!(
            repo_and_tag("localhost:5000/x:1"),
            ("localhost:5000/x".into(), "1".into())
        );
        assert_eq!(repo_and_tag("x@sha256:abc"), ("x".into(), "latest".into()));
    }
}
