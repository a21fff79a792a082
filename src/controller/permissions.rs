//! The operator's permissions, one entry per rule of its two ClusterRoles and of its Role in
//! its own namespace, each with the code path that needs it. `tests/rbac.rs` checks that the
//! chart's ClusterRole and Role grant exactly these (a verb added to the chart without a reason
//! here, or used in code without being granted, fails the test or the e2e suites), and
//! docs/security.md and docs/operations.md list them.

/// One rule: API groups, resources, the objects it is limited to, verbs, and why.
pub struct Permission {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    /// `resourceNames`: empty for every object of these resources.
    pub names: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub why: &'static str,
}

/// The ClusterRole `valkey-operator`, always bound cluster-wide: the cluster-scoped objects
/// (the menu, Nodes, volumes, StorageClasses, backup locations) and Events. What the clusters'
/// namespaces need is [`OPERATOR_TENANT_PERMISSIONS`]; what concerns the operator's own
/// namespace only, [`OPERATOR_NAMESPACE_PERMISSIONS`].
pub const OPERATOR_CLUSTER_PERMISSIONS: &[Permission] = &[
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyimages", "valkeyconfigs", "valkeyroles"],
        names: &[],
        verbs: &["list", "watch"],
        why: "the menu: watch caches of the resolver and the webhook (controller/run.rs, webhook/admission)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyimages"],
        names: &[],
        verbs: &["patch"],
        why: "deletion protection: the image-in-use finalizer added to an image a ValkeyConfig names and removed once none does (controller/image_protection.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &[
            "valkeyimages/status",
            "valkeyconfigs/status",
            "valkeyroles/status",
        ],
        names: &[],
        verbs: &["patch"],
        why: "status.observedGeneration of the menu: the generation the operator's caches hold (controller/menu_status.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["nodes"],
        names: &[],
        verbs: &["list", "watch"],
        why: "which Node objects exist (names only, a metadata watch): a member whose pod is bound to a deleted node is lost at once instead of after the pod garbage collector (cluster/observe.rs); and, only while a member cannot be scheduled for an untolerated taint, the nodes' taints, to name them in the status (cluster/taints.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["persistentvolumes"],
        names: &[],
        verbs: &["get"],
        why: "whether a durable member's volume is bound to a deleted node (its node affinity), so the member is lost with it at once (cluster/observe.rs)",
    },
    Permission {
        groups: &["storage.k8s.io"],
        resources: &["storageclasses"],
        names: &[],
        verbs: &["get"],
        why: "whether the volumes' class allows expansion before a claim is grown (cluster/volumes.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeybackuplocations"],
        names: &[],
        verbs: &["get"],
        why: "the location a backup names: endpoint, bucket and the names of its Secrets, handed to the backup or restore Job (controller/backup.rs, controller/restore.rs)",
    },
    Permission {
        groups: &["", "events.k8s.io"],
        resources: &["events"],
        names: &[],
        verbs: &["create", "patch"],
        why: "Events on state transitions (kube's recorder creates, then patches a series)",
    },
];

