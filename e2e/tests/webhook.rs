//! The admission webhook on the local cluster (issue 6): `kubectl` talks to the operator's
//! webhook for real (registered by `e2e/cluster.sh` with a certificate from the cluster CA).
//! ValkeyNodes are written by the operator only, whatever RBAC a human holds, and the operator
//! still manages them; a ValkeyCluster naming a config that does not exist yet is accepted and
//! kubectl prints the webhook's warning; a ValkeyConfig closing an inheritance cycle or
//! setting maxmemory above its container memory is denied; a ValkeyRole naming a command
//! Valkey does not have is denied with a suggestion; a ValkeyCluster or a ValkeyConfig whose
//! bindings would bind a username twice once merged is denied.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use valkey_e2e::harness::{
    TestNamespace, client, delete_cluster_scoped, kubectl_input, kubectl_outcome, kubectl_run,
    random_suffix, wait_for,
};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyNode};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const NODE_WEBHOOK: &str =
    "admission webhook \"valkeynodes.valkey.gomomento.com\" denied the request";
/// ValkeyNode DELETE has a webhook entry of its own (failurePolicy Ignore), with the same rule.
const NODE_DELETE_WEBHOOK: &str =
    "admission webhook \"valkeynodes-delete.valkey.gomomento.com\" denied the request";
const CONFIG_WEBHOOK: &str =
    "admission webhook \"valkeyconfigs.valkey.gomomento.com\" denied the request";
const CLUSTER_WEBHOOK: &str =
    "admission webhook \"valkeyclusters.valkey.gomomento.com\" denied the request";

/// Waits until the webhook answers (another suite may be restarting the operator pod; while
/// it is not Ready the Service has no endpoints and the Ignore-policy webhooks are skipped).
async fn webhook_serving() -> anyhow::Result<()> {
    let probe = config_json(
        "e2e-webhook-probe",
        json!({"baseRef": "e2e-webhook-probe-missing-base"}),
    );
    wait_for(
        "the admission webhook to answer",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let probe = probe.clone();
            async move {
                let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &probe)?;
                if out.ok
                    && out
                        .stderr
                        .contains("Warning: ValkeyConfig \"e2e-webhook-probe\"")
                {
                    Ok(Some(()))
                } else {
                    bail!("no warning from the webhook yet: {}", out.stderr)
                }
            }
        },
    )
    .await
}

fn apply_menu() -> anyhow::Result<()> {
    for f in ["00-images.yaml", "01-roles.yaml", "02-configs.yaml"] {
        kubectl_run(&[
            "apply",
            "--server-side",
            "-f",
            &format!("{REPO}/manifests/samples/{f}"),
        ])?;
    }
    Ok(())
}

async fn wait_active(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    valkey_e2e::valkey::wait_state(
        client,
        ns,
        name,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await
    .map(|_| ())
}

#[tokio::test]
async fn valkeynodes_are_written_by_the_operator_only_and_it_still_manages_them()
-> anyhow::Result<()> {
    let client = client().await?;
    webhook_serving().await?;
    apply_menu()?;
    let ns = TestNamespace::create(&client, "e2e-webhook").await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    apply_guarded(&clusters, &ns.name, 1).await?;
    // The operator creates, updates (finalizers, status) and owns its nodes through the webhook.
    wait_active(&client, &ns.name, "guarded").await?;

    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), &ns.name);
    let node = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("a ValkeyNode")?;
    let name = node.metadata.name.clone().context("node name")?;

    cluster_admin_is_denied(&ns.name, &name)?;
    a_product_team_user_is_denied(&ns.name, &name, &node)?;

    // Nothing changed, and the operator keeps managing: scaling out adds nodes and goes Active.
    let still = nodes.get(&name).await?;
    assert_eq!(still.spec, node.spec);
    assert!(!still.labels().contains_key("e2e"));
    apply_guarded(&clusters, &ns.name, 2).await?;
    wait_for(
        "a third member",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.list(&ListParams::default()).await?.items.len();
                Ok((n >= 3).then_some(()))
            }
        },
    )
    .await?;
    wait_active(&client, &ns.name, "guarded").await?;
    Ok(())
}

