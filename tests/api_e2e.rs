//! The API against a real API server (the local cluster). Run with `cargo test --features e2e
//! --test api_e2e` (`make e2e`). Needs a reachable cluster: kubeconfig from `$KUBECONFIG`, else
//! `$LC_DIR/kubeconfig`, else `.localcluster/kubeconfig`; fails (never skips) without one.
#![cfg(feature = "e2e")]

mod api_common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;

use api_common::*;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kubeconfig() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECONFIG") {
        return PathBuf::from(path);
    }
    let dir = std::env::var("LC_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join(".localcluster"));
    dir.join("kubeconfig")
}

fn kubectl_bin() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return PathBuf::from(path);
    }
    let built = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/valkey-operator/k8s-v1.34.4/bin/kubectl");
    if built.exists() {
        built
    } else {
        PathBuf::from("kubectl")
    }
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Run kubectl, optionally as `user` in `groups`, with `stdin`.
fn kubectl_as(identity: Option<(&str, &[&str])>, args: &[&str], stdin: Option<&str>) -> Out {
    let mut command = Command::new(kubectl_bin());
    command.arg("--kubeconfig").arg(kubeconfig()).args(args);
    if let Some((user, groups)) = identity {
        command.arg(format!("--as={user}"));
        for group in groups {
            command.arg(format!("--as-group={group}"));
        }
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> Out {
    kubectl_as(None, args, stdin)
}

fn must(args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(args, stdin);
    assert!(out.ok, "kubectl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// Reachable cluster, CRDs applied (server-side) and Established: once per test binary.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let config = kubeconfig();
        assert!(
            config.exists(),
            "no kubeconfig at {} (set KUBECONFIG or LC_DIR, or start the local cluster with `make up`)",
            config.display()
        );
        let ns = kubectl(&["get", "ns", "default", "--request-timeout=10s"], None);
        assert!(ns.ok, "the cluster in {} is not reachable: {}", config.display(), ns.stderr);
        let crds = repo().join("crds");
        must(&["apply", "--server-side", "--force-conflicts", "--field-manager=valkey-api-e2e", "-f", crds.to_str().unwrap()], None);
        must(&["wait", "--for=condition=Established", "--timeout=60s", "crd/valkeyimages.valkey.gomomento.com", "crd/valkeyconfigs.valkey.gomomento.com", "crd/valkeyroles.valkey.gomomento.com", "crd/valkeyclusters.valkey.gomomento.com", "crd/valkeynodes.valkey.gomomento.com"], None);
        let rbac = repo().join("manifests/rbac");
        must(&["apply", "--server-side", "--force-conflicts", "--field-manager=valkey-api-e2e", "-f", rbac.to_str().unwrap()], None);
    });
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{:x}",
        std::process::id() % 10000,
        nanos % 0xfffff
    )
}

/// A namespace deleted when dropped.
struct Namespace(String);

impl Namespace {
    fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        must(&["create", "namespace", &name], None);
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        kubectl(
            &[
                "delete",
                "namespace",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// Cluster-scoped objects deleted when dropped.
struct Cleanup(Vec<(String, String)>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            kubectl(
                &["delete", kind, name, "--ignore-not-found", "--wait=false"],
                None,
            );
        }
    }
}

/// The operator's service account: the only identity the admission webhook lets write
/// ValkeyNodes (even cluster-admin is refused).
const OPERATOR: (&str, &[&str]) = (
    "system:serviceaccount:valkey-operator-system:valkey-operator",
    &[
        "system:serviceaccounts",
        "system:serviceaccounts:valkey-operator-system",
        "system:authenticated",
    ],
);

/// `apply` as the operator: how ValkeyNodes get created.
/// Creates `object` as the operator's service account, the way the operator creates
/// ValkeyNodes (its ClusterRole has create, not patch, on them).
fn apply_as_operator(object: &Value) -> Out {
    kubectl_as(
        Some(OPERATOR),
        &["create", "-f", "-"],
        Some(&object.to_string()),
    )
}

fn apply(object: &Value) -> Out {
    kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=valkey-api-e2e",
            "-f",
            "-",
        ],
        Some(&object.to_string()),
    )
}

