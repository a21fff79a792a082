//! DELETE of a menu object that clusters still use: allowed (the platform team may mean it;
//! the clusters keep running and are Blocked until it is back), with a warning saying how
//! many clusters it blocks and how to list them. The count, not the names: a reply names
//! nothing of other tenants (see docs/security.md).

use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use super::{ClusterSummary, Clusters, MenuSnapshot, allow_with_warnings, impact_hint};
use crate::api::image::IMAGE_IN_USE_FINALIZER;
use crate::resolve::{MenuMap, resolve_config, resolve_roles};

/// The menu kinds a deletion is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MenuKind {
    Config,
    Image,
    Role,
}

impl MenuKind {
    fn name(self) -> (&'static str, &'static str) {
        match self {
            MenuKind::Config => ("ValkeyConfig", "config"),
            MenuKind::Image => ("ValkeyImage", "image"),
            MenuKind::Role => ("ValkeyRole", "role"),
        }
    }
}

/// How many of `clusters` resolve against `menu` and would not once `name` of `kind` is gone.
pub fn blocked_by_deletion(
    menu: &MenuMap,
    clusters: &[ClusterSummary],
    kind: MenuKind,
    name: &str,
) -> usize {
    let mut after = menu.clone();
    match kind {
        MenuKind::Config => after.configs.remove(name).map(|_| ()),
        MenuKind::Image => after.images.remove(name).map(|_| ()),
        MenuKind::Role => after.roles.remove(name).map(|_| ()),
    };
    clusters
        .iter()
        .filter(|c| resolves(menu, c) && !resolves(&after, c))
        .count()
}

/// The cluster's config chain, image and the roles its config binds resolve.
fn resolves(menu: &MenuMap, cluster: &ClusterSummary) -> bool {
    resolve_config(menu, &cluster.config_ref)
        .and_then(|r| resolve_roles(menu, &r.acl))
        .is_ok()
}

/// The warning for deleting `name`, when clusters depend on it.
pub fn deletion_warning(
    menu: &MenuMap,
    clusters: &[ClusterSummary],
    kind: MenuKind,
    name: &str,
) -> Option<String> {
    let blocked = blocked_by_deletion(menu, clusters, kind, name);
    let (kind_name, plugin_kind) = kind.name();
    if kind == MenuKind::Image {
        let naming: Vec<&str> = menu
            .configs
            .iter()
            .filter(|(_, config)| config.image_ref.as_deref() == Some(name))
            .map(|(config, _)| config.as_str())
            .collect();
        if !naming.is_empty() {
            return Some(format!(
                "ValkeyImage {name:?} is named by ValkeyConfig(s) {} (spec.imageRef): it is kept, terminating, until no config names it (finalizer {IMAGE_IN_USE_FINALIZER}); {blocked} ValkeyCluster(s) run on it; {}",
                naming.join(", "),
                impact_hint(plugin_kind, name)
            ));
        }
    }
    (blocked > 0).then(|| {
        format!(
            "{kind_name} {name:?} is in use: {blocked} ValkeyCluster(s) will be Blocked until it is back (their members keep running, failures are still handled, but nothing changes); {}",
            impact_hint(plugin_kind, name)
        )
    })
}

/// The review of a DELETE: always allowed, warned when clusters depend on the object (nothing
/// said when the menu or the clusters cannot be read: a deletion is never held up by it).
pub fn review_deletion<K: Resource>(
    req: &AdmissionRequest<K>,
    menu: &MenuSnapshot,
    clusters: &Clusters,
    kind: MenuKind,
) -> AdmissionResponse {
    let warning = match (menu, clusters) {
        (Ok(menu), Ok(clusters)) => deletion_warning(menu, clusters, kind, &req.name),
        _ => None,
    };
    allow_with_warnings(req, warning.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyConfigSpec, ValkeyImageSpec};

    fn menu() -> MenuMap {
        let mut m = MenuMap::default();
        m.images.insert(
            "valkey-9".into(),
            serde_json::from_value::<ValkeyImageSpec>(serde_json::json!({
                "repository": "valkey/valkey", "tag": "9.0.0", "version": "9.0.0"
            }))
            .unwrap(),
        );
        let config = |json| serde_json::from_value::<ValkeyConfigSpec>(json).unwrap();
        m.configs.insert(
            "base".into(),
            config(serde_json::json!({"imageRef": "valkey-9"})),
        );
        m.configs.insert(
            "large".into(),
            config(serde_json::json!({"baseRef": "base"})),
        );
        m.configs.insert(
            "other".into(),
            config(serde_json::json!({"imageRef": "valkey-9"})),
        );
        m
    }

    fn cluster(config: &str) -> ClusterSummary {
        ClusterSummary {
            namespace: "team-a".into(),
            name: "orders".into(),
            config_ref: config.into(),
            usernames: vec![],
            versions: vec![],
        }
    }

    #[test]
    fn deleting_what_clusters_resolve_through_warns_with_a_count_and_no_names() {
        let clusters = [cluster("large"), cluster("large"), cluster("other")];
        // The base of the chain, and the image every config reaches.
        assert_eq!(
            blocked_by_deletion(&menu(), &clusters, MenuKind::Config, "base"),
            2
        );
        assert_eq!(
            blocked_by_deletion(&menu(), &clusters, MenuKind::Image, "valkey-9"),
            3
        );
        let w = deletion_warning(&menu(), &clusters, MenuKind::Config, "base").unwrap();
        assert!(
            w.starts_with("ValkeyConfig \"base\" is in use: 2 ValkeyCluster(s)"),
            "{w}"
        );
        assert!(w.contains("kubectl valkey impact config base"), "{w}");
        assert!(!w.contains("team-a") && !w.contains("orders"), "{w}");
    }

    #[test]
    fn deleting_what_no_cluster_uses_says_nothing() {
        let clusters = [cluster("other")];
        assert_eq!(
            deletion_warning(&menu(), &clusters, MenuKind::Config, "large"),
            None
        );
        // A cluster already Blocked is not blocked by the deletion.
        let blocked = [cluster("missing")];
        assert_eq!(
            deletion_warning(&menu(), &blocked, MenuKind::Config, "base"),
            None
        );
    }

    #[test]
    fn deleting_an_image_a_config_names_says_it_is_kept_and_by_which_configs() {
        let w =
            deletion_warning(&menu(), &[cluster("large")], MenuKind::Image, "valkey-9").unwrap();
        assert!(
            w.starts_with(
                "ValkeyImage \"valkey-9\" is named by ValkeyConfig(s) base, other (spec.imageRef): it is kept, terminating, until no config names it (finalizer valkey.gomomento.com/image-in-use); 1 ValkeyCluster(s) run on it;"
            ),
            "{w}"
        );
        // Named by no config: deleted at once, nothing to say.
        let mut unnamed = menu();
        unnamed.configs.clear();
        assert_eq!(
            deletion_warning(&unnamed, &[], MenuKind::Image, "valkey-9"),
            None
        );
    }
}
