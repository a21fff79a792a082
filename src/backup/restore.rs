//! Restores (docs/backup.md, "Restore"): a new ValkeyCluster with `spec.restoreFrom` forms
//! empty, then a Job in the operator's namespace ([`super::restore_job`]) streams each shard's
//! snapshot back from the bucket and replays its keys into the primaries that own their slots
//! (`RESTORE ... REPLACE ABSTTL`: types, values and remaining TTLs as they were). Only then is
//! the cluster Active.
//!
//! The types here are the contract between the operator and the Job, and the checks every
//! place that looks at a `restoreFrom` makes (admission, the cluster controller before any
//! member starts, the restore controller): all pure, after the one lookup they all start from
//! ([`find_source`]).

use serde::{Deserialize, Serialize};

use super::{ClusterIdentity, Failure, MemberTls, StoreAddress, TERMINATION_MESSAGE_LIMIT};
use crate::api::backup::{BackupPhase, ValkeyBackup, ValkeyBackupLocation};
use crate::api::{ValkeyCluster, backup::RestoreFrom};

/// What the operator hands a restore Job (`RESTORE_PLAN`, JSON). No secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestorePlan {
    pub location: StoreAddress,
    /// The backup's object path below the bucket (its manifest and shards are there).
    pub path: String,
    /// `<namespace>/<name>` of the ValkeyBackup.
    pub backup: String,
    /// The cluster restored into.
    pub cluster: ClusterIdentity,
    /// Its primaries and the slots each owns.
    pub targets: Vec<RestoreTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<MemberTls>,
}

/// A primary of the cluster restored into.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreTarget {
    pub member: String,
    /// `host:port` of its client port.
    pub address: String,
    /// Its slot ranges, `0-5460` style.
    pub slots: Vec<String>,
}

impl RestorePlan {
    /// The target owning `slot`, by index into `targets`.
    pub fn owner_of(&self, slot: u16) -> Option<usize> {
        self.targets.iter().position(|t| {
            t.slots
                .iter()
                .filter_map(|r| parse_range(r))
                .any(|(lo, hi)| (lo..=hi).contains(&slot))
        })
    }
}

/// `5` or `0-5460` as an inclusive range.
pub fn parse_range(range: &str) -> Option<(u16, u16)> {
    let range = range.trim();
    match range.split_once('-') {
        Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
        None => range.parse().ok().map(|slot| (slot, slot)),
    }
}

