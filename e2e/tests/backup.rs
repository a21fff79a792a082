//! Backups (issue 29): a ValkeyBackup of a running cluster becomes a Job in the operator's
//! namespace that copies each shard's snapshot (from its replica) into the local cluster's
//! real object store (SeaweedFS's S3 gateway, e2e/addons/object-store.yaml), then a manifest.
//! Checked from the outside: the objects' checksums match the manifest and the status, and each
//! shard's snapshot, loaded by a real valkey-server, holds exactly that shard's keys, values,
//! types and TTLs. Failures name their cause (credentials, bucket, a missing location) and
//! leave no partial backup listed. Real API server, kubelet pods, valkey-server.
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::json;

use valkey_e2e::backups::{
    ACCESS_KEY, BUCKET, LOCAL_LOCATION, SECRET_KEY, backup, bucket, expect_completed, location,
    store_address, wait_final, write_incompressible,
};
use valkey_e2e::harness::{
    TestNamespace, apply_yaml, client, delete_cluster_scoped, random_suffix, wait_for,
};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{
    PRELOADED, Writer, apply, cluster, cluster_client, config, image, preload, preloaded_key,
    reachable_cluster_client,
};
use valkey_operator::api::backup::{
    BackupPhase, ValkeyBackup, ValkeyBackupLocation, ValkeyBackupStatus,
};
use valkey_operator::api::{ClusterState, ValkeyConfig, ValkeyImage};
use valkey_operator::backup::Manifest;
use valkey_operator::driver::testing::ValkeyBuild;

const OPERATOR_NAMESPACE: &str = "valkey-operator-system";

/// Writes `count` keys of four types, a third of them with a TTL; returns each key's type.
async fn write_dataset(
    valkey: &fred::clients::Client,
    count: usize,
) -> anyhow::Result<BTreeMap<String, &'static str>> {
    let mut written = BTreeMap::new();
    for i in 0..count {
        let (key, kind) = match i % 4 {
            0 => {
                let key = format!("str:{i}");
                valkey
                    .set::<(), _, _>(&key, format!("value-{i}"), None, None, false)
                    .await?;
                (key, "string")
            }
            1 => {
                let key = format!("hash:{i}");
                valkey
                    .hset::<(), _, _>(&key, [("field", i.to_string()), ("other", "x".into())])
                    .await?;
                (key, "hash")
            }
            2 => {
                let key = format!("list:{i}");
                valkey.rpush::<(), _, _>(&key, vec!["a", "b", "c"]).await?;
                (key, "list")
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
                        vec![(1.0, "one"), (2.0, "two")],
                    )
                    .await?;
                (key, "zset")
            }
        };
        if i % 3 == 0 {
            valkey.expire::<(), _>(&key, 3600, None).await?;
        }
        written.insert(key, kind);
    }
    Ok(written)
}

/// Loads one shard's snapshot into a fresh, standalone valkey-server and reads it back.
struct Loaded {
    keys: usize,
    types: BTreeMap<String, String>,
    with_ttl: usize,
}

async fn load_snapshot(rdb: &[u8]) -> anyhow::Result<Loaded> {
    // A port nothing listens on now (the kernel's pick for a listener dropped at once).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = std::env::temp_dir().join(format!("vk-backup-load-{}", random_suffix(6)));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("dump.rdb"), rdb)?;
    let binary = ValkeyBuild::V9_0.binary()?;
    let mut server = tokio::process::Command::new(binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(["--logfile", "valkey.log"])
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let config = Config::from_url(&format!("redis://127.0.0.1:{port}"))?;
    let valkey = Builder::from_config(config).build()?;
    let loaded = wait_for(
        "the snapshot loaded",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let valkey = valkey.clone();
            async move {
                if !valkey.is_connected() {
                    valkey.init().await?;
                }
                let _: () = valkey.ping(None).await?;
                let all = fred::types::CustomCommand::new_static(
                    "KEYS",
                    fred::types::ClusterHash::Random,
                    false,
                );
                let keys: Vec<String> = valkey.custom(all, vec!["*"]).await?;
                let mut types = BTreeMap::new();
                let mut with_ttl = 0;
                for key in &keys {
                    let kind: String = valkey.r#type(key).await?;
                    let ttl: i64 = valkey.ttl(key).await?;
                    if ttl > 0 {
                        with_ttl += 1;
                    }
                    types.insert(key.clone(), kind);
                }
                Ok(Some(Loaded {
                    keys: keys.len(),
                    types,
                    with_ttl,
                }))
            }
        },
    )
    .await;
    let _ = valkey.quit().await;
    let _ = server.kill().await;
    let log = std::fs::read_to_string(dir.join("valkey.log")).unwrap_or_default();
    if loaded.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    loaded.with_context(|| format!("valkey-server on {} said:\n{log}", dir.display()))
}

