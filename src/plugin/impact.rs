//! `kubectl valkey impact`: which clusters a menu change would roll, before making it. Pure:
//! each cluster is resolved against the menu as it is and as it would be, with the operator's
//! own resolution (`controller::cluster::resolve`), desired member spec and spec hash
//! (`controller::cluster::build`) and its test of a current member
//! (`controller::cluster::observe::is_current`). A member that is not current is replaced; a
//! change to settings Valkey changes at runtime only is set live (`resolve::live`).

use std::fmt::Write;

use serde::Serialize;

use crate::api::{Storage, ValkeyCluster, ValkeyNode, ValkeyNodeSpec, VolumeRetention, ZoneSpread};
use crate::controller::cluster::build::{desired_node_spec, spec_hash};
use crate::controller::cluster::observe::is_current;
use crate::resolve::live::live_part;
use crate::resolve::{Menu, MenuRef, menu_refs};

/// A cluster and its members (ValkeyNodes), as read.
pub struct ClusterState<'a> {
    pub cluster: &'a ValkeyCluster,
    pub members: &'a [ValkeyNode],
}

/// What the change does to one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Outcome {
    /// Members would be replaced (rolled), one shard at a time.
    Rolls {
        members: usize,
        of: usize,
        shards: Vec<i32>,
        /// What the change does to the members' volumes, when it touches `storage`.
        #[serde(skip_serializing_if = "Option::is_none")]
        storage: Option<String>,
    },
    /// Only the volumes change (size, retention): applied to the claims live, no member
    /// replaced (with any live settings that change too).
    Volumes { storage: String },
    /// Only settings Valkey changes at runtime change: set on the members with `CONFIG SET`,
    /// no member replaced.
    Live { settings: String },
    /// The cluster would stop at Blocked (nothing that runs is touched).
    Blocks { message: String },
    /// It would unblock (it is Blocked now).
    Unblocks { members: usize },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterImpact {
    pub namespace: String,
    pub name: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl ClusterImpact {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    pub fn rolls(&self) -> bool {
        matches!(self.outcome, Outcome::Rolls { .. })
    }
}

/// The whole answer: every cluster the change affects, and the order the rollouts start in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Impact {
    /// What is being changed, e.g. `ValkeyImage valkey-9-0: tag 9.0.0 -> 9.1.2`.
    pub change: String,
    pub clusters: Vec<ClusterImpact>,
    /// Rolling clusters (`<ns>/<name>`), in waves: every cluster of a wave starts together.
    pub order: Vec<Vec<String>>,
    /// How many rollouts may run at once (`None`: no limit, all at once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_rollouts: Option<usize>,
}

impl Impact {
    /// Whether anything would be replaced (the plugin's exit code says it).
    pub fn rolls(&self) -> bool {
        self.clusters.iter().any(ClusterImpact::rolls)
    }
}

/// What `after` (the menu with the change) does to each cluster, compared with `before`.
pub fn impact(
    change: String,
    clusters: &[ClusterState<'_>],
    before: &impl Menu,
    after: &impl Menu,
    max_concurrent_rollouts: Option<usize>,
) -> Impact {
    let mut out: Vec<ClusterImpact> = clusters
        .iter()
        .filter_map(|c| cluster_impact(c, before, after))
        .collect();
    out.sort_by_key(ClusterImpact::key);
    let rolling: Vec<String> = out
        .iter()
        .filter(|c| c.rolls())
        .map(ClusterImpact::key)
        .collect();
    Impact {
        change,
        order: rollout_order(rolling, max_concurrent_rollouts),
        clusters: out,
        max_concurrent_rollouts,
    }
}

/// The waves in which rollouts start. Without a limit every cluster reconciles on its own, so
/// all start at once; the operator's `maxConcurrentRollouts` starts them `limit` at a time (in
/// the order the operator reconciles them; this lists them by name).
pub fn rollout_order(rolling: Vec<String>, limit: Option<usize>) -> Vec<Vec<String>> {
    if rolling.is_empty() {
        return Vec::new();
    }
    match limit {
        None | Some(0) => vec![rolling],
        Some(n) => rolling.chunks(n).map(<[String]>::to_vec).collect(),
    }
}

/// The desired members' spec hash, and their spec.
fn desired_hash(
    state: &ClusterState<'_>,
    menu: &impl Menu,
) -> Result<(String, ValkeyNodeSpec), crate::resolve::ResolveError> {
    let running = state.members.iter().map(|n| n.spec.version.as_str());
    let resolved = crate::controller::cluster::resolve(state.cluster, menu, running)?;
    let spec = desired_node_spec(state.cluster, &resolved.config, ZoneSpread::BestEffort);
    Ok((spec_hash(&spec), spec))
}

/// The live settings (`resolve::live`) whose values differ between two desired member specs,
/// in words; None when none do.
pub fn live_change(before: &ValkeyNodeSpec, after: &ValkeyNodeSpec) -> Option<String> {
    let was = live_part(&after.version, &before.valkey);
    let changed: Vec<String> = live_part(&after.version, &after.valkey)
        .into_iter()
        .filter(|(k, v)| was.get(k) != Some(v))
        .map(|(k, v)| {
            let from = was.get(&k).map_or("(unset)", String::as_str);
            format!("{k} {from} -> {v}")
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "settings set live with CONFIG SET, no member replaced: {}",
            changed.join(", ")
        )
    })
}

