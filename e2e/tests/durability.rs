//! Durable members (issue 28) on real volumes: a 2 x 1 cluster whose config has `storage`
//! (one PersistentVolumeClaim per member on the local cluster's default class, local-path)
//! and `appendonly yes`. Every member pod is force-deleted at once, under a writer whose
//! writes count once a replica holds them (`WAIT 1`), after 100,000 keys were written and
//! replicated. Every pod comes back on its volume with its node id at a new IP; the operator
//! introduces them again (it does not form a new, empty cluster), and the cluster is Active
//! with every key. Reports the time to Active and the writer's pause and losses.
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, random_suffix, wait_for};
use valkey_e2e::valkey::{
    active_status, member_pods, operator_driver, pod_ready as ready, restart_all_members,
    serving_addrs,
};
use valkey_e2e::workload::{
    Writer, active_cluster_on, apply, config, durable_config, image, missing_confirmed,
    write_confirmed,
};
use valkey_operator::api::constants::LABEL_CLUSTER;
use valkey_operator::api::{
    ClusterNodeStatus, ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode,
};
use valkey_operator::driver::FredDriver;
use valkey_operator::driver::parse::Reply;

const NAME: &str = "durable";
const KEYS: usize = 100_000;

/// Member name -> Valkey node id, as the members' ValkeyNodes record them.
async fn node_ids_of(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let nodes = Api::<ValkeyNode>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={name}")))
        .await?;
    Ok(nodes
        .items
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.status?.node_id?)))
        .collect())
}

/// The volume claims labelled with cluster `name`.
async fn claims_of(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<PersistentVolumeClaim>> {
    Ok(Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={name}")))
        .await?
        .items)
}

/// The cluster's condition `type_`, once it has one.
async fn condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
) -> anyhow::Result<Option<Condition>> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    Ok(c.status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_))
}

/// Deletes cluster `name` (whose volumes are deleted with it: `whenDeleted: Delete`), waits
/// until its claims are gone, then deletes its config and image.
async fn delete_with_its_volumes(
    client: &Client,
    ns: &str,
    name: &str,
    (cfg, img): (&str, &str),
) -> anyhow::Result<()> {
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await?;
    wait_for(
        "the volumes deleted with the cluster",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let left = claims_of(client, ns, name).await?;
            ensure!(left.is_empty(), "{} claim(s) left", left.len());
            Ok(Some(()))
        },
    )
    .await?;
    delete_cluster_scoped::<ValkeyConfig>(client, cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(client, img).await
}

/// Every member pod mounts its own claim at /data, and every claim is Bound.
async fn every_member_on_its_own_bound_claim(client: &Client, ns: &str) -> anyhow::Result<()> {
    let pods = member_pods(client, ns, NAME).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut seen = Vec::new();
    for pod in &pods {
        let claim = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .find(|v| v.name == "data")
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone())
            .with_context(|| {
                format!(
                    "pod {} has no claim at /data",
                    pod.metadata.name.as_deref().unwrap_or_default()
                )
            })?;
        let phase = claims
            .get(&claim)
            .await?
            .status
            .and_then(|s| s.phase)
            .unwrap_or_default();
        ensure!(phase == "Bound", "claim {claim} is {phase}");
        seen.push(claim);
    }
    seen.sort();
    seen.dedup();
    ensure!(
        seen.len() == 4 && pods.len() == 4,
        "4 members on 4 claims: {seen:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_full_restart_with_volumes_comes_back_active_with_every_acknowledged_key()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-durable").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-durable"));
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(&client, "config", durable_config(&cfg, &img)).await?;
    active_cluster_on(&client, &ns.name, NAME, &cfg, (2, 1)).await?;
    every_member_on_its_own_bound_claim(&client, &ns.name).await?;
    let before = node_ids_of(&client, &ns.name, NAME).await?;
    ensure!(before.len() == 4, "4 members with node ids: {before:?}");

    write_confirmed(&client, &ns.name, NAME, "k", KEYS).await?;
    let writer = Writer::start_replicated(&client, &ns.name, NAME).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let active = restart_all_members(&client, &ns.name, NAME, 4).await?;
    println!("full restart with volumes: Active again {active:?} after the pods were deleted");
    let after = node_ids_of(&client, &ns.name, NAME).await?;
    ensure!(
        after == before,
        "members came back under new identities (re-formed?): before {before:?}, after {after:?}"
    );
    every_member_on_its_own_bound_claim(&client, &ns.name).await?;

    let report = writer
        .finish_counting_losses(&client, &ns.name, NAME)
        .await?;
    println!(
        "full restart: writer paused {:?} at most, {} failed attempts, {} of {} acknowledged writes lost",
        report.longest_pause,
        report.failed_attempts,
        report.lost.len(),
        report.acknowledged.len()
    );
    let missing = missing_confirmed(&client, &ns.name, NAME, "k", KEYS).await?;
    println!("full restart: {missing} of {KEYS} replicated keys missing");
    ensure!(
        missing == 0,
        "{missing} of {KEYS} keys lost in the full restart"
    );
    report.nothing_lost()?;

    // whenDeleted defaults to Delete: the volumes go with the cluster.
    delete_with_its_volumes(&client, &ns.name, NAME, (&cfg, &img)).await
}

