//! Topology changes on the local cluster, each under a continuous writer that records every
//! acknowledged write and verifies them all at the end: rolling replacement when the image is
//! repointed (9.0.0 -> 9.1.2, both real binaries), a stalled rollout that resumes once fixed,
//! and replica scaling. Real API server, real kubelet pods, real valkey-server.
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fred::prelude::*;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, random_suffix, wait_for};
use valkey_e2e::valkey::{member_pods, wait_state};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage};

const PASSWORD: &str = "e2e-rollout-password";

async fn apply(client: &Client, api_path: &str, obj: serde_json::Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .context("name")?
        .to_string();
    match api_path {
        "image" => {
            Api::<ValkeyImage>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
        "config" => {
            Api::<ValkeyConfig>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
        ns => {
            Api::<ValkeyCluster>::namespaced(client.clone(), ns)
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
    }
    Ok(())
}

fn image(name: &str, tag: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyImage", "metadata": {"name": name},
           "spec": {"repository": "valkey/valkey", "tag": tag, "version": tag}})
}

fn config(name: &str, image: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig", "metadata": {"name": name},
           "spec": {"imageRef": image, "resources": {"cpu": "100m", "memory": "256Mi"},
                    "valkey": {"repl-diskless-sync-delay": "0"}}})
}

fn cluster(ns: &str, name: &str, config: &str, shards: i32, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configRef": config, "shards": shards, "replicasPerShard": replicas,
                 "acl": [{"username": "app", "passwordHashes": [hex::encode(Sha256::digest(PASSWORD))],
                          "permissions": [{"roleRef": "cache-readwrite", "keys": [{"pattern": "*", "access": "readwrite"}]}]}]},
    })
}

/// Writes `key:<n>` continuously through a cluster client, retrying each write until it is
/// acknowledged; records acknowledged writes, failed attempts and the longest pause between
/// two acknowledgements.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<WriterReport>>,
}

#[derive(Debug, Default)]
struct WriterReport {
    acknowledged: BTreeMap<String, String>,
    failed_attempts: u64,
    longest_pause: Duration,
}