#[tokio::test]
async fn a_cluster_naming_a_missing_config_is_accepted_and_kubectl_prints_the_warning()
-> anyhow::Result<()> {
    let client = client().await?;
    webhook_serving().await?;
    let ns = TestNamespace::create(&client, "e2e-webhook-warn").await?;
    let missing = format!("e2e-not-yet-{}", random_suffix(5));
    let cluster = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": "early", "namespace": ns.name},
        "spec": {"configRef": missing, "shards": 1, "replicasPerShard": 0},
    });
    let out = kubectl_input(&["apply", "-f", "-"], &serde_json::to_string(&cluster)?)?;
    assert!(out.ok, "accepted: {}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "Warning: spec.configRef names ValkeyConfig \"{missing}\", which does not exist"
        )),
        "kubectl prints the webhook's warning: {}",
        out.stderr
    );
    assert!(out.stdout.contains("created"), "{}", out.stdout);
    // An existing config: no warning.
    apply_menu()?;
    let ok = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": "fine", "namespace": ns.name},
        "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0},
    });
    let out = kubectl_input(
        &["apply", "--dry-run=server", "-f", "-"],
        &serde_json::to_string(&ok)?,
    )?;
    assert!(out.ok, "{}", out.stderr);
    assert!(!out.stderr.contains("Warning"), "{}", out.stderr);
    Ok(())
}

fn config_json(name: &str, spec: serde_json::Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyConfig",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("json")
}

#[tokio::test]
async fn a_config_closing_an_inheritance_cycle_or_overcommitting_memory_is_denied()
-> anyhow::Result<()> {
    let client = client().await?;
    webhook_serving().await?;
    apply_menu()?;
    let s = random_suffix(5);
    let (a, b) = (format!("e2e-cyc-{s}-a"), format!("e2e-cyc-{s}-b"));
    let result = async {
        // a -> b: b does not exist yet, accepted with a warning.
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(&a, json!({"baseRef": b})),
        )?;
        assert!(out.ok, "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "Warning: ValkeyConfig \"{a}\" inherits from \"{b}\""
            )),
            "{}",
            out.stderr
        );
        // b -> a closes the cycle: denied, with the chain in the message.
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(&b, json!({"baseRef": a, "imageRef": "valkey-9-0"})),
        )?;
        assert!(!out.ok, "closing the cycle must be denied");
        assert!(out.stderr.contains(CONFIG_WEBHOOK), "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!("cycle ({b} -> {a} -> {b})")),
            "{}",
            out.stderr
        );
        // b as a root is fine.
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(&b, json!({"imageRef": "valkey-9-0"})),
        )?;
        assert!(out.ok, "{}", out.stderr);

        // maxmemory above the container memory (inherited 1Gi from standard): denied.
        let out = kubectl_input(
            &["apply", "--dry-run=server", "-f", "-"],
            &config_json(
                &a,
                json!({"baseRef": "standard", "valkey": {"maxmemory": "2gb"}}),
            ),
        )?;
        assert!(!out.ok, "maxmemory above memory must be denied");
        assert!(out.stderr.contains(CONFIG_WEBHOOK), "{}", out.stderr);
        assert!(
            out.stderr
                .contains("valkey.maxmemory 2gb (2Gi) is above the container memory 1Gi"),
            "{}",
            out.stderr
        );
        // Without headroom: accepted with a warning.
        let out = kubectl_input(
            &["apply", "--dry-run=server", "-f", "-"],
            &config_json(
                &a,
                json!({"baseRef": "standard", "valkey": {"maxmemory": "900mb"}}),
            ),
        )?;
        assert!(out.ok, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("Warning: valkey.maxmemory 900mb (inherited")
                || out.stderr.contains("Warning: valkey.maxmemory 900mb is"),
            "{}",
            out.stderr
        );
        anyhow::Ok(())
    }
    .await;
    delete_cluster_scoped::<ValkeyConfig>(&client, &a).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &b).await?;
    result
}

