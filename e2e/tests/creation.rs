//! Creating a cluster, Momento v0.9's rules (issue 30): the spec is frozen while the cluster
//! is created; a mislabelled image (declares 9.0.1, runs an older binary) ends the creation
//! `Failed`, naming both versions, and nothing more is done to it. A cluster held while being
//! deleted says `Deleting`. Real API server, kubelet pods, valkey-server.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{bail, ensure};
use fred::prelude::*;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{active_cluster, apply, cluster, config, image};
use valkey_operator::api::validation::FROZEN_WHILE_CREATING;
use valkey_operator::api::{
    ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole,
};

/// Momento v0.9: the spec cannot change while the cluster is created (no status yet, or
/// `Creating`), with a message saying why and what to do; labels can; once Active the same
/// patch is accepted.
#[tokio::test]
async fn the_spec_is_frozen_while_creating_and_free_once_active() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-frozen").await?;
    let suffix = valkey_e2e::harness::random_suffix(4);
    let (img, cfg) = (
        format!("e2e-frz-{suffix}-img"),
        format!("e2e-frz-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "frozen", &cfg, 1, 0)).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let shards = Patch::Merge(json!({"spec": {"shards": 2}}));
    match api.patch("frozen", &PatchParams::default(), &shards).await {
        Err(kube::Error::Api(e)) => ensure!(
            e.message.contains(FROZEN_WHILE_CREATING),
            "refused with the freeze message: {}",
            e.message
        ),
        other => bail!("a spec patch while Creating must be refused: {other:?}"),
    }
    let labels = Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}}));
    api.patch("frozen", &PatchParams::default(), &labels)
        .await?;
    wait_state(
        &client,
        &ns.name,
        "frozen",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    api.patch("frozen", &PatchParams::default(), &shards)
        .await?;
    api.delete("frozen", &Default::default()).await?;
    wait_for(
        "the cluster gone",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                match api.get_opt("frozen").await? {
                    None => Ok(Some(())),
                    Some(_) => bail!("still there"),
                }
            }
        },
    )
    .await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// An image declaring 9.0.1 that runs Valkey 9.0.0: the first member to answer shows it, and the
/// cluster ends `Failed` (Ready False, CreationFailed, a Warning Event) with a message naming
/// the member, both versions and the way out; the spec stays frozen.
#[tokio::test]
async fn a_mislabelled_image_fails_creation_naming_both_versions() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-mislabelled").await?;
    let suffix = valkey_e2e::harness::random_suffix(4);
    let (img, cfg) = (
        format!("e2e-mis-{suffix}-img"),
        format!("e2e-mis-{suffix}-cfg"),
    );
    let mut mislabelled = image(&img, "9.0.0");
    mislabelled["spec"]["version"] = json!("9.0.1");
    apply(&client, "image", mislabelled).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "mis", &cfg, 1, 1)).await?;
    let failed = wait_state(
        &client,
        &ns.name,
        "mis",
        ClusterState::Failed,
        Duration::from_secs(180),
    )
    .await?;
    let status = failed.status.clone().unwrap_or_default();
    let message = status.message.clone().unwrap_or_default();
    println!("Failed: {message}");
    ensure!(
        message.contains("runs Valkey 9.0.0, below the supported floor 9.0.1")
            && message.contains(&format!("ValkeyImage \"{img}\" declares 9.0.1"))
            && message.contains("delete this ValkeyCluster and create it again"),
        "{message}"
    );
    ensure!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "CreationFailed"),
        "{:?}",
        status.conditions
    );
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let edit = Patch::Merge(json!({"spec": {"replicasPerShard": 0}}));
    ensure!(
        api.patch("mis", &PatchParams::default(), &edit)
            .await
            .is_err(),
        "a Failed cluster's spec is frozen"
    );
    // Terminal: still Failed a while later (nothing formed it meanwhile).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = api.get("mis").await?;
    ensure!(
        later.status.and_then(|s| s.state) == Some(ClusterState::Failed),
        "Failed stays"
    );
    api.delete("mis", &Default::default()).await?;
    wait_gone(&api, "mis").await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// On a cluster that has been Active, the floor holds a rollout instead of failing anything:
