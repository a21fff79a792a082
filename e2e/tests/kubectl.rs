//! The documented kubectl commands, run as a new user runs them: no API version named. Every
//! line of the "Scaling with kubectl" block of docs/api.md runs verbatim (through bash, with
//! the doc's `my-cluster`/`my-app` renamed to this test's) and must change the cluster:
//! kubectl's default version for the group is v1alpha1, the shape of the docs.
#![cfg(feature = "e2e")]

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kube::Api;
use serde_json::Value;

use valkey_e2e::harness::{TestNamespace, client, kubectl, kubectl_run, wait_for};
use valkey_e2e::workload::Menu;
use valkey_operator::api::{ClusterState, ValkeyCluster};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md");

/// The shell lines of the fenced block that follows `heading` in docs/api.md.
fn documented_block(heading: &str) -> anyhow::Result<Vec<String>> {
    let doc = std::fs::read_to_string(DOC)?;
    let after = doc
        .split_once(heading)
        .with_context(|| format!("docs/api.md has no {heading:?}"))?
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .context("no ```sh block after the heading")?
        .0;
    Ok(block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect())
}

/// Runs one documented line with bash, kubectl being the pinned one.
fn run_documented(line: &str) -> anyhow::Result<(String, String)> {
    let kubectl_path = std::path::PathBuf::from(kubectl().get_program());
    let dir = kubectl_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.display().to_string());
    let path = match dir {
        Some(d) => format!("{d}:{}", std::env::var("PATH").unwrap_or_default()),
        None => std::env::var("PATH").unwrap_or_default(),
    };
    let out = Command::new("bash")
        .args(["-c", line])
        .env("PATH", path)
        .env("KUBECONFIG", valkey_e2e::harness::kubeconfig_path())
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    ensure!(out.status.success(), "`{line}` failed: {stderr}");
    Ok((stdout, stderr))
}

/// Runs every line of the "Scaling with kubectl" block of docs/api.md (`my-cluster` and
/// `my-app` renamed to `name` and `ns`): no field pruned, each patch changes something,
/// `kubectl get` shows the v1alpha1 shape with 4 shards, `kubectl explain` documents shards.
fn every_documented_scaling_line_changes_the_cluster(name: &str, ns: &str) -> anyhow::Result<()> {
    let lines = documented_block("### Scaling with kubectl")?;
    ensure!(
        lines
            .iter()
            .filter(|l| l.starts_with("kubectl patch"))
            .count()
            == 2,
        "the doc block has the shards and the replicasPerShard patch: {lines:?}"
    );
    for line in &lines {
        let line = line.replace("my-cluster", name).replace("my-app", ns);
        let (stdout, stderr) = run_documented(&line)?;
        ensure!(
            !stderr.contains("unknown field"),
            "`{line}` pruned a field: {stderr}"
        );
        if line.starts_with("kubectl patch") {
            ensure!(
                stdout.contains("patched") && !stdout.contains("no change"),
                "`{line}` changed nothing: {stdout}"
            );
        }
        if line.starts_with("kubectl get") {
            let yaml: Value = serde_yaml_ng::from_str(&stdout)?;
            ensure!(
                yaml["apiVersion"] == "valkey.gomomento.com/v1alpha1"
                    && yaml["spec"]["shards"] == 4,
                "kubectl get shows the v1alpha1 shape with the new shard count: {stdout}"
            );
        }
        if line.starts_with("kubectl explain") {
            ensure!(
                stdout.contains("Number of shards (primaries)"),
                "kubectl explain documents spec.shards: {stdout}"
            );
        }
    }
    Ok(())
}

/// What `kubectl get` shows a product team: state, members ready of those asked for, the
/// Valkey version, the shape (DESIRED SHARDS: empty without autoscaling) and what the
/// operator is doing.
fn kubectl_get_shows_the_cluster_at_a_glance(name: &str, ns: &str) -> anyhow::Result<()> {
    let table = kubectl_run(&["get", "valkeycluster", name, "-n", ns])?;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header.starts_with(&[
            "NAME", "STATE", "READY", "VERSION", "SHARDS", "DESIRED", "SHARDS", "REPLICAS",
            "CONFIG", "PROGRESS"
        ]),
        "columns: {table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        row.get(1..5) == Some(&["Active", "12/12", "9.0.0", "4"][..]),
        "row: {table}"
    );
    Ok(())
}

#[tokio::test]
async fn the_documented_scaling_commands_scale_the_cluster_with_no_version_named()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-kubectl").await?;
    let menu = Menu::publish(&client, "e2e-kubectl", "9.0.0").await?;
    let name = "docs-cluster";
    // Created the way the seed shows it: a v1alpha1 manifest through kubectl.
    let manifest = format!(
        "apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  configRef: {cfg}\n  shards: 3\n  replicasPerShard: 1\n",
        ns = ns.name,
        cfg = menu.config
    );
    let file = std::env::temp_dir().join(format!("{}-cluster.yaml", ns.name));
    std::fs::write(&file, manifest)?;
    kubectl_run(&["apply", "-f", &file.display().to_string()])?;
    valkey_e2e::valkey::wait_state(
        &client,
        &ns.name,
        name,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;

    every_documented_scaling_line_changes_the_cluster(name, &ns.name)?;

    // The patches reached the operator: 4 shards of 1 primary + 2 replicas, Active.
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    wait_for(
        "the cluster to run 4 shards x 2 replicas",
        Duration::from_secs(400),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                let c = api.get(name).await?;
                let s = c.status.clone().unwrap_or_default();
                let shards: std::collections::BTreeSet<i32> =
                    s.nodes.iter().map(|n| n.shard).collect();
                if (c.spec.shards, c.spec.replicas_per_shard) == (4, 2)
                    && s.state == Some(ClusterState::Active)
                    && s.observed_generation == c.metadata.generation
                    && s.nodes.len() == 12
                    && shards.len() == 4
                {
                    Ok(Some(()))
                } else {
                    bail!(
                        "spec {}x{}, {} members, state {:?}: {}",
                        c.spec.shards,
                        c.spec.replicas_per_shard,
                        s.nodes.len(),
                        s.state,
                        s.message.unwrap_or_default()
                    )
                }
            }
        },
    )
    .await?;
    kubectl_get_shows_the_cluster_at_a_glance(name, &ns.name)?;
    let _ = std::fs::remove_file(&file);
    api.delete(name, &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// What a user sees with no version named: the v1alpha1 shape, documented, and v1beta1 not
/// served unless the platform team opts in.
#[tokio::test]
async fn unqualified_kubectl_sees_the_v1alpha1_shape() -> anyhow::Result<()> {
    let _client = client().await?;
    let version_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("VERSION:"))
            .map(|l| l.split_whitespace().last().unwrap_or_default().to_string())
    };
    let explain = kubectl_run(&["explain", "valkeycluster.spec.shards"])?;
    assert_eq!(
        version_line(&explain).as_deref(),
        Some("v1alpha1"),
        "{explain}"
    );
    assert!(explain.contains("Number of shards"), "{explain}");
    let explain = kubectl_run(&["explain", "valkeyconfig.spec.valkey"])?;
    assert_eq!(
        version_line(&explain).as_deref(),
        Some("v1alpha1"),
        "{explain}"
    );
    let versions = kubectl_run(&["api-versions"])?;
    assert!(
        versions.contains("valkey.gomomento.com/v1alpha1")
            && !versions.contains("valkey.gomomento.com/v1beta1"),
        "only v1alpha1 is served by default: {versions}"
    );
    Ok(())
}
