//! ValkeyConfig: rules across objects, which one-object CEL cannot express.
//!
//! - A `baseRef` that closes an inheritance cycle through this config is **denied** (a cycle
//!   blocks every cluster using any config on it). A cycle further up the chain that does not
//!   pass through this config, a missing base, a chain deeper than 10 or a missing image are
//!   accepted **with a warning** (references resolve live; the platform team may publish the
//!   missing piece next).
//! - `maxmemory` (Valkey units: `1500mb`, `12gb`) that Valkey cannot parse, or that is above the
//!   container memory this config resolves to (its own `resources.memory` or the nearest base's,
//!   1Gi by default), is **denied**: Valkey would be OOM-killed before it evicts. Above 80% of
//!   the container memory it is accepted **with a warning**: replication buffers, client
//!   buffers and fork copy-on-write need the rest. Configs that inherit from this one and
//!   would break the same rule after this change get a warning naming them.
//! - A change that moves running clusters to an older Valkey (a new `imageRef` or `baseRef`)
//!   is warned about within a major version and denied across one ([`super::downgrade`]).
//! - A menu that cannot be read never fails the request: accepted with a warning.

use kube::ResourceExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::downgrade::{Verdict, downgrades, verdict};
use super::{ClusterSummary, Clusters, MenuSnapshot, allow_with_warnings, deny, lookup_warning};
use crate::api::constants::refused_setting;
use crate::api::{Storage, ValkeyConfig};
use crate::resolve::chain::{DEFAULT_MEMORY, chain_as_far_as_it_resolves, config_bindings};
use crate::resolve::memory::{human_bytes, parse_quantity_bytes, parse_valkey_memory};
use crate::resolve::{Menu, MenuMap, ResolveError, resolve_config};

/// `maxmemory` above this share of the container memory is warned about.
pub const HEADROOM_WARN_PERCENT: u128 = 80;

/// `maxmemory` and container memory as a config resolves them, each with the config it came
/// from. Walks as far as the chain resolves (missing links and cycles end the walk).
#[derive(Debug, PartialEq, Eq)]
struct MemoryView {
    maxmemory: Option<(String, String)>,
    memory: (String, Option<String>),
}

fn memory_view(menu: &impl Menu, name: &str) -> MemoryView {
    let mut maxmemory = None;
    let mut memory = None;
    for (current, spec) in chain_as_far_as_it_resolves(menu, name) {
        let Some(spec) = spec else {
            break;
        };
        if maxmemory.is_none()
            && let Some(v) = spec.valkey.get("maxmemory")
        {
            maxmemory = Some((v.clone(), current.clone()));
        }
        if memory.is_none()
            && let Some(m) = spec.resources.as_ref().and_then(|r| r.memory.clone())
        {
            memory = Some((m, Some(current)));
        }
    }
    MemoryView {
        maxmemory,
        memory: memory.unwrap_or_else(|| (DEFAULT_MEMORY.to_string(), None)),
    }
}

enum MemoryVerdict {
    Fine,
    Warn(String),
    Deny(String),
}

fn check_memory(name: &str, view: &MemoryView) -> MemoryVerdict {
    let Some((maxmemory, from)) = &view.maxmemory else {
        return MemoryVerdict::Fine;
    };
    let inherited = |from: &str| {
        if from == name {
            String::new()
        } else {
            format!(" (inherited from ValkeyConfig {from:?})")
        }
    };
    let max = match parse_valkey_memory(maxmemory) {
        Ok(b) => b as u128,
        Err(e) => return MemoryVerdict::Deny(format!("valkey.maxmemory{}: {e}", inherited(from))),
    };
    let (memory, memory_from) = &view.memory;
    let Ok(limit) = parse_quantity_bytes(memory) else {
        return MemoryVerdict::Fine;
    };
    let memory_source = match memory_from {
        Some(f) if f == name => "resources.memory".to_string(),
        Some(f) => format!("resources.memory inherited from ValkeyConfig {f:?}"),
        None => "the default container memory; set resources.memory".to_string(),
    };
    if max == 0 {
        return MemoryVerdict::Fine;
    }
    if max > limit {
        return MemoryVerdict::Deny(format!(
            "valkey.maxmemory {maxmemory}{} ({}) is above the container memory {memory} ({}, {memory_source}): Valkey would be killed for running out of memory before it evicts; lower maxmemory to at most {HEADROOM_WARN_PERCENT}% of the memory or raise resources.memory",
            inherited(from),
            human_bytes(max),
            human_bytes(limit)
        ));
    }
    if max * 100 > limit * HEADROOM_WARN_PERCENT {
        return MemoryVerdict::Warn(format!(
            "valkey.maxmemory {maxmemory}{} is {}% of the container memory {memory} ({memory_source}); keep it at most {HEADROOM_WARN_PERCENT}% to leave room for replication and client buffers and fork copy-on-write",
            inherited(from),
            max * 100 / limit
        ));
    }
    MemoryVerdict::Fine
}

