//! Backups in a production cluster's weather (issue 29): while a backup's upload is certainly
//! under way (the object store held mid-upload by a proxy, `valkey_e2e::outage`), something
//! happens to it that happens in real clusters, and the backup ends as a user would want:
//!
//! - its Job's pod is evicted, as `kubectl drain` evicts it: the Job runs a new pod and the
//!   backup completes;
//! - the member it copies from is deleted: the copy goes on from the shard's primary and the
//!   backup completes, naming the member it came from;
//! - the operator's pod is deleted: the Job goes on without it and the new operator records
//!   the outcome;
//! - the Job's process is SIGKILLed (as an OOM kill ends it): the backup is Failed, saying what
//!   killed it, and is never listed as Completed; the next backup completes.
//!
//! Every completed backup's manifest is in the bucket and its key count is the cluster's.
//! Runs in `make e2e`'s serial group: it restarts the operator.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, EvictParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use valkey_e2e::backups::{
    ACCESS_KEY, BUCKET, SECRET_KEY, backup, bucket, expect_completed, location, store_address,
    wait_final, write_incompressible,
};
use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{
    TestNamespace, apply_yaml, client, delete_cluster_scoped, random_suffix, wait_for,
};
use valkey_e2e::outage::Outage;
use valkey_e2e::valkey::{OPERATOR_NAMESPACE, operator_pods, pod_ready, wait_state};
use valkey_e2e::workload::{apply, cluster, config, image};
use valkey_operator::api::backup::{BackupPhase, ValkeyBackup, ValkeyBackupLocation};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage};

const CLUSTER: &str = "weather";
/// The cluster's data: far more than the Job holds in memory and socket buffers (two 8 MiB
/// parts and a few MiB), so that when the upload is held after its first 2 MiB most of the
/// snapshot is still to be read from the member.
const DATA_MIB: usize = 64;
const HOLD_AFTER: u64 = 2 << 20;

/// One backup of the test's cluster through the held store: created, its Job's pod running
/// and the upload held; `during` is done to it; the store released; its end returned.
async fn backup_through(
    t: &Weather,
    name: &str,
    during: impl AsyncFnOnce(&ValkeyBackup, &Pod) -> anyhow::Result<()>,
) -> anyhow::Result<ValkeyBackup> {
    t.outage.hold_after(HOLD_AFTER);
    apply_yaml(
        &t.client,
        &backup(&t.ns, name, CLUSTER, &t.name).to_string(),
    )
    .await?;
    let backups: Api<ValkeyBackup> = Api::namespaced(t.client.clone(), &t.ns);
    wait_for(
        &format!("{name}'s upload to be held mid-way"),
        Duration::from_secs(120),
        Duration::from_millis(200),
        || async { Ok(t.outage.is_held().then_some(())) },
    )
    .await?;
    let running = backups.get(name).await?;
    let pod = job_pods(&t.client, &running)
        .await?
        .into_iter()
        .next()
        .context("the backup Job's pod")?;
    let result = during(&running, &pod).await;
    t.outage.restore();
    result?;
    let ended = wait_final(&backups, name, Duration::from_secs(180)).await?;
    let status = ended.status.clone().unwrap_or_default();
    println!(
        "{name}: {:?} {:?}: {:?}",
        status.phase, status.failure_cause, status.message
    );
    Ok(ended)
}

/// The backup's Job's pods, newest last.
async fn job_pods(client: &Client, backup: &ValkeyBackup) -> anyhow::Result<Vec<Pod>> {
    let job = backup
        .status
        .as_ref()
        .and_then(|s| s.job.clone())
        .context("status.job")?;
    let job = job.rsplit('/').next().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut listed = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await?
        .items;
    listed.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(listed)
}

