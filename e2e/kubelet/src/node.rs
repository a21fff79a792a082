//! Node registration and heartbeats.
//!
//! Each simulated node is a Node object with zone/hostname labels, capacity, addresses and
//! nodeInfo, kept Ready by status updates and by Lease renewals in `kube-node-lease` (the
//! node lifecycle controller's heartbeat), so kube-controller-manager never taints it.
//!
//! Fault hook: while `<state>/nodes/<node>/stopped` exists, the node is "powered off":
//! no heartbeats, no lease renewals, its pods' processes are SIGSTOPped and their workers
//! pause. Removing the file resumes everything.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;
use tokio::sync::watch;

use crate::envvars::API_HOST;
use crate::runtime::Shared;
use crate::state::{StateDir, read_trimmed};

pub const KUBELET_VERSION: &str = "v1.34.4";
const LEASE_NS: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;

#[derive(Clone, Debug, PartialEq)]
pub struct NodeDef {
    pub name: String,
    pub zone: String,
    pub port: u16,
}

/// `node-a`/`zone-a`, `node-b`/`zone-b`, ... with log-server ports base, base+1, ...
pub fn node_defs(n: usize, base_port: u16) -> Vec<NodeDef> {
    (0..n)
        .map(|i| {
            let letter = (b'a' + (i % 26) as u8) as char;
            let suffix = if i < 26 {
                letter.to_string()
            } else {
                format!("{letter}{}", i / 26)
            };
            NodeDef {
                name: format!("node-{suffix}"),
                zone: format!("zone-{suffix}"),
                port: base_port + i as u16,
            }
        })
        .collect()
}

fn labels(d: &NodeDef) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("topology.kubernetes.io/zone".into(), d.zone.clone()),
        ("topology.kubernetes.io/region".into(), "local".into()),
        ("kubernetes.io/hostname".into(), d.name.clone()),
        ("kubernetes.io/os".into(), "linux".into()),
        ("kubernetes.io/arch".into(), "amd64".into()),
        ("beta.kubernetes.io/os".into(), "linux".into()),
        ("beta.kubernetes.io/arch".into(), "amd64".into()),
    ])
}

