//! The operator's two ClusterRoles and the Role in its own namespace (the chart's, as rendered
//! into manifests/rbac/operator.yaml by `make manifests`) grant exactly
//! `controller::permissions::OPERATOR_CLUSTER_PERMISSIONS`, `OPERATOR_TENANT_PERMISSIONS` and
//! `OPERATOR_NAMESPACE_PERMISSIONS`: least privilege, with a reason for every verb.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_yaml_ng::Value;
use valkey_operator::controller::permissions::{
    OPERATOR_CLUSTER_PERMISSIONS, OPERATOR_NAMESPACE_PERMISSIONS, OPERATOR_TENANT_PERMISSIONS,
    Permission,
};

/// (API group, resource, object name or "" for every object, verb).
type Grant = (String, String, String, String);

fn grants<'a>(
    groups: impl IntoIterator<Item = &'a str>,
    resources: impl IntoIterator<Item = &'a str> + Clone,
    names: impl IntoIterator<Item = &'a str> + Clone,
    verbs: impl IntoIterator<Item = &'a str> + Clone,
) -> BTreeSet<Grant> {
    let names: Vec<&str> = names.into_iter().collect();
    let names = if names.is_empty() { vec![""] } else { names };
    let mut out = BTreeSet::new();
    for g in groups {
        for r in resources.clone() {
            for n in &names {
                for v in verbs.clone() {
                    out.insert((g.to_string(), r.to_string(), n.to_string(), v.to_string()));
                }
            }
        }
    }
    out
}

fn manifests() -> Vec<Value> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/rbac/operator.yaml"),
    )
    .unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    find_named(docs, kind, "valkey-operator")
}

fn find_named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the operator's {kind} {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// What a ClusterRole or Role grants, rule by rule.
fn granted(role: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        let (g, r, n, v) = (
            strings(&rule["apiGroups"]),
            strings(&rule["resources"]),
            strings(&rule["resourceNames"]),
            strings(&rule["verbs"]),
        );
        out.extend(grants(
            g.iter().map(String::as_str),
            r.iter().map(String::as_str),
            n.iter().map(String::as_str),
            v.iter().map(String::as_str),
        ));
    }
    out
}

fn wanted(permissions: &[Permission]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for p in permissions {
        assert!(!p.why.is_empty());
        out.extend(grants(
            p.groups.iter().copied(),
            p.resources.iter().copied(),
            p.names.iter().copied(),
            p.verbs.iter().copied(),
        ));
    }
    out
}

fn assert_exactly(kind: &str, granted: &BTreeSet<Grant>, wanted: &BTreeSet<Grant>) {
    let extra: Vec<_> = granted.difference(wanted).collect();
    let missing: Vec<_> = wanted.difference(granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{kind}: granted but not needed: {extra:?}; needed but not granted: {missing:?}"
    );
    assert!(
        !granted
            .iter()
            .any(|(g, r, n, v)| g == "*" || r == "*" || n == "*" || v == "*"),
        "{kind}: no wildcards"
    );
}

#[test]
fn the_cluster_role_grants_exactly_the_documented_permissions() {
    let docs = manifests();
    let role = find(&docs, "ClusterRole");
    assert_exactly(
        "ClusterRole",
        &granted(role),
        &wanted(OPERATOR_CLUSTER_PERMISSIONS),
    );
}

#[test]
fn the_tenant_cluster_role_grants_exactly_the_documented_permissions_in_every_namespace() {
    let docs = manifests();
    let role = find_named(&docs, "ClusterRole", "valkey-operator-tenants");
    assert_exactly(
        "ClusterRole valkey-operator-tenants",
        &granted(role),
        &wanted(OPERATOR_TENANT_PERMISSIONS),
    );
    // Without watchNamespaces (the rendered manifests), it is bound cluster-wide.
    let binding = find_named(&docs, "ClusterRoleBinding", "valkey-operator-tenants");
    assert_eq!(binding["roleRef"]["name"], "valkey-operator-tenants");
    // Every rule there is about a namespaced kind; the cluster-scoped ones are the other role's.
    for p in OPERATOR_TENANT_PERMISSIONS {
        for r in p.resources {
            assert!(
                ![
                    "nodes",
                    "persistentvolumes",
                    "storageclasses",
                    "valkeyimages",
                    "valkeyconfigs"
                ]
                .iter()
                .any(|c| r.starts_with(c)),
                "{r} is cluster-scoped: OPERATOR_CLUSTER_PERMISSIONS"
            );
        }
    }
}

#[test]
fn the_operator_namespace_role_grants_exactly_the_documented_permissions() {
    let docs = manifests();
    let role = find(&docs, "Role");
    assert_exactly(
        "Role",
        &granted(role),
        &wanted(OPERATOR_NAMESPACE_PERMISSIONS),
    );
    // It is the operator's namespace, and bound to its service account there.
    let account = find(&docs, "ServiceAccount");
    let namespace = &account["metadata"]["namespace"];
    assert_eq!(&role["metadata"]["namespace"], namespace);
    let binding = find(&docs, "RoleBinding");
    assert_eq!(&binding["metadata"]["namespace"], namespace);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], "valkey-operator");
    assert!(
        binding["subjects"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|s| s["kind"] == "ServiceAccount"
                && s["name"] == "valkey-operator"
                && &s["namespace"] == namespace),
        "the Role is bound to the operator's service account"
    );
}

#[test]
fn secrets_are_deleted_only_in_the_operators_namespace() {
    let deletes_secrets = |permissions: &[Permission]| {
        permissions
            .iter()
            .any(|p| p.resources.contains(&"secrets") && p.verbs.contains(&"delete"))
    };
    assert!(!deletes_secrets(OPERATOR_CLUSTER_PERMISSIONS));
    assert!(!deletes_secrets(OPERATOR_TENANT_PERMISSIONS));
    assert!(deletes_secrets(OPERATOR_NAMESPACE_PERMISSIONS));
}
