//! `kubectl valkey resolve`: what a config or a cluster resolves to, and which level of the
//! `baseRef` chain set each field. Pure: the caller hands in the menu and the objects it read.
//! The merge, the rendering and the desired member spec are the operator's own functions
//! (`resolve`, `controller::cluster::resolve`, `controller::cluster::build`,
//! `controller::node::build`); this module only lays their results out.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::api::constants::is_forced_setting;
use crate::api::{ValkeyCluster, ValkeyConfigSpec, ValkeyNode, ZoneSpread};
use crate::controller::cluster::build::{desired_node_spec, spec_hash};
use crate::controller::names;
use crate::controller::node::build::spec_valkey_conf;
use crate::resolve::acl::{OperatorUserHashes, render_acl_file_hashed, render_user};
use crate::resolve::chain::chain_as_far_as_it_resolves;
use crate::resolve::conf::{MemberConf, operator_defaults, render_valkey_conf};
use crate::resolve::{Menu, ResolveError, merge_bindings, resolve_config, resolve_roles};

/// Shown instead of the hash of an operator password the reader cannot see.
pub const UNKNOWN_HASH: &str = "<unknown: the ACL Secret is not readable>";

/// One merged field and the config that set it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    pub value: String,
    /// The nearest config in the chain setting it; `None` for an operator default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
    /// Configs further down the chain that set it too (their value is overridden).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
    /// A setting the operator forces: it is not rendered (the forced value wins).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
}

/// One ACL user as rendered into the ACL file (password hashes only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AclUser {
    pub username: String,
    /// `ValkeyConfig <name>` or `ValkeyCluster`.
    pub bound_by: String,
    pub line: String,
}

/// What a config (and, for `resolve cluster`, a cluster) resolves to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `ValkeyConfig <name>` or `ValkeyCluster <ns>/<name>`.
    pub subject: String,
    /// Config names from the one named to the root.
    pub chain: Vec<String>,
    pub image_ref: String,
    pub image_set_by: String,
    pub image: String,
    pub version: String,
    pub resources: BTreeMap<String, Field>,
    pub settings: BTreeMap<String, Field>,
    pub acl_users: Vec<AclUser>,
    /// The rendered valkey.conf (a member's ConfigMap, key `valkey.conf`).
    pub valkey_conf: String,
    /// The rendered ACL file (the ACL Secret, key `users.acl`), for a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl_file: Option<String>,
    /// Hash of the desired member spec (the `spec-hash` label of current members).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// For each settings key, resources field, `imageRef` and `acl`: which configs of the chain set
/// it, nearest first.
fn setters(
    chain: &[(String, Option<ValkeyConfigSpec>)],
    sets: impl Fn(&ValkeyConfigSpec) -> bool,
) -> Vec<String> {
    chain
        .iter()
        .filter_map(|(name, spec)| spec.as_ref().filter(|s| sets(s)).map(|_| name.clone()))
        .collect()
}

fn field(value: String, mut setters: Vec<String>) -> Field {
    let set_by = (!setters.is_empty()).then(|| setters.remove(0));
    Field {
        value,
        set_by,
        overrides: setters,
        ignored: false,
    }
}

/// The report for `resolve config <name>`: no cluster, so no cluster-level bindings and no
/// TLS; the ACL file is not shown (it holds the operator's users of a given cluster).
pub fn config_report(menu: &impl Menu, name: &str) -> Result<Report, ResolveError> {
    let resolved = resolve_config(menu, name)?;
    let bindings = merge_bindings(&resolved.acl, &[])?;
    let roles = resolve_roles(menu, &bindings)?;
    let conf = render_valkey_conf(&MemberConf {
        settings: &resolved.valkey,
        tls: false,
        version: &resolved.image.version,
        memory_limit: resolved.resources.memory.as_deref(),
    });
    let mut report = layout(
        menu,
        format!("ValkeyConfig {name}"),
        name,
        &resolved,
        &bindings,
        &[],
        &roles,
        conf,
    );
    report.notes.push(
        "valkey.conf as a cluster without spec.tls gets it; a cluster with spec.tls also gets the tls-* settings"
            .into(),
    );
    Ok(report)
}

