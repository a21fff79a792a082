//! The restore controller: a ValkeyCluster created with `spec.restoreFrom` forms empty (the
//! cluster controller reports it `Restoring`, not Active); then this controller starts a Job in
//! the operator's namespace (`valkey-operator backup restore`, [`crate::backup::restore_job`])
//! that replays the backup's keys into the primaries, and writes `status.restore` from the Job's
//! outcome. A failed Job is tried again, three Jobs in all; after that the cluster is Failed.
//! The operator never touches the data or the object store itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::backup::{
    ACCESS_KEY_ID_KEY, CA_BUNDLE_KEY, DEFAULT_REGION, RestorePhase, RestoreShardStatus,
    RestoreStatus, SECRET_ACCESS_KEY_KEY, ValkeyBackup, ValkeyBackupLocation,
};
use crate::api::constants::{
    CLIENT_PORT, LABEL_APP_COMPONENT, LABEL_APP_MANAGED_BY, MANAGER, RESTORE_ACL_USERNAME,
};
use crate::api::{ClusterNodeStatus, ClusterState, Lifecycle, NodeRole, ValkeyCluster};
use crate::backup::job::{
    ENV_ACCESS_KEY, ENV_CA_FILE, ENV_SECRET_KEY, ENV_VALKEY_PASSWORD, ENV_VALKEY_USER,
};
use crate::backup::restore::{
    RestoreOutcome, RestorePlan, RestoreTarget, find_source, source_of, source_problem,
};
use crate::backup::restore_job::ENV_RESTORE_PLAN;
use crate::backup::{ClusterIdentity, StoreAddress};
use crate::controller::jobs::{
    CA_MOUNT, ca_volume, copy_job_spec, job_container, job_image, job_outcome, restricted_pod,
    secret_env, value_env,
};
use crate::controller::names::BACKUP_COMPONENT;
use crate::controller::names::RESTORE_PASSWORD_KEY;
use crate::controller::{Context, Error, events, names, object_key};

/// Labels on a restore Job: the cluster it restores into (the Job lives in the operator's
/// namespace, so no owner reference can say it). Its component is the backup Jobs' (the
/// members' NetworkPolicy lets those reach the client port).
pub const LABEL_RESTORE_NAMESPACE: &str = "valkey.gomomento.com/restore-namespace";
pub const LABEL_RESTORE_CLUSTER: &str = "valkey.gomomento.com/restore-cluster";
use crate::api::backup::MAX_RESTORE_ATTEMPTS as MAX_ATTEMPTS;
/// The field manager of `status.restore` (the cluster controller owns the rest of the status).
const RESTORE_MANAGER: &str = "valkey-operator-restore";

/// Runs until shutdown (only while this replica leads).
pub async fn run(ctx: Arc<Context>) {
    let selector = format!(
        "{LABEL_APP_MANAGED_BY}={MANAGER},{LABEL_APP_COMPONENT}={BACKUP_COMPONENT},{LABEL_RESTORE_CLUSTER}"
    );
    // A second store of every cluster (the cluster controller keeps its own): trimmed likewise.
    crate::controller::jobs::controller_following_jobs::<ValkeyCluster>(
        &ctx,
        &selector,
        cluster_of_job,
    )
    .shutdown_on_signal()
    .run(reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
    .await;
}

fn cluster_of_job(job: Job) -> Option<ObjectRef<ValkeyCluster>> {
    let labels = job.labels();
    Some(
        ObjectRef::new(labels.get(LABEL_RESTORE_CLUSTER)?)
            .within(labels.get(LABEL_RESTORE_NAMESPACE)?),
    )
}

fn error_policy(cluster: Arc<ValkeyCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_after_failure("restore", cluster.as_ref(), error)
}

fn restore_status(cluster: &ValkeyCluster) -> RestoreStatus {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.restore.clone())
        .unwrap_or_default()
}

