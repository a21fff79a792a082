//! Wiring: reflectors for the menu and the members, the two controllers, the background tasks
//! beside them, and the mapping of menu changes to every ValkeyCluster whose resolution reads
//! the changed object. [`run`] only starts these pieces; each has its own function saying why
//! it exists.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, PodSpec, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::info;

use crate::api::constants::{LABEL_APP_MANAGED_BY, LABEL_CLUSTER, MANAGER};
use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};
use crate::cache::{
    NamespacedKind, controller_for, events_in, forget_managed_fields, metadata_changes_in,
    trimmed_watch, trimmed_watch_in,
};
use crate::controller::cluster::{self, ClusterContext};
use crate::controller::{Context, Error, MenuStores, node, object_key, until_ready};
use crate::resolve::{MenuRef, menu_refs};
use crate::scope::WatchScope;
use crate::settings::Settings;
use crate::telemetry::{ClusterFigures, ClusterKey, ClusterLabel, Metrics, StateLabel};

/// Runs both controllers, and the tasks beside them, until shutdown.
pub async fn run(
    client: Client,
    operator_namespace: String,
    settings: Settings,
    metrics: Arc<Metrics>,
    election: Option<crate::controller::leader::Election>,
) -> anyhow::Result<()> {
    let scope = settings.watch_namespaces.clone();
    let (configs, config_changes) = reflect::<ValkeyConfig>(&client, watcher::Config::default());
    let (images, image_changes) = reflect::<ValkeyImage>(&client, watcher::Config::default());
    let (roles, role_changes) = reflect::<ValkeyRole>(&client, watcher::Config::default());
    let (nodes, node_changes) = reflect_in::<ValkeyNode>(&client, &scope);
    let (pods, pod_changes) = reflect_member_pods(&client, &scope);
    let (hosts, deleted_hosts) = reflect_node_names(&client);
    let menu = MenuStores {
        configs,
        images,
        roles,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        operator_namespace,
        menu.clone(),
        settings,
        metrics.clone(),
        election,
    ));

    let cluster_controller = cluster_controller(&client, &scope, node_changes, pod_changes)
        .watches_stream(deleted_hosts, clusters_on_host(pods.clone()));
    let cluster_controller = follow_menu(
        cluster_controller,
        &menu,
        config_changes,
        image_changes,
        role_changes,
    );
    let cluster_controller =
        follow_tls_secrets(&client, &scope, cluster_controller).shutdown_on_signal();
    let clusters = cluster_controller.store();
    let node_controller = node_controller(&client, &scope);

    beside_the_controllers(&ctx, &metrics, clusters, (&nodes, &pods, &hosts));

    let backups_done = crate::controller::backup::run(ctx.clone());
    let restores_done = crate::controller::restore::run(ctx.clone());
    let cluster_ctx = Arc::new(ClusterContext::new(ctx.clone(), nodes, pods, hosts));
    let clusters_done = cluster_controller
        .run(reconcile_cluster, cluster::error_policy, cluster_ctx)
        .for_each(|_| futures::future::ready(()));
    let nodes_done = node_controller
        .run(reconcile_node, node::error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    tokio::join!(clusters_done, nodes_done, backups_done, restores_done);
    Ok(())
}

/// Starts the tasks that run beside the controllers while this replica leads: readiness once
/// every cache is in, the sweep of what gone clusters left, image deletion protection, usage
/// metering, the fleet gauges and the closing of idle Valkey connections.
fn beside_the_controllers(
    ctx: &Arc<Context>,
    metrics: &Arc<Metrics>,
    clusters: Store<ValkeyCluster>,
    (nodes, pods, hosts): (
        &Store<ValkeyNode>,
        &Store<Pod>,
        &Store<PartialObjectMeta<Node>>,
    ),
) {
    tokio::spawn(mark_ready_once_synced(
        ctx.clone(),
        nodes.clone(),
        pods.clone(),
        hosts.clone(),
    ));
    tokio::spawn(sweep_gone_clusters(
        ctx.clone(),
        clusters.clone(),
        nodes.clone(),
    ));
    tokio::spawn(crate::controller::image_protection::protect_images(
        ctx.clone(),
    ));
    tokio::spawn(crate::controller::menu_status::publish_observed_generations(ctx.clone()));
    tokio::spawn(crate::controller::metering::meter(
        ctx.clone(),
        crate::controller::metering::Fleet {
            clusters: clusters.clone(),
            nodes: nodes.clone(),
            pods: pods.clone(),
        },
    ));
    tokio::spawn(crate::controller::backup_schedule::schedule_backups(
        ctx.clone(),
        clusters.clone(),
    ));
    tokio::spawn(cluster_gauges(metrics.clone(), clusters));
    tokio::spawn(close_idle_connections(ctx.clone()));
}

