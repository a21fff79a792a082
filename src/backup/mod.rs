//! Backups to an S3-compatible object store (docs/backup.md). The operator plans a backup and
//! reads its outcome; a Job in the operator's namespace does the copying next to the data
//! ([`job`]): each shard's snapshot taken the way a replica takes it ([`sync`]), checked
//! ([`rdb`]) and streamed into the bucket, then a manifest that makes the backup complete.
//!
//! The types here are the contract between the two: the plan the operator hands the Job, the
//! manifest the Job writes next to the shards, and the outcome it leaves in its termination
//! message.

pub mod dump;
pub mod job;
pub mod rdb;
pub mod restore;
pub mod restore_job;
pub mod schedule;
pub mod sync;

use serde::{Deserialize, Serialize};

/// The object that lists a backup's shards; a backup without it is not complete.
pub const MANIFEST_OBJECT: &str = "manifest.json";
/// Version of the manifest's layout.
pub const MANIFEST_FORMAT: u32 = 1;

/// The object holding one shard's snapshot.
pub fn shard_object(index: u32) -> String {
    format!("shard-{index}.rdb")
}

/// The object path (below the bucket) of a backup: the location's prefix, the cluster's
/// namespace and name, then the backup's name and the first 8 characters of its uid (a
/// backup deleted and created again under the same name never writes over the old objects).
pub fn backup_path(
    prefix: &str,
    namespace: &str,
    cluster: &str,
    backup: &str,
    uid: &str,
) -> String {
    let uid: String = uid.chars().take(8).collect();
    let prefix = prefix.trim_matches('/');
    let tail = format!("{namespace}/{cluster}/{backup}-{uid}");
    if prefix.is_empty() {
        tail
    } else {
        format!("{prefix}/{tail}")
    }
}

/// What the operator hands a backup Job (`BACKUP_PLAN`, JSON). No secret: the keys come from
/// Secret references.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobPlan {
    pub location: StoreAddress,
    /// Object path of this backup below the bucket ([`backup_path`]).
    pub path: String,
    pub cluster: ClusterIdentity,
    /// The ValkeyBackup's name and uid.
    pub backup: String,
    pub backup_uid: String,
    pub shards: Vec<ShardSource>,
    /// Object prefixes of older backups of the same schedule to delete once this one is
    /// complete (never before: a failed backup deletes nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prune: Vec<String>,
    /// A TLS cluster's members: the CA bundle they chain to (public) and the name every
    /// member's certificate carries, verified on each connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<MemberTls>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberTls {
    pub ca_pem: String,
    pub server_name: String,
}

/// Where the objects go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreAddress {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIdentity {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The member one shard is copied from: a replica where the shard has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardSource {
    pub index: u32,
    /// The shard's slot ranges, `0-5460` style, as the operator last saw them.
    pub slots: Vec<String>,
    /// The ValkeyNode copied from.
    pub member: String,
    /// `replica` or `primary`.
    pub role: String,
    /// `host:port` of its client port.
    pub address: String,
    /// The shard's other members, in the order they are tried when this one drops out of the
    /// copy (its pod deleted, evicted or restarted): the copy goes on from one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<MemberAddress>,
}

/// A member a shard can be copied from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberAddress {
    pub member: String,
    pub role: String,
    pub address: String,
}

impl ShardSource {
    /// The source of copy attempt `attempt` (from 1): the chosen member, then each fallback in
    /// turn, round and round.
    pub fn for_attempt(&self, attempt: u32) -> ShardSource {
        let turn = (attempt.saturating_sub(1) as usize) % (self.fallbacks.len() + 1);
        let Some(other) = turn.checked_sub(1).map(|i| &self.fallbacks[i]) else {
            return self.clone();
        };
        ShardSource {
            member: other.member.clone(),
            role: other.role.clone(),
            address: other.address.clone(),
            ..self.clone()
        }
    }
}

/// One shard as it was written to the bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardCopy {
    pub index: u32,
    pub slots: Vec<String>,
    pub member: String,
    pub role: String,
    /// Object name below the backup's path.
    pub object: String,
    pub bytes: u64,
    pub sha256: String,
    /// Keys in the snapshot (its `RESIZEDB`), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_with_ttl: Option<u64>,
    pub rdb_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey_version: Option<String>,
}

impl ShardCopy {
    pub fn new(source: &ShardSource, object: String, fetched: sync::Fetched) -> Self {
        ShardCopy {
            index: source.index,
            slots: source.slots.clone(),
            member: source.member.clone(),
            role: source.role.clone(),
            object,
            bytes: fetched.bytes,
            sha256: fetched.sha256,
            keys: fetched.header.keys,
            keys_with_ttl: fetched.header.keys_with_ttl,
            rdb_version: fetched.header.format_version,
            valkey_version: fetched.header.server_version,
        }
    }
}

/// The manifest object: everything a restore needs to know about the backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    pub cluster: ClusterIdentity,
    pub backup: String,
    pub backup_uid: String,
    pub started_at: String,
    pub completed_at: String,
    /// The Valkey version of the first shard's snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey_version: Option<String>,
    pub total_bytes: u64,
    pub shards: Vec<ShardCopy>,
}