#[tokio::test]
async fn a_cluster_is_backed_up_shard_by_shard_into_the_object_store() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup").await?;
    let suffix = random_suffix(4);
    let (img, cfg) = (
        format!("e2e-bak-{suffix}-img"),
        format!("e2e-bak-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "shop", &cfg, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "shop",
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    let valkey = cluster_client(&client, &ns.name, "shop").await?;
    let mut written = write_dataset(&valkey, 2000).await?;
    preload(&valkey).await?;
    written.extend((0..PRELOADED).map(|i| (preloaded_key(i), "string")));
    let _ = valkey.quit().await;

    // A writer's rate without a backup, then while one runs: its pauses and the ratio.
    let quiet = Writer::start(&client, &ns.name, "shop").await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet = quiet.finish(&client, &ns.name, "shop").await?;
    let quiet_rate = quiet.acknowledged.len() as f64 / 10.0;
    let writer = Writer::start(&client, &ns.name, "shop").await?;
    let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), &ns.name);
    apply_yaml(
        &client,
        &backup(&ns.name, "first", "shop", LOCAL_LOCATION).to_string(),
    )
    .await?;
    let started = std::time::Instant::now();
    let done = wait_final(&backups, "first", Duration::from_secs(180)).await?;
    let took = started.elapsed().as_secs_f64();
    let during = writer.finish(&client, &ns.name, "shop").await?;
    let status = done.status.clone().unwrap_or_default();
    println!(
        "backup of {} keys: {:?} in {took:.1} s (apply to {:?}): {:?}",
        written.len(),
        status.phase,
        status.completed_at,
        status.message
    );
    println!(
        "writer during the backup: {:.0} writes/s vs {quiet_rate:.0} without (ratio {:.2}), longest pause {:?}, {} failed attempts, {} lost",
        during.acknowledged.len() as f64 / took,
        during.acknowledged.len() as f64 / took / quiet_rate,
        during.longest_pause,
        during.failed_attempts,
        during.lost.len()
    );
    ensure!(status.phase == Some(BackupPhase::Completed), "{status:?}");
    ensure!(status.shards.len() == 2, "{:?}", status.shards);
    for shard in &status.shards {
        ensure!(
            shard.role == "replica",
            "copied from a replica where the shard has one: {shard:?}"
        );
    }

    let store = bucket(&client).await?;
    the_bucket_holds_each_shard_as_written(&store, &status, &written).await?;

    // The spec records what was backed up: it cannot change.
    let mut changed = backups.get("first").await?;
    changed.spec.location = "elsewhere".into();
    changed.metadata.managed_fields = None;
    let refused = backups
        .replace("first", &PostParams::default(), &changed)
        .await;
    ensure!(refused.is_err(), "a backup's spec is immutable");

    failures_name_their_cause(&client, &ns.name, &backups, &store).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// The bucket: the manifest, and shards whose checksums match it and the status; each shard's
