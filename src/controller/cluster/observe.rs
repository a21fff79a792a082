//! Observe step: for each ValkeyNode, its pod and what its Valkey reports, concurrently; and
//! from that the [`Topology`] the plan reads.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tracing::debug;

use super::observed::Observed;
use crate::api::constants::{ANNOTATION_SLOT_MIGRATION, CLIENT_PORT, LABEL_SPEC_HASH};
use crate::api::{Lifecycle, NodeRole, ValkeyCluster, ValkeyNode, ValkeyNodeSpec};
use crate::driver::parse::{MigrationOperation, MigrationState, Role};
use crate::driver::slots::format_range;
use crate::driver::{ATOMIC_MIGRATION_SINCE, ClusterDriver, MemberAddr, MemberObservation};
use crate::plan::{ExportJob, Member, MemberView, MigrationMethod, Topology};

/// The pod's client address once its containers run; whether Valkey answers there is for
/// the observation to find out. (Not `ContainersReady`: that waits for the readiness probe's
/// next period, up to 2 s after Valkey listens, and a TCP probe says no more than a
/// connection does. Nor the pod's own `Ready`: it also waits for the holds-data gate, which
/// the operator sets only after reaching the member.)
pub fn running_address(pod: &Pod) -> Option<MemberAddr> {
    let status = pod.status.as_ref()?;
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let running = !containers.is_empty()
        && containers
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if pod.metadata.deletion_timestamp.is_some() || !running {
        return None;
    }
    status
        .pod_ip
        .as_ref()
        .map(|ip| MemberAddr::new(ip.clone(), CLIENT_PORT))
}

/// Kubernetes reports the pod not Ready (`Ready` condition `False`): its readiness probe
/// fails, or its node stopped reporting and the node lifecycle controller marked it. (For a
/// silent member its holds-data gate is not the cause: the gate is written only from what a
/// member answers.)
pub fn not_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready") == Some("False")
}

/// Whether a member holds its shard's data (a primary owning slots, or a replica whose link to
/// its primary is up and whose initial sync is done) or leads a shard that has none yet and
/// waits for slots. `shard_owns_slots`: some member of its shard owns slots.
///
/// The second is a scale-out's new shard: clients are sent to its primary by name as soon as a
/// slot moves there, and its name resolves only once its pod is Ready (so slots move only after
/// that: `cluster::published`). It must have joined (`cluster_state:ok`: it knows every slot's
/// owner and redirects correctly). An empty member of a shard whose data is elsewhere (one that
/// lost its identity and came back empty) does not: counted healthy, it would let the
/// PodDisruptionBudget evict the shard's only copy. Neither does a member that has not joined
/// or a replica still syncing, whatever its container says.
pub fn holds_data(view: &MemberView, shard_owns_slots: bool) -> bool {
    !view.slots.is_empty()
        || (view.primary_id.is_some() && view.replica_in_sync)
        || (!shard_owns_slots && awaits_slots(view))
}

/// A primary owning no slots that has joined the cluster.
fn awaits_slots(view: &MemberView) -> bool {
    view.slots.is_empty() && view.primary_id.is_none() && view.cluster_ok
}

/// The shards holding data: some member of which (answering or not, by the Valkey node id it
/// answers with or last recorded) owns slots as any answering member sees the cluster. A shard
/// whose primary was just lost still holds data (everybody still sees the lost primary owning
/// its slots until its replica takes over); only a scale-out's new shard holds none.
pub fn shards_owning_slots(observed: &[Observed]) -> std::collections::BTreeSet<usize> {
    let owners: std::collections::BTreeSet<&crate::driver::parse::NodeId> = observed
        .iter()
        .filter_map(|o| o.member.view.as_ref())
        .flat_map(|v| v.owned_by.iter())
        .filter(|(_, slots)| !slots.is_empty())
        .map(|(id, _)| id)
        .collect();
    observed
        .iter()
        .filter(|o| {
            let answered = o.member.view.as_ref().map(|v| &v.id);
            answered
                .into_iter()
                .chain(o.member.node_id.as_ref())
                .any(|id| owners.contains(id))
        })
        .map(|o| o.member.shard)
        .collect()
}

/// The holds-data condition of a pod: `Some(true/false)` once set, `None` before.
pub fn holds_data_condition(pod: &Pod) -> Option<bool> {
    pod_condition(pod, crate::api::constants::CONDITION_HOLDS_DATA).map(|s| s == "True")
}

/// The status (`True`, `False`, `Unknown`) of the pod's condition of type `type_`, if it has it.
fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// How long one member's observation may take. An established member whose pod Kubernetes
/// reports not Ready (its node stopped reporting, or its probe fails) is most likely down: a
/// paused process still accepts connections and answers nothing, and waiting the full limit
/// for it every round made each round of a cluster with a node down take 6 s.
fn observe_limit(node: &ValkeyNode, pod: Option<&Pod>) -> Duration {
    let established = node
        .status
        .as_ref()
        .is_some_and(|s| s.lifecycle == Some(Lifecycle::Active) && s.node_id.is_some());
    if established && pod.is_some_and(not_ready) {
        SUSPECTED_DOWN_OBSERVE_LIMIT
    } else {
        OBSERVE_LIMIT
    }
}

/// A member's observation (a handful of commands) normally takes milliseconds; this bounds a
/// busy one.
const OBSERVE_LIMIT: Duration = Duration::from_secs(15);
/// The limit for a member Kubernetes reports down (see [`observe_limit`]).
const SUSPECTED_DOWN_OBSERVE_LIMIT: Duration = Duration::from_secs(2);

/// Seconds past a deleted pod's grace period after which it counts as stuck terminating.
pub const STUCK_TERMINATING_MARGIN_SECS: i64 = 15;

/// Why a member whose pod is bound to `host`, a Node object that was deleted, and that did not
/// answer is gone for good, if it is: the machine is gone (Kubernetes deletes a Node whose
/// machine is gone; the pod garbage collector removes its pods about a minute later, which is
/// when [`gone`] would see it). A member keeping no data across a restart never comes back
/// as itself; its shard's replica takes over now. A member with a volume is left to [`gone`]:
/// a volume not bound to that node comes back with its recreated pod elsewhere. Either way
/// Kubernetes now reports it down (`pod_not_ready`), so silent primaries too many for Valkey
/// to fail over are taken over without waiting for the pod garbage collector.
pub fn lost_with_its_node(node: &ValkeyNode, host: &str) -> Option<String> {
    let had_identity = node.status.as_ref().is_some_and(|s| s.node_id.is_some());
    (!node.spec.restarts_in_place() && had_identity)
        .then(|| format!("its node {host} was deleted (the machine is gone)"))
}

