//! Build step of the ValkeyCluster pipeline (pure): desired ValkeyNode specs, Services,
//! PodDisruptionBudget and Secrets from the cluster and its resolved config. No client here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use crate::api::constants::{
    CLIENT_PORT, CLUSTER_BUS_PORT, LABEL_APP_COMPONENT, LABEL_APP_MANAGED_BY, LABEL_SPEC_HASH,
    MANAGER,
};
use crate::api::metrics::{EXPORTER_PORT, LabelsSelector, Scraper};
use crate::api::validation::desired_members;
use crate::api::{NodePlacement, ValkeyCluster, ValkeyNode, ValkeyNodeSpec, ZoneSpread};
use crate::controller::names::{
    self, BACKUP_PASSWORD_KEY, METRICS_PASSWORD_KEY, OPERATOR_PASSWORD_KEY,
    REPLICATION_PASSWORD_KEY, RESTORE_PASSWORD_KEY,
};
use crate::controller::owner::{BuildError, controller_owner};
use crate::resolve::ResolvedConfig;
use crate::resolve::acl::OperatorCredentials;
use crate::resolve::conf::{
    ACL_FILE_KEY, REPLICATION_AUTH_KEY, render_replication_auth, sha256_hex,
};

/// Labels of a credentials Secret naming its cluster (there is no cross-namespace owner).
pub const CREDENTIALS_NAMESPACE_LABEL: &str = "valkey.gomomento.com/cluster-namespace";
pub const CREDENTIALS_UID_LABEL: &str = "valkey.gomomento.com/cluster-uid";

fn meta(cluster: &ValkeyCluster, name: String, component: &str) -> Result<ObjectMeta, BuildError> {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    Ok(ObjectMeta {
        name: Some(name),
        namespace: cluster.metadata.namespace.clone(),
        labels: Some(names::cluster_labels(&cluster_name, component)),
        owner_references: Some(vec![controller_owner(cluster)?]),
        ..Default::default()
    })
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
        image_pull_secrets: resolved.image.pull_secret_names(),
        version: resolved.image.version.clone(),
        resources: resolved.resources.clone(),
        valkey: resolved.valkey.clone(),
        config_hash: None,
        placement: NodePlacement {
            zones: placement.zones,
            node_selector: placement.node_selector,
            zone_spread: Some(placement.zone_spread.unwrap_or(default_zone_spread)),
            tolerations: resolved.scheduling.tolerations.clone(),
            priority_class_name: resolved.scheduling.priority_class_name.clone(),
            node_affinity: resolved.scheduling.node_affinity.clone(),
            topology_spread: resolved.scheduling.topology_spread.clone(),
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
        storage: resolved.storage.clone(),
        exporter: resolved.metrics.as_ref().map(|m| m.member_exporter()),
        external: cluster
            .spec
            .external_access
            .as_ref()
            .map(|access| access.service_type),
    }
}

/// A member may come back in place after its process died only if it keeps its data
/// (`appendonly yes`: every acknowledged write is in the append-only file), or if its shard has
/// no replica: then nobody can copy an empty dataset from it, and restarting is the only way
/// the shard serves again. Otherwise a restarted primary would come back empty under its old
/// node id and its replicas would resynchronise from it, emptying the shard.
pub fn restarts_in_place(settings: &BTreeMap<String, String>, replicas_per_shard: i32) -> bool {
    let appendonly = settings
        .get("appendonly")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("yes"));
    appendonly || replicas_per_shard <= 0
}

/// Hash of what makes two members interchangeable: everything in the spec except the shard
/// and role hint, except `zoneSpread`, which only affects pods created later (PRODUCT.md), and
/// except the storage size and retention.
/// A member whose hash differs from the desired one is replaced, never mutated.
pub fn spec_hash(spec: &ValkeyNodeSpec) -> String {
    let mut canonical = spec.clone();
    canonical.shard = 0;
    canonical.role_hint = None;
    canonical.placement.zone_spread = None;
    // A volume grows in place and its retention is a property of the claim: neither
    // replaces a member (the cluster controller applies both to the claims live).
    if let Some(storage) = canonical.storage.as_mut() {
        storage.size.clear();
        storage.when_deleted = None;
    }
    // Settings Valkey changes at runtime are set live (`live` step): only their names count.
    canonical.valkey = crate::resolve::live::without_live_values(&spec.version, &spec.valkey);
    let json = serde_json::to_string(&canonical).expect("node specs serialize");
    sha256_hex(json)[..12].to_string()
}

