//! The operator's ClusterRole (the chart's, as rendered into manifests/rbac/operator.yaml by
//! `make manifests`) grants exactly `controller::permissions::OPERATOR_CLUSTER_PERMISSIONS`:
//! least privilege, with a reason for every verb.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_yaml::Value;
use valkey_operator::controller::permissions::OPERATOR_CLUSTER_PERMISSIONS;

type Grant = (String, String, String);

fn grants<'a>(
    groups: impl IntoIterator<Item = &'a str> + Clone,
    resources: impl IntoIterator<Item = &'a str> + Clone,
    verbs: impl IntoIterator<Item = &'a str> + Clone,
) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for g in groups {
        for r in resources.clone() {
            for v in verbs.clone() {
                out.insert((g.to_string(), r.to_string(), v.to_string()));
            }
        }
    }
    out
}

#[test]
fn the_cluster_role_grants_exactly_the_documented_permissions() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/rbac/operator.yaml"),
    )
    .unwrap();
    let role = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "valkey-operator")
        .expect("the operator's ClusterRole");
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        assert!(
            rule.get("resourceNames").is_none(),
            "a rule with resourceNames: model it here first"
        );
        let (g, r, v) = (
            strings(&rule["apiGroups"]),
            strings(&rule["resources"]),
            strings(&rule["verbs"]),
        );
        granted.extend(grants(
            g.iter().map(String::as_str),
            r.iter().map(String::as_str),
            v.iter().map(String::as_str),
        ));
    }
    let mut wanted = BTreeSet::new();
    for p in OPERATOR_CLUSTER_PERMISSIONS {
        assert!(!p.why.is_empty());
        wanted.extend(grants(
            p.groups.iter().copied(),
            p.resources.iter().copied(),
            p.verbs.iter().copied(),
        ));
    }
    let extra: Vec<_> = granted.difference(&wanted).collect();
    let missing: Vec<_> = wanted.difference(&granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "granted but not needed: {extra:?}; needed but not granted: {missing:?}"
    );
    assert!(
        !granted
            .iter()
            .any(|(g, r, v)| g == "*" || r == "*" || v == "*"),
        "no wildcards"
    );
}
