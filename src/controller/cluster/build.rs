//! Build step of the ValkeyCluster pipeline (pure): desired ValkeyNode specs, Services,
//! PodDisruptionBudget and Secrets from the cluster and its resolved config. No client here.

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::ObjectMeta;
use serde_json::json;

use crate::api::constants::{CLIENT_PORT, CLUSTER_BUS_PORT, LABEL_SPEC_HASH};
use crate::api::{NodePlacement, ValkeyCluster, ValkeyNode, ValkeyNodeSpec, ZoneSpread};
use crate::controller::names;
use crate::resolve::ResolvedConfig;
use crate::resolve::acl::OperatorCredentials;
use crate::resolve::conf::{
    ACL_FILE_KEY, REPLICATION_AUTH_KEY, render_replication_auth, sha256_hex,
};

/// Labels of a credentials Secret naming its cluster (there is no cross-namespace owner).
pub const CREDENTIALS_NAMESPACE_LABEL: &str = "valkey.gomomento.com/cluster-namespace";
pub const CREDENTIALS_UID_LABEL: &str = "valkey.gomomento.com/cluster-uid";

/// Keys of the operator Secret.
pub const OPERATOR_PASSWORD_KEY: &str = "operator-password";
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";

pub fn owner_reference(cluster: &ValkeyCluster) -> OwnerReference {
    cluster
        .controller_owner_ref(&())
        .expect("a ValkeyCluster read from the API has a uid")
}

fn meta(cluster: &ValkeyCluster, name: String, component: &str) -> ObjectMeta {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    ObjectMeta {
        name: Some(name),
        namespace: cluster.metadata.namespace.clone(),
        labels: Some(names::cluster_labels(&cluster_name, component)),
        owner_references: Some(vec![owner_reference(cluster)]),
        ..Default::default()
    }
}

/// The fully resolved, immutable spec every member of this cluster should run with.
pub fn desired_node_spec(
    cluster: &ValkeyCluster,
    resolved: &ResolvedConfig,
    default_zone_spread: ZoneSpread,
) -> ValkeyNodeSpec {
    let placement = cluster.spec.placement.clone().unwrap_or_default();
    ValkeyNodeSpec {
        cluster_name: cluster.metadata.name.clone().unwrap_or_default(),
        shard: 0,
        role_hint: None,
        config_ref: cluster.spec.config_ref.clone(),
        image_ref: resolved.image_ref.clone(),
        image: resolved.image.image_reference(),
        version: resolved.image.version.clone(),
        resources: resolved.resources.clone(),
        valkey: resolved.valkey.clone(),
        config_hash: None,
        placement: NodePlacement {
            zones: placement.zones,
            node_selector: placement.node_selector,
            zone_spread: Some(placement.zone_spread.unwrap_or(default_zone_spread)),
        },
        // The operator's copy, whatever Secret the cluster names: changing `secretRef` is a
        // rotation of the copy's content, never a rolling replacement.
        tls_secret_ref: cluster
            .spec
            .tls
            .as_ref()
            .map(|_| names::tls_secret(cluster.metadata.name.as_deref().unwrap_or_default())),
        restart_in_place: Some(restarts_in_place(
            &resolved.valkey,
            cluster.spec.replicas_per_shard,
        )),
    }
}

/// A member may come back in place after its process died only if it keeps its data
/// (`appendonly yes`: every acknowledged write is in the append-only file), or if its shard has
/// no replica: then nobody can copy an empty dataset from it, and restarting is the only way
/// the shard serves again. Otherwise a restarted primary would come back empty under its old
/// node id and its replicas would resynchronise from it, emptying the shard.
pub fn restarts_in_place(
    settings: &std::collections::BTreeMap<String, String>,
    replicas_per_shard: i32,
) -> bool {
    let appendonly = settings
        .get("appendonly")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("yes"));
    appendonly || replicas_per_shard <= 0
}