/// snapshot, loaded by valkey-server, holds exactly the keys written, their types and TTLs.
async fn the_bucket_holds_each_shard_as_written(
    store: &Arc<dyn ObjectStore>,
    status: &ValkeyBackupStatus,
    written: &BTreeMap<String, &'static str>,
) -> anyhow::Result<()> {
    let path = status.path.clone().context("status.path")?;
    let prefix = path
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .context("the path names the bucket")?
        .trim_end_matches('/')
        .to_string();
    let manifest = store
        .get(&Path::from(format!("{prefix}/manifest.json")))
        .await?
        .bytes()
        .await?;
    let manifest: Manifest = serde_json::from_slice(&manifest)?;
    ensure!(manifest.shards.len() == 2 && manifest.cluster.name == "shop");
    let mut restored = BTreeMap::new();
    let mut with_ttl = 0;
    for shard in &manifest.shards {
        let rdb = store
            .get(&Path::from(format!("{prefix}/{}", shard.object)))
            .await?
            .bytes()
            .await?;
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&rdb));
        ensure!(
            sha == shard.sha256,
            "shard {} checksum {sha} vs manifest {}",
            shard.index,
            shard.sha256
        );
        let in_status = status
            .shards
            .iter()
            .find(|s| s.index == shard.index as i32)
            .context("shard in status")?;
        ensure!(in_status.sha256.as_deref() == Some(sha.as_str()));
        ensure!(in_status.keys == shard.keys.map(|k| k as i64));
        ensure!(rdb.len() as u64 == shard.bytes);
        let loaded = load_snapshot(&rdb).await?;
        println!(
            "shard {} ({:?}): {} bytes, {} keys loaded by valkey-server, {} with a TTL",
            shard.index, shard.slots, shard.bytes, loaded.keys, loaded.with_ttl
        );
        ensure!(
            Some(loaded.keys as u64) == shard.keys,
            "shard {} loaded {} keys, manifest says {:?}",
            shard.index,
            loaded.keys,
            shard.keys
        );
        with_ttl += loaded.with_ttl;
        restored.extend(loaded.types);
    }
    for (key, kind) in written {
        ensure!(
            restored.get(key).map(String::as_str) == Some(*kind),
            "{key} ({kind}) restored as {:?}",
            restored.get(key)
        );
    }
    let extra: Vec<_> = restored
        .keys()
        .filter(|k| !written.contains_key(*k) && !k.starts_with("key:"))
        .collect();
    ensure!(extra.is_empty(), "keys nobody wrote: {extra:?}");
    ensure!(
        with_ttl >= 2000 / 3,
        "TTLs are kept: {with_ttl} keys with one"
    );
    Ok(())
}

/// Wrong keys, a bucket that does not exist and a location that does not exist: each backup
/// Failed with a cause a user can act on, the keys nowhere in status or Events, and no manifest
/// in the bucket.
async fn failures_name_their_cause(
    client: &kube::Client,
    ns: &str,
    backups: &Api<ValkeyBackup>,
    store: &Arc<dyn ObjectStore>,
) -> anyhow::Result<()> {
    let suffix = random_suffix(4);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let wrong_secret = format!("e2e-bak-wrong-{suffix}");
    let wrong_key = format!("not-the-key-{suffix}");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": wrong_secret, "namespace": OPERATOR_NAMESPACE},
        "stringData": {"accessKeyId": ACCESS_KEY, "secretAccessKey": wrong_key}}))?;
    secrets.create(&PostParams::default(), &secret).await?;
    let (bad_keys, no_bucket) = (
        format!("e2e-bak-keys-{suffix}"),
        format!("e2e-bak-bucket-{suffix}"),
    );
    apply_yaml(
        client,
        &location(&bad_keys, BUCKET, &wrong_secret).to_string(),
    )
    .await?;
    apply_yaml(
        client,
        &location(
            &no_bucket,
            &format!("missing-{suffix}"),
            "local-backup-keys",
        )
        .to_string(),
    )
    .await?;
    let cases = [
        ("wrong-keys", bad_keys.as_str(), "credentials"),
        ("no-bucket", no_bucket.as_str(), "bucket"),
        ("no-location", "nowhere", "location"),
    ];
    let result = async {
        for (name, location, _) in &cases {
            apply_yaml(client, &backup(ns, name, "shop", location).to_string()).await?;
        }
        for (name, _, cause) in &cases {
            let done = wait_final(backups, name, Duration::from_secs(120)).await?;
            expect_failure(&done, cause, store, &[&wrong_key]).await?;
        }
        let events: Api<Event> = Api::namespaced(client.clone(), ns);
        let events = events.list(&ListParams::default()).await?;
        let failed: Vec<_> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("BackupFailed"))
            .collect();
        ensure!(
            failed.len() >= cases.len(),
            "a BackupFailed Event per failure: {}",
            failed.len()
        );
        for e in &failed {
            let note = e.message.clone().unwrap_or_default();
            ensure!(
                !note.contains(&wrong_key) && !note.contains(SECRET_KEY),
                "a key in an Event: {note}"
            );
        }
        Ok(())
    }
    .await;
    let _ = secrets.delete(&wrong_secret, &Default::default()).await;
    delete_cluster_scoped::<ValkeyBackupLocation>(client, &bad_keys).await?;
    delete_cluster_scoped::<ValkeyBackupLocation>(client, &no_bucket).await?;
    if let Err(e) = result {
        bail!("{e:#}");
    }
    Ok(())
}

