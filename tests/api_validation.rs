//! Validation rules evaluated client-side: every CEL rule of the CRDs (with kube's `cel`
//! feature) and every rule also enforced in Rust, which must agree with its CEL twin.

mod api_common;

use api_common::*;
use kube::core::cel::Validator;
use serde_json::{Value, json};
use valkey_operator::api::constants::{
    FORCED_SETTINGS, is_forced_setting, is_reserved_annotation, refused_setting,
};
use valkey_operator::api::validation::*;
use valkey_operator::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole, crd};

fn schema_of(kind: &str) -> Value {
    let definition = crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    serde_json::to_value(
        definition.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// CEL failures for `object` (and `old` for transition rules) as "path: message" strings.
fn cel_errors(object: &Value, old: Option<&Value>) -> Vec<String> {
    let kind = object["kind"].as_str().unwrap();
    match Validator::new().validate(&schema_of(kind), object, old) {
        Ok(()) => vec![],
        Err(errors) => errors
            .iter()
            .map(|e| format!("{}: {}", e.field_path, e.message))
            .collect(),
    }
}

fn assert_valid(object: &Value) {
    let errors = cel_errors(object, None);
    assert!(
        errors.is_empty(),
        "{} rejected: {errors:?}",
        object["metadata"]["name"]
    );
}

#[test]
fn the_spec_is_frozen_while_the_cluster_is_created() {
    let active = cluster("c", "ns");
    let scaled = with(active.clone(), "/spec/shards", Some(json!(6)));
    assert!(
        cel_errors(&scaled, Some(&active)).is_empty(),
        "Active: free"
    );
    for old in [
        with(
            active.clone(),
            "/status",
            Some(json!({"state": "Creating"})),
        ),
        with(active.clone(), "/status", None),
    ] {
        let errors = cel_errors(&scaled, Some(&old));
        assert!(
            errors.iter().any(|e| e.contains(FROZEN_WHILE_CREATING)),
            "{errors:?}"
        );
        // The same spec again (kubectl apply of an unchanged manifest), and metadata edits,
        // pass.
        let relabelled = with(old.clone(), "/metadata/labels", Some(json!({"team": "a"})));
        assert!(cel_errors(&relabelled, Some(&old)).is_empty());
    }
}

#[test]
fn autoscaling_ranges_and_thresholds_are_checked_by_cel() {
    let base = cluster("c", "ns");
    let with_autoscaling = |a: Value| with(base.clone(), "/spec/autoscaling", Some(a));
    assert!(cel_errors(&with_autoscaling(json!({"minShards": 2, "maxShards": 4, "scaleOut": {"memoryPercent": 80}, "scaleIn": {"memoryPercent": 40}})), None).is_empty());
    let errors = cel_errors(
        &with_autoscaling(json!({"minShards": 6, "maxShards": 4})),
        None,
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("maxShards must be at least minShards")),
        "{errors:?}"
    );
    for field in ["memoryPercent", "cpuPercent", "bandwidthMbps"] {
        let errors = cel_errors(
            &with_autoscaling(json!({"minShards": 1, "maxShards": 4,
                "scaleOut": {field: 50}, "scaleIn": {field: 50}})),
            None,
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains(&format!("scaleIn.{field} must be below scaleOut.{field}"))),
            "{field}: {errors:?}"
        );
    }
}

#[test]
fn valid_objects_pass_every_cel_rule_and_deserialize() {
    for object in [
        image("valkey-9-0"),
        config("standard"),
        role("cache-readwrite"),
        cluster("my-cluster", "my-app"),
        node("n-0", "my-app"),
    ] {
        assert_valid(&object);
    }
    serde_json::from_value::<ValkeyImage>(image("valkey-9-0")).unwrap();
    serde_json::from_value::<ValkeyConfig>(config("standard")).unwrap();
    serde_json::from_value::<ValkeyRole>(role("cache-readwrite")).unwrap();
    serde_json::from_value::<ValkeyCluster>(cluster("my-cluster", "my-app")).unwrap();
    serde_json::from_value::<ValkeyNode>(node("n-0", "my-app")).unwrap();
}

#[test]
fn every_sample_manifest_passes_every_cel_rule() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/samples");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object: Value = serde::Deserialize::deserialize(document).unwrap();
            if object["apiVersion"] == "valkey.gomomento.com/v1alpha1" {
                assert_valid(&object);
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 7,
        "expected the seed's samples, checked {checked}"
    );
}

