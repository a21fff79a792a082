//! A pod's `/etc/resolv.conf`, written as the real kubelet does from `dnsPolicy` and
//! `dnsConfig`: with `ClusterFirst` (the default) the cluster DNS Service first, the search
//! path `<ns>.svc.<domain> svc.<domain> <domain>` and `ndots:5`; `Default` the node's own
//! resolver; `None` only what `dnsConfig` says. `dnsConfig` adds to the first two.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};

/// The cluster's DNS, as the kubelet's `--cluster-dns` and `--cluster-domain` give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDns {
    pub server: Ipv4Addr,
    pub domain: String,
}

/// Kubernetes' limits: at most 3 nameservers and 32 search domains.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// The resolv.conf for `pod`. `host` is the node's own resolv.conf (for `Default`, and for
/// `ClusterFirst` when the cluster has no DNS configured, as the real kubelet falls back).
pub fn resolv_conf(pod: &Pod, cluster: Option<&ClusterDns>, host: &str) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let (mut servers, mut searches, mut options) = match (policy, cluster) {
        ("None", _) => (vec![], vec![], vec![]),
        ("ClusterFirst" | "ClusterFirstWithHostNet", Some(c)) => (
            vec![c.server.to_string()],
            vec![
                format!("{ns}.svc.{}", c.domain),
                format!("svc.{}", c.domain),
                c.domain.clone(),
            ],
            vec!["ndots:5".to_string()],
        ),
        _ => parse_host(host),
    };
    if let Some(PodDNSConfig {
        nameservers,
        searches: extra_searches,
        options: extra_options,
    }) = &spec.dns_config
    {
        servers.extend(nameservers.iter().flatten().cloned());
        searches.extend(extra_searches.iter().flatten().cloned());
        for o in extra_options.iter().flatten() {
            let rendered = match &o.value {
                Some(v) => format!("{}:{v}", o.name.as_deref().unwrap_or_default()),
                None => o.name.clone().unwrap_or_default(),
            };
            // A pod's option replaces the default of the same name (ndots:2 over ndots:5).
            let name = rendered.split(':').next().unwrap_or_default().to_string();
            options.retain(|existing| existing.split(':').next() != Some(name.as_str()));
            options.push(rendered);
        }
    }
    dedup(&mut servers);
    dedup(&mut searches);
    servers.truncate(MAX_NAMESERVERS);
    searches.truncate(MAX_SEARCHES);
    let mut out = String::from("# Kubernetes-managed resolv.conf (vk-kubelet).\n");
    for s in &servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !searches.is_empty() {
        out.push_str(&format!("search {}\n", searches.join(" ")));
    }
    if !options.is_empty() {
        out.push_str(&format!("options {}\n", options.join(" ")));
    }
    out
}

fn parse_host(host: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut servers, mut searches, mut options) = (vec![], vec![], vec![]);
    for line in host.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => servers.extend(words.map(str::to_string)),
            Some("search" | "domain") => searches.extend(words.map(str::to_string)),
            Some("options") => options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    (servers, searches, options)
}

fn dedup(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|s| seen.insert(s.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfigOption, PodSpec};
    use kube::api::ObjectMeta;

    fn pod(policy: Option<&str>, config: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(str::to_string),
                dns_config: config,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cluster() -> ClusterDns {
        ClusterDns {
            server: Ipv4Addr::new(198, 19, 0, 10),
            domain: "cluster.local".into(),
        }
    }

    const HOST: &str = "# host\nnameserver 10.0.0.2\nsearch corp.example\noptions edns0\n";

    #[test]
    fn cluster_first_is_the_default() {
        assert_eq!(
            resolv_conf(&pod(None, None), Some(&cluster()), HOST),
            "# Kubernetes-managed resolv.conf (vk-kubelet).\nnameserver 198.19.0.10\n\
             search shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
    }

    #[test]
    fn default_policy_and_no_cluster_dns_use_the_node_resolver() {
        let expected = "# Kubernetes-managed resolv.conf (vk-kubelet).\nnameserver 10.0.0.2\n\
                        search corp.example\noptions edns0\n";
        assert_eq!(
            resolv_conf(&pod(Some("Default"), None), Some(&cluster()), HOST),
            expected
        );
        assert_eq!(resolv_conf(&pod(None, None), None, HOST), expected);
    }

    #[test]
    fn dns_config_adds_and_its_options_replace_defaults() {
        let config = PodDNSConfig {
            nameservers: Some(vec!["1.1.1.1".into(), "198.19.0.10".into()]),
            searches: Some(vec!["extra.example".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("single-request".into()),
                    value: None,
                },
            ]),
        };
        let out = resolv_conf(&pod(None, Some(config)), Some(&cluster()), HOST);
        assert!(
            out.contains("nameserver 198.19.0.10\nnameserver 1.1.1.1\n"),
            "{out}"
        );
        assert!(out.contains("cluster.local extra.example\n"), "{out}");
        assert!(out.contains("options ndots:2 single-request\n"), "{out}");
    }

    #[test]
    fn none_policy_takes_only_the_pod_config() {
        let config = PodDNSConfig {
            nameservers: Some(vec!["9.9.9.9".into()]),
            searches: None,
            options: None,
        };
        assert_eq!(
            resolv_conf(&pod(Some("None"), Some(config)), Some(&cluster()), HOST),
            "# Kubernetes-managed resolv.conf (vk-kubelet).\nnameserver 9.9.9.9\n"
        );
    }
}