/// A username a cluster binds itself that its config's bindings would bind too after this
/// change.
#[derive(Debug, PartialEq, Eq)]
struct UsernameClash<'a> {
    cluster: &'a ClusterSummary,
    username: String,
    /// The change touches this cluster's config bindings (else the clash was there before).
    new: bool,
}

/// Clusters whose config chain passes through `name` and whose own usernames its resolved
/// bindings would also bind, in `after` (the menu with this write) against `before`.
fn username_clashes<'a>(
    before: &impl Menu,
    after: &impl Menu,
    name: &str,
    clusters: &'a [ClusterSummary],
) -> Vec<UsernameClash<'a>> {
    let mut clashes = Vec::new();
    for cluster in clusters {
        let through_this = chain_as_far_as_it_resolves(after, &cluster.config_ref)
            .iter()
            .any(|(n, _)| n == name);
        if !through_this {
            continue;
        }
        let bindings = config_bindings(after, &cluster.config_ref);
        let changed = bindings != config_bindings(before, &cluster.config_ref);
        for binding in bindings {
            if cluster.usernames.contains(&binding.username) {
                clashes.push(UsernameClash {
                    cluster,
                    username: binding.username,
                    new: changed,
                });
            }
        }
    }
    clashes
}

/// `3 ValkeyClusters using it bind` (the verb agrees with the count; the clusters are counted,
/// not named: see [`super::count_clusters`]).
fn count_using(clashes: &[&UsernameClash], verb: (&str, &str)) -> String {
    let verb = if clashes.len() == 1 { verb.0 } else { verb.1 };
    format!("{} using it {verb}", super::count_clusters(clashes.len()))
}

/// The rule. Each check below adds its warnings and may return a denial; the first denial
/// ends the review (with the warnings found so far), as the checks depend on one another's
/// ground: a config that closes a cycle has no memory or bindings to compare.
pub fn validate(
    req: &AdmissionRequest<ValkeyConfig>,
    menu: &MenuSnapshot,
    clusters: &Clusters,
) -> AdmissionResponse {
    if req.operation == Operation::Delete {
        let kind = super::dependants::MenuKind::Config;
        return super::dependants::review_deletion(req, menu, clusters, kind);
    }
    let Some(config) = req.object.as_ref() else {
        return allow_with_warnings(req, vec![]);
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow_with_warnings(req, vec![]);
    }
    let name = config.name_any();
    let mut warnings = Vec::new();
    if let Some(problem) =
        super::invalid_channels("spec.acl", config.spec.acl.as_deref().unwrap_or_default())
    {
        return deny(req, problem, warnings);
    }
    warnings.extend(forced_setting_warnings(config));
    warnings.extend(terminating_image_warning(req, menu, config));
    let after = menu_after_write(menu, &name, config, &mut warnings);
    let denial = check_chain(menu, &after, &name, config, &mut warnings)
        .or_else(|| check_memory_rules(&after, &name, &mut warnings))
        .or_else(|| check_storage(menu, &after, &name, &mut warnings))
        .or_else(|| check_clusters(menu, clusters, &after, &name, &mut warnings));
    match denial {
        Some(message) => deny(req, message, warnings),
        None => allow_with_warnings(req, warnings),
    }
}