#[test]
fn every_invalid_cel_case_is_rejected_naming_its_field() {
    let mut count = 0;
    for case in invalid_creates().into_iter().filter(|c| c.cel) {
        let object = case
            .object
            .to_string()
            .replace("\"NAME\"", "\"x\"")
            .replace("\"NS\"", "\"ns\"");
        let object: Value = serde_json::from_str(&object).unwrap();
        // `metadata.name` cases replace the placeholder themselves.
        let errors = cel_errors(&object, None);
        assert!(!errors.is_empty(), "{}: accepted", case.name);
        let leaf = case.field.rsplit('.').next().unwrap();
        let leaf = leaf.split('[').next().unwrap();
        assert!(
            errors.iter().any(|e| e.contains(leaf)),
            "{}: errors {errors:?} do not name {}",
            case.name,
            case.field
        );
        count += 1;
    }
    // Fewer since Momento compatibility moved forced settings from CEL to a webhook warning.
    assert!(count >= 30, "only {count} CEL cases");
}

#[test]
fn tls_cannot_be_added_or_removed_after_creation() {
    let plain = cluster("c", "ns");
    let tls = with(
        plain.clone(),
        "/spec/tls",
        Some(json!({"secretRef": "c-tls"})),
    );
    let other = with(
        plain.clone(),
        "/spec/tls",
        Some(json!({"secretRef": "other"})),
    );
    assert!(
        cel_errors(&tls, None).is_empty(),
        "TLS at creation is allowed"
    );
    for (what, new, old) in [("added", &tls, &plain), ("removed", &plain, &tls)] {
        let errors = cel_errors(new, Some(old));
        assert!(
            errors
                .iter()
                .any(|e| e.contains("spec.tls cannot be added or removed")),
            "tls {what}: {errors:?}"
        );
    }
    // Another Secret is a rotation, as in Momento's operator.
    assert!(
        cel_errors(&other, Some(&tls)).is_empty(),
        "secretRef may change"
    );
    let scaled = with(tls.clone(), "/spec/shards", Some(json!(6)));
    assert!(
        cel_errors(&scaled, Some(&tls)).is_empty(),
        "other fields stay mutable"
    );
}

#[test]
fn valkey_node_spec_is_immutable() {
    let old = node("n", "ns");
    let new = with(
        old.clone(),
        "/spec/image",
        Some(json!("valkey/valkey:9.1.2")),
    );
    let errors = cel_errors(&new, Some(&old));
    assert!(errors.iter().any(|e| e.contains("immutable")), "{errors:?}");
    assert!(cel_errors(&old, Some(&old)).is_empty());
}

#[test]
fn reserved_annotation_message_names_the_key() {
    let object = with(
        cluster("c", "ns"),
        "/spec/podAnnotations/valkey.gomomento.com~1x",
        Some(json!("1")),
    );
    let errors = cel_errors(&object, None);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("remove: valkey.gomomento.com/x")),
        "{errors:?}"
    );
}

/// Evaluate one rule on one value, client-side.
fn rule_accepts(rule: kube::core::Rule, value: Value) -> bool {
    let schema = json!({"type": "string", "maxLength": 1024, "x-kubernetes-validations": [rule]});
    Validator::new().validate(&schema, &value, None).is_ok()
}

fn agree(pattern: &Pattern, good: &[&str], bad: &[&str]) {
    for value in good {
        assert!(pattern.is_match(value), "Rust refuses {value:?}");
        assert!(
            rule_accepts(pattern.rule("f"), json!(value)),
            "CEL refuses {value:?}"
        );
    }
    for value in bad {
        assert!(!pattern.is_match(value), "Rust accepts {value:?}");
        assert!(
            !rule_accepts(pattern.rule("f"), json!(value)),
            "CEL accepts {value:?}"
        );
        assert!(
            pattern
                .check("spec.f", value)
                .unwrap_err()
                .to_string()
                .starts_with("spec.f must be")
        );
    }
}

#[test]
fn references_are_dns_1123_subdomains() {
    agree(
        &DNS1123_SUBDOMAIN,
        &["standard", "valkey-9-0", "a.b-c", "x"],
        &["", "Standard", "-a", "a-", "a_b", "a b", &"a".repeat(254)],
    );
}

#[test]
fn cluster_names_are_short_dns_1035_labels() {
    agree(
        &CLUSTER_NAME,
        &["my-cluster", "c", &"a".repeat(40)],
        &["1c", "my.cluster", "c-", &"a".repeat(41)],
    );
}