#[test]
fn every_sample_applies_cleanly_and_is_listed_in_the_valkey_category() {
    setup();
    let samples = repo().join("manifests/samples");
    let samples = samples.to_str().unwrap();
    // The samples have fixed names and the cluster is shared: wait out a previous run's
    // namespace deletion, and only delete afterwards what this test created.
    for _ in 0..120 {
        let phase = kubectl(
            &["get", "ns", "my-app", "-o", "jsonpath={.status.phase}"],
            None,
        );
        if !phase.stdout.contains("Terminating") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let existing = kubectl(
        &["get", "-f", samples, "-o", "name", "--ignore-not-found"],
        None,
    )
    .stdout;
    let out = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=valkey-api-e2e",
            "-f",
            samples,
        ],
        None,
    );
    let created: Vec<String> = kubectl(
        &["get", "-f", samples, "-o", "name", "--ignore-not-found"],
        None,
    )
    .stdout
    .lines()
    .filter(|name| !existing.lines().any(|e| e == *name))
    .map(str::to_string)
    .collect();
    let cleanup = || {
        for name in created.iter().rev() {
            let (kind, object) = name.split_once('/').unwrap();
            let namespaced = kind.starts_with("valkeycluster");
            let mut args = vec!["delete", kind, object, "--ignore-not-found", "--wait=false"];
            if namespaced {
                args.extend(["-n", "my-app"]);
            }
            kubectl(&args, None);
        }
    };
    if !out.ok {
        cleanup();
        panic!("samples rejected: {}", out.stderr);
    }
    let listed = kubectl(&["get", "valkey", "-A"], None);
    cleanup();
    assert!(listed.ok, "{}", listed.stderr);
    for expected in [
        "valkeycluster.valkey.gomomento.com/my-cluster",
        "valkeycluster.valkey.gomomento.com/sessions",
        "valkeyconfig.valkey.gomomento.com/standard",
        "valkeyconfig.valkey.gomomento.com/large",
        "valkeyimage.valkey.gomomento.com/valkey-9-0",
        "valkeyimage.valkey.gomomento.com/valkey-9-1",
        "valkeyrole.valkey.gomomento.com/cache-readwrite",
        "valkeyrole.valkey.gomomento.com/metrics-readonly",
        "STATE",
        "SHARDS",
        "REPLICAS",
        "CONFIG",
    ] {
        assert!(
            listed.stdout.contains(expected),
            "`kubectl get valkey -A` lacks {expected}:\n{}",
            listed.stdout
        );
    }
}

#[test]
fn valkey_nodes_are_listed_in_the_valkey_category() {
    setup();
    let ns = Namespace::new("vk-api-node");
    let name = unique("n");
    let object = node(&name, &ns.0);
    let out = apply_as_operator(&object);
    assert!(out.ok, "the operator creates a ValkeyNode: {}", out.stderr);
    let listed = must(&["get", "valkey", "-n", &ns.0], None);
    assert!(
        listed.contains(&format!("valkeynode.valkey.gomomento.com/{name}")),
        "{listed}"
    );
    for column in ["CLUSTER", "SHARD", "ROLE", "PHASE"] {
        assert!(listed.contains(column), "no {column} column: {listed}");
    }
}

#[test]
fn explain_prints_the_field_documentation() {
    setup();
    // No version named: kubectl's preferred version is v1alpha1, the shape of the docs (v1beta1
    // is declared but not served by default).
    let out = must(&["explain", "valkeycluster.spec.shards"], None);
    assert!(
        out.contains("Number of shards (primaries), 1 to 500"),
        "{out}"
    );
    let out = must(&["explain", "valkeyconfig.spec.baseRef"], None);
    assert!(out.contains("inherits from"), "{out}");
}