/// `spec.backup` every minute with `keep: 2`: after four scheduled backups completed, exactly
/// the two newest remain, as ValkeyBackups and in the bucket.
#[tokio::test]
async fn a_schedule_keeps_its_newest_backups() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup-sched").await?;
    let suffix = random_suffix(4);
    let (img, cfg) = (
        format!("e2e-bks-{suffix}-img"),
        format!("e2e-bks-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    let mut scheduled = cluster(&ns.name, "nightly", &cfg, 1, 0);
    scheduled["spec"]["backup"] =
        json!({"location": LOCAL_LOCATION, "schedule": "* * * * *", "keep": 2});
    apply(&client, &ns.name, scheduled).await?;
    wait_state(
        &client,
        &ns.name,
        "nightly",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let valkey = cluster_client(&client, &ns.name, "nightly").await?;
    write_dataset(&valkey, 200).await?;
    let _ = valkey.quit().await;

    let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), &ns.name);
    let completed = four_scheduled_backups_complete(&backups).await?;
    // No more runs; wait for one that may have started to end.
    let clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::api::ApiResource::erase::<valkey_operator::api::ValkeyCluster>(&()),
    );
    clusters
        .patch(
            "nightly",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"backup": null}})),
        )
        .await?;
    let remaining = wait_for(
        "the last runs ended and retention applied",
        Duration::from_secs(120),
        Duration::from_secs(2),
        || {
            let backups = backups.clone();
            async move {
                let all = backups.list(&ListParams::default()).await?.items;
                let settled = all.iter().all(|b| {
                    b.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(BackupPhase::is_final)
                });
                let done: Vec<_> = all
                    .iter()
                    .filter(|b| {
                        b.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Completed)
                    })
                    .cloned()
                    .collect();
                Ok((settled && done.len() == 2).then_some(done))
            }
        },
    )
    .await?;
    let mut names: Vec<String> = remaining
        .iter()
        .map(|b| b.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    println!("scheduled backups completed: {completed:?}; kept: {names:?}");
    let mut newest: Vec<String> = completed.iter().cloned().collect();
    newest.sort();
    ensure!(
        names == newest[newest.len() - 2..],
        "the two newest are kept: {names:?} of {newest:?}"
    );

    only_the_kept_backups_are_in_the_bucket(&client, &ns.name, &names).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// Waits (7 minutes at most) until four scheduled backups completed, none failing; returns
/// their names.
async fn four_scheduled_backups_complete(
    backups: &Api<ValkeyBackup>,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let mut completed = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(420);
    while completed.len() < 4 {
        ensure!(
            std::time::Instant::now() < deadline,
            "four scheduled backups did not complete within 7 minutes: {completed:?}"
        );
        for b in backups.list(&ListParams::default()).await? {
            let phase = b.status.as_ref().and_then(|s| s.phase);
            let name = b.metadata.name.clone().unwrap_or_default();
            ensure!(
                phase != Some(BackupPhase::Failed),
                "{name} failed: {:?}",
                b.status
            );
            if phase == Some(BackupPhase::Completed) {
                completed.insert(name);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(completed)
}

/// In the bucket: exactly the two kept backups (`names`) have objects, each its manifest.
async fn only_the_kept_backups_are_in_the_bucket(
    client: &kube::Client,
    ns: &str,
    names: &[String],
) -> anyhow::Result<()> {
    let store = bucket(client).await?;
    // Objects, not "folders": a store may keep an emptied prefix listed (SeaweedFS does).
    let objects: Vec<object_store::ObjectMeta> = futures::TryStreamExt::try_collect(
        store.list(Some(&Path::from(format!("backups/{ns}/nightly")))),
    )
    .await?;
    let dirs: std::collections::BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o.location.parts().nth(3).map(|p| p.as_ref().to_string()))
        .collect();
    let dirs: Vec<String> = dirs.into_iter().collect();
    println!("in the bucket: {dirs:?} ({} objects)", objects.len());
    ensure!(dirs.len() == 2, "two backups in the bucket: {dirs:?}");
    for (dir, name) in dirs.iter().zip(names) {
        ensure!(dir.starts_with(&format!("{name}-")), "{dir} is {name}'s");
        store
            .head(&Path::from(format!(
                "backups/{ns}/nightly/{dir}/manifest.json"
            )))
            .await?;
    }
    Ok(())
}

/// The scheduled backups of `cluster` created after `since`, oldest first, once one of them
/// ended.
async fn next_final_run(
    backups: &Api<ValkeyBackup>,
    since: &k8s_openapi::jiff::Timestamp,
    what: &str,
) -> anyhow::Result<ValkeyBackup> {
    wait_for(
        what,
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async move {
            let mut runs: Vec<ValkeyBackup> = backups
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|b| {
                    b.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0 > *since)
                })
                .collect();
            runs.sort_by_key(|b| b.metadata.creation_timestamp.clone().map(|t| t.0));
            Ok(runs.into_iter().next().filter(|b| {
                b.status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .is_some_and(BackupPhase::is_final)
            }))
        },
    )
    .await
}

/// A failed run is followed by a good one once the cause is fixed, for each cause a user meets:
/// a schedule (every minute) whose location names a bucket that does not exist (Failed:
/// bucket; the location fixed, the next run Completed), then whose keys are wrong (Failed:
/// credentials; fixed, Completed), then whose object store goes down in the middle of the
/// upload (Failed: network, nothing left in the bucket; the store back, Completed). No failed
/// run is ever listed as Completed. The store's outage is a proxy in front of it
/// (`valkey_e2e::outage`), so the suites sharing the store are not disturbed.
#[tokio::test]
async fn the_next_run_succeeds_after_a_failure_is_fixed() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup-retry").await?;
    let suffix = random_suffix(4);
    let (img, cfg, name) = (
        format!("e2e-bkr-{suffix}-img"),
        format!("e2e-bkr-{suffix}-cfg"),
        format!("e2e-bkr-{suffix}"),
    );
    let outage = valkey_e2e::outage::Outage::start(store_address(&client).await?).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
        "stringData": {"accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY}}))?;
    secrets.create(&PostParams::default(), &keys).await?;
    let mut flaky = location(&name, &format!("missing-{suffix}"), &name);
    flaky["spec"]["endpoint"] = json!(outage.endpoint());
    apply_yaml(&client, &flaky.to_string()).await?;
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    let result = async {
        let mut scheduled = cluster(&ns.name, "flaky", &cfg, 1, 0);
        scheduled["spec"]["backup"] = json!({"location": name, "schedule": "* * * * *", "keep": 5});
        apply(&client, &ns.name, scheduled).await?;
        wait_state(
            &client,
            &ns.name,
            "flaky",
            ClusterState::Active,
            Duration::from_secs(180),
        )
        .await?;
        write_incompressible(&client, &ns.name, "flaky", 16).await?;
        let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), &ns.name);
        let store = bucket(&client).await?;
        let mut failed = vec![];
        let run = |what: &'static str| {
            let (backups, since) = (backups.clone(), k8s_openapi::jiff::Timestamp::now());
            async move { next_final_run(&backups, &since, what).await }
        };

        let missing = run("a run into a missing bucket").await?;
        expect_failure(&missing, "bucket", &store, &[]).await?;
        flaky["spec"]["bucket"] = json!(BUCKET);
        apply_yaml(&client, &flaky.to_string()).await?;
        expect_completed(&run("a run after the bucket is fixed").await?, &store).await?;
        failed.push(missing);

        let set_key = |key: &str| Patch::Merge(json!({"stringData": {"secretAccessKey": key}}));
        secrets
            .patch(&name, &PatchParams::default(), &set_key("not-the-key"))
            .await?;
        let refused = run("a run with the wrong keys").await?;
        expect_failure(&refused, "credentials", &store, &["not-the-key"]).await?;
        secrets
            .patch(&name, &PatchParams::default(), &set_key(SECRET_KEY))
            .await?;
        expect_completed(&run("a run after the keys are fixed").await?, &store).await?;
        failed.push(refused);

        outage.cut_after(4 << 20);
        let cut = run("a run cut mid-upload").await?;
        ensure!(
            outage.is_down(),
            "the upload never crossed 4 MiB: {:?}",
            cut.status
        );
        expect_failure(&cut, "network", &store, &[]).await?;
        outage.restore();
        expect_completed(&run("a run after the store is back").await?, &store).await?;
        failed.push(cut);
        println!("{} bytes through the proxy in all", outage.forwarded());
        never_completed(&backups, &failed).await
    }
    .await;
    let clusters: Api<valkey_operator::api::ValkeyCluster> =
        Api::namespaced(client.clone(), &ns.name);
    let _ = clusters.delete("flaky", &Default::default()).await;
    let _ = secrets.delete(&name, &Default::default()).await;
    delete_cluster_scoped::<ValkeyBackupLocation>(&client, &name).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    result
}

