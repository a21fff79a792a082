//! `kubectl valkey` (the `kubectl-valkey` binary) against the local cluster, run as a user runs
//! it: a subprocess with the kubeconfig. `impact image` before a repoint names exactly the
//! clusters that then roll; `resolve cluster` equals the ConfigMaps and ACL Secret the operator
//! wrote; `status` of a cluster mid-scale shows the slots left to move; `impact config` of a
//! setting Valkey changes at runtime says it is set live, and it is, on every member of every
//! cluster on the config, with no pod replaced (a restart-only one rolls them).
#![cfg(feature = "e2e")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use valkey_e2e::harness::{TestNamespace, client, kubeconfig_path, wait_for};
use valkey_e2e::valkey::{member_pods, operator_driver, serving_addrs, wait_state};
use valkey_e2e::workload::{Menu, apply, cluster, cluster_client, preload};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig};
use valkey_operator::driver::ClusterDriver;

/// Builds `kubectl-valkey` once (the e2e package cannot depend on another package's binary)
/// into the target dir this test binary runs from, and returns its path.
fn plugin_binary() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // <target>/<profile>/deps/plugin-<hash>
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let profile_dir = exe
                .parent()
                .and_then(|deps| deps.parent())
                .ok_or("no target dir")?
                .to_path_buf();
            let target_dir = profile_dir.parent().ok_or("no target dir")?;
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = std::process::Command::new(cargo)
                // The same workspace and features `make e2e` builds the tests with, so the
                // operator library and every dependency are reused, not rebuilt.
                .args([
                    "build",
                    "--quiet",
                    "--workspace",
                    "--features",
                    "valkey-operator/e2e,valkey-e2e/e2e",
                    "--bin",
                    "kubectl-valkey",
                ])
                .arg("--target-dir")
                .arg(target_dir)
                .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            Ok(profile_dir.join("kubectl-valkey"))
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("building kubectl-valkey failed: {e}"))
}

/// Runs `kubectl-valkey args...`: (exit code, stdout, stderr).
async fn plugin(args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(plugin_binary()?)
            .args(&args)
            .env("KUBECONFIG", kubeconfig_path())
            .output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    })
    .await?
}

async fn active(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<ValkeyCluster> {
    wait_state(
        client,
        ns,
        name,
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await
}

async fn pod_uids(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let mut uids: Vec<String> = member_pods(client, ns, name)
        .await?
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    uids.sort();
    Ok(uids)
}

#[tokio::test]
async fn impact_image_names_exactly_the_clusters_that_then_roll() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-plugin-impact").await?;
    let repointed = Menu::publish(&client, "e2e-plugin", "9.0.0").await?;
    let other = Menu::publish(&client, "e2e-plugin", "9.0.0").await?;
    for (name, menu) in [("a1", &repointed), ("a2", &repointed), ("b1", &other)] {
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, name, &menu.config, 1, 1),
        )
        .await?;
    }
    for name in ["a1", "a2", "b1"] {
        active(&client, &ns.name, name).await?;
    }
    let before: Vec<Vec<String>> =
        futures::future::try_join_all(["a1", "a2", "b1"].map(|n| pod_uids(&client, &ns.name, n)))
            .await?;

    let started = Instant::now();
    let args = [
        "impact",
        "image",
        &repointed.image,
        "--to-tag",
        "9.1.2",
        "--to-version",
        "9.1.2",
        "-n",
        &ns.name,
    ];
    let (code, text, stderr) = plugin(&args).await?;
    println!(
        "kubectl valkey {} ({:?}):\n{text}{stderr}",
        args.join(" "),
        started.elapsed()
    );
    ensure!(
        code == 3,
        "exit code 3 when something would roll, got {code}: {stderr}"
    );
    ensure!(text.contains("order: all at once"), "{text}");
    impact_json_and_the_other_image_agree(&args, &ns.name, &other.image).await?;
    repointed_clusters_roll_and_the_other_does_not(&client, &repointed, &ns.name, &before).await?;
    let (code, text, _) = plugin(&args).await?;
    ensure!(
        code == 0,
        "after the repoint nothing more would roll: {text}"
    );
    println!("repoint and rollouts done in {:?}", started.elapsed());
    repointed.remove(&client).await?;
    other.remove(&client).await?;
    Ok(())
}

