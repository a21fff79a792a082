//! Valkey's own metrics: the exporter sidecar a ValkeyConfig gives every member.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::resources::Resources;

/// The exporter image members run when a config sets none: the upstream Prometheus exporter
/// for Redis and Valkey, which reads `INFO`.
pub const DEFAULT_EXPORTER_IMAGE: &str = "oliver006/redis_exporter:v1.45.0";
/// CPU of the exporter container when a config sets none (requests and limits).
pub const DEFAULT_EXPORTER_CPU: &str = "100m";
/// Memory of the exporter container when a config sets none (requests and limits).
pub const DEFAULT_EXPORTER_MEMORY: &str = "64Mi";
/// Port the exporter serves `/metrics` on, named `metrics` in the pod.
pub const EXPORTER_PORT: u16 = 9121;
/// Name of the exporter's container and of its port.
pub const EXPORTER_NAME: &str = "metrics";

/// Valkey's own metrics (platform team): every member runs a Prometheus exporter beside Valkey
/// (container and port `metrics`, 9121), authenticated as the operator's `_valkey-metrics`
/// user, which may run only `INFO`, `PING`, `CLUSTER INFO`, `SLOWLOG GET|LEN`, `LATENCY
/// LATEST` and `CLIENT SETNAME`, on no key. The exporter never runs `CONFIG` (it would return
/// the replication password). Setting, changing or removing `image` or `resources` replaces
/// the members one at a time; changing `scrapers` does not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Exporter image (`repository:tag` or `repository@digest`). Default
    /// `oliver006/redis_exporter:v1.45.0`; it must accept the upstream exporter's environment
    /// variables (`REDIS_ADDR`, `REDIS_USER`, `REDIS_PASSWORD`, `REDIS_EXPORTER_*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// CPU and memory of the exporter container (requests and limits). Default `100m` and
    /// `64Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Who may scrape the exporters: pods the cluster's NetworkPolicy admits to port 9121,
    /// each entry a NetworkPolicy peer (for example your Prometheus's namespace and pods).
    /// Empty: no pod can reach them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub scrapers: Vec<Scraper>,
}

/// Pods admitted to the exporters, as a NetworkPolicy peer: pods matching `podSelector` in
/// namespaces matching `namespaceSelector`. Unset `namespaceSelector`: the cluster's own
/// namespace only; unset `podSelector`: every pod of the selected namespaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.namespaceSelector) || has(self.podSelector)")
    .message("a scraper needs namespaceSelector, podSelector or both: say which pods may scrape, e.g. namespaceSelector.matchLabels {kubernetes.io/metadata.name: monitoring}"))]
pub struct Scraper {
    /// Namespaces whose pods may scrape (`matchLabels`; every namespace carries
    /// `kubernetes.io/metadata.name: <name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelsSelector>,
    /// Pods that may scrape (`matchLabels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelsSelector>,
}

/// A label selector by equality: objects carrying every one of `matchLabels`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelsSelector {
    /// Labels an object must carry, all of them. Empty: every object.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// The exporter a member runs: what of [`Metrics`] is part of the member's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberExporter {
    /// Exporter image.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// CPU and memory of the exporter container.
    pub resources: Resources,
}

impl Metrics {
    /// The exporter members run, defaults filled in.
    pub fn member_exporter(&self) -> MemberExporter {
        let resources = self.resources.clone().unwrap_or_default();
        MemberExporter {
            image: self
                .image
                .clone()
                .unwrap_or_else(|| DEFAULT_EXPORTER_IMAGE.to_string()),
            resources: Resources {
                cpu: Some(resources.cpu.unwrap_or_else(|| DEFAULT_EXPORTER_CPU.into())),
                memory: Some(
                    resources
                        .memory
                        .unwrap_or_else(|| DEFAULT_EXPORTER_MEMORY.into()),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_metrics_block_runs_the_default_exporter() {
        let exporter = Metrics::default().member_exporter();
        assert_eq!(exporter.image, DEFAULT_EXPORTER_IMAGE);
        assert_eq!(exporter.resources.cpu.as_deref(), Some("100m"));
        assert_eq!(exporter.resources.memory.as_deref(), Some("64Mi"));
    }

    #[test]
    fn what_the_config_sets_wins_field_by_field() {
        let metrics = Metrics {
            image: Some("registry.example/exporter:1".into()),
            resources: Some(Resources {
                cpu: None,
                memory: Some("128Mi".into()),
            }),
            scrapers: vec![],
        };
        let exporter = metrics.member_exporter();
        assert_eq!(exporter.image, "registry.example/exporter:1");
        assert_eq!(exporter.resources.cpu.as_deref(), Some("100m"));
        assert_eq!(exporter.resources.memory.as_deref(), Some("128Mi"));
    }
}
