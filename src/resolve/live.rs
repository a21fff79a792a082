//! Which Valkey settings a running member takes without a restart (pure). A ValkeyConfig
//! change to those only is applied with `CONFIG SET` on the members; anything else replaces
//! them. The restart-only settings are those the pinned builds refuse to change at runtime
//! (`webhook/data/valkey-restart-settings.txt`, regenerate with
//! `e2e/tools/valkey-restart-settings.sh`); a version the table does not know is treated as
//! needing a restart for every setting.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

const RESTART_ONLY: &str = include_str!("../webhook/data/valkey-restart-settings.txt");

/// The `major.minor` sections of a per-version name table (`[9.1]` then one name per line;
/// `#` comments), as the data files under `webhook/data/` are written.
pub fn name_sections(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().map(str::trim) {
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
}

/// `major.minor` of a Valkey version (`9.1.2` -> `9.1`).
pub fn major_minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

fn restart_only() -> &'static BTreeMap<String, BTreeSet<String>> {
    static CELL: OnceLock<BTreeMap<String, BTreeSet<String>>> = OnceLock::new();
    CELL.get_or_init(|| name_sections(RESTART_ONLY))
}

/// Settings Valkey would change at runtime that the operator still changes by replacing the
/// members: whether a member keeps its data across a restart is decided from its spec's
/// `appendonly` (see durability), so a member must never run with another value than its
/// spec says (turned off live, a restart would load an append-only file that stopped being
/// written, under the member's old identity).
const REPLACED_ON_CHANGE: &[&str] = &["appendonly"];

/// Whether members of Valkey `version` need a restart to change setting `name`.
pub fn needs_restart(version: &str, name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    REPLACED_ON_CHANGE.contains(&name.as_str())
        || restart_only()
            .get(&major_minor(version))
            .is_none_or(|names| names.contains(&name))
}

/// The settings of `settings` that a running member of `version` changes with `CONFIG SET`.
pub fn live_part(version: &str, settings: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    settings
        .iter()
        .filter(|(name, _)| !needs_restart(version, name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `settings` with every live value blanked (the names stay): two member specs that differ
/// only there are the same member, whose values are set live. Adding or removing a setting
/// still counts (Valkey has no "back to the default" for every setting).
pub fn without_live_values(
    version: &str,
    settings: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    settings
        .iter()
        .map(|(k, v)| {
            let kept = if needs_restart(version, k) {
                v.clone()
            } else {
                String::new()
            };
            (k.clone(), kept)
        })
        .collect()
}

/// What a member started with `started` needs set live to run with `wanted` (both its
/// settings maps, same names): the live settings whose values differ, in name order. A
/// restart-only difference is not here: such a member is replaced.
pub fn to_set(
    version: &str,
    started: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    live_part(version, wanted)
        .into_iter()
        .filter(|(k, v)| started.get(k) != Some(v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_table_knows_both_pinned_versions_and_what_cannot_change_at_runtime() {
        for v in ["9.0.0", "9.1.2"] {
            assert!(needs_restart(v, "databases"), "{v}");
            assert!(needs_restart(v, "cluster-enabled"), "{v}");
            assert!(
                needs_restart(v, "DATABASES"),
                "{v}: names are case-insensitive"
            );
            assert!(!needs_restart(v, "maxmemory-policy"), "{v}");
            assert!(!needs_restart(v, "maxmemory"), "{v}");
            assert!(!needs_restart(v, "appendfsync"), "{v}");
            // Valkey takes it live; the operator's durability decisions read it from the spec.
            assert!(needs_restart(v, "appendonly"), "{v}");
        }
    }

    #[test]
    fn a_version_the_table_does_not_know_needs_a_restart_for_everything() {
        assert!(needs_restart("8.0.1", "maxmemory-policy"));
        assert!(needs_restart("", "maxmemory"));
        let s = map(&[("maxmemory-policy", "allkeys-lru")]);
        assert!(live_part("7.2.4", &s).is_empty());
        assert_eq!(without_live_values("7.2.4", &s), s);
    }

    #[test]
    fn live_values_are_blanked_and_restart_only_ones_kept() {
        let s = map(&[("maxmemory-policy", "allkeys-lru"), ("databases", "4")]);
        assert_eq!(
            without_live_values("9.1.2", &s),
            map(&[("maxmemory-policy", ""), ("databases", "4")])
        );
        // Only the live value changed: same blanked map (no replacement).
        let changed = map(&[("maxmemory-policy", "noeviction"), ("databases", "4")]);
        assert_eq!(
            without_live_values("9.1.2", &s),
            without_live_values("9.1.2", &changed)
        );
        // A restart-only value or a new name: different.
        let restart = map(&[("maxmemory-policy", "allkeys-lru"), ("databases", "8")]);
        assert_ne!(
            without_live_values("9.1.2", &s),
            without_live_values("9.1.2", &restart)
        );
        let added = map(&[
            ("maxmemory-policy", "allkeys-lru"),
            ("databases", "4"),
            ("hz", "20"),
        ]);
        assert_ne!(
            without_live_values("9.1.2", &s),
            without_live_values("9.1.2", &added)
        );
    }

    #[test]
    fn to_set_is_the_live_values_that_differ_from_what_the_member_started_with() {
        let started = map(&[
            ("maxmemory-policy", "allkeys-lru"),
            ("hz", "10"),
            ("databases", "4"),
        ]);
        let wanted = map(&[
            ("maxmemory-policy", "noeviction"),
            ("hz", "10"),
            ("databases", "8"),
        ]);
        assert_eq!(
            to_set("9.1.2", &started, &wanted),
            vec![("maxmemory-policy".to_string(), "noeviction".to_string())]
        );
        assert!(to_set("9.1.2", &started, &started).is_empty());
    }

    #[test]
    fn name_sections_reads_versions_and_skips_comments() {
        let t = name_sections("# c\n[9.0]\na\nb\n\n[9.1]\n# x\nc\n");
        assert_eq!(t["9.0"].len(), 2);
        assert!(t["9.1"].contains("c"));
    }
}
