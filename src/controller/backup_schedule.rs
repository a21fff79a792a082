//! Scheduled backups (`ValkeyCluster.spec.backup`): a task that creates a ValkeyBackup for each
//! scheduled time as it comes due, and retention, which hands the backup Job the older backups
//! of the same schedule to delete once the new one is complete, then deletes their
//! ValkeyBackups. The arithmetic is pure ([`crate::backup::schedule`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::api::ValkeyCluster;
use crate::api::backup::{
    BackupPhase, LABEL_SCHEDULED_FOR, ValkeyBackup, ValkeyBackupLocation, ValkeyBackupSpec,
};
use crate::api::constants::LABEL_CLUSTER;
use crate::backup::schedule::{Kept, backup_name, latest_due, parse, to_prune};
use crate::controller::{Context, Error, until_ready};

/// How often the schedules are looked at (a backup starts within this of its time).
const LOOK_EVERY: Duration = Duration::from_secs(10);

/// Runs until shutdown (only while this replica leads).
pub async fn schedule_backups(ctx: Arc<Context>, clusters: Store<ValkeyCluster>) {
    if !until_ready(&clusters).await {
        warn!("backup schedules not started: the cluster cache never filled");
        return;
    }
    // The scheduled time each cluster (by uid) last got a backup for, so a due time is
    // created once (a ValkeyBackup of that name already existing counts as created).
    let mut created: HashMap<String, i64> = HashMap::new();
    loop {
        for cluster in clusters.state() {
            if let Err(e) = look(&ctx, &cluster, &mut created).await {
                warn!(cluster = %crate::controller::object_key(cluster.as_ref()), error = %e, "scheduled backup not created; trying again");
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

async fn look(
    ctx: &Context,
    cluster: &ValkeyCluster,
    created: &mut HashMap<String, i64>,
) -> Result<(), Error> {
    let Some(schedule) = &cluster.spec.backup else {
        return Ok(());
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    // The webhook refuses an invalid schedule; one that slipped past does nothing.
    let Ok(cron) = parse(&schedule.schedule) else {
        return Ok(());
    };
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let since = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let Some(due) = latest_due(&cron, since, crate::time::now_seconds()) else {
        return Ok(());
    };
    if created.get(&uid) == Some(&due) {
        return Ok(());
    }
    ctx.confirm_leading().await?;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = backup_name(&cluster.name_any(), due);
    let backup = ValkeyBackup {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(
                [
                    (LABEL_CLUSTER.to_string(), cluster.name_any()),
                    (LABEL_SCHEDULED_FOR.to_string(), due.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: ValkeyBackupSpec {
            cluster: cluster.name_any(),
            location: schedule.location.clone(),
        },
        status: None,
    };
    let api = Api::<ValkeyBackup>::namespaced(ctx.client.clone(), &namespace);
    match api.create(&PostParams::default(), &backup).await {
        Ok(_) => info!(backup = %format!("{namespace}/{name}"), "scheduled backup created"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    created.insert(uid, due);
    Ok(())
}

/// The time a scheduled backup was taken for, if it is one.
fn scheduled_for(backup: &ValkeyBackup) -> Option<i64> {
    backup.labels().get(LABEL_SCHEDULED_FOR)?.parse().ok()
}

/// The other scheduled backups of `backup`'s cluster.
async fn siblings(ctx: &Context, backup: &ValkeyBackup) -> Result<Vec<ValkeyBackup>, Error> {
    let namespace = backup.namespace().unwrap_or_default();
    let api = Api::<ValkeyBackup>::namespaced(ctx.client.clone(), &namespace);
    let selector = format!(
        "{LABEL_CLUSTER}={},{LABEL_SCHEDULED_FOR}",
        backup.spec.cluster
    );
    let all = api.list(&ListParams::default().labels(&selector)).await?;
    Ok(all
        .items
        .into_iter()
        .filter(|b| b.name_any() != backup.name_any())
        .collect())
}

/// For a scheduled backup about to start: the object prefixes it deletes once complete, in the
/// same schedule and location: the completed backups it replaces (`keep` from the cluster's
/// schedule) and whatever earlier failed runs left.
pub async fn retention_plan(
    ctx: &Context,
    backup: &ValkeyBackup,
    cluster: &ValkeyCluster,
    location: &ValkeyBackupLocation,
) -> Result<Vec<String>, Error> {
    let Some(schedule) = &cluster.spec.backup else {
        return Ok(Vec::new());
    };
    let Some(this) = scheduled_for(backup) else {
        return Ok(Vec::new());
    };
    let bucket = format!("s3://{}/", location.spec.bucket);
    let (mut completed, mut leftovers) = (Vec::new(), Vec::new());
    for sibling in siblings(ctx, backup).await? {
        let status = sibling.status.clone().unwrap_or_default();
        let (Some(path), Some(at)) = (status.path.as_deref(), scheduled_for(&sibling)) else {
            continue;
        };
        let Some(path) = path.strip_prefix(&bucket) else {
            continue;
        };
        if sibling.spec.location != backup.spec.location {
            continue;
        }
        let path = path.trim_end_matches('/').to_string();
        match status.phase {
            Some(BackupPhase::Completed) => completed.push(Kept {
                name: sibling.name_any(),
                scheduled_for: at,
                path,
            }),
            // A run whose Job was killed could not clean up after itself: what it wrote goes
            // with the next run's pruning (a run that failed cleanly left nothing there).
            Some(BackupPhase::Failed) if at < this => leftovers.push(path),
            _ => {}
        }
    }
    let mut prune: Vec<String> = to_prune(completed, schedule.keep)
        .into_iter()
        .map(|k| k.path)
        .collect();
    prune.extend(leftovers);
    Ok(prune)
}

/// Once a scheduled backup completed: deletes the ValkeyBackups whose objects its Job pruned,
/// and the failed ones of the same schedule older than it (their prefixes were pruned too).
pub async fn forget_pruned(
    ctx: &Context,
    backup: &ValkeyBackup,
    pruned: &[String],
) -> Result<(), Error> {
    let Some(this) = scheduled_for(backup) else {
        return Ok(());
    };
    let namespace = backup.namespace().unwrap_or_default();
    let api = Api::<ValkeyBackup>::namespaced(ctx.client.clone(), &namespace);
    for sibling in siblings(ctx, backup).await? {
        let status = sibling.status.clone().unwrap_or_default();
        let path_pruned = status.path.as_deref().is_some_and(|path| {
            let path = path.trim_end_matches('/');
            pruned.iter().any(|p| path.ends_with(&format!("/{p}")))
        });
        let older_failure = status.phase == Some(BackupPhase::Failed)
            && scheduled_for(&sibling).is_some_and(|t| t < this);
        if path_pruned || older_failure {
            match api
                .delete(&sibling.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    info!(backup = %format!("{namespace}/{}", sibling.name_any()), "older scheduled backup removed (retention)")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
