//! Build step of the ValkeyNode pipeline (pure): the member's ConfigMap (rendered valkey.conf)
//! and its Pod, from the node's immutable spec.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, LocalObjectReference, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod, PodReadinessGate,
    PodSecurityContext, PodSpec, PreferredSchedulingTerm, Probe, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext, Service, ServicePort,
    ServiceSpec, TCPSocketAction, TopologySpreadConstraint, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use serde_json::json;

use crate::api::constants::{
    CLIENT_PORT, CLUSTER_BUS_PORT, LABEL_CLUSTER, LABEL_NODE, LABEL_SHARD, LABEL_SPEC_HASH,
};
use crate::api::external::ExternalServiceType;
use crate::api::metrics::{EXPORTER_NAME, EXPORTER_PORT, MemberExporter};
use crate::api::placement::{SpreadScope, Toleration, WhenUnsatisfiable};
use crate::api::{Resources, ValkeyNode, ValkeyNodeSpec, VolumeRetention, ZoneSpread};
use crate::controller::jobs::value_env;
use crate::controller::names;
use crate::controller::owner::{BuildError, controller_owner};
use crate::resolve::conf::{MemberConf, paths, render_valkey_conf, sha256_hex};

/// Annotation on the pod: hash of the valkey.conf it was started with.
pub const CONFIG_HASH_ANNOTATION: &str = "valkey.gomomento.com/config-hash";
/// User and group of the `valkey` user in the official images; members run as it.
pub const VALKEY_UID: i64 = 999;

/// ConfigMap key holding valkey.conf.
pub const CONFIG_KEY: &str = "valkey.conf";

fn identity(node: &ValkeyNode) -> (String, String, String) {
    (
        node.metadata.name.clone().unwrap_or_default(),
        node.metadata.namespace.clone().unwrap_or_default(),
        node.spec.cluster_name.clone(),
    )
}

fn owned_meta(node: &ValkeyNode, name: String) -> Result<ObjectMeta, BuildError> {
    let (node_name, namespace, cluster) = identity(node);
    let owner = controller_owner(node)?;
    let mut labels = names::member_labels(&cluster, node.spec.shard as usize, &node_name);
    if let Some(hash) = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SPEC_HASH))
    {
        labels.insert(LABEL_SPEC_HASH.to_string(), hash.clone());
    }
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    })
}

/// valkey.conf for this member.
pub fn valkey_conf(node: &ValkeyNode) -> String {
    spec_valkey_conf(&node.spec)
}

/// valkey.conf for a member with this spec: what its ConfigMap holds (the kubectl plugin
/// renders a cluster's desired spec with it).
pub fn spec_valkey_conf(spec: &ValkeyNodeSpec) -> String {
    render_valkey_conf(&MemberConf {
        settings: &spec.valkey,
        tls: spec.tls_secret_ref.is_some(),
        version: &spec.version,
        memory_limit: spec.resources.memory.as_deref(),
    })
}

pub fn config_map(node: &ValkeyNode) -> Result<ConfigMap, BuildError> {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    Ok(ConfigMap {
        metadata: owned_meta(node, names::member_config(&node_name))?,
        data: Some(BTreeMap::from([(
            CONFIG_KEY.to_string(),
            valkey_conf(node),
        )])),
        ..Default::default()
    })
}

/// Pod annotation listing the keys that came from the cluster's `spec.podAnnotations`, so a key
/// removed from the spec is removed from running pods (and nobody else's annotation is).
pub const MANAGED_ANNOTATIONS: &str = "valkey.gomomento.com/pod-annotations";

fn managed_keys(desired: &BTreeMap<String, String>) -> Option<String> {
    (!desired.is_empty()).then(|| desired.keys().cloned().collect::<Vec<_>>().join(","))
}