/// Only objects labelled as the operator's: a watch of every pod, Service or Secret in the
/// Kubernetes cluster would hold all of the tenants' in memory.
fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_APP_MANAGED_BY}={MANAGER}"))
}

/// A watch of every `K` (matching `config`) kept in a store that reconciles read instead of
/// the API, and the stream of objects it saw change, to trigger reconciles with. The store
/// fills only while the stream is polled: by the controller it is handed to.
fn reflect<K>(
    client: &Client,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, events) = trimmed_watch(client, config);
    (store, events.touched_objects())
}

/// [`reflect`] of a namespaced kind, every object in the namespaces of `scope`.
fn reflect_in<K: NamespacedKind>(
    client: &Client,
    scope: &WatchScope,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let (store, events) = trimmed_watch_in(client, scope, watcher::Config::default());
    (store, events.touched_objects())
}

/// The members' pods: [`reflect`] of the pods labelled as ours, keeping only those a
/// ValkeyNode controls (see [`members_only`]).
fn reflect_member_pods(
    client: &Client,
    scope: &WatchScope,
) -> (
    Store<Pod>,
    impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = reflector::store::<Pod>();
    let changes = events_in(client, scope, managed(), &store)
        .filter_map(|event| std::future::ready(event.map(members_only).transpose()))
        .modify(forget_pod_spec)
        .reflect(writer)
        .touched_objects();
    (store, changes)
}

/// The Node objects that exist, by name (a metadata watch: no status, no spec, no managed
/// fields), and the stream of those deleted, so the clusters with members there look again
/// at once (see [`clusters_on_host`]) instead of at their next periodic round.
fn reflect_node_names(
    client: &Client,
) -> (
    Store<PartialObjectMeta<Node>>,
    impl Stream<Item = Result<PartialObjectMeta<Node>, watcher::Error>> + Send + 'static,
) {
    let (store, events) =
        trimmed_watch::<PartialObjectMeta<Node>>(client, watcher::Config::default());
    let deleted = events.filter_map(|event| {
        std::future::ready(match event {
            Ok(watcher::Event::Delete(node)) => Some(Ok(node)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
    });
    (store, deleted)
}

/// The clusters with a member pod bound to a Node (by the pods' `spec.nodeName`).
fn clusters_on_host(
    pods: Store<Pod>,
) -> impl Fn(PartialObjectMeta<Node>) -> Vec<ObjectRef<ValkeyCluster>> + Send + Sync + 'static {
    move |node| {
        let host = node.name_any();
        let clusters: HashSet<ObjectRef<ValkeyCluster>> = pods
            .state()
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&host))
            .filter_map(|p| {
                let namespace = p.namespace()?;
                let cluster = p.labels().get(LABEL_CLUSTER)?;
                Some(ObjectRef::new(cluster).within(&namespace))
            })
            .collect();
        clusters.into_iter().collect()
    }
}

/// The watch events of the member pods only. A tenant can label any pod of its namespace
/// like ours: such a pod (not controlled by a ValkeyNode) is never held (observe would never
/// take it for a member anyway, see `owned_by`). Every stored object costs the whole `Pod`
/// struct, however little of it is kept (measured: 5,000 such pods with only their names
/// kept grew the operator by 14 MiB), so they are dropped, not trimmed: not listed, and a
/// change to one is passed on as its deletion (a member whose controller reference was
/// removed leaves the store).
fn members_only(event: watcher::Event<Pod>) -> Option<watcher::Event<Pod>> {
    use watcher::Event;
    match event {
        Event::Apply(pod) if !controlled_by_a_valkey_node(&pod) => Some(Event::Delete(pod)),
        Event::InitApply(pod) if !controlled_by_a_valkey_node(&pod) => None,
        event => Some(event),
    }
}