fn resources() -> BTreeMap<String, Quantity> {
    [
        ("cpu", "64"),
        ("memory", "256Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v.into())))
    .collect()
}

/// The node status to publish (pure).
pub fn node_status(d: &NodeDef, now: Timestamp, ready_since: Timestamp) -> NodeStatus {
    let cond = |t: &str, s: &str, reason: &str, msg: &str| NodeCondition {
        type_: t.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(msg.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(ready_since)),
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_string();
    NodeStatus {
        capacity: Some(resources()),
        allocatable: Some(resources()),
        conditions: Some(vec![
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            cond(
                "NetworkUnavailable",
                "False",
                "RouteCreated",
                "vk-kubelet pod network is up",
            ),
            cond(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: API_HOST.into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: d.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: d.port as i32,
            }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: format!("vk-{}", d.name),
            system_uuid: format!("vk-{}", d.name),
            boot_id,
            kernel_version: kernel,
            os_image: "vk-kubelet local processes".into(),
            container_runtime_version: "vk://0.1.0".into(),
            kubelet_version: KUBELET_VERSION.into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: "amd64".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn register(api: &Api<Node>, d: &NodeDef) -> anyhow::Result<Node> {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(d.name.clone()),
            labels: Some(labels(d)),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &node).await {
        Ok(n) => {
            tracing::info!(node = %d.name, "node registered");
            Ok(n)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Re-registration after a restart: make sure our labels are there.
            let patch = serde_json::json!({ "metadata": { "labels": labels(d) } });
            Ok(api
                .patch(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?)
        }
        Err(e) => Err(e.into()),
    }
}

async fn renew_lease(api: &Api<Lease>, node: &Node, d: &NodeDef) -> anyhow::Result<()> {
    let now = MicroTime(Timestamp::now());
    if api.get_opt(&d.name).await?.is_some() {
        let patch = serde_json::json!({ "spec": {
            "holderIdentity": d.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now } });
        api.patch(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    } else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(d.name.clone()),
                namespace: Some(LEASE_NS.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: d.name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(d.name.clone()),
                lease_duration_seconds: Some(LEASE_SECONDS),
                renew_time: Some(now),
                ..Default::default()
            }),
        };
        api.create(&PostParams::default(), &lease).await?;
    }
    Ok(())
}

/// Sends `sig` to every container process of the pods on `node` (by their state files).
pub fn signal_node_pods(state: &StateDir, node: &str, sig: Signal) {
    for (dir, ..) in state.list_pod_dirs() {
        if read_trimmed(&dir.join("node")).ok().as_deref() != Some(node) {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().extension().and_then(|x| x.to_str()) == Some("pid")
                && let Some(pid) = read_trimmed(&e.path())
                    .ok()
                    .and_then(|s| s.parse::<i32>().ok())
                // Only our container's group, never whatever reused a stale pid.
                && read_trimmed(&dir.join("netns"))
                    .is_ok_and(|ns| crate::runtime::process_in_netns(pid, &ns))
            {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    }
}

/// Keeps one node registered and Ready; honours the `stopped` control file.
pub async fn run_node(shared: Arc<Shared>, d: NodeDef, gate: watch::Sender<bool>) {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let leases: Api<Lease> = Api::namespaced(shared.client.clone(), LEASE_NS);
    let node = loop {
        match register(&nodes, &d).await {
            Ok(n) => break n,
            Err(e) => {
                tracing::warn!(node = %d.name, error = %format!("{e:#}"), "node registration failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let stop_file = shared.state.node_stopped_file(&d.name);
    let mut ready_since = Timestamp::now();
    let mut stopped = false;
    // Forces an immediate heartbeat on the first round and after a resume.
    let mut last_lease = tokio::time::Instant::now() - Duration::from_secs(3600);
    let mut last_status = last_lease;
    loop {
        let now_stopped = stop_file.exists();
        if now_stopped != stopped {
            stopped = now_stopped;
            let _ = gate.send(stopped);
            if stopped {
                tracing::warn!(node = %d.name, "node stopped by control file: no heartbeats, pods paused");
            } else {
                tracing::warn!(node = %d.name, "node resumed");
                signal_node_pods(&shared.state, &d.name, Signal::SIGCONT);
                ready_since = Timestamp::now();
                last_lease -= Duration::from_secs(3600);
                last_status -= Duration::from_secs(3600);
            }
        }
        if stopped {
            // Repeat every round: catches containers that (re)started just before the stop.
            signal_node_pods(&shared.state, &d.name, Signal::SIGSTOP);
        } else {
            let now = tokio::time::Instant::now();
            if now - last_lease >= Duration::from_secs(10) {
                match renew_lease(&leases, &node, &d).await {
                    Ok(()) => last_lease = now,
                    Err(e) => {
                        tracing::warn!(node = %d.name, error = %format!("{e:#}"), "lease renewal failed")
                    }
                }
            }
            if now - last_status >= Duration::from_secs(20) {
                let status = node_status(&d, Timestamp::now(), ready_since);
                let patch = serde_json::json!({ "status": status });
                match nodes
                    .patch_status(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => last_status = now,
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        tracing::warn!(node = %d.name, "node object vanished; re-registering");
                        let _ = register(&nodes, &d).await;
                    }
                    Err(e) => {
                        tracing::warn!(node = %d.name, error = %e, "node status update failed")
                    }
                }
            }
        }
        if shared.shutdown.is_cancelled() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defs_and_status() {
        let d = node_defs(3, 10250);
        assert_eq!(
            d[2],
            NodeDef {
                name: "node-c".into(),
                zone: "zone-c".into(),
                port: 10252
            }
        );
        let s = node_status(&d[0], Timestamp::now(), Timestamp::now());
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(
            s.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
        assert_eq!(labels(&d[1])["topology.kubernetes.io/zone"], "zone-b");
    }
}
