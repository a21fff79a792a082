//! A product team's workload for the topology suites: menu objects (image, config, cluster)
//! applied with server-side apply, and a continuous writer that records every acknowledged
//! write and verifies them all at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fred::prelude::*;
use futures::future::try_join_all;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::valkey::member_pods;
use fred::types::config::{Server, TlsConfig, TlsConnector, TlsHostMapping, UnresponsiveConfig};
use valkey_operator::api::{ValkeyCluster, ValkeyConfig, ValkeyImage};
use valkey_operator::controller::names;
use valkey_operator::driver::TlsSettings;
use valkey_operator::driver::tls::TlsClient;

/// Keys [`preload`] writes.
pub const PRELOADED: usize = 100_000;

/// Password of the `app` user every workload cluster binds.
pub const PASSWORD: &str = "e2e-rollout-password";

pub async fn apply(client: &Client, api_path: &str, obj: serde_json::Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .context("name")?
        .to_string();
    match api_path {
        "image" => {
            Api::<ValkeyImage>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
        "config" => {
            Api::<ValkeyConfig>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
        ns => {
            Api::<ValkeyCluster>::namespaced(client.clone(), ns)
                .patch(
                    &name,
                    &PatchParams::apply("e2e").force(),
                    &Patch::Apply(&obj),
                )
                .await?;
        }
    }
    Ok(())
}

pub fn image(name: &str, tag: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyImage", "metadata": {"name": name},
           "spec": {"repository": "valkey/valkey", "tag": tag, "version": tag}})
}

/// The Valkey settings of every config [`config`] publishes (the menu the suites and vk-bench
/// run on). `repl-diskless-sync-delay 0`: a new replica's full sync starts at once instead of
/// after Valkey's default 5 s wait for more replicas to share it (also the operator's default
/// since the formation bench showed the wait; set here too, so the floors run with it).
pub const MENU_SETTINGS: &[(&str, &str)] = &[("repl-diskless-sync-delay", "0")];

pub fn config(name: &str, image: &str) -> serde_json::Value {
    let settings: serde_json::Map<String, serde_json::Value> = MENU_SETTINGS
        .iter()
        .map(|(key, value)| (key.to_string(), json!(value)))
        .collect();
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig", "metadata": {"name": name},
           "spec": {"imageRef": image, "resources": {"cpu": "100m", "memory": "256Mi"},
                    "valkey": settings}})
}

/// A config on `image` whose members keep their data: a 256Mi volume each (`storage`) and
/// the append-only file fsynced every second (`appendonly yes`, `appendfsync everysec`).
pub fn durable_config(name: &str, image: &str) -> serde_json::Value {
    let mut config = config(name, image);
    config["spec"]["valkey"]["appendonly"] = json!("yes");
    config["spec"]["valkey"]["appendfsync"] = json!("everysec");
    config["spec"]["storage"] = json!({"size": "256Mi"});
    config
}

/// A ValkeyCluster `name` in `ns` on `config` with `shards` shards of `replicas` replicas
/// each, and one ACL user `app` (password [`PASSWORD`]) with read-write access to every key.
pub fn cluster(
    ns: &str,
    name: &str,
    config: &str,
    shards: i32,
    replicas: i32,
) -> serde_json::Value {
    cluster_with_password(ns, name, config, shards, replicas, PASSWORD)
}

/// [`cluster`], with `password` for the `app` user instead of [`PASSWORD`].
pub fn cluster_with_password(
    ns: &str,
    name: &str,
    config: &str,
    shards: i32,
    replicas: i32,
    password: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configRef": config, "shards": shards, "replicasPerShard": replicas,
                 "acl": [{"username": "app", "passwordHashes": [hex::encode(Sha256::digest(password))],
                          "permissions": [{"roleRef": "cache-readwrite", "keys": [{"pattern": "*", "access": "readwrite"}]}]}]},
    })
}

/// Writes `key:<n>` continuously through a cluster client, retrying each write until it is
/// acknowledged; records acknowledged writes, failed attempts and the longest pause between
/// two acknowledgements.
pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<WriterReport>>,
}