/// `impact image` `args` `-o json` names a1 and a2 in one step; the other image rolls nothing.
async fn impact_json_and_the_other_image_agree(
    args: &[&str],
    ns: &str,
    other_image: &str,
) -> anyhow::Result<()> {
    let (_, json, _) = plugin(&[args, &["-o", "json"]].concat()).await?;
    let impact: Value = serde_json::from_str(&json).context("impact -o json")?;
    let mut rolling: Vec<String> = impact["clusters"]
        .as_array()
        .context("clusters")?
        .iter()
        .filter(|c| c["outcome"] == "rolls")
        .map(|c| {
            assert_eq!(c["members"], 2, "both members of {c}");
            c["name"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    rolling.sort();
    assert_eq!(rolling, ["a1", "a2"], "{json}");
    assert_eq!(
        impact["order"],
        serde_json::json!([[format!("{}/a1", ns), format!("{}/a2", ns)]])
    );
    // The image the other clusters run: no change given, its readers; a no-op change: nothing.
    let (code, text, _) = plugin(&[
        "impact",
        "image",
        other_image,
        "--to-tag",
        "9.0.0",
        "-n",
        ns,
    ])
    .await?;
    ensure!(
        code == 0 && text.contains("no cluster would roll"),
        "{code}: {text}"
    );
    Ok(())
}

/// Repoints `repointed` to 9.1.2: a1 and a2 roll to it with every pod replaced, b1's pods stay.
async fn repointed_clusters_roll_and_the_other_does_not(
    client: &kube::Client,
    repointed: &Menu,
    ns: &str,
    before: &[Vec<String>],
) -> anyhow::Result<()> {
    // The repoint: exactly a1 and a2 roll.
    repointed.repoint(client, "9.1.2").await?;
    for name in ["a1", "a2"] {
        wait_for(
            &format!("{name} rolled to 9.1.2"),
            Duration::from_secs(400),
            Duration::from_secs(2),
            || async {
                let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
                    .get(name)
                    .await?;
                let status = c.status.unwrap_or_default();
                let versions: Vec<_> = status.nodes.iter().map(|n| n.version.clone()).collect();
                ensure!(
                    status.state == Some(ClusterState::Active)
                        && versions.len() == 2
                        && versions.iter().all(|v| v.as_deref() == Some("9.1.2")),
                    "state {:?}, member versions {versions:?}: {}",
                    status.state,
                    status.message.unwrap_or_default()
                );
                Ok(Some(()))
            },
        )
        .await?;
    }
    // The status drops a retired member when its ValkeyNode is deleted; its pod goes after
    // that (garbage collection, then Valkey's shutdown), so the old pods are waited for.
    for (i, name) in ["a1", "a2"].into_iter().enumerate() {
        let before = &before[i];
        wait_for(
            &format!("every member of {name} replaced (no pod from before left)"),
            Duration::from_secs(90),
            Duration::from_secs(1),
            || async {
                let left: Vec<String> = pod_uids(client, ns, name)
                    .await?
                    .into_iter()
                    .filter(|uid| before.contains(uid))
                    .collect();
                if left.is_empty() {
                    Ok(Some(()))
                } else {
                    bail!("pods from before still there: {left:?}")
                }
            },
        )
        .await?;
    }
    assert_eq!(
        pod_uids(client, ns, "b1").await?,
        before[2],
        "b1 did not roll"
    );
    Ok(())
}

#[tokio::test]
async fn resolve_cluster_equals_the_configmaps_and_acl_secret_the_operator_wrote()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-plugin-resolve").await?;
    let menu = Menu::publish(&client, "e2e-plugin", "9.0.0").await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, "live", &menu.config, 2, 1),
    )
    .await?;
    active(&client, &ns.name, "live").await?;
    let key = format!("{}/live", ns.name);

    let (code, json, stderr) = plugin(&["resolve", "cluster", &key, "-o", "json"]).await?;
    ensure!(code == 0, "resolve cluster failed: {stderr}");
    let report: Value = serde_json::from_str(&json)?;
    let secret = Api::<Secret>::namespaced(client.clone(), &ns.name)
        .get("live-acl")
        .await?;
    let users_acl = String::from_utf8(secret.data.context("data")?["users.acl"].0.clone())?;
    assert_eq!(report["aclFile"].as_str(), Some(users_acl.as_str()));
    let configs = Api::<ConfigMap>::namespaced(client.clone(), &ns.name);
    let pods = member_pods(&client, &ns.name, "live").await?;
    assert_eq!(pods.len(), 4);
    for pod in &pods {
        let cm = configs.get(&format!("{}-config", pod.name_any())).await?;
        let conf = cm.data.context("data")?["valkey.conf"].clone();
        assert_eq!(
            report["valkeyConf"].as_str(),
            Some(conf.as_str()),
            "{}",
            pod.name_any()
        );
    }
    assert_eq!(report["chain"], serde_json::json!([menu.config]));
    assert_eq!(
        report["settings"]["repl-diskless-sync-delay"]["setBy"],
        menu.config.as_str()
    );
    assert_eq!(report["image"], "valkey/valkey:9.0.0");
    // Hashes only: the app user's password never appears.
    assert!(!json.contains(valkey_e2e::workload::PASSWORD));
    let (code, text, _) = plugin(&["resolve", "cluster", &key]).await?;
    ensure!(code == 0 && text.contains("--- users.acl ---"), "{text}");
    println!("{text}");
    menu.remove(&client).await?;
    Ok(())
}

