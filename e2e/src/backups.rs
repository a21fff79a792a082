//! The local cluster's object store as the backup suites see it: SeaweedFS's S3 gateway (the
//! pod `make up` runs in namespace object-store, e2e/addons/object-store.yaml), its bucket and
//! keys, and the ValkeyBackup and ValkeyBackupLocation objects the suites create.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use fred::prelude::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::json;

use crate::harness::{random_suffix, wait_for};
use crate::workload::cluster_client;
use valkey_operator::api::backup::{BackupPhase, ValkeyBackup};

/// The sample location `make up` creates (manifests/samples/05-backup-location.yaml).
pub const LOCAL_LOCATION: &str = "local";
pub const BUCKET: &str = "valkey-backups";
pub const ACCESS_KEY: &str = "local-backup-key";
pub const SECRET_KEY: &str = "local-backup-secret-0123456789";

/// The object store as the test reaches it: SeaweedFS's pod, from the host.
pub async fn bucket(client: &kube::Client) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let address = store_address(client).await?;
    let store = AmazonS3Builder::new()
        .with_endpoint(format!("http://{address}"))
        .with_allow_http(true)
        .with_bucket_name(BUCKET)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .build()?;
    Ok(Arc::new(store))
}

pub fn backup(ns: &str, name: &str, cluster: &str, location: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyBackup",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"cluster": cluster, "location": location}})
}

pub fn location(name: &str, bucket: &str, secret: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyBackupLocation",
           "metadata": {"name": name},
           "spec": {"endpoint": "http://seaweedfs.object-store.svc.cluster.local:8333",
                    "bucket": bucket, "prefix": "e2e", "credentialsSecret": {"name": secret}}})
}

pub async fn wait_final(
    api: &Api<ValkeyBackup>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<ValkeyBackup> {
    wait_for(
        &format!("backup {name} to end"),
        timeout,
        Duration::from_secs(1),
        || async move {
            let b = api.get(name).await?;
            let phase = b.status.as_ref().and_then(|s| s.phase);
            Ok(phase.is_some_and(BackupPhase::is_final).then_some(b))
        },
    )
    .await
}

/// The object store's address as the host reaches it (SeaweedFS's pod).
pub async fn store_address(client: &kube::Client) -> anyhow::Result<std::net::SocketAddr> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "object-store");
    let pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=seaweedfs"))
        .await?
        .items
        .into_iter()
        .next()
        .context("the SeaweedFS pod (make up runs it in namespace object-store)")?;
    let ip = pod.status.and_then(|s| s.pod_ip).context("its pod IP")?;
    Ok(format!("{ip}:8333").parse()?)
}

/// `mib` MiB that do not compress into a cluster, as keys of 4 KiB (256 per MiB). 16 MiB are
/// two of the backup Job's 8 MiB parts, so a cut after 4 MiB falls inside the upload.
pub async fn write_incompressible(
    client: &kube::Client,
    ns: &str,
    name: &str,
    mib: usize,
) -> anyhow::Result<()> {
    let valkey = cluster_client(client, ns, name).await?;
    for chunk in (0..mib * 256).collect::<Vec<usize>>().chunks(256) {
        let values: Vec<(String, String)> = chunk
            .iter()
            .map(|i| (format!("big:{i}"), random_suffix(4096)))
            .collect();
        futures::future::try_join_all(
            values
                .into_iter()
                .map(|(k, v)| valkey.set::<(), _, _>(k, v, None, None, false)),
        )
        .await?;
    }
    let _ = valkey.quit().await;
    Ok(())
}

/// A run that completed, with its manifest in the bucket.
pub async fn expect_completed(
    run: &ValkeyBackup,
    store: &Arc<dyn ObjectStore>,
) -> anyhow::Result<()> {
    let status = run.status.clone().unwrap_or_default();
    println!(
        "completed: {} {:?}",
        run.metadata.name.clone().unwrap_or_default(),
        status.phase
    );
    ensure!(status.phase == Some(BackupPhase::Completed), "{status:?}");
    let path = status.path.clone().context("a completed backup's path")?;
    let prefix = path.trim_start_matches(&format!("s3://{BUCKET}/"));
    store
        .head(&Path::from(format!(
            "{}/manifest.json",
            prefix.trim_end_matches('/')
        )))
        .await
        .context("the completed backup's manifest")?;
    Ok(())
}