/// A ValkeyNode for `shard` named `name`.
pub fn node(
    cluster: &ValkeyCluster,
    name: &str,
    shard: usize,
    spec: &ValkeyNodeSpec,
) -> Result<ValkeyNode, BuildError> {
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let mut spec = spec.clone();
    spec.shard = shard as i32;
    let mut labels = names::member_labels(&cluster_name, shard, name);
    labels.insert(LABEL_SPEC_HASH.to_string(), spec_hash(&spec));
    let mut node = ValkeyNode::new(name, spec);
    node.metadata.namespace = cluster.metadata.namespace.clone();
    node.metadata.labels = Some(labels);
    node.metadata.owner_references = Some(vec![controller_owner(cluster)?]);
    Ok(node)
}

/// A TCP Service port forwarding to the same port on the members.
fn service_port(name: &str, port: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: port.into(),
        target_port: Some(IntOrString::Int(port.into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// Service clients connect to (any member answers with cluster redirections).
pub fn client_service(cluster: &ValkeyCluster) -> Result<Service, BuildError> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Ok(Service {
        metadata: meta(cluster, names::client_service(&name), "client")?,
        spec: Some(ServiceSpec {
            selector: Some(names::member_selector(&name)),
            ports: Some(vec![service_port("valkey", CLIENT_PORT)]),
            ..Default::default()
        }),
        status: None,
    })
}

/// Headless Service: a DNS name per member, published before members are ready (they must
/// find each other to become ready).
pub fn headless_service(cluster: &ValkeyCluster) -> Result<Service, BuildError> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Ok(Service {
        metadata: meta(cluster, names::headless_service(&name), "members")?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(names::member_selector(&name)),
            ports: Some(vec![
                service_port("valkey", CLIENT_PORT),
                service_port("cluster-bus", CLUSTER_BUS_PORT),
            ]),
            ..Default::default()
        }),
        status: None,
    })
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
pub fn pdb(cluster: &ValkeyCluster) -> Result<PodDisruptionBudget, BuildError> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Ok(PodDisruptionBudget {
        metadata: meta(cluster, names::pdb(&name), "members")?,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(pdb_min_available(
                cluster.target_shards(),
                cluster.spec.replicas_per_shard,
            ))),
            selector: Some(match_labels(names::member_selector(&name))),
            ..Default::default()
        }),
        status: None,
    })
}

/// A label selector on exactly these labels.
fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    }
}

/// Healthy members the PDB keeps: all but one, or all when shards have no replica. Counted in
/// `i64` (`shards x (1 + replicasPerShard)` overflows `i32` for a spec the API server should
/// have refused) and capped at `i32::MAX`: every member, as far as the field can say it.
pub fn pdb_min_available(shards: i32, replicas_per_shard: i32) -> i32 {
    let desired = desired_members(shards, replicas_per_shard);
    let keep = if replicas_per_shard > 0 {
        (desired - 1).max(0)
    } else {
        desired
    };
    i32::try_from(keep).unwrap_or(i32::MAX)
}

/// Every object the operator applies for a cluster as a whole (members and their pods aside).
/// Where it is applied it is destructured without `..`, so a kind added here does not compile
/// until it is applied; a kind that can be absent must then also be deleted when it is (every
/// object here carries the cluster as its controlling owner, which is what makes a delete of
/// one safe: the operator only ever deletes what it made).
#[derive(Debug)]
pub struct ClusterObjects {
    pub acl_secret: Secret,
    pub headless_service: Service,
    pub client_service: Service,
    pub pdb: PodDisruptionBudget,
    pub network_policy: NetworkPolicy,
}

