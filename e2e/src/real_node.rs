//! The local cluster's real node (e2e/real-node.sh): the upstream kubelet with containerd and
//! runc, images pulled from the registry on the machine. `real-a` has no zone and is tainted,
//! so only pods that ask for it run there (the zoned nodes are real nodes too, by default).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec, Toleration};

/// The first real node (`LC_REAL_NODES` in e2e/real-node.sh).
pub const NODE: &str = "real-a";
/// e2e/real-node.sh's REAL_NODE_TAINT.
pub const TAINT: &str = "valkey-operator.local/real-node";

/// Puts a pod on the real node: selects it by hostname and tolerates its taint.
pub fn place(spec: &mut PodSpec) {
    spec.node_selector = Some(BTreeMap::from([(
        "kubernetes.io/hostname".to_string(),
        NODE.to_string(),
    )]));
    spec.tolerations.get_or_insert_default().push(Toleration {
        key: Some(TAINT.into()),
        operator: Some("Exists".into()),
        ..Default::default()
    });
    // The node is chosen by name: no affinity of the original spec may send it elsewhere.
    spec.affinity = None;
    spec.topology_spread_constraints = None;
}

/// Why a container of the pod ended last (its current state, else its last state), e.g.
/// `OOMKilled` or `StartError`, with the runtime's message.
pub fn termination(pod: &Pod, container: &str) -> Option<(String, String)> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == container)?;
    let ended = status
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .or_else(|| status.last_state.as_ref()?.terminated.clone())?;
    Some((
        ended.reason.unwrap_or_default(),
        ended.message.unwrap_or_default(),
    ))
}