#[tokio::test]
async fn a_full_restart_without_volumes_says_loudly_which_shards_lost_their_data()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-memonly").await?;
    let s = random_suffix(4);
    let (img, plain, aof) = (
        format!("e2e-{s}-img"),
        format!("e2e-{s}-memory"),
        format!("e2e-{s}-aof"),
    );
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(&client, "config", config(&plain, &img)).await?;
    // `appendonly yes` on emptyDir: the members restart in place, but a new pod has an empty
    // data directory, so they come back empty under new node ids.
    let mut with_aof = config(&aof, &img);
    with_aof["spec"]["valkey"]["appendonly"] = json!("yes");
    apply(&client, "config", with_aof).await?;
    // 100,000 keys on the memory-only cluster: the time to Active compares with the durable
    // full restart's.
    restart_without_volumes(&client, &ns.name, "memonly", &plain, KEYS).await?;
    restart_without_volumes(&client, &ns.name, "aofonly", &aof, 1000).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &plain).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &aof).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// A 2 x 1 cluster `name` on config `cfg` (no storage) with `keys` keys, every member pod
/// force-deleted at once: Active again, every key gone, the `DataLost` condition naming both
/// shards and a Warning Event saying it. The cluster is deleted after.
async fn restart_without_volumes(
    client: &Client,
    ns: &str,
    name: &str,
    cfg: &str,
    keys: usize,
) -> anyhow::Result<()> {
    active_cluster_on(client, ns, name, cfg, (2, 1)).await?;
    write_confirmed(client, ns, name, "k", keys).await?;

    let active = restart_all_members(client, ns, name, 4).await?;
    let missing = missing_confirmed(client, ns, name, "k", keys).await?;
    println!(
        "{name}: full restart without volumes: Active again {active:?} after the pods were deleted, {missing} of {keys} keys gone"
    );
    let lost = condition(client, ns, name, "DataLost")
        .await?
        .context("a DataLost condition")?;
    println!(
        "{name}: DataLost condition: {}: {}",
        lost.reason, lost.message
    );
    ensure!(
        lost.status == "True" && lost.message.starts_with("shard(s) 0, 1 lost their data"),
        "{lost:?}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let warned = events
        .list(&ListParams::default().fields(&format!("reason=DataLost,involvedObject.name={name}")))
        .await?
        .items
        .into_iter()
        .any(|e| e.type_.as_deref() == Some("Warning"));
    ensure!(warned, "a Warning Event with reason DataLost for {name}");
    ensure!(
        missing == keys,
        "{name}: members without volumes kept {} keys?",
        keys - missing
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// The durable config again with `storage` set to `storage`.
fn durable_config_with(name: &str, image: &str, storage: serde_json::Value) -> serde_json::Value {
    let mut config = durable_config(name, image);
    config["spec"]["storage"] = storage;
    config
}

/// Pod uids of cluster `name`'s members, by pod name.
async fn pod_uids(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(member_pods(client, ns, name)
        .await?
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect())
}

/// The primary's pod alone, force-deleted under a writer: it comes back on its volume as the
/// same member with the same node id (it is not replaced), no acknowledged write lost.
async fn the_primary_pod_comes_back_as_the_same_member(
    client: &Client,
    ns: &str,
    name: &str,
    primary_before: &ClusterNodeStatus,
    ids_before: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let writer = Writer::start_replicated(client, ns, name).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let old_uid = pods
        .get(primary_before.pod.as_deref().context("primary pod")?)
        .await?
        .metadata
        .uid;
    pods.delete(
        primary_before.pod.as_deref().unwrap_or_default(),
        &DeleteParams::default().grace_period(0),
    )
    .await?;
    let restarted = Instant::now();
    let back = wait_for(
        "the primary's member back on a new pod, Ready, cluster Active",
        Duration::from_secs(300),
        Duration::from_secs(1),
        || async {
            let status = active_status(client, ns, name, None).await?;
            let pod = pods
                .get(primary_before.pod.as_deref().unwrap_or_default())
                .await?;
            ensure!(
                pod.metadata.uid != old_uid && ready(&pod),
                "the member's new pod is not Ready yet"
            );
            Ok(Some(status))
        },
    )
    .await?;
    let primary_after = back
        .nodes
        .iter()
        .find(|n| n.role == Some(valkey_operator::api::NodeRole::Primary))
        .map(|n| n.name.clone());
    let report = writer.finish_counting_losses(client, ns, name).await?;
    println!(
        "primary pod force-deleted: back Active {:?} later as the same member; primary before {}, after {primary_after:?} ({}); writer paused {:?}, {} of {} acknowledged writes lost",
        restarted.elapsed(),
        primary_before.name,
        if primary_after.as_deref() == Some(primary_before.name.as_str()) {
            "no failover"
        } else {
            "its replica took over"
        },
        report.longest_pause,
        report.lost.len(),
        report.acknowledged.len()
    );
    report.nothing_lost()?;
    let ids_after = node_ids_of(client, ns, name).await?;
    ensure!(
        ids_after == *ids_before,
        "same members, same node ids: before {ids_before:?}, after {ids_after:?}"
    );
    Ok(())
}

/// Growing the volumes on a class that cannot expand (local-path): said in status, nothing
/// rolls.
async fn growing_on_local_path_is_said_and_rolls_nothing(
    client: &Client,
    ns: &str,
    name: &str,
    cfg: &str,
    img: &str,
    ids_before: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let uids = pod_uids(client, ns, name).await?;
    apply(
        client,
        "config",
        durable_config_with(cfg, img, json!({"size": "512Mi"})),
    )
    .await?;
    let sized = wait_for(
        "VolumesSized to say the class cannot expand",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let c = condition(client, ns, name, "VolumesSized").await?;
            match c {
                Some(c) if c.reason == "ExpansionUnsupported" => Ok(Some(c)),
                other => anyhow::bail!("{other:?}"),
            }
        },
    )
    .await?;
    println!(
        "grow 256Mi -> 512Mi on local-path: {}: {}",
        sized.reason, sized.message
    );
    ensure!(
        sized.status == "False" && sized.message.contains("\"local-path\""),
        "{sized:?}"
    );
    ensure!(
        pod_uids(client, ns, name).await? == uids,
        "a storage size change replaced pods"
    );
    ensure!(
        node_ids_of(client, ns, name).await? == *ids_before,
        "a storage size change replaced members"
    );
    Ok(())
}

/// Retain: the claims lose their owner, and outlive the cluster (deleted here). Returns the
/// claims kept.
async fn retained_claims_outlive_the_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    cfg: &str,
    img: &str,
) -> anyhow::Result<Vec<PersistentVolumeClaim>> {
    apply(
        client,
        "config",
        durable_config_with(cfg, img, json!({"size": "512Mi", "whenDeleted": "Retain"})),
    )
    .await?;
    wait_for(
        "the claims unowned (Retain)",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let claims = claims_of(client, ns, name).await?;
            let owned = claims
                .iter()
                .filter(|c| !c.owner_references().is_empty())
                .count();
            ensure!(
                claims.len() == 2 && owned == 0,
                "{owned} of {} claims still owned",
                claims.len()
            );
            Ok(Some(()))
        },
    )
    .await?;
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await?;
    wait_for(
        "the cluster's members gone",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let left = node_ids_of(client, ns, name).await?.len()
                + member_pods(client, ns, name).await?.len();
            ensure!(left == 0, "{left} members or pods left");
            Ok(Some(()))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let kept = claims_of(client, ns, name).await?;
    println!(
        "Retain: {} claim(s) kept after the cluster was deleted",
        kept.len()
    );
    ensure!(kept.len() == 2, "Retain kept {} claims", kept.len());
    Ok(kept)
}

/// A new cluster of the same name never takes the retained volumes (`kept`): its members get
/// new claims, and the retained ones stay as they were.
async fn a_new_cluster_of_the_same_name_takes_no_retained_volume(
    client: &Client,
    ns: &str,
    name: &str,
    cfg: &str,
    kept: &[PersistentVolumeClaim],
) -> anyhow::Result<()> {
    active_cluster_on(client, ns, name, cfg, (1, 1)).await?;
    let kept_names: Vec<String> = kept.iter().map(|c| c.name_any()).collect();
    let mounted: Vec<String> = member_pods(client, ns, name)
        .await?
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| s.volumes.iter().flatten()))
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect();
    println!("same name again: the new members mount {mounted:?}; retained {kept_names:?}");
    ensure!(
        mounted.len() == 2 && mounted.iter().all(|m| !kept_names.contains(m)),
        "the new cluster took a retained volume: mounts {mounted:?}, retained {kept_names:?}"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for old in kept {
        let now = claims.get(&old.name_any()).await?;
        ensure!(
            now.metadata.uid == old.metadata.uid && now.owner_references().is_empty(),
            "retained claim {} was taken over: {:?}",
            old.name_any(),
            now.metadata.owner_references
        );
    }
    Ok(())
}