/// What the cluster-wide objects are made from beyond the cluster itself.
pub struct ObjectInputs<'a> {
    pub acl_file: &'a str,
    pub credentials: &'a OperatorCredentials,
    /// The metrics settings' scrapers when the config turns metrics on.
    pub scrapers: Option<&'a [Scraper]>,
    pub operator_namespace: &'a str,
    pub clients_from: crate::settings::ClientsFrom,
}

/// The cluster-wide objects of `cluster`.
pub fn cluster_objects(
    cluster: &ValkeyCluster,
    inputs: &ObjectInputs<'_>,
) -> Result<ClusterObjects, BuildError> {
    let metrics = inputs.scrapers.is_some();
    Ok(ClusterObjects {
        acl_secret: acl_secret(cluster, inputs.acl_file, inputs.credentials, metrics)?,
        headless_service: headless_service(cluster)?,
        client_service: client_service(cluster)?,
        pdb: pdb(cluster)?,
        network_policy: network_policy(
            cluster,
            inputs.operator_namespace,
            inputs.clients_from,
            inputs.scrapers.unwrap_or_default(),
        )?,
    })
}

/// The members' NetworkPolicy: the cluster bus (16379) and the client port (6379, used for
/// replication too) only between this cluster's members; the client port also from the
/// operator's pods (in `operator_namespace`) and from the clients `clients_from` allows
/// (`clientsFrom: unrestricted` opens the client port to all, the bus stays closed).
pub fn network_policy(
    cluster: &ValkeyCluster,
    operator_namespace: &str,
    clients_from: crate::settings::ClientsFrom,
    scrapers: &[Scraper],
) -> Result<NetworkPolicy, BuildError> {
    use crate::settings::ClientsFrom;
    // Unrestricted opens the client port to every source, never the cluster bus: a stranger
    // on 16379 could MEET members into another cluster or forge gossip.
    // Clients outside the Kubernetes cluster come through each member's external Service,
    // from addresses no policy can name: the client port is open to every source then.
    let clients_from = if cluster.spec.external_access.is_some() {
        ClientsFrom::Unrestricted
    } else {
        clients_from
    };
    let clients = match clients_from {
        ClientsFrom::SameNamespace => Some(NetworkPolicyPeer {
            pod_selector: Some(LabelSelector::default()),
            ..Default::default()
        }),
        ClientsFrom::AnyNamespace => Some(NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector::default()),
            ..Default::default()
        }),
        ClientsFrom::Unrestricted => None,
    };
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let members = NetworkPolicyPeer {
        pod_selector: Some(match_labels(names::member_selector(&name))),
        ..Default::default()
    };
    let label = |key: &str, value: &str| match_labels(BTreeMap::from([(key.into(), value.into())]));
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(label("kubernetes.io/metadata.name", operator_namespace)),
        pod_selector: Some(label("app.kubernetes.io/name", "valkey-operator")),
        ..Default::default()
    };
    // Backup Jobs' pods (controller/backup.rs): they take each shard's snapshot on 6379.
    let backups = NetworkPolicyPeer {
        namespace_selector: Some(label("kubernetes.io/metadata.name", operator_namespace)),
        pod_selector: Some(match_labels(BTreeMap::from([
            (LABEL_APP_MANAGED_BY.into(), MANAGER.into()),
            (
                LABEL_APP_COMPONENT.into(),
                crate::controller::names::BACKUP_COMPONENT.into(),
            ),
        ]))),
        ..Default::default()
    };
    let client_rule = match clients {
        Some(clients) => ingress_from(
            vec![operator, backups, clients],
            vec![tcp_port(CLIENT_PORT)],
        ),
        // No `from`: every source.
        None => NetworkPolicyIngressRule {
            from: None,
            ports: Some(vec![tcp_port(CLIENT_PORT)]),
        },
    };
    let mut ingress = vec![
        ingress_from(
            vec![members],
            vec![tcp_port(CLIENT_PORT), tcp_port(CLUSTER_BUS_PORT)],
        ),
        client_rule,
    ];
    ingress.extend(scrapers_rule(scrapers));
    Ok(NetworkPolicy {
        metadata: meta(cluster, names::pdb(&name), "members")?,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(names::member_selector(&name))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..Default::default()
        }),
    })
}

