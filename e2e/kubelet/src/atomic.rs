//! The real kubelet's "atomic writer" volume layout, so applications that watch their
//! config files see exactly what they would see on Kubernetes:
//!
//! ```text
//! <volume>/..2026_11_29_19_45_48.123456789   the current payload (timestamped dir)
//! <volume>/..data -> ..2026_11_29_...        swapped with one rename(2): atomic for readers
//! <volume>/valkey.conf -> ..data/valkey.conf user-visible names
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative path (may contain '/') -> content.
pub type Payload = BTreeMap<String, FileEntry>;

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

fn read_tree(base: &Path, rel: &str, out: &mut Payload) -> io::Result<()> {
    for e in std::fs::read_dir(base.join(rel))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let md = e.metadata()?;
        if md.is_dir() {
            read_tree(base, &r, out)?;
        } else {
            out.insert(
                r.clone(),
                FileEntry {
                    data: std::fs::read(base.join(&r))?,
                    mode: md.permissions().mode() & 0o7777,
                },
            );
        }
    }
    Ok(())
}

/// The payload currently published in `dir` (empty if none).
pub fn current(dir: &Path) -> Payload {
    let mut p = Payload::new();
    let data = dir.join(DATA);
    if data.exists() {
        let _ = read_tree(&data, "", &mut p);
    }
    p
}

fn timestamp_dir_name() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let s = now.strftime("%Y_%m_%d_%H_%M_%S").to_string();
    format!("..{s}.{:09}", now.subsec_nanosecond())
}

/// Publishes `payload` in `dir`; returns false (touching nothing) if it is already there.
pub fn write(dir: &Path, payload: &Payload) -> io::Result<bool> {
    for k in payload.keys() {
        if k.is_empty()
            || k.starts_with("..")
            || k.starts_with('/')
            || k.split('/').any(|c| c == "..")
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid path {k:?}"),
            ));
        }
    }
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join(DATA);
    let old_target = std::fs::read_link(&data_link).ok();
    if old_target.is_some() && &current(dir) == payload {
        return Ok(false);
    }

    // 1. the new payload in a fresh timestamped dir
    let ts = timestamp_dir_name();
    let ts_dir = dir.join(&ts);
    std::fs::create_dir_all(&ts_dir)?;
    for (rel, f) in payload {
        let p = ts_dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, &f.data)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.mode))?;
    }
    // 2. swap ..data with a single rename
    let tmp = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&ts, &tmp)?;
    std::fs::rename(&tmp, &data_link)?;

    // 3. user-visible top-level names
    let wanted: BTreeSet<String> = payload
        .keys()
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    for name in &wanted {
        let link = dir.join(name);
        let target = format!("{DATA}/{name}");
        match std::fs::read_link(&link) {
            Ok(t) if t == Path::new(&target) => {}
            _ => {
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&target, &link)?;
            }
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("..") || wanted.contains(&name) {
            continue;
        }
        if let Ok(t) = std::fs::read_link(e.path())
            && t.starts_with(DATA)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    // 4. the old payload goes last, so a reader holding the old ..data never sees a hole
    if let Some(old) = old_target
        && old != Path::new(&ts)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str, mode: u32) -> FileEntry {
        FileEntry {
            data: s.as_bytes().to_vec(),
            mode,
        }
    }

    #[test]
    fn publishes_and_swaps() {
        let dir = std::env::temp_dir().join(format!("vk-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut p = Payload::new();
        p.insert("valkey.conf".into(), entry("port 7000\n", 0o644));
        p.insert("sub/key".into(), entry("x", 0o600));
        assert!(write(&dir, &p).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.join("valkey.conf")).unwrap(),
            "port 7000\n"
        );
        assert_eq!(std::fs::read_to_string(dir.join("sub/key")).unwrap(), "x");
        assert_eq!(
            std::fs::read_link(dir.join("valkey.conf")).unwrap(),
            Path::new("..data/valkey.conf")
        );
        let mode = std::fs::metadata(dir.join("sub/key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        // Same payload: nothing changes.
        assert!(!write(&dir, &p).unwrap());
        assert_eq!(std::fs::read_link(dir.join("..data")).unwrap(), first);
        // New payload: swapped, old timestamp dir and vanished names removed.
        let mut p2 = Payload::new();
        p2.insert("valkey.conf".into(), entry("port 7001\n", 0o644));
        assert!(write(&dir, &p2).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.join("valkey.conf")).unwrap(),
            "port 7001\n"
        );
        assert!(!dir.join("sub").exists());
        assert!(!dir.join(&first).exists());
        assert_eq!(current(&dir), p2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_escaping_paths() {
        let dir = std::env::temp_dir().join(format!("vk-atomic-bad-{}", std::process::id()));
        let mut p = Payload::new();
        p.insert("../x".into(), entry("", 0o644));
        assert!(write(&dir, &p).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