/// Hash of what makes two members interchangeable: everything in the spec except the shard
/// and role hint, and except `zoneSpread`, which only affects pods created later (PRODUCT.md).
/// A member whose hash differs from the desired one is replaced, never mutated.
pub fn spec_hash(spec: &ValkeyNodeSpec) -> String {
    let mut canonical = spec.clone();
    canonical.shard = 0;
    canonical.role_hint = None;
    canonical.placement.zone_spread = None;
    let json = serde_json::to_string(&canonical).expect("node specs serialize");
    sha256_hex(json)[..12].to_string()
}

/// A ValkeyNode for `shard` named `name`.
pub fn node(
    cluster: &ValkeyCluster,
    name: &str,
    shard: usize,
    spec: &ValkeyNodeSpec,
) -> ValkeyNode {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let mut spec = spec.clone();
    spec.shard = shard as i32;
    let mut labels = names::member_labels(&cluster_name, shard, name);
    labels.insert(LABEL_SPEC_HASH.to_string(), spec_hash(&spec));
    let mut node = ValkeyNode::new(name, spec);
    node.metadata.namespace = cluster.metadata.namespace.clone();
    node.metadata.labels = Some(labels);
    node.metadata.owner_references = Some(vec![owner_reference(cluster)]);
    node
}

fn ports() -> serde_json::Value {
    json!([
        {"name": "valkey", "port": CLIENT_PORT, "targetPort": CLIENT_PORT, "protocol": "TCP"},
        {"name": "cluster-bus", "port": CLUSTER_BUS_PORT, "targetPort": CLUSTER_BUS_PORT, "protocol": "TCP"},
    ])
}

/// Service clients connect to (any member answers with cluster redirections).
pub fn client_service(cluster: &ValkeyCluster) -> Service {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: meta(cluster, names::client_service(&name), "client"),
        spec: Some(
            serde_json::from_value(json!({
                "selector": names::member_selector(&name),
                "ports": [{"name": "valkey", "port": CLIENT_PORT, "targetPort": CLIENT_PORT, "protocol": "TCP"}],
            }))
            .expect("valid service spec"),
        ),
        status: None,
    }
}

/// Headless Service: a DNS name per member, published before members are ready (they must
/// find each other to become ready).
pub fn headless_service(cluster: &ValkeyCluster) -> Service {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: meta(cluster, names::headless_service(&name), "members"),
        spec: Some(
            serde_json::from_value(json!({
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": names::member_selector(&name),
                "ports": ports(),
            }))
            .expect("valid service spec"),
        ),
        status: None,
    }
}

/// The members' PodDisruptionBudget: at most one member of the cluster voluntarily disrupted
/// (evicted by `kubectl drain`, the cluster autoscaler, ...) at a time, and none while one is
/// already missing or syncing.
///
/// An integer `minAvailable`: the disruption controller needs the pods' controller to
/// implement the scale subresource for `maxUnavailable` (or a percentage), and ValkeyNode does
/// not; with `maxUnavailable` the PDB reports `SyncFailed` and allows no eviction at all, so
/// every drain hangs. Counted against the desired members (`shards x (1 + replicasPerShard)`):
/// a surge member of a rollout is one more healthy pod, a missing one is one fewer.
///
/// A cluster without replicas has no second copy of any shard: evicting a member would lose its
/// shard's data, so nothing is evicted (`minAvailable` = every member); drains wait until the
/// cluster has replicas (`replicasPerShard: 1`).
pub fn pdb(cluster: &ValkeyCluster) -> PodDisruptionBudget {
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    PodDisruptionBudget {
        metadata: meta(cluster, names::pdb(&name), "members"),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(pdb_min_available(
                cluster.spec.shards,
                cluster.spec.replicas_per_shard,
            ))),
            selector: Some(LabelSelector {
                match_labels: Some(names::member_selector(&name)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// Healthy members the PDB keeps: all but one, or all when shards have no replica.
pub fn pdb_min_available(shards: i32, replicas_per_shard: i32) -> i32 {
    let desired = shards.max(0) * (1 + replicas_per_shard.max(0));
    if replicas_per_shard > 0 {
        desired - 1
    } else {
        desired
    }
}

/// The members' NetworkPolicy: the cluster bus (16379) and the client port (6379, used for
/// replication too) only between this cluster's members; the client port also from the
/// operator's pods (in `operator_namespace`) and from the clients `clients_from` allows. None
/// when the platform team manages policies itself (`clientsFrom: unrestricted`).
pub fn network_policy(
    cluster: &ValkeyCluster,
    operator_namespace: &str,
    clients_from: crate::settings::ClientsFrom,
) -> Option<k8s_openapi::api::networking::v1::NetworkPolicy> {
    use crate::settings::ClientsFrom;
    let clients = match clients_from {
        ClientsFrom::SameNamespace => json!({"podSelector": {}}),
        ClientsFrom::AnyNamespace => json!({"namespaceSelector": {}}),
        ClientsFrom::Unrestricted => return None,
    };
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let members = json!({"podSelector": {"matchLabels": names::member_selector(&name)}});
    let operator = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "valkey-operator"}},
    });
    let port = |p: u16| json!({"protocol": "TCP", "port": p});
    let spec = json!({
        "podSelector": {"matchLabels": names::member_selector(&name)},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [members], "ports": [port(CLIENT_PORT), port(CLUSTER_BUS_PORT)]},
            {"from": [operator, clients], "ports": [port(CLIENT_PORT)]},
        ],
    });
    Some(k8s_openapi::api::networking::v1::NetworkPolicy {
        metadata: meta(cluster, names::pdb(&name), "members"),
        spec: Some(serde_json::from_value(spec).expect("a valid NetworkPolicy spec")),
    })
}

