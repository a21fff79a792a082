//! Restores (docs/backup.md, "Restore"), on the local cluster's real object store: a 3-shard
//! cluster with 100,000 keys of mixed types and TTLs is backed up and deleted, then restored
//! into a new cluster in another namespace the backup's location allows; every key's DUMP
//! (type, value, encoding) is the same and every remaining TTL is within the time elapsed.
//! A tenant the location does not list is refused, as is another shard count; a backup that
//! does not exist leaves the new cluster Blocked with no member started. A TLS cluster
//! restores the same way.

#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use fred::prelude::*;
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use valkey_e2e::backups::{BUCKET, backup};
use valkey_e2e::harness::{
    TestNamespace, apply_yaml, client, delete_cluster_scoped, random_suffix, wait_for,
};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{
    apply, cluster, cluster_client, config, image, preload_keys, reachable_cluster_client,
};
use valkey_operator::api::backup::{BackupPhase, ValkeyBackup, ValkeyBackupLocation};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode};

/// The sample location's keys (manifests/samples/05-backup-location.yaml).
const SAMPLE_KEYS_SECRET: &str = "local-backup-keys";

fn location(name: &str, pairs: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyBackupLocation",
           "metadata": {"name": name},
           "spec": {"endpoint": "http://seaweedfs.object-store.svc.cluster.local:8333",
                    "bucket": BUCKET, "prefix": "e2e-restore",
                    "credentialsSecret": {"name": SAMPLE_KEYS_SECRET},
                    "crossNamespaceRestores": pairs}})
}

/// A cluster created from `backup_ns/backup`.
fn restored(
    ns: &str,
    name: &str,
    config: &str,
    shards: i32,
    (backup_ns, backup): (&str, &str),
) -> serde_json::Value {
    let mut object = cluster(ns, name, config, shards, 1);
    object["spec"]["restoreFrom"] = json!({"backup": backup, "namespace": backup_ns});
    object
}

async fn completed_backup(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<ValkeyBackup> {
    let api: Api<ValkeyBackup> = Api::namespaced(client.clone(), ns);
    let done = wait_for(
        &format!("backup {name} to end"),
        Duration::from_secs(240),
        Duration::from_secs(1),
        || async {
            let b = api.get(name).await?;
            let phase = b.status.as_ref().and_then(|s| s.phase);
            Ok(phase.is_some_and(BackupPhase::is_final).then_some(b))
        },
    )
    .await?;
    let status = done.status.clone().unwrap_or_default();
    ensure!(status.phase == Some(BackupPhase::Completed), "{status:?}");
    Ok(done)
}

/// `count` keys of five types (strings, hashes, lists, sets, sorted sets; every 50th a
/// stream), a third of them with a TTL of an hour.
async fn write_mixed(valkey: &fred::clients::Client, count: usize) -> anyhow::Result<Vec<String>> {
    let mut keys = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let written = try_join_all(chunk.iter().map(|&i| write_one(valkey, i))).await?;
        keys.extend(written);
    }
    Ok(keys)
}

async fn write_one(valkey: &fred::clients::Client, i: usize) -> anyhow::Result<String> {
    let key = match (i % 50, i % 5) {
        (0, _) => {
            let key = format!("stream:{i}");
            let _: String = valkey
                .xadd(&key, false, None, "*", vec![("n", i.to_string())])
                .await?;
            key
        }
        (_, 0) => {
            let key = format!("str:{i}");
            valkey
                .set::<(), _, _>(&key, format!("value-{i}"), None, None, false)
                .await?;
            key
        }
        (_, 1) => {
            let key = format!("hash:{i}");
            valkey
                .hset::<(), _, _>(&key, [("field", i.to_string()), ("other", "x".into())])
                .await?;
            key
        }
        (_, 2) => {
            let key = format!("list:{i}");
            valkey.rpush::<(), _, _>(&key, vec!["a", "b", "c"]).await?;
            key
        }
        (_, 3) => {
            let key = format!("set:{i}");
            valkey.sadd::<(), _, _>(&key, vec!["x", "y", "z"]).await?;
            key
        }
        _ => {
            let key = format!("zset:{i}");
            valkey
                .zadd::<(), _, _>(
                    &key,
                    None,
                    None,
                    false,
                    false,
                    vec![(1.0, "one"), (2.5, "two")],
                )
                .await?;
            key
        }
    };
    if i.is_multiple_of(3) {
        valkey.expire::<(), _>(&key, 3600, None).await?;
    }
    Ok(key)
}