/// The member pods the cluster controller keeps: what it reads is their metadata (owner,
/// labels, annotations, deletion), status (phase, conditions, containers, IP) and the node
/// the pod runs on (new primaries are spread over nodes); the rest of the spec is the
/// ValkeyNode controller's, which reads pods from the API, so it is not kept for every member
/// of the fleet.
fn forget_pod_spec(pod: &mut Pod) {
    forget_managed_fields(pod);
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        ..PodSpec::default()
    });
}

/// Whether `pod`'s controlling owner is a ValkeyNode (the only pods that are members).
fn controlled_by_a_valkey_node(pod: &Pod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "ValkeyNode"
            && o.api_version.starts_with("valkey.gomomento.com/")
    })
}

/// The ValkeyCluster controller, reconciling a cluster when it changes, when an object it
/// owns changes (its ValkeyNodes, Services, Secrets, PodDisruptionBudget), and when one of
/// its members' pods changes: pods belong to ValkeyNodes, so they are mapped to their cluster
/// by its label, and a pod that becomes ready or fails is acted on at once. Menu changes are
/// followed by [`follow_menu`].
fn cluster_controller(
    client: &Client,
    scope: &WatchScope,
    node_changes: impl Stream<Item = Result<ValkeyNode, watcher::Error>> + Send + 'static,
    pod_changes: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
) -> Controller<ValkeyCluster> {
    // A member's utilization, written every 30 s, changes nothing a reconcile reads.
    let node_changes = node_changes.predicate_filter(
        cluster::utilization::without_utilization,
        Default::default(),
    );
    controller_for::<ValkeyCluster>(client, scope, watcher::Config::default())
        .owns_stream(node_changes)
        .owns_stream(metadata_changes_in::<Service>(client, scope, managed()))
        .owns_stream(metadata_changes_in::<Secret>(client, scope, managed()))
        .owns_stream(metadata_changes_in::<PodDisruptionBudget>(
            client,
            scope,
            managed(),
        ))
        .watches_stream(pod_changes, |pod: Pod| {
            let namespace = pod.namespace().unwrap_or_default();
            pod.labels()
                .get(LABEL_CLUSTER)
                .map(|c| ObjectRef::new(c).within(&namespace))
        })
}

/// Reconciles every cluster whose resolution reads a menu object that changed, so a Blocked
/// cluster unblocks by itself when the object it misses appears, and a changed config or
/// image reaches the clusters using it.
fn follow_menu(
    controller: Controller<ValkeyCluster>,
    menu: &MenuStores,
    config_changes: impl Stream<Item = Result<ValkeyConfig, watcher::Error>> + Send + 'static,
    image_changes: impl Stream<Item = Result<ValkeyImage, watcher::Error>> + Send + 'static,
    role_changes: impl Stream<Item = Result<ValkeyRole, watcher::Error>> + Send + 'static,
) -> Controller<ValkeyCluster> {
    let clusters = controller.store();
    controller
        .watches_stream(
            config_changes,
            menu_mapper(&clusters, menu, MenuRef::Config),
        )
        .watches_stream(image_changes, menu_mapper(&clusters, menu, MenuRef::Image))
        .watches_stream(role_changes, menu_mapper(&clusters, menu, MenuRef::Role))
}

/// Reconciles a TLS cluster when the Secret its `spec.tls.secretRef` names appears, changes
/// (a cert-manager renewal) or goes, so a cluster Blocked on a missing or broken Secret
/// unblocks by itself and a renewal reaches the members at once. Only metadata is watched
/// and nothing is kept: the tenants' Secrets never sit in the operator's memory, and the
/// few a cluster names are read when it is reconciled.
fn follow_tls_secrets(
    client: &Client,
    scope: &WatchScope,
    controller: Controller<ValkeyCluster>,
) -> Controller<ValkeyCluster> {
    let clusters = controller.store();
    let changes = metadata_changes_in::<Secret>(client, scope, watcher::Config::default());
    controller.watches_stream(changes, move |secret| {
        clusters_naming_secret(
            &clusters.state(),
            &secret.namespace().unwrap_or_default(),
            &secret.name_any(),
        )
    })
}

