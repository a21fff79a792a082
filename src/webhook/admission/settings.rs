//! Valkey setting names per version (`data/valkey-settings.txt`, taken from the pinned
//! valkey-server builds with `CONFIG GET *`; regenerate with `e2e/tools/valkey-settings.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use super::role::suggestions;

const TABLE: &str = include_str!("../data/valkey-settings.txt");

/// Setting names by `major.minor`.
pub fn table() -> &'static BTreeMap<String, BTreeSet<String>> {
    static TABLE_CELL: OnceLock<BTreeMap<String, BTreeSet<String>>> = OnceLock::new();
    TABLE_CELL.get_or_init(|| {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in TABLE.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(v) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = Some(v.to_owned());
            } else if let Some(v) = &current {
                out.entry(v.clone()).or_default().insert(line.to_owned());
            }
        }
        out
    })
}

/// Warnings for settings the Valkey `version` (an image's `x.y.z`) does not know; nothing
/// when the version is not in the table (it cannot be checked).
pub fn unknown_settings<'a>(
    version: &str,
    keys: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    let Some(known) = table().get(&minor) else {
        return Vec::new();
    };
    keys.into_iter()
        .filter(|k| !known.contains(*k))
        .map(|k| {
            let hint = match suggestions(k, known).as_slice() {
                [] => String::new(),
                close => format!(" (did you mean {}?)", close.join(" or ")),
            };
            format!(
                "setting {k:?} is not known to Valkey {version}{hint}: members would refuse to start with it"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_both_pinned_versions() {
        for v in ["9.0", "9.1"] {
            let known = &table()[v];
            assert!(known.contains("maxmemory") && known.contains("maxmemory-policy"));
            assert!(known.len() > 200, "{v}: {}", known.len());
        }
        // A real difference between the builds.
        assert!(table()["9.1"].contains("hash-seed") && !table()["9.0"].contains("hash-seed"));
    }

    #[test]
    fn unknown_settings_are_warned_with_a_suggestion() {
        let keys = ["maxmemory".to_string(), "maxmemory-polcy".to_string()];
        let w = unknown_settings("9.0.0", &keys);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("\"maxmemory-polcy\""), "{}", w[0]);
        assert!(w[0].contains("maxmemory-policy"), "{}", w[0]);
        let w = unknown_settings("9.0.0", &["hash-seed".to_string()]);
        assert!(w[0].contains("9.0.0"), "{w:?}");
        assert!(unknown_settings("9.1.2", &["hash-seed".to_string()]).is_empty());
        assert!(unknown_settings("7.2.4", &["anything".to_string()]).is_empty());
    }
}