#[test]
fn image_repository_tag_and_digest_formats() {
    agree(
        &IMAGE_REPOSITORY,
        &[
            "valkey/valkey",
            "valkey",
            "registry.example.com:5000/team/valkey",
            "ghcr.io/a/b_c",
        ],
        &[
            "valkey/valkey:9",
            "Valkey/valkey",
            "valkey//x",
            "a@sha256:1",
        ],
    );
    agree(
        &IMAGE_TAG,
        &["9.0.0", "latest", "9.0.0-alpine"],
        &["", ".9", "-9", "a b", "a:b"],
    );
    agree(
        &IMAGE_DIGEST,
        &[&format!("sha256:{HASH_A}")],
        &["sha256:abc", HASH_A, &format!("md5:{HASH_A}")],
    );
}

#[test]
fn password_hashes_are_lowercase_sha256_hex() {
    agree(
        &SHA256_HEX,
        &[HASH_A],
        &[
            "",
            &HASH_A.to_uppercase(),
            &HASH_A[1..],
            &format!("{HASH_A}0"),
            "password",
        ],
    );
}

#[test]
fn usernames_are_valid_acl_usernames() {
    agree(
        &ACL_USERNAME,
        &[
            "app",
            "default",
            "team-a.reader",
            "svc@team",
            "a:b",
            "_svc",
            "Svc_1",
            &"a".repeat(128),
        ],
        &["", "with space", "-x", ".x", "a>b", &"a".repeat(129)],
    );
    // The operator's own users stay reserved.
    let reserved = valkey_operator::api::validation::reserved_username_rule();
    assert!(!rule_accepts(reserved.clone(), json!("_valkey-operator")));
    assert!(rule_accepts(reserved, json!("_svc")));
}

#[test]
fn key_and_channel_patterns_have_no_spaces() {
    agree(
        &ACL_PATTERN,
        &["app:*", "*", "user:{*}:session", "a?b[cd]"],
        &["", "a b", "a\tb", "ключ"],
    );
}

#[test]
fn role_command_and_category_names() {
    agree(
        &COMMAND_NAME,
        &[
            "get",
            "config|get",
            "client|no-evict",
            "json.get",
            "GET",
            "Config|Get",
        ],
        &["config|", "|get", "a|b|c", "config get", "+get"],
    );
    agree(
        &CATEGORY_NAME,
        &["read", "keyspace", "all", "Read"],
        &["@read", "", "read write"],
    );
}

#[test]
fn setting_keys_zones_and_label_formats() {
    agree(
        &SETTING_KEY,
        &["maxmemory", "maxmemory-policy", "io-threads"],
        &["PORT", "max memory", "-x", ""],
    );
    agree(
        &ZONE_NAME,
        &["zone-a", "us-east-1a", "Z1"],
        &["", "-a", "a b"],
    );
    agree(
        &LABEL_VALUE,
        &["", "linux", "a.b_c-d"],
        &["a b", "-a", &"a".repeat(64)],
    );
    agree(
        &QUALIFIED_NAME,
        &["prometheus.io/scrape", "app", "kubernetes.io/os", "a.b/c_d"],
        &[
            "bad key",
            "/x",
            "a/",
            "A.B/c",
            &format!("x/{}", "a".repeat(64)),
        ],
    );
}

#[test]
fn forced_settings_cover_what_product_md_lists() {
    for key in [
        "cluster-enabled",
        "port",
        "cluster-port",
        "dir",
        "cluster-config-file",
        "aclfile",
        "cluster-announce-ip",
        "cluster-announce-hostname",
        "replica-announce-ip",
        "tls-port",
        "tls-cert-file",
        "tls-cluster",
        "tls-replication",
    ] {
        assert!(is_forced_setting(key), "{key} must be forced");
        let keys = [key.to_string()];
        assert_eq!(forced_keys_in(&keys), vec![key]);
    }
    for key in [
        "maxmemory",
        "maxmemory-policy",
        "appendonly",
        "io-threads",
        "portal",
    ] {
        assert!(!is_forced_setting(key), "{key} is a user setting");
    }
    // Accepted by the schema, as Momento's API accepts them: the webhook warns that they are
    // ignored and the renderer never writes them (tests in src/resolve/conf.rs). Except the
    // ones Momento v0.9 refuses (next test).
    for key in FORCED_SETTINGS {
        let object = with(
            config("c"),
            &format!("/spec/valkey/{key}"),
            Some(json!("x")),
        );
        assert_eq!(
            cel_errors(&object, None).is_empty(),
            refused_setting("spec.valkey", key).is_none(),
            "CEL and refused_setting disagree on forced {key}"
        );
    }
}

