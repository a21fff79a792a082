//! ValkeyCluster controller. Each reconcile is the fixed pipeline of ARCHITECTURE.md:
//! dereference → resolve → build → apply → observe Valkey → plan → act → status.
//! Only `dereference`, `apply`, `observe` and `act` touch the world.

pub mod acl;
pub mod build;
pub mod observe;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde::Serialize;
use tracing::{info, warn};

use crate::api::constants::{
    ANNOTATION_SLOT_MIGRATION, CLUSTER_BUS_PORT, CONDITION_HOLDS_DATA, LABEL_CLUSTER,
};
use crate::api::{Lifecycle, ValkeyCluster, ValkeyNode};
use crate::controller::{CLUSTER_MANAGER, Context, Error, names, object_key};
use crate::driver::migrate::{KeyMove, move_slot_by_keys};
use crate::driver::parse::NodeId;
use crate::driver::{FailoverMode, MemberAddr, SetSlot, SlotMigrationRequest};
use crate::plan::{self, Action, Member, MigrationMethod, MoveMethod, MoveTarget, Phase, Topology};
use crate::resolve::acl::{OperatorCredentials, file_revision, render_acl_file};
use crate::resolve::{
    ResolveError, merge_bindings, refuse_major_downgrade, resolve_config, resolve_roles,
};

/// The cluster controller's view of the world: shared context plus the member stores.
pub struct ClusterContext {
    pub ctx: Arc<Context>,
    pub nodes: Store<ValkeyNode>,
    pub pods: Store<Pod>,
}

/// What resolution produced, or why the cluster is blocked.
pub struct Resolved {
    pub config: crate::resolve::ResolvedConfig,
    pub acl_file_inputs: (
        Vec<crate::api::AclBinding>,
        BTreeMap<String, crate::api::ValkeyRoleSpec>,
    ),
}

