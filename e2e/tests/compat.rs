//! Manifests written from Momento's public API reference apply here and mean the same
//! (e2e/fixtures/momento/, one object per difference, docs/compat.md): every fixture passes
//! `kubectl apply --validate=strict` on the real API server (warnings where we say what
//! happens), the ACL file the operator renders for them is what Momento's docs say
//! (`{name: cluster, subcommand: info}` -> `+cluster|info`), and a real cluster enforces a
//! binding with a string channel and an `access`-less key pattern exactly: PUBLISH on the
//! channel only, SET and GET on the pattern only.
#![cfg(feature = "e2e")]

use std::process::Output;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, kubectl};
use valkey_e2e::valkey::{member_pods, wait_state};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyRole};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/momento");
const PASSWORD: &str = "compat-password";
const USER: &str = "_svc-reader";

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

fn kubectl_apply(args: &[&str]) -> anyhow::Result<Output> {
    Ok(kubectl()
        .args(["apply", "--validate=strict"])
        .args(args)
        .output()?)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The menu objects, for real: every menu fixture applies strictly, with the warnings we say.
fn the_menu_fixtures_apply_with_their_warnings() -> anyhow::Result<()> {
    for name in [
        "01-role-subcommand.yaml",
        "02-role-empty.yaml",
        "03-image-free-version.yaml",
        "04-config-bindings.yaml",
        "05-config-no-refs.yaml",
        "06-config-forced-setting.yaml",
    ] {
        let out = kubectl_apply(&["-f", &fixture(name)])?;
        ensure!(out.status.success(), "{name}: {}", stderr(&out));
        let warned = stderr(&out);
        match name {
            "02-role-empty.yaml" => ensure!(warned.contains("has no rules"), "{name}: {warned}"),
            "05-config-no-refs.yaml" => {
                ensure!(warned.contains("sets spec.imageRef"), "{name}: {warned}")
            }
            "06-config-forced-setting.yaml" => ensure!(
                warned.contains("valkey.port is ignored: the operator sets port itself"),
                "{name}: {warned}"
            ),
            _ => {}
        }
    }
    Ok(())
}

/// The ACL file the operator renders for the cluster says what Momento's docs say.
async fn the_acl_file_says_what_momentos_docs_say(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<()> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get("compat-acl")
        .await?;
    let file = secret
        .data
        .as_ref()
        .and_then(|d| d.get(valkey_operator::resolve::conf::ACL_FILE_KEY))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .context("ACL file in the Secret")?;
    let line = file
        .lines()
        .find(|l| l.starts_with(&format!("user {USER} ")))
        .context("a line for the binding's user")?;
    for wanted in ["~app:*", "&events:*", "+@read", "+cluster|info", "-keys"] {
        ensure!(line.contains(wanted), "{wanted:?} in {line}");
    }
    ensure!(
        !line.contains("+cluster "),
        "not the whole cluster command: {line}"
    );
    Ok(())
}

/// And Valkey enforces exactly that: SET and GET on the pattern only, PUBLISH on the channel
/// only, `cluster|info` but not the whole cluster command.
async fn valkey_enforces_the_binding_exactly(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<()> {
    let pod = member_pods(client, ns, "compat")
        .await?
        .into_iter()
        .next()
        .context("a member pod")?;
    let ip = pod
        .status
        .and_then(|s| s.pod_ip)
        .context("the member's IP")?;
    let config = Config {
        server: ServerConfig::new_centralized(ip, 6379),
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let valkey = Builder::from_config(config).build()?;
    valkey.init().await?;
    let noperm = |r: Result<(), Error>| matches!(r, Err(e) if format!("{e:?}").contains("NOPERM"));
    valkey
        .set::<(), _, _>("app:1", "v", None, None, false)
        .await?;
    let got: String = valkey.get("app:1").await?;
    ensure!(got == "v", "GET app:1");
    ensure!(
        noperm(
            valkey
                .set::<(), _, _>("other:1", "v", None, None, false)
                .await
        ),
        "SET outside app:* is refused"
    );
    ensure!(
        noperm(valkey.get::<(), _>("other:1").await),
        "GET outside app:* is refused"
    );
    let _: i64 = valkey.publish("events:orders", "hello").await?;
    ensure!(
        noperm(valkey.publish::<(), _, _>("other", "hello").await),
        "PUBLISH outside events:* is refused"
    );
    let info: String = valkey.custom(fred::cmd!("CLUSTER"), vec!["INFO"]).await?;
    ensure!(info.contains("cluster_state:ok"), "{info}");
    ensure!(
        noperm(
            valkey
                .custom::<(), _>(fred::cmd!("CLUSTER"), vec!["NODES"])
                .await
        ),
        "only cluster|info, not the whole cluster command"
    );
    let _ = valkey.quit().await;
    Ok(())
}

#[tokio::test]
async fn momento_shaped_manifests_apply_strictly_and_mean_the_same() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-compat").await?;

    the_menu_fixtures_apply_with_their_warnings()?;
    // The clusters: accepted by a server-side dry run (no members started for them).
    for name in ["07-cluster-many-replicas.yaml", "08-cluster-tls.yaml"] {
        let out = kubectl_apply(&["--dry-run=server", "-n", &ns.name, "-f", &fixture(name)])?;
        ensure!(out.status.success(), "{name}: {}", stderr(&out));
        if name.starts_with("07") {
            ensure!(
                stderr(&out).contains("replicasPerShard 6 is more than 5"),
                "{name}: {}",
                stderr(&out)
            );
        }
    }

    // A real cluster on the Momento-shaped config.
    let cluster = serde_json::json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "compat", "namespace": ns.name},
        "spec": {"configRef": "compat-config", "shards": 1, "replicasPerShard": 0}});
    valkey_e2e::workload::apply(&client, &ns.name, cluster).await?;
    wait_state(
        &client,
        &ns.name,
        "compat",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;

    the_acl_file_says_what_momentos_docs_say(&client, &ns.name).await?;

    valkey_enforces_the_binding_exactly(&client, &ns.name).await?;

    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete("compat", &Default::default())
        .await?;
    for config in ["compat-forced", "compat-no-refs", "compat-config"] {
        delete_cluster_scoped::<ValkeyConfig>(&client, config).await?;
    }
    delete_cluster_scoped::<ValkeyImage>(&client, "compat-valkey").await?;
    for role in ["compat-reader", "compat-nothing"] {
        delete_cluster_scoped::<ValkeyRole>(&client, role).await?;
    }
    Ok(())
}

