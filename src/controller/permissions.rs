//! The operator's cluster-wide permissions, one entry per rule of its ClusterRole, each with
//! the code path that needs it. `tests/rbac.rs` checks that the chart's ClusterRole grants
//! exactly these (a verb added to the chart without a reason here, or used in code without
//! being granted, fails the test or the e2e suites), and docs/operations.md lists them.

/// One ClusterRole rule: API groups, resources, verbs, and why.
pub struct Permission {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub why: &'static str,
}

pub const OPERATOR_CLUSTER_PERMISSIONS: &[Permission] = &[
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyimages", "valkeyconfigs", "valkeyroles"],
        verbs: &["list", "watch"],
        why: "the menu: watch caches of the resolver and the webhook (controller/run.rs, webhook/admission)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters"],
        verbs: &["get", "list", "watch"],
        why: "the cluster controller watches them; the node controller reads its member's cluster",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters/status"],
        verbs: &["patch"],
        why: "status (state, message, conditions, members) by server-side apply (cluster/status.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeyclusters/finalizers", "valkeynodes/finalizers"],
        verbs: &["update"],
        why: "owner references with blockOwnerDeletion, where the OwnerReferencesPermissionEnforcement admission plugin runs",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeynodes"],
        verbs: &["list", "watch", "create", "delete"],
        why: "members are created and retired, never changed (cluster/mod.rs)",
    },
    Permission {
        groups: &["valkey.gomomento.com"],
        resources: &["valkeynodes/status"],
        verbs: &["patch"],
        why: "lifecycle, role, node id and refusal messages of members (cluster/status.rs, node/mod.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["pods"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "one pod per member, created once; podAnnotations patched live; deleted only to start again a member whose Valkey exited before it ever joined (node/mod.rs, node/start.rs)",
    },
    Permission {
        groups: &[""],
        resources: &["pods/status"],
        verbs: &["patch"],
        why: "the holds-data readiness gate (cluster/mod.rs publish_holds_data)",
    },
    Permission {
        groups: &[""],
        resources: &["services"],
        verbs: &["get", "list", "watch", "create", "patch"],
        why: "client and headless Services: checked to be ours, then server-side applied",
    },
    Permission {
        groups: &["policy"],
        resources: &["poddisruptionbudgets"],
        verbs: &["get", "list", "watch", "create", "patch"],
        why: "the members' PDB: checked to be ours, then server-side applied",
    },
    Permission {
        groups: &["networking.k8s.io"],
        resources: &["networkpolicies"],
        verbs: &["get", "create", "patch"],
        why: "the members' NetworkPolicy: checked to be ours, then server-side applied",
    },
    Permission {
        groups: &[""],
        resources: &["configmaps"],
        verbs: &["get", "list", "watch", "create", "patch"],
        why: "each member's valkey.conf, server-side applied (node/mod.rs) after a get that refuses to touch a ConfigMap of that name the member did not create",
    },
    Permission {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        why: "the ACL Secret; the copy of a TLS cluster's certificate members mount (the Secret tls.secretRef names is read, and Secrets' metadata watched to follow renewals); the operator's credentials in its namespace (legacy copies deleted, orphans swept)",
    },
    Permission {
        groups: &["", "events.k8s.io"],
        resources: &["events"],
        verbs: &["create", "patch"],
        why: "Events on state transitions (kube's recorder creates, then patches a series)",
    },
];