/// Every key's DUMP payload and PTTL (ms; -1 without one).
async fn dump_all(
    valkey: &fred::clients::Client,
    keys: &[String],
) -> anyhow::Result<BTreeMap<String, (Option<Vec<u8>>, i64)>> {
    let mut dumped = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let read = try_join_all(chunk.iter().map(|key| async move {
            let payload: Option<Vec<u8>> = valkey.dump(key).await?;
            let ttl: i64 = valkey.pttl(key).await?;
            Ok::<_, anyhow::Error>((key.clone(), (payload, ttl)))
        }))
        .await?;
        dumped.extend(read);
    }
    Ok(dumped)
}

/// The restored keys against the original's: same payload, TTL within the time elapsed.
fn compare(
    before: &BTreeMap<String, (Option<Vec<u8>>, i64)>,
    after: &BTreeMap<String, (Option<Vec<u8>>, i64)>,
    elapsed_ms: i64,
) -> anyhow::Result<usize> {
    let mut with_ttl = 0;
    for (key, (payload, ttl)) in before {
        let (restored, restored_ttl) = after.get(key).context("restored key")?;
        ensure!(payload.is_some(), "{key} existed before the backup");
        ensure!(
            restored == payload,
            "{key}: its DUMP differs after the restore"
        );
        if *ttl < 0 {
            ensure!(
                *restored_ttl == -1,
                "{key}: no TTL before, {restored_ttl} ms after"
            );
        } else {
            with_ttl += 1;
            ensure!(
                *restored_ttl <= *ttl && *restored_ttl >= ttl - elapsed_ms - 2000,
                "{key}: TTL {ttl} ms before, {restored_ttl} ms after {elapsed_ms} ms"
            );
        }
    }
    Ok(with_ttl)
}

async fn refused(
    client: &kube::Client,
    ns: &str,
    object: serde_json::Value,
) -> anyhow::Result<String> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let cluster: ValkeyCluster = serde_json::from_value(object)?;
    match api.create(&Default::default(), &cluster).await {
        Ok(_) => anyhow::bail!("created, expected a refusal"),
        Err(e) => Ok(e.to_string()),
    }
}