/// Resolve step (pure over the catalog): config chain, bindings, roles; never to an older major
/// version than a member runs (`running`).
pub fn resolve<'a>(
    cluster: &ValkeyCluster,
    catalog: &impl crate::resolve::Catalog,
    running: impl IntoIterator<Item = &'a str>,
) -> Result<Resolved, ResolveError> {
    let config = resolve_config(catalog, &cluster.spec.config_ref)?;
    refuse_major_downgrade(&config, running)?;
    let bindings = merge_bindings(&config.acl, &cluster.spec.acl)?;
    let roles = resolve_roles(catalog, &bindings)?;
    Ok(Resolved {
        config,
        acl_file_inputs: (bindings, roles),
    })
}

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(controller = "cluster", object = %object_key(cluster.as_ref()))
)]
pub async fn reconcile(
    cluster: Arc<ValkeyCluster>,
    cctx: Arc<ClusterContext>,
) -> Result<Requeue, Error> {
    let ctx = &cctx.ctx;
    if cluster.meta().deletion_timestamp.is_some() {
        // Owner references remove everything the cluster created; drop what memory holds.
        ctx.forget_driver(&object_key(cluster.as_ref())).await;
        ctx.reconciled(&format!("cluster/{}", object_key(cluster.as_ref())));
        ctx.metrics.rollout(&object_key(cluster.as_ref()), false);
        return Ok(Requeue::await_change());
    }
    if !ctx.menu_synced.load(std::sync::atomic::Ordering::Acquire) {
        // The menu stores are still listing: resolving now would report false Blocked states.
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    }
    if let Some(election) = &ctx.election {
        crate::controller::leader::verify_still_leading(&ctx.client, election).await?;
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();

    // Paused by annotation: say so and touch nothing until it goes (removing it is a change
    // that reconciles at once).
    if status::is_paused(&cluster) {
        status::publish(ctx, &cluster, status::paused(&cluster)).await?;
        return Ok(Requeue::await_change());
    }

    // Resolve. A broken reference blocks the cluster and touches nothing that runs.
    let members = cluster_nodes(&cctx.nodes, &namespace, &name);
    let running = members.iter().map(|n| n.spec.version.as_str());
    let resolved = match resolve(&cluster, &ctx.catalog, running) {
        Ok(r) => r,
        Err(err) => {
            info!(cluster = %object_key(cluster.as_ref()), reason = err.reason(), "blocked: {err}");
            let cause = status::Blocker {
                condition: "ConfigResolved",
                reason: err.reason(),
                message: &err.to_string(),
            };
            status::publish(ctx, &cluster, status::blocked(&cluster, cause, &cctx.nodes)).await?;
            return Ok(Requeue::requeue(Duration::from_secs(60)));
        }
    };

    // Build and apply the cluster-wide objects. A name taken by an object that is not this
    // cluster's blocks it; that object is never touched.
    let (credentials, acl_file) = match apply_cluster_objects(ctx, &cluster, &resolved).await {
        Ok(applied) => applied,
        Err(err @ Error::NameTaken { .. }) => {
            info!(cluster = %object_key(cluster.as_ref()), "blocked: {err}");
            let cause = status::Blocker {
                condition: "ObjectsOwned",
                reason: "NameTaken",
                message: &err.to_string(),
            };
            status::publish(ctx, &cluster, status::blocked(&cluster, cause, &cctx.nodes)).await?;
            return Ok(Requeue::requeue(Duration::from_secs(30)));
        }
        Err(err) => return Err(err),
    };

    // Observe: members from the store, their pods, and what each Valkey says.
    let desired_spec =
        build::desired_node_spec(&cluster, &resolved.config, ctx.settings.default_zone_spread);
    let nodes = cluster_nodes(&cctx.nodes, &namespace, &name);
    let driver = ctx
        .driver(
            &object_key(cluster.as_ref()),
            &credentials.operator_password,
        )
        .await;
    let observed = observe::members(
        driver.as_ref(),
        &nodes,
        &cctx.pods,
        &build::spec_hash(&desired_spec),
    )
    .await;
    publish_holds_data(ctx, &namespace, &observed, &cctx.pods).await;
    sync_pod_annotations(ctx, &cluster, &observed, &cctx.pods).await;
    let topology = Topology {
        cluster: name.clone(),
        shards: cluster.spec.shards.max(0) as usize,
        replicas_per_shard: cluster.spec.replicas_per_shard.max(0) as usize,
        members: observed
            .iter()
            .map(|o| o.member.clone())
            .collect::<Vec<Member>>(),
        migration: migration_method(&cluster),
    };

    // Plan the next step and act on it.
    let plan = plan::plan(&topology);
    let key = object_key(cluster.as_ref());
    let stale = topology.members.iter().any(|m| !m.current);
    ctx.metrics.rollout(&key, stale);
    if !stale {
        ctx.rollout_done(&key);
    }
    // A rolling-replacement step waits for a slot under maxConcurrentRollouts.
    if plan.change == plan::Change::RollingOut {
        let started = topology.members.iter().any(|m| m.current);
        if let Err(rolling) = ctx.admit_rollout(&key, started) {
            let waiting = status::waiting_for_rollout_slot(&cluster, rolling);
            status::publish(ctx, &cluster, waiting).await?;
            return Ok(Requeue::requeue(Duration::from_secs(10)));
        }
    }
    let node_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), &namespace);
    for action in &plan.actions {
        act(
            ctx,
            &cluster,
            &node_api,
            driver.as_ref(),
            &desired_spec,
            action,
        )
        .await?;
    }
    // ACL: every running member loads the file just applied (live, no restart).
    let revision = file_revision(&acl_file).unwrap_or_default();
    let acl_progress = acl::apply(
        driver.as_ref(),
        &object_key(cluster.as_ref()),
        &observed,
        revision,
    )
    .await;
    acl_events(ctx, &cluster, &acl_progress).await;

    status::update_node_statuses(ctx, &node_api, &observed).await?;
    let new_status = status::from_plan(&cluster, &plan, &observed, &topology, &acl_progress);
    status::publish(ctx, &cluster, new_status).await?;

    let settled = plan.phase == Phase::Ready && plan.actions.is_empty();
    let unanswered: Vec<&Member> = topology
        .members
        .iter()
        .filter(|m| m.view.is_none())
        .collect();
    let waiting_on_pods = plan.actions.is_empty()
        && !unanswered.is_empty()
        && unanswered.iter().all(|m| m.pod_problem.is_some());
    let secs = requeue_secs(settled, waiting_on_pods, &acl_progress);
    Ok(Requeue::requeue(Duration::from_secs(secs)))
}