/// The merge patch that brings a running pod's annotations to the cluster's
/// `spec.podAnnotations` (`desired`): keys added or changed, keys this operator added earlier
/// and since removed from the spec deleted, other annotations left alone. `None` when the pod
/// is up to date.
pub fn pod_annotations_patch(
    current: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
) -> Option<serde_json::Value> {
    let mut patch = serde_json::Map::new();
    for (k, v) in desired {
        if current.get(k) != Some(v) {
            patch.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    let managed = current
        .get(MANAGED_ANNOTATIONS)
        .map(String::as_str)
        .unwrap_or("");
    for k in managed.split(',').filter(|k| !k.is_empty()) {
        if !desired.contains_key(k) && current.contains_key(k) {
            patch.insert(k.to_string(), serde_json::Value::Null);
        }
    }
    let keys = managed_keys(desired);
    if current.get(MANAGED_ANNOTATIONS) != keys.as_ref() {
        patch.insert(
            MANAGED_ANNOTATIONS.to_string(),
            keys.map_or(serde_json::Value::Null, serde_json::Value::String),
        );
    }
    (!patch.is_empty()).then(|| json!({"metadata": {"annotations": patch}}))
}

/// The member's pod. Its name is the ValkeyNode's; it is owned by the ValkeyNode, so deleting
/// the node deletes the pod. `pod_annotations` are the cluster's `spec.podAnnotations`.
pub fn pod(
    node: &ValkeyNode,
    pod_annotations: &BTreeMap<String, String>,
    external: Option<&ExternalEndpoint>,
) -> Result<Pod, BuildError> {
    let (node_name, namespace, cluster) = identity(node);
    let mut meta = owned_meta(node, node_name.clone())?;
    meta.annotations = Some(annotations(node, pod_annotations));
    let (volumes, mounts) = volumes(node, &node_name, &cluster);
    // A TLS member's hostname must resolve under the client Service
    // (`<member>.<cluster>.<ns>.svc.cluster.local`, covered by the certificate's wildcard):
    // with that Service as subdomain, its EndpointSlice carries the pod's hostname and cluster
    // DNS answers for it. Plaintext members keep the headless Service.
    let subdomain = if node.spec.tls_secret_ref.is_some() {
        names::client_service(&cluster)
    } else {
        names::headless_service(&cluster)
    };
    let spec = PodSpec {
        hostname: Some(node_name),
        subdomain: Some(subdomain),
        enable_service_links: Some(false),
        automount_service_account_token: Some(false),
        // The `restricted` Pod Security Standard: non-root (the valkey user of the official
        // images), no privilege escalation, no capabilities, the runtime's seccomp profile, a
        // read-only root filesystem (Valkey writes only to the data volume, group-owned by
        // fsGroup).
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(VALKEY_UID),
            run_as_group: Some(VALKEY_UID),
            fs_group: Some(VALKEY_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        termination_grace_period_seconds: Some(30),
        // A member without its data must not come back under its old identity (its replicas
        // would copy the empty dataset): see ValkeyNodeSpec::restart_in_place.
        restart_policy: Some(
            if node.spec.restarts_in_place() {
                "Always"
            } else {
                "Never"
            }
            .into(),
        ),
        // Ready = the container answers AND the member holds its shard's data (set by the
        // cluster controller): an empty or syncing member never counts for the PDB.
        readiness_gates: Some(vec![PodReadinessGate {
            condition_type: crate::api::constants::CONDITION_HOLDS_DATA.into(),
        }]),
        node_selector: Some(node.spec.placement.node_selector.clone()),
        tolerations: (!node.spec.placement.tolerations.is_empty()).then(|| {
            node.spec
                .placement
                .tolerations
                .iter()
                .map(Toleration::to_pod)
                .collect()
        }),
        priority_class_name: node.spec.placement.priority_class_name.clone(),
        image_pull_secrets: pull_secrets(node),
        affinity: node_affinity(node),
        topology_spread_constraints: Some(spread_constraints(node, &cluster)),
        init_containers: sidecars(node, &cluster),
        containers: vec![valkey_container(node, &namespace, mounts, external)],
        volumes: Some(volumes),
        ..Default::default()
    };
    Ok(Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    })
}

/// The pod's annotations: the cluster's `podAnnotations`, the list of their keys (so a key
/// removed from the spec can be removed from the pod) and the hash of the valkey.conf.
fn annotations(
    node: &ValkeyNode,
    pod_annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut annotations = pod_annotations.clone();
    if let Some(keys) = managed_keys(pod_annotations) {
        annotations.insert(MANAGED_ANNOTATIONS.to_string(), keys);
    }
    annotations.insert(
        CONFIG_HASH_ANNOTATION.to_string(),
        sha256_hex(valkey_conf(node))[..12].to_string(),
    );
    annotations
}

/// Members of a shard apart: on different hosts where possible, across zones as
/// `placement.zoneSpread` says; with `required`, the whole cluster spread over zones too.
fn spread_constraints(node: &ValkeyNode, cluster: &str) -> Vec<TopologySpreadConstraint> {
    let shard_selector = BTreeMap::from([
        (
            crate::api::constants::LABEL_CLUSTER.to_string(),
            cluster.to_string(),
        ),
        (
            crate::api::constants::LABEL_SHARD.to_string(),
            node.spec.shard.to_string(),
        ),
    ]);
    let zone_spread = node
        .spec
        .placement
        .zone_spread
        .unwrap_or(ZoneSpread::BestEffort);
    let constraint = |topology_key: &str, when: &str, match_labels: BTreeMap<String, String>| {
        TopologySpreadConstraint {
            max_skew: 1,
            topology_key: topology_key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(match_labels),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    let mut spread = vec![
        // Members of a shard on different hosts where possible (primary and replica apart).
        constraint(HOSTNAME_KEY, "ScheduleAnyway", shard_selector.clone()),
        constraint(
            ZONE_KEY,
            zone_spread.when_unsatisfiable(),
            shard_selector.clone(),
        ),
    ];
    if zone_spread == ZoneSpread::Required {
        spread.push(constraint(
            ZONE_KEY,
            "ScheduleAnyway",
            names::member_selector(cluster),
        ));
    }
    // The config's further spreads (racks, ...), over the shard's or the cluster's members.
    for more in &node.spec.placement.topology_spread {
        let members = match more.scope.unwrap_or(SpreadScope::Shard) {
            SpreadScope::Shard => shard_selector.clone(),
            SpreadScope::Cluster => names::member_selector(cluster),
        };
        let when = more
            .when_unsatisfiable
            .unwrap_or(WhenUnsatisfiable::ScheduleAnyway);
        spread.push(TopologySpreadConstraint {
            max_skew: more.max_skew.unwrap_or(1),
            ..constraint(&more.topology_key, &format!("{when:?}"), members)
        });
    }
    spread
}

/// The image's pull secrets (none: the field stays unset, as on pods built before it).
fn pull_secrets(node: &ValkeyNode) -> Option<Vec<LocalObjectReference>> {
    let names = &node.spec.image_pull_secrets;
    (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|name| LocalObjectReference { name: name.clone() })
            .collect()
    })
}

/// Node label of a host's name and of its zone, the topology keys members spread over.
const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// The pod's node affinity: only in `placement.zones` (none: anywhere), and on the nodes the
/// config's `scheduling.nodeAffinity` requires and prefers. Required terms are alternatives
/// (a node matches one), so the zones are added to each of them.
fn node_affinity(node: &ValkeyNode) -> Option<Affinity> {
    let placement = &node.spec.placement;
    let zones: Vec<NodeSelectorRequirement> = (!placement.zones.is_empty())
        .then(|| NodeSelectorRequirement {
            key: ZONE_KEY.into(),
            operator: "In".into(),
            values: Some(placement.zones.clone()),
        })
        .into_iter()
        .collect();
    let config = placement.node_affinity.clone().unwrap_or_default();
    let terms: Vec<NodeSelectorTerm> = if config.required.is_empty() {
        (!zones.is_empty())
            .then(|| NodeSelectorTerm {
                match_expressions: Some(zones.clone()),
                ..Default::default()
            })
            .into_iter()
            .collect()
    } else {
        config.required.iter().map(|t| t.to_pod(&zones)).collect()
    };
    let preferred: Vec<PreferredSchedulingTerm> = config
        .preferred
        .iter()
        .map(|p| PreferredSchedulingTerm {
            weight: p.weight,
            preference: p.preference.to_pod(&[]),
        })
        .collect();
    if terms.is_empty() && preferred.is_empty() {
        return None;
    }
    Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: (!terms.is_empty()).then_some(
                NodeSelector {
                    node_selector_terms: terms,
                },
            ),
            preferred_during_scheduling_ignored_during_execution: (!preferred.is_empty())
                .then_some(preferred),
        }),
        ..Default::default()
    })
}

/// The pod's volumes and the container's mounts of them: valkey.conf, the ACL file, the data
/// directory and, with TLS, the certificate.
fn volumes(node: &ValkeyNode, node_name: &str, cluster: &str) -> (Vec<Volume>, Vec<VolumeMount>) {
    let secret = |name: &str, secret_name: String| Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = |name: &str, mount_path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: mount_path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    };
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names::member_config(node_name),
                ..Default::default()
            }),
            ..Default::default()
        },
        secret("acl", names::acl_secret(cluster)),
        data_volume(node),
    ];
    let mut mounts = vec![
        mount("config", paths::CONFIG_DIR, true),
        mount("acl", paths::ACL_DIR, true),
        mount("data", paths::DATA_DIR, false),
    ];
    if let Some(tls) = &node.spec.tls_secret_ref {
        volumes.push(secret("tls", tls.clone()));
        mounts.push(mount("tls", paths::TLS_DIR, true));
    }
    (volumes, mounts)
}