#[derive(Debug, Default)]
pub struct WriterReport {
    pub acknowledged: BTreeMap<String, String>,
    pub failed_attempts: u64,
    pub longest_pause: Duration,
    /// Acknowledged writes that did not read back with their value.
    pub lost: Vec<String>,
    /// Per shard, as the slots were split when writing started ("slots a-b on primary
    /// host:port"): the longest any single write there took to be acknowledged, retries
    /// included.
    pub longest_write_per_primary: Vec<(String, Duration)>,
}

impl WriterReport {
    /// Fails naming (up to ten of) the acknowledged writes found missing.
    pub fn nothing_lost(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.lost.is_empty(),
            "acknowledged writes lost: {:?}",
            &self.lost[..self.lost.len().min(10)]
        );
        Ok(())
    }
}

/// [`cluster_client`], tried for a minute: a TLS cluster's client Service can lag its Active
/// by a moment (its endpoints; first tries were refused), and right after a member was lost
/// the slot map can still name it with the unknown endpoint `?` until it is forgotten.
pub async fn reachable_cluster_client(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<fred::clients::Client> {
    crate::harness::wait_for(
        &format!("a client connection to {ns}/{name}"),
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async { Ok(Some(cluster_client(client, ns, name).await?)) },
    )
    .await
}

/// A cluster client of ValkeyCluster `name` as the product team's app uses one (user `app`).
/// Plaintext clusters: seeded with the serving members' IPs. TLS clusters: TLS only, seeded
/// with the client Service's name, trusting the CA bundle of the cluster's Secret and verifying
/// every member by the hostname it announces (MOVED points there), names resolved through the
/// cluster DNS as in a pod.
pub async fn cluster_client(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<fred::clients::Client> {
    let cluster = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let ca = match &cluster.spec.tls {
        Some(tls) => Some(crate::certs::secret_pem(client, ns, &tls.secret_ref, "ca.crt").await?),
        None => None,
    };
    cluster_client_trusting(client, ns, name, ca.as_deref()).await
}

/// [`cluster_client`] with TLS trusting `ca` (PEM bundle), or plaintext with `None`.
pub async fn cluster_client_trusting(
    client: &Client,
    ns: &str,
    name: &str,
    ca: Option<&[u8]>,
) -> anyhow::Result<fred::clients::Client> {
    let (hosts, tls) = match ca {
        None => (
            crate::valkey::serving_addrs(&member_pods(client, ns, name).await?)
                .into_iter()
                .map(|a| Server::new(a.host, a.port))
                .collect(),
            None,
        ),
        Some(ca) => {
            let tls = TlsClient::new(&TlsSettings {
                ca_pem: String::from_utf8(ca.to_vec())?,
                server_name: None,
                verify_as_of: None,
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            (
                vec![Server::new(names::cluster_hostname(name, ns), 6379)],
                Some(TlsConfig {
                    connector: TlsConnector::from((*tls.config).clone()),
                    hostnames: TlsHostMapping::None,
                }),
            )
        }
    };
    let config = Config {
        server: ServerConfig::Clustered {
            hosts,
            policy: Default::default(),
        },
        username: Some("app".into()),
        password: Some(PASSWORD.into()),
        tls,
        ..Default::default()
    };
    let valkey = application_client(config)?;
    valkey
        .set_resolver(Arc::new(crate::dns::ClusterDnsResolver))
        .await;
    valkey.init().await?;
    Ok(valkey)
}

/// A fred client for `config` set up as an application's should be: short timeouts, redirects
/// followed, a connection that stops answering dropped (a member whose node froze or vanished
/// can leave its TCP connections open) and the cluster's slots asked again, so the client
/// follows Valkey's failover; reconnecting for ever.
pub fn application_client(config: Config) -> anyhow::Result<fred::clients::Client> {
    Ok(Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.internal_command_timeout = Duration::from_secs(2);
            c.max_redirections = 10;
            c.unresponsive = UnresponsiveConfig {
                max_timeout: Some(Duration::from_secs(4)),
                interval: Duration::from_secs(1),
            };
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build()?)
}

/// `WAIT 1 <ms>` on the primary of `slot` (the connection the write went over): how many
/// replicas hold this client's writes so far.
async fn replicas_acknowledging(valkey: &fred::clients::Client, slot: u16) -> FredResult<i64> {
    let wait =
        fred::types::CustomCommand::new("WAIT", fred::types::ClusterHash::Custom(slot), false);
    valkey.custom(wait, vec![1, 1000]).await
}

impl Writer {
    /// A writer whose writes count as acknowledged once the primary answered.
    pub async fn start(client: &Client, ns: &str, name: &str) -> anyhow::Result<Writer> {
        Self::start_with(client, ns, name, false).await
    }

    /// A writer whose writes count as acknowledged once a replica holds them too (`WAIT 1`
    /// after each write, as an application needing durability across a primary's loss does);
    /// a write no replica confirmed is retried.
    pub async fn start_replicated(client: &Client, ns: &str, name: &str) -> anyhow::Result<Writer> {
        Self::start_with(client, ns, name, true).await
    }

    async fn start_with(
        client: &Client,
        ns: &str,
        name: &str,
        replicated: bool,
    ) -> anyhow::Result<Writer> {
        let mut valkey = cluster_client(client, ns, name).await?;
        let (client, ns, name) = (client.clone(), ns.to_string(), name.to_string());
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let mut report = WriterReport::default();
            // Shards as the client routes them now: who is primary of which slots.
            let shards: Vec<(u16, u16, String)> = valkey
                .cached_cluster_state()
                .map(|routing| {
                    routing
                        .slots()
                        .iter()
                        .map(|r| {
                            (
                                r.start,
                                r.end,
                                format!("{}:{}", r.primary.host, r.primary.port),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            report.longest_write_per_primary = shards
                .iter()
                .map(|(a, b, p)| (format!("slots {a}-{b} on primary {p}"), Duration::ZERO))
                .collect();
            let mut last_ack = Instant::now();
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let (key, value) = (format!("key:{n}"), format!("value-{n}"));
                let mut failures = 0;
                let begun = Instant::now();
                let slot = fred::util::redis_keyslot(key.as_bytes());
                loop {
                    let written = match valkey
                        .set::<(), _, _>(&key, &value, None, None, false)
                        .await
                    {
                        Ok(()) if replicated => match replicas_acknowledging(&valkey, slot).await {
                            Ok(n) if n >= 1 => Ok(()),
                            Ok(_) => Err("no replica acknowledged it".to_string()),
                            Err(e) => Err(format!("WAIT: {e}")),
                        },
                        Ok(()) => Ok(()),
                        Err(e) => Err(e.to_string()),
                    };
                    match written {
                        Ok(()) => break,
                        Err(why) => {
                            report.failed_attempts += 1;
                            failures += 1;
                            if last_ack.elapsed() > Duration::from_secs(120) {
                                bail!(
                                    "writes stalled for 2 minutes ({} writes acknowledged \
                                     before): {key} (slot {slot}) failed {failures} time(s), \
                                     last: {why}",
                                    report.acknowledged.len()
                                );
                            }
                            // What an application does when its client gives up: connect again
                            // (through the client Service's name with TLS; plaintext clients
                            // are seeded with the members' current IPs).
                            if failures % 5 == 0
                                && let Ok(fresh) = cluster_client(&client, &ns, &name).await
                            {
                                let _ = valkey.quit().await;
                                valkey = fresh;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                report.longest_pause = report.longest_pause.max(last_ack.elapsed());
                last_ack = Instant::now();
                if let Some(i) = shards
                    .iter()
                    .position(|(a, b, _)| (*a..=*b).contains(&slot))
                {
                    let longest = &mut report.longest_write_per_primary[i].1;
                    *longest = (*longest).max(begun.elapsed());
                }
                report.acknowledged.insert(key, value);
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(report)
        });
        Ok(Writer { stop, task })
    }

    /// Stops writing and reads every acknowledged write back through a fresh client;
    /// fails if any is lost.
    pub async fn finish(
        self,
        client: &Client,
        ns: &str,
        name: &str,
    ) -> anyhow::Result<WriterReport> {
        let report = self.finish_counting_losses(client, ns, name).await?;
        report.nothing_lost()?;
        Ok(report)
    }

    /// Stops writing and reads every acknowledged write back, reporting what was lost (for
    /// faults where Valkey's asynchronous replication may lose the last writes).
    pub async fn finish_counting_losses(
        self,
        client: &Client,
        ns: &str,
        name: &str,
    ) -> anyhow::Result<WriterReport> {
        self.stop.store(true, Ordering::Relaxed);
        let mut report = self.task.await??;
        let valkey = reachable_cluster_client(client, ns, name).await?;
        for (key, value) in &report.acknowledged {
            let got = read_back(&valkey, key.clone()).await?;
            if got.as_deref() != Some(value.as_str()) {
                report.lost.push(key.clone());
            }
        }
        let _ = valkey.quit().await;
        println!(
            "writer: {} acknowledged writes, {} failed attempts, longest pause {:?}, {} lost; longest write per primary: {}",
            report.acknowledged.len(),
            report.failed_attempts,
            report.longest_pause,
            report.lost.len(),
            report
                .longest_write_per_primary
                .iter()
                .map(|(p, d)| format!("{p}: {d:?}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        assert!(report.acknowledged.len() > 10, "the writer made progress");
        Ok(report)
    }
}

/// The `i`th key [`preload`] writes: `pre:<i>` (its value is `v<i>`).
pub fn preloaded_key(i: usize) -> String {
    format!("pre:{i}")
}

/// Writes `pre:<i>` = `v<i>` for i in 0..PRELOADED through a cluster client.
pub async fn preload(valkey: &fred::clients::Client) -> anyhow::Result<()> {
    preload_keys(valkey, PRELOADED).await
}

/// Writes `pre:<i>` = `v<i>` for i in 0..count through a cluster client (the keys of
/// [`preload`], in any number).
pub async fn preload_keys(valkey: &fred::clients::Client, count: usize) -> anyhow::Result<()> {
    for chunk in (0..count).collect::<Vec<_>>().chunks(2000) {
        try_join_all(chunk.iter().map(|i| {
            valkey.set::<(), _, _>(preloaded_key(*i), format!("v{i}"), None, None, false)
        }))
        .await?;
    }
    Ok(())
}

/// How many preloaded keys do not read back with their value.
pub async fn verify_preloaded(valkey: &fred::clients::Client) -> anyhow::Result<usize> {
    let mut missing = 0;
    for chunk in (0..PRELOADED).collect::<Vec<_>>().chunks(2000) {
        let got: Vec<Option<String>> = try_join_all(
            chunk
                .iter()
                .map(|i| valkey.get::<Option<String>, _>(preloaded_key(*i))),
        )
        .await?;
        missing += chunk
            .iter()
            .zip(got)
            .filter(|(i, v)| v.as_deref() != Some(format!("v{i}").as_str()))
            .count();
    }
    Ok(missing)
}

/// A ValkeyImage and a ValkeyConfig running it, with names of their own, published for one
/// test or benchmark run.
pub struct Menu {
    pub image: String,
    pub config: String,
}

impl Menu {
    /// Publishes `<prefix>-<random>-img` (valkey `tag`) and `<prefix>-<random>-cfg`.
    pub async fn publish(client: &Client, prefix: &str, tag: &str) -> anyhow::Result<Menu> {
        Self::publish_as(client, prefix, tag, "cfg", config).await
    }

    /// Publishes `<prefix>-<random>-img` (valkey `tag`) and `<prefix>-<random>-durable`, a
    /// [`durable_config`] on it (members keep their data on volumes).
    pub async fn publish_durable(client: &Client, prefix: &str, tag: &str) -> anyhow::Result<Menu> {
        Self::publish_as(client, prefix, tag, "durable", durable_config).await
    }

    /// Publishes `<prefix>-<random>-img` (valkey `tag`) and `<prefix>-<random>-<kind>`, the
    /// config `make` gives for that name and image.
    async fn publish_as(
        client: &Client,
        prefix: &str,
        tag: &str,
        kind: &str,
        make: fn(&str, &str) -> serde_json::Value,
    ) -> anyhow::Result<Menu> {
        let s = crate::harness::random_suffix(4);
        let menu = Menu {
            image: format!("{prefix}-{s}-img"),
            config: format!("{prefix}-{s}-{kind}"),
        };
        apply(client, "image", image(&menu.image, tag)).await?;
        apply(client, "config", make(&menu.config, &menu.image)).await?;
        Ok(menu)
    }

    /// Repoints the image to another valkey `tag` (every cluster using it rolls).
    pub async fn repoint(&self, client: &Client, tag: &str) -> anyhow::Result<()> {
        apply(client, "image", image(&self.image, tag)).await
    }

    pub async fn remove(self, client: &Client) -> anyhow::Result<()> {
        crate::harness::delete_cluster_scoped::<ValkeyConfig>(client, &self.config).await?;
        crate::harness::delete_cluster_scoped::<ValkeyImage>(client, &self.image).await
    }
}

/// A fresh menu on valkey `tag` (see [`Menu::publish`]) and a `shards` x `replicas`
/// ValkeyCluster `name` in `ns` running it, Active. The caller removes the menu.
pub async fn active_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    tag: &str,
    shape: (i32, i32),
) -> anyhow::Result<Menu> {
    let menu = Menu::publish(client, &format!("e2e-{name}"), tag).await?;
    active_cluster_on(client, ns, name, &menu.config, shape).await?;
    Ok(menu)
}

/// A `shards` x `replicas` ValkeyCluster `name` in `ns` on ValkeyConfig `config`, once it is
/// Active (within 300 s).
pub async fn active_cluster_on(
    client: &Client,
    ns: &str,
    name: &str,
    config: &str,
    (shards, replicas): (i32, i32),
) -> anyhow::Result<valkey_operator::api::ValkeyCluster> {
    apply(client, ns, cluster(ns, name, config, shards, replicas)).await?;
    crate::valkey::wait_state(
        client,
        ns,
        name,
        valkey_operator::api::ClusterState::Active,
        Duration::from_secs(300),
    )
    .await
}

/// Writes `<prefix>:<i>` = `<i>` for i < `count` through a cluster client, then waits until
/// every replica's replication offset equals its primary's: every key is on two members.
pub async fn write_confirmed(
    client: &Client,
    ns: &str,
    name: &str,
    prefix: &str,
    count: usize,
) -> anyhow::Result<()> {
    let valkey = cluster_client(client, ns, name).await?;
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        try_join_all(chunk.iter().map(|i| {
            valkey.set::<(), _, _>(format!("{prefix}:{i}"), i.to_string(), None, None, false)
        }))
        .await?;
    }
    let _ = valkey.quit().await;
    let driver = crate::valkey::operator_driver(client, ns, name).await?;
    let addrs = crate::valkey::serving_addrs(&crate::valkey::member_pods(client, ns, name).await?);
    // Each primary's offset once the keys are written: a replica at or past it has them all,
    // whatever else (a concurrent writer, pings) came after.
    use valkey_operator::driver::ClusterDriver;
    use valkey_operator::driver::parse::Role;
    let mut targets = Vec::new();
    for addr in &addrs {
        let r = driver.observe(addr).await?.replication;
        if r.role == Role::Primary && !r.connected_replicas.is_empty() {
            targets.push((addr.clone(), r.repl_offset));
        }
    }
    crate::harness::wait_for(
        "every replica to hold every key",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let (driver, targets) = (&driver, &targets);
            async move {
                for (addr, target) in targets {
                    let r = driver.observe(addr).await?.replication;
                    if r.connected_replicas.iter().any(|c| c.offset < *target) {
                        anyhow::bail!(
                            "{addr}: replicas {:?} short of offset {target}",
                            r.connected_replicas
                        );
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await
}

/// GET `key`, retrying a failed read a few times: on a busy 2-core machine a read right after
/// a heal can time out (the client's 2 s), which says nothing about the key. A key that reads
/// back as absent is returned as such at once.
async fn read_back(valkey: &fred::clients::Client, key: String) -> anyhow::Result<Option<String>> {
    let mut attempt = 0;
    loop {
        match valkey.get::<Option<String>, _>(&key).await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 5 => {
                attempt += 1;
                tracing::debug!(key, error = %e, "read back failed; retrying");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("reading back {key}"))),
        }
    }
}

/// How many of the keys [`write_confirmed`] wrote do not read back.
pub async fn missing_confirmed(
    client: &Client,
    ns: &str,
    name: &str,
    prefix: &str,
    count: usize,
) -> anyhow::Result<usize> {
    let written: Vec<u64> = (0..count as u64).collect();
    missing_of(client, ns, name, prefix, &written).await
}

/// How many of `<prefix>:<i>` = `<i>`, for each `i` of `written`, do not read back.
pub async fn missing_of(
    client: &Client,
    ns: &str,
    name: &str,
    prefix: &str,
    written: &[u64],
) -> anyhow::Result<usize> {
    let valkey = reachable_cluster_client(client, ns, name).await?;
    let mut missing = 0;
    for chunk in written.chunks(500) {
        let got: Vec<Option<String>> = try_join_all(
            chunk
                .iter()
                .map(|i| read_back(&valkey, format!("{prefix}:{i}"))),
        )
        .await?;
        missing += chunk
            .iter()
            .zip(got)
            .filter(|(i, v)| v.as_deref() != Some(i.to_string().as_str()))
            .count();
    }
    let _ = valkey.quit().await;
    Ok(missing)
}

/// SETs per second of one client of cluster `name` sending one SET at a time (each waits for
/// its reply) for `duration`: what an application writing in a loop gets.
pub async fn sets_per_second(
    client: &Client,
    ns: &str,
    name: &str,
    duration: Duration,
) -> anyhow::Result<f64> {
    let valkey = cluster_client(client, ns, name).await?;
    let started = Instant::now();
    let mut sets = 0u64;
    while started.elapsed() < duration {
        valkey
            .set::<(), _, _>(format!("tput:{sets}"), sets.to_string(), None, None, false)
            .await?;
        sets += 1;
    }
    let rate = sets as f64 / started.elapsed().as_secs_f64();
    let _ = valkey.quit().await;
    Ok(rate)
}

/// Sends `SET` with a `bulk`-byte value to the member at `ip` as user `app`, streaming the
/// value until the connection breaks: Valkey reads a command's arguments into the client's
/// query buffer before running it, so a value larger than the container's memory limit drives
/// valkey-server into the kernel's OOM killer, as a client uploading a huge blob does. Returns
/// the bytes of the value that were sent before the connection broke.
pub async fn oversized_set(ip: &str, bulk: usize) -> anyhow::Result<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect((ip, 6379)).await?;
    let password = PASSWORD;
    conn.write_all(format!("AUTH app {password}\r\n").as_bytes())
        .await?;
    let mut reply = [0u8; 64];
    let n = conn.read(&mut reply).await?;
    anyhow::ensure!(
        reply[..n].starts_with(b"+OK"),
        "AUTH as app: {}",
        String::from_utf8_lossy(&reply[..n])
    );
    conn.write_all(format!("*3\r\n$3\r\nSET\r\n$7\r\noom:big\r\n${bulk}\r\n").as_bytes())
        .await?;
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < bulk {
        let len = chunk.len().min(bulk - sent);
        if conn.write_all(&chunk[..len]).await.is_err() {
            return Ok(sent);
        }
        sent += len;
    }
    // All of it went out: whatever happens next, the server did not die while reading it.
    let _ = conn.write_all(b"\r\n").await;
    Ok(sent)
}