#[test]
fn at_least_40_invalid_objects_are_rejected_naming_the_field() {
    setup();
    let ns = Namespace::new("vk-api-invalid");
    let cases = invalid_creates();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut cleanup = Cleanup(vec![]);
    let mut failures = vec![];
    for case in &cases {
        let name = unique("bad");
        let text = case
            .object
            .to_string()
            .replace("\"NAME\"", &format!("\"{name}\""))
            .replace("\"NS\"", &format!("\"{}\"", ns.0));
        let object: Value = serde_json::from_str(&text).unwrap();
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        // Plain create: server-side apply refuses duplicate list-map keys before validation
        // runs, with a different (still field-naming) message.
        let out = kubectl(&["create", "-f", "-"], Some(&object.to_string()));
        if out.ok {
            cleanup.0.push((
                kind,
                object["metadata"]["name"].as_str().unwrap().to_string(),
            ));
            failures.push(format!("{}: accepted", case.name));
        } else if !out.stderr.contains(case.field) || !out.stderr.contains("is invalid") {
            failures.push(format!(
                "{}: message does not name {}: {}",
                case.name,
                case.field,
                out.stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn tls_cannot_be_added_or_removed_and_valkey_node_spec_is_immutable_on_the_server() {
    setup();
    let ns = Namespace::new("vk-api-immutable");
    let plain = cluster("plain", &ns.0);
    // Its config is missing, so it goes Blocked, past Creating (a TLS cluster being created
    // whose Secret is missing waits in Creating, spec frozen, for the grace).
    let tls = with(
        with(
            cluster("secure", &ns.0),
            "/spec/tls",
            Some(json!({"secretRef": "secure-tls"})),
        ),
        "/spec/configRef",
        Some(json!("no-such-config")),
    );
    assert!(apply(&plain).ok && apply(&tls).ok);
    for (what, patch, target) in [
        ("added", r#"{"spec":{"tls":{"secretRef":"x"}}}"#, "plain"),
        ("removed", r#"{"spec":{"tls":null}}"#, "secure"),
    ] {
        let out = kubectl(
            &[
                "-n",
                &ns.0,
                "patch",
                "valkeycluster",
                target,
                "--type=merge",
                "-p",
                patch,
            ],
            None,
        );
        assert!(!out.ok, "tls {what} was accepted");
        assert!(
            out.stderr.contains("spec.tls cannot be added or removed"),
            "tls {what}: {}",
            out.stderr
        );
    }
    // Edits are refused until the cluster is past Creating (Momento v0.9): its config is
    // missing, so it goes Blocked.
    wait_for_state(&ns.0, "secure", "Blocked");
    // Another Secret is a rotation (as in Momento's operator): accepted.
    let out = kubectl(
        &[
            "-n",
            &ns.0,
            "patch",
            "valkeycluster",
            "secure",
            "--type=merge",
            "-p",
            r#"{"spec":{"tls":{"secretRef":"other"}}}"#,
        ],
        None,
    );
    assert!(out.ok, "tls.secretRef may change: {}", out.stderr);
    let out = kubectl(
        &[
            "-n",
            &ns.0,
            "patch",
            "valkeycluster",
            "secure",
            "--type=merge",
            "-p",
            r#"{"spec":{"shards":4}}"#,
        ],
        None,
    );
    assert!(out.ok, "scaling a TLS cluster must work: {}", out.stderr);

    let out = apply_as_operator(&node("n-0", &ns.0));
    assert!(out.ok, "the operator creates a ValkeyNode: {}", out.stderr);
    let out = kubectl(
        &[
            "-n",
            &ns.0,
            "patch",
            "valkeynode",
            "n-0",
            "--type=merge",
            "-p",
            r#"{"spec":{"image":"valkey/valkey:9.1.2"}}"#,
        ],
        None,
    );
    assert!(
        !out.ok && out.stderr.contains("immutable"),
        "node spec edit: {}",
        out.stderr
    );
}

/// Waits up to 90 s for the cluster's `status.state` to be `state`.
fn wait_for_state(ns: &str, name: &str, state: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let out = kubectl(
            &[
                "-n",
                ns,
                "get",
                "valkeycluster",
                name,
                "-o",
                "jsonpath={.status.state}",
            ],
            None,
        );
        if out.ok && out.stdout.trim() == state {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{ns}/{name} never reached {state}: {} {}",
            out.stdout,
            out.stderr
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

const PRODUCT_USER: (&str, &[&str]) = ("alice", &["team-a"]);

/// Binds `valkey-product-team` to group team-a in `namespace`, as a platform team onboards a team.
fn bind_product_team(namespace: &str) {
    must(
        &[
            "-n",
            namespace,
            "create",
            "rolebinding",
            "valkey-product-team",
            "--clusterrole=valkey-product-team",
            "--group=team-a",
        ],
        None,
    );
}
const PLATFORM_USER: (&str, &[&str]) = ("paula", &["platform-team"]);

/// `kubectl auth can-i` as someone.
fn can(identity: (&str, &[&str]), verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    // `kubectl auth can-i VERB kind/x` means the object named x: a subresource is a flag.
    let subresource;
    let mut args = match resource.split_once('/') {
        Some((kind, sub)) => {
            subresource = format!("--subresource={sub}");
            vec!["auth", "can-i", verb, kind, subresource.as_str()]
        }
        None => vec!["auth", "can-i", verb, resource],
    };
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    kubectl_as(Some(identity), &args, None).stdout.trim() == "yes"
}

#[test]
fn product_team_manages_valkey_clusters_in_its_own_namespace_only() {
    setup();
    let own = Namespace::new("vk-api-team-a");
    let other = Namespace::new("vk-api-team-b");
    bind_product_team(&own.0);
    let who = Some(PRODUCT_USER);

    // Create, edit, delete in its own namespace, for real.
    let object = cluster("mine", &own.0).to_string();
    let out = kubectl_as(who, &["create", "-f", "-"], Some(&object));
    assert!(
        out.ok,
        "product team cannot create in its namespace: {}",
        out.stderr
    );
    let out = kubectl_as(
        who,
        &[
            "-n",
            &own.0,
            "patch",
            "valkeycluster",
            "mine",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"team":"a"}}}"#,
        ],
        None,
    );
    assert!(out.ok, "product team cannot edit: {}", out.stderr);
    let out = kubectl_as(
        who,
        &["-n", &own.0, "get", "valkeyclusters,valkeynodes"],
        None,
    );
    assert!(
        out.ok,
        "product team cannot read its clusters and nodes: {}",
        out.stderr
    );
    let out = kubectl_as(
        who,
        &["-n", &own.0, "delete", "valkeycluster", "mine"],
        None,
    );
    assert!(out.ok, "product team cannot delete: {}", out.stderr);

    // Nothing in another namespace.
    let object = cluster("theirs", &other.0).to_string();
    let out = kubectl_as(who, &["create", "-f", "-"], Some(&object));
    assert!(
        !out.ok && out.stderr.contains("forbidden"),
        "created in another namespace: {}",
        out.stderr
    );
    assert!(!can(PRODUCT_USER, "get", "valkeyclusters", Some(&other.0)));

    // ValkeyNodes: read only, even in its own namespace.
    let object = node("n-0", &own.0).to_string();
    let out = kubectl_as(who, &["create", "-f", "-"], Some(&object));
    assert!(
        !out.ok && out.stderr.contains("forbidden"),
        "product team created a ValkeyNode: {}",
        out.stderr
    );
    let out = kubectl_as(Some(OPERATOR), &["create", "-f", "-"], Some(&object));
    assert!(out.ok, "the operator creates a ValkeyNode: {}", out.stderr);
    for args in [
        vec![
            "-n",
            own.0.as_str(),
            "patch",
            "valkeynode",
            "n-0",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"x":"y"}}}"#,
        ],
        vec!["-n", own.0.as_str(), "delete", "valkeynode", "n-0"],
        vec![
            "-n",
            own.0.as_str(),
            "patch",
            "valkeynode",
            "n-0",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"lifecycle":"Active"}}"#,
        ],
    ] {
        let out = kubectl_as(who, &args, None);
        assert!(
            !out.ok && out.stderr.contains("forbidden"),
            "product team may {args:?}: {}",
            out.stderr
        );
    }
    let out = kubectl_as(who, &["-n", &own.0, "get", "valkeynode", "n-0"], None);
    assert!(
        out.ok,
        "product team cannot read its ValkeyNode: {}",
        out.stderr
    );
}

/// Backups by impersonation: a product team asks for and deletes backups in its own namespace
/// and reads the locations, never their keys (in the operator's namespace) nor the Jobs there;
/// the platform team publishes locations and reads backups.
#[test]
fn backups_are_the_product_teams_and_the_keys_stay_with_the_platform() {
    setup();
    let own = Namespace::new("vk-api-backup-a");
    let other = Namespace::new("vk-api-backup-b");
    bind_product_team(&own.0);
    let operator_ns = Some("valkey-operator-system");
    for (verb, resource, namespace, allowed) in [
        ("create", "valkeybackups", Some(own.0.as_str()), true),
        ("delete", "valkeybackups", Some(own.0.as_str()), true),
        ("get", "valkeybackups/status", Some(own.0.as_str()), true),
        ("patch", "valkeybackups/status", Some(own.0.as_str()), false),
        ("update", "valkeybackups", Some(own.0.as_str()), false),
        ("create", "valkeybackups", Some(other.0.as_str()), false),
        ("get", "valkeybackuplocations", None, true),
        ("create", "valkeybackuplocations", None, false),
        ("get", "secrets", operator_ns, false),
        ("get", "jobs", operator_ns, false),
    ] {
        assert_eq!(
            can(PRODUCT_USER, verb, resource, namespace),
            allowed,
            "product team {verb} {resource} in {namespace:?}"
        );
    }
    for (verb, resource, namespace, allowed) in [
        ("create", "valkeybackuplocations", None, true),
        ("delete", "valkeybackuplocations", None, true),
        ("list", "valkeybackups", Some(own.0.as_str()), true),
        ("create", "valkeybackups", Some(own.0.as_str()), false),
    ] {
        assert_eq!(
            can(PLATFORM_USER, verb, resource, namespace),
            allowed,
            "platform team {verb} {resource} in {namespace:?}"
        );
    }
}

#[test]
fn product_team_reads_but_cannot_write_the_menu() {
    setup();
    let mut cleanup = Cleanup(vec![]);
    let who = Some(PRODUCT_USER);
    let name = unique("menu");
    for object in [image(&name), config(&name), role(&name)] {
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        let out = kubectl_as(who, &["create", "-f", "-"], Some(&object.to_string()));
        assert!(
            !out.ok && out.stderr.contains("forbidden"),
            "product team created a {kind}: {}",
            out.stderr
        );
        must(&["create", "-f", "-"], Some(&object.to_string()));
        cleanup.0.push((kind.clone(), name.clone()));
        let out = kubectl_as(who, &["get", &kind, &name], None);
        assert!(out.ok, "product team cannot read {kind}: {}", out.stderr);
        let out = kubectl_as(who, &["label", &kind, &name, "x=y"], None);
        assert!(
            !out.ok && out.stderr.contains("forbidden"),
            "product team edited a {kind}: {}",
            out.stderr
        );
        let out = kubectl_as(who, &["delete", &kind, &name], None);
        assert!(
            !out.ok && out.stderr.contains("forbidden"),
            "product team deleted a {kind}: {}",
            out.stderr
        );
    }
}

#[test]
fn platform_team_writes_the_menu_and_reads_clusters() {
    setup();
    let mut cleanup = Cleanup(vec![]);
    let who = Some(PLATFORM_USER);
    let name = unique("plat");
    for object in [image(&name), config(&name), role(&name)] {
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        let out = kubectl_as(who, &["create", "-f", "-"], Some(&object.to_string()));
        assert!(
            out.ok,
            "platform team cannot create a {kind}: {}",
            out.stderr
        );
        cleanup.0.push((kind.clone(), name.clone()));
        let out = kubectl_as(who, &["label", &kind, &name, "tier=gold"], None);
        assert!(out.ok, "platform team cannot edit a {kind}: {}", out.stderr);
        let out = kubectl_as(who, &["delete", &kind, &name], None);
        assert!(
            out.ok,
            "platform team cannot delete a {kind}: {}",
            out.stderr
        );
    }
    assert!(can(
        PLATFORM_USER,
        "list",
        "valkeyclusters",
        Some("default")
    ));
    assert!(can(PLATFORM_USER, "list", "valkeynodes", Some("default")));
    assert!(!can(
        PLATFORM_USER,
        "create",
        "valkeynodes",
        Some("default")
    ));
}

#[test]
fn operator_service_account_has_what_it_needs_and_no_more() {
    setup();
    let sa = (
        "system:serviceaccount:valkey-operator-system:valkey-operator",
        &["system:serviceaccounts"][..],
    );
    for (verb, resource) in [
        ("create", "valkeynodes"),
        ("delete", "valkeynodes"),
        ("patch", "valkeyclusters/status"),
        ("list", "valkeyconfigs"),
        ("create", "pods"),
        ("patch", "pods/status"),
        ("create", "secrets"),
        ("create", "poddisruptionbudgets.policy"),
        ("create", "events.events.k8s.io"),
    ] {
        assert!(
            can(sa, verb, resource, Some("my-app")),
            "operator cannot {verb} {resource}"
        );
    }
    for (verb, resource) in [
        ("create", "valkeyconfigs"),
        ("delete", "valkeyimages"),
        ("create", "valkeyclusters"),
        ("create", "deployments.apps"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        // Its Secrets in a tenant namespace go with their cluster (owner references).
        ("delete", "secrets"),
    ] {
        assert!(
            !can(sa, verb, resource, Some("my-app")),
            "operator may {verb} {resource}"
        );
    }
    // Its own namespace (the Role): the leader Lease (got, created, patched), and its
    // credentials Secrets, swept once their cluster is gone.
    for (verb, resource) in [
        ("patch", "leases.coordination.k8s.io"),
        ("create", "leases.coordination.k8s.io"),
        ("list", "secrets"),
        ("delete", "secrets"),
    ] {
        assert!(
            can(sa, verb, resource, Some("valkey-operator-system")),
            "operator cannot {verb} {resource} in its namespace"
        );
    }
}
