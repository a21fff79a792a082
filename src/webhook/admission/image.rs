//! ValkeyImage: a write that moves running clusters to an older Valkey (the `version` of an
//! image they use goes down, or an image they wait for reappears older) is warned about within
//! a major version and denied across one; see [`super::downgrade`]. A `version` below Momento
//! v0.9's floor (`MAJOR.MINOR.PATCH`, at least 9.0.1) is warned about, or refused under the
//! operator setting `versionFloor: enforce`. Everything else about an
//! image is checked by its CRD schema. A menu or cluster list that cannot be read never fails
//! the request: accepted with a warning.

use kube::ResourceExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::downgrade::{Verdict, downgrades, verdict};
use super::{Clusters, MenuSnapshot, allow_with_warnings, deny};
use crate::api::ValkeyImage;
use crate::settings::VersionFloor;

/// The rule.
pub fn validate(
    req: &AdmissionRequest<ValkeyImage>,
    menu: &MenuSnapshot,
    clusters: &Clusters,
    floor: VersionFloor,
) -> AdmissionResponse {
    if req.operation == Operation::Delete {
        let kind = super::dependants::MenuKind::Image;
        return super::dependants::review_deletion(req, menu, clusters, kind);
    }
    let Some(image) = req.object.as_ref() else {
        return allow_with_warnings(req, vec![]);
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow_with_warnings(req, vec![]);
    }
    if let Some(problem) = too_old(&image.spec.version) {
        return deny(req, problem, vec![]);
    }
    let mut warnings = Vec::new();
    match below_floor(&image.spec.version, floor) {
        Some(FloorVerdict::Refuse(problem)) => return deny(req, problem, vec![]),
        Some(FloorVerdict::Warn(warning)) => warnings.push(warning),
        None => {}
    }
    let name = image.name_any();
    let (before, clusters) = match (menu, clusters) {
        (Ok(before), Ok(clusters)) => (before, clusters),
        (Err(error), _) | (_, Err(error)) => {
            warnings.push(format!(
                "not checked for clusters it would move to an older Valkey (the webhook could not read the menu or the ValkeyClusters: {error})"
            ));
            return allow_with_warnings(req, warnings);
        }
    };
    let mut after = before.clone();
    after.images.insert(name.clone(), image.spec.clone());
    let moves = downgrades(before, &after, clusters);
    let hint = super::impact_hint("image", &name);
    match verdict(&format!("ValkeyImage {name:?}"), &hint, &moves) {
        Verdict::Fine => allow_with_warnings(req, warnings),
        Verdict::Warn(w) => {
            warnings.push(w);
            allow_with_warnings(req, warnings)
        }
        Verdict::Deny(message) => deny(req, message, warnings),
    }
}

/// Momento's operator v0.9's floor: `spec.version` is `MAJOR.MINOR.PATCH`, at least this.
pub const VERSION_FLOOR: (u64, u64, u64) = (9, 0, 1);

/// What the version floor says about an image's `version`.
#[derive(Debug, PartialEq, Eq)]
pub enum FloorVerdict {
    Warn(String),
    Refuse(String),
}

/// `version` against [`VERSION_FLOOR`] under the operator's `versionFloor` setting: None when
/// it is `MAJOR.MINOR.PATCH` at or above the floor.
pub fn below_floor(version: &str, floor: VersionFloor) -> Option<FloorVerdict> {
    let (a, b, c) = VERSION_FLOOR;
    let parsed: Option<Vec<u64>> = version.split('.').map(|p| p.parse().ok()).collect();
    let triple = parsed.filter(|p| p.len() == 3).map(|p| (p[0], p[1], p[2]));
    if triple.is_some_and(|t| t >= VERSION_FLOOR) {
        return None;
    }
    Some(match (floor, triple) {
        (VersionFloor::Enforce, _) => FloorVerdict::Refuse(format!(
            "spec.version must be MAJOR.MINOR.PATCH and at least {a}.{b}.{c} (got {version:?})"
        )),
        (VersionFloor::Warn, Some(_)) => FloorVerdict::Warn(format!(
            "spec.version {version} is below the supported floor {a}.{b}.{c} (strict installations refuse it)"
        )),
        (VersionFloor::Warn, None) => FloorVerdict::Warn(format!(
            "spec.version {version:?} is not MAJOR.MINOR.PATCH (strict installations refuse it; the members report their own version, which the operator uses)"
        )),
    })
}

/// The oldest Valkey the operator runs. Before 8.0 a replica promoted during a key-by-key
/// slot move does not inherit its primary's migrating/importing state (Valkey 8.0 replicates
/// it), so a failover in the middle of a scale-out leaves keys in a slot nobody serves.
pub const OLDEST_VALKEY: (u64, u64) = (8, 0);

/// Why `version` (an image's `x.y.z`) is refused, when it is older than [`OLDEST_VALKEY`].
/// A version that does not parse as numbers is left to the CRD schema and the members.
pub fn too_old(version: &str) -> Option<String> {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    ((major, minor) < OLDEST_VALKEY).then(|| {
        format!(
            "Valkey {version} is older than {}.{}, the oldest this operator runs: before {}.{} a replica promoted during a slot move forgets the move, and keys are left in slots nobody serves. Publish an image of Valkey {}.{} or later",
            OLDEST_VALKEY.0, OLDEST_VALKEY.1, OLDEST_VALKEY.0, OLDEST_VALKEY.1, OLDEST_VALKEY.0, OLDEST_VALKEY.1
        )
    })
}

#[cfg(test)]
mod too_old_tests {
    use super::*;