#[tokio::test]
async fn a_role_naming_an_unknown_command_is_denied_with_a_suggestion() -> anyhow::Result<()> {
    let _client = client().await?;
    webhook_serving().await?;
    let role = |command: &str| {
        serde_json::to_string(&json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1",
            "kind": "ValkeyRole",
            "metadata": {"name": format!("e2e-role-{}", random_suffix(5))},
            "spec": {
                "categories": [{"name": "read", "access": "allow"}],
                "commands": [{"name": command, "access": "allow"}],
            },
        }))
        .expect("json")
    };
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &role("hgetal"))?;
    assert!(!out.ok, "unknown command must be denied");
    assert!(
        out.stderr
            .contains("admission webhook \"valkeyroles.valkey.gomomento.com\" denied the request"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("\"hgetal\" is not a Valkey command; did you mean \"hgetall\"?"),
        "{}",
        out.stderr
    );
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &role("hgetall"))?;
    assert!(out.ok, "{}", out.stderr);
    // CONFIG GET returns masterauth: never granted to an ACL user.
    let out = kubectl_input(
        &["apply", "--dry-run=server", "-f", "-"],
        &role("config|get"),
    )?;
    assert!(!out.ok, "config|get must be denied");
    assert!(
        out.stderr.contains("\"config|get\" is never granted"),
        "{}",
        out.stderr
    );
    Ok(())
}

/// A setting the resolved image's Valkey version does not know is accepted (the platform team
/// may be preparing an upgrade) and kubectl prints the warning with a suggestion; a known one
/// gets no warning.
#[tokio::test]
async fn a_setting_unknown_to_the_image_version_is_warned() -> anyhow::Result<()> {
    webhook_serving().await?;
    apply_menu()?;
    let name = format!("e2e-{}-typo", random_suffix(4));
    let typo = config_json(
        &name,
        json!({"baseRef": "standard", "valkey": {"maxmemory-polcy": "allkeys-lru"}}),
    );
    let out = kubectl_input(&["apply", "-f", "-"], &typo)?;
    assert!(out.ok, "accepted: {}", out.stderr);
    assert!(
        out.stderr.contains("Warning:")
            && out
                .stderr
                .contains("\"maxmemory-polcy\" is not known to Valkey 9.0.0")
            && out.stderr.contains("maxmemory-policy"),
        "kubectl prints the warning: {}",
        out.stderr
    );
    let fine = config_json(
        &name,
        json!({"baseRef": "standard", "valkey": {"maxmemory-policy": "allkeys-lru"}}),
    );
    let out = kubectl_input(&["apply", "-f", "-"], &fine)?;
    assert!(
        out.ok && !out.stderr.contains("not known"),
        "{}",
        out.stderr
    );
    let client = client().await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &name).await?;
    Ok(())
}

/// Momento v0.9's refused directives: each authentication/ACL setting, a `tls-*` one and
/// `include` is refused by the API server with its message (the CRD's rules; v1beta1, served
/// only while a conversion test enables it, has the same rules: tests/api_validation.rs);
/// another forced setting (`port`) is still accepted with the warning that it is ignored.
#[tokio::test]
async fn authentication_tls_and_include_directives_are_refused_with_their_message()
-> anyhow::Result<()> {
    webhook_serving().await?;
    apply_menu()?;
    let name = format!("e2e-{}-refused", random_suffix(4));
    let auth = "is managed by the operator: bind users with spec.acl";
    let tls = "is managed by the operator: use spec.tls on the ValkeyCluster";
    for (key, message) in [
        ("requirepass", format!("spec.valkey.requirepass {auth}")),
        ("primaryauth", format!("spec.valkey.primaryauth {auth}")),
        ("masterauth", format!("spec.valkey.masterauth {auth}")),
        ("aclfile", format!("spec.valkey.aclfile {auth}")),
        ("user", format!("spec.valkey.user {auth}")),
        ("tls-port", format!("spec.valkey.tls-port {tls}")),
        (
            "include",
            "spec.valkey.include would bypass the operator's settings and is not allowed".into(),
        ),
    ] {
        let config = config_json(&name, json!({"baseRef": "standard", "valkey": {key: "x"}}));
        let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &config)?;
        assert!(!out.ok, "{key} accepted");
        assert!(out.stderr.contains(&message), "{key}: {}", out.stderr);
    }
    let port = config_json(
        &name,
        json!({"baseRef": "standard", "valkey": {"port": "7000"}}),
    );
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &port)?;
    assert!(
        out.ok && out.stderr.contains("valkey.port is ignored"),
        "port: {}",
        out.stderr
    );
    Ok(())
}