/// Settings the operator forces are accepted (Momento's API accepts them) but never used:
/// say so instead of silently overriding them. The ones a config may not set at all are
/// refused by the CRD's rules; one stored before that (an update the API server lets through
/// because the key did not change) is ignored as well, and the warning says to remove it.
fn forced_setting_warnings(config: &ValkeyConfig) -> Vec<String> {
    crate::api::validation::forced_keys_in(config.spec.valkey.keys())
        .into_iter()
        .map(|key| match refused_setting("spec.valkey", key) {
            Some(refused) => format!("{refused}; it is ignored: remove it"),
            None => format!(
                "valkey.{key} is ignored: the operator sets {key} itself (forced setting; see docs/api.md)"
            ),
        })
        .collect()
}

/// A config that starts naming an image being deleted: allowed (the image stays while any
/// config names it), but the platform team meant to retire it, so say so.
fn terminating_image_warning(
    req: &AdmissionRequest<ValkeyConfig>,
    menu: &MenuSnapshot,
    config: &ValkeyConfig,
) -> Option<String> {
    let image = config.spec.image_ref.as_deref()?;
    let before = req
        .old_object
        .as_ref()
        .and_then(|o| o.spec.image_ref.as_deref());
    let terminating = menu.as_ref().ok()?.terminating_images.contains(image);
    (terminating && before != Some(image)).then(|| {
        format!(
            "ValkeyImage {image:?} is being deleted: it stays only while configs name it; \
             name another image (kubectl get valkeyimages) unless you mean to keep it"
        )
    })
}

/// The menu as it will be once this write is stored (only this object when the menu could
/// not be read, which is warned about).
fn menu_after_write(
    menu: &MenuSnapshot,
    name: &str,
    config: &ValkeyConfig,
    warnings: &mut Vec<String>,
) -> MenuMap {
    let mut after = match menu {
        Ok(after) => after.clone(),
        Err(error) => {
            warnings.push(lookup_warning(error));
            MenuMap::default()
        }
    };
    after.configs.insert(name.to_owned(), config.spec.clone());
    after
}

/// The inheritance chain: a cycle through this config is denied, any other resolution
/// problem warned about; once it resolves, settings its Valkey version does not know are
/// warned about.
fn check_chain(
    menu: &MenuSnapshot,
    after: &MenuMap,
    name: &str,
    config: &ValkeyConfig,
    warnings: &mut Vec<String>,
) -> Option<String> {
    match resolve_config(after, name) {
        Ok(resolved) => {
            let version = &resolved.image.version;
            let refused = super::settings::refused_values(version, &config.spec.valkey);
            if !refused.is_empty() {
                return Some(refused.join("; "));
            }
            warnings.extend(super::settings::unknown_settings(
                version,
                config.spec.valkey.keys(),
            ));
        }
        Err(ResolveError::Cycle { chain }) if chain.last().map(String::as_str) == Some(name) => {
            let e = ResolveError::Cycle { chain };
            return Some(format!("spec.baseRef would close a cycle: {e}"));
        }
        // Without the menu only this object is known: a missing base is not news.
        Err(ResolveError::ConfigNotFound { .. }) if menu.is_err() => {}
        Err(e) => warnings.push(format!(
            "{e}; clusters using ValkeyConfig {name:?} stay Blocked until this is fixed"
        )),
    }
    None
}

/// `maxmemory` against the container memory, for this config (may deny) and for the configs
/// inheriting from it, which see the change too (warned about).
fn check_memory_rules(after: &MenuMap, name: &str, warnings: &mut Vec<String>) -> Option<String> {
    match check_memory(name, &memory_view(after, name)) {
        MemoryVerdict::Fine => {}
        MemoryVerdict::Warn(w) => warnings.push(w),
        MemoryVerdict::Deny(message) => return Some(message),
    }
    for (child, _) in after.configs.iter().filter(|(n, _)| *n != name) {
        let view = memory_view(after, child);
        let through_this = crate::resolve::menu_refs(after, child, &[])
            .contains(&crate::resolve::MenuRef::Config(name.to_owned()));
        if !through_this {
            continue;
        }
        match check_memory(child, &view) {
            MemoryVerdict::Fine | MemoryVerdict::Warn(_) => {}
            MemoryVerdict::Deny(problem) => warnings.push(format!(
                "ValkeyConfig {child:?} inherits from {name:?} and after this change: {problem}"
            )),
        }
    }
    None
}

