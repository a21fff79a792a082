//! Valkey setting names per version (`data/valkey-settings.txt`, taken from the pinned
//! valkey-server builds with `CONFIG GET *`; regenerate with `e2e/tools/valkey-settings.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use super::role::suggestions;

const TABLE: &str = include_str!("../data/valkey-settings.txt");
/// Settings whose value is one of a fixed set, per version (`data/valkey-setting-values.txt`,
/// as the pinned builds state it when refusing a value; regenerate with
/// `e2e/tools/valkey-setting-values.sh`).
const VALUES: &str = include_str!("../data/valkey-setting-values.txt");

/// For each `major.minor`, each fixed-set setting and the values Valkey accepts.
pub fn values_table() -> &'static BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    static CELL: OnceLock<BTreeMap<String, BTreeMap<String, BTreeSet<String>>>> = OnceLock::new();
    CELL.get_or_init(|| {
        let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in VALUES.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(v) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = Some(v.to_owned());
            } else if let (Some(v), Some((name, values))) = (&current, line.split_once(" = ")) {
                let values = values.split('|').map(str::to_owned).collect();
                out.entry(v.clone())
                    .or_default()
                    .insert(name.to_owned(), values);
            }
        }
        out
    })
}

/// Why members of Valkey `version` would refuse to start with `settings`: a fixed-set setting
/// (yes/no, a policy) given a value outside its set. Valkey compares case-insensitively; a
/// value of several words (settings that take flags) is checked word by word. Nothing when
/// the version is not in the table.
pub fn refused_values(version: &str, settings: &BTreeMap<String, String>) -> Vec<String> {
    let Some(known) = values_table().get(&crate::resolve::live::major_minor(version)) else {
        return Vec::new();
    };
    settings
        .iter()
        .filter_map(|(name, value)| {
            let allowed = known.get(name)?;
            let words: Vec<String> = value.split_whitespace().map(str::to_lowercase).collect();
            let fine = !words.is_empty() && words.iter().all(|w| allowed.contains(w));
            (!fine).then(|| {
                format!(
                    "setting {name:?} is {value:?}, which Valkey {version} refuses (members would not start): use one of {}",
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

/// Setting names by `major.minor`.
pub fn table() -> &'static BTreeMap<String, BTreeSet<String>> {
    static TABLE_CELL: OnceLock<BTreeMap<String, BTreeSet<String>>> = OnceLock::new();
    TABLE_CELL.get_or_init(|| crate::resolve::live::name_sections(TABLE))
}

/// Warnings for settings the Valkey `version` (an image's `x.y.z`) does not know; nothing
/// when the version is not in the table (it cannot be checked).
pub fn unknown_settings<'a>(
    version: &str,
    keys: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let Some(known) = table().get(&crate::resolve::live::major_minor(version)) else {
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
    fn values_valkey_refuses_are_named_with_the_ones_it_takes() {
        let settings = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let refused = refused_values(
            "9.0.0",
            &settings(&[
                ("maxmemory-policy", "bogus"),
                ("appendonly", "maybe"),
                ("appendfsync", ""),
                ("hz", "fast"),
            ]),
        );
        assert_eq!(refused.len(), 3, "{refused:?}");
        // By name: appendfsync, appendonly, maxmemory-policy.
        assert!(
            refused[0].starts_with("setting \"appendfsync\" is \"\""),
            "{}",
            refused[0]
        );
        assert!(refused[1].contains("use one of no, yes"), "{}", refused[1]);
        assert!(refused[2].contains("allkeys-lru") && refused[2].contains("\"bogus\""));
        for fine in [
            ("maxmemory-policy", "allkeys-lru"),
            ("maxmemory-policy", "AllKeys-LRU"),
            ("appendonly", "yes"),
            ("appendfsync", "everysec"),
            ("hz", "fast"),
            ("unknown-setting", "whatever"),
        ] {
            assert!(
                refused_values("9.1.2", &settings(&[fine])).is_empty(),
                "{fine:?}"
            );
        }
        assert!(refused_values("7.2.4", &settings(&[("appendonly", "maybe")])).is_empty());
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
