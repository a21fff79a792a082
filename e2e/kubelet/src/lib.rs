//! `vk-kubelet`: a small kubelet that runs pods as local processes in network namespaces, so
//! a real kube-apiserver/scheduler/controller-manager can be used on a machine without Docker.
//!
//! Modules: [`node`] (registration, heartbeats, stop hook), [`runtime`] (pod workers and
//! container supervisors), [`volumes`] + [`atomic`] (volume contents), [`network`]
//! (netns/veth/addresses), [`probes`], [`launch`] (the in-namespace exec wrapper),
//! [`envvars`], [`images`], [`status`], [`logserver`] (`kubectl logs`), [`cleanup`], and
//! [`state`]: the on-disk layout the kubelet writes and the e2e crate's fault hooks read.

pub mod atomic;
pub mod cleanup;
pub mod dns;
pub mod envvars;
pub mod images;
pub mod launch;
pub mod logserver;
pub mod network;
pub mod node;
pub mod probes;
pub mod runtime;
pub mod state;
pub mod status;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::state::{StateDir, read_trimmed};
use runtime::{PodMsg, Shared};
use volumes::ObjectChange;

#[derive(Clone, Debug)]
pub struct Config {
    pub kubeconfig: PathBuf,
    pub state_dir: PathBuf,
    pub image_map: PathBuf,
    pub nodes: usize,
    pub base_port: u16,
    pub listen_ip: Ipv4Addr,
    /// The cluster DNS pods are pointed at (`--cluster-dns`); none: the node's resolver.
    pub cluster_dns: Option<dns::ClusterDns>,
}

/// A client from a kubeconfig file (the admin one: the kubelet acts for all its nodes).
pub async fn client_from(path: &std::path::Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// Installs the process-wide rustls provider (ring, as kube uses) once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Publishes ConfigMap/Secret changes to the pods' volume refreshers.
async fn watch_objects<K>(api: Api<K>, kind: &'static str, tx: broadcast::Sender<ObjectChange>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let mut s = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = s.next().await {
        let obj = match ev {
            Ok(Event::Apply(o)) | Ok(Event::Delete(o)) => o,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(kind, error = %e, "watch error");
                continue;
            }
        };
        let _ = tx.send(ObjectChange {
            kind,
            namespace: obj.meta().namespace.clone().unwrap_or_default(),
            name: obj.meta().name.clone().unwrap_or_default(),
        });
    }
}

/// Pod dirs whose pod no longer exists: kill what runs there and remove them.
async fn collect_orphans(state: &StateDir, live: &HashSet<String>) {
    for (dir, ns, name, uid) in state.list_pod_dirs() {
        if live.contains(&uid) {
            continue;
        }
        tracing::info!(pod = %format!("{ns}/{name}"), %uid, "removing orphaned pod state");
        runtime::kill_leftovers(&dir, &uid);
        network::teardown_pod_network(&uid).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Namespaces without a pod dir (a half-finished setup) go too.
    let known: BTreeSet<String> = state
        .list_pod_dirs()
        .into_iter()
        .map(|(_, _, _, uid)| crate::state::netns_name(&uid))
        .collect();
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with("vkp-") && !known.contains(&n) {
                let _ = network::ip(&["netns", "del", &n]).await;
            }
        }
    }
}