/// The `failed` runs are never listed as Completed; retention removes them once a later run
/// of the schedule completed (docs/backup.md).
async fn never_completed(
    backups: &Api<ValkeyBackup>,
    failed: &[ValkeyBackup],
) -> anyhow::Result<()> {
    let failed: Vec<String> = failed
        .iter()
        .map(|b| b.metadata.name.clone().unwrap_or_default())
        .collect();
    wait_for(
        "retention to remove the failed runs",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let listed = backups.list(&ListParams::default()).await?.items;
            let mut left = false;
            for b in &listed {
                let name = b.metadata.name.clone().unwrap_or_default();
                let phase = b.status.as_ref().and_then(|s| s.phase);
                ensure!(
                    !(failed.contains(&name) && phase == Some(BackupPhase::Completed)),
                    "{name} failed, then listed as Completed"
                );
                left |= failed.contains(&name);
            }
            Ok((!left).then_some(()))
        },
    )
    .await
}

/// A run that failed for `cause`: said so in status, no key (the store's or one of `keys`) in
/// it, nothing of it in the bucket.
async fn expect_failure(
    run: &ValkeyBackup,
    cause: &str,
    store: &Arc<dyn ObjectStore>,
    keys: &[&str],
) -> anyhow::Result<()> {
    let name = run.metadata.name.clone().unwrap_or_default();
    let status = run.status.clone().unwrap_or_default();
    println!(
        "{name}: {:?} {:?}: {:?}",
        status.phase, status.failure_cause, status.message
    );
    ensure!(
        status.phase == Some(BackupPhase::Failed),
        "{name}: {status:?}"
    );
    ensure!(
        status.failure_cause.as_deref() == Some(cause),
        "{name}: cause {:?}, expected {cause}",
        status.failure_cause
    );
    let text = serde_json::to_string(&status)?;
    ensure!(
        !text.contains(SECRET_KEY) && !keys.iter().any(|k| text.contains(k)),
        "{name}: a key in status"
    );
    if let Some(path) = &status.path {
        let prefix = path
            .trim_start_matches(&format!("s3://{BUCKET}/"))
            .trim_end_matches('/');
        let objects: Vec<object_store::ObjectMeta> =
            futures::TryStreamExt::try_collect(store.list(Some(&Path::from(prefix)))).await?;
        ensure!(
            objects.is_empty(),
            "{name}: a failed backup left {objects:?}"
        );
    }
    Ok(())
}