/// The storage a config resolves to (the nearest config in its chain that sets it), walking
/// as far as the chain resolves.
fn storage_of(menu: &impl Menu, name: &str) -> Option<Storage> {
    chain_as_far_as_it_resolves(menu, name)
        .into_iter()
        .map_while(|(_, spec)| spec)
        .find_map(|spec| spec.storage.clone())
}

/// Member volumes. A smaller `storage.size` for this config or any inheriting from it is
/// denied (Kubernetes cannot shrink a claim); volumes without a persistence setting are
/// warned about (they keep only nodes.conf, so a restarted member still comes back empty).
fn check_storage(
    menu: &MenuSnapshot,
    after: &MenuMap,
    name: &str,
    warnings: &mut Vec<String>,
) -> Option<String> {
    let now = storage_of(after, name);
    if now.is_some() {
        let settings = resolve_config(after, name)
            .map(|r| r.valkey)
            .unwrap_or_default();
        let persists = |key: &str, off: &str| {
            settings
                .get(key)
                .is_some_and(|v| !v.trim().eq_ignore_ascii_case(off))
        };
        if !persists("appendonly", "no") && !persists("save", "") {
            warnings.push(format!(
                "ValkeyConfig {name:?} gives members volumes (storage) but no persistence setting: the volume keeps only nodes.conf, so a member whose pod is deleted comes back without its data; set valkey.appendonly: \"yes\" (docs/durability.md)"
            ));
        }
    }
    let Ok(before) = menu else {
        return None;
    };
    let shrunk: Vec<String> = after
        .configs
        .keys()
        .filter(|child| {
            *child == name
                || crate::resolve::menu_refs(after, child, &[])
                    .contains(&crate::resolve::MenuRef::Config(name.to_owned()))
        })
        .filter_map(|child| {
            let (old, new) = (storage_of(before, child)?, storage_of(after, child)?);
            let bytes = |s: &Storage| parse_quantity_bytes(&s.size).ok();
            (bytes(&new)? < bytes(&old)?).then(|| {
                format!(
                    "ValkeyConfig {child:?} would shrink its members' volumes from {} to {}",
                    old.size, new.size
                )
            })
        })
        .collect();
    (!shrunk.is_empty()).then(|| {
        format!(
            "storage.size cannot shrink: {} (Kubernetes cannot shrink a PersistentVolumeClaim); keep the size or grow it",
            shrunk.join("; ")
        )
    })
}

/// The ValkeyClusters using this config, compared before and after the write: usernames
/// must stay unique, and a repoint to an older image is warned within a major version and
/// denied across one. Skipped without the menu (nothing to compare with).
fn check_clusters(
    menu: &MenuSnapshot,
    clusters: &Clusters,
    after: &MenuMap,
    name: &str,
    warnings: &mut Vec<String>,
) -> Option<String> {
    let Ok(before) = menu else {
        return None;
    };
    let clusters = match clusters {
        Ok(clusters) => clusters,
        Err(error) => {
            warnings.push(format!(
                "usernames were not checked against the ValkeyClusters using ValkeyConfig {name:?} (the webhook could not list them: {error})"
            ));
            return None;
        }
    };
    if let Some(denial) = check_usernames(before, after, name, clusters, warnings) {
        return Some(denial);
    }
    let moves = downgrades(before, after, clusters);
    let hint = super::impact_hint("config", name);
    match verdict(&format!("ValkeyConfig {name:?}"), &hint, &moves) {
        Verdict::Fine => None,
        Verdict::Warn(w) => {
            warnings.push(w);
            None
        }
        Verdict::Deny(message) => Some(message),
    }
}