/// What going from `before` to `after` does to a cluster's volumes, in words; None when the
/// storage is the same.
pub fn storage_change(before: Option<&Storage>, after: Option<&Storage>) -> Option<String> {
    let class = |s: &Storage| {
        s.storage_class_name
            .clone()
            .unwrap_or_else(|| "the default class".into())
    };
    let mut what = Vec::new();
    match (before, after) {
        (None, None) => return None,
        (None, Some(a)) => what.push(format!("members get volumes of {} ({})", a.size, class(a))),
        (Some(_), None) => what.push("members lose their volumes (memory-only)".to_string()),
        (Some(b), Some(a)) => {
            if b.storage_class_name != a.storage_class_name {
                what.push(format!("volumes move to {}", class(a)));
            }
            if b.size != a.size {
                what.push(format!(
                    "volumes {} -> {} (grown online where the class allows expansion; no member replaced)",
                    b.size, a.size
                ));
            }
            if b.retention() != a.retention() {
                what.push(format!(
                    "when the cluster is deleted its volumes are {} (set on the claims live)",
                    match a.retention() {
                        VolumeRetention::Delete => "deleted",
                        VolumeRetention::Retain => "kept",
                    }
                ));
            }
        }
    }
    (!what.is_empty()).then(|| what.join("; "))
}