/// The data directory's volume: the member's claim when it has storage, else an `emptyDir`
/// (memory-only: the directory lives as long as the pod).
fn data_volume(node: &ValkeyNode) -> Volume {
    let claim = node.spec.storage.as_ref().map(|_| {
        let uid = node.metadata.uid.as_deref().unwrap_or_default();
        PersistentVolumeClaimVolumeSource {
            claim_name: names::member_volume(&identity(node).0, uid),
            read_only: None,
        }
    });
    Volume {
        name: "data".into(),
        empty_dir: claim.is_none().then(EmptyDirVolumeSource::default),
        persistent_volume_claim: claim,
        ..Default::default()
    }
}

/// The member's claim and the size it was created with (`<claim> (256Mi)`), when it has
/// storage: what the cluster's status and `kubectl valkey status` show.
pub fn volume_of(node: &ValkeyNode, aof_bytes: Option<u64>) -> Option<String> {
    let storage = node.spec.storage.as_ref()?;
    let uid = node.metadata.uid.as_deref()?;
    let claim = names::member_volume(&identity(node).0, uid);
    Some(match aof_bytes {
        Some(used) => format!(
            "{claim} ({}, {})",
            storage.size,
            aof_usage(used, &storage.size)
        ),
        None => format!("{claim} ({})", storage.size),
    })
}

/// How much of a volume of `size` the member's append-only file takes, in whole percent (a
/// status that changes with every write would make every reconcile write status).
fn aof_usage(used: u64, size: &str) -> String {
    match crate::resolve::memory::parse_quantity_bytes(size) {
        Ok(total) if total > 0 => {
            let percent = (u128::from(used) * 100).div_ceil(total);
            format!("append-only file uses {percent}%")
        }
        _ => "append-only file in use".to_string(),
    }
}

/// What members with this spec keep across the loss of their pod, in words.
pub fn persistence_mode(spec: &ValkeyNodeSpec) -> String {
    let aof = spec
        .valkey
        .get("appendonly")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("yes"));
    match (&spec.storage, aof) {
        (None, false) => "memory-only".into(),
        (None, true) => "append-only file on emptyDir (lost with the pod)".into(),
        (Some(s), true) => format!("volumes of {} + append-only file", s.size),
        (Some(s), false) => format!(
            "volumes of {} without appendonly (only nodes.conf survives the pod)",
            s.size
        ),
    }
}

/// Label on a member's volume: the uid of the ValkeyNode it was made for.
pub const VOLUME_MEMBER_UID_LABEL: &str = "valkey.gomomento.com/member-uid";
/// Label on a member's volume: the uid of the ValkeyCluster the member belongs to.
pub const VOLUME_CLUSTER_UID_LABEL: &str = "valkey.gomomento.com/cluster-uid";

/// The member's PersistentVolumeClaim, when its spec has storage: `ReadWriteOnce`, the size
/// and class the spec names. With `whenDeleted: Delete` it is owned by the ValkeyNode (deleted
/// with the member, and with the cluster); with `Retain` nobody owns it, and the cluster
/// controller deletes it when the member is retired (see `controller::cluster::volumes`).
pub fn claim(node: &ValkeyNode) -> Result<Option<PersistentVolumeClaim>, BuildError> {
    let Some(storage) = &node.spec.storage else {
        return Ok(None);
    };
    let (node_name, namespace, cluster) = identity(node);
    let uid = node.metadata.uid.clone().ok_or_else(|| BuildError::NoUid {
        kind: "ValkeyNode".into(),
        namespace: namespace.clone(),
        name: node_name.clone(),
    })?;
    let mut labels = names::cluster_labels(&cluster, "volume");
    labels.insert(LABEL_SHARD.into(), node.spec.shard.to_string());
    labels.insert(LABEL_NODE.into(), node_name.clone());
    labels.insert(VOLUME_MEMBER_UID_LABEL.into(), uid.clone());
    // The cluster's uid (the node's owner): a volume retained from a deleted cluster is never
    // taken for one of a new cluster of the same name.
    if let Some(cluster_uid) = crate::controller::owner::controller_uid(&node.metadata) {
        labels.insert(VOLUME_CLUSTER_UID_LABEL.into(), cluster_uid.into());
    }
    let owner = match storage.retention() {
        VolumeRetention::Delete => Some(vec![controller_owner(node)?]),
        VolumeRetention::Retain => None,
    };
    Ok(Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names::member_volume(&node_name, &uid)),
            namespace: Some(namespace),
            labels: Some(labels),
            owner_references: owner,
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(storage.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }))
}

/// valkey-server's command line: the config file and what is only known per member: the pod
/// IP it announces and, with TLS, the hostname under the certificate's wildcard it announces
/// (clients are sent there: `cluster-preferred-endpoint-type hostname`).
pub fn command(
    node: &ValkeyNode,
    namespace: &str,
    external: Option<&ExternalEndpoint>,
) -> Vec<String> {
    let mut command = vec![
        "valkey-server".to_string(),
        paths::CONFIG_FILE.to_string(),
        "--cluster-announce-ip".to_string(),
        "$(POD_IP)".to_string(),
    ];
    // Clients (CLUSTER SLOTS, SHARDS, NODES, MOVED) are sent to the member's external
    // address; the bus and replication keep the pod IP above.
    if let Some(external) = external {
        command.extend([
            "--cluster-announce-client-ipv4".to_string(),
            external.ip.clone(),
            "--cluster-announce-client-port".to_string(),
            external.port.to_string(),
        ]);
    }
    if node.spec.tls_secret_ref.is_some() {
        let name = node.metadata.name.clone().unwrap_or_default();
        command.extend([
            "--cluster-announce-hostname".to_string(),
            names::member_hostname(&name, &node.spec.cluster_name, namespace),
        ]);
    }
    command
}

