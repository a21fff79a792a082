//! The ValkeyBackup controller: once the cluster is Active, it picks the member each shard is
//! copied from (a replica in sync where the shard has one), starts a Job in the operator's
//! namespace that copies them into the location's bucket (`valkey-operator backup run`,
//! [`crate::backup::job`]), and when the Job ends writes its outcome into the backup's status.
//! The operator never touches the data or the object store itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, PodSpec};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api::backup::{
    ACCESS_KEY_ID_KEY, BackupPhase, BackupShardStatus, CA_BUNDLE_KEY, DEFAULT_REGION,
    SECRET_ACCESS_KEY_KEY, ValkeyBackup, ValkeyBackupLocation, ValkeyBackupStatus,
};
use crate::api::constants::{
    BACKUP_ACL_USERNAME, CLIENT_PORT, LABEL_APP_COMPONENT, LABEL_APP_MANAGED_BY, MANAGER,
};
use crate::api::{ClusterNodeStatus, ClusterState, Lifecycle, NodeRole, ValkeyCluster};
use crate::backup::job::{
    ENV_ACCESS_KEY, ENV_CA_FILE, ENV_PLAN, ENV_SECRET_KEY, ENV_VALKEY_PASSWORD, ENV_VALKEY_USER,
};
use crate::backup::{
    ClusterIdentity, JobOutcome, JobPlan, MemberAddress, ShardSource, StoreAddress, backup_path,
};
use crate::controller::jobs::{
    CA_MOUNT, JobImage, ca_volume, copy_job_spec, job_container, job_image, job_outcome,
    restricted_pod, secret_env, value_env,
};
use crate::controller::names::{BACKUP_COMPONENT, BACKUP_PASSWORD_KEY};
use crate::controller::{Context, Error, events, names, object_key};

/// Labels on a backup Job: which ValkeyBackup it serves (the Job lives in the operator's
/// namespace, so no owner reference can say it).
pub const LABEL_BACKUP_NAMESPACE: &str = "valkey.gomomento.com/backup-namespace";
pub const LABEL_BACKUP_NAME: &str = "valkey.gomomento.com/backup-name";