/// The report for `resolve cluster <ns>/<name>`: exactly what the operator renders for this
/// cluster (desired member spec, its valkey.conf, the ACL file). `members` are the cluster's
/// ValkeyNodes (their versions guard against a major downgrade, as in the operator);
/// `live_acl_file` is the ACL Secret's `users.acl` when readable: the hashes of the operator's
/// own passwords are taken from it (they are all the file holds of them).
pub fn cluster_report(
    menu: &impl Menu,
    cluster: &ValkeyCluster,
    members: &[ValkeyNode],
    live_acl_file: Option<&str>,
) -> Result<Report, ResolveError> {
    let running = members.iter().map(|n| n.spec.version.as_str());
    let resolved = crate::controller::cluster::resolve(cluster, menu, running)?;
    let config = &resolved.config;
    let (bindings, roles) = &resolved.acl_file_inputs;
    // Zone spread is not part of the spec hash nor of valkey.conf: any value renders the same.
    let spec = desired_node_spec(cluster, config, ZoneSpread::BestEffort);
    let operator_users = live_acl_file.and_then(crate::resolve::acl::operator_user_hashes);
    let mut notes = Vec::new();
    let hashes = operator_users.unwrap_or_else(|| {
        notes.push(format!(
            "the ACL Secret {} is not readable: the operator's own users are shown without their password hashes, and the revision marker differs",
            names::acl_secret(&cluster.metadata.name.clone().unwrap_or_default())
        ));
        OperatorUserHashes {
            operator: UNKNOWN_HASH.into(),
            replication: UNKNOWN_HASH.into(),
            backup: Some(UNKNOWN_HASH.into()),
            restore: Some(UNKNOWN_HASH.into()),
            metrics: config.metrics.as_ref().map(|_| UNKNOWN_HASH.into()),
        }
    });
    let acl_file = render_acl_file_hashed(bindings, roles, &hashes);
    let subject = format!(
        "ValkeyCluster {}/{}",
        cluster.metadata.namespace.clone().unwrap_or_default(),
        cluster.metadata.name.clone().unwrap_or_default()
    );
    let mut report = layout(
        menu,
        subject,
        &cluster.spec.config_ref,
        config,
        bindings,
        &cluster.spec.acl,
        roles,
        spec_valkey_conf(&spec),
    );
    report.acl_file = Some(acl_file);
    report.spec_hash = Some(spec_hash(&spec));
    report.notes.extend(notes);
    Ok(report)
}

/// Every setting with the config that set it, then the operator's defaults that no config
/// overrides; with a note for a derived `maxmemory`.
fn setting_fields(
    chain: &[(String, Option<ValkeyConfigSpec>)],
    resolved: &crate::resolve::ResolvedConfig,
) -> (BTreeMap<String, Field>, Vec<String>) {
    let mut settings: BTreeMap<String, Field> = resolved
        .valkey
        .iter()
        .map(|(k, v)| {
            let mut f = field(v.clone(), setters(chain, |s| s.valkey.contains_key(k)));
            f.ignored = is_forced_setting(k);
            (k.clone(), f)
        })
        .collect();
    let memory_limit = resolved.resources.memory.as_deref();
    let mut notes = Vec::new();
    for (key, value) in operator_defaults(&resolved.image.version, memory_limit) {
        if key == "maxmemory" && !settings.contains_key(key) {
            notes.push(format!(
                "maxmemory {value} is derived by the operator: no config sets it, and 3/4 of the memory limit ({}) leaves room for replication buffers and fork (set maxmemory in a config to choose)",
                memory_limit.unwrap_or_default()
            ));
        }
        settings
            .entry(key.to_string())
            .or_insert_with(|| field(value, vec![]));
    }
    (settings, notes)
}

