//! Wiring: reflectors for the menu, the two controllers, and the mapping of menu changes to
//! every ValkeyCluster whose resolution reads the changed object.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::info;

use crate::api::constants::{LABEL_APP_MANAGED_BY, LABEL_CLUSTER, MANAGER};
use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};
use crate::controller::cluster::{self, ClusterContext};
use crate::controller::{Context, StoreCatalog, node};
use crate::resolve::{MenuRef, menu_refs};
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// Clusters whose resolution reads `target`.
fn clusters_using(
    clusters: &Store<ValkeyCluster>,
    catalog: &StoreCatalog,
    target: &MenuRef,
) -> Vec<ObjectRef<ValkeyCluster>> {
    clusters
        .state()
        .iter()
        .filter(|c| menu_refs(catalog, &c.spec.config_ref, &c.spec.acl).contains(target))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// Runs both controllers until shutdown.
pub async fn run(
    client: Client,
    operator_namespace: String,
    settings: Settings,
    metrics: Arc<Metrics>,
    election: Option<crate::controller::leader::Election>,
) -> anyhow::Result<()> {
    let wc = watcher::Config::default;
    let managed =
        || watcher::Config::default().labels(&format!("{LABEL_APP_MANAGED_BY}={MANAGER}"));

    let (configs, configs_writer) = reflector::store::<ValkeyConfig>();
    let (images, images_writer) = reflector::store::<ValkeyImage>();
    let (roles, roles_writer) = reflector::store::<ValkeyRole>();
    let (nodes, nodes_writer) = reflector::store::<ValkeyNode>();
    let (pods, pods_writer) = reflector::store::<Pod>();
    let config_stream = watcher(Api::<ValkeyConfig>::all(client.clone()), wc())
        .default_backoff()
        .reflect(configs_writer)
        .touched_objects();
    let image_stream = watcher(Api::<ValkeyImage>::all(client.clone()), wc())
        .default_backoff()
        .reflect(images_writer)
        .touched_objects();
    let role_stream = watcher(Api::<ValkeyRole>::all(client.clone()), wc())
        .default_backoff()
        .reflect(roles_writer)
        .touched_objects();
    let node_stream = watcher(Api::<ValkeyNode>::all(client.clone()), wc())
        .default_backoff()
        .reflect(nodes_writer)
        .touched_objects();
    let pod_stream = watcher(Api::<Pod>::all(client.clone()), managed())
        .default_backoff()
        .reflect(pods_writer)
        .touched_objects();

    let catalog = StoreCatalog {
        configs: configs.clone(),
        images: images.clone(),
        roles: roles.clone(),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        operator_namespace,
        catalog.clone(),
        settings,
        metrics.clone(),
        election,
    ));

    let cluster_controller = Controller::new(Api::<ValkeyCluster>::all(client.clone()), wc());
    let clusters = cluster_controller.store();
    let (c1, c2, c3) = (clusters.clone(), clusters.clone(), clusters.clone());
    let (k1, k2, k3) = (catalog.clone(), catalog.clone(), catalog.clone());
    let cluster_controller = cluster_controller
        .owns_stream(node_stream)
        .owns(Api::<Service>::all(client.clone()), managed())
        .owns(Api::<Secret>::all(client.clone()), managed())
        .owns(Api::<PodDisruptionBudget>::all(client.clone()), managed())
        .watches_stream(pod_stream, |pod: Pod| {
            let namespace = pod.namespace().unwrap_or_default();
            pod.labels()
                .get(LABEL_CLUSTER)
                .map(|c| ObjectRef::new(c).within(&namespace))
        })
        .watches_stream(config_stream, move |c: ValkeyConfig| {
            clusters_using(&c1, &k1, &MenuRef::Config(c.name_any()))
        })
        .watches_stream(image_stream, move |i: ValkeyImage| {
            clusters_using(&c2, &k2, &MenuRef::Image(i.name_any()))
        })
        .watches_stream(role_stream, move |r: ValkeyRole| {
            clusters_using(&c3, &k3, &MenuRef::Role(r.name_any()))
        })
        .shutdown_on_signal();
    let cluster_ctx = Arc::new(ClusterContext {
        ctx: ctx.clone(),
        nodes: nodes.clone(),
        pods: pods.clone(),
    });

    let node_controller = Controller::new(Api::<ValkeyNode>::all(client.clone()), wc())
        .owns(Api::<Pod>::all(client.clone()), managed())
        .owns(Api::<ConfigMap>::all(client.clone()), managed())
        .shutdown_on_signal();

    // Ready once every store the resolver reads has its initial list.
    let ready_metrics = metrics.clone();
    let synced_ctx = ctx.clone();
    let (r1, r2, r3, r4, r5) = (
        configs.clone(),
        images.clone(),
        roles.clone(),
        nodes.clone(),
        pods.clone(),
    );
    tokio::spawn(async move {
        let _ = tokio::join!(
            r1.wait_until_ready(),
            r2.wait_until_ready(),
            r3.wait_until_ready(),
            r4.wait_until_ready(),
            r5.wait_until_ready()
        );
        synced_ctx.menu_synced.store(true, Ordering::Release);
        ready_metrics.ready.store(true, Ordering::Relaxed);
        info!("caches synced; reconciling");
    });

    // Credentials Secrets (in this namespace, not owned: owners cannot span namespaces) of
    // clusters that are gone are deleted: once the cluster cache has listed, then every 5 min.
    // Also drops what memory holds for clusters and members that are gone.
    let sweep_clusters = clusters.clone();
    let sweep_nodes = nodes.clone();
    let sweep_ctx = ctx.clone();
    tokio::spawn(async move {
        if sweep_clusters.wait_until_ready().await.is_err()
            || sweep_nodes.wait_until_ready().await.is_err()
        {
            return;
        }
        loop {
            use crate::controller::object_key;
            let live_clusters = sweep_clusters
                .state()
                .iter()
                .map(|c| object_key(c.as_ref()))
                .collect();
            let live_nodes = sweep_nodes
                .state()
                .iter()
                .map(|n| object_key(n.as_ref()))
                .collect();
            let dropped = sweep_ctx.retain_live(&live_clusters, &live_nodes).await;
            if dropped > 0 {
                info!(
                    dropped,
                    "dropped in-memory state of clusters and members that are gone"
                );
            }
            let live: std::collections::BTreeSet<String> = sweep_clusters
                .state()
                .iter()
                .filter_map(|c| c.metadata.uid.clone())
                .collect();
            match cluster::sweep_credentials(
                &sweep_ctx.client,
                &sweep_ctx.operator_namespace,
                &live,
            )
            .await
            {
                Ok(0) => {}
                Ok(n) => info!(deleted = n, "deleted credentials of clusters that are gone"),
                Err(e) => tracing::warn!(error = %e, "could not sweep credentials Secrets"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(300)).await;
        }
    });

    // Clusters per state and per-cluster figures, recomputed from the cache's statuses
    // (correct across operator restarts).
    let gauge_metrics = metrics.clone();
    let gauge_clusters = clusters.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
        let mut labelled = std::collections::HashSet::new();
        let mut with_figures = std::collections::BTreeSet::new();
        loop {
            tick.tick().await;
            let mut counts: std::collections::BTreeMap<String, i64> = [
                "Creating", "Active", "Updating", "Blocked", "Degraded", "Deleting",
            ]
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
            let mut now_labelled = std::collections::HashSet::new();
            let mut now_with_figures = std::collections::BTreeSet::new();
            for c in gauge_clusters.state() {
                if let Some(p) = c.status.as_ref().and_then(|s| s.progress.as_ref()) {
                    let key = crate::telemetry::ClusterKey {
                        namespace: c.namespace().unwrap_or_default(),
                        name: c.name_any(),
                    };
                    gauge_metrics.cluster_figures(
                        &key,
                        crate::telemetry::ClusterFigures {
                            members: p.desired_members.into(),
                            members_ready: p.ready_members.into(),
                            slots_to_move: p.slots_to_move.into(),
                            members_outdated: p.outdated_members.into(),
                        },
                    );
                    now_with_figures.insert(key);
                }
                if let Some(state) = c.status.as_ref().and_then(|s| s.state) {
                    *counts.entry(format!("{state:?}")).or_default() += 1;
                    let label = crate::telemetry::ClusterLabel {
                        namespace: c.namespace().unwrap_or_default(),
                        name: c.name_any(),
                        state: format!("{state:?}"),
                    };
                    gauge_metrics.cluster_info.get_or_create(&label).set(1);
                    now_labelled.insert(label);
                }
            }
            // Series of deleted clusters and of states left go; the others stay (no gap that
            // would reset an alert's `for:` timer).
            for gone in labelled.difference(&now_labelled) {
                gauge_metrics.cluster_info.remove(gone);
            }
            labelled = now_labelled;
            for gone in with_figures.difference(&now_with_figures) {
                gauge_metrics.forget_cluster(gone);
            }
            with_figures = now_with_figures;
            for (state, n) in counts {
                gauge_metrics
                    .clusters
                    .get_or_create(&crate::telemetry::StateLabel { state })
                    .set(n);
            }
        }
    });

    // A successful reconcile resets the object's failure backoff (error_policy grows it).
    let clusters_done = cluster_controller
        .run(
            |cluster, cctx| async move {
                let key = format!(
                    "cluster/{}",
                    crate::controller::object_key(cluster.as_ref())
                );
                let started = std::time::Instant::now();
                let result = cluster::reconcile(cluster, cctx.clone()).await;
                cctx.ctx
                    .metrics
                    .reconciled("cluster", started, result.is_ok());
                if result.is_ok() {
                    cctx.ctx.reconciled(&key);
                }
                result
            },
            cluster::error_policy,
            cluster_ctx,
        )
        .for_each(|_| futures::future::ready(()));
    let nodes_done = node_controller
        .run(
            |node, ctx| async move {
                let key = format!("node/{}", crate::controller::object_key(node.as_ref()));
                let started = std::time::Instant::now();
                let result = node::reconcile(node, ctx.clone()).await;
                ctx.metrics.reconciled("node", started, result.is_ok());
                if result.is_ok() {
                    ctx.reconciled(&key);
                }
                result
            },
            node::error_policy,
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));
    tokio::join!(clusters_done, nodes_done);
    Ok(())
}