/// Waits (while the store is held, so within its clients' 30 s request timeout) until `pod`
/// (this very pod, by uid) has stopped running: its container ended, or the pod is gone.
async fn ended(pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    let (name, uid) = (pod.name_any(), pod.metadata.uid.clone());
    wait_for(
        &format!("pod {name} to stop"),
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let Some(now) = pods.get_opt(&name).await? else {
                return Ok(Some(()));
            };
            let terminated = now
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
            Ok((now.metadata.uid != uid || terminated).then_some(()))
        },
    )
    .await
}

/// A completed backup: its manifest in the bucket, and all the cluster's keys in it.
async fn completed_with_every_key(t: &Weather, run: &ValkeyBackup) -> anyhow::Result<()> {
    expect_completed(run, &bucket(&t.client).await?).await?;
    let keys: i64 = run
        .status
        .iter()
        .flat_map(|s| s.shards.iter())
        .filter_map(|s| s.keys)
        .sum();
    ensure!(
        keys == t.keys,
        "{keys} keys backed up, the cluster has {}",
        t.keys
    );
    Ok(())
}

struct Weather {
    client: Client,
    ns: String,
    name: String,
    outage: Outage,
    keys: i64,
}

#[tokio::test]
async fn a_backup_outlives_drains_lost_members_and_operator_restarts_and_a_kill_says_so()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup-weather").await?;
    let suffix = random_suffix(4);
    let (img, cfg, name) = (
        format!("e2e-bkw-{suffix}-img"),
        format!("e2e-bkw-{suffix}-cfg"),
        format!("e2e-bkw-{suffix}"),
    );
    let outage = Outage::start(store_address(&client).await?).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
        "stringData": {"accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY}}))?;
    secrets.create(&PostParams::default(), &keys).await?;
    let mut held = location(&name, BUCKET, &name);
    held["spec"]["endpoint"] = json!(outage.endpoint());
    apply_yaml(&client, &held.to_string()).await?;
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    let t = Weather {
        client: client.clone(),
        ns: ns.name.clone(),
        name: name.clone(),
        outage,
        keys: (DATA_MIB * 256) as i64,
    };
    let result = async {
        apply(&client, &t.ns, cluster(&t.ns, CLUSTER, &cfg, 1, 1)).await?;
        wait_state(
            &client,
            &t.ns,
            CLUSTER,
            ClusterState::Active,
            Duration::from_secs(240),
        )
        .await?;
        write_incompressible(&client, &t.ns, CLUSTER, DATA_MIB).await?;
        drained(&t).await?;
        source_lost(&t).await?;
        operator_restarted(&t).await?;
        killed(&t).await
    }
    .await;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let _ = clusters.delete(CLUSTER, &Default::default()).await;
    let _ = secrets.delete(&name, &Default::default()).await;
    delete_cluster_scoped::<ValkeyBackupLocation>(&client, &name).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    result
}

/// `kubectl drain` evicts the Job's pod (the eviction API, as drain calls it): the Job runs a
/// new pod (the disruption is not counted as the copy's failure) and the backup completes.
async fn drained(t: &Weather) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), OPERATOR_NAMESPACE);
    let evicted = std::sync::Mutex::new(String::new());
    let run = backup_through(t, "drained", async |_, pod: &Pod| {
        pods.evict(&pod.name_any(), &EvictParams::default()).await?;
        println!("evicted {}", pod.name_any());
        *evicted.lock().unwrap() = pod.name_any();
        ended(&pods, pod).await
    })
    .await?;
    completed_with_every_key(t, &run).await?;
    let evicted = evicted.into_inner().unwrap();
    let succeeded: Vec<String> = job_pods(&t.client, &run)
        .await?
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
        .map(|p| p.name_any())
        .collect();
    println!("the Job's pod that completed the copy: {succeeded:?}");
    ensure!(
        !succeeded.is_empty() && !succeeded.contains(&evicted),
        "the copy was not completed by a replacement of {evicted}: {succeeded:?}"
    );
    Ok(())
}