async fn cluster_client(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<fred::clients::Client> {
    let hosts: Vec<Server> = member_pods(client, ns, name)
        .await?
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| Server::new(ip, 6379))
        .collect();
    let config = Config {
        server: ServerConfig::Clustered {
            hosts,
            policy: Default::default(),
        },
        username: Some("app".into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let valkey = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.max_redirections = 10;
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build()?;
    valkey.init().await?;
    Ok(valkey)
}

impl Writer {
    async fn start(client: &Client, ns: &str, name: &str) -> anyhow::Result<Writer> {
        let mut valkey = cluster_client(client, ns, name).await?;
        let (client, ns, name) = (client.clone(), ns.to_string(), name.to_string());
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let mut report = WriterReport::default();
            let mut last_ack = Instant::now();
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let (key, value) = (format!("key:{n}"), format!("value-{n}"));
                let mut failures = 0;
                loop {
                    match valkey
                        .set::<(), _, _>(&key, &value, None, None, false)
                        .await
                    {
                        Ok(()) => break,
                        Err(_) => {
                            report.failed_attempts += 1;
                            failures += 1;
                            if last_ack.elapsed() > Duration::from_secs(120) {
                                bail!("writes stalled for 2 minutes");
                            }
                            // What an application does through the client Service: find the
                            // current members again (there is no cluster DNS here).
                            if failures % 5 == 0
                                && let Ok(fresh) = cluster_client(&client, &ns, &name).await
                            {
                                let _ = valkey.quit().await;
                                valkey = fresh;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                report.longest_pause = report.longest_pause.max(last_ack.elapsed());
                last_ack = Instant::now();
                report.acknowledged.insert(key, value);
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(report)
        });
        Ok(Writer { stop, task })
    }

    /// Stops writing and reads every acknowledged write back through a fresh client.
    async fn finish(self, client: &Client, ns: &str, name: &str) -> anyhow::Result<WriterReport> {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.task.await??;
        let valkey = cluster_client(client, ns, name).await?;
        let mut lost = Vec::new();
        for (key, value) in &report.acknowledged {
            let got: Option<String> = valkey.get(key).await?;
            if got.as_deref() != Some(value.as_str()) {
                lost.push(key.clone());
            }
        }
        println!(
            "writer: {} acknowledged writes, {} failed attempts, longest pause {:?}, {} lost",
            report.acknowledged.len(),
            report.failed_attempts,
            report.longest_pause,
            lost.len()
        );
        assert!(
            lost.is_empty(),
            "acknowledged writes lost: {:?}",
            &lost[..lost.len().min(10)]
        );
        assert!(report.acknowledged.len() > 10, "the writer made progress");
        Ok(report)
    }
}

#[tokio::test]
async fn repointing_the_image_rolls_every_member_to_9_1_2_without_losing_a_write()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-rollout").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "roll", &cfg, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let before: Vec<String> = member_pods(&client, &ns.name, "roll")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();

    let writer = Writer::start(&client, &ns.name, "roll").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    // The platform team repoints the allowlisted image: every cluster using it rolls.
    apply(&client, "image", image(&img, "9.1.2")).await?;
    wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Updating,
        Duration::from_secs(60),
    )
    .await?;
    let c = wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Active,
        Duration::from_secs(400),
    )
    .await?;
    println!(
        "rollout of 2 shards x 1 replica took {:?}",
        started.elapsed()
    );
    writer.finish(&client, &ns.name, "roll").await?;

    let nodes = c.status.unwrap().nodes;
    assert_eq!(nodes.len(), 4);
    assert!(
        nodes.iter().all(|n| n.version.as_deref() == Some("9.1.2")),
        "every member runs 9.1.2: {nodes:?}"
    );
    let after: Vec<String> = member_pods(&client, &ns.name, "roll")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        before.iter().all(|p| !after.contains(p)),
        "members were replaced, not mutated: {before:?} -> {after:?}"
    );

    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

#[tokio::test]
async fn a_rollout_to_an_image_that_cannot_be_pulled_stalls_safely_and_resumes_when_fixed()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-stall").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "stall", &cfg, 1, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "stall",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let writer = Writer::start(&client, &ns.name, "stall").await?;

    apply(&client, "image", image(&img, "9.9.9-does-not-exist")).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let message = wait_for(
        "the stall to be reported",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                let s = api.get("stall").await?.status.unwrap_or_default();
                let m = s.message.unwrap_or_default();
                if s.state == Some(ClusterState::Updating)
                    && (m.contains("ImagePullBackOff") || m.contains("ErrImagePull"))
                {
                    Ok(Some(m))
                } else {
                    bail!("{:?}: {m}", s.state)
                }
            }
        },
    )
    .await?;
    println!("stalled with: {message}");
    // Existing members keep serving while stalled.
    tokio::time::sleep(Duration::from_secs(5)).await;
    apply(&client, "image", image(&img, "9.1.2")).await?;
    let c = wait_state(
        &client,
        &ns.name,
        "stall",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    writer.finish(&client, &ns.name, "stall").await?;
    assert!(
        c.status
            .unwrap()
            .nodes
            .iter()
            .all(|n| n.version.as_deref() == Some("9.1.2"))
    );
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

#[tokio::test]
async fn replicas_scale_1_2_0_1_without_losing_a_write() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-replicas").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "reps", &cfg, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "reps",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let writer = Writer::start(&client, &ns.name, "reps").await?;
    for replicas in [2, 0, 1] {
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, "reps", &cfg, 2, replicas),
        )
        .await?;
        let c = wait_state(
            &client,
            &ns.name,
            "reps",
            ClusterState::Active,
            Duration::from_secs(240),
        )
        .await?;
        let members = c.status.unwrap().nodes.len();
        assert_eq!(
            members,
            2 * (1 + replicas as usize),
            "members with replicasPerShard {replicas}"
        );
        // Retired members' pods terminate gracefully after their ValkeyNode is deleted.
        wait_for(
            "one pod per member",
            Duration::from_secs(90),
            Duration::from_secs(1),
            || {
                let client = client.clone();
                let ns = ns.name.clone();
                async move {
                    let pods = member_pods(&client, &ns, "reps").await?.len();
                    if pods == members {
                        Ok(Some(()))
                    } else {
                        bail!("{pods} pods for {members} members")
                    }
                }
            },
        )
        .await?;
    }
    writer.finish(&client, &ns.name, "reps").await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
