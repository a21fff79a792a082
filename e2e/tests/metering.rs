//! Usage metering (Momento v0.9, issue 30, MOMENTO-V09.md section 7): one ValkeyMeteringRecord
//! per cluster in the operator's namespace, growing at its members' reserved memory times the
//! time they ran, surviving a plain delete and the cluster's deletion, gone only when
//! released; a release while the cluster runs starts its next record from zero. Real API
//! server, kubelet pods, valkey-server.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{apply, cluster, config, image};
use valkey_operator::api::metering::{LABEL_CLUSTER_UID, RELEASE_ANNOTATION, RETAIN_FINALIZER};
use valkey_operator::api::{
    ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyMeteringRecord,
};
use valkey_operator::time::unix_seconds;

const OPERATOR_NAMESPACE: &str = "valkey-operator-system";
/// `resources.memory: 256Mi` of the e2e config: each member's Reserved figure.
const MEMBER_BYTES: u128 = 256 << 20;

async fn records_of(
    api: &Api<ValkeyMeteringRecord>,
    uid: &str,
) -> anyhow::Result<Vec<ValkeyMeteringRecord>> {
    let mut records = api
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER_UID}={uid}")))
        .await?
        .items;
    records.sort_by_key(|r| r.spec.sequence);
    Ok(records)
}

/// The record's (accountedUntil, exact byte-seconds), once it has been advanced.
fn accounted(record: &ValkeyMeteringRecord) -> Option<(i64, u128)> {
    let status = record.status.as_ref()?;
    Some((
        unix_seconds(&status.accounted_until)?,
        status.total_byte_seconds.parse().ok()?,
    ))
}

/// Waits for the cluster's record of `sequence` to satisfy `done`.
async fn wait_record(
    api: &Api<ValkeyMeteringRecord>,
    uid: &str,
    sequence: i64,
    what: &str,
    timeout: Duration,
    done: impl Fn(&ValkeyMeteringRecord) -> bool,
) -> anyhow::Result<ValkeyMeteringRecord> {
    wait_for(what, timeout, Duration::from_secs(1), || {
        let api = api.clone();
        let uid = uid.to_string();
        let done = &done;
        async move {
            let records = records_of(&api, &uid).await?;
            Ok(records
                .into_iter()
                .find(|r| r.spec.sequence == sequence && done(r)))
        }
    })
    .await
}

/// Waits until the released record `name` is deleted.
async fn released_and_gone(api: &Api<ValkeyMeteringRecord>, name: &str) -> anyhow::Result<()> {
    wait_for(
        "the released record gone",
        Duration::from_secs(30),
        Duration::from_secs(1),
        || async move { Ok(api.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
}

async fn annotate_release(api: &Api<ValkeyMeteringRecord>, name: &str) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {RELEASE_ANNOTATION: "true"}}}));
    api.patch(name, &PatchParams::default(), &patch).await?;
    Ok(())
}

/// A cluster-admin (this suite's user) cannot rewrite a record's usage or spec: the admission
/// webhook refuses, naming the release annotation instead; annotations stay open.
async fn only_the_operator_writes_usage(
    records: &Api<ValkeyMeteringRecord>,
    name: &str,
) -> anyhow::Result<()> {
    let zeroed = Patch::Merge(json!({"status": {"totalGBHours": "0.000000"}}));
    let refused = records
        .patch_status(name, &PatchParams::default(), &zeroed)
        .await;
    let message = match refused {
        Err(kube::Error::Api(e)) => e.message,
        other => bail!("a status rewrite by an admin was not refused: {other:?}"),
    };
    println!("status rewrite refused: {message}");
    ensure!(
        message.contains("written by valkey-operator only") && message.contains(RELEASE_ANNOTATION),
        "{message}"
    );
    let note =
        Patch::Merge(json!({"metadata": {"annotations": {"billing.example.com/team": "shop"}}}));
    records.patch(name, &PatchParams::default(), &note).await?;
    Ok(())
}