/// Why the member is gone for good this round, if it is: bound to `deleted_host` (a Node
/// object that no longer exists) and silent, or as [`gone`] says.
async fn why_gone(
    client: &kube::Client,
    node: &ValkeyNode,
    pod: Option<&Pod>,
    deleted_host: Option<&str>,
) -> Option<String> {
    if let Some(host) = deleted_host {
        let lost = match lost_with_its_node(node, host) {
            Some(why) => Some(why),
            None => volume_lost_with(client, node, host).await,
        };
        if lost.is_some() {
            return lost;
        }
    }
    gone(node, pod)
}

/// Why a durable member on `host`, a deleted Node, is gone for good, if it is: its volume is
/// bound to that node (a local volume: its PersistentVolume's required node affinity names
/// the node by `kubernetes.io/hostname`, which is the node's name wherever the kubelet does
/// not override it), so it went with the machine. A volume not bound to the node (network
/// storage) comes back with the pod on another node: not gone. Reads the member's claim and
/// its volume; when either cannot be read, not gone (the scheduler's word decides later, see
/// [`gone`]).
async fn volume_lost_with(client: &kube::Client, node: &ValkeyNode, host: &str) -> Option<String> {
    let had_identity = node.status.as_ref().is_some_and(|s| s.node_id.is_some());
    if node.spec.storage.is_none() || !had_identity {
        return None;
    }
    let namespace = node.namespace()?;
    let claim = crate::controller::names::member_volume(&node.name_any(), node.uid()?.as_str());
    let claims: kube::Api<PersistentVolumeClaim> =
        kube::Api::namespaced(client.clone(), &namespace);
    let volume = claims.get_opt(&claim).await.ok()??.spec?.volume_name?;
    let volumes: kube::Api<PersistentVolume> = kube::Api::all(client.clone());
    let pv = volumes.get_opt(&volume).await.ok()??;
    volume_bound_to(&pv, host).then(|| {
        format!(
            "its node {host} was deleted and its volume {volume} (claim {claim}) is bound to that node"
        )
    })
}

/// Whether a PersistentVolume can only be mounted on `host` (a required node affinity term
/// naming it by `kubernetes.io/hostname`).
pub fn volume_bound_to(pv: &PersistentVolume, host: &str) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref()?.required.as_ref())
        .is_some_and(|required| {
            required.node_selector_terms.iter().any(|term| {
                term.match_expressions.iter().flatten().any(|e| {
                    e.key == "kubernetes.io/hostname"
                        && e.operator == "In"
                        && e.values.iter().flatten().any(|v| v == host)
                })
            })
        })
}

/// Why a member's Valkey is gone for good, if it is: the member keeps no data across a restart
/// (see `ValkeyNodeSpec::restart_in_place`) and its process exited (pod `Failed`, never
/// restarted in place), its pod was lost after the member had an identity (never recreated),
/// or its pod is stuck terminating on a node that does not answer.
pub fn gone(node: &ValkeyNode, pod: Option<&Pod>) -> Option<String> {
    if node.spec.restarts_in_place() {
        return node
            .spec
            .storage
            .as_ref()
            .and(pod)
            .and_then(volume_node_gone);
    }
    let had_identity = node
        .status
        .as_ref()
        .and_then(|s| s.node_id.as_ref())
        .is_some();
    let Some(pod) = pod else {
        return had_identity
            .then(|| "its pod was lost (deleted, evicted or its node removed)".into());
    };
    if let Some(deadline) = &pod.metadata.deletion_timestamp {
        // Deleted, yet still there well past its grace period (the API server sets the
        // deletion timestamp to the end of the grace period): its kubelet does not answer
        // (node down or cut off). Whatever runs there is not coming back as this member.
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(30);
        let past_grace = k8s_openapi::jiff::Timestamp::now()
            .duration_since(deadline.0)
            .as_secs();
        return (past_grace > STUCK_TERMINATING_MARGIN_SECS).then(|| {
            format!(
                "its pod has been terminating for {} s; its node does not answer",
                grace + past_grace
            )
        });
    }
    if !had_identity {
        // Exited before it ever joined: no identity, no data; the node controller starts
        // it again (see `controller::node::start`), the cluster waits for it.
        return None;
    }
    let status = pod.status.as_ref()?;
    if !matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return None;
    }
    let terminated = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref());
    Some(match terminated {
        Some(t) => format!(
            "its Valkey process exited ({}, exit code {})",
            t.reason.as_deref().unwrap_or("no reason given"),
            t.exit_code
        ),
        None => "its pod failed".into(),
    })
}

/// Reduces a member's observation to what planning needs; `now` (Unix seconds) dates the
/// migration jobs.
pub fn view(obs: &MemberObservation, now: i64) -> MemberView {
    let myself = obs.myself();
    let is_replica = obs.replication.role == Role::Replica;
    let exports = obs
        .migrations
        .iter()
        .filter(|j| j.operation == MigrationOperation::Export && !j.state.is_finished())
        .map(|j| ExportJob {
            target: j.target_node.clone(),
            ranges: j.slot_ranges.clone(),
            idle_secs: u64::try_from(now - j.last_update_time.max(j.last_ack_time)).unwrap_or(0),
        })
        .collect();
    let failed_migration = last_failed_migration(obs);
    MemberView {
        id: obs.id.clone(),
        is_primary: !is_replica,
        primary_id: myself
            .and_then(|m| m.primary_id.clone())
            .filter(|_| is_replica),
        slots: myself.map(|m| m.slots.clone()).unwrap_or_default(),
        owned_by: obs
            .nodes
            .iter()
            .filter(|n| !n.slots.is_empty())
            .map(|n| (n.id.clone(), n.slots.clone()))
            .collect(),
        known: obs
            .nodes
            .iter()
            .filter(|n| !n.flags.handshake && !n.flags.noaddr)
            .map(|n| n.id.clone())
            .collect(),
        addresses: obs
            .nodes
            .iter()
            .filter(|n| !n.flags.handshake && !n.flags.noaddr && !n.flags.myself)
            .map(|n| (n.id.clone(), n.ip.clone()))
            .collect(),
        cluster_ok: obs.info.state_ok,
        replica_in_sync: obs
            .replication
            .primary_link
            .as_ref()
            .is_some_and(|l| l.link_up && !l.sync_in_progress),
        config_epoch: myself.map_or(0, |m| m.config_epoch),
        migrating: myself.map(|m| m.migrating.clone()).unwrap_or_default(),
        importing: myself.map(|m| m.importing.clone()).unwrap_or_default(),
        exports,
        failed_migration,
        atomic_migration: obs.server.version >= ATOMIC_MIGRATION_SINCE,
        repl_offset: obs.replication.repl_offset,
        failing: obs
            .nodes
            .iter()
            .filter(|n| n.is_failing())
            .map(|n| n.id.clone())
            .collect(),
    }
}

