//! Host-side name resolution through the cluster's DNS (CoreDNS behind the kube-dns Service,
//! reached through kube-proxy like any ClusterIP), so a test on the host resolves
//! `{pod}.{service}.{ns}.svc.cluster.local` exactly as a pod does.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context as _;
use hickory_resolver::Resolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

/// The kube-dns Service's ClusterIP (e2e/cluster.sh DNS_SERVICE_IP).
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 10);

/// A resolver asking only the cluster DNS.
pub fn cluster_resolver() -> anyhow::Result<Resolver<TokioRuntimeProvider>> {
    let config = ResolverConfig::from_name_servers(vec![NameServerConfig::udp_and_tcp(
        IpAddr::V4(CLUSTER_DNS),
    )]);
    Resolver::builder_with_config(config, TokioRuntimeProvider::default())
        .build()
        .context("building the cluster DNS resolver")
}

/// The IPv4 addresses the cluster DNS gives for `name` (a fully qualified name).
pub async fn resolve_ipv4(name: &str) -> anyhow::Result<Vec<Ipv4Addr>> {
    let fqdn = if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    };
    let answer = cluster_resolver()?
        .lookup_ip(fqdn.as_str())
        .await
        .with_context(|| format!("resolving {name} through the cluster DNS {CLUSTER_DNS}"))?;
    Ok(answer
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
        .collect())
}