/// An environment variable from one of the pod's own fields (downward API).
fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Where clients outside the Kubernetes cluster reach a member (`spec.externalAccess`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalEndpoint {
    /// An IPv4 address, or [`HOST_IP`]: the address of the node the pod runs on, known only
    /// once it is scheduled (the kubelet substitutes it).
    pub ip: String,
    pub port: i32,
}

/// The pod's node's address in the container's command line (`status.hostIP`).
pub const HOST_IP: &str = "$(HOST_IP)";

impl ExternalEndpoint {
    /// The endpoint `service` (the member's [`external_service`], as the API server has it)
    /// gives: a NodePort's node port on the pod's node; a LoadBalancer's IP and port.
    /// `None` while it has none yet (a load balancer being provisioned, or one with only a
    /// hostname, which Valkey cannot announce as an address).
    pub fn of(service: &Service) -> Option<ExternalEndpoint> {
        let spec = service.spec.as_ref()?;
        let port = spec.ports.as_ref()?.first()?;
        match spec.type_.as_deref() {
            Some("NodePort") => Some(ExternalEndpoint {
                ip: HOST_IP.to_string(),
                port: port.node_port?,
            }),
            Some("LoadBalancer") => {
                let ingress = service
                    .status
                    .as_ref()?
                    .load_balancer
                    .as_ref()?
                    .ingress
                    .as_ref()?;
                let ip = ingress.iter().find_map(|i| i.ip.clone())?;
                Some(ExternalEndpoint {
                    ip,
                    port: port.port,
                })
            }
            _ => None,
        }
    }
}

/// The member's own Service of type `service_type`: its pod only (not-ready included: a
/// member is announced while it syncs), the client port.
pub fn external_service(
    node: &ValkeyNode,
    service_type: ExternalServiceType,
) -> Result<Service, BuildError> {
    let (node_name, _, cluster) = identity(node);
    Ok(Service {
        metadata: owned_meta(node, names::external_service(&node_name))?,
        spec: Some(ServiceSpec {
            type_: Some(service_type.to_string()),
            selector: Some(BTreeMap::from([
                (LABEL_CLUSTER.to_string(), cluster),
                (LABEL_NODE.to_string(), node_name),
            ])),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("valkey".into()),
                protocol: Some("TCP".into()),
                port: CLIENT_PORT.into(),
                target_port: Some(IntOrString::Int(CLIENT_PORT.into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// Equal requests and limits.
fn requirements(resources: &Resources) -> ResourceRequirements {
    let quantities: BTreeMap<String, Quantity> = [
        ("cpu", resources.cpu.as_ref()),
        ("memory", resources.memory.as_ref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k.to_string(), Quantity(v.clone()))))
    .collect();
    ResourceRequirements {
        requests: Some(quantities.clone()),
        limits: Some(quantities),
        ..Default::default()
    }
}

/// The `restricted` Pod Security Standard's container part, and a read-only root filesystem.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

fn port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port.into(),
        ..Default::default()
    }
}

/// The exporter, when the member has one, as a sidecar (an init container that keeps running):
/// the pod's phase follows Valkey alone, so a member whose Valkey exited still fails as it did
/// without one, and the kubelet stops the exporter after Valkey.
fn sidecars(node: &ValkeyNode, cluster: &str) -> Option<Vec<Container>> {
    let exporter = node.spec.exporter.as_ref()?;
    Some(vec![exporter_container(node, exporter, cluster)])
}

/// The metrics exporter beside Valkey: it reads `INFO` over loopback as the metrics user,
/// whose password it takes from the ACL Secret, with its `CONFIG` command off (`CONFIG GET *`
/// would return the replication password, and the user may not run it anyway). Over TLS it
/// does not check the certificate: it names the cluster's hostnames, not loopback, and the
/// connection never leaves the pod.
fn exporter_container(node: &ValkeyNode, exporter: &MemberExporter, cluster: &str) -> Container {
    let scheme = if node.spec.tls_secret_ref.is_some() {
        "rediss"
    } else {
        "redis"
    };
    let password = EnvVar {
        name: "REDIS_PASSWORD".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: names::acl_secret(cluster),
                key: crate::controller::names::METRICS_PASSWORD_KEY.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut env = vec![
        value_env("REDIS_ADDR", format!("{scheme}://127.0.0.1:{CLIENT_PORT}")),
        value_env(
            "REDIS_USER",
            crate::api::constants::METRICS_ACL_USERNAME.into(),
        ),
        password,
        value_env("REDIS_EXPORTER_CONFIG_COMMAND", "-".into()),
        value_env(
            "REDIS_EXPORTER_WEB_LISTEN_ADDRESS",
            format!(":{EXPORTER_PORT}"),
        ),
    ];
    if node.spec.tls_secret_ref.is_some() {
        env.push(value_env(
            "REDIS_EXPORTER_SKIP_TLS_VERIFICATION",
            "true".into(),
        ));
    }
    Container {
        name: EXPORTER_NAME.into(),
        image: Some(exporter.image.clone()),
        env: Some(env),
        ports: Some(vec![port(EXPORTER_NAME, EXPORTER_PORT)]),
        resources: Some(requirements(&exporter.resources)),
        // Keeps running beside Valkey (a sidecar), restarted if it exits.
        restart_policy: Some("Always".into()),
        security_context: Some(restricted()),
        ..Default::default()
    }
}

/// The Valkey container: valkey-server on its config file, with equal requests and limits.
fn valkey_container(
    node: &ValkeyNode,
    namespace: &str,
    mounts: Vec<VolumeMount>,
    external: Option<&ExternalEndpoint>,
) -> Container {
    let client_port = || {
        Some(TCPSocketAction {
            port: IntOrString::Int(CLIENT_PORT.into()),
            ..Default::default()
        })
    };
    Container {
        name: "valkey".into(),
        image: Some(node.spec.image.clone()),
        // The pod IP is only known at run time: announce it on the command line.
        command: Some(command(node, namespace, external)),
        env: Some(
            std::iter::once(field_env("POD_IP", "status.podIP"))
                .chain(
                    external
                        .filter(|e| e.ip == HOST_IP)
                        .map(|_| field_env("HOST_IP", "status.hostIP")),
                )
                .collect(),
        ),
        ports: Some(vec![
            port("valkey", CLIENT_PORT),
            port("cluster-bus", CLUSTER_BUS_PORT),
        ]),
        resources: Some(requirements(&node.spec.resources)),
        readiness_probe: Some(Probe {
            tcp_socket: client_port(),
            period_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        liveness_probe: Some(Probe {
            tcp_socket: client_port(),
            initial_delay_seconds: Some(10),
            period_seconds: Some(10),
            failure_threshold: Some(6),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        // Valkey logs to stdout: the tail of its log becomes the termination message, so a
        // member that exits at start says why in its pod's status (and the cluster's).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(restricted()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodePlacement, Resources, ValkeyNodeSpec};

    /// The pod of a member without external access.
    fn pod(node: &ValkeyNode, annotations: &BTreeMap<String, String>) -> Result<Pod, BuildError> {
        super::pod(node, annotations, None)
    }

    fn node(zone_spread: ZoneSpread, zones: &[&str]) -> ValkeyNode {
        let mut n = ValkeyNode::new(
            "my-cluster-1-0",
            ValkeyNodeSpec {
                image_pull_secrets: vec![],
                cluster_name: "my-cluster".into(),
                shard: 1,
                role_hint: None,
                config_ref: "standard".into(),
                image_ref: "valkey-9-0".into(),
                image: "valkey/valkey:9.0.0".into(),
                version: "9.0.0".into(),
                resources: Resources {
                    cpu: Some("1".into()),
                    memory: Some("2Gi".into()),
                },
                valkey: BTreeMap::from([("maxmemory".to_string(), "1500mb".to_string())]),
                config_hash: None,
                placement: NodePlacement {
                    node_affinity: None,
                    topology_spread: vec![],
                    zones: zones.iter().map(|z| z.to_string()).collect(),
                    node_selector: BTreeMap::from([("disk".to_string(), "ssd".to_string())]),
                    zone_spread: Some(zone_spread),
                    tolerations: vec![],
                    priority_class_name: None,
                },
                tls_secret_ref: None,
                restart_in_place: Some(false),
                storage: None,
                exporter: None,
                external: None,
            },
        );
        n.metadata.namespace = Some("my-app".into());
        n.metadata.uid = Some("uid-n".into());
        n
    }

    #[test]
    fn a_members_volume_is_shown_with_how_much_its_append_only_file_uses() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        assert_eq!(volume_of(&n, Some(1)), None, "no storage, no volume");
        n.spec.storage = Some(crate::api::Storage {
            size: "256Mi".into(),
            ..Default::default()
        });
        let claim = names::member_volume("my-cluster-1-0", "uid-n");
        assert_eq!(volume_of(&n, None), Some(format!("{claim} (256Mi)")));
        assert_eq!(
            volume_of(&n, Some(64 << 20)),
            Some(format!("{claim} (256Mi, append-only file uses 25%)"))
        );
        // Whole percent, rounded up: a status that changed with every write would make every
        // reconcile write status.
        let percent = |used| volume_of(&n, Some(used)).unwrap();
        assert!(percent(1).ends_with("uses 1%)"));
        assert!(percent(2_684_354).ends_with("uses 1%)"), "1% of 256Mi");
        assert!(percent(2_684_355).ends_with("uses 2%)"));
    }

    #[test]
    fn the_configs_tolerations_and_priority_class_reach_the_pod() {
        use crate::api::placement::{TaintEffect, TolerationOperator};
        let bare = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new()).unwrap();
        let spec = bare.spec.unwrap();
        assert_eq!(spec.tolerations, None);
        assert_eq!(spec.priority_class_name, None);
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.spec.placement.tolerations = vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some(TolerationOperator::Equal),
            value: Some("valkey".into()),
            effect: Some(TaintEffect::NoSchedule),
            toleration_seconds: None,
        }];
        n.spec.placement.priority_class_name = Some("valkey-high".into());
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        let t = &spec.tolerations.unwrap()[0];
        assert_eq!(
            (
                t.key.as_deref(),
                t.operator.as_deref(),
                t.value.as_deref(),
                t.effect.as_deref()
            ),
            (
                Some("dedicated"),
                Some("Equal"),
                Some("valkey"),
                Some("NoSchedule")
            )
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some("valkey-high"));
    }

    #[test]
    fn pod_runs_the_node_image_with_its_config_and_resources() {
        let p = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new()).unwrap();
        let spec = p.spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("valkey/valkey:9.0.0"));
        assert_eq!(c.command.as_ref().unwrap()[1], "/etc/valkey/valkey.conf");
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["memory"].0, "2Gi");
        assert_eq!(spec.node_selector.unwrap()["disk"], "ssd");
        assert_eq!(spec.subdomain.as_deref(), Some("my-cluster-nodes"));
        assert_eq!(
            spec.readiness_gates.unwrap()[0].condition_type,
            crate::api::constants::CONDITION_HOLDS_DATA
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn tls_members_announce_a_hostname_under_the_client_service_and_mount_the_operators_copy() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.spec.tls_secret_ref = Some(names::tls_secret("my-cluster"));
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        // The client Service as subdomain: `<pod>.my-cluster.my-app.svc.cluster.local` resolves.
        assert_eq!(spec.subdomain.as_deref(), Some("my-cluster"));
        assert_eq!(spec.hostname.as_deref(), Some("my-cluster-1-0"));
        let command = spec.containers[0].command.clone().unwrap();
        let announced = command
            .iter()
            .position(|a| a == "--cluster-announce-hostname")
            .map(|i| command[i + 1].as_str());
        assert_eq!(
            announced,
            Some("my-cluster-1-0.my-cluster.my-app.svc.cluster.local")
        );
        assert!(command.contains(&"--cluster-announce-ip".to_string()));
        let tls = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "tls")
            .expect("a tls volume");
        assert_eq!(
            tls.secret.unwrap().secret_name.as_deref(),
            Some("my-cluster-member-tls")
        );
        let mount = spec.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == "tls")
            .cloned()
            .unwrap();
        assert_eq!(mount.mount_path, paths::TLS_DIR);
        assert_eq!(mount.read_only, Some(true));
        let conf = config_map(&n).unwrap().data.unwrap()[CONFIG_KEY].clone();
        assert!(conf.contains("\nport 0\n"), "{conf}");
        assert!(conf.contains("\ncluster-preferred-endpoint-type hostname\n"));
    }

    #[test]
    fn plaintext_members_announce_no_hostname() {
        let spec = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap();
        let command = spec.containers[0].command.clone().unwrap();
        assert!(!command.contains(&"--cluster-announce-hostname".to_string()));
        assert!(spec.volumes.unwrap().iter().all(|v| v.name != "tls"));
    }

    #[test]
    fn pods_meet_the_restricted_pod_security_standard() {
        let spec = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap();
        let pod_sc = spec.security_context.unwrap();
        assert_eq!(pod_sc.run_as_non_root, Some(true));
        assert_eq!(pod_sc.run_as_user, Some(VALKEY_UID));
        assert_eq!(pod_sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        for c in &spec.containers {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            assert_eq!(
                sc.capabilities.as_ref().unwrap().drop,
                Some(vec!["ALL".to_string()])
            );
            assert_eq!(sc.read_only_root_filesystem, Some(true));
        }
        // Writable volumes only where Valkey writes.
        let writable: Vec<_> = spec.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.read_only != Some(true))
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(writable, vec![paths::DATA_DIR]);
    }

    fn with_exporter(mut n: ValkeyNode) -> ValkeyNode {
        n.spec.exporter = Some(crate::api::metrics::Metrics::default().member_exporter());
        n
    }

    fn env_of<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
        c.env.iter().flatten().find(|e| e.name == name)
    }

    #[test]
    fn a_member_without_metrics_has_no_exporter() {
        let spec = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap();
        assert!(spec.init_containers.is_none());
        assert_eq!(spec.containers.len(), 1);
    }

    #[test]
    fn the_exporter_is_a_restricted_sidecar_reading_info_as_the_metrics_user() {
        let n = with_exporter(node(ZoneSpread::BestEffort, &[]));
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        let sidecars = spec.init_containers.unwrap();
        assert_eq!(sidecars.len(), 1);
        let c = &sidecars[0];
        assert_eq!(c.name, "metrics");
        assert_eq!(c.image.as_deref(), Some("oliver006/redis_exporter:v1.45.0"));
        // A sidecar: it keeps running, and the pod's phase follows Valkey alone.
        assert_eq!(c.restart_policy.as_deref(), Some("Always"));
        let ports = c.ports.clone().unwrap();
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].container_port),
            (Some("metrics"), 9121)
        );
        let value = |name| env_of(c, name).and_then(|e| e.value.clone());
        assert_eq!(
            value("REDIS_ADDR").as_deref(),
            Some("redis://127.0.0.1:6379")
        );
        assert_eq!(value("REDIS_USER").as_deref(), Some("_valkey-metrics"));
        assert_eq!(value("REDIS_EXPORTER_CONFIG_COMMAND").as_deref(), Some("-"));
        assert_eq!(value("REDIS_EXPORTER_SKIP_TLS_VERIFICATION"), None);
        let password = env_of(c, "REDIS_PASSWORD").unwrap();
        let secret = password.value_from.clone().unwrap().secret_key_ref.unwrap();
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("my-cluster-acl", "metrics-password")
        );
        assert!(
            password.value.is_none(),
            "the password is never in the pod spec"
        );
        let limits = c.resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["cpu"].0, "100m");
        assert_eq!(limits["memory"].0, "64Mi");
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert!(c.volume_mounts.is_none(), "the exporter mounts nothing");
        // Valkey's container is the same as without metrics.
        let plain = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new()).unwrap();
        assert_eq!(spec.containers, plain.spec.unwrap().containers);
    }

    #[test]
    fn over_tls_the_exporter_speaks_tls_to_loopback() {
        let mut n = with_exporter(node(ZoneSpread::BestEffort, &[]));
        n.spec.tls_secret_ref = Some("my-cluster-member-tls".into());
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        let c = &spec.init_containers.unwrap()[0];
        let value = |name| env_of(c, name).and_then(|e| e.value.clone());
        assert_eq!(
            value("REDIS_ADDR").as_deref(),
            Some("rediss://127.0.0.1:6379")
        );
        assert_eq!(
            value("REDIS_EXPORTER_SKIP_TLS_VERIFICATION").as_deref(),
            Some("true")
        );
    }

    #[test]
    fn turning_metrics_on_replaces_the_members_and_a_member_without_keeps_its_hash() {
        let plain = node(ZoneSpread::BestEffort, &[]);
        let before = crate::controller::cluster::build::spec_hash(&plain.spec);
        // `exporter: None` is not serialized: members from before metrics keep their hash.
        assert!(
            !serde_json::to_string(&plain.spec)
                .unwrap()
                .contains("exporter")
        );
        let after = crate::controller::cluster::build::spec_hash(&with_exporter(plain).spec);
        assert_ne!(before, after);
    }

    #[test]
    fn a_member_that_keeps_its_data_is_restarted_in_place() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.spec.restart_in_place = Some(true);
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        n.spec.restart_in_place = None;
        let spec = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap();
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Always"),
            "members from before"
        );
    }

    #[test]
    fn best_effort_spreads_shard_members_softly_over_zones_and_hosts() {
        let spec = pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap();
        let tsc = spec.topology_spread_constraints.unwrap();
        assert_eq!(tsc.len(), 2);
        assert!(
            tsc.iter()
                .all(|c| c.when_unsatisfiable == "ScheduleAnyway" && c.max_skew == 1)
        );
        assert!(spec.affinity.is_none());
    }

    #[test]
    fn required_spread_is_hard_per_shard_and_soft_cluster_wide() {
        let spec = pod(&node(ZoneSpread::Required, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap();
        let tsc = spec.topology_spread_constraints.unwrap();
        let zone: Vec<_> = tsc
            .iter()
            .filter(|c| c.topology_key == "topology.kubernetes.io/zone")
            .collect();
        assert_eq!(zone.len(), 2);
        assert_eq!(zone[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!(zone[1].when_unsatisfiable, "ScheduleAnyway");
        let host = tsc
            .iter()
            .find(|c| c.topology_key == "kubernetes.io/hostname")
            .unwrap();
        assert_eq!(host.when_unsatisfiable, "ScheduleAnyway");
    }

    #[test]
    fn zones_become_required_node_affinity() {
        let spec = pod(
            &node(ZoneSpread::BestEffort, &["zone-a", "zone-b"]),
            &BTreeMap::new(),
        )
        .unwrap()
        .spec
        .unwrap();
        let terms = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        let expr = &terms.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .unwrap()[0];
        assert_eq!(expr.key, "topology.kubernetes.io/zone");
        assert_eq!(
            expr.values.as_ref().unwrap(),
            &vec!["zone-a".to_string(), "zone-b".to_string()]
        );
    }

    #[test]
    fn the_configs_node_affinity_is_required_together_with_the_clusters_zones() {
        use crate::api::placement::{
            NodeAffinity as ConfigAffinity, NodeOperator, NodeRequirement, PreferredNodes,
        };
        let requirement = |key: &str, operator, values: &[&str]| NodeRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let term = |r: Vec<NodeRequirement>| crate::api::placement::NodeSelectorTerm {
            match_expressions: r,
        };
        let mut n = node(ZoneSpread::BestEffort, &["zone-a"]);
        n.spec.placement.node_affinity = Some(ConfigAffinity {
            required: vec![
                term(vec![requirement("pool", NodeOperator::In, &["valkey"])]),
                term(vec![requirement("spare", NodeOperator::Exists, &[])]),
            ],
            preferred: vec![PreferredNodes {
                weight: 40,
                preference: term(vec![requirement("cpu", NodeOperator::Gt, &["8"])]),
            }],
        });
        let affinity = pod(&n, &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap()
            .affinity
            .unwrap()
            .node_affinity
            .unwrap();
        let terms = affinity
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        let shown: Vec<Vec<(String, String)>> = terms
            .iter()
            .map(|t| {
                t.match_expressions
                    .iter()
                    .flatten()
                    .map(|e| (e.key.clone(), e.operator.clone()))
                    .collect()
            })
            .collect();
        // Either node pool, and in every case one of the cluster's zones.
        let zone = ("topology.kubernetes.io/zone".to_string(), "In".to_string());
        assert_eq!(
            shown,
            vec![
                vec![("pool".into(), "In".into()), zone.clone()],
                vec![("spare".into(), "Exists".into()), zone],
            ]
        );
        assert_eq!(terms[1].match_expressions.as_ref().unwrap()[0].values, None);
        let preferred = affinity
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred[0].weight, 40);
        let cpu = &preferred[0].preference.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (cpu.operator.as_str(), cpu.values.clone()),
            ("Gt", Some(vec!["8".into()]))
        );

        // Preferences alone require nothing; no zones and no affinity: no affinity at all.
        n.spec.placement.zones.clear();
        n.spec
            .placement
            .node_affinity
            .as_mut()
            .unwrap()
            .required
            .clear();
        let affinity = pod(&n, &BTreeMap::new()).unwrap().spec.unwrap().affinity;
        let node_affinity = affinity.unwrap().node_affinity.unwrap();
        assert!(
            node_affinity
                .required_during_scheduling_ignored_during_execution
                .is_none()
        );
        n.spec.placement.node_affinity = None;
        assert!(
            pod(&n, &BTreeMap::new())
                .unwrap()
                .spec
                .unwrap()
                .affinity
                .is_none()
        );
    }

    #[test]
    fn the_configs_further_spreads_count_the_shards_or_the_clusters_members() {
        use crate::api::placement::{SpreadScope, TopologySpread, WhenUnsatisfiable};
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.spec.placement.topology_spread = vec![
            TopologySpread {
                topology_key: "example.com/rack".into(),
                ..Default::default()
            },
            TopologySpread {
                topology_key: "example.com/room".into(),
                max_skew: Some(2),
                when_unsatisfiable: Some(WhenUnsatisfiable::DoNotSchedule),
                scope: Some(SpreadScope::Cluster),
            },
        ];
        let tsc = pod(&n, &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap()
            .topology_spread_constraints
            .unwrap();
        let of = |key: &str| tsc.iter().find(|c| c.topology_key == key).unwrap().clone();
        let labels =
            |c: &TopologySpreadConstraint| c.label_selector.clone().unwrap().match_labels.unwrap();
        let rack = of("example.com/rack");
        assert_eq!(
            (rack.max_skew, rack.when_unsatisfiable.as_str()),
            (1, "ScheduleAnyway")
        );
        assert_eq!(
            labels(&rack),
            labels(&of("kubernetes.io/hostname")),
            "a shard's members"
        );
        let room = of("example.com/room");
        assert_eq!(
            (room.max_skew, room.when_unsatisfiable.as_str()),
            (2, "DoNotSchedule")
        );
        assert_eq!(
            labels(&room),
            names::member_selector("my-cluster"),
            "the cluster's members"
        );
    }

    #[test]
    fn the_images_pull_secrets_reach_the_pod() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        assert_eq!(
            pod(&n, &BTreeMap::new())
                .unwrap()
                .spec
                .unwrap()
                .image_pull_secrets,
            None
        );
        n.spec.image_pull_secrets = vec!["registry-a".into(), "registry-b".into()];
        let secrets = pod(&n, &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap()
            .image_pull_secrets;
        let names: Vec<String> = secrets.unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["registry-a", "registry-b"]);
    }

    #[test]
    fn pod_annotations_follow_the_spec_and_leave_others_alone() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // A pod created with {a, b}, then someone else's annotation added.
        let mut current = map(&[("a", "1"), ("b", "2"), ("theirs", "x")]);
        current.insert(MANAGED_ANNOTATIONS.into(), "a,b".into());
        assert_eq!(
            pod_annotations_patch(&current, &map(&[("a", "1"), ("b", "2")])),
            None
        );
        // b removed, a changed, c added: theirs untouched.
        let patch = pod_annotations_patch(&current, &map(&[("a", "9"), ("c", "3")])).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {
                "a": "9", "b": null, "c": "3", MANAGED_ANNOTATIONS: "a,c"
            }}})
        );
        // Everything removed: the bookkeeping goes too.
        let patch = pod_annotations_patch(&current, &BTreeMap::new()).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"a": null, "b": null, MANAGED_ANNOTATIONS: null}}})
        );
        // A key that is not ours (no bookkeeping) is never deleted.
        let patch = pod_annotations_patch(&map(&[("theirs", "x")]), &BTreeMap::new());
        assert_eq!(patch, None);
    }

    #[test]
    fn a_node_without_uid_is_refused_rather_than_built_without_its_owner() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.metadata.uid = None;
        let err = pod(&n, &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("has no metadata.uid"), "{err}");
        assert!(config_map(&n).is_err());
    }

    #[test]
    fn pod_annotations_are_copied_and_config_hash_added() {
        let p = pod(
            &node(ZoneSpread::BestEffort, &[]),
            &BTreeMap::from([("team".to_string(), "a".to_string())]),
        )
        .unwrap();
        let a = p.metadata.annotations.unwrap();
        assert_eq!(a["team"], "a");
        assert!(a.contains_key(CONFIG_HASH_ANNOTATION));
    }

    #[test]
    fn config_map_renders_valkey_conf() {
        let cm = config_map(&node(ZoneSpread::BestEffort, &[])).unwrap();
        let conf = &cm.data.unwrap()[CONFIG_KEY];
        assert!(conf.contains("maxmemory 1500mb"));
        assert_eq!(cm.metadata.name.as_deref(), Some("my-cluster-1-0-config"));
    }

    /// The valkey container of [`the_pod_is_sent_exactly_as_built`]'s TLS member, as sent.
    fn expected_tls_container() -> serde_json::Value {
        json!({
            "name": "valkey",
            "image": "valkey/valkey:9.0.0",
            "command": [
                "valkey-server", "/etc/valkey/valkey.conf",
                "--cluster-announce-ip", "$(POD_IP)",
                "--cluster-announce-hostname",
                "my-cluster-1-0.my-cluster.my-app.svc.cluster.local",
            ],
            "env": [{"name": "POD_IP",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [
                {"name": "valkey", "containerPort": 6379},
                {"name": "cluster-bus", "containerPort": 16379},
            ],
            "resources": {
                "requests": {"cpu": "1", "memory": "2Gi"},
                "limits": {"cpu": "1", "memory": "2Gi"},
            },
            "readinessProbe": {"tcpSocket": {"port": 6379},
                "periodSeconds": 2, "failureThreshold": 3},
            "livenessProbe": {"tcpSocket": {"port": 6379},
                "initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 6},
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/valkey", "readOnly": true},
                {"name": "acl", "mountPath": "/etc/valkey-acl", "readOnly": true},
                {"name": "data", "mountPath": "/data"},
                {"name": "tls", "mountPath": "/etc/valkey-tls", "readOnly": true},
            ],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": true,
                "runAsNonRoot": true,
            },
        })
    }

    /// Everything sent to the API server for a pod, field by field: a field added, dropped or
    /// renamed by a change to the builder shows here.
    #[test]
    fn the_pod_is_sent_exactly_as_built() {
        let mut n = node(ZoneSpread::Required, &["zone-a"]);
        n.spec.tls_secret_ref = Some(names::tls_secret("my-cluster"));
        let p = pod(&n, &BTreeMap::from([("team".to_string(), "a".to_string())])).unwrap();
        let shard = json!({"matchLabels": {
            "valkey.gomomento.com/cluster": "my-cluster", "valkey.gomomento.com/shard": "1"}});
        let spread = |key: &str, when: &str, selector: &serde_json::Value| {
            json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
                "labelSelector": selector})
        };
        let zone = "topology.kubernetes.io/zone";
        let expected = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "my-cluster-1-0", "namespace": "my-app",
                "annotations": {
                    "team": "a",
                    "valkey.gomomento.com/config-hash": sha256_hex(valkey_conf(&n))[..12],
                    "valkey.gomomento.com/pod-annotations": "team",
                },
                "labels": names::member_labels("my-cluster", 1, "my-cluster-1-0"),
                "ownerReferences": [{
                    "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyNode",
                    "name": "my-cluster-1-0", "uid": "uid-n", "controller": true,
                }],
            },
            "spec": {
                "hostname": "my-cluster-1-0",
                "subdomain": "my-cluster",
                "enableServiceLinks": false,
                "automountServiceAccountToken": false,
                "securityContext": {
                    "runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "terminationGracePeriodSeconds": 30,
                "restartPolicy": "Never",
                "readinessGates": [{"conditionType": "valkey.gomomento.com/holds-data"}],
                "nodeSelector": {"disk": "ssd"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{
                        "key": zone, "operator": "In", "values": ["zone-a"],
                    }]}],
                }}},
                "topologySpreadConstraints": [
                    spread("kubernetes.io/hostname", "ScheduleAnyway", &shard),
                    spread(zone, "DoNotSchedule", &shard),
                    spread(zone, "ScheduleAnyway",
                        &json!({"matchLabels": names::member_selector("my-cluster")})),
                ],
                "containers": [expected_tls_container()],
                "volumes": [
                    {"name": "config", "configMap": {"name": "my-cluster-1-0-config"}},
                    {"name": "acl", "secret": {"secretName": "my-cluster-acl"}},
                    {"name": "data", "emptyDir": {}},
                    {"name": "tls", "secret": {"secretName": "my-cluster-member-tls"}},
                ],
            },
        });
        assert_eq!(serde_json::to_value(&p).unwrap(), expected);
    }

    /// No zones, no node selector, no resources: the empty maps are still sent (as they always
    /// were), and no affinity.
    #[test]
    fn a_bare_pod_still_sends_its_empty_maps() {
        let mut bare = node(ZoneSpread::BestEffort, &[]);
        bare.spec.placement.node_selector.clear();
        bare.spec.resources = Resources::default();
        let spec = serde_json::to_value(pod(&bare, &BTreeMap::new()).unwrap().spec).unwrap();
        assert_eq!(spec["nodeSelector"], json!({}));
        assert_eq!(
            spec["containers"][0]["resources"],
            json!({"requests": {}, "limits": {}})
        );
        assert_eq!(spec.get("affinity"), None);
    }

    #[test]
    fn a_member_with_external_access_announces_its_service_address_to_clients_only() {
        let mut n = node(ZoneSpread::BestEffort, &[]);
        n.spec.external = Some(ExternalServiceType::NodePort);
        let service = external_service(&n, ExternalServiceType::NodePort).unwrap();
        let spec = service.spec.clone().unwrap();
        assert_eq!(service.metadata.name.as_deref(), Some("my-cluster-1-0-ext"));
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let selector = spec.selector.clone().unwrap();
        assert_eq!(
            selector.get(LABEL_NODE).map(String::as_str),
            Some("my-cluster-1-0")
        );
        let owner = &service.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ValkeyNode", Some(true))
        );

        // The API server gave it node port 31234: announced on the pod's node.
        let mut applied = service.clone();
        applied.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(31234);
        let endpoint = ExternalEndpoint::of(&applied).unwrap();
        let container = &super::pod(&n, &BTreeMap::new(), Some(&endpoint))
            .unwrap()
            .spec
            .unwrap()
            .containers[0];
        let command = container.command.clone().unwrap().join(" ");
        assert!(
            command.contains("--cluster-announce-ip $(POD_IP) --cluster-announce-client-ipv4 $(HOST_IP) --cluster-announce-client-port 31234"),
            "{command}"
        );
        let env = container.env.clone().unwrap();
        let host = env.iter().find(|e| e.name == "HOST_IP").expect("HOST_IP");
        let field = host
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap();
        assert_eq!(field.field_path, "status.hostIP");
        // Without it: no client announcement, no HOST_IP.
        let plain = &pod(&node(ZoneSpread::BestEffort, &[]), &BTreeMap::new())
            .unwrap()
            .spec
            .unwrap()
            .containers[0];
        assert!(!plain.command.clone().unwrap().join(" ").contains("client"));
        assert_eq!(plain.env.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_load_balancer_member_waits_for_an_ip_and_announces_it_with_the_service_port() {
        let n = node(ZoneSpread::BestEffort, &[]);
        let mut lb = external_service(&n, ExternalServiceType::LoadBalancer).unwrap();
        assert_eq!(ExternalEndpoint::of(&lb), None, "no address yet");
        let status = |ingress: serde_json::Value| {
            serde_json::from_value(serde_json::json!({"loadBalancer": {"ingress": ingress}}))
                .unwrap()
        };
        lb.status = Some(status(serde_json::json!([{"hostname": "lb.example"}])));
        assert_eq!(ExternalEndpoint::of(&lb), None, "a hostname is no address");
        lb.status = Some(status(serde_json::json!([{"ip": "203.0.113.7"}])));
        assert_eq!(
            ExternalEndpoint::of(&lb),
            Some(ExternalEndpoint {
                ip: "203.0.113.7".into(),
                port: 6379
            })
        );
    }
}
