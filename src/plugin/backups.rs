//! `kubectl valkey backups <cluster>`: a cluster's backups, newest first, with their phase,
//! size, key count, age and where they are (or why they failed). Pure: the caller hands in the
//! ValkeyBackups it read.

use std::fmt::Write;

use kube::ResourceExt;
use serde::Serialize;

use crate::api::backup::{LABEL_SCHEDULED_FOR, ValkeyBackup};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupRow {
    pub name: String,
    pub phase: String,
    /// `scheduled` (from `spec.backup`) or `manual`.
    pub origin: String,
    pub location: String,
    pub size: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<i64>,
    pub age: String,
    /// Where the objects are, or what went wrong.
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupsReport {
    pub namespace: String,
    pub cluster: String,
    pub backups: Vec<BackupRow>,
}

/// The backups of `cluster` among `backups`, newest first; `now` in Unix seconds.
pub fn report(namespace: &str, cluster: &str, backups: &[ValkeyBackup], now: i64) -> BackupsReport {
    let created = |b: &ValkeyBackup| {
        b.metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second())
    };
    let mut mine: Vec<&ValkeyBackup> = backups
        .iter()
        .filter(|b| b.spec.cluster == cluster)
        .collect();
    mine.sort_by_key(|b| std::cmp::Reverse(created(b)));
    let rows = mine
        .into_iter()
        .map(|b| {
            let status = b.status.clone().unwrap_or_default();
            let phase = status
                .phase
                .map_or("Pending".to_string(), |p| format!("{p:?}"));
            let detail = match status.phase {
                Some(crate::api::backup::BackupPhase::Completed) => status.path.clone(),
                _ => status.message.clone(),
            };
            BackupRow {
                name: b.metadata.name.clone().unwrap_or_default(),
                phase,
                origin: if b.labels().contains_key(LABEL_SCHEDULED_FOR) {
                    "scheduled"
                } else {
                    "manual"
                }
                .into(),
                location: b.spec.location.clone(),
                size: status.size.clone().unwrap_or_else(|| "-".into()),
                keys: (!status.shards.is_empty() && status.shards.iter().all(|s| s.keys.is_some()))
                    .then(|| status.shards.iter().filter_map(|s| s.keys).sum()),
                age: super::status::age(now - created(b)),
                detail: detail.unwrap_or_default(),
            }
        })
        .collect();
    BackupsReport {
        namespace: namespace.into(),
        cluster: cluster.into(),
        backups: rows,
    }
}

/// The table.
pub fn text(report: &BackupsReport) -> String {
    let mut out = String::new();
    if report.backups.is_empty() {
        let _ = writeln!(
            out,
            "ValkeyCluster {}/{} has no backups (create a ValkeyBackup, or set spec.backup for a schedule: docs/backup.md)",
            report.namespace, report.cluster
        );
        return out;
    }
    let _ = writeln!(
        out,
        "{:<32} {:<10} {:<10} {:<14} {:>10} {:>10} {:>5}  DETAIL",
        "NAME", "PHASE", "ORIGIN", "LOCATION", "SIZE", "KEYS", "AGE"
    );
    for b in &report.backups {
        let keys = b.keys.map_or("-".to_string(), |k| k.to_string());
        let _ = writeln!(
            out,
            "{:<32} {:<10} {:<10} {:<14} {:>10} {:>10} {:>5}  {}",
            b.name, b.phase, b.origin, b.location, b.size, keys, b.age, b.detail
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::backup::{
        BackupPhase, BackupShardStatus, ValkeyBackupSpec, ValkeyBackupStatus,
    };

    fn backup(name: &str, cluster: &str, created: i64, status: ValkeyBackupStatus) -> ValkeyBackup {
        let mut b = ValkeyBackup::new(
            name,
            ValkeyBackupSpec {
                cluster: cluster.into(),
                location: "local".into(),
            },
        );
        b.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        b.status = Some(status);
        b
    }

    #[test]
    fn a_clusters_backups_newest_first_with_what_to_act_on() {
        let done = ValkeyBackupStatus {
            phase: Some(BackupPhase::Completed),
            size: Some("2.1 MiB".into()),
            path: Some("s3://b/p/".into()),
            shards: vec![
                BackupShardStatus {
                    keys: Some(10),
                    ..Default::default()
                },
                BackupShardStatus {
                    keys: Some(5),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let failed = ValkeyBackupStatus {
            phase: Some(BackupPhase::Failed),
            message: Some("bucket \"x\" does not exist".into()),
            ..Default::default()
        };
        let mut scheduled = backup("cart-20261205-0300", "cart", 1000, done);
        scheduled.metadata.labels =
            Some([(LABEL_SCHEDULED_FOR.to_string(), "1000".to_string())].into());
        let backups = [
            scheduled,
            backup("by-hand", "cart", 2000, failed),
            backup("other", "orders", 3000, ValkeyBackupStatus::default()),
        ];
        let report = report("shop", "cart", &backups, 2100);
        let names: Vec<_> = report.backups.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["by-hand", "cart-20261205-0300"]);
        assert_eq!(report.backups[0].detail, "bucket \"x\" does not exist");
        assert_eq!(report.backups[0].origin, "manual");
        assert_eq!(report.backups[1].keys, Some(15));
        assert_eq!(report.backups[1].origin, "scheduled");
        assert_eq!(report.backups[1].age, "18m");
        let table = text(&report);
        assert!(table.contains("s3://b/p/"), "{table}");
        assert!(text(&super::report("shop", "none", &backups, 0)).contains("has no backups"));
    }
}