/// Clusters in `namespace` whose `spec.tls.secretRef` is `secret`.
fn clusters_naming_secret(
    clusters: &[Arc<ValkeyCluster>],
    namespace: &str,
    secret: &str,
) -> Vec<ObjectRef<ValkeyCluster>> {
    clusters
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(namespace))
        .filter(|c| c.spec.tls.as_ref().is_some_and(|t| t.secret_ref == secret))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// Maps a changed menu object (`menu_ref` names its kind, e.g. [`MenuRef::Config`]) to the
/// clusters whose resolution reads it.
fn menu_mapper<K: ResourceExt>(
    clusters: &Store<ValkeyCluster>,
    menu: &MenuStores,
    menu_ref: fn(String) -> MenuRef,
) -> impl Fn(K) -> Vec<ObjectRef<ValkeyCluster>> + Send + Sync + 'static {
    let (clusters, menu) = (clusters.clone(), menu.clone());
    move |changed: K| clusters_using(&clusters, &menu, &menu_ref(changed.name_any()))
}

/// Clusters whose resolution reads `target`.
fn clusters_using(
    clusters: &Store<ValkeyCluster>,
    menu: &MenuStores,
    target: &MenuRef,
) -> Vec<ObjectRef<ValkeyCluster>> {
    clusters
        .state()
        .iter()
        .filter(|c| menu_refs(menu, &c.spec.config_ref, &c.spec.acl).contains(target))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The ValkeyNode controller: one ConfigMap and one Pod per member, reconciled again when
/// either changes.
fn node_controller(client: &Client, scope: &WatchScope) -> Controller<ValkeyNode> {
    let (store, events) = trimmed_watch_in::<ValkeyNode>(client, scope, watcher::Config::default());
    let nodes = events
        .applied_objects()
        // A member's utilization, written every 30 s, changes nothing its reconcile reads.
        .predicate_filter(
            cluster::utilization::without_utilization,
            Default::default(),
        );
    Controller::for_stream(nodes, store)
        .owns_stream(metadata_changes_in::<Pod>(client, scope, managed()))
        .owns_stream(metadata_changes_in::<ConfigMap>(client, scope, managed()))
        .shutdown_on_signal()
}

/// A cluster reconcile, timed and counted. A successful reconcile resets the object's failure
/// backoff (error_policy grows it).
async fn reconcile_cluster(
    cluster: Arc<ValkeyCluster>,
    cctx: Arc<ClusterContext>,
) -> Result<Action, Error> {
    let object = cluster.clone();
    let started = Instant::now();
    // The status this replica wrote last, should the watch not have shown it yet; then
    // autoscaling's own latest decision, should that write not have carried it.
    let cluster = cctx.ctx.cluster_status_writes.freshest(cluster);
    let cluster = cctx.episodes.freshest(cluster);
    let result = cluster::reconcile(cluster, cctx.clone()).await;
    cctx.ctx
        .metrics
        .reconciled("cluster", started, result.is_ok());
    cctx.ctx.settle("cluster", object.as_ref(), &result);
    result
}

/// A member reconcile, timed and counted; success resets its failure backoff likewise.
async fn reconcile_node(node: Arc<ValkeyNode>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = node::reconcile(node.clone(), ctx.clone()).await;
    ctx.metrics.reconciled("node", started, result.is_ok());
    ctx.settle("node", node.as_ref(), &result);
    result
}

/// Lets reconciles start (and `/readyz` answer ok) once every store the resolver reads has
/// its initial list: before, the menu looks empty and clusters would be reported Blocked
/// for nothing.
async fn mark_ready_once_synced(
    ctx: Arc<Context>,
    nodes: Store<ValkeyNode>,
    pods: Store<Pod>,
    hosts: Store<PartialObjectMeta<Node>>,
) {
    let menu = &ctx.menu;
    // Before the Node list is in, every member would look bound to a deleted node.
    let _ = tokio::join!(
        until_ready(&menu.configs),
        until_ready(&menu.images),
        until_ready(&menu.roles),
        until_ready(&nodes),
        until_ready(&pods),
        until_ready(&hosts)
    );
    ctx.menu_synced.store(true, Ordering::Release);
    ctx.metrics.ready.store(true, Ordering::Relaxed);
    info!("caches synced; reconciling");
}

/// Every 10 s, closes the Valkey connections no reconcile has used for 10 s: a settled
/// cluster is looked at every 30 s and reconnects then (a few ms), a changing one keeps its
/// connections. Memory then follows the clusters that change, not the clusters that exist.
async fn close_idle_connections(ctx: Arc<Context>) {
    const IDLE: Duration = Duration::from_secs(10);
    loop {
        tokio::time::sleep(IDLE).await;
        let closed = ctx.close_idle_connections(IDLE).await;
        if closed > 0 {
            tracing::debug!(closed, "closed idle Valkey connections");
        }
    }
}

/// Cleans up after clusters that are gone, once the cluster and member caches have listed,
/// then every 5 min: a deleted cluster is not reconciled once it has left the cache, so
/// nothing else would drop what memory holds for it or delete its credentials Secret (kept
/// in this namespace, where its owner reference cannot reach).
async fn sweep_gone_clusters(
    ctx: Arc<Context>,
    clusters: Store<ValkeyCluster>,
    nodes: Store<ValkeyNode>,
) {
    if !until_ready(&clusters).await || !until_ready(&nodes).await {
        return;
    }
    loop {
        forget_gone(&ctx, &clusters, &nodes).await;
        sweep_gone_credentials(&ctx, &clusters).await;
        tokio::time::sleep(Duration::from_secs(300)).await;
    }
}

/// Drops driver connections, rollout slots and failure counts of clusters and members that
/// are gone.
async fn forget_gone(ctx: &Context, clusters: &Store<ValkeyCluster>, nodes: &Store<ValkeyNode>) {
    let live_clusters = clusters
        .state()
        .iter()
        .map(|c| object_key(c.as_ref()))
        .collect();
    let live_nodes = nodes
        .state()
        .iter()
        .map(|n| object_key(n.as_ref()))
        .collect();
    let dropped = ctx.retain_live(&live_clusters, &live_nodes).await;
    if dropped > 0 {
        info!(
            dropped,
            "dropped in-memory state of clusters and members that are gone"
        );
    }
}

/// Deletes the credentials Secrets (in this namespace, not owned: owners cannot span
/// namespaces) of clusters that are gone, by the uid each Secret is labelled with.
async fn sweep_gone_credentials(ctx: &Context, clusters: &Store<ValkeyCluster>) {
    let live: BTreeSet<String> = clusters
        .state()
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    match cluster::sweep_credentials(
        &ctx.client,
        &ctx.operator_namespace,
        &live,
        &ctx.settings.watch_namespaces,
    )
    .await
    {
        Ok(0) => {}
        Ok(n) => info!(deleted = n, "deleted credentials of clusters that are gone"),
        Err(e) => tracing::warn!(error = %e, "could not sweep credentials Secrets"),
    }
}

/// Clusters per state and per-cluster figures, recomputed every 10 s from the cache's
/// statuses (correct across operator restarts).
async fn cluster_gauges(metrics: Arc<Metrics>, clusters: Store<ValkeyCluster>) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    let mut published = PublishedSeries::default();
    loop {
        tick.tick().await;
        published = publish_cluster_gauges(&metrics, &clusters.state(), &published);
    }
}