/// Why this member's most recent slot migration job failed or was cancelled, when it did.
fn last_failed_migration(obs: &MemberObservation) -> Option<String> {
    obs.migrations
        .iter()
        .max_by_key(|j| j.create_time)
        .filter(|j| matches!(j.state, MigrationState::Failed | MigrationState::Cancelled))
        .map(|j| {
            format!(
                "{} of {} {}: {}",
                if j.operation == MigrationOperation::Export {
                    "export"
                } else {
                    "import"
                },
                j.slot_ranges
                    .iter()
                    .map(format_range)
                    .collect::<Vec<_>>()
                    .join(","),
                if j.state == MigrationState::Failed {
                    "failed"
                } else {
                    "was cancelled"
                },
                j.message
            )
        })
}

/// A member with a volume whose pod cannot be scheduled because no node may run it where its
/// node-bound volume is: the scheduler reports a volume node affinity conflict on the other
/// nodes, and the volume's node is gone or cordoned (a drain). Its shard's replica takes over
/// and a new member (with a new volume) replaces it. Waiting for a cordoned node instead would
/// hold a drain forever: the PodDisruptionBudget lets the next member on that node go only once
/// this one is healthy again. A volume whose node is merely full (`Insufficient ...`) is waited
/// for, as a StatefulSet's would be.
fn volume_node_gone(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Pending") {
        return None;
    }
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    let message = scheduled.message.as_deref().unwrap_or_default();
    let volume_elsewhere = VOLUME_NODE_MISMATCH.iter().any(|m| message.contains(m));
    if !volume_elsewhere || message.contains("Insufficient") {
        return None;
    }
    let why = if message.contains("were unschedulable") {
        "the node that holds its volume is cordoned (drained)"
    } else {
        "no node can mount its volume any more (the volume's node is gone)"
    };
    Some(format!("{why}: {message}"))
}

/// How the scheduler says a node cannot mount a pod's volume: the VolumeBinding plugin's
/// reason up to Kubernetes 1.33, and as 1.34's scheduler words it (seen on the local cluster:
/// `2 node(s) didn't match PersistentVolume's node affinity`).
const VOLUME_NODE_MISMATCH: [&str; 2] = [
    "volume node affinity conflict",
    "didn't match PersistentVolume's node affinity",
];

/// Why a pod does not run, as Kubernetes reports it: a waiting container's reason and message
/// (ErrImagePull, ImagePullBackOff, CrashLoopBackOff) or the scheduler's (Unschedulable).
/// The metrics exporter's problems are named as its: Valkey starts only once it runs.
pub fn pod_problem(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let sidecars = status.init_container_statuses.iter().flatten();
    let waiting = sidecars
        .map(|c| (true, c))
        .chain(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| (false, c)),
        )
        .filter_map(|(sidecar, c)| Some((sidecar, &c.name, c.state.as_ref()?.waiting.as_ref()?)))
        .find(|(_, _, w)| {
            w.reason
                .as_deref()
                .is_some_and(|r| r != "ContainerCreating" && r != "PodInitializing")
        });
    if let Some((sidecar, name, w)) = waiting {
        let whose = if sidecar {
            format!("container {name}: ")
        } else {
            String::new()
        };
        return Some(format!(
            "{whose}{}: {}",
            w.reason.clone().unwrap_or_default(),
            w.message.clone().unwrap_or_default()
        ));
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
}

/// A member is current when it was created from the desired spec (its spec-hash label is the
/// desired hash); one that is not is replaced by a rollout. The kubectl plugin asks the same.
pub fn is_current(node: &ValkeyNode, desired_hash: &str) -> bool {
    node.labels().get(LABEL_SPEC_HASH).map(String::as_str) == Some(desired_hash)
        // Its spec hashed now: a member labelled before a live setting's value changed (or
        // before the hash left live values out) is still the desired member.
        || super::build::spec_hash(&node.spec) == desired_hash
}

