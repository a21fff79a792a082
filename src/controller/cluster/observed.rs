//! What the observe step found of each member, and the members of a cluster as the store has
//! them: the data every later step reads, kept below the steps that fill and read it.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::api::constants::LABEL_CLUSTER;
use crate::api::{NodeRole, ValkeyNode};
use crate::plan::Member;

/// One member as observed this round.
#[derive(Clone, Debug)]
pub struct Observed {
    pub node: Arc<ValkeyNode>,
    pub member: Member,
    /// Its Valkey exited before the member ever joined (it is being started again).
    pub start_failure: Option<String>,
    pub pod: Option<String>,
    pub role: Option<NodeRole>,
    pub version: Option<String>,
    /// Its Valkey process (`run_id`), when it answered: a new one starts from valkey.conf.
    pub run_id: Option<String>,
    /// Bytes of its append-only file, when `appendonly` is on.
    pub aof_bytes: Option<u64>,
    /// What it uses (memory, CPU, traffic), when it answered: utilization samples.
    pub usage: Option<crate::driver::Usage>,
}

/// The dereference step for members: the ValkeyNodes of one cluster from the store (never a
/// list call per reconcile), by name.
pub fn cluster_nodes(
    store: &Store<ValkeyNode>,
    namespace: &str,
    cluster: &str,
) -> Vec<Arc<ValkeyNode>> {
    let mut nodes: Vec<Arc<ValkeyNode>> = store
        .state()
        .into_iter()
        .filter(|n| {
            n.namespace().as_deref() == Some(namespace)
                && n.labels().get(LABEL_CLUSTER).map(String::as_str) == Some(cluster)
        })
        .collect();
    nodes.sort_by_key(|n| n.name_any());
    nodes
}