fn tcp_port(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(port.into())),
        ..Default::default()
    }
}

fn ingress_from(
    from: Vec<NetworkPolicyPeer>,
    ports: Vec<NetworkPolicyPort>,
) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from: Some(from),
        ports: Some(ports),
    }
}

/// The exporters' port, to the scrapers the menu names only (none: no rule, as an empty `from`
/// would admit every source).
fn scrapers_rule(scrapers: &[Scraper]) -> Option<NetworkPolicyIngressRule> {
    (!scrapers.is_empty()).then(|| {
        let from = scrapers.iter().map(scraper_peer).collect();
        ingress_from(from, vec![tcp_port(EXPORTER_PORT)])
    })
}

/// A scraper of the menu as the NetworkPolicy peer it stands for.
fn scraper_peer(scraper: &Scraper) -> NetworkPolicyPeer {
    let selector =
        |s: &Option<LabelsSelector>| s.as_ref().map(|s| match_labels(s.match_labels.clone()));
    NetworkPolicyPeer {
        namespace_selector: selector(&scraper.namespace_selector),
        pod_selector: selector(&scraper.pod_selector),
        ..Default::default()
    }
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
                (
                    BACKUP_PASSWORD_KEY.to_string(),
                    credentials.backup_password.clone(),
                ),
                (
                    RESTORE_PASSWORD_KEY.to_string(),
                    credentials.restore_password.clone(),
                ),
                (
                    METRICS_PASSWORD_KEY.to_string(),
                    credentials.metrics_password.clone(),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The ACL Secret mounted into every member: the ACL file and the replication credentials.
/// With `metrics`, also the metrics user's password, which each member's exporter reads (that
/// user can read server statistics and nothing else).
pub fn acl_secret(
    cluster: &ValkeyCluster,
    acl_file: &str,
    credentials: &OperatorCredentials,
    metrics: bool,
) -> Result<Secret, BuildError> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let mut data = BTreeMap::from([
        (ACL_FILE_KEY.to_string(), acl_file.to_string()),
        (
            REPLICATION_AUTH_KEY.to_string(),
            render_replication_auth(
                crate::api::constants::REPLICATION_ACL_USERNAME,
                &credentials.replication_password,
            ),
        ),
    ]);
    if metrics {
        data.insert(
            METRICS_PASSWORD_KEY.to_string(),
            credentials.metrics_password.clone(),
        );
    }
    Ok(Secret {
        metadata: meta(cluster, names::acl_secret(&name), "acl")?,
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    })
}

/// The operator's copy of a TLS cluster's validated certificate, `<cluster>-member-tls`, the
/// Secret every member mounts (see `tls.rs`).
pub fn tls_secret(
    cluster: &ValkeyCluster,
    certificate: &crate::resolve::tls::ServedCertificate,
) -> Result<Secret, BuildError> {
    use crate::resolve::conf::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
    use k8s_openapi::ByteString;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Ok(Secret {
        metadata: meta(cluster, names::tls_secret(&name), "tls")?,
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Resources, ValkeyClusterSpec, ValkeyImageSpec};
    use serde_json::json;

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
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        c.metadata.namespace = Some("my-app".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    /// Every object of the bundle is this cluster's to change and to delete: it names the
    /// cluster as its controlling owner and carries the cluster's labels. The metrics
    /// password reaches the ACL Secret only when metrics are on.
    #[test]
    fn every_cluster_wide_object_is_owned_by_its_cluster() {
        let cluster = cluster();
        let credentials = crate::controller::testing::credentials();
        let inputs = |scrapers| ObjectInputs {
            acl_file: "user default off",
            credentials: &credentials,
            scrapers,
            operator_namespace: "valkey-operator-system",
            clients_from: crate::settings::ClientsFrom::SameNamespace,
        };
        let objects = cluster_objects(&cluster, &inputs(None)).unwrap();
        let ClusterObjects {
            acl_secret,
            headless_service,
            client_service,
            pdb,
            network_policy,
        } = &objects;
        let metas = [
            &acl_secret.metadata,
            &headless_service.metadata,
            &client_service.metadata,
            &pdb.metadata,
            &network_policy.metadata,
        ];
        for meta in metas {
            let owners = meta.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1, "{meta:?}");
            assert_eq!(owners[0].uid, "uid-1");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(meta.namespace.as_deref(), Some("my-app"));
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(
                labels
                    .get(crate::api::constants::LABEL_CLUSTER)
                    .map(String::as_str),
                Some("my-cluster"),
                "{meta:?}"
            );
        }
        let data = acl_secret.string_data.as_ref().unwrap();
        assert!(!data.contains_key(METRICS_PASSWORD_KEY));
        let with_metrics = cluster_objects(&cluster, &inputs(Some(&[]))).unwrap();
        let data = with_metrics.acl_secret.string_data.unwrap();
        assert_eq!(data[METRICS_PASSWORD_KEY], "metrics-pw");
    }

    fn resolved(version: &str) -> ResolvedConfig {
        ResolvedConfig {
            chain: vec!["standard".into()],
            image_ref: "valkey-9-0".into(),
            image: ValkeyImageSpec {
                image_pull_secrets: vec![],
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
            scheduling: Default::default(),
            storage: None,
            metrics: None,
            external_access: vec![],
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
    fn a_live_setting_value_does_not_change_the_member_but_a_restart_only_one_does() {
        let with = |k: &str, v: &str| {
            let mut s = desired_node_spec(&cluster(), &resolved("9.1.2"), ZoneSpread::BestEffort);
            s.valkey.insert(k.into(), v.into());
            s
        };
        let a = with("maxmemory-policy", "allkeys-lru");
        assert_eq!(
            spec_hash(&a),
            spec_hash(&with("maxmemory-policy", "noeviction"))
        );
        assert_ne!(
            spec_hash(&with("databases", "4")),
            spec_hash(&with("databases", "8"))
        );
        // A member labelled with an older hash is current when its spec hashes to the desired
        // one now (an operator upgrade that leaves live values out does not roll it).
        let mut member = node(&cluster(), "my-cluster-0-0", 0, &a).unwrap();
        let desired = spec_hash(&with("maxmemory-policy", "noeviction"));
        member
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_SPEC_HASH.into(), "0123456789ab".into());
        assert!(super::super::observe::is_current(&member, &desired));
        assert!(!super::super::observe::is_current(
            &member,
            &spec_hash(&with("databases", "4"))
        ));
    }

    #[test]
    fn nodes_are_owned_by_the_cluster_and_labelled() {
        let spec = desired_node_spec(&cluster(), &resolved("9.0.0"), ZoneSpread::BestEffort);
        let n = node(&cluster(), "my-cluster-2-0", 2, &spec).unwrap();
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
        let spec = pdb(&cluster()).unwrap().spec.unwrap();
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
    fn the_pdb_min_available_never_overflows() {
        // 1 + i32::MAX overflowed i32 (a panic in debug builds, a wrapped negative
        // minAvailable in release), as did 500 x (1 + 5000000): every member is kept, as far
        // as an i32 says it.
        assert_eq!(pdb_min_available(500, 100_000), 50_000_499);
        assert_eq!(pdb_min_available(500, i32::MAX), i32::MAX);
        assert_eq!(pdb_min_available(500, 5_000_000), i32::MAX);
        assert_eq!(pdb_min_available(0, 1), 0);
    }

    proptest::proptest! {
        #[test]
        fn no_shape_makes_the_pdb_panic(shards in proptest::prelude::any::<i32>(),
                                        replicas in proptest::prelude::any::<i32>()) {
            let min = pdb_min_available(shards, replicas);
            proptest::prop_assert!(min >= 0);
            let desired = crate::api::validation::desired_members(shards, replicas);
            proptest::prop_assert!(i64::from(min) <= desired);
        }
    }

    #[test]
    fn the_exporters_port_is_open_to_the_menus_scrapers_only() {
        use crate::api::metrics::{LabelsSelector, Scraper};
        use crate::settings::ClientsFrom;
        let labels = |k: &str, v: &str| {
            Some(LabelsSelector {
                match_labels: BTreeMap::from([(k.to_string(), v.to_string())]),
            })
        };
        let scrapers = [Scraper {
            namespace_selector: labels("kubernetes.io/metadata.name", "monitoring"),
            pod_selector: labels("app.kubernetes.io/name", "prometheus"),
        }];
        for clients in [ClientsFrom::SameNamespace, ClientsFrom::Unrestricted] {
            let np = network_policy(&cluster(), "ops", clients, &scrapers).unwrap();
            let spec = serde_json::to_value(np.spec.unwrap()).unwrap();
            let rules = spec["ingress"].as_array().unwrap();
            let to_9121: Vec<_> = rules
                .iter()
                .filter(|r| r["ports"].to_string().contains("9121"))
                .collect();
            assert_eq!(to_9121.len(), 1, "{rules:?}");
            assert_eq!(
                to_9121[0],
                &json!({
                    "from": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
                    }],
                    "ports": [{"protocol": "TCP", "port": 9121}]
                })
            );
        }
        // No scraper on the menu: no rule names the port, so nobody reaches it.
        let closed = network_policy(&cluster(), "ops", ClientsFrom::Unrestricted, &[]).unwrap();
        let closed = serde_json::to_string(&closed.spec.unwrap()).unwrap();
        assert!(!closed.contains("9121"), "{closed}");
    }

    #[test]
    fn the_network_policy_keeps_the_bus_among_members_and_lets_clients_and_the_operator_in() {
        use crate::settings::ClientsFrom;
        let np = network_policy(&cluster(), "ops", ClientsFrom::SameNamespace, &[]).unwrap();
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
        // Backup Jobs' pods in the operator's namespace: the client port only.
        assert_eq!(
            rules[1]["from"][1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
            "backup"
        );
        assert_eq!(
            rules[1]["from"][2],
            json!({"podSelector": {}}),
            "same namespace"
        );
        let any = network_policy(&cluster(), "ops", ClientsFrom::AnyNamespace, &[]).unwrap();
        let any = serde_json::to_value(any.spec.unwrap()).unwrap();
        assert_eq!(
            any["ingress"][1]["from"][2],
            json!({"namespaceSelector": {}})
        );
        // Unrestricted: the client port from anywhere, the bus still from members only.
        let open = network_policy(&cluster(), "ops", ClientsFrom::Unrestricted, &[]).unwrap();
        let open = serde_json::to_value(open.spec.unwrap()).unwrap();
        assert_eq!(
            open["ingress"][0]["ports"],
            json!([{"protocol": "TCP", "port": 6379}, {"protocol": "TCP", "port": 16379}])
        );
        assert_eq!(
            open["ingress"][0]["from"],
            json!([{"podSelector": {"matchLabels": names::member_selector("my-cluster")}}])
        );
        assert_eq!(
            open["ingress"][1],
            json!({"ports": [{"protocol": "TCP", "port": 6379}]}),
            "no `from`: every source, the client port only"
        );
    }

    #[test]
    fn services_select_member_pods() {
        let headless = headless_service(&cluster()).unwrap();
        assert_eq!(headless.metadata.name.as_deref(), Some("my-cluster-nodes"));
        let spec = headless.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            spec.selector.unwrap()["valkey.gomomento.com/cluster"],
            "my-cluster"
        );
        assert_eq!(
            client_service(&cluster())
                .unwrap()
                .spec
                .unwrap()
                .ports
                .unwrap()[0]
                .port,
            6379
        );
    }

    #[test]
    fn acl_secret_holds_the_file_and_replication_auth() {
        let creds = OperatorCredentials {
            operator_password: "o".into(),
            replication_password: "r".into(),
            backup_password: "b".into(),
            restore_password: "r".into(),
            metrics_password: "m".into(),
        };
        let s = acl_secret(&cluster(), "user x on\n", &creds, false).unwrap();
        let data = s.string_data.unwrap();
        assert_eq!(data[ACL_FILE_KEY], "user x on\n");
        assert!(data[REPLICATION_AUTH_KEY].contains("masterauth r"));
    }

    #[test]
    fn a_cluster_without_uid_is_refused_rather_than_built_without_its_owner() {
        use crate::settings::ClientsFrom;
        let mut c = cluster();
        c.metadata.uid = None;
        let err = pdb(&c).unwrap_err().to_string();
        assert!(
            err.contains("ValkeyCluster my-app/my-cluster has no metadata.uid"),
            "{err}"
        );
        let creds = OperatorCredentials {
            operator_password: "o".into(),
            replication_password: "r".into(),
            backup_password: "b".into(),
            restore_password: "r".into(),
            metrics_password: "m".into(),
        };
        let spec = desired_node_spec(&c, &resolved("9.0.0"), ZoneSpread::BestEffort);
        assert!(node(&c, "my-cluster-0-0", 0, &spec).is_err());
        assert!(client_service(&c).is_err());
        assert!(headless_service(&c).is_err());
        assert!(network_policy(&c, "ops", ClientsFrom::SameNamespace, &[]).is_err());
        assert!(acl_secret(&c, "", &creds, false).is_err());
        // The credentials Secret lives in the operator's namespace and names no owner.
        credentials_secret(&c, "ops", &creds);
    }

    /// Everything sent to the API server for the Services, the PDB and the NetworkPolicy,
    /// field by field: a field added, dropped or renamed by a change to a builder shows here.
    #[test]
    fn the_cluster_objects_are_sent_exactly_as_built() {
        use crate::settings::ClientsFrom;
        fn sent(object: impl serde::Serialize) -> serde_json::Value {
            serde_json::to_value(object).unwrap()
        }
        let c = cluster();
        let meta = |name: &str, component: &str| {
            json!({
                "name": name, "namespace": "my-app",
                "labels": names::cluster_labels("my-cluster", component),
                "ownerReferences": [{
                    "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
                    "name": "my-cluster", "uid": "uid-1", "controller": true,
                }],
            })
        };
        let members = json!({
            "app.kubernetes.io/component": "member", "valkey.gomomento.com/cluster": "my-cluster"});
        let port = |name: &str, port: u16| json!({"name": name, "port": port, "targetPort": port, "protocol": "TCP"});
        assert_eq!(
            sent(client_service(&c).unwrap()),
            json!({
                "apiVersion": "v1", "kind": "Service", "metadata": meta("my-cluster", "client"),
                "spec": {"selector": members, "ports": [port("valkey", 6379)]},
            })
        );
        assert_eq!(
            sent(headless_service(&c).unwrap()),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": meta("my-cluster-nodes", "members"),
                "spec": {
                    "clusterIP": "None", "publishNotReadyAddresses": true, "selector": members,
                    "ports": [port("valkey", 6379), port("cluster-bus", 16379)],
                },
            })
        );
        assert_eq!(
            sent(pdb(&c).unwrap()),
            json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": meta("my-cluster", "members"),
                "spec": {"minAvailable": 5, "selector": {"matchLabels": members}},
            })
        );
        let tcp = |port: u16| json!({"protocol": "TCP", "port": port});
        assert_eq!(
            sent(network_policy(&c, "ops", ClientsFrom::SameNamespace, &[]).unwrap()),
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": meta("my-cluster", "members"),
                "spec": {
                    "podSelector": {"matchLabels": members},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {"from": [{"podSelector": {"matchLabels": members}}],
                            "ports": [tcp(6379), tcp(16379)]},
                        {"from": [
                            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "valkey-operator"}}},
                            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                                "podSelector": {"matchLabels": {
                                    "app.kubernetes.io/component": "backup",
                                    "app.kubernetes.io/managed-by": "valkey-operator"}}},
                            {"podSelector": {}},
                        ], "ports": [tcp(6379)]},
                    ],
                },
            })
        );
    }
}