#[tokio::test]
async fn volumes_follow_the_menu_and_a_member_comes_back_on_its_own() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-volumes").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-vols"));
    let name = "vols";
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(&client, "config", durable_config(&cfg, &img)).await?;
    let active = active_cluster_on(&client, &ns.name, name, &cfg, (1, 1)).await?;
    let primary_before = active
        .status
        .unwrap_or_default()
        .nodes
        .into_iter()
        .find(|n| n.role == Some(valkey_operator::api::NodeRole::Primary))
        .context("a primary")?;
    let ids_before = node_ids_of(&client, &ns.name, name).await?;

    the_primary_pod_comes_back_as_the_same_member(
        &client,
        &ns.name,
        name,
        &primary_before,
        &ids_before,
    )
    .await?;
    // With the append-only file, Valkey restores no replication offset when it starts (only a
    // snapshot written at shutdown carries one), so the replica needs a full resync: reported.
    replica_restarted_on_its_volume(&client, &ns.name, name).await?;

    growing_on_local_path_is_said_and_rolls_nothing(
        &client,
        &ns.name,
        name,
        &cfg,
        &img,
        &ids_before,
    )
    .await?;

    // Shrinking is refused at admission, with the reason.
    let refused = apply(
        &client,
        "config",
        durable_config_with(&cfg, &img, json!({"size": "128Mi"})),
    )
    .await;
    let why = format!("{:#}", refused.err().context("a shrink was accepted")?);
    println!("shrink 512Mi -> 128Mi: {why}");
    ensure!(why.contains("storage.size cannot shrink"), "{why}");

    let kept = retained_claims_outlive_the_cluster(&client, &ns.name, name, &cfg, &img).await?;

    a_new_cluster_of_the_same_name_takes_no_retained_volume(&client, &ns.name, name, &cfg, &kept)
        .await?;
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(name, &DeleteParams::default())
        .await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// `(sync_full, sync_partial_ok)` of a member's INFO stats: the full and partial resyncs it
