//! Repoints that move running clusters to an older Valkey: a ValkeyImage whose `version`
//! goes down, or a ValkeyConfig whose `imageRef`/`baseRef` now resolves to an older image.
//!
//! Rolling replacement starts each new member as a replica of the shard's current primary and
//! lets it full-sync before failing over. That works downwards only while the older server can
//! load what the newer one sends:
//!
//! - **Within a major version** (9.1.2 -> 9.0.0): the replication format (RDB 80 for every
//!   Valkey 9 release) is the same. Accepted **with a warning** naming the clusters and the
//!   versions, so the platform team is told before every member is replaced.
//! - **Across a major version** (9.x -> 8.x or older): Valkey 9 writes RDB format 80, which
//!   Valkey 8 and earlier refuse ("Can't handle RDB format version 80"); a replica that tries
//!   has already emptied itself. The replacement members would never sync and the rollout would
//!   stall with every shard one copy short. **Denied**, naming the clusters.
//!
//! Only clusters whose resolved image this write changes are considered; `from` is the newest
//! version any of the cluster's members runs (status), or what it resolved to before the write.

use crate::driver::parse::Version;
use crate::resolve::{Menu, resolve_config};

use super::ClusterSummary;

/// One cluster this write would move to an older Valkey.
#[derive(Debug, PartialEq, Eq)]
pub struct Downgrade<'a> {
    pub cluster: &'a ClusterSummary,
    pub from: Version,
    pub to: Version,
}

impl Downgrade<'_> {
    /// A replica of `to` cannot load what a primary of `from` sends.
    pub fn crosses_major(&self) -> bool {
        self.to.major < self.from.major
    }
}

/// The clusters that `after` (the menu with this write) moves to an older Valkey than they run.
pub fn downgrades<'a>(
    before: &impl Menu,
    after: &impl Menu,
    clusters: &'a [ClusterSummary],
) -> Vec<Downgrade<'a>> {
    clusters
        .iter()
        .filter_map(|cluster| {
            let old = resolved_version(before, &cluster.config_ref);
            let new = resolved_version(after, &cluster.config_ref)?;
            if old.as_ref() == Some(&new) {
                return None;
            }
            let running = cluster
                .versions
                .iter()
                .filter_map(|v| Version::parse(v))
                .max();
            let from = running.or(old)?;
            (new < from).then_some(Downgrade {
                cluster,
                from,
                to: new,
            })
        })
        .collect()
}

/// The Valkey version a config resolves to, when it resolves.
fn resolved_version(menu: &impl Menu, config: &str) -> Option<Version> {
    resolve_config(menu, config)
        .ok()
        .and_then(|r| Version::parse(&r.image.version))
}

/// `2 ValkeyClusters (9.1.2 -> 9.0.0)`: counted with the version moves, never named (see
/// [`super::count_clusters`]).
fn describe(moves: &[&Downgrade]) -> String {
    let versions: std::collections::BTreeSet<String> = moves
        .iter()
        .map(|m| format!("{} -> {}", m.from, m.to))
        .collect();
    let versions: Vec<String> = versions.into_iter().collect();
    format!(
        "{} ({})",
        super::count_clusters(moves.len()),
        versions.join(", ")
    )
}