/// Seconds until the next look at a cluster: soon while it forms or changes (Valkey's side,
/// gossip and syncs, is not watched), calmly once settled, and calmly too while it only waits
/// for pods Kubernetes cannot run (unschedulable, refused): a pod event reconciles at once
/// when that changes, and 200 such clusters polling every 2 s were 1,200 reconciles a minute.
fn requeue_secs(settled: bool, waiting_on_pods: bool, acl: &acl::AclProgress) -> u64 {
    if acl.failed() {
        10
    } else if waiting_on_pods {
        30
    } else if !settled || !acl.applied() {
        // Forming, or a member's Secret volume has not caught up yet: look again soon.
        2
    } else {
        30
    }
}

/// An Event when a new ACL revision is loaded on every member, or when members refuse it
/// (decided by [`acl::AclProgress::event`]).
async fn acl_events(ctx: &Context, cluster: &ValkeyCluster, progress: &acl::AclProgress) {
    let previous = status::previous_acl_condition(cluster);
    if let Some((warning, reason, note)) = progress.event(previous.as_ref()) {
        acl::publish_event(ctx, cluster, warning, reason, &progress.revision, &note).await;
    }
}

/// ValkeyNodes of one cluster from the store, by name.
/// Sets each answering member's holds-data readiness gate (pod condition
/// [`CONDITION_HOLDS_DATA`]) to what its Valkey reports, where it changed. The gate keeps an
/// empty or syncing member out of the PodDisruptionBudget's healthy count and out of the client
/// Service, so a drain evicts the next member only once the last one's replacement has synced.
/// A failed write is logged and retried next reconcile: it only delays readiness.
/// `spec.podAnnotations` on every running member pod, within a reconcile of the change:
/// added, changed and removed keys (see `node::build::pod_annotations_patch`).
async fn sync_pod_annotations(
    ctx: &Context,
    cluster: &ValkeyCluster,
    observed: &[observe::Observed],
    pods: &Store<Pod>,
) {
    use kube::runtime::reflector::ObjectRef;
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    for pod_name in observed.iter().filter_map(|o| o.pod.as_ref()) {
        let Some(pod) = pods.get(&ObjectRef::new(pod_name).within(&namespace)) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let desired = &cluster.spec.pod_annotations;
        let Some(patch) =
            crate::controller::node::build::pod_annotations_patch(pod.annotations(), desired)
        else {
            continue;
        };
        if let Err(e) = api
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(pod = %pod_name, error = %e, "could not update the pod's annotations");
        }
    }
}

async fn publish_holds_data(
    ctx: &Context,
    namespace: &str,
    observed: &[observe::Observed],
    pods: &Store<Pod>,
) {
    use kube::runtime::reflector::ObjectRef;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    for o in observed {
        let (Some(view), Some(pod_name)) = (&o.member.view, &o.pod) else {
            continue;
        };
        let Some(pod) = pods.get(&ObjectRef::new(pod_name).within(namespace)) else {
            continue;
        };
        let holds = observe::holds_data(view);
        if observe::holds_data_condition(&pod) == Some(holds) {
            continue;
        }
        let (status, reason, message) = if holds {
            (
                "True",
                "HoldsData",
                "owns slots, or is a replica in sync with its primary",
            )
        } else {
            (
                "False",
                "NoData",
                "owns no slots and is not an in-sync replica",
            )
        };
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": CONDITION_HOLDS_DATA, "status": status, "reason": reason, "message": message,
        }]}});
        if let Err(e) = api
            .patch_status(pod_name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            warn!(pod = %pod_name, error = %e, "could not set the holds-data readiness gate");
        }
    }
}

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

