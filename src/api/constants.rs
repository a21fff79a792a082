//! Names, limits and reserved values shared by the API types, the config renderer and the
//! controllers. One concept, one constant: change it here and every user follows.

/// API group of every valkey-operator kind.
pub const GROUP: &str = "valkey.gomomento.com";
/// The (storage) API version of this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` string of this module's objects.
pub const API_VERSION: &str = "valkey.gomomento.com/v1alpha1";
/// `kubectl get valkey` lists every kind in this category.
pub const CATEGORY: &str = "valkey";

/// Prefix of labels and annotations owned by the operator. Users may not set pod annotations
/// under it (`ValkeyCluster.spec.podAnnotations`).
pub const RESERVED_PREFIX: &str = "valkey.gomomento.com/";

/// Annotation on a ValkeyCluster choosing how slots move when shards are added or removed:
/// `keys` moves them key by key (`MIGRATE`); anything else (or none) uses atomic slot
/// migration where every member's Valkey supports it.
pub const ANNOTATION_SLOT_MIGRATION: &str = "valkey.gomomento.com/slot-migration";
/// `"true"` on a ValkeyCluster pauses its reconciliation (an incident, a maintenance window):
/// members keep running and serving, the operator changes nothing until it is removed.
pub const ANNOTATION_PAUSED: &str = "valkey.gomomento.com/paused";
/// Stamped by the operator on a member pod whose Secret volume still holds an older ACL file
/// or certificate (value: when, in Unix seconds). Updating the pod makes the kubelet sync it
/// at once, and a sync refreshes its Secret volumes, instead of waiting for the kubelet's
/// periodic sync (a minute or more).
pub const ANNOTATION_SECRETS_REFRESH: &str = "valkey.gomomento.com/secrets-refresh-requested";

/// Label on every object the operator creates for a ValkeyCluster: the cluster's name.
pub const LABEL_CLUSTER: &str = "valkey.gomomento.com/cluster";
/// Label on ValkeyNodes and pods: the shard index (decimal).
pub const LABEL_SHARD: &str = "valkey.gomomento.com/shard";
/// Label on pods: the name of the ValkeyNode the pod belongs to.
pub const LABEL_NODE: &str = "valkey.gomomento.com/node";
/// Label on ValkeyNodes and pods: hash of the node's resolved spec (rolling replacement key).
pub const LABEL_SPEC_HASH: &str = "valkey.gomomento.com/spec-hash";
/// Standard Kubernetes labels the operator puts on what it creates.
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_APP_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of `app.kubernetes.io/name` on operator-created objects.
pub const APP_NAME: &str = "valkey";
/// Value of `app.kubernetes.io/managed-by` and the server-side apply field manager prefix.
pub const MANAGER: &str = "valkey-operator";

/// Maximum length of the `baseRef` chain from a ValkeyConfig to its root (seed: 10 levels).
pub const MAX_CONFIG_CHAIN_DEPTH: usize = 10;
/// Upper bound for `ValkeyCluster.spec.shards`.
pub const MAX_SHARDS: i32 = 500;
/// Upper bound for `ValkeyCluster.spec.replicasPerShard`.
pub const MAX_REPLICAS_PER_SHARD: i32 = 5;
/// Most members (primaries and replicas) one ValkeyCluster may have: `shards x (1 +
/// replicasPerShard)`. Planning, the steps of a round, the operator's memory and every member's
/// cluster bus grow with it; without a bound one namespace editor could make the operator plan
/// (and the API server store) millions of members. No field has a maximum of its own (Momento's
/// API has none for `replicasPerShard`): the product is what is bounded.
pub const MAX_MEMBERS: i64 = 1000;
/// Default for `ValkeyCluster.spec.replicasPerShard`.
pub const DEFAULT_REPLICAS_PER_SHARD: i32 = 1;
/// Longest ValkeyCluster name: pod, Service and DNS names are derived from it and must stay
/// within the 63-character DNS label limit.
pub const MAX_CLUSTER_NAME_LEN: usize = 40;
/// Number of hash slots in a Valkey cluster.
pub const SLOT_COUNT: u16 = 16384;

/// Valkey client port (forced).
pub const CLIENT_PORT: u16 = 6379;
/// Valkey cluster bus port (forced).
pub const CLUSTER_BUS_PORT: u16 = 16379;