/// Observes every member; `desired` is the spec members should run with.
#[tracing::instrument(name = "cluster.observe", skip_all)]
pub async fn members(
    driver: &dyn ClusterDriver,
    nodes: &[Arc<ValkeyNode>],
    stores: &super::context::ClusterContext,
    desired: &ValkeyNodeSpec,
) -> Vec<Observed> {
    let (pods, hosts) = (&stores.pods, &stores.hosts);
    let desired_hash = &super::build::spec_hash(desired);
    let mut observed = join_all(nodes.iter().map(|node| async move {
        let name = node.name_any();
        let namespace = node.namespace().unwrap_or_default();
        // Only the pod this member created is its pod (a tenant may have one of that name).
        let pod = pods
            .get(&ObjectRef::new(&name).within(&namespace))
            .filter(|p| crate::controller::owner::owned_by(p.as_ref(), node.as_ref()));
        let addr = pod.as_deref().and_then(running_address);
        let host = pod
            .as_deref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone());
        // Bound to a Node object that no longer exists: the machine is most likely gone.
        let host_deleted = host
            .as_deref()
            .filter(|host| hosts.get(&ObjectRef::new(host)).is_none());
        let limit = match host_deleted {
            Some(_) => SUSPECTED_DOWN_OBSERVE_LIMIT,
            None => observe_limit(node, pod.as_deref()),
        };
        let observation = observe_within(driver, &name, addr.as_ref(), limit).await;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let view = observation.as_ref().map(|o| view(o, now));
        // ... and silent: the machine is gone.
        let deleted_host = host_deleted.filter(|_| view.is_none());
        let gone = why_gone(&stores.ctx.client, node, pod.as_deref(), deleted_host).await;
        let start_failure = pod
            .as_deref()
            .and_then(|p| crate::controller::node::start::failed_before_joining(node, p))
            .map(|f| f.describe(k8s_openapi::jiff::Timestamp::now()));
        let role = view.as_ref().map(role_of);
        Observed {
            member: Member {
                name: name.clone(),
                shard: node.spec.shard.max(0) as usize,
                lifecycle: node
                    .status
                    .as_ref()
                    .and_then(|s| s.lifecycle)
                    .unwrap_or(Lifecycle::Joining),
                current: is_current(node, desired_hash)
                    && !(start_failure.is_some() && live_differs(node, desired)),
                node_id: node
                    .status
                    .as_ref()
                    .and_then(|s| s.node_id.clone())
                    .map(crate::driver::parse::NodeId),
                addr,
                view,
                pod_problem: start_failure
                    .clone()
                    .or_else(|| why_no_pod(node, pod.as_deref())),
                host: host.clone(),
                pod_not_ready: pod.as_deref().is_some_and(not_ready) || deleted_host.is_some(),
                name_resolves: true, // see `published::check` below
                gone,
            },
            pod: pod.map(|p| p.name_any()),
            start_failure,
            role,
            version: observation.as_ref().map(|o| o.server.version.to_string()),
            run_id: observation.as_ref().map(|o| o.server.run_id.clone()),
            aof_bytes: observation.as_ref().and_then(|o| o.server.aof_bytes),
            usage: observation.as_ref().map(|o| o.server.usage),
            node: node.clone(),
        }
    }))
    .await;
    as_pod_addresses(&mut observed, pods);
    super::taints::name_untolerated(&stores.ctx.client, pods, &mut observed).await;
    super::published::check(&stores.ctx.client, &mut observed).await;
    observed
}

/// Members with external access announce another address to clients (their node's IP with a
/// NodePort, a load balancer's IP), and the operator, a client of every member, sees them
/// there in every `CLUSTER NODES`: such a view is put back to the member's pod IP, so the
/// moved-member check (a full restart's new pod IPs, `plan::formation`) compares like with
/// like. A load balancer's IP is not known here: any address shown for such a member counts
/// as its own.
fn as_pod_addresses(observed: &mut [Observed], pods: &kube::runtime::reflector::Store<Pod>) {
    use crate::api::external::ExternalServiceType;
    let aliases: std::collections::BTreeMap<
        crate::driver::parse::NodeId,
        (Option<String>, String),
    > = observed
        .iter()
        .filter_map(|o| {
            let external = o.node.spec.external?;
            let id = o
                .member
                .view
                .as_ref()
                .map(|v| v.id.clone())
                .or_else(|| o.member.node_id.clone())?;
            let pod_ip = o.member.addr.as_ref()?.host.clone();
            let alias = match external {
                ExternalServiceType::NodePort => {
                    let namespace = o.node.namespace().unwrap_or_default();
                    let pod = pods.get(&ObjectRef::new(o.pod.as_deref()?).within(&namespace))?;
                    Some(pod.status.as_ref()?.host_ip.clone()?)
                }
                ExternalServiceType::LoadBalancer => None,
            };
            Some((id, (alias, pod_ip)))
        })
        .collect();
    for o in observed.iter_mut() {
        let Some(view) = o.member.view.as_mut() else {
            continue;
        };
        for (id, seen) in view.addresses.iter_mut() {
            if let Some((alias, pod_ip)) = aliases.get(id)
                && alias.as_ref().is_none_or(|alias| alias == seen)
            {
                *seen = pod_ip.clone();
            }
        }
    }
}

/// Whether the member started with other values of settings that are set live (see
/// `live`): one that cannot even start is replaced with the desired spec instead (it would
/// start again with the same values, and never answer a `CONFIG SET`).
fn live_differs(node: &ValkeyNode, desired: &ValkeyNodeSpec) -> bool {
    !crate::resolve::live::to_set(&node.spec.version, &node.spec.valkey, &desired.valkey).is_empty()
}

/// The role a member's view says it has: a replica names its primary.
fn role_of(view: &MemberView) -> NodeRole {
    if view.primary_id.is_some() {
        NodeRole::Replica
    } else {
        NodeRole::Primary
    }
}

/// What the member's Valkey reports, if it answers within `limit`.
async fn observe_within(
    driver: &dyn ClusterDriver,
    name: &str,
    addr: Option<&MemberAddr>,
    limit: Duration,
) -> Option<MemberObservation> {
    match tokio::time::timeout(limit, driver.observe(addr?)).await {
        Ok(Ok(obs)) => Some(obs),
        Ok(Err(e)) => {
            debug!(member = %name, "observe failed: {e}");
            None
        }
        Err(_) => {
            debug!(member = %name, "observe timed out");
            None
        }
    }
}

/// Why the member's pod does not run, when Kubernetes says (ImagePullBackOff,
/// Unschedulable...), or, with no pod because the API server refuses it, what the node
/// controller recorded.
fn why_no_pod(node: &ValkeyNode, pod: Option<&Pod>) -> Option<String> {
    match pod {
        Some(pod) => pod_problem(pod),
        None => crate::controller::node::why_no_pod(node.status.as_ref()),
    }
}

/// (member name, client address) of every member, for the steps after the plan (ACL load,
/// certificate reload); no address for a member whose pod does not run, or that did not
/// answer this round while Kubernetes reports its pod not Ready (node down, probe failing):
/// talking to it would only cost each step a connection timeout.
pub fn reachable_addresses(observed: &[Observed]) -> Vec<(String, Option<MemberAddr>)> {
    observed
        .iter()
        .map(|o| {
            let m = &o.member;
            let addr = m
                .addr
                .clone()
                .filter(|_| m.view.is_some() || !m.pod_not_ready);
            (m.name.clone(), addr)
        })
        .collect()
}