#[tokio::test]
async fn a_cluster_is_metered_until_its_record_is_released() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-metering").await?;
    let suffix = valkey_e2e::harness::random_suffix(4);
    let (img, cfg) = (
        format!("e2e-met-{suffix}-img"),
        format!("e2e-met-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "metered", &cfg, 1, 1)).await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let uid = clusters
        .get("metered")
        .await?
        .meta()
        .uid
        .clone()
        .context("cluster uid")?;
    let records: Api<ValkeyMeteringRecord> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);

    let first = first_record_named_and_retained(&records, &uid, &ns.name).await?;

    wait_state(
        &client,
        &ns.name,
        "metered",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let active_at = valkey_operator::time::now_seconds();

    let b2 = usage_grows_with_both_members(&records, &uid, active_at).await?;
    let second = release_starts_the_next_record_from_zero(&records, &uid, &first, b2).await?;
    deleting_the_cluster_closes_the_record(&records, &clusters, &uid, &second).await?;
    the_record_outlives_its_cluster(&records, &clusters, &uid, &second).await?;

    annotate_release(&records, &second.name_any()).await?;
    released_and_gone(&records, &second.name_any()).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// The first record: named after the cluster, kept by the finalizer, usage operator-written.
async fn first_record_named_and_retained(
    records: &Api<ValkeyMeteringRecord>,
    uid: &str,
    ns: &str,
) -> anyhow::Result<ValkeyMeteringRecord> {
    // One record, named after the cluster, retained by the finalizer.
    let first = wait_record(
        records,
        uid,
        1,
        "the first record",
        Duration::from_secs(30),
        |_| true,
    )
    .await?;
    println!("record {} created", first.name_any());
    ensure!(
        first.name_any() == format!("{}.metered.{}.1", ns, &uid.replace('-', "")[..8]),
        "record name {}",
        first.name_any()
    );
    ensure!(first.finalizers().iter().any(|f| f == RETAIN_FINALIZER));
    ensure!(first.spec.cluster.name == "metered" && first.spec.cluster.namespace == ns);
    only_the_operator_writes_usage(records, &first.name_any()).await?;
    Ok(first)
}

/// Two advances grow the first record by 2 x 256 MiB x the seconds between; returns its total.
async fn usage_grows_with_both_members(
    records: &Api<ValkeyMeteringRecord>,
    uid: &str,
    active_at: i64,
) -> anyhow::Result<u128> {
    // Two advances with both members running: the growth is 2 x 256 MiB x the seconds between.
    let before = wait_record(
        records,
        uid,
        1,
        "an advance after Active",
        Duration::from_secs(90),
        |r| accounted(r).is_some_and(|(at, _)| at >= active_at),
    )
    .await?;
    let (t1, b1) = accounted(&before).context("accounted")?;
    let after = wait_record(
        records,
        uid,
        1,
        "the next advance",
        Duration::from_secs(90),
        |r| accounted(r).is_some_and(|(at, _)| at > t1),
    )
    .await?;
    let (t2, b2) = accounted(&after).context("accounted")?;
    let expected = 2 * MEMBER_BYTES * (t2 - t1) as u128;
    let status = after.status.clone().unwrap_or_default();
    println!(
        "metering: {} s between advances, +{} byte-seconds (expected {expected}), total {} GB-hours, days {:?}",
        t2 - t1,
        b2 - b1,
        status.total_gb_hours,
        status.days
    );
    ensure!(
        b2 - b1 == expected,
        "grew by {} byte-seconds, expected {expected}",
        b2 - b1
    );
    ensure!(
        t2 - t1 >= 60,
        "advanced {} s apart (at most once a minute)",
        t2 - t1
    );
    ensure!(status.unit == "GB-hours");
    let today = status.days.last().context("a day")?;
    ensure!(
        today.peak_nodes == 2 && today.by_source.contains_key("Reserved"),
        "{today:?}"
    );
    Ok(b2)
}

/// Releasing the first record starts a second one from zero and deletes the first; returns it.
async fn release_starts_the_next_record_from_zero(
    records: &Api<ValkeyMeteringRecord>,
    uid: &str,
    first: &ValkeyMeteringRecord,
    b2: u128,
) -> anyhow::Result<ValkeyMeteringRecord> {
    // Released while the cluster runs: its next record starts from zero, the first is gone.
    annotate_release(records, &first.name_any()).await?;
    let second = wait_record(
        records,
        uid,
        2,
        "the second record",
        Duration::from_secs(30),
        |_| true,
    )
    .await?;
    released_and_gone(records, &first.name_any()).await?;
    let second_total = accounted(&second).map_or(0, |(_, b)| b);
    ensure!(
        second_total < 2 * MEMBER_BYTES * 30,
        "the second record starts from zero, not from the first one's {b2}: {second_total}"
    );
    Ok(second)
}

/// A plain delete leaves the record terminating; deleting the cluster closes it, usage exact.
async fn deleting_the_cluster_closes_the_record(
    records: &Api<ValkeyMeteringRecord>,
    clusters: &Api<ValkeyCluster>,
    uid: &str,
    second: &ValkeyMeteringRecord,
) -> anyhow::Result<()> {
    // A plain delete leaves it terminating; deleting the cluster closes it; it stays.
    records
        .delete(&second.name_any(), &Default::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let terminating = records.get(&second.name_any()).await?;
    ensure!(
        terminating.meta().deletion_timestamp.is_some(),
        "terminating, kept by the finalizer"
    );
    clusters.delete("metered", &Default::default()).await?;
    let closed = wait_record(
        records,
        uid,
        2,
        "the record closed",
        Duration::from_secs(60),
        |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.cluster_deleted_at.is_some())
        },
    )
    .await?;
    println!(
        "closed: clusterDeletedAt {:?}, {} GB-hours",
        closed
            .status
            .as_ref()
            .and_then(|s| s.cluster_deleted_at.clone()),
        closed
            .status
            .as_ref()
            .map(|s| s.total_gb_hours.clone())
            .unwrap_or_default()
    );
    // Up to the deletion, with the members it had (they may be gone before the closing look).
    let closed_status = closed.status.clone().unwrap_or_default();
    let started = unix_seconds(&closed.spec.started_at).context("startedAt")?;
    let deleted = unix_seconds(
        closed_status
            .cluster_deleted_at
            .as_deref()
            .unwrap_or_default(),
    )
    .context("clusterDeletedAt")?;
    let total: u128 = closed_status.total_byte_seconds.parse()?;
    ensure!(
        deleted > started && total == 2 * MEMBER_BYTES * (deleted - started) as u128,
        "closed with {total} byte-seconds for {} s of two members",
        deleted - started
    );
    Ok(())
}

/// Once the cluster is gone, its closed record stays until released, and no new one comes.
async fn the_record_outlives_its_cluster(
    records: &Api<ValkeyMeteringRecord>,
    clusters: &Api<ValkeyCluster>,
    uid: &str,
    second: &ValkeyMeteringRecord,
) -> anyhow::Result<()> {
    wait_for(
        "the cluster gone",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let clusters = clusters.clone();
            async move {
                match clusters.get_opt("metered").await? {
                    None => Ok(Some(())),
                    Some(_) => bail!("still there"),
                }
            }
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    ensure!(
        records.get_opt(&second.name_any()).await?.is_some(),
        "the record survives its cluster's deletion until released"
    );
    ensure!(
        records_of(records, uid).await?.len() == 1,
        "no new record for a deleted cluster"
    );
    Ok(())
}