/// A TLS cluster (cert-manager CA, docs/tls.md's objects) is backed up the same way: the Job
/// verifies each member against the cluster's CA and name, and the snapshots hold the keys.
#[tokio::test]
async fn a_tls_cluster_is_backed_up_over_verified_tls() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-backup-tls").await?;
    let suffix = random_suffix(4);
    let (img, cfg) = (
        format!("e2e-bkt-{suffix}-img"),
        format!("e2e-bkt-{suffix}-cfg"),
    );
    apply(&client, "image", image(&img, "9.1.2")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    valkey_e2e::certs::issue_for_clusters(&client, &ns.name, &["vault"]).await?;
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
    // Through the client Service's name, as an application connects.
    let valkey = reachable_cluster_client(&client, &ns.name, "vault").await?;
    let written = write_dataset(&valkey, 1000).await?;
    let _ = valkey.quit().await;

    let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), &ns.name);
    apply_yaml(
        &client,
        &backup(&ns.name, "sealed", "vault", LOCAL_LOCATION).to_string(),
    )
    .await?;
    let done = wait_final(&backups, "sealed", Duration::from_secs(180)).await?;
    let status = done.status.clone().unwrap_or_default();
    println!("TLS backup: {:?}: {:?}", status.phase, status.message);
    ensure!(status.phase == Some(BackupPhase::Completed), "{status:?}");
    let keys: i64 = status.shards.iter().filter_map(|s| s.keys).sum();
    ensure!(
        keys == written.len() as i64,
        "{keys} keys in the snapshot, {} written",
        written.len()
    );
    ensure!(
        status.shards.iter().all(|s| s.role == "replica"),
        "{:?}",
        status.shards
    );
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
