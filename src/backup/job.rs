//! `valkey-operator backup run`: what a backup Job's pod does. It reads its plan (which
//! members to copy, where to put them) from `BACKUP_PLAN`, its object-store keys and Valkey
//! password from the environment (Secret references in the operator's namespace), copies each
//! shard's snapshot straight into the bucket ([`super::sync`] into a multipart upload), then
//! writes the manifest, the object that makes the backup complete. Its outcome goes to the
//! termination message, where the operator reads it: the Job needs no Kubernetes rights.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use super::sync::{SyncError, fetch_rdb};
use super::{Failure, FailureCause, JobOutcome, JobPlan, Manifest, ShardCopy};

/// Environment variables a backup Job's container gets.
pub const ENV_PLAN: &str = "BACKUP_PLAN";
pub const ENV_ACCESS_KEY: &str = "AWS_ACCESS_KEY_ID";
pub const ENV_SECRET_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const ENV_VALKEY_USER: &str = "VALKEY_USERNAME";
pub const ENV_VALKEY_PASSWORD: &str = "VALKEY_PASSWORD";
/// A PEM bundle of the object store's CA, when the location names one.
pub const ENV_CA_FILE: &str = "BACKUP_CA_FILE";
/// Where the outcome is written (Kubernetes' default termination message path).
pub const ENV_OUTCOME_FILE: &str = "BACKUP_OUTCOME_FILE";
pub const DEFAULT_OUTCOME_FILE: &str = "/dev/termination-log";

/// Parts of at most this size are in flight at a time (two of them): the Job's memory stays
/// a few tens of MiB whatever the shard's size.
const PART_SIZE: usize = 8 * 1024 * 1024;

/// Runs the plan, writes the outcome, and says whether it succeeded.
pub async fn run() -> bool {
    let outcome = match run_plan().await {
        Ok((manifest, summary)) => {
            println!("{}", serde_json::to_string(&manifest).unwrap_or_default());
            JobOutcome::Completed(summary)
        }
        Err(failure) => JobOutcome::Failed(failure),
    };
    let text = outcome.termination_message();
    eprintln!("{text}");
    let file = std::env::var(ENV_OUTCOME_FILE).unwrap_or_else(|_| DEFAULT_OUTCOME_FILE.into());
    if let Err(e) = std::fs::write(&file, &text) {
        eprintln!("could not write the outcome to {file}: {e}");
    }
    matches!(outcome, JobOutcome::Completed(_))
}

pub(crate) fn env(name: &str) -> Result<String, Failure> {
    std::env::var(name).map_err(|_| Failure::new(FailureCause::Plan, format!("{name} is not set")))
}

async fn run_plan() -> Result<(Manifest, super::CopySummary), Failure> {
    let plan: JobPlan = serde_json::from_str(&env(ENV_PLAN)?)
        .map_err(|e| Failure::new(FailureCause::Plan, format!("{ENV_PLAN} is not a plan: {e}")))?;
    let store = object_store(&plan.location)?;
    let user = env(ENV_VALKEY_USER)?;
    let password = env(ENV_VALKEY_PASSWORD)?;
    let started_at = crate::time::rfc3339(crate::time::now_seconds());
    // Before any member is asked for a snapshot: the store answers, takes the keys and has
    // the bucket (a listing is the one request that tells a missing bucket from refused keys).
    store
        .list_with_delimiter(Some(&Path::from(plan.path.as_str())))
        .await
        .map_err(|e| Failure::from_store("checking the bucket", &plan.location.bucket, &e))?;
    let mut shards = Vec::with_capacity(plan.shards.len());
    for shard in &plan.shards {
        match copy_shard_patiently(&store, &plan, shard, &user, &password).await {
            Ok(copy) => shards.push(copy),
            Err(failure) => {
                remove_partial(&store, &plan, &shards).await;
                return Err(failure);
            }
        }
    }
    let manifest = Manifest::new(&plan, started_at, shards);
    let body = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    store
        .put(
            &object_path(&plan.path, super::MANIFEST_OBJECT),
            body.into(),
        )
        .await
        .map_err(|e| Failure::from_store("writing the manifest", &plan.location.bucket, &e))?;
    let mut pruned = Vec::new();
    for prefix in &plan.prune {
        match remove_prefix(&store, prefix).await {
            Ok(count) => {
                eprintln!("pruned {prefix}/ ({count} objects)");
                pruned.push(prefix.clone());
            }
            // Kept for the next backup of the schedule to try again.
            Err(e) => eprintln!("could not prune {prefix}/: {e}"),
        }
    }
    let summary = super::CopySummary {
        pruned,
        ..super::CopySummary::of(&manifest, &plan.shards)
    };
    Ok((manifest, summary))
}

/// Deletes every object below `prefix` (an older backup of the same schedule); the count.
async fn remove_prefix(store: &Arc<dyn ObjectStore>, prefix: &str) -> object_store::Result<usize> {
    use futures::TryStreamExt;
    let objects: Vec<_> = store
        .list(Some(&Path::from(prefix.trim_end_matches('/'))))
        .try_collect()
        .await?;
    for object in &objects {
        store.delete(&object.location).await?;
    }
    Ok(objects.len())
}