/// The ClusterRole `valkey-operator-tenants`: what the clusters' namespaces need. Bound in
/// every namespace (a ClusterRoleBinding) by default; with the chart's `watchNamespaces`, by a
/// RoleBinding in each namespace listed and in the operator's own (its backup Jobs' pods).
pub const OPERATOR_TENANT_PERMISSIONS: &[Permission] = &[
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters"],
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "the cluster controller watches them; the node controller reads its member's cluster",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters/status"],
        names: &[],
        verbs: &["patch"],
        why: "status (state, message, conditions, members) by server-side apply (cluster/status.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters/finalizers", "valkeynodes/finalizers"],
        names: &[],
        verbs: &["update"],
        why: "owner references with blockOwnerDeletion, where the OwnerReferencesPermissionEnforcement admission plugin runs",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeynodes"],
        names: &[],
        verbs: &["list", "watch", "create", "delete"],
        why: "members are created and retired, never changed (cluster/mod.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeynodes/status"],
        names: &[],
        verbs: &["patch"],
        why: "lifecycle, role, node id and refusal messages of members (cluster/status.rs, node/mod.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["pods"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "one pod per member, created once; podAnnotations patched live; deleted only to start again a member whose Valkey exited before it ever joined (node/mod.rs, node/start.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["persistentvolumeclaims"],
        names: &[],
        verbs: &["get", "list", "create", "patch", "delete"],
        why: "one volume claim per member of a config with storage, created once (node/mod.rs); grown, its retention set, and deleted when a retained member is retired (cluster/volumes.rs)",
    },
    Permission {
        groups: &["discovery.k8s.io"],
        resources: &["endpointslices"],
        names: &[],
        verbs: &["list"],
        why: "only while a TLS cluster has a member that owns no slots yet: whether the hostname it announces resolves (its address is ready in the client Service's EndpointSlices), so no slot moves there before clients can reach it by name (cluster/published.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["pods/status"],
        names: &[],
        verbs: &["patch"],
        why: "the holds-data readiness gate (cluster/mod.rs publish_holds_data)",
    },
    Permission {
        groups: &[""],
        resources: &["services"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "client and headless Services: checked to be ours, then server-side applied; one the cluster controls and no longer has, deleted (cluster/apply.rs)",
    },
    Permission {
        groups: &["policy"],
        resources: &["poddisruptionbudgets"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "the members' PDB: checked to be ours, then server-side applied; a stray of the cluster's, deleted (cluster/apply.rs)",
    },
    Permission {
        groups: &["networking.k8s.io"],
        resources: &["networkpolicies"],
        names: &[],
        verbs: &["get", "list", "create", "patch", "delete"],
        why: "the members' NetworkPolicy: checked to be ours, then server-side applied; a stray of the cluster's, listed and deleted (cluster/apply.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["configmaps"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch"],
        why: "each member's valkey.conf, server-side applied (node/mod.rs) after a get that refuses to touch a ConfigMap of that name the member did not create",
    },
    Permission {
        groups: &[""],
        resources: &["secrets"],
        names: &[],
        verbs: &["get", "create", "patch"],
        why: "in the clusters' namespaces: the ACL Secret <cluster>-acl and a TLS cluster's copy <cluster>-member-tls, checked to be ours (get) then server-side applied (create, patch) (cluster/apply.rs, cluster/tls.rs); the Secret spec.tls.secretRef names, read (cluster/tls.rs); a legacy copy <cluster>-operator of the operator's credentials, read then emptied by a patch, never deleted (cluster/credentials.rs). No delete: the operator's Secrets there go with their cluster (owner references)",
    },
    Permission {
        groups: &[""],
        resources: &["secrets"],
        names: &[],
        verbs: &["list", "watch"],
        why: "the cluster controller owns its Secrets (a watch selected by app.kubernetes.io/managed-by) and follow_tls_secrets watches Secrets' metadata so a renewed or restored TLS Secret is acted on at once (controller/run.rs). In every namespace the operator watches (all, or the chart's watchNamespaces: the way to keep the operator from reading every Secret of the Kubernetes cluster); RBAC cannot limit a list or watch to a label or to metadata",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeybackups"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "delete"],
        why: "the backup controller's watch of ValkeyBackups in the namespaces it watches (controller/backup.rs); a cluster's scheduled backups created as they come due, and those retention replaced deleted (controller/backup_schedule.rs); the backup a new cluster's spec.restoreFrom names, read by the restore controller and the webhook (controller/restore.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeybackups/status"],
        names: &[],
        verbs: &["patch"],
        why: "a backup's phase, shards, size and failure cause (controller/backup.rs write_status)",
    },
];

/// The Role in the operator's own namespace (the chart's release namespace, `POD_NAMESPACE` at
/// run time): what only that namespace needs.
pub const OPERATOR_NAMESPACE_PERMISSIONS: &[Permission] = &[
    Permission {
        groups: &["coordination.k8s.io"],
        resources: &["leases"],
        names: &[],
        verbs: &["get", "create", "patch"],
        why: "leader election: kube-lease-manager gets the Lease, creates it if missing and patches it to acquire, renew and release it; verify_still_leading gets it before acting (controller/leader.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["configmaps"],
        names: &[crate::settings::SETTINGS_CONFIGMAP],
        verbs: &["get"],
        why: "the operator's settings, read once at startup (settings.rs; a change takes a restart)",
    },
    Permission {
        groups: &[""],
        resources: &["secrets"],
        names: &[],
        verbs: &["get", "list", "create", "patch", "delete"],
        why: "the operator's credentials <namespace>.<cluster>.credentials: read, server-side applied (cluster/credentials.rs ensure_operator_secret), listed by label and deleted once their cluster is gone (sweep_credentials: no owner reference spans namespaces). The only Secrets the operator deletes",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeymeteringrecords"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "usage metering: one ValkeyMeteringRecord per cluster, created when the cluster is first seen, its finalizer removed and the record deleted when released (controller/metering.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeymeteringrecords/status"],
        names: &[],
        verbs: &["patch"],
        why: "the records' usage, advanced every minute by server-side apply (controller/metering.rs)",
    },
    Permission {
        groups: &["batch"],
        resources: &["jobs"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "delete"],
        why: "backup and restore Jobs: one per ValkeyBackup or restore attempt, created in the operator's namespace (never a tenant's: its object-store keys and the Valkey user's password would be readable there), watched until they end, then left to their TTL; one whose pod cannot start (a Secret missing, an image not pulled) is deleted so it never runs late (controller/jobs.rs)",
    },
];