#[test]
fn authentication_tls_and_include_directives_are_refused_with_their_message() {
    let cases = [
        (
            "requirepass",
            "spec.valkey.requirepass is managed by the operator: bind users with spec.acl",
        ),
        (
            "primaryauth",
            "spec.valkey.primaryauth is managed by the operator: bind users with spec.acl",
        ),
        (
            "masterauth",
            "spec.valkey.masterauth is managed by the operator: bind users with spec.acl",
        ),
        (
            "masteruser",
            "spec.valkey.masteruser is managed by the operator: bind users with spec.acl",
        ),
        (
            "primaryuser",
            "spec.valkey.primaryuser is managed by the operator: bind users with spec.acl",
        ),
        (
            "aclfile",
            "spec.valkey.aclfile is managed by the operator: bind users with spec.acl",
        ),
        (
            "user",
            "spec.valkey.user is managed by the operator: bind users with spec.acl",
        ),
        (
            "tls-port",
            "spec.valkey.tls-port is managed by the operator: use spec.tls on the ValkeyCluster",
        ),
        (
            "tls-cert-file",
            "spec.valkey.tls-cert-file is managed by the operator: use spec.tls on the ValkeyCluster",
        ),
        (
            "include",
            "spec.valkey.include would bypass the operator's settings and is not allowed",
        ),
    ];
    for (key, message) in cases {
        assert_eq!(
            refused_setting("spec.valkey", key).as_deref(),
            Some(message)
        );
        let object = with(
            config("c"),
            &format!("/spec/valkey/{key}"),
            Some(json!("x")),
        );
        let errors = cel_errors(&object, None);
        assert!(
            errors.len() == 1 && errors[0].ends_with(message),
            "{key}: {errors:?}"
        );
    }
    // Every other forced setting is still accepted (warned about, overridden), and so are
    // the user's own settings, including ones that only look alike.
    for key in [
        "port",
        "dir",
        "bind",
        "cluster-announce-ip",
        "maxmemory",
        "username-x",
        "includes",
        "tls",
    ] {
        let object = with(
            config("c"),
            &format!("/spec/valkey/{key}"),
            Some(json!("x")),
        );
        assert!(cel_errors(&object, None).is_empty(), "{key} refused");
        assert_eq!(refused_setting("spec.valkey", key), None, "{key}");
    }
    // v1beta1 names its map spec.settings.
    let mut object = with(
        config("c"),
        "/spec/settings",
        Some(json!({"requirepass": "x"})),
    );
    object["apiVersion"] = json!("valkey.gomomento.com/v1beta1");
    object["spec"].as_object_mut().unwrap().remove("valkey");
    let schema = schema_of_version("ValkeyConfig", "v1beta1");
    let errors = Validator::new()
        .validate(&schema, &object, None)
        .unwrap_err();
    assert!(
        errors.iter().any(|e| e.message.ends_with(
            "spec.settings.requirepass is managed by the operator: bind users with spec.acl"
        )),
        "{errors:?}"
    );
}

#[test]
fn setting_values_are_single_line() {
    assert!(is_valid_setting_value("1500mb"));
    assert!(is_valid_setting_value("save 900 1"));
    assert!(!is_valid_setting_value("1gb\nport 7000"));
    assert!(!is_valid_setting_value("a\tb"));
}

#[test]
fn reserved_annotation_prefix() {
    assert!(is_reserved_annotation("valkey.gomomento.com/spec-hash"));
    assert!(!is_reserved_annotation("prometheus.io/scrape"));
    assert!(!is_reserved_annotation("sub.valkey.gomomento.com/x"));
}

#[test]
fn quantities_are_positive_kubernetes_quantities() {
    for value in ["1", "500m", "0.5", "2Gi", "16Gi", "1e3", "+1"] {
        assert!(is_positive_quantity(value), "Rust refuses {value}");
        assert!(
            rule_accepts(positive_quantity_rule("cpu", "1"), json!(value)),
            "CEL refuses {value}"
        );
    }
    for value in ["0", "0m", "one", "2GB", "-1", "", "1 Gi"] {
        assert!(!is_positive_quantity(value), "Rust accepts {value}");
        assert!(
            !rule_accepts(positive_quantity_rule("cpu", "1"), json!(value)),
            "CEL accepts {value}"
        );
    }
}