/// A restore reconcile ([`advance`]); a success resets its failure backoff.
async fn reconcile(cluster: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = advance(cluster.clone(), ctx.clone()).await;
    ctx.settle("restore", cluster.as_ref(), &result);
    result
}

async fn advance(cluster: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(from) = cluster.spec.restore_from.clone() else {
        return Ok(Action::await_change());
    };
    let restore = restore_status(&cluster);
    if !cluster.restore_outstanding() || cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.confirm_leading().await?;
    let attempt = restore.attempts.unwrap_or(0);
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    if attempt > 0 && restore.phase == Some(RestorePhase::Running) {
        return match jobs.get_opt(&job_name(&cluster, attempt)).await? {
            Some(job) => follow_job(&ctx, &cluster, &job, restore).await,
            None => {
                let why = "the restore Job disappeared before it ended".to_string();
                record_failure(&ctx, &cluster, restore, "job", why).await
            }
        };
    }
    let (backup_namespace, backup_name) = source_of(&cluster, &from);
    let (backup, location) = find_source(&ctx.client, &backup_namespace, &backup_name).await?;
    let from_text = format!("{backup_namespace}/{backup_name}");
    let problem = source_problem(
        &cluster.namespace().unwrap_or_default(),
        cluster.spec.shards,
        (&backup_namespace, &backup_name),
        backup.as_ref(),
        location.as_ref(),
    );
    let (Some(backup), Some(location), None) = (backup, location, problem.clone()) else {
        let message = problem.unwrap_or_default();
        let status = RestoreStatus {
            from: Some(from_text),
            message: Some(message),
            ..restore
        };
        write_status(&ctx, &cluster, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    if restore.phase == Some(RestorePhase::Failed) {
        // The next Job after a pause (the cause may pass: a member restarting, the store).
        let since = restore
            .completed_at
            .as_deref()
            .and_then(crate::time::unix_seconds);
        let wait = since.map_or(0, |at| 20 - (crate::time::now_seconds() - at));
        if wait > 0 {
            return Ok(Action::requeue(Duration::from_secs(wait.unsigned_abs())));
        }
    }
    let formed = cluster.status.as_ref().and_then(|s| s.state) == Some(ClusterState::Restoring);
    let targets = if formed {
        planned_targets(&ctx, &cluster).await?
    } else {
        Err("waiting for the cluster to form (it is not Restoring yet)".to_string())
    };
    let targets = match targets {
        Ok(targets) => targets,
        Err(waiting) => {
            let status = RestoreStatus {
                phase: restore.phase.or(Some(RestorePhase::Pending)),
                from: Some(from_text),
                message: Some(waiting),
                ..restore
            };
            write_status(&ctx, &cluster, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    };
    start_job(&ctx, &cluster, (&backup, &location), targets, restore).await
}

/// The Job of attempt `attempt` (1, 2, 3): the cluster's uid and the attempt.
pub fn job_name(cluster: &ValkeyCluster, attempt: i32) -> String {
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    format!("valkey-restore-{uid}-{attempt}")
}

/// The primaries' pod IPs, then [`restore_targets`].
async fn planned_targets(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<Result<Vec<RestoreTarget>, String>, Error> {
    let (nodes, ips) = crate::controller::jobs::members_and_ips(ctx, cluster).await?;
    Ok(restore_targets(&nodes, &ips))
}

/// Every Active primary with slots, with its address. `Err` says what is missing.
pub fn restore_targets(
    nodes: &[ClusterNodeStatus],
    pod_ips: &BTreeMap<String, String>,
) -> Result<Vec<RestoreTarget>, String> {
    let mut targets = Vec::new();
    for node in nodes
        .iter()
        .filter(|n| n.lifecycle == Some(Lifecycle::Active) && n.role == Some(NodeRole::Primary))
    {
        let slots: Vec<String> = node
            .slots
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect();
        if slots.is_empty() {
            continue;
        }
        let Some(ip) = node.pod.as_ref().and_then(|pod| pod_ips.get(pod)) else {
            return Err(format!("primary {} has no pod IP yet", node.name));
        };
        targets.push(RestoreTarget {
            member: node.name.clone(),
            address: format!("{ip}:{CLIENT_PORT}"),
            slots,
        });
    }
    if targets.is_empty() {
        return Err("the cluster lists no Active primary with slots yet".into());
    }
    Ok(targets)
}

async fn start_job(
    ctx: &Context,
    cluster: &ValkeyCluster,
    (backup, location): (&ValkeyBackup, &ValkeyBackupLocation),
    targets: Vec<RestoreTarget>,
    restore: RestoreStatus,
) -> Result<Action, Error> {
    let plan = restore_plan(cluster, (backup, location), targets);
    let plan = match super::backup::member_tls(ctx, cluster).await? {
        Ok(tls) => RestorePlan { tls, ..plan },
        Err(waiting) => {
            let status = RestoreStatus {
                message: Some(waiting),
                ..restore
            };
            write_status(ctx, cluster, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    let attempt = restore.attempts.unwrap_or(0) + 1;
    let image = job_image(ctx).await?;
    let job = build_job(
        cluster,
        attempt,
        location,
        &plan,
        &image,
        &ctx.operator_namespace,
    );
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    jobs.create(&PostParams::default(), &job).await?;
    let backup_status = backup.status.clone().unwrap_or_default();
    let message = format!(
        "replaying {} ({} shard(s), {}) into {} primaries (attempt {attempt} of {MAX_ATTEMPTS})",
        plan.backup,
        backup_status.shards.len(),
        backup_status.size.clone().unwrap_or_default(),
        plan.targets.len()
    );
    let status = RestoreStatus {
        phase: Some(RestorePhase::Running),
        from: Some(plan.backup.clone()),
        path: backup_status.path.clone(),
        message: Some(message.clone()),
        failure_cause: None,
        job: Some(format!(
            "{}/{}",
            ctx.operator_namespace,
            job_name(cluster, attempt)
        )),
        attempts: Some(attempt),
        started_at: restore
            .started_at
            .or_else(|| Some(crate::time::rfc3339(crate::time::now_seconds()))),
        completed_at: None,
        keys: None,
        shards: Vec::new(),
    };
    write_status(ctx, cluster, &status).await?;
    info!(cluster = %object_key(cluster), job = %job_name(cluster, attempt), "restore started");
    events::publish(
        ctx,
        cluster,
        EventType::Normal,
        events::RECONCILE,
        "RestoreStarted",
        &message,
    )
    .await;
    Ok(Action::requeue(crate::controller::jobs::RUNNING_JOB_LOOK))
}

/// The plan of a restore Job: where the backup's objects are (its status' `s3://` path, below
/// the bucket) and the primaries to replay them into.
pub fn restore_plan(
    cluster: &ValkeyCluster,
    (backup, location): (&ValkeyBackup, &ValkeyBackupLocation),
    targets: Vec<RestoreTarget>,
) -> RestorePlan {
    let s3_path = backup
        .status
        .as_ref()
        .and_then(|s| s.path.clone())
        .unwrap_or_default();
    let bucket_prefix = format!("s3://{}/", location.spec.bucket);
    let path = s3_path
        .strip_prefix(&bucket_prefix)
        .unwrap_or(&s3_path)
        .trim_end_matches('/')
        .to_string();
    RestorePlan {
        location: StoreAddress {
            endpoint: location.spec.endpoint.clone(),
            bucket: location.spec.bucket.clone(),
            region: location
                .spec
                .region
                .clone()
                .unwrap_or_else(|| DEFAULT_REGION.into()),
        },
        path,
        backup: format!(
            "{}/{}",
            backup.namespace().unwrap_or_default(),
            backup.name_any()
        ),
        cluster: ClusterIdentity {
            namespace: cluster.namespace().unwrap_or_default(),
            name: cluster.name_any(),
            uid: cluster.metadata.uid.clone().unwrap_or_default(),
        },
        targets,
        tls: None,
    }
}

/// The Job replaying `plan`: one pod, never restarted (a failure starts the next attempt),
/// restricted Pod Security, no Kubernetes credentials, keys by Secret reference.
pub fn build_job(
    cluster: &ValkeyCluster,
    attempt: i32,
    location: &ValkeyBackupLocation,
    plan: &RestorePlan,
    image: &crate::controller::jobs::JobImage,
    operator_namespace: &str,
) -> Job {
    let labels = BTreeMap::from([
        (LABEL_APP_MANAGED_BY.to_string(), MANAGER.to_string()),
        (
            LABEL_APP_COMPONENT.to_string(),
            BACKUP_COMPONENT.to_string(),
        ),
        (
            LABEL_RESTORE_NAMESPACE.to_string(),
            cluster.namespace().unwrap_or_default(),
        ),
        (LABEL_RESTORE_CLUSTER.to_string(), cluster.name_any()),
    ]);
    let credentials = &location.spec.credentials_secret.name;
    let mut env = vec![
        value_env(
            ENV_RESTORE_PLAN,
            serde_json::to_string(plan).expect("a plan serializes"),
        ),
        secret_env(ENV_ACCESS_KEY, credentials, ACCESS_KEY_ID_KEY),
        secret_env(ENV_SECRET_KEY, credentials, SECRET_ACCESS_KEY_KEY),
        value_env(ENV_VALKEY_USER, RESTORE_ACL_USERNAME.into()),
        secret_env(
            ENV_VALKEY_PASSWORD,
            &names::credentials_secret(&plan.cluster.namespace, &plan.cluster.name),
            RESTORE_PASSWORD_KEY,
        ),
    ];
    let (volumes, mounts) = match &location.spec.ca_secret {
        Some(ca) => {
            env.push(value_env(
                ENV_CA_FILE,
                format!("{CA_MOUNT}/{CA_BUNDLE_KEY}"),
            ));
            ca_volume(&ca.name)
        }
        None => (Vec::new(), Vec::new()),
    };
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(cluster, attempt)),
            namespace: Some(operator_namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(copy_job_spec(
            labels,
            k8s_openapi::api::core::v1::PodSpec {
                image_pull_secrets: Some(image.pull_secrets.clone()),
                ..restricted_pod(job_container("restore", &image.image, env, mounts), volumes)
            },
        )),
        ..Default::default()
    }
}

/// A running Job: nothing to do until it ends; then its outcome becomes `status.restore`.
async fn follow_job(
    ctx: &Context,
    cluster: &ValkeyCluster,
    job: &Job,
    restore: RestoreStatus,
) -> Result<Action, Error> {
    let Some(outcome) = job_outcome::<RestoreOutcome>(ctx, job).await? else {
        return Ok(Action::requeue(crate::controller::jobs::RUNNING_JOB_LOOK));
    };
    match outcome {
        Ok(RestoreOutcome::Completed(summary)) => {
            let status = completed_status(restore, &summary);
            write_status(ctx, cluster, &status).await?;
            let message = status.message.clone().unwrap_or_default();
            info!(cluster = %object_key(cluster), "restore completed");
            events::publish(
                ctx,
                cluster,
                EventType::Normal,
                events::RECONCILE,
                "RestoreCompleted",
                &message,
            )
            .await;
            Ok(Action::await_change())
        }
        Ok(RestoreOutcome::Failed(failure)) => {
            let cause = serde_json::to_value(failure.cause)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            record_failure(ctx, cluster, restore, &cause, failure.message).await
        }
        Err(why) => record_failure(ctx, cluster, restore, "job", why).await,
    }
}

/// `status.restore` once a Job replayed every shard.
pub fn completed_status(
    restore: RestoreStatus,
    summary: &crate::backup::restore::RestoreSummary,
) -> RestoreStatus {
    let keys: u64 = summary.shards.iter().map(|s| s.keys).sum();
    let expired: u64 = summary.shards.iter().map(|s| s.expired).sum();
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut message = format!(
        "restored {keys} keys from {} ({} shard(s))",
        restore.from.clone().unwrap_or_default(),
        summary.shards.len()
    );
    if expired > 0 {
        message.push_str(&format!(
            "; {expired} key(s) had expired since the backup and were not loaded"
        ));
    }
    if summary.functions > 0 {
        message.push_str(&format!("; {} function libraries", summary.functions));
    }
    RestoreStatus {
        phase: Some(RestorePhase::Completed),
        message: Some(message),
        failure_cause: None,
        started_at: restore
            .started_at
            .clone()
            .or(Some(summary.started_at.clone())),
        completed_at: Some(summary.completed_at.clone()),
        keys: Some(to_i64(keys)),
        shards: summary
            .shards
            .iter()
            .map(|s| RestoreShardStatus {
                index: i32::try_from(s.index).unwrap_or_default(),
                keys: to_i64(s.keys),
                expired: (s.expired > 0).then(|| to_i64(s.expired)),
                bytes: Some(to_i64(s.bytes)),
            })
            .collect(),
        ..restore
    }
}

async fn record_failure(
    ctx: &Context,
    cluster: &ValkeyCluster,
    restore: RestoreStatus,
    cause: &str,
    message: String,
) -> Result<Action, Error> {
    let attempts = restore.attempts.unwrap_or(0);
    let next = if attempts >= MAX_ATTEMPTS {
        "; no more attempts: delete this ValkeyCluster, fix the cause and create it again"
            .to_string()
    } else {
        format!(
            "; attempt {} of {MAX_ATTEMPTS} starts in 20 s",
            attempts + 1
        )
    };
    let status = RestoreStatus {
        phase: Some(RestorePhase::Failed),
        failure_cause: Some(cause.into()),
        message: Some(format!("{message}{next}")),
        completed_at: Some(crate::time::rfc3339(crate::time::now_seconds())),
        ..restore
    };
    write_status(ctx, cluster, &status).await?;
    warn!(cluster = %object_key(cluster), cause, "restore failed");
    let note = status.message.clone().unwrap_or_default();
    events::publish(
        ctx,
        cluster,
        EventType::Warning,
        events::RECONCILE,
        "RestoreFailed",
        &note,
    )
    .await;
    Ok(Action::requeue(Duration::from_secs(20)))
}

/// Applies `status.restore` with this controller's own field manager: the cluster controller's
/// status writes never take it away.
async fn write_status(
    ctx: &Context,
    cluster: &ValkeyCluster,
    status: &RestoreStatus,
) -> Result<(), Error> {
    if cluster.status.as_ref().and_then(|s| s.restore.as_ref()) == Some(status) {
        return Ok(());
    }
    let api = Api::<ValkeyCluster>::namespaced(
        ctx.client.clone(),
        &cluster.namespace().unwrap_or_default(),
    );
    let patch = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1",
        "kind": "ValkeyCluster",
        "status": {"restore": status},
    });
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::apply(RESTORE_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::restore::{RestoreSummary, ShardRestored};

    fn primary(name: &str, slots: Option<&str>) -> ClusterNodeStatus {
        ClusterNodeStatus {
            name: name.into(),
            pod: Some(name.into()),
            role: Some(NodeRole::Primary),
            lifecycle: Some(Lifecycle::Active),
            slots: slots.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn the_targets_are_the_primaries_with_slots() {
        let ips = BTreeMap::from([
            ("a".to_string(), "10.0.0.1".to_string()),
            ("b".into(), "10.0.0.2".into()),
        ]);
        let mut replica = primary("c", None);
        replica.role = Some(NodeRole::Replica);
        let nodes = [
            primary("a", Some("0-8191")),
            primary("b", Some("8192-16383")),
            replica,
        ];
        let targets = restore_targets(&nodes, &ips).unwrap();
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].address, "10.0.0.1:6379");
        assert_eq!(targets[1].slots, ["8192-16383"]);
        let no_ip = restore_targets(&[primary("z", Some("0-16383"))], &ips).unwrap_err();
        assert!(no_ip.contains("no pod IP"), "{no_ip}");
        assert!(restore_targets(&[], &ips).is_err());
    }

    #[test]
    fn a_completed_restore_says_how_many_keys_each_shard_loaded() {
        let restore = RestoreStatus {
            from: Some("team-a/nightly".into()),
            attempts: Some(1),
            ..Default::default()
        };
        let summary = RestoreSummary {
            started_at: "2026-12-05T00:00:00Z".into(),
            completed_at: "2026-12-05T00:00:09Z".into(),
            shards: vec![
                ShardRestored {
                    index: 0,
                    keys: 10,
                    expired: 0,
                    bytes: 100,
                },
                ShardRestored {
                    index: 1,
                    keys: 12,
                    expired: 2,
                    bytes: 120,
                },
            ],
            functions: 0,
        };
        let status = completed_status(restore, &summary);
        assert!(status.completed());
        assert_eq!(status.keys, Some(22));
        assert_eq!(status.shards[1].keys, 12);
        assert_eq!(status.shards[1].expired, Some(2));
        let message = status.message.unwrap();
        assert!(
            message.contains("restored 22 keys from team-a/nightly")
                && message.contains("2 key(s) had expired"),
            "{message}"
        );
    }

    #[test]
    fn the_job_reads_the_backups_path_and_holds_no_secret() {
        use crate::api::backup::{
            SecretName, ValkeyBackupLocationSpec, ValkeyBackupSpec, ValkeyBackupStatus,
        };
        let mut cluster: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "copy", "namespace": "team-b", "uid": "c-uid"},
            "spec": {"configRef": "standard", "shards": 1,
                     "restoreFrom": {"backup": "nightly", "namespace": "team-a"}}
        }))
        .unwrap();
        cluster.status = None;
        let mut backup = ValkeyBackup::new(
            "nightly",
            ValkeyBackupSpec {
                cluster: "orders".into(),
                location: "eu".into(),
            },
        );
        backup.metadata.namespace = Some("team-a".into());
        backup.status = Some(ValkeyBackupStatus {
            path: Some("s3://bucket/prod/team-a/orders/nightly-0123abcd/".into()),
            ..Default::default()
        });
        let location = ValkeyBackupLocation::new(
            "eu",
            ValkeyBackupLocationSpec {
                endpoint: "https://s3.example".into(),
                bucket: "bucket".into(),
                prefix: Some("prod".into()),
                region: None,
                credentials_secret: SecretName {
                    name: "keys".into(),
                },
                ca_secret: None,
                cross_namespace_restores: Vec::new(),
            },
        );
        let plan = restore_plan(&cluster, (&backup, &location), Vec::new());
        assert_eq!(plan.path, "prod/team-a/orders/nightly-0123abcd");
        assert_eq!(plan.backup, "team-a/nightly");
        let image = crate::controller::jobs::JobImage {
            image: "registry/valkey-operator@sha256:abc".into(),
            pull_secrets: Vec::new(),
        };
        let job = build_job(
            &cluster,
            2,
            &location,
            &plan,
            &image,
            "valkey-operator-system",
        );
        assert_eq!(job.metadata.name.as_deref(), Some("valkey-restore-c-uid-2"));
        let labels = job.metadata.labels.clone().unwrap();
        assert_eq!(
            labels[LABEL_APP_COMPONENT], BACKUP_COMPONENT,
            "the members' NetworkPolicy admits it"
        );
        assert_eq!(labels[LABEL_RESTORE_CLUSTER], "copy");
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let container = &pod.containers[0];
        assert_eq!(container.command.as_ref().unwrap()[2], "restore");
        for env in container.env.as_ref().unwrap() {
            let by_reference = env.value_from.is_some();
            let secret = [
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "VALKEY_PASSWORD",
            ];
            assert_eq!(
                by_reference,
                secret.contains(&env.name.as_str()),
                "{}",
                env.name
            );
        }
    }
}