#[tokio::test]
async fn status_mid_scale_shows_the_slots_left_to_move() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-plugin-status").await?;
    let menu = Menu::publish(&client, "e2e-plugin", "9.1.2").await?;
    // Key-by-key moves of a preloaded cluster: slow enough to be seen mid-way.
    let keyed = |shards: i32| {
        let mut c = cluster(&ns.name, "scale", &menu.config, shards, 1);
        c["metadata"]["annotations"] =
            serde_json::json!({"valkey.gomomento.com/slot-migration": "keys"});
        c
    };
    apply(&client, &ns.name, keyed(2)).await?;
    active(&client, &ns.name, "scale").await?;
    let valkey = cluster_client(&client, &ns.name, "scale").await?;
    preload(&valkey).await?;
    let _ = valkey.quit().await;

    // The plugin is built (the first call builds it: tens of seconds on a busy machine) before
    // the scale-out starts, which moves these keys in about 30 s.
    tokio::task::spawn_blocking(plugin_binary).await??;
    apply(&client, &ns.name, keyed(3)).await?;
    let key = format!("{}/scale", ns.name);
    let text = wait_for(
        "status to show slots left to move",
        Duration::from_secs(300),
        Duration::from_millis(500),
        || async {
            let (code, text, stderr) = plugin(&["status", &key]).await?;
            ensure!(code == 0, "status failed: {stderr}");
            Ok(text.contains("slot(s) left to move").then_some(text))
        },
    )
    .await?;
    println!("{text}");
    assert!(text.contains("ValkeyCluster"), "{text}");
    // The new shard: what it serves so far (from the operator's status) and its target.
    assert!(text.contains("shard 2 (serves "), "{text}");
    assert!(text.contains("target slots 10923-16383)"), "{text}");
    // The other form docs/plugin.md allows: `status <name> -n <namespace>`.
    let (_, json, stderr) = plugin(&["status", "scale", "-n", &ns.name, "-o", "json"]).await?;
    ensure!(!json.is_empty(), "status <name> -n <namespace>: {stderr}");
    let report: Value = serde_json::from_str(&json)?;
    assert_eq!(report["shardsWanted"], 3);
    menu.remove(&client).await?;
    Ok(())
}