impl Manifest {
    pub fn new(plan: &JobPlan, started_at: String, shards: Vec<ShardCopy>) -> Self {
        Manifest {
            format: MANIFEST_FORMAT,
            cluster: plan.cluster.clone(),
            backup: plan.backup.clone(),
            backup_uid: plan.backup_uid.clone(),
            started_at,
            completed_at: crate::time::rfc3339(crate::time::now_seconds()),
            valkey_version: shards.iter().find_map(|s| s.valkey_version.clone()),
            total_bytes: shards.iter().map(|s| s.bytes).sum(),
            shards,
        }
    }
}

/// What a Job leaves in its termination message, which Kubernetes keeps to 4096 bytes: the
/// figures the ValkeyBackup's status shows (the operator planned the rest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobOutcome {
    Completed(CopySummary),
    Failed(Failure),
}

/// Kubernetes' limit on a termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopySummary {
    pub started_at: String,
    pub completed_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey_version: Option<String>,
    pub shards: Vec<ShardFigures>,
    /// The prefixes of the plan's `prune` whose objects are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardFigures {
    pub index: u32,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    /// Left out when the message would not fit (many shards); the manifest has every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The member copied and its role, when not the planned one (that one dropped out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl CopySummary {
    /// The summary of `manifest`, copied as `planned` said (or from fallbacks where it says).
    pub fn of(manifest: &Manifest, planned: &[ShardSource]) -> Self {
        let member_of = |index: u32| planned.iter().find(|p| p.index == index);
        CopySummary {
            started_at: manifest.started_at.clone(),
            completed_at: manifest.completed_at.clone(),
            valkey_version: manifest.valkey_version.clone(),
            shards: manifest
                .shards
                .iter()
                .map(|s| {
                    let moved = member_of(s.index).is_none_or(|p| p.member != s.member);
                    ShardFigures {
                        index: s.index,
                        bytes: s.bytes,
                        keys: s.keys,
                        sha256: Some(s.sha256.clone()),
                        member: moved.then(|| s.member.clone()),
                        role: moved.then(|| s.role.clone()),
                    }
                })
                .collect(),
            pruned: Vec::new(),
        }
    }
}

impl JobOutcome {
    /// The outcome as JSON within [`TERMINATION_MESSAGE_LIMIT`]: checksums are dropped first,
    /// then a failure's message is cut.
    pub fn termination_message(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        if text.len() <= TERMINATION_MESSAGE_LIMIT {
            return text;
        }
        let shorter = match self {
            JobOutcome::Completed(summary) => {
                let mut summary = summary.clone();
                summary.shards.iter_mut().for_each(|s| s.sha256 = None);
                JobOutcome::Completed(summary)
            }
            JobOutcome::Failed(failure) => {
                let message: String = failure.message.chars().take(2000).collect();
                JobOutcome::Failed(Failure::new(failure.cause, message))
            }
        };
        serde_json::to_string(&shorter).unwrap_or_default()
    }
}

/// Why a backup failed, by the cause a user fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureCause {
    /// The object store refused the keys.
    Credentials,
    /// The bucket does not exist.
    Bucket,
    /// The object store could not be reached, or stopped answering.
    Network,
    /// A member could not be copied.
    Member,
    /// The Job's plan or settings are wrong (an operator bug or a bad location).
    Plan,
    /// The object store answered with another error.
    ObjectStore,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub cause: FailureCause,
    pub message: String,
}

impl Failure {
    pub fn new(cause: FailureCause, message: impl Into<String>) -> Self {
        Failure {
            cause,
            message: message.into(),
        }
    }

    fn member(shard: &ShardSource, what: &str) -> Self {
        Failure::new(
            FailureCause::Member,
            format!(
                "shard {} (member {} at {}): {what}",
                shard.index, shard.member, shard.address
            ),
        )
    }

    pub(crate) fn from_store(doing: &str, bucket: &str, error: &dyn std::fmt::Display) -> Self {
        let text = error.to_string();
        let cause = classify_store_error(&text);
        let message = match cause {
            FailureCause::Credentials => format!(
                "{doing}: the object store refused the credentials (check the location's credentials Secret): {text}"
            ),
            FailureCause::Bucket => format!(
                "{doing}: bucket {bucket:?} does not exist (create it, or fix the location's bucket): {text}"
            ),
            FailureCause::Network => format!(
                "{doing}: the object store could not be reached (check the location's endpoint and that the store is up): {text}"
            ),
            _ => format!("{doing}: {text}"),
        };
        Failure::new(cause, message)
    }

    fn from_upload(bucket: &str, error: &std::io::Error) -> Self {
        Failure::from_store("uploading", bucket, error)
    }
}