/// the config repointed to a mislabelled image (declares 9.0.1, runs 9.0.0), the new member
/// never joins, the old members keep serving, the cluster is `Updating` with
/// `Progressing=False, VersionBelowFloor` and one Warning Event; repointed back, it is Active.
#[tokio::test]
async fn a_rollout_onto_a_binary_below_the_floor_is_held_with_the_old_members_serving()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-floor-rollout").await?;
    let suffix = valkey_e2e::harness::random_suffix(4);
    let (good, bad, cfg) = (
        format!("e2e-flr-{suffix}-good"),
        format!("e2e-flr-{suffix}-bad"),
        format!("e2e-flr-{suffix}-cfg"),
    );
    apply(&client, "image", image(&good, "9.0.0")).await?;
    let mut mislabelled = image(&bad, "9.0.0");
    mislabelled["spec"]["version"] = json!("9.0.1");
    apply(&client, "image", mislabelled).await?;
    apply(&client, "config", config(&cfg, &good)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "held", &cfg, 1, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "held",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let valkey = valkey_e2e::workload::cluster_client(&client, &ns.name, "held").await?;
    valkey
        .set::<(), _, _>("before", "1", None, None, false)
        .await?;

    let configs: Api<ValkeyConfig> = Api::all(client.clone());
    let repoint = |image: &str| Patch::Merge(json!({"spec": {"imageRef": image}}));
    configs
        .patch(&cfg, &PatchParams::default(), &repoint(&bad))
        .await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let held = wait_for(
        "the rollout held by the floor",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let c = api.get("held").await?;
            let status = c.status.clone().unwrap_or_default();
            let holding = status.state == Some(ClusterState::Updating)
                && status.conditions.iter().any(|c| {
                    c.type_ == "Progressing"
                        && c.status == "False"
                        && c.reason == "VersionBelowFloor"
                });
            Ok(holding.then_some(status))
        },
    )
    .await?;
    let message = held.message.clone().unwrap_or_default();
    println!("held: {message}");
    ensure!(
        message.contains("rollout held: member")
            && message.contains("runs Valkey 9.0.0, below the supported floor 9.0.1")
            && message.contains(&format!("ValkeyImage \"{bad}\" declares 9.0.1")),
        "{message}"
    );
    // Still held a while later, the old members serving reads and writes.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let later = api.get("held").await?.status.unwrap_or_default();
    ensure!(
        later.state == Some(ClusterState::Updating),
        "{:?}",
        later.state
    );
    valkey
        .set::<(), _, _>("during", "1", None, None, false)
        .await?;
    let before: Option<String> = valkey.get("before").await?;
    ensure!(before.as_deref() == Some("1"), "the old members serve");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let warned = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("VersionBelowFloor"))
        .map(|e| e.count.unwrap_or(1))
        .sum::<i32>();
    ensure!(warned == 1, "one VersionBelowFloor Event, not {warned}");

    configs
        .patch(&cfg, &PatchParams::default(), &repoint(&good))
        .await?;
    wait_state(
        &client,
        &ns.name,
        "held",
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    let during: Option<String> = valkey.get("during").await?;
    ensure!(
        during.as_deref() == Some("1"),
        "the write made while held is kept"
    );
    let _ = valkey.quit().await;
    api.delete("held", &Default::default()).await?;
    wait_gone(&api, "held").await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &good).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &bad).await?;
    Ok(())
}

/// A cluster held while being deleted (here by a finalizer of someone else's) says `Deleting`
/// and what holds it, and goes once that is removed.
#[tokio::test]
async fn a_cluster_held_while_being_deleted_says_deleting_and_by_what() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-deleting").await?;
    let menu = active_cluster(&client, &ns.name, "held", "9.0.0", (1, 0)).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let hold = "e2e.example.com/hold";
    let finalizers = |list: Vec<&str>| Patch::Merge(json!({"metadata": {"finalizers": list}}));
    api.patch("held", &PatchParams::default(), &finalizers(vec![hold]))
        .await?;
    api.delete("held", &Default::default()).await?;
    let message = wait_for(
        "the cluster to say Deleting",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let status = api.get("held").await?.status.unwrap_or_default();
                let message = status.message.unwrap_or_default();
                if status.state == Some(ClusterState::Deleting) && message.contains(hold) {
                    Ok(Some(message))
                } else {
                    bail!("{:?}: {message}", status.state)
                }
            }
        },
    )
    .await?;
    println!("held: {message}");
    api.patch("held", &PatchParams::default(), &finalizers(vec![]))
        .await?;
    wait_gone(&api, "held").await?;
    menu.remove(&client).await
}

