//! Usage metering (Momento v0.9, `../shared/spec/MOMENTO-V09.md` section 7): one
//! ValkeyMeteringRecord per ValkeyCluster in the operator's namespace, created when the
//! operator first sees the cluster, advanced every minute from the members whose pods exist,
//! closed when the cluster is deleted and removed only when the platform team releases it.
//! The arithmetic is pure ([`crate::telemetry::metering`]); this is the I/O around it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::metering::{
    LABEL_CLUSTER_NAME, LABEL_CLUSTER_NAMESPACE, LABEL_CLUSTER_UID, MeteredCluster,
    RELEASE_ANNOTATION, RETAIN_FINALIZER,
};
use crate::api::{ValkeyCluster, ValkeyMeteringRecord, ValkeyMeteringRecordSpec, ValkeyNode};
use crate::controller::{Context, Error, until_ready};
use crate::resolve::memory::parse_quantity_bytes;
use crate::telemetry::metering::{Round, Source, advance, member_bytes, record_name, record_start};
use crate::time::{now_seconds, rfc3339, unix_seconds};

/// Field manager of the records' status.
pub const METERING_MANAGER: &str = "valkey-operator/metering";
/// A record is advanced at most once per this many seconds (and at its cluster's deletion).
pub const ACCOUNT_EVERY_SECONDS: i64 = 60;
/// How often the task looks for new clusters, deleted ones and released records.
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// The stores the metering task reads.
pub struct Fleet {
    pub clusters: Store<ValkeyCluster>,
    pub nodes: Store<ValkeyNode>,
    pub pods: Store<Pod>,
}