/// What the plan reads: the shape the spec asks for and the members as observed this round.
pub fn topology(cluster: &ValkeyCluster, observed: &[Observed]) -> Topology {
    Topology {
        cluster: cluster.name_any(),
        shards: cluster.target_shards().max(0) as usize,
        replicas_per_shard: cluster.spec.replicas_per_shard.max(0) as usize,
        members: observed
            .iter()
            .map(|o| o.member.clone())
            .collect::<Vec<Member>>(),
        migration: migration_method(cluster),
    }
}

/// The `valkey.gomomento.com/slot-migration` annotation: `keys` forces key-by-key moves
/// (for servers or networks where atomic slot migration misbehaves, and for benchmarks).
pub fn migration_method(cluster: &ValkeyCluster) -> MigrationMethod {
    match cluster
        .annotations()
        .get(ANNOTATION_SLOT_MIGRATION)
        .map(String::as_str)
    {
        Some("keys") => MigrationMethod::Keys,
        _ => MigrationMethod::Auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Resources, ValkeyNodeSpec};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(restart_in_place: Option<bool>, node_id: Option<&str>) -> ValkeyNode {
        let mut n = ValkeyNode::new(
            "c-0-0",
            ValkeyNodeSpec {
                image_pull_secrets: vec![],
                cluster_name: "c".into(),
                shard: 0,
                role_hint: None,
                config_ref: "standard".into(),
                image_ref: "valkey".into(),
                image: "valkey/valkey:9.0.0".into(),
                version: "9.0.0".into(),
                resources: Resources::default(),
                valkey: Default::default(),
                config_hash: None,
                placement: Default::default(),
                tls_secret_ref: None,
                restart_in_place,
                storage: None,
                exporter: None,
                external: None,
            },
        );
        n.status = Some(crate::api::ValkeyNodeStatus {
            node_id: node_id.map(Into::into),
            ..Default::default()
        });
        n
    }

    fn failed_pod() -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "valkey".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 137,
                            reason: Some("OOMKilled".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_member_is_reached_once_its_containers_run_not_after_the_readiness_probe() {
        let pod = |states: Vec<ContainerState>, ip: Option<&str>| Pod {
            status: Some(PodStatus {
                pod_ip: ip.map(Into::into),
                container_statuses: Some(
                    states
                        .into_iter()
                        .map(|state| ContainerStatus {
                            state: Some(state),
                            ready: false,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let running = || ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        };
        let waiting = || ContainerState {
            waiting: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(
            running_address(&pod(vec![running()], Some("10.0.0.7"))),
            Some(MemberAddr::new("10.0.0.7", CLIENT_PORT)),
            "running, probe not passed yet"
        );
        assert_eq!(
            running_address(&pod(vec![waiting()], Some("10.0.0.7"))),
            None
        );
        assert_eq!(
            running_address(&pod(vec![running(), waiting()], Some("10.0.0.7"))),
            None,
            "every container runs"
        );
        assert_eq!(running_address(&pod(vec![running()], None)), None, "no IP");
        assert_eq!(running_address(&pod(vec![], Some("10.0.0.7"))), None);
        let mut deleting = pod(vec![running()], Some("10.0.0.7"));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(running_address(&deleting), None, "being deleted");
    }

    /// The holds-data gate: data held, or a joined primary of a shard without data waiting for
    /// slots (its name must resolve before slots move to it); never an empty member of a shard
    /// whose data is elsewhere, a member that has not joined or a syncing replica.
    #[test]
    fn a_member_holds_data_or_has_joined_and_waits_for_slots() {
        use crate::plan::MemberView;
        let primary = |slots: Vec<std::ops::RangeInclusive<u16>>, cluster_ok| MemberView {
            slots,
            cluster_ok,
            ..MemberView::bare("a")
        };
        let replica = |in_sync| MemberView {
            primary_id: Some(crate::driver::parse::NodeId("p".into())),
            replica_in_sync: in_sync,
            cluster_ok: true,
            ..MemberView::bare("b")
        };
        assert!(holds_data(&primary(vec![0..=99], false), true));
        assert!(
            holds_data(&primary(vec![], true), false),
            "joined, waits for slots"
        );
        assert!(
            !holds_data(&primary(vec![], true), true),
            "empty while its shard's data is on another member"
        );
        assert!(
            !holds_data(&primary(vec![], false), false),
            "not joined yet"
        );
        assert!(holds_data(&replica(true), true));
        assert!(!holds_data(&replica(false), true), "still syncing");
    }

    /// `member` as observed, with its ValkeyNode `node` and a pod of its name, nothing else known.
    fn observed_as(node: ValkeyNode, member: Member) -> Observed {
        Observed {
            node: Arc::new(node),
            pod: Some(member.name.clone()),
            member,
            start_failure: None,
            role: None,
            version: None,
            run_id: None,
            aof_bytes: None,
            usage: None,
        }
    }

    /// A shard holds data while any view has one of its members (answering or not) owning
    /// slots: a lost primary's shard does, so its empty replacement does not pass the gate.
    #[test]
    fn a_shard_whose_primary_was_lost_still_holds_data_a_new_one_does_not() {
        use crate::driver::parse::NodeId;
        use crate::plan::MemberView;
        let observed = |name: &str, shard: usize, id: &str, view: Option<MemberView>| {
            observed_as(
                node(Some(false), Some(id)),
                Member {
                    node_id: Some(NodeId(id.into())),
                    view,
                    ..Member::new(name, shard)
                },
            )
        };
        // Everybody still sees the lost primary `lost` (shard 0, silent) owning 0-99.
        let seen = |id: &str| MemberView {
            owned_by: [(NodeId("lost".into()), vec![0..=99])].into(),
            cluster_ok: true,
            ..MemberView::bare(id)
        };
        let members = [
            observed("c-0-0", 0, "lost", None),
            observed("c-0-1", 0, "replica", Some(seen("replica"))),
            observed("c-0-2", 0, "empty", Some(seen("empty"))),
            observed("c-1-0", 1, "new", Some(seen("new"))),
        ];
        assert_eq!(shards_owning_slots(&members), [0].into());
        let empty = members[2].member.view.as_ref().unwrap();
        assert!(
            !holds_data(empty, true),
            "the lost primary's shard holds data"
        );
        let new = members[3].member.view.as_ref().unwrap();
        assert!(
            holds_data(new, false),
            "a scale-out's new shard waits for slots"
        );
    }

    #[test]
    fn a_member_without_persistence_whose_process_died_is_gone() {
        let why = gone(&node(Some(false), Some("abc")), Some(&failed_pod())).unwrap();
        assert_eq!(why, "its Valkey process exited (OOMKilled, exit code 137)");
        // Restarted in place (appendonly, or no replica): never gone, the kubelet restarts it.
        assert_eq!(
            gone(&node(Some(true), Some("abc")), Some(&failed_pod())),
            None
        );
        assert_eq!(gone(&node(None, Some("abc")), Some(&failed_pod())), None);
        // Exited before it ever joined: started again by the node controller, never
        // replaced (replacing it made hundreds of pods in minutes).
        assert_eq!(gone(&node(Some(false), None), Some(&failed_pod())), None);
    }

    #[test]
    fn a_durable_member_is_gone_when_its_volumes_node_is_gone_or_drained() {
        use k8s_openapi::api::core::v1::PodCondition;
        let pending = |message: &str| Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some(message.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut durable = node(Some(true), Some("abc"));
        durable.spec.storage = Some(crate::api::Storage {
            size: "1Gi".into(),
            ..Default::default()
        });
        let node_gone = pending(
            "0/3 nodes are available: 3 node(s) had volume node affinity conflict. preemption: 0/3 nodes are available",
        );
        let why = gone(&durable, Some(&node_gone)).expect("gone");
        assert!(why.contains("the volume's node is gone"), "{why}");
        // Its node cordoned (a drain): replaced too, or the drain would wait for it forever.
        let cordoned = pending(
            "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) had volume node affinity conflict.",
        );
        let why = gone(&durable, Some(&cordoned)).expect("gone");
        assert!(why.contains("cordoned (drained)"), "{why}");
        // Kubernetes 1.34's words, as a drain on the local cluster produced them.
        let drained = pending(
            "0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 2 node(s) didn't match PersistentVolume's node affinity. no new claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        );
        let why = gone(&durable, Some(&drained)).expect("gone");
        assert!(why.contains("cordoned (drained)"), "{why}");
        let deleted = pending(
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match PersistentVolume's node affinity.",
        );
        let why = gone(&durable, Some(&deleted)).expect("gone");
        assert!(why.contains("the volume's node is gone"), "{why}");
        // Its node full, pending for another reason, or a member without a volume: not gone.
        for message in [
            "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had volume node affinity conflict.",
            "0/3 nodes are available: 3 Insufficient cpu.",
        ] {
            assert_eq!(gone(&durable, Some(&pending(message))), None, "{message}");
        }
        assert_eq!(gone(&node(Some(true), Some("abc")), Some(&node_gone)), None);
    }

    #[test]
    fn a_local_volume_is_bound_to_its_node_a_network_one_is_not() {
        // As local-path-provisioner writes it.
        let local: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}
            ]}]}}}
        }))
        .unwrap();
        assert!(volume_bound_to(&local, "node-b"));
        assert!(!volume_bound_to(&local, "node-a"));
        // Zonal network storage: bound to a zone, not to a node.
        let zonal: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-2"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
            ]}]}}}
        }))
        .unwrap();
        assert!(!volume_bound_to(&zonal, "node-b"));
        let anywhere: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pvc-3"}, "spec": {}}))
                .unwrap();
        assert!(!volume_bound_to(&anywhere, "node-b"));
    }

    #[test]
    fn a_member_on_a_deleted_node_is_gone_unless_it_restarts_in_place() {
        let why = lost_with_its_node(&node(Some(false), Some("abc")), "node-b").unwrap();
        assert!(why.contains("node node-b was deleted"), "{why}");
        // Never had an identity: nothing to take over from, it is recreated like any pod.
        assert_eq!(lost_with_its_node(&node(Some(false), None), "node-b"), None);
        // Restarts in place (a volume, or no replica): left to its pod's fate (see `gone`).
        assert_eq!(
            lost_with_its_node(&node(Some(true), Some("abc")), "node-b"),
            None
        );
    }

    #[test]
    fn a_lost_pod_is_gone_only_once_the_member_had_an_identity() {
        assert!(gone(&node(Some(false), Some("abc")), None).is_some());
        assert_eq!(
            gone(&node(Some(false), None), None),
            None,
            "not created yet"
        );
        let running = Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(gone(&node(Some(false), Some("abc")), Some(&running)), None);
    }

    fn pod_ready(status: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_established_member_kubernetes_reports_down_is_observed_briefly() {
        let mut active = node(Some(false), Some("abc"));
        active.status.as_mut().unwrap().lifecycle = Some(Lifecycle::Active);
        let (down, up) = (pod_ready("False"), pod_ready("True"));
        assert!(not_ready(&down) && !not_ready(&up) && !not_ready(&Pod::default()));
        assert_eq!(
            observe_limit(&active, Some(&down)),
            SUSPECTED_DOWN_OBSERVE_LIMIT
        );
        assert_eq!(observe_limit(&active, Some(&up)), OBSERVE_LIMIT);
        // A member still joining is not Ready until it holds data: given the full limit.
        let joining = node(Some(false), Some("abc"));
        assert_eq!(observe_limit(&joining, Some(&down)), OBSERVE_LIMIT);
    }

    #[test]
    fn members_kubernetes_reports_down_that_did_not_answer_are_left_out_after_the_plan() {
        let member = |name: &str, answered: bool, pod_not_ready: bool| {
            observed_as(
                node(Some(false), Some("abc")),
                Member {
                    addr: Some(MemberAddr::new(format!("10.0.0.{}", name.len()), 6379)),
                    view: answered.then(|| crate::plan::MemberView::bare("abc")),
                    pod_not_ready,
                    ..Member::new(name, 0)
                },
            )
        };
        let observed = [
            member("answered", true, true),
            member("silent-ready", false, false),
            member("silent-down", false, true),
        ];
        let addrs: Vec<(String, bool)> = reachable_addresses(&observed)
            .into_iter()
            .map(|(n, a)| (n, a.is_some()))
            .collect();
        assert_eq!(
            addrs,
            [
                ("answered".to_string(), true),
                ("silent-ready".to_string(), true),
                ("silent-down".to_string(), false)
            ]
        );
    }

    #[test]
    fn a_pod_stuck_terminating_past_its_grace_period_is_gone() {
        let mut pod = Pod::default();
        pod.metadata.deletion_grace_period_seconds = Some(30);
        let ago = |s: i64| {
            Time(
                k8s_openapi::jiff::Timestamp::now()
                    .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s))
                    .unwrap(),
            )
        };
        // The deletion timestamp is the end of the grace period: 20 s into it...
        pod.metadata.deletion_timestamp = Some(ago(-10));
        assert_eq!(
            gone(&node(Some(false), Some("abc")), Some(&pod)),
            None,
            "still in grace"
        );
        // ... 10 s past it (within the margin)...
        pod.metadata.deletion_timestamp = Some(ago(10));
        assert_eq!(gone(&node(Some(false), Some("abc")), Some(&pod)), None);
        // ... 20 s past it: 50 s since the deletion.
        pod.metadata.deletion_timestamp = Some(ago(20));
        let why = gone(&node(Some(false), Some("abc")), Some(&pod)).unwrap();
        assert!(why.contains("terminating for 50 s"), "{why}");
    }
}