/// The Secret holding the operator's generated passwords.
/// The Secret holding the operator's generated passwords for `cluster`, in the operator's
/// namespace: tenants who may read Secrets in their own namespace (the aggregated `edit` and
/// `admin` roles) never see the password of a user that can rewrite ACLs, and cannot delete it
/// (a new password would lock the operator out of the running members). A Secret cannot be
/// owned across namespaces: it carries the cluster's namespace, name and uid as labels, and
/// the operator deletes it once that cluster is gone.
pub fn credentials_secret(
    cluster: &ValkeyCluster,
    operator_namespace: &str,
    credentials: &OperatorCredentials,
) -> Secret {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let mut labels = names::cluster_labels(&name, "credentials");
    labels.insert(CREDENTIALS_NAMESPACE_LABEL.into(), namespace.clone());
    labels.insert(
        CREDENTIALS_UID_LABEL.into(),
        cluster.metadata.uid.clone().unwrap_or_default(),
    );
    Secret {
        metadata: ObjectMeta {
            name: Some(names::credentials_secret(&namespace, &name)),
            namespace: Some(operator_namespace.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(
            [
                (
                    OPERATOR_PASSWORD_KEY.to_string(),
                    credentials.operator_password.clone(),
                ),
                (
                    REPLICATION_PASSWORD_KEY.to_string(),
                    credentials.replication_password.clone(),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The ACL Secret mounted into every member: the ACL file and the replication credentials.
pub fn acl_secret(
    cluster: &ValkeyCluster,
    acl_file: &str,
    credentials: &OperatorCredentials,
) -> Secret {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Secret {
        metadata: meta(cluster, names::acl_secret(&name), "acl"),
        type_: Some("Opaque".into()),
        string_data: Some(
            [
                (ACL_FILE_KEY.to_string(), acl_file.to_string()),
                (
                    REPLICATION_AUTH_KEY.to_string(),
                    render_replication_auth(
                        crate::api::constants::REPLICATION_ACL_USERNAME,
                        &credentials.replication_password,
                    ),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The operator's copy of a TLS cluster's validated certificate, `<cluster>-member-tls`, the
/// Secret every member mounts (see `tls.rs`).
pub fn tls_secret(
    cluster: &ValkeyCluster,
    certificate: &crate::resolve::tls::ServedCertificate,
) -> Secret {
    use crate::resolve::conf::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
    use k8s_openapi::ByteString;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Secret {
        metadata: meta(cluster, names::tls_secret(&name), "tls"),
        type_: Some("kubernetes.io/tls".into()),
        data: Some(std::collections::BTreeMap::from([
            (
                TLS_CERT_KEY.to_string(),
                ByteString(certificate.cert_pem.clone()),
            ),
            (
                TLS_KEY_KEY.to_string(),
                ByteString(certificate.key_pem.clone()),
            ),
            (
                TLS_CA_KEY.to_string(),
                ByteString(certificate.ca_pem.clone()),
            ),
        ])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Resources, ValkeyClusterSpec, ValkeyImageSpec};
    use std::collections::BTreeMap;

    fn cluster() -> ValkeyCluster {
        let mut c = ValkeyCluster::new(
            "my-cluster",
            ValkeyClusterSpec {
                config_ref: "standard".into(),
                shards: 3,
                replicas_per_shard: 1,
                acl: vec![],
                tls: None,
                placement: None,
                pod_annotations: BTreeMap::new(),
            },
        );
        c.metadata.namespace = Some("my-app".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn resolved(version: &str) -> ResolvedConfig {
        ResolvedConfig {
            chain: vec!["standard".into()],
            image_ref: "valkey-9-0".into(),
            image: ValkeyImageSpec {
                repository: "valkey/valkey".into(),
                tag: version.into(),
                digest: None,
                version: version.into(),
            },
            resources: Resources {
                cpu: Some("1".into()),
                memory: Some("2Gi".into()),
            },
            valkey: BTreeMap::from([("maxmemory".to_string(), "1500mb".to_string())]),
            acl: vec![],
        }
    }

    #[test]
    fn node_spec_carries_the_resolved_image_resources_and_settings() {
        let spec = desired_node_spec(&cluster(), &resolved("9.0.0"), ZoneSpread::BestEffort);
        assert_eq!(spec.image, "valkey/valkey:9.0.0");
        assert_eq!(spec.version, "9.0.0");
        assert_eq!(spec.resources.memory.as_deref(), Some("2Gi"));
        assert_eq!(spec.valkey["maxmemory"], "1500mb");
        assert_eq!(spec.placement.zone_spread, Some(ZoneSpread::BestEffort));
    }

    #[test]
    fn only_members_that_keep_their_data_or_have_no_replica_restart_in_place() {
        let spec = desired_node_spec(&cluster(), &resolved("9.0.0"), ZoneSpread::BestEffort);
        assert_eq!(
            spec.restart_in_place,
            Some(false),
            "default settings, 1 replica"
        );
        let aof = BTreeMap::from([("appendonly".to_string(), "Yes".to_string())]);
        assert!(restarts_in_place(&aof, 1));
        assert!(restarts_in_place(&BTreeMap::new(), 0));
        let no = BTreeMap::from([("appendonly".to_string(), "no".to_string())]);
        assert!(!restarts_in_place(&no, 2));
    }

    #[test]
    fn pointing_tls_at_another_secret_changes_no_member_spec() {
        let with = |secret: &str| {
            let mut c = cluster();
            c.spec.tls = Some(crate::api::TlsSpec {
                secret_ref: secret.into(),
            });
            desired_node_spec(&c, &resolved("9.1.2"), ZoneSpread::BestEffort)
        };
        let (a, b) = (with("cert-2025"), with("cert-2026"));
        assert_eq!(
            a, b,
            "members mount the operator's copy, whatever its source"
        );
        assert_eq!(a.tls_secret_ref.as_deref(), Some("my-cluster-member-tls"));
        assert_eq!(spec_hash(&a), spec_hash(&b));
        let plain = desired_node_spec(&cluster(), &resolved("9.1.2"), ZoneSpread::BestEffort);
        assert_eq!(plain.tls_secret_ref, None);
    }

    #[test]
    fn spec_hash_changes_with_the_image_but_not_with_shard_or_zone_spread() {
        let a = desired_node_spec(&cluster(), &resolved("9.0.0"), ZoneSpread::BestEffort);
        let b = desired_node_spec(&cluster(), &resolved("9.1.2"), ZoneSpread::BestEffort);
        assert_ne!(spec_hash(&a), spec_hash(&b));
        let mut c = a.clone();
        c.shard = 7;
        c.placement.zone_spread = Some(ZoneSpread::Required);
        assert_eq!(spec_hash(&a), spec_hash(&c));
    }

    #[test]
    fn nodes_are_owned_by_the_cluster_and_labelled() {
        let spec = desired_node_spec(&cluster(), &resolved("9.0.0"), ZoneSpread::BestEffort);
        let n = node(&cluster(), "my-cluster-2-0", 2, &spec);
        assert_eq!(n.spec.shard, 2);
        let labels = n.metadata.labels.unwrap();
        assert_eq!(labels["valkey.gomomento.com/cluster"], "my-cluster");
        assert_eq!(labels["valkey.gomomento.com/shard"], "2");
        assert_eq!(labels[LABEL_SPEC_HASH], spec_hash(&spec));
        let owner = &n.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.kind, "ValkeyCluster");
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn the_pdb_keeps_all_members_but_one_with_an_integer_min_available() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let spec = pdb(&cluster()).spec.unwrap();
        // maxUnavailable needs a scale subresource ValkeyNode does not have: never set it.
        assert_eq!(spec.max_unavailable, None);
        assert_eq!(
            spec.min_available,
            Some(IntOrString::Int(5)),
            "3 x (1 + 1) - 1"
        );
        assert_eq!(
            spec.selector.unwrap().match_labels.unwrap(),
            names::member_selector("my-cluster")
        );
        assert_eq!(pdb_min_available(4, 2), 11);
        // Without replicas an eviction would lose a shard: nothing is evicted.
        assert_eq!(pdb_min_available(3, 0), 3);
        assert_eq!(pdb_min_available(1, 1), 1);
    }

    #[test]
    fn the_network_policy_keeps_the_bus_among_members_and_lets_clients_and_the_operator_in() {
        use crate::settings::ClientsFrom;
        let np = network_policy(&cluster(), "ops", ClientsFrom::SameNamespace).unwrap();
        let spec = serde_json::to_value(np.spec.unwrap()).unwrap();
        let member = names::member_selector("my-cluster");
        assert_eq!(spec["podSelector"]["matchLabels"], json!(member));
        let rules = spec["ingress"].as_array().unwrap();
        // Members among themselves: client port (replication) and bus.
        assert_eq!(
            rules[0]["from"][0]["podSelector"]["matchLabels"],
            json!(member)
        );
        let ports: Vec<i64> = rules[0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_i64().unwrap())
            .collect();
        assert_eq!(ports, vec![6379, 16379]);
        // The bus is nowhere else.
        assert_eq!(
            rules[1]["ports"],
            json!([{"protocol": "TCP", "port": 6379}])
        );
        assert_eq!(
            rules[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "ops"
        );
        assert_eq!(
            rules[1]["from"][1],
            json!({"podSelector": {}}),
            "same namespace"
        );
        let any = network_policy(&cluster(), "ops", ClientsFrom::AnyNamespace).unwrap();
        let any = serde_json::to_value(any.spec.unwrap()).unwrap();
        assert_eq!(
            any["ingress"][1]["from"][1],
            json!({"namespaceSelector": {}})
        );
        assert!(network_policy(&cluster(), "ops", ClientsFrom::Unrestricted).is_none());
    }

    #[test]
    fn services_select_member_pods() {
        let headless = headless_service(&cluster());
        assert_eq!(headless.metadata.name.as_deref(), Some("my-cluster-nodes"));
        let spec = headless.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            spec.selector.unwrap()["valkey.gomomento.com/cluster"],
            "my-cluster"
        );
        assert_eq!(
            client_service(&cluster()).spec.unwrap().ports.unwrap()[0].port,
            6379
        );
    }

    #[test]
    fn acl_secret_holds_the_file_and_replication_auth() {
        let creds = OperatorCredentials {
            operator_password: "o".into(),
            replication_password: "r".into(),
        };
        let s = acl_secret(&cluster(), "user x on\n", &creds);
        let data = s.string_data.unwrap();
        assert_eq!(data[ACL_FILE_KEY], "user x on\n");
        assert!(data[REPLICATION_AUTH_KEY].contains("masterauth r"));
    }
}