/// An ACL binding of `username` to the sample role `metrics-readonly`.
fn binding(username: &str) -> serde_json::Value {
    json!({
        "username": username,
        "passwordHashes": ["3a47b49206dbbab1a5ea53a2e6fd5dd726be507a4456195507672072988b520a"],
        "permissions": [{"roleRef": "metrics-readonly"}],
    })
}

fn cluster_json(ns: &str, name: &str, config: &str, acl: &[&str]) -> String {
    let acl: Vec<_> = acl.iter().map(|u| binding(u)).collect();
    serde_json::to_string(&json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configRef": config, "shards": 1, "replicasPerShard": 0, "acl": acl},
    }))
    .expect("json")
}

#[tokio::test]
async fn usernames_stay_unique_once_config_and_cluster_bindings_merge() -> anyhow::Result<()> {
    let client = client().await?;
    webhook_serving().await?;
    apply_menu()?;
    let ns = TestNamespace::create(&client, "e2e-webhook-users").await?;

    // ValkeyCluster rule: "standard" binds `metrics` for every cluster using it.
    let out = kubectl_input(
        &["apply", "--dry-run=server", "-f", "-"],
        &cluster_json(&ns.name, "dup", "standard", &["metrics"]),
    )?;
    assert!(
        !out.ok,
        "a cluster binding the config's username must be denied"
    );
    assert!(out.stderr.contains(CLUSTER_WEBHOOK), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "ACL user \"metrics\" is bound both by the ValkeyConfig and by the ValkeyCluster"
        ),
        "{}",
        out.stderr
    );
    let out = kubectl_input(
        &["apply", "--dry-run=server", "-f", "-"],
        &cluster_json(&ns.name, "dup", "standard", &["app"]),
    )?;
    assert!(out.ok && !out.stderr.contains("Warning"), "{}", out.stderr);

    // ValkeyConfig rule: a cluster waiting for config `config` (and for its image, so no pod
    // starts) binds `app`; the config may not bind `app` as well.
    let s = random_suffix(5);
    let config = format!("e2e-users-{s}");
    let image = format!("e2e-users-{s}-missing-image");
    let result = async {
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &cluster_json(&ns.name, "waiting", &config, &["app"]),
        )?;
        assert!(out.ok, "{}", out.stderr);
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(&config, json!({"imageRef": image, "acl": [binding("app")]})),
        )?;
        assert!(!out.ok, "a config binding a username its cluster binds must be denied");
        assert!(out.stderr.contains(CONFIG_WEBHOOK), "{}", out.stderr);
        // Counted, not named: the clusters are the tenants' (issue 31, item 3).
        assert!(
            out.stderr.contains(&format!(
                "1 ValkeyCluster using it already binds ACL user \"app\" in spec.acl, and this change makes ValkeyConfig \"{config}\" bind it as well"
            )) && !out.stderr.contains(&ns.name),
            "{}",
            out.stderr
        );
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(&config, json!({"imageRef": image, "acl": [binding("batch")]})),
        )?;
        assert!(out.ok, "another username is accepted: {}", out.stderr);
        // Adding the clashing username to an existing config: denied as well.
        let out = kubectl_input(
            &["apply", "-f", "-"],
            &config_json(
                &config,
                json!({"imageRef": image, "acl": [binding("batch"), binding("app")]}),
            ),
        )?;
        assert!(!out.ok, "{}", out.stderr);
        assert!(out.stderr.contains(CONFIG_WEBHOOK), "{}", out.stderr);
        anyhow::Ok(())
    }
    .await;
    kubectl_run(&[
        "delete",
        "valkeycluster",
        "waiting",
        "-n",
        &ns.name,
        "--wait=false",
    ])?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &config).await?;
    result
}

const IMAGE_WEBHOOK: &str =
    "admission webhook \"valkeyimages.valkey.gomomento.com\" denied the request";