fn cluster_impact(
    state: &ClusterState<'_>,
    before: &impl Menu,
    after: &impl Menu,
) -> Option<ClusterImpact> {
    let before_hash = desired_hash(state, before);
    let after_hash = desired_hash(state, after);
    // The members a spec hash leaves behind, as a rolling replacement: None when none are.
    let rolls = |hash: &str| -> Option<Outcome> {
        let stale: Vec<&ValkeyNode> = state
            .members
            .iter()
            .filter(|n| !is_current(n, hash))
            .collect();
        if stale.is_empty() {
            return None;
        }
        let mut shards: Vec<i32> = stale.iter().map(|n| n.spec.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        Some(Outcome::Rolls {
            members: stale.len(),
            of: state.members.len(),
            shards,
            storage: None,
        })
    };
    let outcome = match (before_hash, after_hash) {
        (Ok((b, before)), Ok((a, after))) => {
            let storage = storage_change(before.storage.as_ref(), after.storage.as_ref());
            let settings = live_change(&before, &after);
            match (a == b, rolls(&a), storage, settings) {
                (
                    false,
                    Some(Outcome::Rolls {
                        members,
                        of,
                        shards,
                        ..
                    }),
                    storage,
                    _,
                ) => Outcome::Rolls {
                    members,
                    of,
                    shards,
                    storage,
                },
                (_, _, Some(storage), settings) => Outcome::Volumes {
                    storage: [Some(storage), settings]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join("; "),
                },
                (_, _, None, Some(settings)) => Outcome::Live { settings },
                _ => return None,
            }
        }
        (Ok(_), Err(e)) => Outcome::Blocks {
            message: e.to_string(),
        },
        (Err(_), Ok((a, _))) => rolls(&a).unwrap_or(Outcome::Unblocks { members: 0 }),
        (Err(b), Err(a)) if a == b => return None,
        (Err(_), Err(a)) => Outcome::Blocks {
            message: a.to_string(),
        },
    };
    Some(ClusterImpact {
        namespace: state.cluster.metadata.namespace.clone().unwrap_or_default(),
        name: state.cluster.metadata.name.clone().unwrap_or_default(),
        outcome,
    })
}

/// The clusters whose resolution reads `menu_ref` (`impact` without a proposed change: any
/// change to the image, or to a config's imageRef, resources or settings, rolls them).
pub fn readers(clusters: &[ClusterState<'_>], menu: &impl Menu, menu_ref: &MenuRef) -> Vec<String> {
    let mut keys: Vec<String> = clusters
        .iter()
        .filter(|c| {
            menu_refs(menu, &c.cluster.spec.config_ref, &c.cluster.spec.acl).contains(menu_ref)
        })
        .map(|c| {
            format!(
                "{}/{} ({} members)",
                c.cluster.metadata.namespace.clone().unwrap_or_default(),
                c.cluster.metadata.name.clone().unwrap_or_default(),
                c.members.len()
            )
        })
        .collect();
    keys.sort();
    keys
}

/// The human-readable text of an impact.
pub fn text(impact: &Impact) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "change: {}", impact.change);
    let rolling: Vec<&ClusterImpact> = impact.clusters.iter().filter(|c| c.rolls()).collect();
    if rolling.is_empty() {
        out.push_str("no cluster would roll\n");
    } else {
        let _ = writeln!(out, "{} cluster(s) would roll:", rolling.len());
        for c in &rolling {
            if let Outcome::Rolls {
                members,
                of,
                shards,
                storage,
            } = &c.outcome
            {
                let _ = writeln!(
                    out,
                    "  {:<40} {members} of {of} members replaced, shards {} one at a time{}",
                    c.key(),
                    shards
                        .iter()
                        .map(i32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    storage
                        .as_ref()
                        .map(|s| format!("; {s}"))
                        .unwrap_or_default()
                );
            }
        }
    }
    for c in &impact.clusters {
        match &c.outcome {
            Outcome::Blocks { message } => {
                let _ = writeln!(out, "  {:<40} would be Blocked: {message}", c.key());
            }
            Outcome::Unblocks { .. } => {
                let _ = writeln!(out, "  {:<40} would unblock (no member replaced)", c.key());
            }
            Outcome::Volumes { storage: changes } | Outcome::Live { settings: changes } => {
                let _ = writeln!(out, "  {:<40} {changes}", c.key());
            }
            Outcome::Rolls { .. } => {}
        }
    }
    if !impact.order.is_empty() {
        match impact.max_concurrent_rollouts {
            None => out.push_str("order: all at once (no maxConcurrentRollouts limit)\n"),
            Some(n) => {
                let _ = writeln!(out, "order: {n} at a time (maxConcurrentRollouts)");
            }
        }
        for (i, wave) in impact.order.iter().enumerate() {
            let _ = writeln!(out, "  wave {}: {}", i + 1, wave.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ValkeyClusterSpec;
    use crate::controller::cluster::build;
    use crate::resolve::MenuMap;
    use crate::resolve::chain::tests::{config, image, seed_menu};

    /// The seed menu plus a second image and config (`other` on `valkey-8`).
    fn menu() -> MenuMap {
        let mut c = seed_menu();
        c.images.insert("valkey-8".into(), image("8.1.4"));
        c.configs
            .insert("other".into(), config(None, Some("valkey-8")));
        c
    }

    fn cluster(ns: &str, name: &str, config_ref: &str) -> ValkeyCluster {
        let mut c = ValkeyCluster::new(
            name,
            ValkeyClusterSpec {
                config_ref: config_ref.into(),
                shards: 2,
                replicas_per_shard: 1,
                acl: vec![],
                tls: None,
                placement: None,
                pod_annotations: Default::default(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        c.metadata.namespace = Some(ns.into());
        c.metadata.uid = Some(format!("{ns}-{name}"));
        c
    }

    /// Its members as the operator created them from `menu`.
    fn members(cluster: &ValkeyCluster, menu: &MenuMap) -> Vec<ValkeyNode> {
        let resolved = crate::controller::cluster::resolve(cluster, menu, []).unwrap();
        let spec = build::desired_node_spec(cluster, &resolved.config, ZoneSpread::BestEffort);
        (0..2)
            .flat_map(|shard| (0..2).map(move |i| (shard, i)))
            .map(|(shard, i)| {
                let name = format!("{}-{shard}-{i}", cluster.metadata.name.as_ref().unwrap());
                build::node(cluster, &name, shard, &spec).unwrap()
            })
            .collect()
    }

    fn run(before: &MenuMap, after: &MenuMap, limit: Option<usize>) -> Impact {
        let clusters = [
            cluster("team-a", "large-1", "large"),
            cluster("team-b", "standard-1", "standard"),
            cluster("team-c", "other-1", "other"),
        ];
        let members: Vec<Vec<ValkeyNode>> = clusters.iter().map(|c| members(c, before)).collect();
        let states: Vec<ClusterState<'_>> = clusters
            .iter()
            .zip(&members)
            .map(|(cluster, members)| ClusterState { cluster, members })
            .collect();
        impact("test".into(), &states, before, after, limit)
    }

    #[test]
    fn repointing_an_image_rolls_every_cluster_resolving_to_it_and_no_other() {
        let before = menu();
        let mut after = before.clone();
        after.images.insert("valkey-9-0".into(), image("9.1.2"));
        let i = run(&before, &after, None);
        assert!(i.rolls());
        assert_eq!(
            i.clusters,
            [
                ClusterImpact {
                    namespace: "team-a".into(),
                    name: "large-1".into(),
                    outcome: Outcome::Rolls {
                        members: 4,
                        of: 4,
                        shards: vec![0, 1],
                        storage: None,
                    },
                },
                ClusterImpact {
                    namespace: "team-b".into(),
                    name: "standard-1".into(),
                    outcome: Outcome::Rolls {
                        members: 4,
                        of: 4,
                        shards: vec![0, 1],
                        storage: None,
                    },
                },
            ]
        );
        assert_eq!(i.order, [["team-a/large-1", "team-b/standard-1"]]);
        assert!(text(&i).contains("order: all at once"));
    }

    /// The clusters that roll, by key.
    fn rolled(before: &MenuMap, after: &MenuMap) -> Vec<String> {
        run(before, after, None)
            .clusters
            .iter()
            .filter(|c| c.rolls())
            .map(ClusterImpact::key)
            .collect()
    }

    /// The menu with `setting` of config `config` set to `value`.
    fn with_setting(menu: &MenuMap, config: &str, setting: &str, value: &str) -> MenuMap {
        let mut m = menu.clone();
        let c = m.configs.get_mut(config).unwrap();
        c.valkey.insert(setting.into(), value.into());
        m
    }

    #[test]
    fn a_restart_only_setting_changed_on_a_base_rolls_its_children_too() {
        let before = with_setting(&menu(), "standard", "databases", "16");
        let after = with_setting(&before, "standard", "databases", "8");
        assert_eq!(
            rolled(&before, &after),
            ["team-a/large-1", "team-b/standard-1"]
        );
        // A setting added rolls too, live or not (Valkey has no general way back to a default).
        let after = with_setting(&before, "standard", "hz", "20");
        assert_eq!(
            rolled(&before, &after),
            ["team-a/large-1", "team-b/standard-1"]
        );
    }

    #[test]
    fn a_live_setting_changed_on_a_base_is_set_live_where_the_child_does_not_override_it() {
        let before = menu();
        let after = with_setting(&before, "standard", "maxmemory-policy", "noeviction");
        let i = run(&before, &after, None);
        assert!(rolled(&before, &after).is_empty(), "{i:?}");
        assert_eq!(i.clusters.len(), 2, "{i:?}");
        for c in &i.clusters {
            assert_eq!(
                c.outcome,
                Outcome::Live {
                    settings: "settings set live with CONFIG SET, no member replaced: maxmemory-policy allkeys-lru -> noeviction".into()
                },
                "{}",
                c.key()
            );
        }
        assert!(text(&i).contains("maxmemory-policy allkeys-lru -> noeviction"));
        // Overridden by the child (large sets its own maxmemory): only the base's own cluster.
        let after = with_setting(&before, "standard", "maxmemory", "1gb");
        let i = run(&before, &after, None);
        let keys: Vec<String> = i.clusters.iter().map(ClusterImpact::key).collect();
        assert_eq!(keys, ["team-b/standard-1"]);
        assert!(rolled(&before, &after).is_empty());
    }

    #[test]
    fn a_storage_change_says_what_it_does_to_the_volumes_and_rolls_only_for_a_new_class() {
        use crate::api::Storage;
        let before = menu();
        let storage = |size: &str, class: Option<&str>| Storage {
            size: size.into(),
            storage_class_name: class.map(Into::into),
            when_deleted: None,
        };
        let with = |s: Storage| {
            let mut m = before.clone();
            m.configs.get_mut("standard").unwrap().storage = Some(s);
            m
        };
        // Volumes added: the members are replaced, and the text says why.
        let added = run(&before, &with(storage("1Gi", None)), None);
        assert!(added.rolls());
        assert!(
            text(&added).contains("members get volumes of 1Gi (the default class)"),
            "{}",
            text(&added)
        );
        // Growing them rolls nothing and says so.
        let grown = run(
            &with(storage("1Gi", None)),
            &with(storage("2Gi", None)),
            None,
        );
        assert!(!grown.rolls(), "{grown:?}");
        assert!(
            text(&grown).contains("volumes 1Gi -> 2Gi (grown online"),
            "{}",
            text(&grown)
        );
        // Another class cannot be had in place: members are replaced.
        let moved = run(
            &with(storage("1Gi", None)),
            &with(storage("1Gi", Some("fast"))),
            None,
        );
        assert!(moved.rolls());
        assert!(
            text(&moved).contains("volumes move to fast"),
            "{}",
            text(&moved)
        );
    }

    #[test]
    fn an_acl_change_or_no_change_rolls_nothing() {
        let before = menu();
        let mut after = before.clone();
        after.configs.get_mut("standard").unwrap().acl = Some(vec![]);
        let i = run(&before, &after, None);
        assert!(!i.rolls());
        assert!(i.order.is_empty());
        assert!(text(&i).contains("no cluster would roll"));
        assert!(!run(&before, &before, None).rolls());
    }

    #[test]
    fn a_change_that_breaks_resolution_blocks_and_rolls_nothing() {
        let before = menu();
        let mut after = before.clone();
        // Valkey 9 members cannot roll back to 8: the operator refuses, the cluster blocks.
        after.images.insert("valkey-9-0".into(), image("8.1.4"));
        let clusters = [cluster("team-a", "large-1", "large")];
        let mut nodes = members(&clusters[0], &before);
        for n in &mut nodes {
            n.spec.version = "9.0.0".into();
        }
        let states = [ClusterState {
            cluster: &clusters[0],
            members: &nodes,
        }];
        let i = impact("test".into(), &states, &before, &after, None);
        assert!(!i.rolls());
        assert!(
            matches!(&i.clusters[0].outcome, Outcome::Blocks { message } if message.contains("older major version"))
        );
    }

    #[test]
    fn a_rollout_limit_starts_clusters_in_waves_in_the_same_order() {
        let before = menu();
        let mut after = before.clone();
        after.images.insert("valkey-9-0".into(), image("9.1.2"));
        let i = run(&before, &after, Some(1));
        assert_eq!(i.order, [["team-a/large-1"], ["team-b/standard-1"]]);
        assert!(text(&i).contains("1 at a time"));
    }

    #[test]
    fn without_a_change_the_readers_of_the_object_are_listed() {
        let menu = menu();
        let clusters = [
            cluster("team-a", "large-1", "large"),
            cluster("team-c", "other-1", "other"),
        ];
        let states: Vec<ClusterState<'_>> = clusters
            .iter()
            .map(|cluster| ClusterState {
                cluster,
                members: &[],
            })
            .collect();
        assert_eq!(
            readers(&states, &menu, &MenuRef::Config("standard".into())),
            ["team-a/large-1 (0 members)"]
        );
    }
}