async fn act(
    ctx: &Context,
    cluster: &ValkeyCluster,
    node_api: &Api<ValkeyNode>,
    driver: &dyn crate::driver::ClusterDriver,
    desired_spec: &crate::api::ValkeyNodeSpec,
    action: &Action,
) -> Result<(), Error> {
    let key = object_key(cluster);
    match action {
        Action::CreateNode { name, shard } => {
            ctx.metrics.action("create_node");
            let node = build::node(cluster, name, *shard, desired_spec);
            match node_api.create(&PostParams::default(), &node).await {
                Ok(_) => {
                    info!(cluster = %key, node = %name, shard, "created member");
                    status::event(
                        ctx,
                        cluster,
                        "CreatingMember",
                        &format!("Creating member {name} for shard {shard}"),
                    )
                    .await;
                }
                // Planned again after a crash or a stale cache: the object is already there.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            status::set_node_lifecycle(node_api, name, Lifecycle::Joining).await?;
        }
        Action::Meet { via, target } => {
            ctx.metrics.action("meet");
            info!(cluster = %key, via = %via, target = %target, "CLUSTER MEET");
            driver
                .meet(via, &target.host, target.port, Some(CLUSTER_BUS_PORT))
                .await?;
        }
        Action::AssignSlots { member, ranges } => {
            ctx.metrics.action("assign_slots");
            info!(cluster = %key, member = %member, ?ranges, "CLUSTER ADDSLOTSRANGE");
            driver.add_slots_range(member, ranges).await?;
        }
        Action::Replicate { member, primary } => {
            ctx.metrics.action("replicate");
            info!(cluster = %key, member = %member, primary = %primary.as_str(), "CLUSTER REPLICATE");
            if let Err(e) = driver.replicate(member, primary).await {
                // Most often: the member has not learned the primary's id yet. Re-planned.
                warn!(cluster = %key, member = %member, "replicate failed, will retry: {e}");
            }
        }
        Action::Failover {
            member,
            shard,
            mode,
        } => {
            ctx.metrics.action("failover");
            ctx.metrics.failovers.inc();
            info!(cluster = %key, member = %member, shard, ?mode, "CLUSTER FAILOVER");
            match driver.failover(member, *mode).await {
                Ok(()) => {}
                // A forced promotion races Valkey's own failover: whichever wins, the shard
                // gets a primary; the next round re-plans from what Valkey then reports.
                Err(e) if *mode != FailoverMode::Default => {
                    warn!(cluster = %key, member = %member, "forced failover failed, will re-plan: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
            let how = match mode {
                FailoverMode::Default => "coordinated failover to the in-sync replica",
                FailoverMode::Force => {
                    "forced failover (its primary is gone for good) to the most up-to-date replica"
                }
                FailoverMode::Takeover => {
                    "takeover (its primary is gone and no majority can vote) by the most up-to-date replica"
                }
            };
            status::event(
                ctx,
                cluster,
                "Failover",
                &format!("Shard {shard}: {how} at {member}"),
            )
            .await;
        }
        Action::MoveSlots {
            source,
            source_id,
            method,
            targets,
            primaries,
        } => {
            move_slots(
                ctx, cluster, driver, source, source_id, *method, targets, primaries,
            )
            .await?;
        }
        Action::CloseSlots { member, slots } => {
            ctx.metrics.action("close_slots");
            for slot in slots {
                info!(cluster = %key, member = %member, slot, "CLUSTER SETSLOT STABLE (peer gone)");
                driver.set_slot(member, *slot, &SetSlot::Stable).await?;
            }
        }
        Action::CancelSlotMigrations { member } => {
            ctx.metrics.action("cancel_slot_migrations");
            warn!(cluster = %key, member = %member, "slot migration made no progress: cancelling it");
            driver.cancel_slot_migrations(member).await?;
            status::event(
                ctx,
                cluster,
                "SlotMigrationCancelled",
                &format!("Cancelled the slot migration on {member}: no progress for {} s; it will be planned again", plan::MIGRATION_IDLE_LIMIT_SECS),
            )
            .await;
        }
        Action::MarkLeaving { names } => {
            for name in names {
                info!(cluster = %key, node = %name, "retiring member");
                status::set_node_lifecycle(node_api, name, Lifecycle::Leaving).await?;
                status::event(
                    ctx,
                    cluster,
                    "RetiringMember",
                    &format!("Retiring member {name}"),
                )
                .await;
            }
        }
        Action::Forget { via, node } => {
            ctx.metrics.action("forget");
            info!(cluster = %key, via = %via, node = %node.as_str(), "CLUSTER FORGET");
            if let Err(e) = driver.forget(via, node).await {
                // Already forgotten, or gossip not settled: re-planned next round.
                warn!(cluster = %key, via = %via, "forget failed, will retry: {e}");
            }
        }
        Action::DeleteNode { name } => {
            ctx.metrics.action("delete_node");
            info!(cluster = %key, node = %name, "deleting retired member");
            match node_api
                .delete(name, &kube::api::DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Action::MarkActive { names } => {
            for name in names {
                status::set_node_lifecycle(node_api, name, Lifecycle::Active).await?;
            }
        }
    }
    Ok(())
}

/// Slots a key-by-key move handles per reconcile, so one reconcile stays short; the rest is
/// planned again at once.
const KEY_MOVE_SLOTS_PER_ROUND: usize = 256;

/// Starts an atomic slot migration, or moves a batch of slots key by key.
#[allow(clippy::too_many_arguments)]
async fn move_slots(
    ctx: &Context,
    cluster: &ValkeyCluster,
    driver: &dyn crate::driver::ClusterDriver,
    source: &MemberAddr,
    source_id: &NodeId,
    method: MoveMethod,
    targets: &[MoveTarget],
    primaries: &[MemberAddr],
) -> Result<(), Error> {
    let key = object_key(cluster);
    let total: usize = targets
        .iter()
        .flat_map(|t| &t.ranges)
        .map(crate::driver::slots::range_len)
        .sum();
    match method {
        MoveMethod::Atomic => {
            ctx.metrics.action("migrate_slots_atomic");
            let requests: Vec<SlotMigrationRequest> = targets
                .iter()
                .map(|t| SlotMigrationRequest {
                    ranges: t.ranges.clone(),
                    target: t.id.clone(),
                })
                .collect();
            info!(cluster = %key, source = %source, slots = total, "CLUSTER MIGRATESLOTS");
            driver.migrate_slots(source, &requests).await?;
            ctx.metrics.slot_migrations.inc_by(total as u64);
            let to: Vec<String> = targets.iter().map(|t| t.member.to_string()).collect();
            status::event(
                ctx,
                cluster,
                "MigratingSlots",
                &format!(
                    "Moving {total} slot(s) from {source} to {} (atomic slot migration)",
                    to.join(", ")
                ),
            )
            .await;
        }
        MoveMethod::Keys => {
            ctx.metrics.action("migrate_slots_keys");
            let mut budget = KEY_MOVE_SLOTS_PER_ROUND;
            let mut moved_slots = 0u64;
            let mut moved_keys = 0u64;
            for t in targets {
                let mv = KeyMove {
                    source,
                    source_id,
                    target: &t.member,
                    target_id: &t.id,
                    others: primaries,
                };
                for slot in t.ranges.iter().flat_map(|r| r.clone()) {
                    if budget == 0 {
                        break;
                    }
                    budget -= 1;
                    moved_keys += move_slot_by_keys(driver, mv, slot).await?;
                    moved_slots += 1;
                    ctx.metrics.slot_migrations.inc();
                }
            }
            info!(cluster = %key, source = %source, slots = moved_slots, keys = moved_keys, "moved slots key by key");
            status::event(
                ctx,
                cluster,
                "MigratingSlots",
                &format!(
                    "Moved {moved_slots} of {total} slot(s) from {source} key by key ({moved_keys} keys)"
                ),
            )
            .await;
        }
    }
    Ok(())
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

/// A namespaced object the operator creates and server-side applies.
pub trait Applied:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Applied for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Server-side apply of an object the cluster controller owns alone.
pub async fn apply<K: Applied>(ctx: &Context, namespace: &str, obj: K) -> Result<K, Error> {
    apply_as(ctx, namespace, obj, CLUSTER_MANAGER).await
}

/// Server-side apply as field manager `manager`, refusing (`Error::NameTaken`) when an object
/// of that name exists that `obj`'s controlling owner did not create.
pub async fn apply_as<K: Applied>(
    ctx: &Context,
    namespace: &str,
    obj: K,
    manager: &str,
) -> Result<K, Error> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let name = obj.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        ensure_ours(&existing, controller_uid(obj.meta()))?;
    }
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&obj),
        )
        .await?)
}

/// The cluster-wide objects: operator credentials, ACL Secret, Services, PDB. Returns the
/// credentials and the rendered ACL file.
async fn apply_cluster_objects(
    ctx: &Context,
    cluster: &ValkeyCluster,
    resolved: &Resolved,
) -> Result<(OperatorCredentials, String), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let credentials = ensure_operator_secret(ctx, cluster).await?;
    let (bindings, roles) = &resolved.acl_file_inputs;
    let acl_file = render_acl_file(bindings, roles, &credentials);
    apply(
        ctx,
        &namespace,
        build::acl_secret(cluster, &acl_file, &credentials),
    )
    .await?;
    apply(ctx, &namespace, build::headless_service(cluster)).await?;
    apply(ctx, &namespace, build::client_service(cluster)).await?;
    apply(ctx, &namespace, build::pdb(cluster)).await?;
    if let Some(policy) =
        build::network_policy(cluster, &ctx.operator_namespace, ctx.settings.clients_from)
    {
        apply(ctx, &namespace, policy).await?;
    }
    Ok((credentials, acl_file))
}

/// Refuses to write over `existing` unless this cluster (the controller owner `obj` names)
/// created it: the operator never adopts a tenant's object that happens to have the name.
pub fn ensure_ours<K: Resource<DynamicType = ()>>(
    existing: &K,
    obj_owner: Option<&str>,
) -> Result<(), Error> {
    let owner = controller_uid(existing.meta());
    if owner.is_some() && owner == obj_owner {
        return Ok(());
    }
    Err(Error::NameTaken {
        kind: kind_name::<K>(),
        namespace: existing.meta().namespace.clone().unwrap_or_default(),
        name: existing.meta().name.clone().unwrap_or_default(),
    })
}

/// Whether `obj` was created by `owner` (its controlling owner reference names it).
pub fn owned_by<K: Resource, O: Resource>(obj: &K, owner: &O) -> bool {
    owner.meta().uid.is_some() && controller_uid(obj.meta()) == owner.meta().uid.as_deref()
}

/// The uid of the object's controlling owner, if it has one.
pub fn controller_uid(meta: &kube::api::ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Service" => "Service",
        "Secret" => "Secret",
        "ConfigMap" => "ConfigMap",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        "NetworkPolicy" => "NetworkPolicy",
        _ => "object",
    }
}