/// Runs until shutdown (only while this replica leads: it is started with the controllers).
pub async fn meter(ctx: Arc<Context>, fleet: Fleet) {
    let api: Api<ValkeyMeteringRecord> =
        Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let (records, writer) = reflector::store::<ValkeyMeteringRecord>();
    let watch = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(watch);
    if !until_ready(&records).await
        || !until_ready(&fleet.clusters).await
        || !until_ready(&fleet.nodes).await
        || !until_ready(&fleet.pods).await
    {
        warn!("metering not started: a cache never filled");
        return;
    }
    info!("usage metering running");
    let mut last_seen = LastSeen::default();
    loop {
        if let Err(e) = look(&ctx, &api, &records, &fleet, &mut last_seen).await {
            warn!(error = %e, "metering round failed; trying again in a few seconds");
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Each metered cluster's members as last seen with pods, by cluster uid: a deleted cluster's
/// members may be gone before the look that closes its record, which then accounts the time
/// up to the deletion with these.
type LastSeen = std::collections::HashMap<String, Vec<(Source, u64)>>;

/// One look: release what is released, give every cluster a record, advance what is due.
async fn look(
    ctx: &Context,
    api: &Api<ValkeyMeteringRecord>,
    records: &Store<ValkeyMeteringRecord>,
    fleet: &Fleet,
    last_seen: &mut LastSeen,
) -> Result<(), Error> {
    let now = now_seconds();
    let records = records.state();
    let clusters = fleet.clusters.state();
    for record in records.iter().filter(|r| released(r)) {
        release(ctx, api, record, &clusters, &records).await?;
    }
    for cluster in &clusters {
        let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
        let has_live = records
            .iter()
            .any(|r| r.spec.cluster.uid == uid && !released(r));
        if !has_live && cluster.metadata.deletion_timestamp.is_none() {
            create(ctx, api, cluster, next_sequence(&records, uid), now).await?;
        }
    }
    let live_members = pod_owners(&fleet.pods);
    // A record of a cluster in a namespace no longer watched (watchNamespaces changed) is
    // left as it is: nothing here can see whether its cluster still runs.
    let in_scope = |r: &&Arc<ValkeyMeteringRecord>| {
        ctx.settings
            .watch_namespaces
            .includes(&r.spec.cluster.namespace)
    };
    for record in records.iter().filter(|r| !released(r)).filter(in_scope) {
        let uid = record.spec.cluster.uid.as_str();
        if record
            .status
            .as_ref()
            .is_some_and(|s| s.cluster_deleted_at.is_some())
        {
            last_seen.remove(uid);
            continue;
        }
        let seen = members(&fleet.nodes, uid, &live_members);
        if !seen.is_empty() {
            last_seen.insert(uid.to_string(), seen.clone());
        }
        let cluster = clusters
            .iter()
            .find(|c| c.metadata.uid.as_deref() == Some(uid));
        let deleted_at = match cluster {
            Some(c) => c
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            None if cluster_gone(ctx, &record.spec.cluster).await? => Some(now),
            None => continue,
        };
        // A deleted cluster's members may already be gone: the time up to the deletion is
        // theirs, as last seen.
        let members = match (deleted_at, seen.is_empty()) {
            (Some(_), true) => last_seen.get(uid).cloned().unwrap_or_default(),
            _ => seen,
        };
        let round = Round {
            now,
            members,
            deleted_at,
        };
        advance_record(ctx, api, record, &round).await?;
    }
    Ok(())
}

/// Writes the record's status after `round`, when a minute has passed since it was last
/// advanced or its cluster was deleted.
async fn advance_record(
    ctx: &Context,
    api: &Api<ValkeyMeteringRecord>,
    record: &ValkeyMeteringRecord,
    round: &Round,
) -> Result<(), Error> {
    let status = record.status.clone().unwrap_or_default();
    let accounted = unix_seconds(&status.accounted_until);
    let due = accounted.is_none_or(|at| round.now - at >= ACCOUNT_EVERY_SECONDS);
    if !due && round.deleted_at.is_none() {
        return Ok(());
    }
    let started = unix_seconds(&record.spec.started_at).unwrap_or(round.now);
    let next = advance(&status, started, round);
    ctx.confirm_leading().await?;
    api.patch_status(
        &record.name_any(),
        &PatchParams::apply(METERING_MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1",
            "kind": "ValkeyMeteringRecord",
            "status": next,
        })),
    )
    .await?;
    if round.deleted_at.is_some() {
        info!(record = %record.name_any(), total = %next.total_gb_hours, "cluster deleted: metering record closed, kept until released");
    }
    Ok(())
}

fn released(record: &ValkeyMeteringRecord) -> bool {
    record
        .annotations()
        .get(RELEASE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// One more than the highest sequence of the cluster's records.
fn next_sequence(records: &[Arc<ValkeyMeteringRecord>], uid: &str) -> i64 {
    records
        .iter()
        .filter(|r| r.spec.cluster.uid == uid)
        .map(|r| r.spec.sequence)
        .max()
        .unwrap_or(0)
        + 1
}

/// A new record for `cluster`, starting where [`record_start`] says.
async fn create(
    ctx: &Context,
    api: &Api<ValkeyMeteringRecord>,
    cluster: &ValkeyCluster,
    sequence: i64,
    now: i64,
) -> Result<(), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let created = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let started = record_start(created, sequence, now);
    let record = ValkeyMeteringRecord {
        metadata: ObjectMeta {
            name: Some(record_name(&namespace, &name, &uid, sequence)),
            namespace: Some(ctx.operator_namespace.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_CLUSTER_NAMESPACE.to_string(), namespace.clone()),
                (LABEL_CLUSTER_NAME.to_string(), name.clone()),
                (LABEL_CLUSTER_UID.to_string(), uid.clone()),
            ])),
            finalizers: Some(vec![RETAIN_FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: ValkeyMeteringRecordSpec {
            cluster: MeteredCluster {
                namespace,
                name,
                uid,
            },
            sequence,
            started_at: rfc3339(started),
        },
        status: None,
    };
    ctx.confirm_leading().await?;
    match api.create(&PostParams::default(), &record).await {
        Ok(created) => {
            info!(record = %created.name_any(), "metering record created");
            Ok(())
        }
        // The cache has not seen our own create yet.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A released record: the cluster, if it still exists, gets its next record first (so the
/// sequence carries on), then the finalizer goes and the record is deleted.
async fn release(
    ctx: &Context,
    api: &Api<ValkeyMeteringRecord>,
    record: &ValkeyMeteringRecord,
    clusters: &[Arc<ValkeyCluster>],
    records: &[Arc<ValkeyMeteringRecord>],
) -> Result<(), Error> {
    let uid = record.spec.cluster.uid.as_str();
    let living = clusters.iter().find(|c| {
        c.metadata.uid.as_deref() == Some(uid) && c.metadata.deletion_timestamp.is_none()
    });
    if let Some(cluster) = living {
        let successor = records
            .iter()
            .any(|r| r.spec.cluster.uid == uid && r.spec.sequence > record.spec.sequence);
        if !successor {
            create(
                ctx,
                api,
                cluster,
                next_sequence(records, uid),
                now_seconds(),
            )
            .await?;
        }
    }
    ctx.confirm_leading().await?;
    let name = record.name_any();
    if record.finalizers().iter().any(|f| f == RETAIN_FINALIZER) {
        let remaining: Vec<&String> = record
            .finalizers()
            .iter()
            .filter(|f| *f != RETAIN_FINALIZER)
            .collect();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {
                    "finalizers": remaining,
                    "resourceVersion": record.resource_version(),
                }
            })),
        )
        .await?;
    }
    if record.meta().deletion_timestamp.is_none() {
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    info!(record = %name, "metering record released");
    Ok(())
}

/// Whether a cluster missing from the cache is really gone: a live read (a cache still
/// filling must not close a running cluster's bill).
async fn cluster_gone(ctx: &Context, cluster: &MeteredCluster) -> Result<bool, Error> {
    let api: Api<ValkeyCluster> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let current = api.get_opt(&cluster.name).await?;
    Ok(current.and_then(|c| c.metadata.uid).as_deref() != Some(cluster.uid.as_str()))
}

/// The ValkeyNodes whose pod exists (by the pods' controller owner uids).
fn pod_owners(pods: &Store<Pod>) -> HashSet<String> {
    pods.state()
        .iter()
        .flat_map(|p| p.owner_references().to_vec())
        .filter(|o| o.controller == Some(true))
        .map(|o| o.uid)
        .collect()
}

/// The cluster's members whose pod exists, each by its billable figure.
fn members(
    nodes: &Store<ValkeyNode>,
    cluster_uid: &str,
    with_pod: &HashSet<String>,
) -> Vec<(Source, u64)> {
    nodes
        .state()
        .iter()
        .filter(|n| n.owner_references().iter().any(|o| o.uid == cluster_uid))
        .filter(|n| {
            n.metadata
                .uid
                .as_ref()
                .is_some_and(|u| with_pod.contains(u))
        })
        .map(|n| figure(n))
        .collect()
}

/// A member's billable bytes: reserved memory, else `maxmemory`, else the memory it was last
/// seen using, raised to the floor.
fn figure(node: &ValkeyNode) -> (Source, u64) {
    let reserved = node
        .spec
        .resources
        .memory
        .as_deref()
        .and_then(|m| parse_quantity_bytes(m).ok())
        .map(|b| u64::try_from(b).unwrap_or(u64::MAX));
    let observed = node
        .status
        .as_ref()
        .and_then(|s| s.utilization.as_ref())
        .and_then(|u| u64::try_from(u.memory_used_bytes).ok());
    member_bytes(
        reserved,
        node.spec.valkey.get("maxmemory").map(String::as_str),
        observed,
    )
}