/// The menu kinds' `status.observedGeneration` follows their generation: written once the
/// operator's caches hold a new object, and again after an edit. A cluster's members
/// (ValkeyNodes) report theirs too.
#[tokio::test]
async fn every_kind_reports_the_generation_the_operator_holds() -> anyhow::Result<()> {
    let client = client().await?;
    let s = valkey_e2e::harness::random_suffix(4);
    let (img, cfg, role) = (
        format!("e2e-gen-{s}-img"),
        format!("e2e-gen-{s}-cfg"),
        format!("e2e-gen-{s}-role"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    let role_spec = |categories: &[&str]| {
        let categories: Vec<_> = categories
            .iter()
            .map(|c| json!({"name": c, "access": "allow"}))
            .collect();
        json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyRole",
               "metadata": {"name": role}, "spec": {"categories": categories}})
    };
    let images: Api<ValkeyImage> = Api::all(client.clone());
    let configs: Api<ValkeyConfig> = Api::all(client.clone());
    let roles: Api<ValkeyRole> = Api::all(client.clone());
    let apply_role = |spec| {
        let roles = roles.clone();
        let role = role.clone();
        async move {
            roles
                .patch(
                    &role,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&spec),
                )
                .await
        }
    };
    apply_role(role_spec(&["read"])).await?;
    let generations = || async {
        let (i, c, r) = (
            images.get(&img).await?,
            configs.get(&cfg).await?,
            roles.get(&role).await?,
        );
        let observed = |g: Option<i64>, o: Option<i64>| (g.unwrap_or_default(), o);
        Ok::<_, anyhow::Error>([
            observed(
                i.metadata.generation,
                i.status.and_then(|s| s.observed_generation),
            ),
            observed(
                c.metadata.generation,
                c.status.and_then(|s| s.observed_generation),
            ),
            observed(
                r.metadata.generation,
                r.status.and_then(|s| s.observed_generation),
            ),
        ])
    };
    let caught_up = |what: &'static str| {
        let generations = &generations;
        wait_for(
            what,
            Duration::from_secs(30),
            Duration::from_millis(500),
            move || async move {
                let now = generations().await?;
                if now.iter().all(|(g, o)| Some(*g) == *o) {
                    Ok(Some(now))
                } else {
                    bail!("(generation, observedGeneration) of image, config, role: {now:?}")
                }
            },
        )
    };
    let first = caught_up("the new menu's observedGeneration").await?;
    // An edit of each: a new generation, observed in turn.
    let mut edited = config(&cfg, &img);
    edited["spec"]["resources"]["memory"] = json!("300Mi");
    apply(&client, "config", edited).await?;
    apply_role(role_spec(&["read", "connection"])).await?;
    let mut with_pull_secret = image(&img, "9.0.0");
    with_pull_secret["spec"]["imagePullSecrets"] = json!([{"name": "e2e-pull"}]);
    apply(&client, "image", with_pull_secret).await?;
    let second = caught_up("the edited menu's observedGeneration").await?;
    for (before, after) in first.iter().zip(&second) {
        ensure!(
            after.0 > before.0,
            "an edit raises the generation: {first:?} -> {second:?}"
        );
    }
    println!("menu (generation, observedGeneration): {first:?} -> {second:?}");
    let ns = TestNamespace::create(&client, "e2e-generations").await?;
    apply(&client, &ns.name, cluster(&ns.name, "gen", &cfg, 1, 0)).await?;
    wait_state(
        &client,
        &ns.name,
        "gen",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let nodes = Api::<ValkeyNode>::namespaced(client.clone(), &ns.name)
        .list(&Default::default())
        .await?;
    for node in &nodes {
        let observed = node.status.as_ref().and_then(|s| s.observed_generation);
        ensure!(
            node.metadata.generation.is_some() && observed == node.metadata.generation,
            "{}: generation {:?}, observedGeneration {observed:?}",
            node.name_any(),
            node.metadata.generation
        );
    }
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    clusters.delete("gen", &Default::default()).await?;
    wait_gone(&clusters, "gen").await?;
    delete_cluster_scoped::<ValkeyRole>(&client, &role).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await
}

async fn wait_gone(api: &Api<ValkeyCluster>, name: &str) -> anyhow::Result<()> {
    wait_for(
        "the cluster gone",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            let name = name.to_owned();
            async move {
                match api.get_opt(&name).await? {
                    None => Ok(Some(())),
                    Some(_) => bail!("still there"),
                }
            }
        },
    )
    .await
}