/// The operator's passwords: generated once into a Secret in the operator's own namespace,
/// then read back from it (never regenerated, or running members would lock the operator out).
/// Clusters created by earlier versions kept them in `<cluster>-operator` in their own
/// namespace: those are moved over (and the tenant-readable copy deleted).
async fn ensure_operator_secret(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<OperatorCredentials, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let secret_name = names::credentials_secret(&namespace, &cluster.name_any());
    let existing = api.get_opt(&secret_name).await?.filter(|s| {
        // One left by an earlier cluster of the same name is not this one's.
        s.labels().get(build::CREDENTIALS_UID_LABEL) == Some(&uid)
    });
    if let Some(secret) = existing {
        return read_credentials(&secret, &ctx.operator_namespace, &secret_name);
    }
    let legacy_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let legacy_name = names::operator_secret(&cluster.name_any());
    let legacy = match legacy_api.get_opt(&legacy_name).await? {
        // Credentials from a Secret somebody else put there would be theirs to know.
        Some(s) if ensure_ours(&s, Some(&uid)).is_ok() => Some(s),
        _ => None,
    };
    let credentials = match &legacy {
        Some(s) => read_credentials(s, &namespace, &legacy_name)?,
        None => OperatorCredentials {
            operator_password: random_password(),
            replication_password: random_password(),
        },
    };
    let secret = build::credentials_secret(cluster, &ctx.operator_namespace, &credentials);
    api.patch(
        &secret_name,
        &PatchParams::apply(CLUSTER_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    if legacy.is_some() {
        info!(cluster = %object_key(cluster), "moved the operator's credentials out of the cluster's namespace");
        let _ = legacy_api.delete(&legacy_name, &Default::default()).await;
    }
    Ok(credentials)
}

fn read_credentials(
    secret: &Secret,
    namespace: &str,
    name: &str,
) -> Result<OperatorCredentials, Error> {
    let read = |key: &str| -> Result<String, Error> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .cloned()
            })
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "Secret {namespace}/{name} has no key {key}; delete it to have it regenerated"
                ))
            })
    };
    Ok(OperatorCredentials {
        operator_password: read(build::OPERATOR_PASSWORD_KEY)?,
        replication_password: read(build::REPLICATION_PASSWORD_KEY)?,
    })
}

