//! Clients outside the Kubernetes cluster: the platform team allows it per ValkeyConfig (which
//! Service types), a product team asks for it per ValkeyCluster. Each member then gets a
//! Service of that type of its own, and Valkey announces that Service's address to clients
//! (`cluster-announce-client-ipv4` and `-client-port`: `CLUSTER SLOTS`, `CLUSTER SHARDS`,
//! `MOVED`), while the cluster bus and replication stay on the pod addresses.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The Service type that gives each member an address outside the Kubernetes cluster.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ExternalServiceType {
    /// A NodePort Service per member: clients reach the member at its node's address (the
    /// node's `ExternalIP`, else its `InternalIP`) and the Service's node port.
    NodePort,
    /// A LoadBalancer Service per member: clients reach the member at the load balancer's
    /// IP address, port 6379. The member starts once the load balancer has an address.
    LoadBalancer,
}

impl std::fmt::Display for ExternalServiceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExternalServiceType::NodePort => "NodePort",
            ExternalServiceType::LoadBalancer => "LoadBalancer",
        })
    }
}

/// `ValkeyCluster.spec.externalAccess`: reach the members from outside the Kubernetes
/// cluster. The type must be one the cluster's ValkeyConfig allows. Setting, changing or
/// removing it replaces the members one at a time (each new member starts with its address).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalAccess {
    /// `NodePort` or `LoadBalancer`.
    #[serde(rename = "type")]
    pub service_type: ExternalServiceType,
}

/// `ValkeyConfig.spec.externalAccess` (platform team): the Service types clusters on this
/// config may ask for. Set here, it replaces the base's; unset: inherited (no config in the
/// chain setting it: no external access).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalAccessPolicy {
    /// Allowed types; empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub allowed_types: Vec<ExternalServiceType>,
}

/// Why a cluster asking for `wanted` cannot have it on a config allowing `allowed` (whose
/// name is `config`), or with TLS; `None` when it may.
pub fn external_access_problem(
    wanted: Option<&ExternalAccess>,
    tls: bool,
    config: &str,
    allowed: &[ExternalServiceType],
) -> Option<String> {
    let wanted = wanted?.service_type;
    if tls {
        return Some(format!(
            "spec.externalAccess ({wanted}) cannot be combined with spec.tls yet: TLS clients are sent to the members' in-cluster hostnames, which clients outside the cluster cannot resolve; remove one of the two"
        ));
    }
    if allowed.contains(&wanted) {
        return None;
    }
    let allowed = if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "spec.externalAccess.type {wanted} is not allowed by ValkeyConfig {config:?} (allowed: {allowed}); ask the platform team to add it to the config's spec.externalAccess.allowedTypes, or remove spec.externalAccess"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_access_needs_a_type_the_config_allows_and_no_tls() {
        let node_port = ExternalAccess {
            service_type: ExternalServiceType::NodePort,
        };
        let both = [
            ExternalServiceType::NodePort,
            ExternalServiceType::LoadBalancer,
        ];
        assert_eq!(external_access_problem(None, true, "c", &[]), None);
        assert_eq!(
            external_access_problem(Some(&node_port), false, "c", &both),
            None
        );
        let refused = external_access_problem(Some(&node_port), false, "standard", &[]).unwrap();
        assert!(
            refused
                .contains("NodePort is not allowed by ValkeyConfig \"standard\" (allowed: none)")
                && refused.contains("allowedTypes"),
            "{refused}"
        );
        let lb_only = [ExternalServiceType::LoadBalancer];
        let refused = external_access_problem(Some(&node_port), false, "c", &lb_only).unwrap();
        assert!(refused.contains("(allowed: LoadBalancer)"), "{refused}");
        let tls = external_access_problem(Some(&node_port), true, "c", &both).unwrap();
        assert!(tls.contains("cannot be combined with spec.tls"), "{tls}");
    }

    #[test]
    fn the_type_is_spelled_as_kubernetes_spells_service_types() {
        let access: ExternalAccess = serde_json::from_str(r#"{"type": "LoadBalancer"}"#).unwrap();
        assert_eq!(access.service_type, ExternalServiceType::LoadBalancer);
        assert!(serde_json::from_str::<ExternalAccess>(r#"{"type": "ClusterIP"}"#).is_err());
    }
}