/// `setting` as every member of cluster `name` runs with it (`CONFIG GET`), by pod.
async fn member_setting(
    client: &kube::Client,
    ns: &str,
    name: &str,
    setting: &str,
) -> anyhow::Result<Vec<String>> {
    let driver = operator_driver(client, ns, name).await?;
    let mut values = Vec::new();
    for addr in serving_addrs(&member_pods(client, ns, name).await?) {
        let got = driver.config_get(&addr, setting).await?;
        values.push(
            got.into_iter()
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    Ok(values)
}

/// `kubectl valkey impact config` of the config with `setting` set to `value` (the edited
/// object in a file, as a user would pass it): exit code and text.
async fn impact_of_setting(
    client: &kube::Client,
    ns: &str,
    config: &str,
    (setting, value): (&str, &str),
) -> anyhow::Result<(i32, String)> {
    let mut edited = Api::<ValkeyConfig>::all(client.clone()).get(config).await?;
    edited.spec.valkey.insert(setting.into(), value.into());
    edited.metadata.managed_fields = None;
    let path = std::env::temp_dir().join(format!("{config}-{setting}.yaml"));
    std::fs::write(&path, serde_json::to_string(&edited)?)?;
    let file = path.to_string_lossy().into_owned();
    let (code, text, stderr) = plugin(&["impact", "config", config, "-f", &file, "-n", ns]).await?;
    println!(
        "kubectl valkey impact config {config} ({setting} {value}), exit {code}:\n{text}{stderr}"
    );
    Ok((code, text))
}

#[tokio::test]
async fn a_live_setting_reaches_every_member_without_a_roll_and_a_restart_only_one_rolls()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-plugin-live").await?;
    let menu = Menu::publish(&client, "e2e-live", "9.1.2").await?;
    let configs: Api<ValkeyConfig> = Api::all(client.clone());
    let set = |k: &str, v: &str| Patch::Merge(json!({"spec": {"valkey": {k: v}}}));
    for (k, v) in [("maxmemory-policy", "allkeys-lru"), ("tcp-backlog", "511")] {
        configs
            .patch(&menu.config, &PatchParams::default(), &set(k, v))
            .await?;
    }
    // Durable members: a killed Valkey restarts in its pod (a memory-only member would be
    // replaced by a new one, created with the new values anyway).
    let durable = json!({"spec": {"storage": {"size": "64Mi"}, "valkey": {"appendonly": "yes"}}});
    configs
        .patch(
            &menu.config,
            &PatchParams::default(),
            &Patch::Merge(durable),
        )
        .await?;
    let names = ["l1", "l2", "l3"];
    for name in names {
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, name, &menu.config, 1, 1),
        )
        .await?;
    }
    for name in names {
        active(&client, &ns.name, name).await?;
    }
    let uids = || futures::future::try_join_all(names.map(|n| pod_uids(&client, &ns.name, n)));
    let before = uids().await?;

    // A live setting: impact says so, and every member has it within 30 s, no pod replaced.
    let (code, text) = impact_of_setting(
        &client,
        &ns.name,
        &menu.config,
        ("maxmemory-policy", "noeviction"),
    )
    .await?;
    ensure!(code == 0, "nothing rolls: exit {code}");
    ensure!(
        text.matches("set live with CONFIG SET").count() == 3
            && text.contains("maxmemory-policy allkeys-lru -> noeviction"),
        "{text}"
    );
    configs
        .patch(
            &menu.config,
            &PatchParams::default(),
            &set("maxmemory-policy", "noeviction"),
        )
        .await?;
    every_member_gets_the_live_setting(&client, &ns.name, names).await?;
    ensure!(uids().await? == before, "a live setting replaced pods");
    settings_applied_on_every_cluster(&client, &ns.name, names).await?;

    a_killed_member_comes_back_on_the_live_value(&client, &ns.name).await?;

    // A restart-only setting: impact says the clusters roll, and they do.
    let (code, text) =
        impact_of_setting(&client, &ns.name, &menu.config, ("tcp-backlog", "1024")).await?;
    ensure!(
        code == 3,
        "exit 3 when members would roll, got {code}: {text}"
    );
    configs
        .patch(
            &menu.config,
            &PatchParams::default(),
            &set("tcp-backlog", "1024"),
        )
        .await?;
    every_member_rolls_onto_the_restart_only_setting(&client, &ns.name, names, &before, uids)
        .await?;
    menu.remove(&client).await?;
    Ok(())
}