/// Deletes credentials Secrets whose cluster no longer exists (there is no cross-namespace
/// owner reference to do it). `live` holds the uids of every ValkeyCluster.
pub async fn sweep_credentials(
    client: &kube::Client,
    operator_namespace: &str,
    live: &std::collections::BTreeSet<String>,
) -> Result<usize, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), operator_namespace);
    let selector = format!(
        "{}={},{}",
        crate::api::constants::LABEL_APP_COMPONENT,
        "credentials",
        build::CREDENTIALS_UID_LABEL
    );
    let mut deleted = 0;
    for secret in api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
    {
        let uid = secret
            .labels()
            .get(build::CREDENTIALS_UID_LABEL)
            .cloned()
            .unwrap_or_default();
        if !live.contains(&uid) {
            api.delete(&secret.name_any(), &Default::default()).await?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

fn random_password() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect()
}

pub fn error_policy(
    cluster: Arc<ValkeyCluster>,
    error: &Error,
    cctx: Arc<ClusterContext>,
) -> Requeue {
    let key = object_key(cluster.as_ref());
    let retry = cctx.ctx.failure_backoff(&format!("cluster/{key}"));
    warn!(cluster = %key, error = %error, retry_in = ?retry, "reconcile failed");
    cctx.ctx
        .metrics
        .reconcile_failed("cluster", error.metric_label());
    Requeue::requeue(retry)
}

#[cfg(test)]
mod ownership_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn service(owner: Option<(&str, bool)>) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("taken".into());
        s.metadata.namespace = Some("team".into());
        s.metadata.owner_references = owner.map(|(uid, controller)| {
            vec![OwnerReference {
                uid: uid.into(),
                controller: Some(controller),
                ..Default::default()
            }]
        });
        s
    }

    #[test]
    fn only_objects_this_cluster_controls_are_written() {
        assert!(ensure_ours(&service(Some(("uid-1", true))), Some("uid-1")).is_ok());
        for foreign in [
            service(None),
            service(Some(("uid-2", true))),
            service(Some(("uid-1", false))),
        ] {
            let err = ensure_ours(&foreign, Some("uid-1")).unwrap_err();
            assert_eq!(err.metric_label(), "name_taken");
            assert!(
                err.to_string().starts_with(
                    "Service team/taken already exists and was not created by valkey-operator"
                ),
                "{err}"
            );
        }
        assert!(ensure_ours(&service(None), None).is_err());
    }

    #[test]
    fn clusters_waiting_only_on_pods_kubernetes_cannot_run_are_looked_at_calmly() {
        use super::acl::{AclProgress, MemberAcl};
        let acl = |m: MemberAcl| AclProgress {
            revision: "r".into(),
            members: vec![("c-0-0".into(), m)],
        };
        let loaded = acl(MemberAcl::Loaded { reloaded: false });
        assert_eq!(requeue_secs(true, false, &loaded), 30, "settled");
        assert_eq!(
            requeue_secs(false, false, &loaded),
            2,
            "forming or changing"
        );
        assert_eq!(requeue_secs(false, true, &loaded), 30, "unschedulable pods");
        assert_eq!(
            requeue_secs(true, false, &acl(MemberAcl::NotRunning)),
            2,
            "ACL not loaded yet"
        );
        let failed = acl(MemberAcl::Failed { error: "x".into() });
        assert_eq!(requeue_secs(false, true, &failed), 10);
    }

    #[test]
    fn a_pod_is_a_members_only_if_that_member_controls_it() {
        // Any owner kind will do: the ValkeyNode in the operator.
        let mut node = service(None);
        node.metadata.uid = Some("uid-1".into());
        assert!(owned_by(&service(Some(("uid-1", true))), &node));
        assert!(!owned_by(&service(Some(("uid-1", false))), &node));
        assert!(!owned_by(&service(Some(("uid-2", true))), &node));
        assert!(!owned_by(&service(None), &node));
        node.metadata.uid = None;
        assert!(!owned_by(&service(None), &node), "no uid owns nothing");
    }
}