#[allow(clippy::too_many_arguments)]
fn layout(
    menu: &impl Menu,
    subject: String,
    config_ref: &str,
    resolved: &crate::resolve::ResolvedConfig,
    bindings: &[crate::api::AclBinding],
    cluster_bindings: &[crate::api::AclBinding],
    roles: &BTreeMap<String, crate::api::ValkeyRoleSpec>,
    valkey_conf: String,
) -> Report {
    let chain = chain_as_far_as_it_resolves(menu, config_ref);
    let (settings, notes) = setting_fields(&chain, resolved);
    let resource = |value: &Option<String>, get: fn(&crate::api::Resources) -> bool| {
        field(
            value.clone().unwrap_or_default(),
            setters(&chain, |s| s.resources.as_ref().is_some_and(get)),
        )
    };
    let resources = BTreeMap::from([
        (
            "cpu".to_string(),
            resource(&resolved.resources.cpu, |r| r.cpu.is_some()),
        ),
        (
            "memory".to_string(),
            resource(&resolved.resources.memory, |r| r.memory.is_some()),
        ),
    ]);
    let image_set_by = setters(&chain, |s| s.image_ref.is_some())
        .into_iter()
        .next()
        .unwrap_or_default();
    let acl_set_by = setters(&chain, |s| s.acl.is_some()).into_iter().next();
    let acl_users = bindings
        .iter()
        .map(|b| AclUser {
            username: b.username.clone(),
            bound_by: if cluster_bindings.iter().any(|c| c.username == b.username) {
                "ValkeyCluster".into()
            } else {
                format!("ValkeyConfig {}", acl_set_by.clone().unwrap_or_default())
            },
            line: render_user(b, roles),
        })
        .collect();
    Report {
        subject,
        chain: resolved.chain.clone(),
        image_ref: resolved.image_ref.clone(),
        image_set_by,
        image: resolved.image.image_reference(),
        version: resolved.image.version.clone(),
        resources,
        settings,
        acl_users,
        valkey_conf,
        acl_file: None,
        spec_hash: None,
        notes,
    }
}

fn origin(f: &Field) -> String {
    let mut s = match &f.set_by {
        Some(by) => format!("set by {by}"),
        None => "operator default".to_string(),
    };
    if !f.overrides.is_empty() {
        let _ = write!(s, ", overrides {}", f.overrides.join(", "));
    }
    if f.ignored {
        s.push_str("; IGNORED: forced by the operator");
    }
    s
}

