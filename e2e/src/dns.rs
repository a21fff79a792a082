//! Host-side name resolution through the cluster's DNS (CoreDNS behind the kube-dns Service,
//! reached through kube-proxy like any ClusterIP), so a test on the host resolves
//! `{pod}.{service}.{ns}.svc.cluster.local` exactly as a pod does, and a cluster client on the
//! host follows MOVED to member hostnames ([`ClusterDnsResolver`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use hickory_resolver::TokioAsyncResolver;
use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};

/// The kube-dns Service's ClusterIP (e2e/cluster.sh DNS_SERVICE_IP).
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 10);

/// A resolver asking only the cluster DNS.
pub fn cluster_resolver() -> TokioAsyncResolver {
    let servers = NameServerConfigGroup::from_ips_clear(&[IpAddr::V4(CLUSTER_DNS)], 53, true);
    TokioAsyncResolver::tokio(
        ResolverConfig::from_parts(None, vec![], servers),
        ResolverOpts::default(),
    )
}

fn fully_qualified(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

/// The IPv4 addresses the cluster DNS gives for `name` (a fully qualified name).
pub async fn resolve_ipv4(name: &str) -> anyhow::Result<Vec<Ipv4Addr>> {
    let answer = cluster_resolver()
        .lookup_ip(fully_qualified(name))
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

/// The IPv4 addresses the cluster DNS gives for `name` once it gives any, asked every 250 ms
/// for up to `limit`, with how long that took: a member's record is published from its
/// EndpointSlice once its pod is Ready, and the DNS server learns it a moment later (and may
/// hold a negative answer for its cache's 5 s).
pub async fn resolve_ipv4_within(
    name: &str,
    limit: std::time::Duration,
) -> anyhow::Result<(Vec<Ipv4Addr>, std::time::Duration)> {
    let started = std::time::Instant::now();
    loop {
        match resolve_ipv4(name).await {
            Ok(answer) if !answer.is_empty() => return Ok((answer, started.elapsed())),
            Ok(_) if started.elapsed() >= limit => {
                anyhow::bail!("{name} has no IPv4 address after {limit:?}")
            }
            Err(e) if started.elapsed() >= limit => return Err(e),
            _ => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
        }
    }
}

/// fred's resolver for clients on the host: IP addresses as they are, names through the
/// cluster DNS (the host's own resolver knows nothing of `cluster.local`).
pub struct ClusterDnsResolver;

#[async_trait::async_trait]
impl fred::types::Resolve for ClusterDnsResolver {
    async fn resolve(
        &self,
        host: fred::bytes_utils::Str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, fred::error::Error> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let ips = match resolve_ipv4(&host).await {
            Ok(ips) if !ips.is_empty() => ips,
            answer => {
                let why = match answer {
                    Err(e) => format!("{e:#}"),
                    Ok(_) => format!("{host} has no IPv4 address"),
                };
                UNRESOLVED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(host.to_string());
                return Err(fred::error::Error::new(fred::error::ErrorKind::IO, why));
            }
        };
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(IpAddr::V4(ip), port))
            .collect())
    }
}

/// Every name a [`ClusterDnsResolver`] of this process was asked for and the cluster DNS did
/// not resolve, in order: a client sent to a member whose name does not resolve yet (NXDOMAIN)
/// shows up here.
static UNRESOLVED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How many names [`ClusterDnsResolver`]s have failed to resolve so far; with
/// [`unresolved_since`], what failed during one stretch of a test.
pub fn unresolved_count() -> usize {
    UNRESOLVED.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// The names that failed to resolve after the first `count` failures.
pub fn unresolved_since(count: usize) -> Vec<String> {
    let all = UNRESOLVED.lock().unwrap_or_else(|e| e.into_inner());
    all.get(count..).map(<[String]>::to_vec).unwrap_or_default()
}