/// served as a primary.
async fn resyncs_served(driver: &FredDriver, pod: &Pod) -> anyhow::Result<(u64, u64)> {
    let addr = serving_addrs(std::slice::from_ref(pod))
        .pop()
        .with_context(|| format!("pod {} is not running", pod.name_any()))?;
    let args = vec!["INFO".into(), "stats".into()];
    let text = match driver.command(&addr, "INFO", args).await? {
        Reply::Text(text) => text,
        other => anyhow::bail!("INFO stats answered {other:?}"),
    };
    let field = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((field("sync_full"), field("sync_partial_ok")))
}

/// The replica of 1 x 1 cluster `name` deleted as a drain or a rollout deletes a pod (with
/// its grace period): it comes back on its volume as the same member and resyncs with its
/// primary. Reports and returns the full and partial resyncs its primary served for it.
async fn replica_restarted_on_its_volume(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<(u64, u64)> {
    let (_, primary_pod) = primary_of(client, ns, name).await?;
    let pods = member_pods(client, ns, name).await?;
    let primary = pods
        .iter()
        .find(|p| p.name_any() == primary_pod)
        .context("primary pod")?;
    let replica = pods
        .iter()
        .find(|p| p.name_any() != primary_pod)
        .context("replica pod")?;
    let driver = operator_driver(client, ns, name).await?;
    let before = resyncs_served(&driver, primary).await?;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    pod_api
        .delete(&replica.name_any(), &DeleteParams::default())
        .await?;
    let deleted = Instant::now();
    let after = wait_for(
        "the replica back on a new pod, Ready, resynced with its primary",
        Duration::from_secs(300),
        Duration::from_secs(1),
        || async {
            let pod = pod_api.get(&replica.name_any()).await?;
            ensure!(
                pod.metadata.uid != replica.metadata.uid && ready(&pod),
                "the replica's new pod is not Ready yet"
            );
            let now = resyncs_served(&driver, primary).await?;
            ensure!(now != before, "no resync served yet: {now:?}");
            Ok(Some(now))
        },
    )
    .await?;
    let (full, partial) = (after.0 - before.0, after.1 - before.1);
    println!(
        "{name}: replica pod deleted (grace period): back and resynced {:?} later; its primary served {full} full and {partial} partial resync(s)",
        deleted.elapsed()
    );
    Ok((full, partial))
}

/// Every claim of cluster `name` with its requested and provisioned sizes, by claim name.
async fn claim_sizes(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    Ok(claims_of(client, ns, name)
        .await?
        .into_iter()
        .map(|c| {
            let requested = c
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
                .map(|q| q.0.clone())
                .unwrap_or_default();
            let provisioned = c
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref()?.get("storage"))
                .map(|q| q.0.clone())
                .unwrap_or_default();
            (c.name_any(), (requested, provisioned))
        })
        .collect())
}

