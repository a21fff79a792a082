//! Backups (docs/backup.md): `ValkeyBackupLocation`, where a platform team points backups
//! once (an S3-compatible bucket and the keys to it, kept in the operator's namespace), and
//! `ValkeyBackup`, one backup of one cluster that a product team asks for by name.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Keys of a location's credentials Secret (in the operator's namespace).
pub const ACCESS_KEY_ID_KEY: &str = "accessKeyId";
pub const SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";
/// Key of a location's CA Secret.
pub const CA_BUNDLE_KEY: &str = "ca.crt";
/// Region when a location names none (what S3-compatible stores accept).
pub const DEFAULT_REGION: &str = "us-east-1";

/// The spec of a backup says what was backed up: it never changes.
pub const BACKUP_SPEC_IMMUTABLE: &str = "spec of a ValkeyBackup cannot change: it records what was backed up; create another ValkeyBackup instead";

/// Completed scheduled backups kept per cluster when `keep` is not set.
pub const DEFAULT_KEEP: i32 = 7;
/// Label on a scheduled ValkeyBackup: the scheduled time it was taken for (Unix seconds).
pub const LABEL_SCHEDULED_FOR: &str = "valkey.gomomento.com/scheduled-for";

/// `ValkeyCluster.spec.backup`: backups of the cluster on a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSchedule {
    /// The ValkeyBackupLocation to write to.
    #[schemars(length(min = 1, max = 253))]
    pub location: String,
    /// When, as a five-field cron expression in UTC (`minute hour day-of-month month
    /// day-of-week`), e.g. `0 3 * * *` for 03:00 every day.
    #[schemars(length(min = 1, max = 100))]
    pub schedule: String,
    /// How many completed backups of this schedule to keep (default 7): each new one that
    /// completes deletes the oldest beyond this, from the bucket and the API.
    #[serde(default = "default_keep")]
    #[schemars(range(min = 1, max = 1000))]
    pub keep: i32,
}

fn default_keep() -> i32 {
    DEFAULT_KEEP
}

