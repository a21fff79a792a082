//! v1beta1 and the operator's /convert, with v1beta1 served (the chart's
//! `crds.serveV1beta1=true`; this suite sets `served: true` on the two CRDs for its duration
//! and restores it after, pass or fail). Runs alone (`make e2e`'s serial group): while v1beta1
//! is served, kubectl's default version for the group is v1beta1, which would change what
//! every other suite's unqualified kubectl sees. Its own kubectl calls use a private discovery
//! cache so that the shared one never remembers v1beta1 as preferred.
#![cfg(feature = "e2e")]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::json;

use valkey_e2e::harness::{
    TestNamespace, client, delete_cluster_scoped, kubectl, random_suffix, wait_for,
};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig};

const CONVERTED: [&str; 2] = [
    "valkeyclusters.valkey.gomomento.com",
    "valkeyconfigs.valkey.gomomento.com",
];

/// kubectl with this suite's own discovery cache.
struct Kubectl {
    cache: PathBuf,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new() -> Kubectl {
        let cache = std::env::temp_dir().join(format!("vk-conversion-cache-{}", random_suffix(6)));
        Kubectl { cache }
    }

    fn run(&self, args: &[&str], input: Option<&str>) -> anyhow::Result<Out> {
        use std::io::Write as _;
        use std::process::Stdio;
        let mut child = kubectl()
            .arg(format!("--cache-dir={}", self.cache.display()))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(input) = input {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())?;
        }
        drop(child.stdin.take());
        let out = child.wait_with_output()?;
        Ok(Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn must(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run(args, None)?;
        ensure!(out.ok, "kubectl {}: {}", args.join(" "), out.stderr);
        Ok(out.stdout)
    }

    fn get_json(
        &self,
        resource: &str,
        name: &str,
        ns: Option<&str>,
    ) -> anyhow::Result<serde_json::Value> {
        let mut args = vec!["get", resource, name, "-o", "json"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        Ok(serde_json::from_str(&self.must(&args)?)?)
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cache);
    }
}

/// `served` of v1beta1 on both converting CRDs, as a JSON patch per CRD.
fn set_v1beta1_served(served: bool) -> anyhow::Result<()> {
    for crd in CONVERTED {
        let out = kubectl().args(["get", "crd", crd, "-o", "json"]).output()?;
        ensure!(out.status.success(), "get crd {crd}");
        let value: CustomResourceDefinition = serde_json::from_slice(&out.stdout)?;
        let index = value
            .spec
            .versions
            .iter()
            .position(|v| v.name == "v1beta1")
            .ok_or_else(|| anyhow::anyhow!("{crd} declares no v1beta1"))?;
        let patch = json!([{"op": "replace", "path": format!("/spec/versions/{index}/served"), "value": served}]);
        let out = kubectl()
            .args(["patch", "crd", crd, "--type=json", "-p", &patch.to_string()])
            .output()?;
        ensure!(
            out.status.success(),
            "patch crd {crd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Serves v1beta1 while alive; back to the default (not served) when dropped, pass or fail.
struct V1beta1Served;

impl V1beta1Served {
    fn on() -> anyhow::Result<V1beta1Served> {
        set_v1beta1_served(true)?;
        Ok(V1beta1Served)
    }
}

impl Drop for V1beta1Served {
    fn drop(&mut self) {
        if let Err(e) = set_v1beta1_served(false) {
            eprintln!("could not stop serving v1beta1: {e}");
        }
    }
}

/// Waits until a v1beta1 list answers (`served`) or is refused (not served).
async fn wait_served(kubectl: &Kubectl, served: bool) -> anyhow::Result<()> {
    wait_for(
        &format!("v1beta1 served: {served}"),
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let out = kubectl.run(
                &["get", "valkeyclusters.v1beta1.valkey.gomomento.com", "-A"],
                None,
            )?;
            if out.ok == served {
                Ok(Some(()))
            } else {
                bail!("{}{}", out.stdout, out.stderr)
            }
        },
    )
    .await
}

#[tokio::test]
async fn with_v1beta1_served_objects_convert_both_ways_through_the_webhook() -> anyhow::Result<()> {
    let client = client().await?;
    let kubectl = Kubectl::new();
    // Not served by default: the API server does not know the version.
    let out = kubectl.run(
        &["get", "valkeyclusters.v1beta1.valkey.gomomento.com", "-A"],
        None,
    )?;
    ensure!(!out.ok, "v1beta1 is not served by default: {}", out.stdout);
    // The CRDs as `make up` installed them (the chart's default) serve only v1alpha1.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CONVERTED {
        let crd = crds.get(name).await?;
        let served: Vec<(String, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served))
            .collect();
        assert_eq!(
            served,
            vec![
                ("v1alpha1".to_string(), true),
                ("v1beta1".to_string(), false)
            ],
            "{name}"
        );
    }

    let served = V1beta1Served::on()?;
    // Discovery and the conversion webhook answer once the API server has the new version.
    wait_served(&kubectl, true).await?;

    let ns = TestNamespace::create(&client, "e2e-convert").await?;
    let cfg = format!("e2e-{}-beta", random_suffix(4));
    // A config written as v1beta1 (`settings`) reads back as v1alpha1 (`valkey`).
    let beta_config = json!({"apiVersion": "valkey.gomomento.com/v1beta1", "kind": "ValkeyConfig",
        "metadata": {"name": cfg},
        "spec": {"baseRef": "standard", "settings": {"maxmemory-policy": "allkeys-lfu"}}});
    let out = kubectl.run(&["apply", "-f", "-"], Some(&beta_config.to_string()))?;
    assert!(out.ok, "{}", out.stderr);
    let alpha = kubectl.get_json("valkeyconfigs.v1alpha1.valkey.gomomento.com", &cfg, None)?;
    assert_eq!(
        alpha["spec"]["valkey"],
        json!({"maxmemory-policy": "allkeys-lfu"})
    );
    assert!(alpha["spec"].get("settings").is_none());

    // A cluster written as v1beta1 (`topology`) reads back as v1alpha1 and again as v1beta1.
    let beta_cluster = json!({"apiVersion": "valkey.gomomento.com/v1beta1", "kind": "ValkeyCluster",
        "metadata": {"name": "beta", "namespace": ns.name},
        "spec": {"configRef": cfg, "topology": {"shards": 1, "replicasPerShard": 0},
                 "podAnnotations": {"team": "payments"}}});
    let out = kubectl.run(&["apply", "-f", "-"], Some(&beta_cluster.to_string()))?;
    assert!(out.ok, "{}", out.stderr);
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let stored = api.get("beta").await?;
    assert_eq!((stored.spec.shards, stored.spec.replicas_per_shard), (1, 0));
    assert_eq!(stored.spec.config_ref, cfg);
    let as_beta = kubectl.get_json(
        "valkeyclusters.v1beta1.valkey.gomomento.com",
        "beta",
        Some(&ns.name),
    )?;
    assert_eq!(as_beta["apiVersion"], "valkey.gomomento.com/v1beta1");
    assert_eq!(
        as_beta["spec"], beta_cluster["spec"],
        "v1beta1 -> v1alpha1 -> v1beta1 is lossless"
    );
    // While v1beta1 is served it is kubectl's default, as Kubernetes documents: the docs say so.
    let unqualified = kubectl.get_json("valkeycluster", "beta", Some(&ns.name))?;
    assert_eq!(unqualified["apiVersion"], "valkey.gomomento.com/v1beta1");

    // The object is served and run like any other: the operator reconciles it.
    valkey_e2e::valkey::wait_state(
        &client,
        &ns.name,
        "beta",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let listed = kubectl.must(&["get", "valkeyclusters.v1beta1.valkey.gomomento.com", "-A"])?;
    assert!(listed.contains("beta"), "{listed}");
    let status = kubectl.get_json(
        "valkeyclusters.v1beta1.valkey.gomomento.com",
        "beta",
        Some(&ns.name),
    )?;
    assert_eq!(status["status"]["state"], "Active", "status converts too");
    // And an object written as v1alpha1 reads back identically through v1beta1 and back.
    let alpha_spec = serde_json::to_value(&api.get("beta").await?.spec)?;
    let again = kubectl.get_json(
        "valkeyclusters.v1alpha1.valkey.gomomento.com",
        "beta",
        Some(&ns.name),
    )?;
    assert_eq!(again["spec"], alpha_spec);
    api.delete("beta", &Default::default()).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;

    // Turning it off again loses nothing: objects are stored as v1alpha1.
    drop(served);
    wait_served(&kubectl, false).await?;
    Ok(())
}