/// Every example of Momento's v0.9 docs (e2e/fixtures/momento-v09, one file per example, some
/// with several objects) passes `kubectl apply --validate=strict` on the real API server,
/// every CEL rule and our webhooks, unchanged: a server-side dry run (the examples share names
/// like `standard` with the suites' menu, which they must not replace). The autoscaling example
/// means what the docs say: its defaults are Momento's.
#[tokio::test]
async fn momento_v09_doc_examples_apply_strictly_unchanged() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-compat-v09").await?;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/momento-v09");
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    ensure!(files.len() >= 10, "the v0.9 examples are there: {files:?}");
    for file in &files {
        let path = file.display().to_string();
        let out = kubectl_apply(&[
            "--dry-run=server",
            "-o",
            "json",
            "-n",
            &ns.name,
            "-f",
            &path,
        ])?;
        ensure!(out.status.success(), "{path}: {}", stderr(&out));
        if path.contains("autoscaling") {
            let applied: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            let autoscaling = &applied["spec"]["autoscaling"];
            ensure!(
                autoscaling["scaleInWindowSeconds"] == 300
                    && autoscaling["scaleOutCooldownSeconds"] == 180
                    && autoscaling["scaleInCooldownSeconds"] == 900,
                "Momento's defaults: {autoscaling}"
            );
            ensure!(
                autoscaling["scaleOut"]["bandwidthMbps"] == 800,
                "{autoscaling}"
            );
        }
    }
    Ok(())
}
