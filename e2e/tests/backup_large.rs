//! A 1 GiB shard's backup on the local cluster (issue 29, `make chaos`: slow, not every
//! `make test`): the Job completes under its 128 MiB memory limit (a Job over it would be
//! OOM-killed and the backup Failed) and the operator's own RSS stays within 5 MiB of what it
//! was before, since the snapshot streams from the member to the object store through the Job,
//! never through the operator. Reports the Job's peak RSS, the operator's, and the throughput.
#![cfg(all(feature = "e2e", feature = "chaos"))]

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use rand::RngCore;
use serde_json::json;

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{
    TestNamespace, apply_yaml, client, delete_cluster_scoped, random_suffix, wait_for,
};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{apply, cluster, cluster_client, config, image};
use valkey_operator::api::backup::{BackupPhase, ValkeyBackup};
use valkey_operator::api::{ClusterState, ValkeyConfig, ValkeyImage};

const OPERATOR_NAMESPACE: &str = "valkey-operator-system";
const GIB: usize = 1 << 30;
const VALUE: usize = 1024;

/// Resident memory of a host process (from /proc), in bytes; None once it is gone.
fn rss(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The operator's process on its node (one replica on the local cluster).
async fn operator_pid(client: &kube::Client) -> anyhow::Result<i32> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?
        .items
        .into_iter()
        .find(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/component"))
                != Some(&"backup".to_string())
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .context("the operator's pod")?;
    PodRef::find(OPERATOR_NAMESPACE, &pod.metadata.name.unwrap_or_default())?.pid("operator")
}

/// Writes about 1 GiB of values that do not compress, in pipelined batches.
async fn fill(valkey: &fred::clients::Client) -> anyhow::Result<()> {
    let mut pool = vec![0u8; 1 << 20];
    rand::rng().fill_bytes(&mut pool);
    let keys = GIB / VALUE;
    for start in (0..keys).step_by(2048) {
        let batch = (start..(start + 2048).min(keys)).map(|i| {
            let at = (i * 4099) % (pool.len() - VALUE);
            let value = pool[at..at + VALUE].to_vec();
            valkey.set::<(), _, _>(format!("big:{i}"), value, None, None, false)
        });
        futures::future::try_join_all(batch).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_one_gib_shard_is_backed_up_under_the_jobs_limit() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup-large").await?;
    let suffix = random_suffix(4);
    let (img, cfg) = (
        format!("e2e-bkl-{suffix}-img"),
        format!("e2e-bkl-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    let mut roomy = config(&cfg, &img);
    roomy["spec"]["resources"] = json!({"cpu": "500m", "memory": "3Gi"});
    apply(&client, "config", roomy).await?;
    let result = async {
        apply(&client, &ns.name, cluster(&ns.name, "big", &cfg, 1, 0)).await?;
        wait_state(
            &client,
            &ns.name,
            "big",
            ClusterState::Active,
            Duration::from_secs(180),
        )
        .await?;
        let valkey = cluster_client(&client, &ns.name, "big").await?;
        let started = Instant::now();
        fill(&valkey).await?;
        println!("1 GiB written in {:.1} s", started.elapsed().as_secs_f64());
        let _ = valkey.quit().await;

        let operator = operator_pid(&client).await?;
        let mut before = 0;
        for _ in 0..20 {
            before = before.max(rss(operator).context("the operator's RSS")?);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), &ns.name);
        let started = Instant::now();
        apply_yaml(
            &client,
            &json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyBackup",
                    "metadata": {"name": "whole", "namespace": ns.name},
                    "spec": {"cluster": "big", "location": "local"}})
            .to_string(),
        )
        .await?;
        let (mut operator_peak, mut job_peak) = (before, 0u64);
        let done = loop {
            ensure!(
                started.elapsed() < Duration::from_secs(600),
                "the backup did not end within 10 minutes"
            );
            operator_peak = operator_peak.max(rss(operator).context("the operator's RSS")?);
            if let Some(pid) = job_pid(&client).await {
                job_peak = job_peak.max(rss(pid).unwrap_or(0));
            }
            let b = backups.get("whole").await?;
            if b.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(BackupPhase::is_final)
            {
                break b;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let status = done.status.clone().unwrap_or_default();
        let seconds = started.elapsed().as_secs_f64();
        let bytes = status.total_bytes.unwrap_or(0).max(0) as u64;
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "backup {:?}: {:.0} MB in {seconds:.1} s from apply to final ({:.0} MB/s); \
             Job peak RSS {:.1} MiB (limit 128 MiB); operator RSS {:.1} MiB before, \
             {:.1} MiB at most during (+{:.1} MiB)",
            status.phase,
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / seconds,
            mib(job_peak),
            mib(before),
            mib(operator_peak),
            mib(operator_peak - before)
        );
        ensure!(status.phase == Some(BackupPhase::Completed), "{status:?}");
        ensure!(
            bytes as usize >= GIB,
            "a snapshot of at least 1 GiB: {bytes}"
        );
        ensure!(job_peak > 0, "the Job's process was never seen");
        ensure!(
            operator_peak - before <= 5 << 20,
            "the operator's RSS grew by {:.1} MiB",
            mib(operator_peak - before)
        );
        Ok(())
    }
    .await;
    let clusters: Api<valkey_operator::api::ValkeyCluster> =
        Api::namespaced(client.clone(), &ns.name);
    let _ = clusters.delete("big", &Default::default()).await;
    let _ = wait_for(
        "the cluster's members to go",
        Duration::from_secs(120),
        Duration::from_secs(2),
        || async {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
            Ok(pods
                .list(&ListParams::default())
                .await?
                .items
                .is_empty()
                .then_some(()))
        },
    )
    .await;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    result
}

/// The running backup Job's process, if its container has started.
async fn job_pid(client: &kube::Client) -> Option<i32> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=backup"))
        .await
        .ok()?
        .items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))?;
    // The container is named after the Job's action (`valkey-operator backup run`).
    PodRef::find(OPERATOR_NAMESPACE, &pod.metadata.name?)
        .ok()?
        .pid("run")
        .ok()
}
