//! ValkeyCluster: what the schema and CEL cannot say.
//!
//! - References are resolved live, so a `configRef` (or anything further down its chain: base
//!   configs, the image, the roles of the bindings) that does not exist yet is **accepted with a
//!   warning**: the cluster stays Blocked until the platform team publishes it.
//! - A username bound both by the cluster and by its config is denied when the cluster's `acl`
//!   is being set or changed (it could never resolve); when the config introduced the clash
//!   later, unrelated edits of the cluster are accepted with a warning.
//! - `spec.tls` cannot be added or removed after creation (CEL says so too; this is defence in
//!   depth for API servers that skip CEL); `tls.secretRef` may change (a rotation).
//! - Channel entries of the bindings (a string or `{pattern}`, which the schema cannot check)
//!   must be printable-ASCII globs: denied otherwise.
//! - More than 5 replicas per shard is accepted with a warning (Momento's API has no bound), but
//!   more than 1000 members (`shards x (1 + replicasPerShard)`) is denied with the CEL rule's
//!   message (defence in depth for API servers that skip CEL); an update that keeps both fields
//!   as they were is let through (a cluster created before the bound can still be relabelled or
//!   deleted).
//! - Whether the `tls.secretRef` Secret exists is **not** looked up: an answer saying so would
//!   tell anyone who can reach the webhook port (a forged review names any namespace) whether a
//!   Secret exists in another tenant's namespace. The operator says it in the cluster's status
//!   (`TlsCertificateValid=False`, `SecretMissing`), to those who may read it.
//! - A menu that cannot be read never fails the request: accepted with a warning.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{MenuSnapshot, allow_with_warnings, deny, lookup_warning};
use crate::api::ValkeyCluster;
use crate::api::autoscaling::{range_problem, shape_warnings};
use crate::api::validation::check_member_count;
use crate::resolve::{MenuMap, ResolveError, merge_bindings, resolve_config, resolve_roles};
use crate::scope::WatchScope;

/// The rule.
pub fn validate(req: &AdmissionRequest<ValkeyCluster>, menu: &MenuSnapshot) -> AdmissionResponse {
    let Some(cluster) = req.object.as_ref() else {
        return allow_with_warnings(req, vec![]);
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow_with_warnings(req, vec![]);
    }
    let old = req
        .old_object
        .as_ref()
        .filter(|_| req.operation == Operation::Update);
    if let Some(problem) = old.and_then(|old| tls_added_or_removed(old, cluster)) {
        return deny(req, problem, vec![]);
    }
    if let Some(problem) = super::invalid_channels("spec.acl", &cluster.spec.acl) {
        return deny(req, problem, vec![]);
    }
    if let Some(problem) = too_many_members(old, cluster) {
        return deny(req, problem, vec![]);
    }
    if let Some(problem) = cluster.spec.autoscaling.as_ref().and_then(range_problem) {
        return deny(req, problem, vec![]);
    }
    if let Some(Err(problem)) = cluster
        .spec
        .backup
        .as_ref()
        .map(|b| crate::backup::schedule::parse(&b.schedule))
    {
        return deny(req, problem, vec![]);
    }

    let mut warnings: Vec<String> = replicas_warning(cluster).into_iter().collect();
    warnings.extend(autoscaling_warnings(old, cluster));
    let listed = match menu {
        Ok(listed) => listed,
        Err(error) => {
            warnings.push(lookup_warning(error));
            return allow_with_warnings(req, warnings);
        }
    };
    if let Err(problem) = check_references(listed, cluster, old, &mut warnings) {
        return deny(req, problem.to_string(), warnings);
    }
    allow_with_warnings(req, warnings)
}

/// A ValkeyCluster created in a namespace the operator does not watch (`watchNamespaces`)
/// would never be reconciled: refused, saying where it can go. Updates and deletions of one
/// created before the scope changed pass, so its owners can still clean it up.
pub fn outside_scope(
    req: &AdmissionRequest<ValkeyCluster>,
    scope: &WatchScope,
) -> Option<AdmissionResponse> {
    let namespace = req.namespace.as_deref().unwrap_or_default();
    if req.operation != Operation::Create || scope.includes(namespace) {
        return None;
    }
    Some(deny(
        req,
        format!(
            "the valkey-operator does not watch namespace {namespace:?} (its watchNamespaces: {scope}), so nothing would run this ValkeyCluster; create it in one of those namespaces, or ask the platform team to add {namespace:?} to the chart's watchNamespaces"
        ),
        vec![],
    ))
}