/// The member being copied (the shard's replica) is deleted mid-copy: the copy starts over
/// from the shard's primary, and the status says so.
async fn source_lost(t: &Weather) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let clusters: Api<ValkeyCluster> = Api::namespaced(t.client.clone(), &t.ns);
    let run = backup_through(t, "source-lost", async |running: &ValkeyBackup, _: &Pod| {
        let status = running.status.clone().unwrap_or_default();
        let source = status.shards.first().context("the planned shard")?;
        ensure!(source.role == "replica", "planned from {source:?}");
        let cluster = clusters.get(CLUSTER).await?;
        let pod = cluster
            .status
            .iter()
            .flat_map(|s| s.nodes.iter())
            .find(|n| n.name == source.member)
            .and_then(|n| n.pod.clone())
            .context("the source member's pod")?;
        let old = pods.get(&pod).await?;
        pods.delete(&pod, &Default::default()).await?;
        println!("deleted {pod}, the pod of {}", source.member);
        ended(&pods, &old).await
    })
    .await?;
    completed_with_every_key(t, &run).await?;
    let shard = run.status.clone().unwrap_or_default().shards.remove(0);
    ensure!(shard.role == "primary", "copied from {shard:?}");
    wait_state(
        &t.client,
        &t.ns,
        CLUSTER,
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    Ok(())
}

/// The operator's pod is deleted while the Job copies: the Job goes on, and the operator that
/// comes back records its outcome.
async fn operator_restarted(t: &Weather) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), OPERATOR_NAMESPACE);
    let run = backup_through(t, "operator-restarted", async |_, _| {
        for pod in operator_pods(&t.client).await? {
            pods.delete(&pod.name_any(), &Default::default()).await?;
            println!("deleted the operator's pod {}", pod.name_any());
        }
        Ok(())
    })
    .await?;
    completed_with_every_key(t, &run).await?;
    restart_operator_settled(&t.client).await
}

/// A new operator pod is Ready (the backup above was recorded by it).
async fn restart_operator_settled(client: &Client) -> anyhow::Result<()> {
    wait_for(
        "a Ready operator pod",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let pods = operator_pods(client).await?;
            Ok(pods.iter().any(pod_ready).then_some(()))
        },
    )
    .await
}

/// The Job's process is SIGKILLed mid-upload (an OOM kill ends it the same way): Failed, the
/// message says it was killed, never Completed; the next backup completes.
async fn killed(t: &Weather) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), OPERATOR_NAMESPACE);
    let run = backup_through(t, "killed", async |_, pod: &Pod| {
        PodRef::find(OPERATOR_NAMESPACE, &pod.name_any())?.kill("run")?;
        println!("SIGKILLed the Job's process in {}", pod.name_any());
        ended(&pods, pod).await
    })
    .await?;
    let status = run.status.clone().unwrap_or_default();
    ensure!(status.phase == Some(BackupPhase::Failed), "{status:?}");
    ensure!(status.failure_cause.as_deref() == Some("job"), "{status:?}");
    let message = status.message.clone().unwrap_or_default();
    ensure!(message.contains("SIGKILL"), "{message}");
    let jobs: Api<Job> = Api::namespaced(t.client.clone(), OPERATOR_NAMESPACE);
    let job = status.job.clone().unwrap_or_default();
    let job = jobs.get(job.rsplit('/').next().unwrap_or_default()).await?;
    ensure!(
        job.status.and_then(|s| s.succeeded).unwrap_or(0) == 0,
        "the killed Job was retried to success behind the backup's back"
    );
    t.outage.restore();
    let backups: Api<ValkeyBackup> = Api::namespaced(t.client.clone(), &t.ns);
    apply_yaml(
        &t.client,
        &backup(&t.ns, "after-kill", CLUSTER, &t.name).to_string(),
    )
    .await?;
    let next = wait_final(&backups, "after-kill", Duration::from_secs(180)).await?;
    completed_with_every_key(t, &next).await?;
    let again = backups.get("killed").await?;
    ensure!(
        again.status.and_then(|s| s.phase) == Some(BackupPhase::Failed),
        "the killed backup changed phase"
    );
    Ok(())
}