/// Waits until every member of the three clusters runs maxmemory-policy noeviction (set live).
async fn every_member_gets_the_live_setting(
    client: &kube::Client,
    ns: &str,
    names: [&str; 3],
) -> anyhow::Result<()> {
    let changed = Instant::now();
    wait_for(
        "every member of the three clusters on maxmemory-policy noeviction",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            for name in names {
                let values = member_setting(client, ns, name, "maxmemory-policy").await?;
                ensure!(
                    values.len() == 2 && values.iter().all(|v| v == "noeviction"),
                    "{name}: {values:?}"
                );
            }
            Ok(Some(()))
        },
    )
    .await?;
    println!(
        "live setting on all 6 members {:?} after the config changed",
        changed.elapsed()
    );
    Ok(())
}

/// Every cluster's `SettingsApplied` condition is True.
async fn settings_applied_on_every_cluster(
    client: &kube::Client,
    ns: &str,
    names: [&str; 3],
) -> anyhow::Result<()> {
    for name in names {
        let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
            .get(name)
            .await?;
        let applied = c
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "SettingsApplied");
        ensure!(
            applied.as_ref().is_some_and(|c| c.status == "True"),
            "{name}: SettingsApplied {applied:?}"
        );
    }
    Ok(())
}

/// Kills the Valkey of a member of l1: it restarts in its pod and is back on noeviction.
async fn a_killed_member_comes_back_on_the_live_value(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<()> {
    // A member's Valkey killed: it starts again in its pod from its valkey.conf (allkeys-lru),
    // and the operator sets it again (a new process: a new run id).
    let pod = member_pods(client, ns, "l1").await?[0].name_any();
    valkey_e2e::faults::PodRef::find(ns, &pod)?.kill("valkey")?;
    let killed = Instant::now();
    wait_for(
        "the restarted member back on noeviction",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            let restarted = member_pods(client, ns, "l1")
                .await?
                .iter()
                .filter(|p| p.name_any() == pod)
                .flat_map(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                })
                .any(|c| c.name == "valkey" && c.restart_count >= 1);
            ensure!(restarted, "{pod}'s valkey container has not restarted yet");
            let values = member_setting(client, ns, "l1", "maxmemory-policy").await?;
            ensure!(
                values.len() == 2 && values.iter().all(|v| v == "noeviction"),
                "{values:?}"
            );
            Ok(Some(()))
        },
    )
    .await?;
    println!(
        "killed member back on the live value {:?} after the kill",
        killed.elapsed()
    );
    Ok(())
}

/// Waits until every member is replaced onto tcp-backlog 1024; noeviction survives the roll.
async fn every_member_rolls_onto_the_restart_only_setting<F>(
    client: &kube::Client,
    ns: &str,
    names: [&str; 3],
    before: &[Vec<String>],
    uids: impl Fn() -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<Vec<Vec<String>>>>,
{
    wait_for(
        "every member replaced and every cluster Active",
        Duration::from_secs(300),
        Duration::from_secs(2),
        || async {
            let now = uids().await?;
            for (i, name) in names.iter().enumerate() {
                ensure!(
                    now[i].iter().all(|u| !before[i].contains(u)) && now[i].len() == 2,
                    "{name}: pods {:?}, before {:?}",
                    now[i],
                    before[i]
                );
                active(client, ns, name).await?;
                let values = member_setting(client, ns, name, "tcp-backlog").await?;
                ensure!(values.iter().all(|v| v == "1024"), "{name}: {values:?}");
            }
            Ok(Some(()))
        },
    )
    .await?;
    for name in names {
        let values = member_setting(client, ns, name, "maxmemory-policy").await?;
        ensure!(
            values.iter().all(|v| v == "noeviction"),
            "{name} after the roll: {values:?}"
        );
    }
    Ok(())
}