/// A repoint that moves a running cluster to an older Valkey: warned within a major version
/// (naming the cluster and both versions), refused across one with the reason, for a
/// ValkeyImage's version and for a ValkeyConfig's imageRef alike. Server-side dry runs: the
/// webhook decides exactly as for a real write, and nothing rolls.
#[tokio::test]
async fn a_downgrade_repoint_is_warned_and_a_cross_major_one_refused() -> anyhow::Result<()> {
    use valkey_e2e::workload::{Menu, config, image};
    let client = client().await?;
    webhook_serving().await?;
    let ns = TestNamespace::create(&client, "e2e-downgrade").await?;
    let menu = Menu::publish(&client, "e2e-down", "9.1.2").await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    clusters
        .patch(
            "shop",
            &PatchParams::apply("e2e"),
            &Patch::Apply(&json!({
                "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
                "metadata": {"name": "shop", "namespace": ns.name},
                "spec": {"configRef": menu.config, "shards": 1, "replicasPerShard": 0}})),
        )
        .await?;
    wait_active(&client, &ns.name, "shop").await?;
    // The replies count the clusters and never name them (issue 31, item 3).
    let named = format!("{}/shop", ns.name);

    // 9.1.2 -> 9.0.0: accepted, with a warning counting the cluster, with the versions.
    let down = image(&menu.image, "9.0.0").to_string();
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &down)?;
    assert!(out.ok, "accepted: {}", out.stderr);
    assert!(
        out.stderr.contains("Warning:")
            && out
                .stderr
                .contains("rolls 1 ValkeyCluster (9.1.2 -> 9.0.0) down")
            && !out.stderr.contains(&named),
        "{}",
        out.stderr
    );
    // And below Momento v0.9's floor: warned about (the operator's default versionFloor: warn).
    assert!(
        out.stderr.contains(
            "Warning: spec.version 9.0.0 is below the supported floor 9.0.1 (strict installations refuse it)"
        ),
        "{}",
        out.stderr
    );

    // 9.1.2 -> 8.1.4: refused, with the reason.
    let cross = image(&menu.image, "8.1.4").to_string();
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &cross)?;
    assert!(!out.ok, "refused: {}", out.stdout);
    assert!(
        out.stderr.contains(IMAGE_WEBHOOK)
            && out.stderr.contains("1 ValkeyCluster (9.1.2 -> 8.1.4)")
            && !out.stderr.contains(&named)
            && out.stderr.contains("RDB format 80"),
        "{}",
        out.stderr
    );

    // The same through the config: pointing it at an 8.x image is refused.
    let old_image = format!("{}-old", menu.image);
    valkey_e2e::workload::apply(&client, "image", image(&old_image, "8.1.4")).await?;
    let repoint = config(&menu.config, &old_image).to_string();
    let out = kubectl_input(&["apply", "--dry-run=server", "-f", "-"], &repoint)?;
    assert!(!out.ok, "refused: {}", out.stdout);
    assert!(
        out.stderr.contains(CONFIG_WEBHOOK)
            && out.stderr.contains(&format!(
                "ValkeyConfig \"{}\" would roll 1 ValkeyCluster (9.1.2 -> 8.1.4)",
                menu.config
            )),
        "{}",
        out.stderr
    );
    // Nothing rolled: still one member on 9.1.2.
    let status = clusters.get("shop").await?.status.unwrap_or_default();
    let versions: Vec<_> = status.nodes.iter().map(|n| n.version.clone()).collect();
    assert_eq!(versions, vec![Some("9.1.2".to_string())]);

    clusters.delete("shop", &Default::default()).await?;
    delete_cluster_scoped::<valkey_operator::api::ValkeyImage>(&client, &old_image).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// Applies the 1-shard cluster `guarded` with `replicas` replicas per shard.
async fn apply_guarded(
    clusters: &Api<ValkeyCluster>,
    ns: &str,
    replicas: u32,
) -> anyhow::Result<()> {
    clusters
        .patch(
            "guarded",
            &PatchParams::apply("e2e"),
            &Patch::Apply(&json!({
                "apiVersion": "valkey.gomomento.com/v1alpha1",
                "kind": "ValkeyCluster",
                "metadata": {"name": "guarded", "namespace": ns},
                "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": replicas},
            })),
        )
        .await?;
    Ok(())
}

