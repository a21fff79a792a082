//! The chart's namespace-scoped mode (issue 33, chart parity): `helm upgrade --reuse-values
//! --set watchNamespaces={<ns>}` on the running release. Then:
//! - the operator's permissions over the clusters' objects hold in that namespace (and its
//!   own) only: it can no longer list pods or Secrets anywhere else (`kubectl auth can-i`);
//! - a ValkeyCluster there forms (Active) with only those permissions, and the operator logs
//!   no `forbidden` (every watch it runs is one it may run);
//! - a ValkeyCluster in another namespace is refused at admission, saying where it can go.
//!
//! Afterwards (failed or not) the release is put back to every namespace, and a ValkeyCluster
//! outside the former list is accepted again. Serial: it restarts the operator.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, ensure};
use kube::Client;

use valkey_e2e::harness::{
    TestNamespace, client, helm, kubectl_input, kubectl_run, repo_root, wait_for,
};
use valkey_e2e::valkey::OPERATOR_NAMESPACE;
use valkey_e2e::workload::{Menu, active_cluster_on, cluster};

const RELEASE: &str = "valkey-operator";

/// `helm upgrade` of the running release with its values and `set` (a `--set` or
/// `--set-json` flag and its argument), then waits for the operator's rollout.
fn upgrade_release(set: [&str; 2]) -> anyhow::Result<()> {
    let chart = repo_root()?.join("charts/valkey-operator");
    let kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG")?;
    let out = std::process::Command::new(helm()?)
        .args(["upgrade", RELEASE])
        .arg(&chart)
        .args([
            "--namespace",
            OPERATOR_NAMESPACE,
            "--kubeconfig",
            &kubeconfig,
        ])
        .args(["--reuse-values", "--wait", "--timeout", "180s"])
        .args(set)
        .output()?;
    ensure!(
        out.status.success(),
        "helm upgrade {set:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl_run(&[
        "-n",
        OPERATOR_NAMESPACE,
        "rollout",
        "status",
        "deployment/valkey-operator",
        "--timeout=180s",
    ])?;
    Ok(())
}

/// Whether the operator's service account may `verb` `resource` in `namespace` (`None`: in
/// every namespace).
fn operator_may(verb: &str, resource: &str, namespace: Option<&str>) -> anyhow::Result<bool> {
    let account = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:valkey-operator");
    let mut args = vec!["auth", "can-i", verb, resource, "--as", &account];
    match namespace {
        Some(ns) => args.extend(["-n", ns]),
        None => args.push("--all-namespaces"),
    }
    let out = valkey_e2e::harness::kubectl_outcome(&args)?;
    Ok(out.stdout.trim() == "yes")
}

/// `kubectl apply` of a 1 x 0 ValkeyCluster on `config` in `ns` (`--dry-run=server` if `dry`).
fn apply_cluster(
    ns: &str,
    config: &str,
    dry: bool,
) -> anyhow::Result<valkey_e2e::harness::Outcome> {
    let manifest = serde_json::to_string(&cluster(ns, "elsewhere", config, 1, 0))?;
    let mut args = vec!["apply", "-f", "-"];
    if dry {
        args.push("--dry-run=server");
    }
    kubectl_input(&args, &manifest)
}

/// What the scoped operator must do and refuse.
async fn scoped_checks(
    client: &Client,
    inside: &str,
    outside: &str,
    menu: &Menu,
) -> anyhow::Result<()> {
    for (resource, ns, want) in [
        ("pods", Some(inside), true),
        ("secrets", Some(inside), true),
        ("pods", Some(OPERATOR_NAMESPACE), true),
        ("pods", Some(outside), false),
        ("secrets", Some(outside), false),
        ("secrets", None, false),
        ("valkeyclusters.valkey.gomomento.com", None, false),
    ] {
        let may = operator_may("list", resource, ns)?;
        ensure!(
            may == want,
            "the operator may list {resource} in {}: {may}, want {want}",
            ns.unwrap_or("every namespace")
        );
    }
    ensure!(
        operator_may("list", "valkeyconfigs.valkey.gomomento.com", None)?,
        "the menu stays readable cluster-wide"
    );

    let refused = apply_cluster(outside, &menu.config, false)?;
    ensure!(!refused.ok, "a cluster in {outside} was accepted");
    ensure!(
        refused
            .stderr
            .contains(&format!("does not watch namespace \"{outside}\""))
            && refused.stderr.contains("watchNamespaces"),
        "the refusal says why and what to do: {}",
        refused.stderr
    );

    active_cluster_on(client, inside, "scoped", &menu.config, (2, 1)).await?;
    let logs = kubectl_run(&[
        "-n",
        OPERATOR_NAMESPACE,
        "logs",
        "deployment/valkey-operator",
        "--since=10m",
    ])?;
    let forbidden: Vec<&str> = logs.lines().filter(|l| l.contains("forbidden")).collect();
    ensure!(
        forbidden.is_empty(),
        "the scoped operator ran requests it may not: {forbidden:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_namespace_scoped_operator_runs_clusters_there_and_nowhere_else() -> anyhow::Result<()> {
    let client = client().await?;
    let inside = TestNamespace::create(&client, "e2e-scope-in").await?;
    let outside = TestNamespace::create(&client, "e2e-scope-out").await?;
    let menu = Menu::publish(&client, "e2e-scope", "9.0.0").await?;

    let scoped = format!("watchNamespaces={{{}}}", inside.name);
    upgrade_release(["--set", &scoped])?;
    let checked = scoped_checks(&client, &inside.name, &outside.name, &menu).await;
    // What docs/operations.md says: with --reuse-values, `--set watchNamespaces=null` keeps
    // the old list (helm 3.22) and `{}` is a list of one empty name.
    let restored = upgrade_release(["--set-json", "watchNamespaces=[]"]);
    checked?;
    restored?;

    ensure!(
        operator_may("list", "secrets", None)?,
        "every namespace again: the tenant role is bound cluster-wide"
    );
    // The webhook replicas may still be the scoped ones for a moment after the rollout.
    wait_for(
        "a cluster outside the former list to be accepted again",
        Duration::from_secs(60),
        Duration::from_secs(2),
        || {
            let (ns, config) = (outside.name.clone(), menu.config.clone());
            async move {
                let outcome = apply_cluster(&ns, &config, true)?;
                Ok(outcome.ok.then_some(()))
            }
        },
    )
    .await?;
    menu.remove(&client).await?;
    Ok(())
}
