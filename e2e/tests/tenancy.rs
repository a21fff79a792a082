//! Tenants doing odd things in their own namespace: an object the operator would create that
//! already exists (a team's own Service named like the new cluster) is left untouched and the
//! cluster is Blocked with a message naming it; freeing the name unblocks it by itself. The
//! same for a member's ConfigMap: that member waits, named in the cluster's message.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{Menu, apply, cluster};
use valkey_operator::api::{ClusterState, ValkeyCluster};

#[tokio::test]
async fn a_service_of_the_team_named_like_the_cluster_is_untouched_and_blocks_it()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-tenant").await?;
    let menu = Menu::publish(&client, "e2e-tenant", "9.0.0").await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let theirs: Service = serde_json::from_value(json!({
        "metadata": {"name": "taken", "labels": {"team": "web"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))?;
    services.create(&PostParams::default(), &theirs).await?;

    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "taken", &menu.config, 1, 0),
    )
    .await?;
    let blocked = wait_state(
        &client,
        &ns.name,
        "taken",
        ClusterState::Blocked,
        Duration::from_secs(60),
    )
    .await?;
    let message = blocked
        .status
        .unwrap_or_default()
        .message
        .unwrap_or_default();
    assert!(
        message.contains(&format!(
            "Service {}/taken already exists and was not created by valkey-operator",
            ns.name
        )),
        "{message}"
    );
    // Untouched: same selector, no owner, no label of ours.
    let after = services.get("taken").await?;
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.selector.clone()),
        theirs.spec.as_ref().and_then(|s| s.selector.clone())
    );
    assert!(after.metadata.owner_references.is_none(), "{after:?}");
    assert_eq!(after.metadata.labels, theirs.metadata.labels);

    // Freeing the name unblocks the cluster without touching it.
    services.delete("taken", &Default::default()).await?;
    wait_state(
        &client,
        &ns.name,
        "taken",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let ours = services.get("taken").await?;
    let owner = ours.metadata.owner_references.unwrap_or_default();
    if owner.first().map(|o| o.kind.as_str()) != Some("ValkeyCluster") {
        bail!("the cluster's own Service is owned by it: {owner:?}");
    }
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete("taken", &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

/// A Service the cluster controls but no longer has (what an operator version that named it
/// differently leaves behind) is deleted, with a `DeletedObject` Event, once the cluster's spec
/// changes; a team's Service with the cluster's labels, which the cluster does not control, is
/// left alone.
#[tokio::test]
async fn a_stray_the_cluster_controls_is_deleted_and_a_teams_lookalike_is_not() -> anyhow::Result<()>
{
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-stray").await?;
    let menu = Menu::publish(&client, "e2e-stray", "9.0.0").await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "st", &menu.config, 1, 0),
    )
    .await?;
    let timeout = Duration::from_secs(180);
    let active = wait_state(&client, &ns.name, "st", ClusterState::Active, timeout).await?;
    let labels = json!({"valkey.gomomento.com/cluster": "st",
        "app.kubernetes.io/managed-by": "valkey-operator", "app.kubernetes.io/component": "members"});
    let owner = json!({"apiVersion": valkey_operator::api::constants::API_VERSION,
        "kind": "ValkeyCluster", "name": "st", "uid": active.metadata.uid, "controller": true});
    let service = |name: &str, owners: Vec<serde_json::Value>| -> anyhow::Result<Service> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
            "spec": {"clusterIP": "None", "ports": [{"port": 6379}]},
        }))?)
    };
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let post = PostParams::default();
    services
        .create(&post, &service("st-old", vec![owner])?)
        .await?;
    services.create(&post, &service("st-team", vec![])?).await?;

    // A new generation (a pod annotation, changed live) is swept.
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let annotate = json!({"spec": {"podAnnotations": {"e2e/sweep": "1"}}});
    clusters
        .patch("st", &PatchParams::default(), &Patch::Merge(&annotate))
        .await?;
    wait_for(
        "the stray Service deleted",
        timeout,
        Duration::from_millis(500),
        || {
            let services = services.clone();
            async move { Ok(services.get_opt("st-old").await?.is_none().then_some(())) }
        },
    )
    .await?;
    assert!(
        services.get_opt("st-team").await?.is_some(),
        "a team's Service is never deleted"
    );
    assert!(
        services.get_opt("st").await?.is_some(),
        "the cluster's own Service stays"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let notes: Vec<String> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DeletedObject"))
        .filter_map(|e| e.message)
        .collect();
    assert_eq!(
        notes,
        ["Deleted Service st-old: the cluster no longer has it"],
        "one Event for the one stray"
    );
    clusters.delete("st", &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// A team's ConfigMap named like a member's (`<cluster>-0-0-config`) is left untouched: that
/// member waits, its status and the cluster's message say which object is in the way, and
/// deleting the ConfigMap lets the cluster form.
#[tokio::test]
async fn a_config_map_named_like_a_members_is_untouched_and_named() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-tenant-cm").await?;
    let menu = Menu::publish(&client, "e2e-tenant-cm", "9.0.0").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cm-0-0-config", "labels": {"team": "web"}},
        "data": {"valkey.conf": "# the team's own\n"},
    }))?;
    config_maps.create(&PostParams::default(), &theirs).await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "cm", &menu.config, 1, 0),
    )
    .await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let expected = format!(
        "ConfigMap {}/cm-0-0-config already exists and was not created by valkey-operator",
        ns.name
    );
    valkey_e2e::harness::wait_for(
        "the cluster to name the ConfigMap in the way",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let (api, expected) = (api.clone(), expected.clone());
            async move {
                let message = api.get("cm").await?.status.unwrap_or_default().message;
                let message = message.unwrap_or_default();
                if message.contains(&expected) {
                    Ok(Some(()))
                } else {
                    bail!("{message}")
                }
            }
        },
    )
    .await?;
    let after = config_maps.get("cm-0-0-config").await?;
    assert_eq!(after.data, theirs.data, "data untouched");
    assert_eq!(after.metadata.labels, theirs.metadata.labels);
    assert!(after.metadata.owner_references.is_none(), "{after:?}");

    config_maps
        .delete("cm-0-0-config", &Default::default())
        .await?;
    wait_state(
        &client,
        &ns.name,
        "cm",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    api.delete("cm", &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// A namespace enforcing the `restricted` Pod Security Standard (what many clusters enforce
/// for tenants) admits the members' pods: the cluster goes Active and serves.
#[tokio::test]
async fn a_cluster_in_a_restricted_namespace_goes_active_and_serves() -> anyhow::Result<()> {
    use fred::prelude::*;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-restricted").await?;
    valkey_e2e::harness::kubectl_run(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ])?;
    let menu = Menu::publish(&client, "e2e-restricted", "9.0.0").await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "strict", &menu.config, 1, 1),
    )
    .await?;
    wait_state(
        &client,
        &ns.name,
        "strict",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let valkey = valkey_e2e::workload::cluster_client(&client, &ns.name, "strict").await?;
    valkey
        .set::<(), _, _>("restricted", "ok", None, None, false)
        .await?;
    let got: String = valkey.get("restricted").await?;
    assert_eq!(got, "ok");
    let _ = valkey.quit().await;
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete("strict", &Default::default())
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

/// A pod the API server refuses (here a ResourceQuota allowing no pods) is not a silent
/// "waiting for members": the cluster's message names the member and the API server's reason,
/// and removing the quota lets it form without any edit.
#[tokio::test]
async fn a_refused_pod_shows_its_reason_in_the_cluster_status() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-refused").await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}))?;
    quotas.create(&PostParams::default(), &quota).await?;
    let menu = Menu::publish(&client, "e2e-refused", "9.0.0").await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "refused", &menu.config, 1, 0),
    )
    .await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let message = valkey_e2e::harness::wait_for(
        "the refusal in the cluster's message",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let m = api
                    .get("refused")
                    .await?
                    .status
                    .and_then(|s| s.message)
                    .unwrap_or_default();
                if m.contains("the API server refused its pod") {
                    Ok(Some(m))
                } else {
                    bail!("{m}")
                }
            }
        },
    )
    .await?;
    assert!(
        message.contains("refused-0-0") && message.contains("quota"),
        "{message}"
    );
    let events = valkey_e2e::harness::kubectl_run(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "reason=PodRefused",
        "-o",
        "name",
    ])?;
    assert!(!events.trim().is_empty(), "a PodRefused Event");
    quotas.delete("no-pods", &Default::default()).await?;
    wait_state(
        &client,
        &ns.name,
        "refused",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    api.delete("refused", &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// The namespace's editors (the aggregated `edit` role, which reads and deletes Secrets) never
/// see the operator's credentials, which live in the operator's namespace; deleting every
/// Secret of the namespace does not lock the operator out: a scale-out still completes.
#[tokio::test]
async fn tenant_editors_cannot_read_the_operator_credentials_or_lock_it_out() -> anyhow::Result<()>
{
    use valkey_e2e::harness::kubectl_run;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-editors").await?;
    let menu = Menu::publish(&client, "e2e-editors", "9.0.0").await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "locked", &menu.config, 1, 1),
    )
    .await?;
    wait_state(
        &client,
        &ns.name,
        "locked",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let dev = "dev@team.example";
    kubectl_run(&[
        "create",
        "rolebinding",
        "dev-edit",
        "-n",
        &ns.name,
        "--clusterrole=edit",
        "--user",
        dev,
    ])?;
    let secrets = kubectl_run(&["get", "secrets", "-n", &ns.name, "-o", "json", "--as", dev])?;
    assert!(
        !secrets.contains("operator-password"),
        "the namespace holds no operator password: {secrets}"
    );
    let can = valkey_e2e::harness::kubectl()
        .args([
            "auth",
            "can-i",
            "get",
            "secrets",
            "-n",
            valkey_e2e::valkey::OPERATOR_NAMESPACE,
            "--as",
            dev,
        ])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");

    // Every Secret of the namespace deleted by an editor; the operator still scales.
    kubectl_run(&["delete", "secrets", "--all", "-n", &ns.name, "--as", dev])?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "locked", &menu.config, 2, 1),
    )
    .await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    valkey_e2e::harness::wait_for(
        "the scale-out to 2 shards",
        Duration::from_secs(300),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                let c = api.get("locked").await?;
                let s = c.status.unwrap_or_default();
                if s.state == Some(ClusterState::Active)
                    && s.observed_generation == c.metadata.generation
                    && s.nodes.len() == 4
                {
                    Ok(Some(()))
                } else {
                    bail!(
                        "{:?} {} members: {}",
                        s.state,
                        s.nodes.len(),
                        s.message.unwrap_or_default()
                    )
                }
            }
        },
    )
    .await?;
    api.delete("locked", &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}