/// On a class that expands (the local cluster's `expandable`: the upstream external-resizer
/// and the kubelet's online expansion), growing `storage.size` on the menu grows every claim
/// with its pod running: no pod or member replaced, no acknowledged write lost.
#[tokio::test]
async fn volumes_grow_online_on_an_expandable_class() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-grow").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-grow"));
    let name = "grow";
    let storage = |size: &str| json!({"size": size, "storageClassName": "expandable"});
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(
        &client,
        "config",
        durable_config_with(&cfg, &img, storage("1Gi")),
    )
    .await?;
    active_cluster_on(&client, &ns.name, name, &cfg, (1, 1)).await?;
    let before = claim_sizes(&client, &ns.name, name).await?;
    ensure!(
        before.len() == 2 && before.values().all(|(r, p)| r == "1Gi" && p == "1Gi"),
        "2 claims of 1Gi: {before:?}"
    );
    let (uids, ids) = (
        pod_uids(&client, &ns.name, name).await?,
        node_ids_of(&client, &ns.name, name).await?,
    );

    let writer = Writer::start_replicated(&client, &ns.name, name).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    apply(
        &client,
        "config",
        durable_config_with(&cfg, &img, storage("2Gi")),
    )
    .await?;
    let asked = Instant::now();
    let sized = wait_for(
        "every claim grown to 2Gi online and VolumesSized True",
        Duration::from_secs(240),
        Duration::from_secs(1),
        || async {
            let sizes = claim_sizes(&client, &ns.name, name).await?;
            ensure!(
                sizes.len() == 2 && sizes.values().all(|(_, p)| p == "2Gi"),
                "claims (requested, provisioned): {sizes:?}"
            );
            match condition(&client, &ns.name, name, "VolumesSized").await? {
                Some(c) if c.status == "True" => Ok(Some(c)),
                other => anyhow::bail!("claims grown, condition {other:?}"),
            }
        },
    )
    .await?;
    let grown_in = asked.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = writer
        .finish_counting_losses(&client, &ns.name, name)
        .await?;
    println!(
        "grow 1Gi -> 2Gi on StorageClass expandable: every claim 2Gi {grown_in:?} after the menu changed ({}); writer paused {:?} at most, {} failed attempts, {} of {} acknowledged writes lost",
        sized.message,
        report.longest_pause,
        report.failed_attempts,
        report.lost.len(),
        report.acknowledged.len()
    );
    ensure!(
        pod_uids(&client, &ns.name, name).await? == uids,
        "growing the volumes replaced pods"
    );
    ensure!(
        node_ids_of(&client, &ns.name, name).await? == ids,
        "growing the volumes replaced members"
    );
    report.nothing_lost()?;
    delete_with_its_volumes(&client, &ns.name, name, (&cfg, &img)).await
}