#[tokio::test]
async fn a_backup_restores_into_a_new_cluster_in_another_namespace() -> anyhow::Result<()> {
    let client = client().await?;
    let source = TestNamespace::create(&client, "e2e-restore-src").await?;
    let target = TestNamespace::create(&client, "e2e-restore-dst").await?;
    let other = TestNamespace::create(&client, "e2e-restore-other").await?;
    let suffix = random_suffix(4);
    let (img, cfg, loc) = (
        format!("e2e-rst-{suffix}-img"),
        format!("e2e-rst-{suffix}-cfg"),
        format!("e2e-rst-{suffix}"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    let pairs = json!([{"from": source.name, "to": [target.name]}]);
    apply_yaml(&client, &location(&loc, pairs).to_string()).await?;
    let result = restore_round_trip(
        &client,
        (&source.name, &target.name, &other.name),
        &cfg,
        &loc,
    )
    .await;
    delete_cluster_scoped::<ValkeyBackupLocation>(&client, &loc).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    result
}

async fn restore_round_trip(
    client: &kube::Client,
    (source, target, other): (&str, &str, &str),
    cfg: &str,
    loc: &str,
) -> anyhow::Result<()> {
    apply(client, source, cluster(source, "shop", cfg, 3, 1)).await?;
    wait_state(
        client,
        source,
        "shop",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let valkey = cluster_client(client, source, "shop").await?;
    let mut keys = write_mixed(&valkey, 20_000).await?;
    preload_keys(&valkey, 80_000).await?;
    keys.extend((0..80_000).map(valkey_e2e::workload::preloaded_key));
    apply_yaml(
        client,
        &backup(source, "before-move", "shop", loc).to_string(),
    )
    .await?;
    let done = completed_backup(client, source, "before-move").await?;
    let dumped_at = Instant::now();
    let before = dump_all(&valkey, &keys).await?;
    let _ = valkey.quit().await;
    println!(
        "backup of {} keys: {:?}",
        keys.len(),
        done.status.as_ref().and_then(|s| s.message.clone())
    );
    Api::<ValkeyCluster>::namespaced(client.clone(), source)
        .delete("shop", &Default::default())
        .await?;

    another_tenant_and_another_shard_count_are_refused(client, (source, target, other), cfg)
        .await?;
    a_missing_backup_blocks_with_no_member_started(client, (source, target), cfg).await?;

    let started = Instant::now();
    apply(
        client,
        target,
        restored(target, "shop", cfg, 3, (source, "before-move")),
    )
    .await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), target);
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let active = wait_for(
        "the restored cluster Active",
        Duration::from_secs(420),
        Duration::from_millis(500),
        || {
            let clusters = clusters.clone();
            let seen = seen.clone();
            async move {
                let c = clusters.get("shop").await?;
                let state = c.status.as_ref().and_then(|s| s.state);
                if state == Some(ClusterState::Restoring) {
                    seen.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                ensure!(state != Some(ClusterState::Failed), "{:?}", c.status);
                Ok((state == Some(ClusterState::Active)).then_some(c))
            }
        },
    )
    .await?;
    let took = started.elapsed();
    let active_at = Instant::now();
    let seen_restoring = seen.load(std::sync::atomic::Ordering::Relaxed);
    let restore = active
        .status
        .clone()
        .unwrap_or_default()
        .restore
        .context("status.restore")?;
    println!(
        "restore of {} keys: Active {:.1} s after apply (Restoring seen: {seen_restoring}); Job {:?} -> {:?}: {:?}",
        keys.len(),
        took.as_secs_f64(),
        restore.started_at,
        restore.completed_at,
        restore.message
    );
    ensure!(restore.completed(), "{restore:?}");
    ensure!(restore.keys == Some(keys.len() as i64), "{restore:?}");
    ensure!(restore.shards.len() == 3, "{:?}", restore.shards);
    ensure!(restore.from.as_deref() == Some(&*format!("{source}/before-move")));

    let valkey = cluster_client(client, target, "shop").await?;
    let after = dump_all(&valkey, &keys).await?;
    let _ = valkey.quit().await;
    let with_ttl = compare(&before, &after, dumped_at.elapsed().as_millis() as i64)?;
    println!(
        "{} keys identical after the restore ({with_ttl} with a TTL)",
        before.len()
    );

    restore_from_never_changes_and_completion_is_an_event(client, &clusters, source, target)
        .await?;
    restore_user_retired(client, target, "shop", active_at).await
}

/// A restore into an unlisted namespace, or with another shard count, is refused at creation.
async fn another_tenant_and_another_shard_count_are_refused(
    client: &kube::Client,
    (source, target, other): (&str, &str, &str),
    cfg: &str,
) -> anyhow::Result<()> {
    // Another tenant, another shard count: refused when the cluster is created.
    let tenant = refused(
        client,
        other,
        restored(other, "copy", cfg, 3, (source, "before-move")),
    )
    .await?;
    println!("another tenant: {tenant}");
    ensure!(tenant.contains("crossNamespaceRestores"), "{tenant}");
    let count = refused(
        client,
        target,
        restored(target, "copy", cfg, 2, (source, "before-move")),
    )
    .await?;
    println!("another shard count: {count}");
    ensure!(count.contains("holds 3 shard(s)"), "{count}");
    Ok(())
}

/// A restore from a backup that does not exist is admitted, Blocked, and starts no member.
async fn a_missing_backup_blocks_with_no_member_started(
    client: &kube::Client,
    (source, target): (&str, &str),
    cfg: &str,
) -> anyhow::Result<()> {
    // A backup that does not exist: admitted with a warning, Blocked, no member started.
    apply(
        client,
        target,
        restored(target, "early", cfg, 3, (source, "not-yet")),
    )
    .await?;
    wait_state(
        client,
        target,
        "early",
        ClusterState::Blocked,
        Duration::from_secs(60),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let members = Api::<ValkeyNode>::namespaced(client.clone(), target)
        .list(&ListParams::default().labels("valkey.gomomento.com/cluster=early"))
        .await?;
    ensure!(
        members.items.is_empty(),
        "a member started for a backup that does not exist"
    );
    Ok(())
}

/// The restored cluster's `restoreFrom` cannot change, and a RestoreCompleted Event exists.
async fn restore_from_never_changes_and_completion_is_an_event(
    client: &kube::Client,
    clusters: &Api<ValkeyCluster>,
    source: &str,
    target: &str,
) -> anyhow::Result<()> {
    // restoreFrom is chosen at creation and never changes.
    let patch = json!({"spec": {"restoreFrom": {"backup": "other", "namespace": source}}});
    let changed = clusters
        .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    ensure!(changed.is_err(), "restoreFrom changed after creation");
    let events: Api<Event> = Api::namespaced(client.clone(), target);
    let completed = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("RestoreCompleted"));
    ensure!(completed, "a RestoreCompleted Event");
    Ok(())
}

/// Once restored, the restore user leaves the cluster: its ACL file drops `_valkey-restore`
/// and every member loads that file (`AclApplied` True naming its revision).
async fn restore_user_retired(
    client: &kube::Client,
    ns: &str,
    name: &str,
    active_at: Instant,
) -> anyhow::Result<()> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let secret = format!("{name}-acl");
    let revision = wait_for(
        "an ACL file without the restore user",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let data = secrets.get(&secret).await?.data.context("data")?;
            let file = String::from_utf8(data["users.acl"].0.clone())?;
            let revision = valkey_operator::resolve::acl::file_revision(&file).map(String::from);
            Ok(revision.filter(|_| !file.contains("_valkey-restore")))
        },
    )
    .await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("every member to load ACL revision {revision}"),
        Duration::from_secs(150),
        Duration::from_secs(1),
        || async {
            let c = clusters.get(name).await?;
            let applied = c
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .any(|c| {
                    c.type_ == "AclApplied" && c.status == "True" && c.message.contains(&revision)
                });
            Ok(applied.then_some(()))
        },
    )
    .await?;
    println!(
        "the restore user left every member (ACL revision {revision}) within {:.1} s of Active",
        active_at.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A TLS cluster restores the same way: the Job verifies the new cluster's members against
/// its own CA and name.
#[tokio::test]
async fn a_tls_cluster_restores_over_verified_tls() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-restore-tls").await?;
    let suffix = random_suffix(4);
    let (img, cfg) = (
        format!("e2e-rtl-{suffix}-img"),
        format!("e2e-rtl-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    valkey_e2e::certs::issue_for_clusters(&client, &ns.name, &["vault", "copy"]).await?;
    let mut tls = cluster(&ns.name, "vault", &cfg, 1, 1);
    tls["spec"]["tls"] = json!({"secretRef": "vault-tls"});
    apply(&client, &ns.name, tls).await?;
    wait_state(
        &client,
        &ns.name,
        "vault",
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    let valkey = reachable_cluster_client(&client, &ns.name, "vault").await?;
    let keys = write_mixed(&valkey, 1000).await?;
    apply_yaml(
        &client,
        &backup(&ns.name, "sealed", "vault", "local").to_string(),
    )
    .await?;
    completed_backup(&client, &ns.name, "sealed").await?;
    let dumped_at = Instant::now();
    let before = dump_all(&valkey, &keys).await?;
    let _ = valkey.quit().await;

    let mut copy = cluster(&ns.name, "copy", &cfg, 1, 1);
    copy["spec"]["tls"] = json!({"secretRef": "copy-tls"});
    copy["spec"]["restoreFrom"] = json!({"backup": "sealed"});
    apply(&client, &ns.name, copy).await?;
    wait_state(
        &client,
        &ns.name,
        "copy",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let valkey = reachable_cluster_client(&client, &ns.name, "copy").await?;
    let after = dump_all(&valkey, &keys).await?;
    let _ = valkey.quit().await;
    let with_ttl = compare(&before, &after, dumped_at.elapsed().as_millis() as i64)?;
    println!(
        "TLS restore: {} keys identical ({with_ttl} with a TTL)",
        before.len()
    );
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