/// Why an update may not make this change: `spec.tls` added or removed.
fn tls_added_or_removed(old: &ValkeyCluster, cluster: &ValkeyCluster) -> Option<String> {
    if old.spec.tls.is_some() == cluster.spec.tls.is_some() {
        return None;
    }
    let describe = |tls: &Option<crate::api::TlsSpec>| match tls {
        Some(t) => format!("TLS with Secret {:?}", t.secret_ref),
        None => "no TLS".to_string(),
    };
    Some(format!(
        "spec.tls cannot be added or removed: this ValkeyCluster was created with {} and cannot change to {}; create a new ValkeyCluster to change that (tls.secretRef may change)",
        describe(&old.spec.tls),
        describe(&cluster.spec.tls)
    ))
}

/// More members than a cluster may have, unless an update keeps the shape as it was.
fn too_many_members(old: Option<&ValkeyCluster>, cluster: &ValkeyCluster) -> Option<String> {
    let shape = |c: &ValkeyCluster| (c.spec.shards, c.spec.replicas_per_shard);
    if old.is_some_and(|old| shape(old) == shape(cluster)) {
        return None;
    }
    check_member_count(cluster.spec.shards, cluster.spec.replicas_per_shard).err()
}

/// What `spec.autoscaling` (or its removal) means that a reader may not expect (MOMENTO-V09.md
/// section 1.2): said when it is set or changed, never on unrelated edits.
fn autoscaling_warnings(old: Option<&ValkeyCluster>, cluster: &ValkeyCluster) -> Vec<String> {
    let before = old.and_then(|o| o.spec.autoscaling.as_ref());
    let target = old.map(ValkeyCluster::target_shards);
    match (&cluster.spec.autoscaling, before) {
        (None, Some(_)) => {
            let target = target.unwrap_or(cluster.spec.shards);
            (target != cluster.spec.shards)
                .then(|| {
                    format!(
                        "autoscaling removed: the cluster goes from {target} shards (status.autoscaling.desiredShards) to {} (spec.shards); set spec.shards to {target} first to keep the current size",
                        cluster.spec.shards
                    )
                })
                .into_iter()
                .collect()
        }
        (None, None) => vec![],
        (Some(autoscaling), before) => {
            let mut warnings = Vec::new();
            if before != Some(autoscaling) {
                warnings.extend(shape_warnings(autoscaling, cluster.spec.shards));
            }
            let old_shards = old.map(|o| o.spec.shards);
            if before.is_some() && old_shards.is_some_and(|s| s != cluster.spec.shards) {
                warnings.push(format!(
                    "spec.shards is only the starting count while spec.autoscaling is set; change minShards/maxShards to move the range (current target: status.autoscaling.desiredShards = {})",
                    target.unwrap_or(cluster.spec.shards)
                ));
            }
            if let (Some(before), Some(target)) = (before, target)
                && before != autoscaling
            {
                let policy = autoscaling.policy(cluster.spec.replicas_per_shard);
                let next =
                    crate::plan::autoscale::initial_target(&policy, target.max(1) as usize) as i32;
                if next != target {
                    warnings.push(format!(
                        "the autoscaling range is now [{}, {}]: the cluster goes from {target} to {next} shards",
                        autoscaling.min_shards, autoscaling.max_shards
                    ));
                }
            }
            warnings
        }
    }
}

/// More than 5 replicas per shard: allowed (Momento's API has no bound), but costly.
fn replicas_warning(cluster: &ValkeyCluster) -> Option<String> {
    (cluster.spec.replicas_per_shard > 5).then(|| {
        format!(
            "replicasPerShard {} is more than 5: every write is replicated to each replica and every member needs its own memory and CPU; make sure this is intended",
            cluster.spec.replicas_per_shard
        )
    })
}

