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
//! - A menu that cannot be read never fails the request: accepted with a warning.

use kube::ResourceExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{Menu, allow_with_warnings, deny, lookup_warning};
use crate::api::ValkeyConfig;
use crate::api::constants::MAX_CONFIG_CHAIN_DEPTH;
use crate::resolve::chain::DEFAULT_MEMORY;
use crate::resolve::{Catalog, MapCatalog, ResolveError, resolve_config};
use crate::webhook::memory::{human_bytes, parse_quantity_bytes, parse_valkey_memory};

/// `maxmemory` above this share of the container memory is warned about.
pub const HEADROOM_WARN_PERCENT: u128 = 80;

/// `maxmemory` and container memory as a config resolves them, each with the config it came
/// from. Walks as far as the chain resolves (missing links and cycles end the walk).
#[derive(Debug, PartialEq, Eq)]
struct MemoryView {
    maxmemory: Option<(String, String)>,
    memory: (String, Option<String>),
}

fn memory_view(catalog: &impl Catalog, name: &str) -> MemoryView {
    let mut maxmemory = None;
    let mut memory = None;
    let mut seen: Vec<String> = Vec::new();
    let mut next = Some(name.to_string());
    while let Some(current) = next.take() {
        if seen.contains(&current) || seen.len() > MAX_CONFIG_CHAIN_DEPTH {
            break;
        }
        let Some(spec) = catalog.config(&current) else {
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
            memory = Some((m, Some(current.clone())));
        }
        next = spec.base_ref.clone();
        seen.push(current);
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

/// The rule.
pub fn validate(req: &AdmissionRequest<ValkeyConfig>, menu: &Menu) -> AdmissionResponse {
    let Some(config) = req.object.as_ref() else {
        return allow_with_warnings(req, vec![]);
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow_with_warnings(req, vec![]);
    }
    let name = config.name_any();
    let mut warnings = Vec::new();

    // The menu as it will be once this write is stored.
    let catalog = match menu {
        Ok(catalog) => {
            let mut catalog = catalog.clone();
            catalog.configs.insert(name.clone(), config.spec.clone());
            catalog
        }
        Err(error) => {
            warnings.push(lookup_warning(error));
            let mut catalog = MapCatalog::default();
            catalog.configs.insert(name.clone(), config.spec.clone());
            catalog
        }
    };

    match resolve_config(&catalog, &name) {
        Ok(resolved) => warnings.extend(super::settings::unknown_settings(
            &resolved.image.version,
            config.spec.valkey.keys(),
        )),
        Err(ResolveError::Cycle { chain }) if chain.last() == Some(&name) => {
            let e = ResolveError::Cycle { chain };
            return deny(
                req,
                format!("spec.baseRef would close a cycle: {e}"),
                warnings,
            );
        }
        // Without the menu only this object is known: a missing base is not news.
        Err(ResolveError::ConfigNotFound { .. }) if menu.is_err() => {}
        Err(e) => warnings.push(format!(
            "{e}; clusters using ValkeyConfig {name:?} stay Blocked until this is fixed"
        )),
    }

    match check_memory(&name, &memory_view(&catalog, &name)) {
        MemoryVerdict::Fine => {}
        MemoryVerdict::Warn(w) => warnings.push(w),
        MemoryVerdict::Deny(message) => return deny(req, message, warnings),
    }

    // Configs inheriting from this one see the change too.
    for (child, _) in catalog.configs.iter().filter(|(n, _)| **n != name) {
        let view = memory_view(&catalog, child);
        let through_this = crate::resolve::menu_refs(&catalog, child, &[])
            .contains(&crate::resolve::MenuRef::Config(name.clone()));
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
    allow_with_warnings(req, warnings)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::{Resources, ValkeyConfigSpec, ValkeyImageSpec};
    use crate::webhook::admission::fixtures::request;

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
        }
    }

    /// The sample menu: standard (2Gi, 1500mb) and large (inherits; 16Gi, 12gb).
    fn menu() -> MapCatalog {
        let mut m = MapCatalog::default();
        m.images.insert(
            "valkey-9-0".into(),
            ValkeyImageSpec {
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
    fn the_sample_menu_is_accepted_without_warnings() {
        let resp = validate(&with_spec(|_| {}), &Ok(menu()));
        assert!(resp.allowed, "{:?}", resp.result);
        assert_eq!(resp.warnings, None);
    }

    #[test]
    fn a_base_ref_that_closes_a_cycle_is_denied() {
        // standard -> large would make large -> standard -> large.
        let req = request::<ValkeyConfig>("valkeyconfig-create.json", |v| {
            v["request"]["name"] = "standard".into();
            v["request"]["object"]["metadata"]["name"] = "standard".into();
            v["request"]["object"]["spec"]["baseRef"] = "large".into();
        });
        let resp = validate(&req, &Ok(menu()));
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
        let resp = validate(&with_spec(|s| s["baseRef"] = "not-yet".into()), &Ok(menu()));
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
        let resp = validate(&req, &Ok(m));
        assert!(resp.allowed, "{:?}", resp.result);
        let w = resp.warnings.unwrap().join("\n");
        assert!(
            w.contains("ValkeyConfig \"small\" inherits from \"standard\""),
            "{w}"
        );
    }

    #[test]
    fn a_menu_lookup_failure_still_checks_this_config_and_warns() {
        let resp = validate(&with_spec(|_| {}), &Err("timeout".into()));
        assert!(resp.allowed);
        assert!(resp.warnings.unwrap()[0].contains("references were not checked"));
        let resp = validate(
            &with_spec(|s| s["valkey"]["maxmemory"] = "20gb".into()),
            &Err("timeout".into()),
        );
        assert!(!resp.allowed);
    }
}