/// The per-cluster series one round published, so the next can remove those it no longer
/// publishes.
#[derive(Default)]
struct PublishedSeries {
    /// `cluster_info`: one series per cluster and state.
    labelled: HashSet<ClusterLabel>,
    /// The per-cluster figures (members, ready, outdated, slots to move).
    with_figures: BTreeSet<ClusterKey>,
    /// TLS clusters' certificate expiry.
    with_certificate: BTreeSet<ClusterKey>,
}

/// One round of [`cluster_gauges`]; returns what it published.
fn publish_cluster_gauges(
    metrics: &Metrics,
    clusters: &[Arc<ValkeyCluster>],
    last: &PublishedSeries,
) -> PublishedSeries {
    let mut counts: BTreeMap<String, i64> = [
        "Creating", "Active", "Updating", "Blocked", "Degraded", "Deleting",
    ]
    .iter()
    .map(|s| (s.to_string(), 0))
    .collect();
    let mut now = PublishedSeries::default();
    for c in clusters {
        if let Some(p) = c.status.as_ref().and_then(|s| s.progress.as_ref()) {
            let key = ClusterKey {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
            };
            metrics.cluster_figures(
                &key,
                ClusterFigures {
                    members: p.desired_members.into(),
                    members_ready: p.ready_members.into(),
                    slots_to_move: p.slots_to_move.into(),
                    members_outdated: p.outdated_members.into(),
                },
            );
            now.with_figures.insert(key);
        }
        if let Some(not_after) = certificate_not_after(c) {
            let key = ClusterKey {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
            };
            metrics
                .cluster_certificate_not_after
                .get_or_create(&key)
                .set(not_after);
            now.with_certificate.insert(key);
        }
        if let Some(state) = c.status.as_ref().and_then(|s| s.state) {
            *counts.entry(format!("{state:?}")).or_default() += 1;
            let label = ClusterLabel {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
                state: format!("{state:?}"),
            };
            metrics.cluster_info.get_or_create(&label).set(1);
            now.labelled.insert(label);
        }
    }
    // Series of deleted clusters and of states left go; the others stay (no gap that would
    // reset an alert's `for:` timer).
    for gone in last.labelled.difference(&now.labelled) {
        metrics.cluster_info.remove(gone);
    }
    for gone in last.with_figures.difference(&now.with_figures) {
        metrics.forget_cluster(gone);
    }
    for gone in last.with_certificate.difference(&now.with_certificate) {
        metrics.cluster_certificate_not_after.remove(gone);
    }
    for (state, n) in counts {
        metrics.clusters.get_or_create(&StateLabel { state }).set(n);
    }
    now
}