/// Resolves the config chain, the bindings and their roles against the menu. What does not
/// resolve yet is a warning (the cluster stays Blocked until it does); Err: the reason to
/// deny, a username clash this request's `spec.acl` introduces.
fn check_references(
    menu: &MenuMap,
    cluster: &ValkeyCluster,
    old: Option<&ValkeyCluster>,
    warnings: &mut Vec<String>,
) -> Result<(), ResolveError> {
    let config_bindings = match resolve_config(menu, &cluster.spec.config_ref) {
        Ok(resolved) => {
            external_access_allowed(cluster, old, &resolved, warnings)?;
            resolved.acl
        }
        Err(e) => {
            warnings.push(format!(
                "{e}; the cluster stays Blocked until this is fixed"
            ));
            // The config bindings as far as the chain resolves still count for the roles and
            // usernames below.
            crate::resolve::chain::config_bindings(menu, &cluster.spec.config_ref)
        }
    };
    match merge_bindings(&config_bindings, &cluster.spec.acl) {
        Ok(merged) => {
            if let Err(e) = resolve_roles(menu, &merged) {
                warnings.push(format!(
                    "{e}; the cluster stays Blocked until this is fixed"
                ));
            }
        }
        Err(e @ ResolveError::DuplicateUsername { .. }) => {
            let acl_changed = old.is_none_or(|o| o.spec.acl != cluster.spec.acl);
            if acl_changed {
                return Err(e);
            }
            warnings.push(format!(
                "{e}; the cluster stays Blocked until this is fixed"
            ));
        }
        Err(e) => warnings.push(e.to_string()),
    }
    Ok(())
}

/// `spec.externalAccess` of a type the resolved config allows, without TLS: refused when the
/// cluster sets or changes it; a warning when the config stopped allowing it later (the
/// cluster is Blocked until then).
fn external_access_allowed(
    cluster: &ValkeyCluster,
    old: Option<&ValkeyCluster>,
    resolved: &crate::resolve::ResolvedConfig,
    warnings: &mut Vec<String>,
) -> Result<(), ResolveError> {
    let Some(problem) = crate::api::external::external_access_problem(
        cluster.spec.external_access.as_ref(),
        cluster.spec.tls.is_some(),
        &cluster.spec.config_ref,
        &resolved.external_access,
    ) else {
        return Ok(());
    };
    let error = ResolveError::ExternalAccessNotAllowed { problem };
    if old.is_none_or(|o| o.spec.external_access != cluster.spec.external_access) {
        return Err(error);
    }
    warnings.push(error.to_string());
    Ok(())
}