/// The openAPI schema of `kind` at API version `version`.
fn schema_of_version(kind: &str, version: &str) -> Value {
    let definition = crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let served = definition
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap_or_else(|| panic!("{kind} has no version {version}"));
    serde_json::to_value(served.schema.as_ref().unwrap().open_api_v3_schema.as_ref()).unwrap()
}

/// CEL failures of a ValkeyCluster with this shape, in v1alpha1 and in v1beta1 (where the
/// two fields sit under `spec.topology`); both versions must say the same.
fn shape_errors(shards: Value, replicas: Value) -> Vec<String> {
    let alpha = with(
        with(cluster("c", "ns"), "/spec/shards", Some(shards.clone())),
        "/spec/replicasPerShard",
        Some(replicas.clone()),
    );
    let mut beta = alpha.clone();
    beta["apiVersion"] = json!("valkey.gomomento.com/v1beta1");
    let spec = beta["spec"].as_object_mut().unwrap();
    spec.remove("shards");
    spec.remove("replicasPerShard");
    spec.insert(
        "topology".into(),
        json!({"shards": shards, "replicasPerShard": replicas}),
    );
    let errors = |object: &Value, version: &str| -> Vec<String> {
        let schema = schema_of_version("ValkeyCluster", version);
        match Validator::new().validate(&schema, object, None) {
            Ok(()) => vec![],
            Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
        }
    };
    let (a, b) = (errors(&alpha, "v1alpha1"), errors(&beta, "v1beta1"));
    assert_eq!(a, b, "v1alpha1 and v1beta1 disagree");
    a
}

#[test]
fn a_cluster_has_at_most_1000_members() {
    for (shards, replicas) in [(500, 1), (1, 999), (250, 3), (10, 99), (1, 0), (500, 0)] {
        assert!(
            shape_errors(json!(shards), json!(replicas)).is_empty(),
            "{shards} x (1 + {replicas}) refused"
        );
        assert_eq!(check_member_count(shards, replicas), Ok(()));
    }
    for (shards, replicas) in [(1, 1000), (500, 2), (334, 2), (500, 100_000), (1, i32::MAX)] {
        let errors = shape_errors(json!(shards), json!(replicas));
        let rust = check_member_count(shards, replicas).unwrap_err();
        assert_eq!(errors.len(), 1, "{shards} x (1 + {replicas}): {errors:?}");
        assert!(rust.starts_with(&errors[0]), "{rust} / {errors:?}");
        assert!(rust.starts_with("a cluster has at most 1000 members"));
    }
    let rust = check_member_count(500, 100_000).unwrap_err();
    assert!(
        rust.ends_with("(it is 50000500: 500 x (1 + 100000))"),
        "{rust}"
    );
}

#[test]
fn the_member_bound_holds_for_values_beyond_int32() {
    // Should the API server let a value beyond int32 through, the product must not overflow
    // CEL's int into an error (or worse, wrap): the rule still refuses, with its message.
    for (shards, replicas) in [
        (json!(1), json!(i64::MAX)),
        (json!(i64::MAX), json!(1)),
        (json!(i64::MAX), json!(i64::MAX)),
    ] {
        let errors = shape_errors(shards, replicas);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("a cluster has at most 1000 members"),
            "{errors:?}"
        );
    }
}

#[test]
fn the_member_bound_is_cheap_for_the_api_server() {
    use kube::core::cel::{WarningKind, compile_schema, estimate_rule_cost};
    let rule = member_count_rule();
    // A fixed message: a messageExpression formatting the numbers was refused by the API
    // server's cost estimate (over 100x its budget), which this crate's estimate missed.
    assert!(
        matches!(&rule.message, Some(kube::core::Message::Message(_))),
        "{:?}",
        rule.message
    );
    for version in ["v1alpha1", "v1beta1"] {
        let schema = schema_of_version("ValkeyCluster", version);
        let spec = &schema["properties"]["spec"];
        let owner = if version == "v1alpha1" {
            spec
        } else {
            &spec["properties"]["topology"]
        };
        let compiled = compile_schema(owner);
        let costly: Vec<_> = estimate_rule_cost(&rule.rule, &compiled)
            .into_iter()
            .filter(|w| matches!(w.kind, WarningKind::CostExceeded))
            .collect();
        assert!(costly.is_empty(), "{version}: {costly:?}");
        let rules = owner["x-kubernetes-validations"].to_string();
        assert!(
            rules.contains("self.shards * (1 + self.replicasPerShard) <= 1000"),
            "{rules}"
        );
    }
}