pub(crate) fn object_store(
    location: &super::StoreAddress,
) -> Result<Arc<dyn ObjectStore>, Failure> {
    let mut options = ClientOptions::new()
        .with_allow_http(location.endpoint.starts_with("http://"))
        .with_connect_timeout(Duration::from_secs(10));
    if let Ok(file) = std::env::var(ENV_CA_FILE) {
        let pem = std::fs::read(&file).map_err(|e| {
            Failure::new(
                FailureCause::Plan,
                format!("reading the CA bundle {file}: {e}"),
            )
        })?;
        let certificates = object_store::Certificate::from_pem_bundle(&pem).map_err(|e| {
            Failure::new(FailureCause::Plan, format!("the CA bundle is not PEM: {e}"))
        })?;
        for certificate in certificates {
            options = options.with_root_certificate(certificate);
        }
    }
    // A store that is down fails the backup within a minute (the next run retries), instead
    // of object_store's three minutes of retries per request.
    let retry = RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let store = AmazonS3Builder::new()
        .with_endpoint(&location.endpoint)
        .with_bucket_name(&location.bucket)
        .with_region(&location.region)
        .with_access_key_id(env(ENV_ACCESS_KEY)?)
        .with_secret_access_key(env(ENV_SECRET_KEY)?)
        .with_virtual_hosted_style_request(false)
        .with_client_options(options)
        .with_retry(retry)
        .build()
        .map_err(|e| Failure::new(FailureCause::Plan, format!("object store settings: {e}")))?;
    Ok(Arc::new(store))
}

pub(crate) fn object_path(prefix: &str, name: &str) -> Path {
    Path::from(format!("{}/{name}", prefix.trim_end_matches('/')))
}

/// A member drops its replica connections when its role changes (a failover while the backup
/// runs) or restarts, and is gone when its pod is deleted or evicted: such a shard is copied
/// again, from the start, from the shard's next member (the plan's fallbacks, round and
/// round), up to three times in all or once per member if there are more. What the object
/// store refused is final.
async fn copy_shard_patiently(
    store: &Arc<dyn ObjectStore>,
    plan: &JobPlan,
    shard: &super::ShardSource,
    user: &str,
    password: &str,
) -> Result<ShardCopy, Failure> {
    let attempts = 3.max(shard.fallbacks.len() as u32 + 1);
    let mut attempt = 1;
    loop {
        match copy_shard(store, plan, &shard.for_attempt(attempt), user, password).await {
            Err(failure) if failure.cause == FailureCause::Member && attempt < attempts => {
                eprintln!(
                    "shard {} attempt {attempt} of {attempts}: {}",
                    shard.index, failure.message
                );
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            other => return other,
        }
    }
}

async fn copy_shard(
    store: &Arc<dyn ObjectStore>,
    plan: &JobPlan,
    shard: &super::ShardSource,
    user: &str,
    password: &str,
) -> Result<ShardCopy, Failure> {
    let object = super::shard_object(shard.index);
    let path = object_path(&plan.path, &object);
    let conn = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect(&shard.address),
    )
    .await
    .map_err(|_| Failure::member(shard, "connecting timed out after 10s"))?
    .map_err(|e| Failure::member(shard, &format!("connecting: {e}")))?;
    let mut upload =
        BufWriter::with_capacity(store.clone(), path.clone(), PART_SIZE).with_max_concurrency(2);
    let fetched = match &plan.tls {
        None => fetch_rdb(conn, user, password, &mut upload).await,
        Some(tls) => match handshake(tls, conn).await {
            Ok(conn) => fetch_rdb(conn, user, password, &mut upload).await,
            Err(why) => Err(SyncError::Io(std::io::Error::other(why))),
        },
    };
    let fetched = match fetched {
        Ok(fetched) => fetched,
        Err(error) => {
            // Abort the multipart upload: no half object is left behind.
            let _ = upload.abort().await;
            let _ = store.delete(&path).await;
            return Err(match error {
                SyncError::Write(e) => Failure::from_upload(&plan.location.bucket, &e),
                other => Failure::member(shard, &other.to_string()),
            });
        }
    };
    tokio::io::AsyncWriteExt::shutdown(&mut upload)
        .await
        .map_err(|e| Failure::from_upload(&plan.location.bucket, &e))?;
    Ok(ShardCopy::new(shard, object, fetched))
}

/// TLS to a member of a TLS cluster: its CA bundle as the only trust anchors, the cluster's
/// name verified (as the operator's own connections do).
pub async fn handshake(
    tls: &super::MemberTls,
    conn: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let client = crate::driver::tls::TlsClient::new(&crate::driver::TlsSettings {
        ca_pem: tls.ca_pem.clone(),
        server_name: Some(tls.server_name.clone()),
        verify_as_of: None,
    })
    .map_err(|e| format!("the cluster's CA bundle: {e}"))?;
    let name = rustls::pki_types::ServerName::try_from(tls.server_name.clone())
        .map_err(|e| format!("{:?} is not a server name: {e}", tls.server_name))?;
    tokio::time::timeout(
        Duration::from_secs(10),
        tokio_rustls::TlsConnector::from(client.config).connect(name, conn),
    )
    .await
    .map_err(|_| "TLS handshake timed out after 10s".to_string())?
    .map_err(|e| format!("TLS handshake: {e}"))
}

/// Deletes the shard objects a failed backup wrote (without a manifest they are never read;
/// this keeps the bucket from filling up with them).
async fn remove_partial(store: &Arc<dyn ObjectStore>, plan: &JobPlan, done: &[ShardCopy]) {
    for shard in done {
        let _ = store.delete(&object_path(&plan.path, &shard.object)).await;
    }
}