/// A new cluster's `spec.restoreFrom`, checked against the backup as the API server has it
/// (`source`): refused when the backup is known and can never be restored into this cluster
/// (another shard count, another namespace's without the location's leave). A backup that is
/// missing or not Completed yet is only a warning: the cluster waits, Blocked, until it is.
pub fn restore_response(
    req: &AdmissionRequest<ValkeyCluster>,
    response: AdmissionResponse,
    source: &super::RestoreSource,
) -> AdmissionResponse {
    use crate::api::backup::BackupPhase;
    let Some(cluster) = req.object.as_ref() else {
        return response;
    };
    let Some(from) = cluster.spec.restore_from.as_ref() else {
        return response;
    };
    if !response.allowed || req.operation != Operation::Create {
        return response;
    }
    let mut warnings = response.warnings.clone().unwrap_or_default();
    let (backup, location) = match source {
        Ok(found) => found,
        Err(e) => {
            warnings.push(format!("spec.restoreFrom was not checked: {e}"));
            return allow_with_warnings(req, warnings);
        }
    };
    let own_namespace = cluster
        .metadata
        .namespace
        .clone()
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    let namespace = from
        .namespace
        .clone()
        .unwrap_or_else(|| own_namespace.clone());
    let name = from.backup.clone();
    let problem = crate::backup::restore::source_problem(
        &own_namespace,
        cluster.spec.shards,
        (&namespace, &name),
        backup.as_ref(),
        location.as_ref(),
    );
    let Some(problem) = problem else {
        return response;
    };
    let completed = backup
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .is_some_and(|s| s.phase == Some(BackupPhase::Completed));
    if completed && location.is_some() {
        return deny(req, format!("spec.restoreFrom: {problem}"), warnings);
    }
    warnings.push(format!(
        "spec.restoreFrom: {problem}; the cluster stays Blocked, starting no member, until it can be restored"
    ));
    allow_with_warnings(req, warnings)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::{
        AclBinding, AclPermission, ValkeyConfigSpec, ValkeyImageSpec, ValkeyRoleSpec,
    };
    use crate::resolve::MenuMap;
    use crate::webhook::admission::fixtures::{request, unreadable};

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
            ValkeyConfigSpec {
                base_ref: None,
                image_ref: Some("valkey-9-0".into()),
                resources: None,
                valkey: BTreeMap::new(),
                acl: Some(vec![AclBinding {
                    username: "metrics".into(),
                    password_hashes: vec!["a".repeat(64)],
                    permissions: vec![AclPermission {
                        role_ref: "metrics-readonly".into(),
                        keys: vec![],
                        channels: vec![],
                    }],
                }]),
                scheduling: None,
                storage: None,
                metrics: None,
                external_access: None,
            },
        );
        m.roles.insert(
            "metrics-readonly".into(),
            ValkeyRoleSpec {
                commands: vec![],
                categories: vec![],
            },
        );
        m.roles.insert(
            "readwrite".into(),
            ValkeyRoleSpec {
                commands: vec![],
                categories: vec![],
            },
        );
        m
    }

    #[test]
    fn a_cluster_with_resolvable_references_is_accepted_without_warnings() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |_| {});
        let resp = validate(&req, &Ok(menu()));
        assert!(resp.allowed, "{:?}", resp.result);
        assert_eq!(resp.warnings, None);
    }

    #[test]
    fn a_cluster_is_created_only_in_a_watched_namespace_and_one_left_outside_can_still_change() {
        let scope = WatchScope::parse("team-a,team-b").unwrap();
        let create = |ns: &'static str| {
            request::<ValkeyCluster>("valkeycluster-create.json", move |v| {
                v["request"]["namespace"] = ns.into();
                v["request"]["object"]["metadata"]["namespace"] = ns.into();
            })
        };
        assert!(outside_scope(&create("team-b"), &scope).is_none());
        assert!(outside_scope(&create("elsewhere"), &WatchScope::AllNamespaces).is_none());
        let refused = outside_scope(&create("elsewhere"), &scope).expect("refused");
        assert!(!refused.allowed);
        let message = refused.result.message;
        assert!(
            message.contains("does not watch namespace \"elsewhere\"")
                && message.contains("team-a, team-b")
                && message.contains("watchNamespaces"),
            "{message}"
        );
        let mut update = create("elsewhere");
        update.operation = Operation::Update;
        update.old_object = update.object.clone();
        assert!(outside_scope(&update, &scope).is_none());
    }

    #[test]
    fn external_access_is_refused_unless_the_config_allows_its_type() {
        let with = |type_: &'static str| {
            request::<ValkeyCluster>("valkeycluster-create.json", move |v| {
                v["request"]["object"]["spec"]["externalAccess"] =
                    serde_json::json!({"type": type_});
            })
        };
        let resp = validate(&with("NodePort"), &Ok(menu()));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("NodePort is not allowed by ValkeyConfig \"standard\" (allowed: none)"),
            "{}",
            resp.result.message
        );
        let mut allowing = menu();
        allowing
            .configs
            .get_mut("standard")
            .unwrap()
            .external_access = Some(crate::api::external::ExternalAccessPolicy {
            allowed_types: vec![crate::api::external::ExternalServiceType::NodePort],
        });
        assert!(validate(&with("NodePort"), &Ok(allowing.clone())).allowed);
        assert!(!validate(&with("LoadBalancer"), &Ok(allowing)).allowed);
    }

    #[test]
    fn a_missing_config_is_accepted_with_a_warning() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["configRef"] = "not-yet-published".into()
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(resp.allowed);
        let warnings = resp.warnings.unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("ValkeyConfig \"not-yet-published\", which does not exist"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn a_missing_image_or_role_is_accepted_with_a_warning() {
        let mut m = menu();
        m.images.clear();
        m.roles.remove("readwrite");
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |_| {});
        let resp = validate(&req, &Ok(m));
        assert!(resp.allowed);
        let warnings = resp.warnings.unwrap().join("\n");
        assert!(
            warnings.contains("no ValkeyImage \"valkey-9-0\" exists"),
            "{warnings}"
        );
        assert!(
            warnings.contains("ValkeyRole \"readwrite\", which does not exist"),
            "{warnings}"
        );
    }

    #[test]
    fn a_backup_schedule_must_be_five_cron_fields() {
        let with = |schedule: &str| {
            let schedule = schedule.to_string();
            request::<ValkeyCluster>("valkeycluster-create.json", move |v| {
                v["request"]["object"]["spec"]["backup"] =
                    serde_json::json!({"location": "eu", "schedule": schedule});
            })
        };
        assert!(validate(&with("0 3 * * *"), &Ok(menu())).allowed);
        let resp = validate(&with("0 0 3 * * *"), &Ok(menu()));
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("has 6 fields; give five"),
            "{}",
            resp.result.message
        );
        assert!(!validate(&with("every night"), &Ok(menu())).allowed);
    }

    #[test]
    fn autoscaling_refuses_an_inverted_range_and_warns_where_it_surprises() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["autoscaling"] =
                serde_json::json!({"minShards": 6, "maxShards": 4});
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(!resp.allowed);
        assert_eq!(
            resp.result.message,
            "spec.autoscaling.maxShards (4) must be at least minShards (6)"
        );
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["shards"] = 1.into();
            v["request"]["object"]["spec"]["autoscaling"] =
                serde_json::json!({"minShards": 2, "maxShards": 4});
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(resp.allowed);
        let warnings = resp.warnings.unwrap().join("\n");
        assert!(
            warnings.contains("no scaleOut trigger: shards are never added automatically"),
            "{warnings}"
        );
        assert!(
            warnings.contains(
                "spec.shards (1) is outside [2, 4]: the cluster is created with 2 shards"
            ),
            "{warnings}"
        );
    }

    #[test]
    fn removing_autoscaling_says_where_the_shard_count_goes() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            let r = &mut v["request"];
            r["operation"] = "UPDATE".into();
            let mut old = r["object"].clone();
            old["spec"]["autoscaling"] = serde_json::json!({"minShards": 1, "maxShards": 8,
                "scaleOut": {"memoryPercent": 80}});
            old["status"] = serde_json::json!({"autoscaling": {"desiredShards": 7}});
            r["oldObject"] = old;
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(resp.allowed);
        let warnings = resp.warnings.unwrap().join("\n");
        assert!(
            warnings.starts_with("autoscaling removed: the cluster goes from 7 shards"),
            "{warnings}"
        );
    }

    #[test]
    fn a_menu_lookup_failure_accepts_with_a_warning() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |_| {});
        let resp = validate(&req, &Err(unreadable("connection refused")));
        assert!(resp.allowed);
        assert!(resp.warnings.unwrap()[0].contains("references were not checked"));
    }

    #[test]
    fn tls_cannot_be_added_or_removed_after_creation_but_its_secret_may_change() {
        // The fixture's old object has no TLS; the new one adds it.
        let req = request::<ValkeyCluster>("valkeycluster-update-tls.json", |_| {});
        let resp = validate(&req, &Ok(menu()));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("spec.tls cannot be added or removed"),
            "{}",
            resp.result.message
        );
        // Removing it.
        let req = request::<ValkeyCluster>("valkeycluster-update-tls.json", |v| {
            let req = &mut v["request"];
            let new = req["object"].clone();
            req["object"] = req["oldObject"].clone();
            req["oldObject"] = new;
        });
        assert!(!validate(&req, &Ok(menu())).allowed);
        // An update that keeps TLS as it was is fine, even with the menu unreadable.
        let req = request::<ValkeyCluster>("valkeycluster-update-tls.json", |v| {
            v["request"]["oldObject"]["spec"]["tls"] =
                v["request"]["object"]["spec"]["tls"].clone();
        });
        assert!(validate(&req, &Err(unreadable("down"))).allowed);
        // Another Secret: a rotation (Momento's operator allows it too).
        let req = request::<ValkeyCluster>("valkeycluster-update-tls.json", |v| {
            v["request"]["oldObject"]["spec"]["tls"] = serde_json::json!({"secretRef": "old-tls"});
        });
        assert!(validate(&req, &Ok(menu())).allowed);
    }

    #[test]
    fn malformed_channel_entries_are_denied_and_many_replicas_warned() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["acl"][0]["permissions"][0]["channels"] =
                serde_json::json!(["events:*", {"pattern": "has space"}]);
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("spec.acl[0].permissions[0].channels[1] must be"),
            "{}",
            resp.result.message
        );
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["acl"][0]["permissions"][0]["channels"] =
                serde_json::json!(["events:*", {"pattern": "orders:*"}]);
            v["request"]["object"]["spec"]["replicasPerShard"] = 8.into();
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(resp.allowed, "{}", resp.result.message);
        assert!(
            resp.warnings
                .unwrap()
                .iter()
                .any(|w| w.contains("replicasPerShard 8 is more than 5"))
        );
    }

    #[test]
    fn more_than_1000_members_are_denied_with_the_cel_rule_s_message() {
        let create = |shards: i32, replicas: i32| {
            request::<ValkeyCluster>("valkeycluster-create.json", |v| {
                v["request"]["object"]["spec"]["shards"] = shards.into();
                v["request"]["object"]["spec"]["replicasPerShard"] = replicas.into();
            })
        };
        for (shards, replicas) in [(500, 1), (1, 999)] {
            let resp = validate(&create(shards, replicas), &Ok(menu()));
            assert!(
                resp.allowed,
                "{shards} x (1 + {replicas}): {}",
                resp.result.message
            );
        }
        for (shards, replicas) in [(1, 1000), (500, 100_000), (500, i32::MAX)] {
            let resp = validate(&create(shards, replicas), &Err(unreadable("down")));
            assert!(!resp.allowed, "{shards} x (1 + {replicas}) allowed");
            assert_eq!(
                resp.result.message,
                check_member_count(shards, replicas).unwrap_err()
            );
        }
        let resp = validate(&create(500, 100_000), &Ok(menu()));
        let message = &resp.result.message;
        assert!(
            message.starts_with("a cluster has at most 1000 members")
                && message.ends_with("(it is 50000500: 500 x (1 + 100000))"),
            "{message}"
        );
    }

    #[test]
    fn an_update_keeping_an_oversized_shape_is_let_through_changing_it_is_not() {
        let update = |old: (i32, i32), new: (i32, i32)| {
            request::<ValkeyCluster>("valkeycluster-create.json", |v| {
                let req = &mut v["request"];
                req["operation"] = "UPDATE".into();
                req["oldObject"] = req["object"].clone();
                req["oldObject"]["spec"]["shards"] = old.0.into();
                req["oldObject"]["spec"]["replicasPerShard"] = old.1.into();
                req["object"]["spec"]["shards"] = new.0.into();
                req["object"]["spec"]["replicasPerShard"] = new.1.into();
            })
        };
        assert!(validate(&update((3, 2000), (3, 2000)), &Ok(menu())).allowed);
        assert!(!validate(&update((3, 2000), (4, 2000)), &Ok(menu())).allowed);
        assert!(!validate(&update((3, 1), (3, 2000)), &Ok(menu())).allowed);
        assert!(validate(&update((3, 2000), (3, 1)), &Ok(menu())).allowed);
    }

    #[test]
    fn a_username_already_bound_by_the_config_is_denied_when_the_cluster_binds_it() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["object"]["spec"]["acl"][0]["username"] = "metrics".into()
        });
        let resp = validate(&req, &Ok(menu()));
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("ACL user \"metrics\" is bound both"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn deletes_are_always_allowed() {
        let req = request::<ValkeyCluster>("valkeycluster-create.json", |v| {
            v["request"]["operation"] = "DELETE".into();
            v["request"]["oldObject"] = v["request"]["object"].clone();
            v["request"]["object"] = serde_json::Value::Null;
        });
        assert!(validate(&req, &Err(unreadable("down"))).allowed);
    }

    fn restoring(shards: i32, from_namespace: Option<&str>) -> AdmissionRequest<ValkeyCluster> {
        request("valkeycluster-create.json", |v| {
            let object = &mut v["request"]["object"];
            object["spec"]["shards"] = serde_json::json!(shards);
            object["spec"]["restoreFrom"] = match from_namespace {
                Some(ns) => serde_json::json!({"backup": "nightly", "namespace": ns}),
                None => serde_json::json!({"backup": "nightly"}),
            };
        })
    }

    fn found(
        namespace: &str,
        phase: crate::api::backup::BackupPhase,
        shards: usize,
        pairs: Vec<crate::api::backup::CrossNamespaceRestore>,
    ) -> super::super::RestoreSource {
        use crate::api::backup::*;
        let mut backup = ValkeyBackup::new(
            "nightly",
            ValkeyBackupSpec {
                cluster: "cache".into(),
                location: "local".into(),
            },
        );
        backup.metadata.namespace = Some(namespace.into());
        backup.status = Some(ValkeyBackupStatus {
            phase: Some(phase),
            shards: vec![BackupShardStatus::default(); shards],
            ..Default::default()
        });
        let location = ValkeyBackupLocation::new(
            "local",
            ValkeyBackupLocationSpec {
                endpoint: "http://store:8333".into(),
                bucket: "b".into(),
                prefix: None,
                region: None,
                credentials_secret: SecretName { name: "k".into() },
                ca_secret: None,
                cross_namespace_restores: pairs,
            },
        );
        Ok((Some(backup), Some(location)))
    }

    #[test]
    fn a_restore_of_another_shard_count_is_refused_at_creation() {
        use crate::api::backup::BackupPhase::Completed;
        let req = restoring(2, None);
        let ns = req.namespace.clone().unwrap_or_default();
        let allowed = allow_with_warnings(&req, vec![]);
        let response = restore_response(&req, allowed, &found(&ns, Completed, 3, vec![]));
        assert!(!response.allowed);
        assert!(
            response.result.message.contains("holds 3 shard(s)"),
            "{}",
            response.result.message
        );
        let req = restoring(3, None);
        let allowed = allow_with_warnings(&req, vec![]);
        assert!(restore_response(&req, allowed, &found(&ns, Completed, 3, vec![])).allowed);
    }

    #[test]
    fn another_tenants_backup_is_refused_unless_the_location_allows_it() {
        use crate::api::backup::{BackupPhase::Completed, CrossNamespaceRestore};
        let req = restoring(3, Some("team-a"));
        let ns = req.namespace.clone().unwrap_or_default();
        let allowed = allow_with_warnings(&req, vec![]);
        let refused = restore_response(
            &req,
            allowed.clone(),
            &found("team-a", Completed, 3, vec![]),
        );
        assert!(!refused.allowed);
        assert!(refused.result.message.contains("crossNamespaceRestores"));
        let pair = CrossNamespaceRestore {
            from: "team-a".into(),
            to: vec![ns],
        };
        let response = restore_response(&req, allowed, &found("team-a", Completed, 3, vec![pair]));
        assert!(response.allowed, "{}", response.result.message);
    }

    #[test]
    fn a_backup_not_completed_or_not_readable_is_only_a_warning() {
        use crate::api::backup::BackupPhase::Running;
        let req = restoring(3, None);
        let ns = req.namespace.clone().unwrap_or_default();
        let allowed = allow_with_warnings(&req, vec![]);
        let response = restore_response(&req, allowed.clone(), &found(&ns, Running, 3, vec![]));
        assert!(response.allowed);
        let warnings = response.warnings.unwrap_or_default().join(" ");
        assert!(
            warnings.contains("Running") && warnings.contains("Blocked"),
            "{warnings}"
        );
        let missing = restore_response(&req, allowed.clone(), &Ok((None, None)));
        assert!(missing.allowed);
        let unread = restore_response(&req, allowed, &Err(unreadable("down")));
        assert!(unread.allowed);
        assert!(unread.warnings.unwrap_or_default()[0].contains("not checked"));
    }
}