/// Runs until shutdown (only while this replica leads).
pub async fn run(ctx: Arc<Context>) {
    let selector =
        format!("{LABEL_APP_MANAGED_BY}={MANAGER},{LABEL_APP_COMPONENT}={BACKUP_COMPONENT}");
    crate::controller::jobs::controller_following_jobs::<ValkeyBackup>(
        &ctx,
        &selector,
        backup_of_job,
    )
    .shutdown_on_signal()
    .run(reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
    .await;
}

fn backup_of_job(job: Job) -> Option<ObjectRef<ValkeyBackup>> {
    let labels = job.labels();
    Some(ObjectRef::new(labels.get(LABEL_BACKUP_NAME)?).within(labels.get(LABEL_BACKUP_NAMESPACE)?))
}

fn error_policy(backup: Arc<ValkeyBackup>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_after_failure("backup", backup.as_ref(), error)
}

/// A backup reconcile ([`advance`]); a success resets its failure backoff.
async fn reconcile(backup: Arc<ValkeyBackup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = advance(backup.clone(), ctx.clone()).await;
    ctx.settle("backup", backup.as_ref(), &result);
    result
}

async fn advance(backup: Arc<ValkeyBackup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let status = backup.status.clone().unwrap_or_default();
    if status.phase.is_some_and(BackupPhase::is_final) {
        return Ok(Action::await_change());
    }
    ctx.confirm_leading().await?;
    let namespace = backup.namespace().unwrap_or_default();
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let job_name = job_name(&backup);
    if let Some(job) = jobs.get_opt(&job_name).await? {
        return follow_job(&ctx, &backup, &job).await;
    }
    let location = Api::<ValkeyBackupLocation>::all(ctx.client.clone())
        .get_opt(&backup.spec.location)
        .await?;
    let Some(location) = location else {
        let message = format!(
            "ValkeyBackupLocation {:?} does not exist; name one of `kubectl get valkeybackuplocations` (your platform team publishes them)",
            backup.spec.location
        );
        return finish_failed(&ctx, &backup, "location", message).await;
    };
    let clusters = Api::<ValkeyCluster>::namespaced(ctx.client.clone(), &namespace);
    let Some(cluster) = clusters.get_opt(&backup.spec.cluster).await? else {
        let message = format!(
            "ValkeyCluster {namespace}/{} does not exist; a backup names a cluster of its own namespace",
            backup.spec.cluster
        );
        return finish_failed(&ctx, &backup, "cluster", message).await;
    };
    let state = cluster.status.as_ref().and_then(|s| s.state);
    let plan = match state {
        Some(ClusterState::Active) => planned_sources(&ctx, &cluster).await?,
        other => Err(format!(
            "waiting for ValkeyCluster {namespace}/{} to be Active (it is {})",
            backup.spec.cluster,
            other.map_or("not reconciled yet".to_string(), |s| format!("{s:?}"))
        )),
    };
    let sources = match plan {
        Ok(sources) => sources,
        Err(waiting) => {
            write_status(&ctx, &backup, &pending(waiting)).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    start_job(&ctx, &backup, &cluster, &location, sources).await
}

fn pending(message: String) -> ValkeyBackupStatus {
    ValkeyBackupStatus {
        phase: Some(BackupPhase::Pending),
        message: Some(message),
        ..Default::default()
    }
}

/// The Job's name: the backup's uid (unique, and short enough for the `job-name` label).
pub fn job_name(backup: &ValkeyBackup) -> String {
    format!(
        "valkey-backup-{}",
        backup.metadata.uid.clone().unwrap_or_default()
    )
}

/// The members' pod IPs, then [`choose_sources`].
async fn planned_sources(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<Result<Vec<ShardSource>, String>, Error> {
    let (nodes, ips) = crate::controller::jobs::members_and_ips(ctx, cluster).await?;
    Ok(choose_sources(&nodes, &ips))
}

/// For each shard, the member to copy: an Active replica with the least lag (in sync is 0),
/// else the primary; with the primary's slots. `Err` says what is missing.
pub fn choose_sources(
    nodes: &[ClusterNodeStatus],
    pod_ips: &BTreeMap<String, String>,
) -> Result<Vec<ShardSource>, String> {
    let mut shards: BTreeMap<i32, Vec<&ClusterNodeStatus>> = BTreeMap::new();
    for node in nodes
        .iter()
        .filter(|n| n.lifecycle == Some(Lifecycle::Active))
    {
        shards.entry(node.shard).or_default().push(node);
    }
    if shards.is_empty() {
        return Err("the cluster lists no Active member".into());
    }
    let mut sources = Vec::new();
    for (shard, members) in shards {
        let primary = members.iter().find(|n| n.role == Some(NodeRole::Primary));
        let Some(primary) = primary else {
            return Err(format!("shard {shard} has no primary right now"));
        };
        let address = |n: &ClusterNodeStatus| {
            n.pod
                .as_ref()
                .and_then(|pod| pod_ips.get(pod))
                .map(|ip| format!("{ip}:{CLIENT_PORT}"))
        };
        let replica = members
            .iter()
            .filter(|n| n.role == Some(NodeRole::Replica) && address(n).is_some())
            .min_by_key(|n| (n.lag_bytes.unwrap_or(i64::MAX), n.name.clone()));
        let (member, role) = match replica {
            Some(replica) => (*replica, "replica"),
            None => (*primary, "primary"),
        };
        // Should the chosen member drop out mid-copy: the primary, then the other replicas.
        let mut others: Vec<&&ClusterNodeStatus> =
            members.iter().filter(|n| n.name != member.name).collect();
        others.sort_by_key(|n| (n.role != Some(NodeRole::Primary), n.name.clone()));
        let fallbacks = others
            .into_iter()
            .filter_map(|n| {
                Some(MemberAddress {
                    member: n.name.clone(),
                    role: if n.role == Some(NodeRole::Primary) {
                        "primary"
                    } else {
                        "replica"
                    }
                    .into(),
                    address: address(n)?,
                })
            })
            .collect();
        let Some(address) = address(member) else {
            return Err(format!(
                "member {} of shard {shard} has no pod IP yet",
                member.name
            ));
        };
        let slots = primary
            .slots
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect();
        sources.push(ShardSource {
            index: u32::try_from(shard).unwrap_or_default(),
            slots,
            member: member.name.clone(),
            role: role.into(),
            address,
            fallbacks,
        });
    }
    Ok(sources)
}

async fn start_job(
    ctx: &Context,
    backup: &ValkeyBackup,
    cluster: &ValkeyCluster,
    location: &ValkeyBackupLocation,
    shards: Vec<ShardSource>,
) -> Result<Action, Error> {
    let namespace = backup.namespace().unwrap_or_default();
    let uid = backup.metadata.uid.clone().unwrap_or_default();
    let path = backup_path(
        location.spec.prefix.as_deref().unwrap_or_default(),
        &namespace,
        &cluster.name_any(),
        &backup.name_any(),
        &uid,
    );
    let plan = JobPlan {
        location: StoreAddress {
            endpoint: location.spec.endpoint.clone(),
            bucket: location.spec.bucket.clone(),
            region: location
                .spec
                .region
                .clone()
                .unwrap_or_else(|| DEFAULT_REGION.into()),
        },
        path: path.clone(),
        cluster: ClusterIdentity {
            namespace: namespace.clone(),
            name: cluster.name_any(),
            uid: cluster.metadata.uid.clone().unwrap_or_default(),
        },
        backup: backup.name_any(),
        backup_uid: uid,
        shards: shards.clone(),
        prune: super::backup_schedule::retention_plan(ctx, backup, cluster, location).await?,
        tls: None,
    };
    let plan = match member_tls(ctx, cluster).await? {
        Ok(tls) => JobPlan { tls, ..plan },
        Err(waiting) => {
            write_status(ctx, backup, &pending(waiting)).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    let image = job_image(ctx).await?;
    let job = build_job(backup, location, &plan, &image, &ctx.operator_namespace);
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    jobs.create(&PostParams::default(), &job).await?;
    let status = ValkeyBackupStatus {
        phase: Some(BackupPhase::Running),
        message: Some(format!(
            "copying {} shard(s) to s3://{}/{path}/",
            shards.len(),
            plan.location.bucket
        )),
        job: Some(format!("{}/{}", ctx.operator_namespace, job_name(backup))),
        started_at: Some(crate::time::rfc3339(crate::time::now_seconds())),
        path: Some(format!("s3://{}/{path}/", plan.location.bucket)),
        shards: shards.iter().map(shard_status).collect(),
        ..Default::default()
    };
    write_status(ctx, backup, &status).await?;
    info!(backup = %object_key(backup), job = %job_name(backup), "backup started");
    events::publish(
        ctx,
        backup,
        EventType::Normal,
        events::RECONCILE,
        "BackupStarted",
        status.message.as_deref().unwrap_or_default(),
    )
    .await;
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// A TLS cluster's members as the Job verifies them: the CA bundle they serve (the operator's
/// copy of their certificate) and the cluster's name. `Err`: what the backup waits for.
pub(crate) async fn member_tls(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<Result<Option<crate::backup::MemberTls>, String>, Error> {
    if cluster.spec.tls.is_none() {
        return Ok(Ok(None));
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let Some(served) = super::cluster::tls::members_copy(ctx, cluster).await? else {
        return Ok(Err(format!(
            "waiting for the members' certificate copy {namespace}/{} (the cluster's TLS Secret is not usable yet)",
            names::tls_secret(&cluster.name_any())
        )));
    };
    let server_name = served
        .driver
        .server_name
        .clone()
        .unwrap_or_else(|| names::cluster_hostname(&cluster.name_any(), &namespace));
    Ok(Ok(Some(crate::backup::MemberTls {
        ca_pem: served.driver.ca_pem.clone(),
        server_name,
    })))
}

fn shard_status(source: &ShardSource) -> BackupShardStatus {
    BackupShardStatus {
        index: i32::try_from(source.index).unwrap_or_default(),
        slots: source.slots.clone(),
        member: source.member.clone(),
        role: source.role.clone(),
        ..Default::default()
    }
}

/// The Job copying `plan`: one pod, never restarted (a failure is the backup's outcome; the
/// next scheduled run tries again), restricted Pod Security, no Kubernetes credentials, its
/// keys from Secret references in the operator's namespace.
pub fn build_job(
    backup: &ValkeyBackup,
    location: &ValkeyBackupLocation,
    plan: &JobPlan,
    image: &JobImage,
    operator_namespace: &str,
) -> Job {
    let labels = BTreeMap::from([
        (LABEL_APP_MANAGED_BY.to_string(), MANAGER.to_string()),
        (
            LABEL_APP_COMPONENT.to_string(),
            BACKUP_COMPONENT.to_string(),
        ),
        (
            LABEL_BACKUP_NAMESPACE.to_string(),
            backup.namespace().unwrap_or_default(),
        ),
        (LABEL_BACKUP_NAME.to_string(), backup.name_any()),
    ]);
    let (mut env, volumes, mounts) = (job_env(location, plan), Vec::new(), Vec::new());
    let (volumes, mounts) = match &location.spec.ca_secret {
        Some(ca) => {
            env.push(value_env(
                ENV_CA_FILE,
                format!("{CA_MOUNT}/{CA_BUNDLE_KEY}"),
            ));
            ca_volume(&ca.name)
        }
        None => (volumes, mounts),
    };
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(backup)),
            namespace: Some(operator_namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(copy_job_spec(
            labels,
            PodSpec {
                image_pull_secrets: Some(image.pull_secrets.clone()),
                ..restricted_pod(job_container("run", &image.image, env, mounts), volumes)
            },
        )),
        ..Default::default()
    }
}

/// The plan as a value; the bucket's keys and the backup user's password by reference.
fn job_env(location: &ValkeyBackupLocation, plan: &JobPlan) -> Vec<EnvVar> {
    let credentials = &location.spec.credentials_secret.name;
    vec![
        value_env(
            ENV_PLAN,
            serde_json::to_string(plan).expect("a plan serializes"),
        ),
        secret_env(ENV_ACCESS_KEY, credentials, ACCESS_KEY_ID_KEY),
        secret_env(ENV_SECRET_KEY, credentials, SECRET_ACCESS_KEY_KEY),
        value_env(ENV_VALKEY_USER, BACKUP_ACL_USERNAME.into()),
        secret_env(
            ENV_VALKEY_PASSWORD,
            &names::credentials_secret(&plan.cluster.namespace, &plan.cluster.name),
            BACKUP_PASSWORD_KEY,
        ),
    ]
}

/// A running Job: nothing to do until it ends; then its outcome becomes the status.
async fn follow_job(ctx: &Context, backup: &ValkeyBackup, job: &Job) -> Result<Action, Error> {
    let Some(outcome) = job_outcome::<JobOutcome>(ctx, job).await? else {
        return Ok(Action::requeue(crate::controller::jobs::RUNNING_JOB_LOOK));
    };
    let status = backup.status.clone().unwrap_or_default();
    let outcome_kept = outcome.clone().ok();
    let finished = match outcome {
        Ok(outcome) => finished_status(status, outcome),
        Err(why) => failed_status(status, "job", why),
    };
    write_status(ctx, backup, &finished).await?;
    if let Some(JobOutcome::Completed(summary)) = &outcome_kept {
        super::backup_schedule::forget_pruned(ctx, backup, &summary.pruned).await?;
    }
    let completed = finished.phase == Some(BackupPhase::Completed);
    let (type_, reason) = if completed {
        (EventType::Normal, "BackupCompleted")
    } else {
        (EventType::Warning, "BackupFailed")
    };
    info!(backup = %object_key(backup), phase = ?finished.phase, "backup ended");
    events::publish(
        ctx,
        backup,
        type_,
        events::RECONCILE,
        reason,
        finished.message.as_deref().unwrap_or_default(),
    )
    .await;
    Ok(Action::await_change())
}

/// The status once the Job's outcome is known.
pub fn finished_status(mut status: ValkeyBackupStatus, outcome: JobOutcome) -> ValkeyBackupStatus {
    match outcome {
        JobOutcome::Completed(summary) => {
            let total: u64 = summary.shards.iter().map(|s| s.bytes).sum();
            for figures in &summary.shards {
                if let Some(shard) = status
                    .shards
                    .iter_mut()
                    .find(|s| s.index == figures.index as i32)
                {
                    shard.bytes = Some(figures.bytes as i64);
                    shard.keys = figures.keys.map(|k| k as i64);
                    shard.sha256 = figures.sha256.clone();
                    if let Some(member) = &figures.member {
                        shard.member = member.clone();
                        shard.role = figures.role.clone().unwrap_or_default();
                    }
                }
            }
            let keys: u64 = summary.shards.iter().filter_map(|s| s.keys).sum();
            status.phase = Some(BackupPhase::Completed);
            status.message = Some(format!(
                "{} shard(s), {keys} keys, {} in {}",
                summary.shards.len(),
                human_bytes(total),
                status.path.clone().unwrap_or_default()
            ));
            status.failure_cause = None;
            status.completed_at = Some(summary.completed_at);
            status.started_at = Some(summary.started_at);
            status.total_bytes = Some(total as i64);
            status.size = Some(human_bytes(total));
            status.valkey_version = summary.valkey_version;
            status
        }
        JobOutcome::Failed(failure) => {
            let cause = serde_json::to_value(failure.cause)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            failed_status(status, &cause, failure.message)
        }
    }
}

fn failed_status(
    mut status: ValkeyBackupStatus,
    cause: &str,
    message: String,
) -> ValkeyBackupStatus {
    status.phase = Some(BackupPhase::Failed);
    status.failure_cause = Some(cause.into());
    status.message = Some(message);
    status.completed_at = Some(crate::time::rfc3339(crate::time::now_seconds()));
    status
}

async fn finish_failed(
    ctx: &Context,
    backup: &ValkeyBackup,
    cause: &str,
    message: String,
) -> Result<Action, Error> {
    let status = failed_status(
        backup.status.clone().unwrap_or_default(),
        cause,
        message.clone(),
    );
    write_status(ctx, backup, &status).await?;
    events::publish(
        ctx,
        backup,
        EventType::Warning,
        events::RECONCILE,
        "BackupFailed",
        &message,
    )
    .await;
    Ok(Action::await_change())
}

/// `12.3 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

async fn write_status(
    ctx: &Context,
    backup: &ValkeyBackup,
    status: &ValkeyBackupStatus,
) -> Result<(), Error> {
    if backup.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api = Api::<ValkeyBackup>::namespaced(
        ctx.client.clone(),
        &backup.namespace().unwrap_or_default(),
    );
    // The whole status each time (a merge patch would keep fields the new one drops).
    let patch = json!({"status": status});
    api.patch_status(
        &backup.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(
        name: &str,
        shard: i32,
        role: NodeRole,
        lag: Option<i64>,
        slots: Option<&str>,
    ) -> ClusterNodeStatus {
        ClusterNodeStatus {
            name: name.into(),
            pod: Some(format!("{name}-pod")),
            shard,
            role: Some(role),
            lifecycle: Some(Lifecycle::Active),
            slots: slots.map(str::to_string),
            lag_bytes: lag,
            ..Default::default()
        }
    }

    fn ips(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("{n}-pod"), format!("10.0.0.{i}")))
            .collect()
    }

    #[test]
    fn each_shard_is_copied_from_its_most_caught_up_replica_with_the_primarys_slots() {
        let nodes = [
            member("c-0-0", 0, NodeRole::Primary, None, Some("0-8191")),
            member("c-0-1", 0, NodeRole::Replica, Some(120), None),
            member("c-0-2", 0, NodeRole::Replica, Some(0), None),
            member(
                "c-1-0",
                1,
                NodeRole::Primary,
                None,
                Some("8192-16000,16001-16383"),
            ),
        ];
        let sources = choose_sources(&nodes, &ips(&["c-0-0", "c-0-1", "c-0-2", "c-1-0"])).unwrap();
        assert_eq!(sources.len(), 2);
        assert_eq!(
            (sources[0].member.as_str(), sources[0].role.as_str()),
            ("c-0-2", "replica")
        );
        assert_eq!(sources[0].slots, vec!["0-8191"]);
        assert_eq!(sources[0].address, "10.0.0.2:6379");
        assert_eq!(
            (sources[1].member.as_str(), sources[1].role.as_str()),
            ("c-1-0", "primary")
        );
        assert_eq!(sources[1].slots, vec!["8192-16000", "16001-16383"]);
        let fallbacks: Vec<(&str, &str, &str)> = sources[0]
            .fallbacks
            .iter()
            .map(|f| (f.member.as_str(), f.role.as_str(), f.address.as_str()))
            .collect();
        assert_eq!(
            fallbacks,
            [
                ("c-0-0", "primary", "10.0.0.0:6379"),
                ("c-0-1", "replica", "10.0.0.1:6379")
            ]
        );
        assert!(sources[1].fallbacks.is_empty());
    }

    #[test]
    fn a_copy_moves_on_to_the_next_member_when_one_drops_out_and_comes_round_again() {
        let nodes = [
            member("c-0-0", 0, NodeRole::Primary, None, Some("0-16383")),
            member("c-0-1", 0, NodeRole::Replica, Some(0), None),
        ];
        let source = &choose_sources(&nodes, &ips(&["c-0-0", "c-0-1"])).unwrap()[0];
        let tried: Vec<(String, String)> = (1..=4)
            .map(|a| source.for_attempt(a))
            .map(|s| (s.member, s.address))
            .collect();
        let at = |m: &str, a: &str| (m.to_string(), a.to_string());
        assert_eq!(
            tried,
            [
                at("c-0-1", "10.0.0.1:6379"),
                at("c-0-0", "10.0.0.0:6379"),
                at("c-0-1", "10.0.0.1:6379"),
                at("c-0-0", "10.0.0.0:6379")
            ]
        );
        assert_eq!(source.for_attempt(2).slots, source.slots);
        assert_eq!(source.for_attempt(2).role, "primary");
    }

    #[test]
    fn a_replica_without_a_pod_ip_is_passed_over_and_a_shard_without_primary_waits() {
        let nodes = [
            member("c-0-0", 0, NodeRole::Primary, None, Some("0-16383")),
            member("c-0-1", 0, NodeRole::Replica, Some(0), None),
        ];
        let sources = choose_sources(&nodes, &ips(&["c-0-0"])).unwrap();
        assert_eq!(sources[0].member, "c-0-0");
        let no_primary = [member("c-0-1", 0, NodeRole::Replica, Some(0), None)];
        let err = choose_sources(&no_primary, &ips(&["c-0-1"])).unwrap_err();
        assert!(err.contains("shard 0 has no primary"), "{err}");
        assert!(choose_sources(&[], &ips(&[])).is_err());
    }

    /// A running one-shard backup planned from replica c-0-1, and the Job's outcome with
    /// `figures` for that shard.
    fn one_shard(figures: crate::backup::ShardFigures) -> (ValkeyBackupStatus, JobOutcome) {
        let status = ValkeyBackupStatus {
            phase: Some(BackupPhase::Running),
            path: Some("s3://b/p/".into()),
            shards: vec![BackupShardStatus {
                index: 0,
                member: "c-0-1".into(),
                role: "replica".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let outcome = JobOutcome::Completed(crate::backup::CopySummary {
            started_at: "2026-12-05T18:00:00Z".into(),
            completed_at: "2026-12-05T18:00:05Z".into(),
            valkey_version: Some("9.0.1".into()),
            shards: vec![figures],
            pruned: vec![],
        });
        (status, outcome)
    }

    fn figures(member: Option<&str>, role: Option<&str>) -> crate::backup::ShardFigures {
        crate::backup::ShardFigures {
            index: 0,
            bytes: 3 * 1024 * 1024,
            keys: Some(100_000),
            sha256: Some("ab".into()),
            member: member.map(str::to_string),
            role: role.map(str::to_string),
        }
    }

    #[test]
    fn a_copy_from_a_fallback_names_the_member_it_came_from() {
        let (status, outcome) = one_shard(figures(Some("c-0-0"), Some("primary")));
        let done = finished_status(status, outcome);
        let shard = &done.shards[0];
        assert_eq!(
            (shard.member.as_str(), shard.role.as_str()),
            ("c-0-0", "primary")
        );
    }

    #[test]
    fn a_completed_outcome_fills_the_shards_and_the_size() {
        let (status, outcome) = one_shard(figures(None, None));
        let done = finished_status(status, outcome);
        assert_eq!(done.shards[0].member, "c-0-1");
        assert_eq!(done.phase, Some(BackupPhase::Completed));
        assert_eq!(done.size.as_deref(), Some("3.0 MiB"));
        assert_eq!(done.shards[0].keys, Some(100_000));
        assert_eq!(
            done.message.as_deref(),
            Some("1 shard(s), 100000 keys, 3.0 MiB in s3://b/p/")
        );
        let failed = finished_status(
            done,
            JobOutcome::Failed(crate::backup::Failure::new(
                crate::backup::FailureCause::Credentials,
                "refused",
            )),
        );
        assert_eq!(failed.phase, Some(BackupPhase::Failed));
        assert_eq!(failed.failure_cause.as_deref(), Some("credentials"));
    }

    #[test]
    fn the_job_runs_restricted_with_its_keys_from_secret_references() {
        let mut backup = ValkeyBackup::new(
            "nightly",
            crate::api::backup::ValkeyBackupSpec {
                cluster: "cart".into(),
                location: "main".into(),
            },
        );
        backup.metadata.namespace = Some("shop".into());
        backup.metadata.uid = Some("0123-4567".into());
        let location = ValkeyBackupLocation::new(
            "main",
            crate::api::backup::ValkeyBackupLocationSpec {
                endpoint: "http://s3:8333".into(),
                bucket: "bucket".into(),
                prefix: None,
                region: None,
                credentials_secret: crate::api::backup::SecretName {
                    name: "s3-keys".into(),
                },
                ca_secret: None,
                cross_namespace_restores: Vec::new(),
            },
        );
        let plan = JobPlan {
            location: StoreAddress {
                endpoint: "http://s3:8333".into(),
                bucket: "bucket".into(),
                region: "us-east-1".into(),
            },
            path: "shop/cart/nightly-0123-456".into(),
            cluster: ClusterIdentity {
                namespace: "shop".into(),
                name: "cart".into(),
                uid: "u".into(),
            },
            backup: "nightly".into(),
            backup_uid: "0123-4567".into(),
            shards: vec![],
            prune: vec![],
            tls: None,
        };
        let image = JobImage {
            image: "op@sha256:1".into(),
            pull_secrets: vec![],
        };
        let job = serde_json::to_value(build_job(
            &backup,
            &location,
            &plan,
            &image,
            "valkey-operator-system",
        ))
        .unwrap();
        assert_eq!(job["metadata"]["name"], "valkey-backup-0123-4567");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let secret_of = |name: &str| {
            env.iter().find(|e| e["name"] == name).unwrap()["valueFrom"]["secretKeyRef"].clone()
        };
        assert_eq!(secret_of(ENV_SECRET_KEY)["name"], "s3-keys");
        assert_eq!(secret_of(ENV_VALKEY_PASSWORD)["key"], BACKUP_PASSWORD_KEY);
        let text = job.to_string();
        assert!(
            !text.contains("password\":\""),
            "no secret value in the Job: {text}"
        );
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }
}