/// The member that is its shard's primary in cluster `name`'s status, with its pod.
async fn primary_of(client: &Client, ns: &str, name: &str) -> anyhow::Result<(String, String)> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let primary = c
        .status
        .unwrap_or_default()
        .nodes
        .into_iter()
        .find(|n| n.role == Some(valkey_operator::api::NodeRole::Primary))
        .context("a primary in the status")?;
    Ok((primary.name, primary.pod.context("the primary's pod")?))
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c.iter().map(|c| c.restart_count).sum())
}

/// A durable primary's process killed, by SIGKILL and then by the kernel's OOM killer (a
/// client streaming a value larger than the container's memory limit): each time the kubelet
/// restarts it in its pod, it reloads its append-only file from its volume and stays the same
/// member (same node id); whether its replica took over meanwhile is reported. No key confirmed
/// before and no write acknowledged (`WAIT 1`) meanwhile is lost.
#[tokio::test]
async fn a_durable_primary_killed_or_oom_killed_restarts_on_its_volume() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-durable-kill").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-kill"));
    let name = "killed";
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", durable_config(&cfg, &img)).await?;
    active_cluster_on(&client, &ns.name, name, &cfg, (1, 1)).await?;
    let ids = node_ids_of(&client, &ns.name, name).await?;
    write_confirmed(&client, &ns.name, name, "kill", 10_000).await?;
    let writer = Writer::start_replicated(&client, &ns.name, name).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for how in ["SIGKILL", "OOM kill"] {
        let (primary, pod) = primary_of(&client, &ns.name, name).await?;
        let before = pods.get(&pod).await?;
        let t = Instant::now();
        if how == "SIGKILL" {
            PodRef::find(&ns.name, &pod)?.kill("valkey")?;
        } else {
            let ip = before.status.as_ref().and_then(|s| s.pod_ip.clone());
            valkey_e2e::workload::oversized_set(&ip.context("pod IP")?, 400 << 20).await?;
        }
        let back = wait_for(
            &format!("{how}: {pod} restarted in its pod, the cluster Active with the same members"),
            Duration::from_secs(180),
            Duration::from_millis(500),
            || async {
                let now = pods.get(&pod).await?;
                ensure!(
                    now.metadata.uid == before.metadata.uid,
                    "{pod} was replaced"
                );
                ensure!(
                    restarts(&now) > restarts(&before),
                    "{pod} not restarted yet"
                );
                ensure!(ready(&now), "{pod} not Ready yet");
                let c = Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
                    .get(name)
                    .await?;
                let state = c.status.and_then(|s| s.state);
                ensure!(state == Some(ClusterState::Active), "{state:?}");
                let now_ids = node_ids_of(&client, &ns.name, name).await?;
                ensure!(now_ids == ids, "members changed: {ids:?} -> {now_ids:?}");
                Ok(Some(now))
            },
        )
        .await?;
        let reason = valkey_e2e::real_node::termination(&back, "valkey").map(|(r, _)| r);
        if how == "OOM kill" {
            ensure!(
                reason.as_deref() == Some("OOMKilled"),
                "last termination: {reason:?}"
            );
        }
        let (after, _) = primary_of(&client, &ns.name, name).await?;
        println!(
            "{how} of durable primary {primary} ({reason:?}): back in its pod on its volume, same node id, Active {:?} after; {}",
            t.elapsed(),
            if after == primary {
                "no failover (it is the primary again)".to_string()
            } else {
                format!("its replica {after} took over")
            }
        );
    }
    // Each member's volume in status, with how much of it the append-only file uses.
    let status = Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .get(name)
        .await?
        .status
        .unwrap_or_default();
    let volumes: Vec<Option<String>> = status.nodes.into_iter().map(|n| n.volume).collect();
    println!("status volumes: {volumes:?}");
    ensure!(
        volumes.len() == 2
            && volumes.iter().all(|v| v
                .as_deref()
                .is_some_and(|v| v.contains("(256Mi, append-only file uses "))),
        "each member's volume and its usage in status: {volumes:?}"
    );
    let report = writer
        .finish_counting_losses(&client, &ns.name, name)
        .await?;
    let missing = missing_confirmed(&client, &ns.name, name, "kill", 10_000).await?;
    println!(
        "kills of a durable primary: writer paused {:?} at most, {} of {} acknowledged writes lost, {missing} of 10000 confirmed keys missing",
        report.longest_pause,
        report.lost.len(),
        report.acknowledged.len()
    );
    ensure!(
        missing == 0 && report.lost.is_empty(),
        "the kills lost data"
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete(name, &DeleteParams::default())
        .await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