/// A TLS cluster's `status.certificateNotAfter` in Unix seconds.
fn certificate_not_after(cluster: &ValkeyCluster) -> Option<i64> {
    let at = cluster.status.as_ref()?.certificate_not_after.as_deref()?;
    at.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TlsSpec, ValkeyClusterSpec};

    #[test]
    fn a_deleted_node_maps_to_the_clusters_with_members_on_it() {
        let (pods, mut writer) = reflector::store::<Pod>();
        for (ns, cluster, member, host) in [
            ("a", "one", "one-0-0", "node-a"),
            ("a", "one", "one-0-1", "node-b"),
            ("a", "two", "two-0-0", "node-a"),
            ("b", "one", "one-0-0", "node-a"),
            ("b", "three", "three-0-0", "node-c"),
        ] {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": member, "namespace": ns,
                             "labels": {LABEL_CLUSTER: cluster}},
                "spec": {"nodeName": host, "containers": []}
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(pod));
        }
        let node = |name: &str| {
            let mut n = PartialObjectMeta::<Node>::default();
            n.metadata.name = Some(name.into());
            n
        };
        let on = clusters_on_host(pods);
        let mut got: Vec<String> = on(node("node-a")).iter().map(|r| r.to_string()).collect();
        got.sort();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got.iter().all(|r| !r.contains("three")), "{got:?}");
        assert!(on(node("node-z")).is_empty());
    }

    #[test]
    fn kept_member_pods_keep_their_node_and_status_but_not_the_rest_of_the_spec() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-0-0", "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": "node-a", "containers": [{"name": "valkey", "image": "valkey/valkey:9.0.0"}]},
            "status": {"podIP": "10.0.0.1"}
        }))
        .unwrap();
        forget_pod_spec(&mut pod);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert!(spec.containers.is_empty());
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.status.unwrap().pod_ip.as_deref(), Some("10.0.0.1"));
    }

    fn cluster(namespace: &str, name: &str, secret: Option<&str>) -> Arc<ValkeyCluster> {
        let mut c = ValkeyCluster::new(
            name,
            ValkeyClusterSpec {
                config_ref: "standard".into(),
                shards: 3,
                replicas_per_shard: 1,
                acl: vec![],
                tls: secret.map(|s| TlsSpec {
                    secret_ref: s.into(),
                }),
                placement: None,
                pod_annotations: BTreeMap::new(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        c.metadata.namespace = Some(namespace.into());
        Arc::new(c)
    }

    #[test]
    fn a_secret_change_reconciles_the_clusters_naming_it_in_its_namespace_only() {
        let clusters = [
            cluster("team", "a", Some("cert")),
            cluster("team", "b", Some("other")),
            cluster("team", "c", None),
            cluster("elsewhere", "d", Some("cert")),
            cluster("team", "e", Some("cert")),
        ];
        let names: Vec<String> = clusters_naming_secret(&clusters, "team", "cert")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, vec!["a", "e"]);
        assert!(clusters_naming_secret(&clusters, "team", "nobody").is_empty());
    }

    #[test]
    fn a_tls_clusters_certificate_expiry_is_a_gauge_until_the_cluster_goes() {
        let metrics = Metrics::new();
        let mut tls = (*cluster("team", "a", Some("cert"))).clone();
        tls.status = Some(crate::api::ValkeyClusterStatus {
            certificate_not_after: Some("2030-01-01T00:00:00Z".into()),
            ..Default::default()
        });
        let plain = cluster("team", "b", None);
        let published = publish_cluster_gauges(
            &metrics,
            &[Arc::new(tls), plain.clone()],
            &Default::default(),
        );
        let page = metrics.encode();
        assert!(
            page.contains(
                "valkey_operator_cluster_certificate_not_after_seconds{namespace=\"team\",name=\"a\"} 1893456000"
            ),
            "{page}"
        );
        assert!(!page.contains("name=\"b\"} 18"), "{page}");
        publish_cluster_gauges(&metrics, &[plain], &published);
        assert!(!metrics.encode().contains("certificate_not_after_seconds{"));
    }
}

#[cfg(test)]
mod trim_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn labelled_pod(owner_kind: Option<&str>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                namespace: Some("team".into()),
                labels: Some([(LABEL_APP_MANAGED_BY.to_string(), MANAGER.to_string())].into()),
                annotations: Some([("big".to_string(), "x".repeat(10_000))].into()),
                owner_references: owner_kind.map(|kind| {
                    vec![OwnerReference {
                        api_version: "valkey.gomomento.com/v1alpha1".into(),
                        kind: kind.into(),
                        name: "p".into(),
                        uid: "u".into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_pod_labelled_like_ours_but_not_a_members_is_never_held() {
        use watcher::Event;
        for foreign in [labelled_pod(None), labelled_pod(Some("Deployment"))] {
            assert!(members_only(Event::InitApply(foreign.clone())).is_none());
            assert!(matches!(
                members_only(Event::Apply(foreign.clone())),
                Some(Event::Delete(_))
            ));
            assert!(matches!(
                members_only(Event::Delete(foreign)),
                Some(Event::Delete(_))
            ));
        }
        let member = labelled_pod(Some("ValkeyNode"));
        assert!(matches!(
            members_only(Event::InitApply(member.clone())),
            Some(Event::InitApply(_))
        ));
        assert!(matches!(
            members_only(Event::Apply(member.clone())),
            Some(Event::Apply(_))
        ));
        assert!(matches!(members_only(Event::Init), Some(Event::Init)));
        assert!(matches!(
            members_only(Event::InitDone),
            Some(Event::InitDone)
        ));
        let mut kept = member;
        forget_pod_spec(&mut kept);
        assert!(kept.status.is_some() && kept.metadata.annotations.is_some());
        assert_eq!(
            kept.spec,
            Some(PodSpec::default()),
            "nothing but its node is kept"
        );
    }
}
