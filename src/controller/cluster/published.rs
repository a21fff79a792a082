//! Whether the hostname a TLS member announces resolves. TLS members announce
//! `<member>.<cluster>.<namespace>.svc.cluster.local` (their pods have the client Service as
//! subdomain), and the cluster DNS answers for it only while the member's address is ready in
//! that Service's EndpointSlices, i.e. once its pod is Ready. Slots move to a member, and a
//! planned failover hands a shard to it, only after that (`plan::rebalance`, `plan::rollout`):
//! a client redirected there must be able to resolve it.
//!
//! Ready in the EndpointSlices is not enough by itself: a new replica is in the cluster's
//! topology (with its hostname) before it is in sync and Ready, and clients that connect to
//! every node they learn of (Lettuce's topology refresh) ask for its name then and get
//! NXDOMAIN, which the DNS server keeps in its negative cache (CoreDNS: up to its `cache` and
//! SOA TTL, 30 s with kubeadm's Corefile, 5 s on the local cluster) after the record exists.
//! So the operator also asks the cluster DNS itself, from its pod, and counts the name as
//! resolving only once the answer is an address.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tracing::warn;

use super::observed::Observed;
use crate::controller::names;

/// Sets `name_resolves` on each TLS member that answered as a primary owning no slots (slots
/// may move to it next) or as a replica (a failover may make it primary), from one
/// EndpointSlice list of the client Service, served from the API server's cache. Every other
/// member keeps `true`: it either announces only its IP or already owns slots. A failed list
/// leaves them waiting (`false`) until the next look.
pub async fn check(client: &Client, observed: &mut [Observed]) {
    let targets: Vec<usize> = observed
        .iter()
        .enumerate()
        .filter(|(_, o)| o.node.spec.tls_secret_ref.is_some() && may_receive_slots(o))
        .map(|(i, _)| i)
        .collect();
    let Some(first) = targets.first().map(|&i| &observed[i].node) else {
        return;
    };
    let namespace = first.namespace().unwrap_or_default();
    let service = names::client_service(&first.spec.cluster_name);
    let params = ListParams::default()
        .labels(&format!("kubernetes.io/service-name={service}"))
        .match_any();
    let resolving = match Api::<EndpointSlice>::namespaced(client.clone(), &namespace)
        .list(&params)
        .await
    {
        Ok(list) => ready_hostnames(&list.items),
        Err(e) => {
            warn!(service = %service, error = %e, "could not list the client Service's EndpointSlices; slots wait to move to new members");
            BTreeSet::new()
        }
    };
    let cluster = first.spec.cluster_name.clone();
    let answered = futures::future::join_all(targets.iter().map(|&i| {
        let name = &observed[i].member.name;
        let ready = resolving.contains(name);
        let hostname = names::member_hostname(name, &cluster, &namespace);
        async move { ready && cluster_dns_answers(&hostname).await }
    }))
    .await;
    for (i, resolves) in targets.into_iter().zip(answered) {
        observed[i].member.name_resolves = resolves;
    }
}

/// Whether the cluster DNS (the operator pod's resolver) gives `hostname` an address now,
/// within a second. Asked only once the name's endpoint is ready, so the question itself does
/// not leave a negative answer in the DNS server's cache.
async fn cluster_dns_answers(hostname: &str) -> bool {
    let absolute = format!("{hostname}.");
    let lookup = tokio::net::lookup_host((absolute.as_str(), 6379));
    match tokio::time::timeout(Duration::from_secs(1), lookup).await {
        Ok(Ok(mut addrs)) => addrs.next().is_some(),
        Ok(Err(e)) => {
            tracing::debug!(hostname, error = %e, "the cluster DNS does not answer for a member's hostname yet");
            false
        }
        Err(_) => false,
    }
}

/// A member that answered and owns no slots: an empty primary or a replica.
fn may_receive_slots(o: &Observed) -> bool {
    o.member.view.as_ref().is_some_and(|v| v.slots.is_empty())
}

/// The hostnames the cluster DNS answers for under the Service these EndpointSlices belong to:
/// those of endpoints that are ready (the DNS server leaves out the others, and a Service that
/// publishes not-ready addresses marks them ready).
pub fn ready_hostnames(slices: &[EndpointSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.hostname.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "my-cluster-abcde", "labels": {"kubernetes.io/service-name": "my-cluster"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn only_ready_endpoints_with_a_hostname_resolve() {
        let slices = [
            slice(json!([
                {"addresses": ["10.0.0.1"], "hostname": "my-cluster-0-0", "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "hostname": "my-cluster-3-0", "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": true}},
            ])),
            // Unknown readiness counts as ready (the EndpointSlice API's own rule).
            slice(json!([{"addresses": ["10.0.0.4"], "hostname": "my-cluster-1-0"}])),
        ];
        assert_eq!(
            ready_hostnames(&slices),
            BTreeSet::from(["my-cluster-0-0".to_string(), "my-cluster-1-0".to_string()])
        );
        assert!(ready_hostnames(&[]).is_empty());
    }
}