/// Runs the kubelet until SIGTERM/SIGINT.
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    install_crypto_provider();
    let client = client_from(&cfg.kubeconfig).await?;
    let state = StateDir::new(&cfg.state_dir);
    std::fs::create_dir_all(state.pods_dir())?;
    let images = images::ImageMap::new(&cfg.image_map);
    tokio::spawn(images.clone().watch_file());
    network::ensure_probe_source().await;

    let defs = node::node_defs(cfg.nodes, cfg.base_port);
    let our_nodes: BTreeSet<String> = defs.iter().map(|d| d.name.clone()).collect();

    // Addresses in use: our pod dirs and the pods the API says run on our nodes.
    let mut used: Vec<Ipv4Addr> = state
        .list_pod_dirs()
        .iter()
        .filter_map(|(d, ..)| read_trimmed(&d.join("ip")).ok()?.parse().ok())
        .collect();
    let pods_api: Api<Pod> = Api::all(client.clone());
    let listed = pods_api
        .list(&ListParams::default())
        .await
        .context("listing pods (is the apiserver up?)")?;
    for p in &listed.items {
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| our_nodes.contains(n))
            && let Some(ip) = p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_ref())
                .and_then(|i| i.parse().ok())
        {
            used.push(ip);
        }
    }

    let mut gate_txs = BTreeMap::new();
    let mut gates = BTreeMap::new();
    for d in &defs {
        let (tx, rx) = watch::channel(state.node_stopped_file(&d.name).exists());
        gate_txs.insert(d.name.clone(), tx);
        gates.insert(d.name.clone(), rx);
    }
    let (changes, _) = broadcast::channel(1024);
    // After a rebuild the running binary's /proc/self/exe reads "<path> (deleted)"; the new
    // file at the same path is the one to exec.
    let exe = std::env::current_exe().context("locating our own executable")?;
    let exe = match exe.to_string_lossy().strip_suffix(" (deleted)") {
        Some(p) => PathBuf::from(p),
        None => exe,
    };
    let shared = Arc::new(Shared {
        client: client.clone(),
        state: state.clone(),
        images,
        ips: network::IpAllocator::new(used),
        exe,
        gates,
        changes: changes.clone(),
        cluster_dns: cfg.cluster_dns.clone(),
        shutdown: CancellationToken::new(),
        recorders: defs
            .iter()
            .map(|d| {
                let reporter = kube::runtime::events::Reporter {
                    controller: "kubelet".into(),
                    instance: Some(d.name.clone()),
                };
                (
                    d.name.clone(),
                    kube::runtime::events::Recorder::new(client.clone(), reporter),
                )
            })
            .collect(),
    });

    for d in &defs {
        let tx = gate_txs.remove(&d.name).expect("gate per node");
        tokio::spawn(node::run_node(shared.clone(), d.clone(), tx));
        let (st, name) = (state.clone(), d.name.clone());
        let bind = SocketAddr::new(cfg.listen_ip.into(), d.port);
        tokio::spawn(async move {
            if let Err(e) = logserver::serve(st, bind, name.clone()).await {
                tracing::error!(node = %name, %bind, error = %format!("{e:#}"), "kubelet endpoint failed");
            }
        });
    }
    tokio::spawn(watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        "ConfigMap",
        changes.clone(),
    ));
    tokio::spawn(watch_objects(
        Api::<Secret>::all(client.clone()),
        "Secret",
        changes.clone(),
    ));

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut workers: HashMap<String, (watch::Sender<PodMsg>, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    let mut finished: HashSet<String> = HashSet::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut init_seen: Option<HashSet<String>> = None;
    let mut orphans_collected = false;
    let mut stream = watcher::watcher(pods_api, watcher::Config::default())
        .default_backoff()
        .boxed();

    let ours = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| our_nodes.contains(n))
    };
    tracing::info!(nodes = ?our_nodes, "vk-kubelet running");
    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ok(Event::Init) => init_seen = Some(HashSet::new()),
                    Ok(Event::InitApply(p)) | Ok(Event::Apply(p)) => {
                        if !ours(&p) {
                            continue;
                        }
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        if let Some(seen) = init_seen.as_mut() {
                            seen.insert(uid.clone());
                        }
                        if finished.contains(&uid) {
                            continue;
                        }
                        match workers.get(&uid) {
                            Some((tx, _)) => {
                                let _ = tx.send(PodMsg::Update(Box::new(p)));
                            }
                            None => {
                                let (tx, rx) = watch::channel(PodMsg::Update(Box::new(p.clone())));
                                let (sh, done) = (shared.clone(), done_tx.clone());
                                let u = uid.clone();
                                let h = tokio::spawn(async move {
                                    runtime::run_pod(sh, p, rx).await;
                                    let _ = done.send(u);
                                });
                                workers.insert(uid, (tx, h));
                            }
                        }
                    }
                    Ok(Event::Delete(p)) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        if let Some((tx, _)) = workers.get(&uid) {
                            let _ = tx.send(PodMsg::Gone);
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(seen) = init_seen.take() {
                            for (uid, (tx, _)) in &workers {
                                if !seen.contains(uid) {
                                    let _ = tx.send(PodMsg::Gone);
                                }
                            }
                            if !orphans_collected {
                                orphans_collected = true;
                                collect_orphans(&state, &seen).await;
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "pod watch error"),
                }
            }
            Some(uid) = done_rx.recv() => {
                workers.remove(&uid);
                finished.insert(uid);
            }
            _ = sigterm.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    tracing::info!(
        pods = workers.len(),
        "shutting down: stopping pods (Pod objects are kept)"
    );
    shared.shutdown.cancel();
    let all = futures::future::join_all(workers.into_values().map(|(_, h)| h));
    if tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .is_err()
    {
        tracing::warn!("some pods did not stop in time");
    }
    // Whatever is left (e.g. a worker that was stuck) is cleaned the hard way.
    for (dir, _, _, uid) in state.list_pod_dirs() {
        runtime::kill_leftovers(&dir, &uid);
        network::teardown_pod_network(&uid).await;
    }
    Ok(())
}
