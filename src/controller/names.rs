//! Names and labels of everything the operator creates for a ValkeyCluster. One place, so the
//! builders, the controllers and the tests agree.

use std::collections::BTreeMap;

use crate::api::constants::{
    APP_NAME, LABEL_APP_COMPONENT, LABEL_APP_INSTANCE, LABEL_APP_MANAGED_BY, LABEL_APP_NAME,
    LABEL_CLUSTER, LABEL_NODE, LABEL_SHARD, MANAGER,
};

/// Keys of the operator Secret.
pub const OPERATOR_PASSWORD_KEY: &str = "operator-password";
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";
pub const BACKUP_PASSWORD_KEY: &str = "backup-password";
pub const RESTORE_PASSWORD_KEY: &str = "restore-password";
/// Key of the metrics exporters' password, in the operator Secret and in the ACL Secret the
/// exporters read it from.
pub const METRICS_PASSWORD_KEY: &str = "metrics-password";

/// `app.kubernetes.io/component` of backup Jobs and their pods; the members' NetworkPolicy
/// lets pods with it in the operator's namespace reach the client port.
pub const BACKUP_COMPONENT: &str = "backup";

/// Client Service: `<cluster>`.
pub fn client_service(cluster: &str) -> String {
    cluster.to_string()
}

/// A member's own Service giving it an address outside the Kubernetes cluster
/// (`spec.externalAccess`): `<member>-ext`.
pub fn external_service(member: &str) -> String {
    format!("{member}-ext")
}

/// Headless Service giving each member a stable DNS name: `<cluster>-nodes`.
pub fn headless_service(cluster: &str) -> String {
    format!("{cluster}-nodes")
}

/// Secret with the ACL file and replication credentials, mounted into every pod.
pub fn acl_secret(cluster: &str) -> String {
    format!("{cluster}-acl")
}

/// The operator's copy of a TLS cluster's certificate (`spec.tls.secretRef`, validated), the
/// Secret every member mounts: `<cluster>-member-tls`. Its name never changes, so pointing
/// `secretRef` at another Secret changes its content (a live rotation), never the members.
/// Not `<cluster>-tls`, the name users commonly give their own certificate's Secret.
pub fn tls_secret(cluster: &str) -> String {
    format!("{cluster}-member-tls")
}

/// A member's PersistentVolumeClaim: `<member>-data-<first 8 of the ValkeyNode's uid>`. The
/// uid part keeps a volume retained from a deleted cluster from ever being taken by a new
/// cluster of the same name (its members have the same names, never the same uids).
pub fn member_volume(member: &str, member_uid: &str) -> String {
    let uid: String = member_uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("{member}-data-{uid}")
}

/// The DNS domain of the Kubernetes cluster, as in the certificate names TLS clusters need.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// `<cluster>.<namespace>.svc.cluster.local`: the client Service's name, one of the two names a
/// TLS cluster's certificate must carry, and the name the operator verifies members against.
pub fn cluster_hostname(cluster: &str, namespace: &str) -> String {
    format!("{cluster}.{namespace}.svc.{CLUSTER_DOMAIN}")
}

/// `<member>.<cluster>.<namespace>.svc.cluster.local`: the hostname a TLS cluster's member
/// announces, covered by the certificate's wildcard `*.<cluster>.<namespace>.svc.cluster.local`.
/// It resolves because TLS members' pods have the client Service as their subdomain.
pub fn member_hostname(member: &str, cluster: &str, namespace: &str) -> String {
    format!("{member}.{}", cluster_hostname(cluster, namespace))
}

/// Where clusters created by earlier versions kept the operator's passwords (in the cluster's
/// namespace); moved to [`credentials_secret`] on the next reconcile.
pub fn operator_secret(cluster: &str) -> String {
    format!("{cluster}-operator")
}

/// Secret with the passwords of the operator's own ACL users (generated once), in the
/// operator's namespace: `<namespace>.<cluster>.credentials` (a DNS subdomain; both parts are
/// DNS labels, so no two clusters share one).
pub fn credentials_secret(namespace: &str, cluster: &str) -> String {
    format!("{namespace}.{cluster}.credentials")
}

/// PodDisruptionBudget: `<cluster>`.
pub fn pdb(cluster: &str) -> String {
    cluster.to_string()
}

/// ConfigMap with one member's valkey.conf.
pub fn member_config(node: &str) -> String {
    format!("{node}-config")
}

/// Labels on every object of a cluster.
pub fn cluster_labels(cluster: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_APP_NAME.to_string(), APP_NAME.to_string()),
        (LABEL_APP_INSTANCE.to_string(), cluster.to_string()),
        (LABEL_APP_COMPONENT.to_string(), component.to_string()),
        (LABEL_APP_MANAGED_BY.to_string(), MANAGER.to_string()),
        (LABEL_CLUSTER.to_string(), cluster.to_string()),
    ])
}

/// Labels selecting a cluster's member pods.
pub fn member_selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_CLUSTER.to_string(), cluster.to_string()),
        (LABEL_APP_COMPONENT.to_string(), "member".to_string()),
    ])
}

/// Labels of one member (ValkeyNode and its pod).
pub fn member_labels(cluster: &str, shard: usize, node: &str) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster, "member");
    labels.insert(LABEL_SHARD.to_string(), shard.to_string());
    labels.insert(LABEL_NODE.to_string(), node.to_string());
    labels
}

/// `k=v,k=v` selector string for list/watch calls.
pub fn selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
