//! The plugin's reads from the API server, with the user's own credentials. Nothing here
//! decides anything.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::constants::LABEL_CLUSTER;
use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};
use crate::controller::names;
use crate::resolve::MenuMap;
use crate::resolve::conf::ACL_FILE_KEY;

/// The platform's menu (every ValkeyConfig, ValkeyImage and ValkeyRole).
pub async fn menu(client: &Client) -> anyhow::Result<MenuMap> {
    let lp = ListParams::default();
    let configs = Api::<ValkeyConfig>::all(client.clone())
        .list(&lp)
        .await
        .context("cannot list ValkeyConfigs")?;
    let images = Api::<ValkeyImage>::all(client.clone())
        .list(&lp)
        .await
        .context("cannot list ValkeyImages")?;
    let roles = Api::<ValkeyRole>::all(client.clone())
        .list(&lp)
        .await
        .context("cannot list ValkeyRoles")?;
    Ok(MenuMap::from_objects(configs, images, roles))
}

/// A cluster and its members.
pub struct LiveCluster {
    pub cluster: ValkeyCluster,
    pub members: Vec<ValkeyNode>,
}

fn members_of(nodes: &[ValkeyNode], ns: &str, name: &str) -> Vec<ValkeyNode> {
    let mut members: Vec<ValkeyNode> = nodes
        .iter()
        .filter(|n| {
            n.namespace().as_deref() == Some(ns)
                && n.labels().get(LABEL_CLUSTER).map(String::as_str) == Some(name)
        })
        .cloned()
        .collect();
    members.sort_by_key(|n| n.name_any());
    members
}

pub async fn cluster(client: &Client, ns: &str, name: &str) -> anyhow::Result<LiveCluster> {
    let cluster = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read ValkeyCluster {ns}/{name}"))?
        .with_context(|| format!("ValkeyCluster {ns}/{name} does not exist"))?;
    let nodes = Api::<ValkeyNode>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={name}")))
        .await
        .with_context(|| format!("cannot list the ValkeyNodes of {ns}/{name}"))?;
    Ok(LiveCluster {
        members: members_of(&nodes.items, ns, name),
        cluster,
    })
}

/// Every cluster (in `namespace`, or in all namespaces) with its members.
pub async fn clusters(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<LiveCluster>> {
    let (clusters, nodes): (Api<ValkeyCluster>, Api<ValkeyNode>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let hint = "; with access to one namespace only, pass -n <namespace>";
    let clusters = clusters
        .list(&ListParams::default())
        .await
        .with_context(|| format!("cannot list ValkeyClusters{hint}"))?;
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .with_context(|| format!("cannot list ValkeyNodes{hint}"))?;
    Ok(clusters
        .into_iter()
        .map(|c| {
            let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
            LiveCluster {
                members: members_of(&nodes.items, &ns, &name),
                cluster: c,
            }
        })
        .collect())
}

/// The ACL file (`users.acl`) of the cluster's ACL Secret, when the user may read it. The
/// Secret's other key (the replication password) is never read into the output.
pub async fn acl_file(client: &Client, ns: &str, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&names::acl_secret(name))
        .await
        .ok()??;
    let data = secret.data?;
    let bytes = data.get(ACL_FILE_KEY)?;
    String::from_utf8(bytes.0.clone()).ok()
}

pub async fn member_pods(client: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<Pod>> {
    let selector = names::selector_string(&names::member_selector(name));
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .with_context(|| format!("cannot list the pods of {ns}/{name}"))?
        .items)
}

/// Zone of each Kubernetes node the pods run on, where the user may read nodes.
pub async fn zones(client: &Client, pods: &[Pod]) -> BTreeMap<String, String> {
    let api = Api::<Node>::all(client.clone());
    let mut zones = BTreeMap::new();
    for host in pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
    {
        if zones.contains_key(&host) {
            continue;
        }
        if let Ok(Some(node)) = api.get_opt(&host).await
            && let Some(zone) = node.labels().get("topology.kubernetes.io/zone")
        {
            zones.insert(host, zone.clone());
        }
    }
    zones
}

/// The cluster's Events.
pub async fn events(client: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<Event>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=ValkeyCluster,involvedObject.name={name}"
        )))
        .await
        .with_context(|| format!("cannot list the Events of {ns}/{name}"))?
        .items)
}

/// The operator's `maxConcurrentRollouts`, parsed as the operator parses it, when the user may
/// read its settings ConfigMap; `None` (no limit) otherwise.
pub async fn max_concurrent_rollouts(client: &Client, operator_namespace: &str) -> Option<usize> {
    crate::settings::Settings::load(client.clone(), operator_namespace)
        .await
        .ok()?
        .max_concurrent_rollouts
}