/// How [`members`] maps each ValkeyNode to its pod and its pod to a Valkey to ask, against a
/// [`FakeDriver`] (which records whom it was asked) and stores filled by hand. None of these
/// members makes [`members`] call the API server (no TLS, no untolerated taint, no storage).
///
/// [`FakeDriver`]: crate::driver::fake::FakeDriver
#[cfg(test)]
mod driver_tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Node;
    use kube::core::PartialObjectMeta;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::constants::API_VERSION;
    use crate::controller::cluster::ClusterContext;
    use crate::controller::testing::{self, ApiServer};
    use crate::driver::fake::{self, FakeDriver};
    use crate::driver::{DriverErrorKind, NodeId};

    /// The Kubernetes node every pod below runs on, unless a test says otherwise.
    const HOST: &str = "node-a";

    fn addr(n: u8) -> MemberAddr {
        MemberAddr::new(format!("10.0.0.{n}"), CLIENT_PORT)
    }

    /// The member `name` of `shop` (uid `uid-<name>`) in `shard`, with `status` (an object) and
    /// Active.
    fn node(name: &str, shard: i32, mut status: Value) -> Arc<ValkeyNode> {
        status["lifecycle"] = json!("Active");
        let mut node: ValkeyNode = serde_json::from_value(testing::member(name, status)).unwrap();
        node.metadata.uid = Some(format!("uid-{name}"));
        node.spec.shard = shard;
        Arc::new(node)
    }

    /// The pod `name` on [`HOST`], controlled by the object with uid `owner_uid`, whose
    /// container is in `state` (`{"running": {}}`, `{"waiting": {...}}`), at `ip` if any.
    fn pod(name: &str, owner_uid: &str, state: Value, ip: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team", "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ValkeyNode", "name": name,
                "uid": owner_uid, "controller": true}]},
            "spec": {"nodeName": HOST, "containers": [{"name": "valkey"}]},
            "status": {"podIP": ip, "containerStatuses": [{"name": "valkey", "state": state,
                "image": "valkey/valkey:9.0.0", "imageID": "", "ready": false,
                "restartCount": 0}]},
        }))
        .unwrap()
    }

    /// The member's own pod, its container running, at `ip`.
    fn running_pod(node: &ValkeyNode, ip: &str) -> Pod {
        let uid = node.metadata.uid.as_deref().unwrap();
        pod(&node.name_any(), uid, json!({"running": {}}), Some(ip))
    }

    /// The cluster controller's stores holding `pods` and the Kubernetes nodes `hosts`.
    fn stores(pods: Vec<Pod>, hosts: &[&str]) -> (ClusterContext, ApiServer) {
        let (ctx, server) = testing::context();
        let mut pod_writer = Writer::<Pod>::default();
        for pod in pods {
            pod_writer.apply_watcher_event(&watcher::Event::Apply(pod));
        }
        let mut host_writer = Writer::<PartialObjectMeta<Node>>::default();
        for host in hosts {
            let mut meta = PartialObjectMeta::<Node>::default();
            meta.metadata.name = Some(host.to_string());
            host_writer.apply_watcher_event(&watcher::Event::Apply(meta));
        }
        let nodes = Writer::default().as_reader();
        let stores =
            ClusterContext::new(ctx, nodes, pod_writer.as_reader(), host_writer.as_reader());
        (stores, server)
    }

    /// [`members`], bounded: a request to the API server nobody answers would hang it.
    async fn observe(
        fake: &FakeDriver,
        nodes: &[Arc<ValkeyNode>],
        stores: &ClusterContext,
    ) -> Vec<Observed> {
        let desired = testing::member_spec();
        let observing = members(fake, nodes, stores, &desired);
        tokio::time::timeout(Duration::from_secs(5), observing)
            .await
            .expect("observing called the API server, which these members should not need")
    }

    /// Each member whose pod runs is asked at its pod's IP, with the trait's own sequence of
    /// queries, and is observed as it answers: its role, version and process.
    #[tokio::test]
    async fn a_running_member_is_observed_at_its_pods_address() {
        let (primary, replica) = (
            node("shop-0-0", 0, json!({})),
            node("shop-0-1", 0, json!({})),
        );
        let pods = vec![
            running_pod(&primary, "10.0.0.1"),
            running_pod(&replica, "10.0.0.2"),
        ];
        let (stores, mut server) = stores(pods, &[HOST]);
        let fake = FakeDriver::default();
        let answers_as_primary = fake::primary(&addr(1), "id-a", vec![0..=16383]);
        fake.answer_as(fake::replica(&addr(2), "id-b", &answers_as_primary));
        fake.answer_as(answers_as_primary);

        let observed = observe(&fake, &[primary, replica], &stores).await;

        let queries = [
            "server_info",
            "slot_migrations",
            "my_id",
            "cluster_nodes",
            "cluster_info",
            "replication_info",
        ];
        for (o, n, id, role) in [
            (&observed[0], 1, "id-a", NodeRole::Primary),
            (&observed[1], 2, "id-b", NodeRole::Replica),
        ] {
            let asked: Vec<String> = queries.iter().map(|q| format!("{q} {}", addr(n))).collect();
            assert_eq!(fake.calls_to(&addr(n)), asked);
            assert_eq!(o.member.addr, Some(addr(n)));
            assert_eq!(o.pod.as_deref(), Some(o.node.name_any().as_str()));
            assert_eq!(o.member.host.as_deref(), Some(HOST));
            assert_eq!(o.role, Some(role));
            assert_eq!(o.version.as_deref(), Some("9.0.0"));
            assert_eq!(o.run_id, Some(format!("run-{id}")));
            let view = o.member.view.as_ref().expect("it answered");
            assert_eq!(view.id, NodeId::from(id));
            assert!(!o.member.pod_not_ready && o.member.gone.is_none());
        }
        let replica_view = observed[1].member.view.as_ref().unwrap();
        assert_eq!(replica_view.primary_id, Some(NodeId::from("id-a")));
        assert!(replica_view.replica_in_sync);
        assert!(server.idle());
    }

    /// No running pod of its own, no Valkey to ask: a member without a pod, one whose container
    /// waits (no IP yet), and one whose name a tenant's pod took are not asked at all.
    #[tokio::test]
    async fn a_member_without_a_running_pod_of_its_own_is_not_asked() {
        let (no_pod, pulling, shadowed) = (
            node("shop-0-0", 0, json!({})),
            node("shop-0-1", 0, json!({})),
            node("shop-1-0", 1, json!({})),
        );
        let waiting =
            json!({"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}});
        let pods = vec![
            pod("shop-0-1", "uid-shop-0-1", waiting, None),
            pod(
                "shop-1-0",
                "uid-a-tenants",
                json!({"running": {}}),
                Some("10.0.0.9"),
            ),
        ];
        let (stores, mut server) = stores(pods, &[HOST]);
        let fake = FakeDriver::default();
        // Were the tenant's pod taken for the member's, the member would answer there.
        fake.answer_as(fake::primary(&addr(9), "id-tenant", vec![0..=16383]));

        let observed = observe(&fake, &[no_pod, pulling, shadowed], &stores).await;

        assert_eq!(fake.calls(), Vec::<String>::new());
        for o in &observed {
            assert_eq!(o.member.addr, None, "{}", o.member.name);
            assert!(o.member.view.is_none() && o.role.is_none() && o.version.is_none());
        }
        assert_eq!(observed[0].pod, None);
        assert_eq!(observed[1].pod.as_deref(), Some("shop-0-1"));
        let problem = observed[1]
            .member
            .pod_problem
            .as_deref()
            .unwrap_or_default();
        assert!(problem.starts_with("ImagePullBackOff"), "{problem}");
        assert_eq!(
            observed[2].pod, None,
            "the tenant's pod is not the member's"
        );
        assert!(server.idle());
    }

    /// A member whose pod runs but whose Valkey does not answer (refuses connections, or a
    /// query fails midway) keeps its address and has no view, role, version or process; the
    /// observation stops at the first failed query.
    #[tokio::test]
    async fn a_member_whose_valkey_does_not_answer_is_observed_without_a_view() {
        let (refusing, failing) = (
            node("shop-0-0", 0, json!({})),
            node("shop-0-1", 0, json!({})),
        );
        let pods = vec![
            running_pod(&refusing, "10.0.0.1"),
            running_pod(&failing, "10.0.0.2"),
        ];
        let (stores, mut server) = stores(pods, &[HOST]);
        let fake = FakeDriver::default();
        let primary = fake::primary(&addr(1), "id-a", vec![0..=16383]);
        fake.answer_as(fake::replica(&addr(2), "id-b", &primary));
        fake.fail(
            "cluster_nodes 10.0.0.2:6379",
            DriverErrorKind::Timeout(Duration::from_secs(10)),
        );

        let observed = observe(&fake, &[refusing, failing], &stores).await;

        assert_eq!(fake.calls_to(&addr(1)), ["server_info 10.0.0.1:6379"]);
        let asked_2 = fake.calls_to(&addr(2));
        assert_eq!(asked_2.last().unwrap(), "cluster_nodes 10.0.0.2:6379");
        for (o, n) in [(&observed[0], 1), (&observed[1], 2)] {
            assert_eq!(o.member.addr, Some(addr(n)));
            assert!(
                o.member.view.is_none() && o.role.is_none(),
                "{}",
                o.member.name
            );
            assert!(o.version.is_none() && o.run_id.is_none() && o.usage.is_none());
            assert!(!o.member.pod_not_ready, "Kubernetes reports nothing wrong");
        }
        assert!(server.idle());
    }

    /// A silent member whose pod is bound to a Kubernetes node that no longer exists is
    /// reported down; one that keeps no data across a restart and had joined is gone for good.
    /// One that still answers there is neither.
    #[tokio::test]
    async fn a_silent_member_on_a_deleted_node_is_down_and_without_data_gone() {
        let joined = json!({"nodeId": "id-a"});
        let (kept, lost, answering) = (
            node("shop-0-0", 0, joined.clone()),
            node("shop-1-0", 1, joined),
            node("shop-2-0", 2, json!({"nodeId": "id-c"})),
        );
        let mut lost = Arc::unwrap_or_clone(lost);
        lost.spec.restart_in_place = Some(false);
        let lost = Arc::new(lost);
        let pods = vec![
            running_pod(&kept, "10.0.0.1"),
            running_pod(&lost, "10.0.0.2"),
            running_pod(&answering, "10.0.0.3"),
        ];
        let (stores, mut server) = stores(pods, &[]);
        let fake = FakeDriver::default();
        fake.answer_as(fake::primary(&addr(3), "id-c", vec![0..=16383]));

        let observed = observe(&fake, &[kept, lost, answering], &stores).await;

        assert!(observed[0].member.pod_not_ready);
        assert_eq!(observed[0].member.gone, None, "it restarts in place");
        assert!(observed[1].member.pod_not_ready);
        let gone = observed[1].member.gone.as_deref().unwrap_or_default();
        assert!(gone.contains(HOST), "{gone}");
        assert!(!observed[2].member.pod_not_ready && observed[2].member.gone.is_none());
        assert!(server.idle());
    }
}