/// An S3-compatible bucket backups go to. Cluster-scoped: product teams name it in a
/// ValkeyBackup and never see its keys.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyBackupLocation",
    doc = "An S3-compatible bucket where ValkeyBackups are written. Its credentials Secret lives in the operator's namespace; product teams reference the location by name only.",
    plural = "valkeybackuplocations",
    shortname = "vbl",
    category = "valkey",
    printcolumn(
        name = "ENDPOINT",
        type_ = "string",
        json_path = ".spec.endpoint",
        description = "The object store"
    ),
    printcolumn(
        name = "BUCKET",
        type_ = "string",
        json_path = ".spec.bucket",
        description = "The bucket"
    ),
    printcolumn(
        name = "PREFIX",
        type_ = "string",
        json_path = ".spec.prefix",
        description = "Object path prefix"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupLocationSpec {
    /// The store's URL, `https://s3.eu-west-1.amazonaws.com` or `http://seaweedfs.storage:8333`
    /// (plain HTTP only inside the Kubernetes cluster). Requests use path-style addressing.
    #[schemars(regex(pattern = r"^https?://[^/\s]+/?$"))]
    pub endpoint: String,
    /// The bucket; it must exist (backups never create one).
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Prepended to every object path (`<prefix>/<namespace>/<cluster>/<backup>-<uid>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Default `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A Secret in the operator's namespace with keys `accessKeyId` and `secretAccessKey`.
    pub credentials_secret: SecretName,
    /// A Secret in the operator's namespace whose `ca.crt` is the store's CA (a private
    /// endpoint's certificate); the system's roots otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretName>,
    /// Which namespaces may restore the backups of which other namespace from this location
    /// (a cluster always may restore its own namespace's backups). Nothing else crosses
    /// namespaces: a tenant can never restore another tenant's backup unless listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cross_namespace_restores: Vec<CrossNamespaceRestore>,
}

/// `from`'s backups may be restored into clusters of the `to` namespaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrossNamespaceRestore {
    #[schemars(length(min = 1, max = 63))]
    pub from: String,
    #[schemars(length(min = 1))]
    pub to: Vec<String>,
}

impl ValkeyBackupLocationSpec {
    /// May a cluster in `to` restore a backup taken in `from` (always, within a namespace)?
    pub fn allows_restore(&self, from: &str, to: &str) -> bool {
        from == to
            || self
                .cross_namespace_restores
                .iter()
                .any(|r| r.from == from && r.to.iter().any(|t| t == to))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretName {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One backup of one ValkeyCluster of this namespace.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyBackup",
    doc = "One backup of a ValkeyCluster of this namespace into a ValkeyBackupLocation: each shard's snapshot (from a replica where the shard has one) and a manifest, written by a Job in the operator's namespace.",
    plural = "valkeybackups",
    shortname = "vbk",
    category = "valkey",
    namespaced,
    status = "ValkeyBackupStatus",
    cel,
    validation = Rule::new("self.spec == oldSelf.spec").message(BACKUP_SPEC_IMMUTABLE).field_path(".spec"),
    printcolumn(name = "CLUSTER", type_ = "string", json_path = ".spec.cluster", description = "The backed-up ValkeyCluster"),
    printcolumn(name = "LOCATION", type_ = "string", json_path = ".spec.location", description = "The ValkeyBackupLocation"),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase", description = "Pending, Running, Completed or Failed"),
    printcolumn(name = "SIZE", type_ = "string", json_path = ".status.size", description = "Bytes written"),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupSpec {
    /// The ValkeyCluster to back up, in this namespace.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// The ValkeyBackupLocation to write to.
    #[schemars(length(min = 1, max = 253))]
    pub location: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum BackupPhase {
    /// Waiting for the cluster (not Active yet).
    Pending,
    /// The Job is copying.
    Running,
    /// Every shard and the manifest are in the bucket.
    Completed,
    /// Nothing usable was written; `message` says why.
    Failed,
}

impl BackupPhase {
    pub fn is_final(self) -> bool {
        matches!(self, BackupPhase::Completed | BackupPhase::Failed)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// What is happening or what went wrong, and what to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a failure: `credentials`, `bucket`, `network`, `member`, `plan` or `objectStore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<String>,
    /// The Job in the operator's namespace doing the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// `s3://<bucket>/<path>/`: the shards and `manifest.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Bytes of all shards, e.g. `12.3 MiB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<i64>,
    /// The Valkey version that wrote the snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<BackupShardStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupShardStatus {
    pub index: i32,
    /// Slot ranges, `0-5460`.
    #[serde(default)]
    pub slots: Vec<String>,
    /// The member copied, and its role then (`replica` where the shard had one).
    pub member: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// `ValkeyCluster.spec.restoreFrom`: the Completed ValkeyBackup a new cluster starts with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreFrom {
    /// The ValkeyBackup's name.
    #[schemars(length(min = 1, max = 253))]
    pub backup: String,
    /// Its namespace, when not the cluster's (the backup's location must list the pair in
    /// `crossNamespaceRestores`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// The CEL rule on a ValkeyCluster's spec: `restoreFrom` is neither added, removed nor changed.
pub fn restore_from_rule() -> kube::core::Rule {
    kube::core::Rule::new(
        "has(self.restoreFrom) == has(oldSelf.restoreFrom) && (!has(self.restoreFrom) || self.restoreFrom == oldSelf.restoreFrom)",
    )
    .message(RESTORE_FROM_IMMUTABLE)
    .field_path(".restoreFrom")
    .reason(kube::core::Reason::FieldValueForbidden)
}

/// Set on `spec.restoreFrom` by CEL: a restore is chosen at creation and never changes.
pub const RESTORE_FROM_IMMUTABLE: &str = "spec.restoreFrom is set at creation only and cannot change: a cluster starts with one backup's data (create a new ValkeyCluster to restore another)";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum RestorePhase {
    /// The cluster forms (empty) before the keys are replayed.
    Pending,
    /// The restore Job replays the backup's keys into the primaries.
    Running,
    /// Every shard's keys are in the cluster.
    Completed,
    /// The restore failed (`message`); it is tried again up to three times.
    Failed,
}

/// `ValkeyCluster.status.restore`: where the data came from and how much of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// `<namespace>/<backup>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// `s3://<bucket>/<path>/` of the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a failure: `credentials`, `bucket`, `network`, `member`, `plan`, `objectStore`, `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<String>,
    /// The Job in the operator's namespace doing the restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Jobs started so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Keys loaded into the cluster, all shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<RestoreShardStatus>,
}

/// Restore Jobs tried before a restore gives up (the cluster is Failed then).
pub const MAX_RESTORE_ATTEMPTS: i32 = 3;

impl RestoreStatus {
    pub fn completed(&self) -> bool {
        self.phase == Some(RestorePhase::Completed)
    }

    /// The restore failed [`MAX_RESTORE_ATTEMPTS`] times: nothing more is tried.
    pub fn gave_up(&self) -> bool {
        self.phase == Some(RestorePhase::Failed)
            && self.attempts.unwrap_or(0) >= MAX_RESTORE_ATTEMPTS
    }
}

/// One shard of the backup as it was restored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreShardStatus {
    pub index: i32,
    /// Keys loaded from this shard's snapshot.
    pub keys: i64,
    /// Keys whose time to live had passed by the restore (not loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
}