/// The cause an object-store error names, from the S3 error codes and the HTTP client's
/// connection errors in its text (object_store keeps them only there).
pub fn classify_store_error(text: &str) -> FailureCause {
    const CREDENTIALS: &[&str] = &[
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "403 Forbidden",
        "Unauthenticated",
        "PermissionDenied",
    ];
    const BUCKET: &[&str] = &["NoSuchBucket", "The specified bucket does not exist"];
    const NETWORK: &[&str] = &[
        "error sending request",
        "Connection refused",
        "connection refused",
        "dns error",
        "timed out",
        "connection closed",
        "Connection reset",
        "connection reset",
    ];
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(BUCKET) {
        FailureCause::Bucket
    } else if has(CREDENTIALS) {
        FailureCause::Credentials
    } else if has(NETWORK) {
        FailureCause::Network
    } else {
        FailureCause::ObjectStore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_backups_of_the_same_name_apart() {
        assert_eq!(
            backup_path("/valkey/", "shop", "cart", "nightly", "0123456789abcdef"),
            "valkey/shop/cart/nightly-01234567"
        );
        assert_eq!(backup_path("", "shop", "cart", "b", "ab"), "shop/cart/b-ab");
        assert_eq!(shard_object(2), "shard-2.rdb");
    }

    #[test]
    fn store_errors_name_what_to_fix() {
        let cases = [
            (
                "Client error with status 403 Forbidden: <Code>InvalidAccessKeyId</Code>",
                FailureCause::Credentials,
            ),
            (
                "<Code>SignatureDoesNotMatch</Code>",
                FailureCause::Credentials,
            ),
            (
                "Client error with status 404 Not Found: <Code>NoSuchBucket</Code>",
                FailureCause::Bucket,
            ),
            (
                "error sending request for url (http://s3:8333/b): client error (Connect)",
                FailureCause::Network,
            ),
            (
                "tcp connect error: Connection refused (os error 111)",
                FailureCause::Network,
            ),
            (
                "Server error with status 500: <Code>InternalError</Code>",
                FailureCause::ObjectStore,
            ),
        ];
        for (text, cause) in cases {
            assert_eq!(classify_store_error(text), cause, "{text}");
        }
    }

    #[test]
    fn a_large_outcome_fits_a_termination_message() {
        let summary = CopySummary {
            started_at: "2026-12-05T18:00:00Z".into(),
            completed_at: "2026-12-05T18:01:00Z".into(),
            valkey_version: Some("9.0.1".into()),
            shards: (0..60)
                .map(|index| ShardFigures {
                    index,
                    bytes: 1 << 30,
                    keys: Some(12_345_678),
                    sha256: Some("f".repeat(64)),
                    member: None,
                    role: None,
                })
                .collect(),
            pruned: vec![],
        };
        let text = JobOutcome::Completed(summary).termination_message();
        assert!(
            text.len() <= TERMINATION_MESSAGE_LIMIT,
            "{} bytes",
            text.len()
        );
        let JobOutcome::Completed(back) = serde_json::from_str(&text).unwrap() else {
            panic!("{text}")
        };
        assert_eq!(back.shards.len(), 60);
        let failed = JobOutcome::Failed(Failure::new(FailureCause::Network, "x".repeat(9000)));
        assert!(failed.termination_message().len() <= TERMINATION_MESSAGE_LIMIT);
    }

    #[test]
    fn the_summary_names_a_member_only_where_the_copy_came_from_another_than_planned() {
        let copy = |index: u32, member: &str, role: &str| ShardCopy {
            index,
            slots: vec![],
            member: member.into(),
            role: role.into(),
            object: shard_object(index),
            bytes: 1,
            sha256: "00".into(),
            keys: None,
            keys_with_ttl: None,
            rdb_version: 12,
            valkey_version: None,
        };
        let source = |index: u32, member: &str| ShardSource {
            index,
            slots: vec![],
            member: member.into(),
            role: "replica".into(),
            address: "10.0.0.1:6379".into(),
            fallbacks: vec![],
        };
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            cluster: ClusterIdentity {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u".into(),
            },
            backup: "b".into(),
            backup_uid: "bu".into(),
            started_at: "2026-12-06T06:00:00Z".into(),
            completed_at: "2026-12-06T06:00:01Z".into(),
            valkey_version: None,
            total_bytes: 2,
            shards: vec![copy(0, "c-0-1", "replica"), copy(1, "c-1-0", "primary")],
        };
        let summary = CopySummary::of(&manifest, &[source(0, "c-0-1"), source(1, "c-1-1")]);
        assert_eq!(
            (
                summary.shards[0].member.as_deref(),
                summary.shards[0].role.as_deref()
            ),
            (None, None)
        );
        assert_eq!(
            (
                summary.shards[1].member.as_deref(),
                summary.shards[1].role.as_deref()
            ),
            (Some("c-1-0"), Some("primary"))
        );
    }

    #[test]
    fn an_outcome_reads_back_as_written() {
        let failed = JobOutcome::Failed(Failure::new(FailureCause::Bucket, "no bucket"));
        let text = serde_json::to_string(&failed).unwrap();
        assert_eq!(
            text,
            r#"{"failed":{"cause":"bucket","message":"no bucket"}}"#
        );
        assert_eq!(serde_json::from_str::<JobOutcome>(&text).unwrap(), failed);
    }
}
