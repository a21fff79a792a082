//! CPU and memory of a container, as Kubernetes quantities: what a ValkeyConfig gives every
//! Valkey container and its metrics exporter. Its own module so that [`super::metrics`] need
//! not import [`super::config`], which imports it.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::positive_quantity_rule;

/// CPU and memory of a Valkey container, as Kubernetes quantities.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// CPU, for example `"1"`, `"500m"` or `"4"` (quote numbers in YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = positive_quantity_rule("cpu", "\"500m\" or \"2\""))]
    pub cpu: Option<String>,

    /// Memory, for example `2Gi` or `16Gi`. Keep `maxmemory` well below it (replication and
    /// fork overhead need headroom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = positive_quantity_rule("memory", "2Gi"))]
    pub memory: Option<String>,
}