/// Cluster-admin (system:masters) may not touch ValkeyNode `name`: metadata edit and delete
/// are denied by the webhook, with its message; spec and status edits too.
fn cluster_admin_is_denied(ns: &str, name: &str) -> anyhow::Result<()> {
    // Cluster-admin (system:masters) may not touch them: metadata edit and delete are denied by
    // the webhook, with its message.
    let out = kubectl_outcome(&["-n", ns, "label", "valkeynode", name, "e2e=touched"])?;
    assert!(
        !out.ok,
        "label as cluster-admin must be denied: {}",
        out.stdout
    );
    assert!(out.stderr.contains(NODE_WEBHOOK), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "ValkeyNodes are managed by valkey-operator only: \"kubernetes-admin\" may not update ValkeyNode {}/{name}",
            ns
        )),
        "{}",
        out.stderr
    );
    let out = kubectl_outcome(&["-n", ns, "delete", "valkeynode", name, "--wait=false"])?;
    assert!(!out.ok, "delete as cluster-admin must be denied");
    // DELETE has a webhook entry of its own (failurePolicy Ignore: a namespace deletion never
    // waits for the operator), with the same rule.
    assert!(out.stderr.contains(NODE_DELETE_WEBHOOK), "{}", out.stderr);
    assert!(
        out.stderr.contains("may not delete ValkeyNode"),
        "{}",
        out.stderr
    );

    // A spec edit is denied too (the CRD's CEL rule answers first; the webhook backs it up).
    let out = kubectl_outcome(&[
        "-n",
        ns,
        "patch",
        "valkeynode",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"image":"valkey/valkey:9.1.2"}}"#,
    ])?;
    assert!(!out.ok, "spec edit as cluster-admin must be denied");
    assert!(out.stderr.contains("immutable"), "{}", out.stderr);

    // So is a status edit: lifecycle and node id are what the operator plans from.
    let out = kubectl_outcome(&[
        "-n",
        ns,
        "patch",
        "valkeynode",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"lifecycle":"Leaving"}}"#,
    ])?;
    assert!(!out.ok, "status edit as cluster-admin must be denied");
    assert!(out.stderr.contains(NODE_WEBHOOK), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "the status of ValkeyNode {}/{name} is written by valkey-operator only",
            ns
        )),
        "{}",
        out.stderr
    );
    Ok(())
}

/// A product-team user, even with RBAC that (wrongly) lets them create ValkeyNodes, is denied
/// by the webhook: creating a forged node and deleting `name`.
fn a_product_team_user_is_denied(ns: &str, name: &str, node: &ValkeyNode) -> anyhow::Result<()> {
    // A product-team user, even with RBAC that (wrongly) lets them create ValkeyNodes, is
    // denied by the webhook.
    let user = format!("dev-{}@product.example", random_suffix(4));
    kubectl_input(
        &["apply", "-f", "-"],
        &serde_json::to_string(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "too-broad", "namespace": ns},
            "rules": [{"apiGroups": ["valkey.gomomento.com"], "resources": ["valkeynodes"], "verbs": ["get", "list", "create", "update", "patch", "delete"]}],
        }))?,
    )
    .and_then(|o| if o.ok { Ok(()) } else { bail!("{}", o.stderr) })?;
    kubectl_run(&[
        "-n",
        ns,
        "create",
        "rolebinding",
        "too-broad",
        "--role=too-broad",
        &format!("--user={user}"),
    ])?;
    let forged = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyNode",
        "metadata": {"name": "forged", "namespace": ns},
        "spec": node.spec,
    });
    let out = kubectl_input(
        &["create", "-f", "-", "--as", &user],
        &serde_json::to_string(&forged)?,
    )?;
    assert!(!out.ok, "create as a product-team user must be denied");
    assert!(out.stderr.contains(NODE_WEBHOOK), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "\"{user}\" may not create ValkeyNode {}/forged",
            ns
        )),
        "{}",
        out.stderr
    );
    let out = kubectl_outcome(&[
        "-n",
        ns,
        "delete",
        "valkeynode",
        name,
        "--as",
        &user,
        "--wait=false",
    ])?;
    assert!(
        !out.ok && out.stderr.contains(NODE_DELETE_WEBHOOK),
        "{}",
        out.stderr
    );
    Ok(())
}
