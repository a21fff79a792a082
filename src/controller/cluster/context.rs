//! What every reconcile of a cluster shares (the controller's context, the stores it reads the
//! members from, what it remembers between reconciles) and what resolution hands the later
//! steps.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use super::{autoscale, cadence, live, repeats, sweeps, utilization};
use crate::api::ValkeyNode;
use crate::controller::Context;

/// The cluster controller's view of the world: shared context plus the member stores.
pub struct ClusterContext {
    pub ctx: Arc<Context>,
    pub nodes: Store<ValkeyNode>,
    pub pods: Store<Pod>,
    /// The Node objects that exist (names only): see `observe::lost_with_its_node`.
    pub hosts: Store<PartialObjectMeta<Node>>,
    /// Since when each changing cluster has waited for the same thing (the poll follows it).
    pub waits: cadence::Waits,
    /// The steps each cluster carried out round after round (they back off; see [`repeats`]).
    pub repeats: repeats::Repeats,
    /// Every member's utilization history (see [`utilization`]).
    pub samples: utilization::Samples,
    /// Autoscaling episodes under way (see [`autoscale`]).
    pub episodes: autoscale::Episodes,
    /// What each member was set to live, per process (see [`live`]).
    pub live: live::Applied,
    /// The generation of each cluster whose stray objects were last deleted.
    pub sweeps: sweeps::Sweeps,
}

impl ClusterContext {
    /// The context over these stores, with nothing remembered yet (a new operator process).
    pub fn new(
        ctx: Arc<Context>,
        nodes: Store<ValkeyNode>,
        pods: Store<Pod>,
        hosts: Store<PartialObjectMeta<Node>>,
    ) -> ClusterContext {
        ClusterContext {
            ctx,
            nodes,
            pods,
            hosts,
            waits: Default::default(),
            repeats: Default::default(),
            samples: Default::default(),
            episodes: Default::default(),
            live: Default::default(),
            sweeps: Default::default(),
        }
    }
}

/// What resolution produced: the merged config, and the ACL file's inputs (the bindings and
/// the roles they name).
pub struct Resolved {
    pub config: crate::resolve::ResolvedConfig,
    pub acl_file_inputs: (
        Vec<crate::api::AclBinding>,
        BTreeMap<String, crate::api::ValkeyRoleSpec>,
    ),
}