/// ACL user the operator uses for its own (driver) connections. Usernames starting with `_`
/// are refused in every binding, so this can never collide with a user's name.
pub const OPERATOR_ACL_USERNAME: &str = "_valkey-operator";
/// ACL user replicas use to authenticate to their primary.
pub const REPLICATION_ACL_USERNAME: &str = "_valkey-replication";
/// ACL user backup Jobs take a shard's snapshot as (`SYNC`, and nothing else).
pub const BACKUP_ACL_USERNAME: &str = "_valkey-backup";
/// ACL user restore Jobs replay a backup's keys as (`RESTORE`, `FUNCTION LOAD`, nothing else).
pub const RESTORE_ACL_USERNAME: &str = "_valkey-restore";
/// ACL user the metrics exporter beside each member reads Valkey's statistics as (`INFO` and
/// a few read-only diagnostics; no key, no `CONFIG`).
pub const METRICS_ACL_USERNAME: &str = "_valkey-metrics";

/// Valkey settings the operator injects into every node whatever a config says (PRODUCT.md,
/// "Forced settings"): cluster mode, ports, data dir and nodes.conf path, ACL file path,
/// replication identity and authentication, process model. A ValkeyConfig that sets one of
/// these (or a key starting with one of [`FORCED_SETTING_PREFIXES`]) is refused at apply time,
/// and the renderer overrides it if one slipped in.
pub const FORCED_SETTINGS: &[&str] = &[
    "cluster-enabled",
    "port",
    "cluster-port",
    "bind",
    "dir",
    "cluster-config-file",
    "aclfile",
    "requirepass",
    "masteruser",
    "masterauth",
    "primaryuser",
    "primaryauth",
    "replicaof",
    "slaveof",
    "replica-announce-ip",
    "replica-announce-port",
    "slave-announce-ip",
    "slave-announce-port",
    "daemonize",
    "include",
    "rename-command",
    // ACL users come from the ACL file the operator renders (spec.acl).
    "user",
];

/// Families of forced settings: announce address/hostname/ports (replication identity) and,
/// with TLS, every `tls-*` key.
pub const FORCED_SETTING_PREFIXES: &[&str] = &["cluster-announce-", "tls-"];

/// Forced settings a ValkeyConfig may not even name (Momento v0.9 refuses them; the others
/// are accepted with a warning and overridden): authentication and ACL settings, which would
/// fight the operator's users ...
pub const REFUSED_AUTH_SETTINGS: &[&str] = &[
    "requirepass",
    "primaryauth",
    "masterauth",
    "primaryuser",
    "masteruser",
    "aclfile",
    "user",
];
/// ... every TLS setting (TLS is the cluster's `spec.tls`) ...
pub const REFUSED_SETTING_PREFIX: &str = "tls-";
/// ... and `include`, which would read settings the operator never sees.
pub const REFUSED_INCLUDE: &str = "include";

/// Why a ValkeyConfig may not set `key` (in the settings map named `field`, e.g.
/// `spec.valkey`), or None when it may (see [`REFUSED_AUTH_SETTINGS`]). The CEL rules on the
/// settings map say the same (`crate::api::validation::refused_settings_rules`).
pub fn refused_setting(field: &str, key: &str) -> Option<String> {
    if REFUSED_AUTH_SETTINGS.contains(&key) {
        Some(format!(
            "{field}.{key} is managed by the operator: bind users with spec.acl"
        ))
    } else if key.starts_with(REFUSED_SETTING_PREFIX) {
        Some(format!(
            "{field}.{key} is managed by the operator: use spec.tls on the ValkeyCluster"
        ))
    } else if key == REFUSED_INCLUDE {
        Some(format!(
            "{field}.include would bypass the operator's settings and is not allowed"
        ))
    } else {
        None
    }
}

/// Is `key` a setting the operator owns (see [`FORCED_SETTINGS`])? Keys are compared as given:
/// the schema only admits lowercase keys, so `PORT` cannot sneak past this check.
pub fn is_forced_setting(key: &str) -> bool {
    FORCED_SETTINGS.contains(&key) || FORCED_SETTING_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Is `key` an annotation key reserved for the operator?
pub fn is_reserved_annotation(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

/// Pod readiness gate of every member: True only while the member holds its shard's data (a
/// primary owning slots, or a replica whose initial sync is done) or is a primary that joined
/// the cluster and waits for slots (a scale-out's new shard: clients are sent to it as soon as
/// a slot moves, so its DNS record, published once its pod is Ready, must exist first). The
/// operator sets it; the kubelet counts the pod Ready only with it, so the PodDisruptionBudget
/// allows the next eviction, and the client Service routes to the member, only once a
/// replacement has synced.
pub const CONDITION_HOLDS_DATA: &str = "valkey.gomomento.com/holds-data";