/// What a restore Job leaves in its termination message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestoreOutcome {
    Completed(RestoreSummary),
    Failed(Failure),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSummary {
    pub started_at: String,
    pub completed_at: String,
    pub shards: Vec<ShardRestored>,
    /// Function libraries loaded (on every primary).
    #[serde(default)]
    pub functions: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRestored {
    pub index: u32,
    pub keys: u64,
    /// Keys whose time to live had passed by the restore: not loaded.
    pub expired: u64,
    pub bytes: u64,
}

impl RestoreOutcome {
    /// The outcome as JSON within the termination message's limit: per-shard figures give
    /// way to their totals, a failure's message is cut.
    pub fn termination_message(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        if text.len() <= TERMINATION_MESSAGE_LIMIT {
            return text;
        }
        let shorter = match self {
            RestoreOutcome::Completed(summary) => {
                let total = summary
                    .shards
                    .iter()
                    .fold(ShardRestored::default(), |mut sum, s| {
                        sum.keys += s.keys;
                        sum.expired += s.expired;
                        sum.bytes += s.bytes;
                        sum
                    });
                RestoreOutcome::Completed(RestoreSummary {
                    shards: vec![total],
                    ..summary.clone()
                })
            }
            RestoreOutcome::Failed(failure) => {
                let message: String = failure.message.chars().take(2000).collect();
                RestoreOutcome::Failed(Failure::new(failure.cause, message))
            }
        };
        serde_json::to_string(&shorter).unwrap_or_default()
    }
}

/// The ValkeyBackup `namespace/name` and the ValkeyBackupLocation it names, as the API server
/// has them (`None` where missing).
pub async fn find_source(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(Option<ValkeyBackup>, Option<ValkeyBackupLocation>), kube::Error> {
    let backup = kube::Api::<ValkeyBackup>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?;
    let location = match &backup {
        Some(b) => {
            kube::Api::<ValkeyBackupLocation>::all(client.clone())
                .get_opt(&b.spec.location)
                .await?
        }
        None => None,
    };
    Ok((backup, location))
}

/// The backup a `restoreFrom` names: its namespace (the cluster's unless given) and name.
pub fn source_of(cluster: &ValkeyCluster, from: &RestoreFrom) -> (String, String) {
    let namespace = from
        .namespace
        .clone()
        .or_else(|| cluster.metadata.namespace.clone())
        .unwrap_or_default();
    (namespace, from.backup.clone())
}

/// Why `backup` (as found, `None` when missing) cannot be restored into a new cluster of
/// `namespace` with `shards` shards, in words that say how to fix it; `None` when it can.
/// `location` is the backup's ValkeyBackupLocation as found.
pub fn source_problem(
    namespace: &str,
    shards: i32,
    (backup_namespace, backup_name): (&str, &str),
    backup: Option<&ValkeyBackup>,
    location: Option<&ValkeyBackupLocation>,
) -> Option<String> {
    let named = format!("ValkeyBackup {backup_namespace}/{backup_name}");
    let Some(backup) = backup else {
        return Some(format!(
            "{named} does not exist; name a Completed backup (`kubectl valkey backups <cluster>` lists them)"
        ));
    };
    let Some(location) = location else {
        return Some(format!(
            "{named} was written to ValkeyBackupLocation {:?}, which does not exist any more; ask your platform team to publish it again",
            backup.spec.location
        ));
    };
    if !location.spec.allows_restore(backup_namespace, namespace) {
        return Some(format!(
            "{named} is in another namespace, and ValkeyBackupLocation {:?} does not allow restoring {backup_namespace}'s backups into {namespace} (a platform team lists such pairs in its spec.crossNamespaceRestores)",
            backup.spec.location
        ));
    }
    let status = backup.status.clone().unwrap_or_default();
    if status.phase != Some(BackupPhase::Completed) {
        return Some(format!(
            "{named} is {}, not Completed; restore a Completed backup",
            status
                .phase
                .map_or("not started".to_string(), |p| format!("{p:?}"))
        ));
    }
    let backed_up = status.shards.len();
    if usize::try_from(shards).ok() != Some(backed_up) {
        return Some(format!(
            "{named} holds {backed_up} shard(s) and this cluster asks for {shards}: a restore needs the backup's shard count (set shards: {backed_up}; scale after the restore)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::backup::{
        BackupShardStatus, CrossNamespaceRestore, SecretName, ValkeyBackupLocationSpec,
        ValkeyBackupSpec, ValkeyBackupStatus,
    };
    use crate::backup::FailureCause;

    fn backup(phase: BackupPhase, shards: usize) -> ValkeyBackup {
        let mut backup = ValkeyBackup::new(
            "nightly",
            ValkeyBackupSpec {
                cluster: "cache".into(),
                location: "local".into(),
            },
        );
        backup.status = Some(ValkeyBackupStatus {
            phase: Some(phase),
            shards: (0..shards)
                .map(|i| BackupShardStatus {
                    index: i32::try_from(i).unwrap(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        backup
    }

    fn location(pairs: &[(&str, &[&str])]) -> ValkeyBackupLocation {
        ValkeyBackupLocation::new(
            "local",
            ValkeyBackupLocationSpec {
                endpoint: "http://store:8333".into(),
                bucket: "backups".into(),
                prefix: None,
                region: None,
                credentials_secret: SecretName { name: "k".into() },
                ca_secret: None,
                cross_namespace_restores: pairs
                    .iter()
                    .map(|(from, to)| CrossNamespaceRestore {
                        from: from.to_string(),
                        to: to.iter().map(|t| t.to_string()).collect(),
                    })
                    .collect(),
            },
        )
    }

    #[test]
    fn a_completed_backup_of_the_same_shard_count_and_namespace_restores() {
        let (b, l) = (backup(BackupPhase::Completed, 3), location(&[]));
        assert_eq!(
            source_problem("team-a", 3, ("team-a", "nightly"), Some(&b), Some(&l)),
            None
        );
    }

    #[test]
    fn every_problem_says_what_is_wrong_and_how_to_fix_it() {
        let l = location(&[]);
        let ok = backup(BackupPhase::Completed, 3);
        let problem = |shards, ns: &str, b: Option<&ValkeyBackup>, l| {
            source_problem("team-a", shards, (ns, "nightly"), b, l).unwrap()
        };
        assert!(problem(3, "team-a", None, Some(&l)).contains("does not exist"));
        assert!(problem(3, "team-a", Some(&ok), None).contains("ValkeyBackupLocation"));
        let running = backup(BackupPhase::Running, 3);
        assert!(problem(3, "team-a", Some(&running), Some(&l)).contains("is Running"));
        let count = problem(2, "team-a", Some(&ok), Some(&l));
        assert!(count.contains("holds 3 shard(s)") && count.contains("shards: 3"));
        let tenant = problem(3, "team-b", Some(&ok), Some(&l));
        assert!(tenant.contains("crossNamespaceRestores"), "{tenant}");
    }

    #[test]
    fn only_the_pairs_a_location_lists_cross_namespaces() {
        let l = location(&[("team-a", &["team-a-dr"])]);
        let ok = backup(BackupPhase::Completed, 1);
        let check = |from: &str, to: &str| {
            source_problem(to, 1, (from, "nightly"), Some(&ok), Some(&l)).is_none()
        };
        assert!(check("team-a", "team-a-dr"));
        assert!(!check("team-a", "team-b"));
        assert!(!check("team-a-dr", "team-a"), "pairs are one way");
        assert!(check("team-b", "team-b"));
    }

    #[test]
    fn keys_go_to_the_primary_owning_their_slot() {
        let plan = RestorePlan {
            location: StoreAddress {
                endpoint: "http://s".into(),
                bucket: "b".into(),
                region: "r".into(),
            },
            path: "p".into(),
            backup: "ns/b".into(),
            cluster: ClusterIdentity {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u".into(),
            },
            targets: vec![
                RestoreTarget {
                    member: "a".into(),
                    address: "a:6379".into(),
                    slots: vec!["0-8191".into()],
                },
                RestoreTarget {
                    member: "b".into(),
                    address: "b:6379".into(),
                    slots: vec!["8192-16382".into(), "16383".into()],
                },
            ],
            tls: None,
        };
        assert_eq!(plan.owner_of(0), Some(0));
        assert_eq!(plan.owner_of(8191), Some(0));
        assert_eq!(plan.owner_of(8192), Some(1));
        assert_eq!(plan.owner_of(16383), Some(1));
    }

    #[test]
    fn a_long_outcome_still_fits_a_termination_message() {
        let shards = (0..500)
            .map(|i| ShardRestored {
                index: i,
                keys: 1_000_000,
                expired: 3,
                bytes: 1 << 30,
            })
            .collect();
        let outcome = RestoreOutcome::Completed(RestoreSummary {
            shards,
            ..Default::default()
        });
        let text = outcome.termination_message();
        assert!(text.len() <= TERMINATION_MESSAGE_LIMIT);
        let back: RestoreOutcome = serde_json::from_str(&text).unwrap();
        let RestoreOutcome::Completed(summary) = back else {
            panic!("{text}")
        };
        assert_eq!(summary.shards[0].keys, 500_000_000);
        let failed = RestoreOutcome::Failed(Failure::new(FailureCause::Member, "x".repeat(9000)));
        assert!(failed.termination_message().len() <= TERMINATION_MESSAGE_LIMIT);
    }
}