/// What the webhook says about `moves`, made by a write to `subject` (e.g. `ValkeyImage "x"`):
/// a denial when any crosses a major version, else a warning when there are any. `hint` says
/// how to list the clusters ([`super::impact_hint`]).
pub fn verdict(subject: &str, hint: &str, moves: &[Downgrade]) -> Verdict {
    let (refused, warned): (Vec<&Downgrade>, Vec<&Downgrade>) =
        moves.iter().partition(|m| m.crosses_major());
    if !refused.is_empty() {
        return Verdict::Deny(format!(
            "{subject} would roll {} to an older major version of Valkey: a replica of the older version cannot load the data a primary of the newer one sends (Valkey 9 replicates in RDB format 80, which Valkey 8 and earlier refuse), so every replacement member would fail to sync and the rollout would stall with each shard one copy short. Keep the major version here; to run the older build, publish it as a new ValkeyImage and a ValkeyConfig for new clusters ({hint})",
            describe(&refused)
        ));
    }
    if warned.is_empty() {
        return Verdict::Fine;
    }
    Verdict::Warn(format!(
        "{subject} rolls {} down to an older Valkey: every member is replaced (data is replicated to the older build first); settings only the newer version knows make the new members fail to start. Check that this is intended ({hint})",
        describe(&warned)
    ))
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    Warn(String),
    Deny(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyConfigSpec, ValkeyImageSpec};
    use crate::resolve::MenuMap;

    fn image(version: &str) -> ValkeyImageSpec {
        ValkeyImageSpec {
            image_pull_secrets: vec![],
            repository: "valkey/valkey".into(),
            tag: version.into(),
            digest: None,
            version: version.into(),
        }
    }

    fn config(image_ref: &str) -> ValkeyConfigSpec {
        ValkeyConfigSpec {
            base_ref: None,
            image_ref: Some(image_ref.into()),
            resources: None,
            valkey: Default::default(),
            acl: None,
            scheduling: None,
            storage: None,
            metrics: None,
            external_access: None,
        }
    }

    fn menu(version: &str) -> MenuMap {
        let mut m = MenuMap::default();
        m.images.insert("valkey".into(), image(version));
        m.configs.insert("standard".into(), config("valkey"));
        m
    }

    fn cluster(name: &str, config: &str, versions: &[&str]) -> ClusterSummary {
        ClusterSummary {
            namespace: "shop".into(),
            name: name.into(),
            config_ref: config.into(),
            versions: versions.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_patch_or_minor_downgrade_is_a_warning_naming_cluster_and_versions() {
        let clusters = [cluster("cart", "standard", &["9.1.2", "9.1.2"])];
        let moves = downgrades(&menu("9.1.2"), &menu("9.0.0"), &clusters);
        assert_eq!(moves.len(), 1);
        let Verdict::Warn(w) = verdict("ValkeyImage \"valkey\"", "the hint", &moves) else {
            panic!("a warning");
        };
        assert!(w.contains("1 ValkeyCluster (9.1.2 -> 9.0.0)"), "{w}");
        assert!(w.contains("(the hint)"), "{w}");
        assert!(!w.contains("shop") && !w.contains("cart"), "no names: {w}");
    }

    #[test]
    fn a_major_downgrade_is_refused_with_the_reason() {
        let clusters = [
            cluster("cart", "standard", &["9.0.0"]),
            cluster("other", "elsewhere", &["9.0.0"]),
        ];
        let moves = downgrades(&menu("9.0.0"), &menu("8.1.4"), &clusters);
        let Verdict::Deny(d) = verdict("ValkeyImage \"valkey\"", "", &moves) else {
            panic!("a denial");
        };
        assert!(d.contains("1 ValkeyCluster (9.0.0 -> 8.1.4)"), "{d}");
        assert!(d.contains("RDB format 80"), "{d}");
        assert!(
            !d.contains("other") && !d.contains("shop") && !d.contains("cart"),
            "{d}"
        );
    }

    #[test]
    fn upgrades_and_unrelated_edits_say_nothing() {
        let clusters = [cluster("cart", "standard", &["9.0.0"])];
        assert!(downgrades(&menu("9.0.0"), &menu("9.1.2"), &clusters).is_empty());
        assert!(downgrades(&menu("9.0.0"), &menu("9.0.0"), &clusters).is_empty());
        assert_eq!(verdict("x", "", &[]), Verdict::Fine);
    }

    #[test]
    fn the_running_version_counts_when_a_rollout_is_reverted() {
        // Mid-rollout 9.0.0 -> 9.1.2, the image is pointed back: members on 9.1.2 go down.
        let clusters = [cluster("cart", "standard", &["9.0.0", "9.1.2"])];
        let moves = downgrades(&menu("9.1.2"), &menu("9.0.0"), &clusters);
        assert_eq!(moves[0].from, Version::new(9, 1, 2));
        // A cluster that has no status yet is judged by what it resolved to.
        let fresh = [cluster("new", "standard", &[])];
        assert_eq!(
            downgrades(&menu("9.1.2"), &menu("9.0.0"), &fresh)[0].from,
            Version::new(9, 1, 2)
        );
    }

    #[test]
    fn a_config_repoint_to_another_image_is_judged_the_same_way() {
        let mut before = menu("9.1.2");
        before.images.insert("old".into(), image("8.1.4"));
        let mut after = before.clone();
        after.configs.insert("standard".into(), config("old"));
        let clusters = [cluster("cart", "standard", &["9.1.2"])];
        assert!(matches!(
            verdict(
                "ValkeyConfig \"standard\"",
                "",
                &downgrades(&before, &after, &clusters)
            ),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn many_clusters_are_counted_not_named() {
        let clusters: Vec<_> = (0..8)
            .map(|i| cluster(&format!("c{i}"), "standard", &["9.1.2"]))
            .collect();
        let moves = downgrades(&menu("9.1.2"), &menu("9.1.0"), &clusters);
        let Verdict::Warn(w) = verdict("ValkeyImage \"valkey\"", "", &moves) else {
            panic!("a warning");
        };
        assert!(w.contains("8 ValkeyClusters (9.1.2 -> 9.1.0)"), "{w}");
        assert!(!w.contains("shop") && !w.contains("c0"), "{w}");
    }
}