/// Usernames merged with those of the clusters using this config must stay unique: a clash
/// this change makes is denied, one that was there before is warned about.
fn check_usernames(
    before: &MenuMap,
    after: &MenuMap,
    name: &str,
    clusters: &[ClusterSummary],
    warnings: &mut Vec<String>,
) -> Option<String> {
    let clashes = username_clashes(before, after, name, clusters);
    let hint = super::impact_hint("config", name);
    let mut usernames: Vec<&str> = clashes.iter().map(|c| c.username.as_str()).collect();
    usernames.sort_unstable();
    usernames.dedup();
    let mut denial = Vec::new();
    for username in usernames {
        let (new, old): (Vec<_>, Vec<_>) = clashes
            .iter()
            .filter(|c| c.username == username)
            .partition(|c| c.new);
        if !new.is_empty() {
            denial.push(format!(
                "{} ACL user {username:?} in spec.acl, and this change makes ValkeyConfig {name:?} bind it as well",
                count_using(&new, ("already binds", "already bind"))
            ));
        }
        if !old.is_empty() {
            warnings.push(format!(
                "{} ACL user {username:?} both in spec.acl and through ValkeyConfig {name:?} and stay Blocked until one of the bindings is renamed ({hint})",
                count_using(&old, ("binds", "bind"))
            ));
        }
    }
    (!denial.is_empty()).then(|| {
        format!(
            "{}: usernames must be unique once a cluster's bindings are merged with its config's (a clash blocks the cluster); use another username in this ValkeyConfig, or have those clusters rename theirs first ({hint})",
            denial.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::{Resources, ValkeyConfigSpec, ValkeyImageSpec};
    use crate::webhook::admission::fixtures::{request, unreadable};

    fn spec(
        base: Option<&str>,
        image: Option<&str>,
        memory: Option<&str>,
        maxmemory: Option<&str>,
    ) -> ValkeyConfigSpec {
        ValkeyConfigSpec {
            base_ref: base.map(Into::into),
            image_ref: image.map(Into::into),
            resources: memory.map(|m| Resources {
                cpu: None,
                memory: Some(m.into()),
            }),
            valkey: maxmemory
                .map(|m| BTreeMap::from([("maxmemory".to_string(), m.to_string())]))
                .unwrap_or_default(),
            acl: None,
            scheduling: None,
            storage: None,
            metrics: None,
            external_access: None,
        }
    }

    /// The sample menu: standard (2Gi, 1500mb) and large (inherits; 16Gi, 12gb).
    fn menu() -> MenuMap {
        let mut m = MenuMap::default();
        m.images.insert(
            "valkey-9-0".into(),
            ValkeyImageSpec {
                image_pull_secrets: vec![],
                repository: "valkey/valkey".into(),
                tag: "9.0.0".into(),
                digest: None,
                version: "9.0.0".into(),
            },
        );
        m.configs.insert(
            "standard".into(),
            spec(None, Some("valkey-9-0"), Some("2Gi"), Some("1500mb")),
        );
        m.configs.insert(
            "large".into(),
            spec(Some("standard"), None, Some("16Gi"), Some("12gb")),
        );
        m
    }

    /// The fixture creates ValkeyConfig "large" inheriting from "standard" (16Gi, 12gb).
    fn with_spec(edit: impl FnOnce(&mut serde_json::Value)) -> AdmissionRequest<ValkeyConfig> {
        request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            edit(&mut v["request"]["object"]["spec"])
        })
    }

    #[test]
    fn naming_an_image_being_deleted_is_warned_about_once() {
        let mut retiring = menu();
        retiring.terminating_images.insert("valkey-9-0".into());
        let warned = |req: &AdmissionRequest<ValkeyConfig>, menu: &MenuMap| {
            let resp = validate(req, &Ok(menu.clone()), &Ok(vec![]));
            assert!(resp.allowed, "{}", resp.result.message);
            resp.warnings
                .unwrap_or_default()
                .iter()
                .any(|w| w.contains("ValkeyImage \"valkey-9-0\" is being deleted"))
        };
        let create = with_spec(|s| s["imageRef"] = "valkey-9-0".into());
        assert!(warned(&create, &retiring));
        assert!(!warned(&create, &menu()), "a live image");
        // An update of a config that already named it says nothing new.
        let update = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            v["request"]["operation"] = "UPDATE".into();
            v["request"]["object"]["spec"]["imageRef"] = "valkey-9-0".into();
            v["request"]["oldObject"] = v["request"]["object"].clone();
        });
        assert!(!warned(&update, &retiring));
    }

    #[test]
    fn storage_cannot_shrink_here_or_through_a_base_and_needs_a_persistence_setting() {
        use crate::api::Storage;
        let storage = |size: &str| Storage {
            size: size.into(),
            ..Storage::default()
        };
        let mut before = menu();
        before.configs.get_mut("standard").unwrap().storage = Some(storage("2Gi"));
        // "large" (inheriting 2Gi from standard) asks for 1Gi: denied, with the reason.
        let resp = validate(
            &with_spec(|s| s["storage"] = serde_json::json!({"size": "1Gi"})),
            &Ok(before.clone()),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("storage.size cannot shrink")
                && resp.result.message.contains("from 2Gi to 1Gi"),
            "{}",
            resp.result.message
        );
        // Growing is accepted; without appendonly or save it is warned about.
        let resp = validate(
            &with_spec(|s| s["storage"] = serde_json::json!({"size": "4Gi"})),
            &Ok(before.clone()),
            &Ok(vec![]),
        );
        assert!(resp.allowed, "{}", resp.result.message);
        let w = resp.warnings.unwrap_or_default().join("\n");
        assert!(w.contains("no persistence setting"), "{w}");
        let resp = validate(
            &with_spec(|s| {
                s["storage"] = serde_json::json!({"size": "4Gi"});
                s["valkey"]["appendonly"] = "yes".into();
            }),
            &Ok(before.clone()),
            &Ok(vec![]),
        );
        assert!(
            resp.allowed && resp.warnings.is_none(),
            "{:?}",
            resp.warnings
        );
        // Shrinking the base shrinks what "large" inherits: denied, naming large.
        let mut after = before.clone();
        after.configs.get_mut("standard").unwrap().storage = Some(storage("1Gi"));
        assert_eq!(
            check_storage(&Ok(before), &after, "standard", &mut vec![])
                .map(|m| m.contains("\"large\" would shrink")),
            Some(true)
        );
    }

    #[test]
    fn the_sample_menu_is_accepted_without_warnings() {
        let resp = validate(&with_spec(|_| {}), &Ok(menu()), &Ok(vec![]));
        assert!(resp.allowed, "{:?}", resp.result);
        assert_eq!(resp.warnings, None);
    }

    #[test]
    fn forced_settings_are_accepted_with_a_warning_that_they_are_ignored() {
        let resp = validate(
            &with_spec(|s| {
                s["valkey"]["port"] = "7000".into();
                s["valkey"]["bind"] = "0.0.0.0".into();
                // Refused by the CRD; one stored before that is ignored too.
                s["valkey"]["requirepass"] = "secret".into();
            }),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(resp.allowed, "{}", resp.result.message);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("valkey.port is ignored: the operator sets port itself")
                && w.contains("valkey.bind is ignored")
                && w.contains("spec.valkey.requirepass is managed by the operator: bind users with spec.acl; it is ignored: remove it"),
            "{w}"
        );
    }

    #[test]
    fn a_config_with_neither_image_nor_base_is_accepted_with_a_warning() {
        let req = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            let spec = &mut v["request"]["object"]["spec"];
            spec.as_object_mut().unwrap().remove("baseRef");
            spec.as_object_mut().unwrap().remove("imageRef");
        });
        let resp = validate(&req, &Ok(menu()), &Ok(vec![]));
        assert!(resp.allowed, "{}", resp.result.message);
        let w = resp.warnings.unwrap().join("\n");
        assert!(w.contains("sets spec.imageRef"), "{w}");
    }

    #[test]
    fn a_base_ref_that_closes_a_cycle_is_denied() {
        // standard -> large would make large -> standard -> large.
        let req = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            v["request"]["name"] = "standard".into();
            v["request"]["object"]["metadata"]["name"] = "standard".into();
            v["request"]["object"]["spec"]["baseRef"] = "large".into();
        });
        let resp = validate(&req, &Ok(menu()), &Ok(vec![]));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("cycle (standard -> large -> standard)"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn a_missing_base_is_accepted_with_a_warning() {
        let resp = validate(
            &with_spec(|s| s["baseRef"] = "not-yet".into()),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("inherits from \"not-yet\" (spec.baseRef), which does not exist"),
            "{w}"
        );
    }

    #[test]
    fn maxmemory_above_the_container_memory_is_denied() {
        let resp = validate(
            &with_spec(|s| s["valkey"]["maxmemory"] = "20gb".into()),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
        let m = resp.result.message;
        assert!(
            m.contains("valkey.maxmemory 20gb (20Gi) is above the container memory 16Gi"),
            "{m}"
        );
    }

    #[test]
    fn maxmemory_is_compared_with_inherited_memory_and_the_default() {
        // No resources here: standard's 2Gi applies.
        let resp = validate(
            &with_spec(|s| {
                s.as_object_mut().unwrap().remove("resources");
                s["valkey"]["maxmemory"] = "3gb".into();
            }),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("inherited from ValkeyConfig \"standard\""),
            "{}",
            resp.result.message
        );
        // No memory anywhere in the chain: the 1Gi default applies.
        let mut m = menu();
        m.configs.get_mut("standard").unwrap().resources = None;
        let resp = validate(
            &with_spec(|s| {
                s.as_object_mut().unwrap().remove("resources");
                s["valkey"]["maxmemory"] = "2gb".into();
            }),
            &Ok(m),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("default container memory"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn maxmemory_without_headroom_is_warned() {
        let resp = validate(
            &with_spec(|s| s["valkey"]["maxmemory"] = "15gb".into()),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(w.contains("is 93% of the container memory 16Gi"), "{w}");
    }

    #[test]
    fn unparseable_maxmemory_is_denied() {
        let resp = validate(
            &with_spec(|s| s["valkey"]["maxmemory"] = "12Gi".into()),
            &Ok(menu()),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("is not a Valkey memory size"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn shrinking_a_base_warns_about_children_that_no_longer_fit() {
        // standard drops to 1Gi; "small" inherits it with its own 1500mb.
        let mut m = menu();
        m.configs.insert(
            "small".into(),
            spec(Some("standard"), None, None, Some("900mb")),
        );
        let req = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            v["request"]["name"] = "standard".into();
            v["request"]["object"]["metadata"]["name"] = "standard".into();
            v["request"]["object"]["spec"] = serde_json::json!({
                "imageRef": "valkey-9-0", "resources": {"memory": "512Mi"}, "valkey": {"maxmemory": "400mb"}
            });
        });
        let resp = validate(&req, &Ok(m), &Ok(vec![]));
        assert!(resp.allowed, "{:?}", resp.result);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("ValkeyConfig \"small\" inherits from \"standard\""),
            "{w}"
        );
    }

    #[test]
    fn a_menu_lookup_failure_still_checks_this_config_and_warns() {
        let resp = validate(&with_spec(|_| {}), &Err(unreadable("timeout")), &Ok(vec![]));
        assert!(resp.allowed);
        assert!(resp.warnings.unwrap()[0].contains("references were not checked"));
        let resp = validate(
            &with_spec(|s| s["valkey"]["maxmemory"] = "20gb".into()),
            &Err(unreadable("timeout")),
            &Ok(vec![]),
        );
        assert!(!resp.allowed);
    }

    fn binding(username: &str) -> serde_json::Value {
        serde_json::json!({
            "username": username,
            "passwordHashes": ["3a47b49206dbbab1a5ea53a2e6fd5dd726be507a4456195507672072988b520a"],
            "permissions": [{"roleRef": "metrics-readonly"}],
        })
    }

    fn cluster(namespace: &str, name: &str, config: &str, usernames: &[&str]) -> ClusterSummary {
        ClusterSummary {
            namespace: namespace.into(),
            name: name.into(),
            config_ref: config.into(),
            usernames: usernames.iter().map(|u| u.to_string()).collect(),
            versions: Vec::new(),
        }
    }

    /// The fixture's "large" (inherits from "standard") now binds `usernames`.
    fn large_binding(usernames: &[&str]) -> AdmissionRequest<ValkeyConfig> {
        let acl: Vec<_> = usernames.iter().map(|u| binding(u)).collect();
        with_spec(move |s| s["acl"] = acl.into())
    }

    #[test]
    fn binding_a_username_a_cluster_using_the_config_binds_is_denied() {
        let clusters = vec![
            cluster("team-a", "orders", "large", &["app"]),
            cluster("team-b", "carts", "large", &["app", "batch"]),
            cluster("team-c", "elsewhere", "standard", &["app"]),
        ];
        let resp = validate(
            &large_binding(&["metrics", "app"]),
            &Ok(menu()),
            &Ok(clusters),
        );
        assert!(!resp.allowed);
        let message = &resp.result.message;
        assert!(
            message.contains(
                "2 ValkeyClusters using it already bind ACL user \"app\" in spec.acl, and this change makes ValkeyConfig \"large\" bind it as well"
            ),
            "{message}"
        );
        assert!(message.contains("use another username"), "{message}");
        assert!(
            message.contains("`kubectl valkey impact config large` lists the clusters"),
            "{message}"
        );
        // Nothing of the tenants: namespaces, cluster names, their other usernames.
        for foreign in ["team-", "orders", "carts", "elsewhere", "batch"] {
            assert!(!message.contains(foreign), "names {foreign:?}: {message}");
        }
    }

    #[test]
    fn clusters_are_reached_through_inheritance() {
        // A cluster on "large" (no acl of its own) gets standard's bindings.
        let mut m = menu();
        m.configs.get_mut("large").unwrap().acl = None;
        let req = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            v["request"]["name"] = "standard".into();
            v["request"]["object"]["metadata"]["name"] = "standard".into();
            v["request"]["object"]["spec"] = serde_json::json!({
                "imageRef": "valkey-9-0", "acl": [binding("app")]
            });
        });
        let clusters = vec![cluster("team-a", "orders", "large", &["app"])];
        let resp = validate(&req, &Ok(m.clone()), &Ok(clusters.clone()));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("1 ValkeyCluster using it already binds"),
            "{}",
            resp.result.message
        );
        // "large" binding its own users shields its clusters from standard's.
        m.configs.get_mut("large").unwrap().acl = Some(vec![]);
        let resp = validate(&req, &Ok(m), &Ok(clusters));
        assert!(resp.allowed, "{:?}", resp.result);
    }

    #[test]
    fn other_usernames_are_accepted() {
        let clusters = vec![cluster("team-a", "orders", "large", &["app"])];
        let resp = validate(
            &large_binding(&["metrics", "batch"]),
            &Ok(menu()),
            &Ok(clusters),
        );
        assert!(resp.allowed, "{:?}", resp.result);
        assert_eq!(resp.warnings, None);
    }

    #[test]
    fn a_clash_this_write_does_not_touch_is_only_warned() {
        // "large" already binds app (a cluster made before it); changing memory is fine.
        let mut m = menu();
        let req = large_binding(&["app"]);
        m.configs
            .insert("large".into(), req.object.as_ref().unwrap().spec.clone());
        let clusters = vec![cluster("team-a", "orders", "large", &["app"])];
        let req = with_spec(|s| {
            s["acl"] = vec![binding("app")].into();
            s["valkey"]["maxmemory"] = "11gb".into();
        });
        let resp = validate(&req, &Ok(m), &Ok(clusters));
        assert!(resp.allowed, "{:?}", resp.result);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("1 ValkeyCluster using it binds ACL user \"app\" both in spec.acl and through ValkeyConfig \"large\""),
            "{w}"
        );
        assert!(!w.contains("team-a") && !w.contains("orders"), "{w}");
    }

    #[test]
    fn clusters_that_cannot_be_listed_are_warned_about() {
        let resp = validate(
            &large_binding(&["app"]),
            &Ok(menu()),
            &Err(unreadable("forbidden")),
        );
        assert!(resp.allowed);
        let w = resp.warnings.unwrap().join("\n");
        assert!(w.contains("usernames were not checked"), "{w}");
    }

    #[test]
    fn many_clashing_clusters_are_counted() {
        let clusters: Vec<_> = (0..8)
            .map(|i| cluster("team", &format!("c{i}"), "large", &["app"]))
            .collect();
        let resp = validate(&large_binding(&["app"]), &Ok(menu()), &Ok(clusters));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("8 ValkeyClusters using it already bind"),
            "{}",
            resp.result.message
        );
    }
}