    #[test]
    fn the_version_floor_warns_by_default_and_refuses_when_enforced() {
        use VersionFloor::{Enforce, Warn};
        for fine in ["9.0.1", "9.1.2", "10.0.0", "9.0.10"] {
            assert_eq!(below_floor(fine, Warn), None, "{fine}");
            assert_eq!(below_floor(fine, Enforce), None, "{fine}");
        }
        assert_eq!(
            below_floor("9.0.0", Warn),
            Some(FloorVerdict::Warn(
                "spec.version 9.0.0 is below the supported floor 9.0.1 (strict installations refuse it)".into()
            ))
        );
        assert_eq!(
            below_floor("9.0.0", Enforce),
            Some(FloorVerdict::Refuse(
                "spec.version must be MAJOR.MINOR.PATCH and at least 9.0.1 (got \"9.0.0\")".into()
            ))
        );
        for odd in ["9.0", "v9.1.2", "9.1.2-rc1", "nightly", "9.1.2.3"] {
            assert!(
                matches!(below_floor(odd, Warn), Some(FloorVerdict::Warn(w)) if w.contains("is not MAJOR.MINOR.PATCH")),
                "{odd}"
            );
            assert!(
                matches!(below_floor(odd, Enforce), Some(FloorVerdict::Refuse(_))),
                "{odd}"
            );
        }
        assert!(
            matches!(below_floor("8.1.1", Warn), Some(FloorVerdict::Warn(w)) if w.contains("below the supported floor"))
        );
    }

    #[test]
    fn valkey_before_8_0_is_refused_with_what_to_publish_instead() {
        for old in ["7.2.4", "7.2", "v7.2.5", "6.2.14"] {
            let why = too_old(old).unwrap_or_else(|| panic!("{old} accepted"));
            assert!(why.contains("8.0 or later"), "{why}");
        }
        for fine in ["8.0.0", "8.1.1", "9.0.0", "9.1.2", "10.0", "nightly", ""] {
            assert_eq!(too_old(fine), None, "{fine}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyConfigSpec, ValkeyImageSpec};
    use crate::resolve::MenuMap;
    use crate::webhook::admission::ClusterSummary;
    use crate::webhook::admission::fixtures::{request, unreadable};

    fn menu(version: &str) -> MenuMap {
        let mut m = MenuMap::default();
        m.images.insert(
            "valkey-9".into(),
            ValkeyImageSpec {
                image_pull_secrets: vec![],
                repository: "valkey/valkey".into(),
                tag: version.into(),
                digest: None,
                version: version.into(),
            },
        );
        m.configs.insert(
            "standard".into(),
            ValkeyConfigSpec {
                base_ref: None,
                image_ref: Some("valkey-9".into()),
                resources: None,
                valkey: Default::default(),
                acl: None,
                scheduling: None,
                storage: None,
                metrics: None,
                external_access: None,
            },
        );
        m
    }

    fn clusters() -> Clusters {
        Ok(vec![ClusterSummary {
            namespace: "shop".into(),
            name: "cart".into(),
            config_ref: "standard".into(),
            versions: vec!["9.1.2".into()],
            ..Default::default()
        }])
    }

    /// The fixture updates ValkeyImage "valkey-9" to `version`.
    fn update_to(version: &str) -> AdmissionRequest<ValkeyImage> {
        request::<ValkeyImage>("valkeyimage-update.json", |v| {
            v["request"]["object"]["spec"]["version"] = version.into();
            v["request"]["object"]["spec"]["tag"] = version.into();
        })
    }

    #[test]
    fn repointing_down_within_the_major_version_is_warned() {
        let resp = validate(
            &update_to("9.0.0"),
            &Ok(menu("9.1.2")),
            &clusters(),
            VersionFloor::Warn,
        );
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("ValkeyImage \"valkey-9\" rolls 1 ValkeyCluster (9.1.2 -> 9.0.0)"),
            "{w}"
        );
        assert!(w.contains("`kubectl valkey impact image valkey-9`"), "{w}");
        assert!(
            !w.contains("shop") && !w.contains("cart"),
            "no tenant names: {w}"
        );
    }

    #[test]
    fn repointing_down_across_a_major_version_is_denied() {
        let resp = validate(
            &update_to("8.1.4"),
            &Ok(menu("9.1.2")),
            &clusters(),
            VersionFloor::Warn,
        );
        assert!(!resp.allowed);
        assert_eq!(resp.result.code, 403);
        assert!(
            resp.result.message.contains("(9.1.2 -> 8.1.4)"),
            "{}",
            resp.result.message
        );
        assert!(
            !resp.result.message.contains("shop"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn upgrades_pass_silently_and_lookup_failures_only_warn() {
        let resp = validate(
            &update_to("9.2.0"),
            &Ok(menu("9.1.2")),
            &clusters(),
            VersionFloor::Warn,
        );
        assert!(resp.allowed && resp.warnings.is_none());
        let resp = validate(
            &update_to("8.1.4"),
            &Err(unreadable("timeout")),
            &clusters(),
            VersionFloor::Warn,
        );
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("timeout") && w.contains("below the supported floor"),
            "{w}"
        );
    }

    #[test]
    fn an_image_below_the_floor_is_refused_when_enforced_and_warned_about_otherwise() {
        let menu = Ok(menu("9.0.0"));
        let resp = validate(
            &update_to("9.0.0"),
            &menu,
            &clusters(),
            VersionFloor::Enforce,
        );
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("at least 9.0.1 (got \"9.0.0\")"),
            "{}",
            resp.result.message
        );
        let resp = validate(&update_to("9.0.0"), &menu, &clusters(), VersionFloor::Warn);
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("spec.version 9.0.0 is below the supported floor 9.0.1"),
            "{w}"
        );
    }
}