/// The human-readable text of a report.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", report.subject);
    let _ = writeln!(out, "config chain: {}", report.chain.join(" -> "));
    let _ = writeln!(
        out,
        "image:        {} = {} (Valkey {}), set by {}",
        report.image_ref, report.image, report.version, report.image_set_by
    );
    if let Some(hash) = &report.spec_hash {
        let _ = writeln!(out, "spec hash:    {hash}");
    }
    out.push_str("\nresources:\n");
    for (k, f) in &report.resources {
        let _ = writeln!(out, "  {k:<8} {:<10} {}", f.value, origin(f));
    }
    out.push_str("\nsettings:\n");
    let width = report.settings.keys().map(String::len).max().unwrap_or(0);
    for (k, f) in &report.settings {
        let _ = writeln!(out, "  {k:<width$}  {:<14} {}", f.value, origin(f));
    }
    out.push_str("\nACL users (password hashes only):\n");
    if report.acl_users.is_empty() {
        out.push_str("  (none bound)\n");
    }
    for u in &report.acl_users {
        let _ = writeln!(
            out,
            "  {} (bound by {}):\n    {}",
            u.username, u.bound_by, u.line
        );
    }
    out.push_str("\n--- valkey.conf ---\n");
    out.push_str(&report.valkey_conf);
    if let Some(acl) = &report.acl_file {
        out.push_str("\n--- users.acl ---\n");
        out.push_str(acl);
    }
    for note in &report.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyClusterSpec, ValkeyRoleSpec};
    use crate::controller::cluster::build;
    use crate::resolve::acl::{OperatorCredentials, render_acl_file};
    use crate::resolve::chain::tests::{binding, seed_menu};

    fn with_roles() -> crate::resolve::MenuMap {
        let mut c = seed_menu();
        c.roles.insert(
            "rw".into(),
            ValkeyRoleSpec {
                categories: vec![],
                commands: vec![],
            },
        );
        c.configs.get_mut("standard").unwrap().acl = Some(vec![binding("metrics", "rw")]);
        c
    }

    fn cluster() -> ValkeyCluster {
        let mut c = ValkeyCluster::new(
            "my-cluster",
            ValkeyClusterSpec {
                config_ref: "large".into(),
                shards: 3,
                replicas_per_shard: 1,
                acl: vec![binding("app", "rw")],
                tls: None,
                placement: None,
                pod_annotations: BTreeMap::new(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        c.metadata.namespace = Some("my-app".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn each_key_names_the_level_that_set_it_and_the_levels_it_overrides() {
        let r = config_report(&with_roles(), "large").unwrap();
        assert_eq!(r.chain, ["large", "standard"]);
        assert_eq!(r.image_set_by, "standard");
        let maxmemory = &r.settings["maxmemory"];
        assert_eq!(maxmemory.value, "12gb");
        assert_eq!(maxmemory.set_by.as_deref(), Some("large"));
        assert_eq!(maxmemory.overrides, ["standard"]);
        assert_eq!(
            r.settings["maxmemory-policy"].set_by.as_deref(),
            Some("standard")
        );
        assert_eq!(r.resources["memory"].value, "16Gi");
        assert_eq!(r.resources["memory"].set_by.as_deref(), Some("large"));
        // The operator's default, set by no config.
        assert_eq!(r.settings["cluster-node-timeout"].set_by, None);
        assert_eq!(r.acl_users[0].bound_by, "ValkeyConfig standard");
    }

    #[test]
    fn a_config_without_maxmemory_shows_the_derived_one_and_why() {
        let mut menu = with_roles();
        for config in menu.configs.values_mut() {
            config.valkey.remove("maxmemory");
        }
        let r = config_report(&menu, "large").unwrap();
        let maxmemory = &r.settings["maxmemory"];
        assert_eq!(maxmemory.value, "12288mb", "3/4 of 16Gi");
        assert_eq!(maxmemory.set_by, None);
        assert!(
            r.valkey_conf.contains("\nmaxmemory 12288mb\n"),
            "{}",
            r.valkey_conf
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("maxmemory 12288mb is derived")
                    && n.contains("memory limit (16Gi)")),
            "{:?}",
            r.notes
        );
        // A config that sets it: no note.
        let r = config_report(&with_roles(), "large").unwrap();
        assert!(
            !r.notes.iter().any(|n| n.contains("derived")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_forced_setting_in_a_config_is_shown_as_ignored_and_not_rendered() {
        let mut c = with_roles();
        c.configs
            .get_mut("large")
            .unwrap()
            .valkey
            .insert("port".into(), "7000".into());
        let r = config_report(&c, "large").unwrap();
        assert!(r.settings["port"].ignored);
        assert!(text(&r).contains("IGNORED: forced by the operator"));
        assert!(!r.valkey_conf.contains("port 7000"));
    }

    #[test]
    fn a_cluster_renders_exactly_the_configmap_and_acl_file_of_the_operator() {
        let (menu, cluster) = (with_roles(), cluster());
        // What the operator writes: the node's ConfigMap and the ACL Secret's file.
        let resolved = crate::controller::cluster::resolve(&cluster, &menu, []).unwrap();
        let spec = build::desired_node_spec(&cluster, &resolved.config, ZoneSpread::Required);
        let mut node = build::node(&cluster, "my-cluster-0-0", 0, &spec).unwrap();
        node.metadata.uid = Some("node-uid".into());
        let (bindings, roles) = &resolved.acl_file_inputs;
        let credentials = OperatorCredentials {
            operator_password: "op-secret".into(),
            replication_password: "repl-secret".into(),
            backup_password: "backup-secret".into(),
            restore_password: "restore-secret".into(),
            metrics_password: "m".into(),
        };
        let acl_file = render_acl_file(bindings, roles, &credentials);

        let r = cluster_report(&menu, &cluster, &[node.clone()], Some(&acl_file)).unwrap();
        assert_eq!(
            r.valkey_conf,
            crate::controller::node::build::config_map(&node)
                .unwrap()
                .data
                .unwrap()[crate::controller::node::build::CONFIG_KEY]
        );
        assert_eq!(r.acl_file.as_deref(), Some(acl_file.as_str()));
        assert_eq!(
            r.spec_hash.as_deref(),
            Some(build::spec_hash(&spec).as_str())
        );
        assert_eq!(
            r.acl_users
                .iter()
                .map(|u| (u.username.as_str(), u.bound_by.as_str()))
                .collect::<Vec<_>>(),
            [
                ("metrics", "ValkeyConfig standard"),
                ("app", "ValkeyCluster")
            ]
        );
        let out = serde_json::to_string(&r).unwrap() + &text(&r);
        assert!(!out.contains("op-secret") && !out.contains("repl-secret"));
    }

    #[test]
    fn without_the_acl_secret_no_hash_is_invented() {
        let r = cluster_report(&with_roles(), &cluster(), &[], None).unwrap();
        assert!(r.acl_file.unwrap().contains(UNKNOWN_HASH));
        assert!(r.notes[0].contains("my-cluster-acl is not readable"));
    }

    #[test]
    fn a_broken_chain_is_the_operators_message() {
        let mut c = with_roles();
        c.configs.get_mut("standard").unwrap().base_ref = Some("base".into());
        let err = config_report(&c, "large").unwrap_err();
        assert!(err.to_string().contains("inherits from \"base\""));
    }
}
