//! The pod runtime: one worker task per pod, one supervisor task per container.
//!
//! A worker sets up the sandbox (netns + address), the volumes, runs init containers in
//! order, then supervises the containers (restartPolicy with CrashLoopBackOff, probes),
//! publishes status through pods/status, and on deletion stops the containers (preStop,
//! SIGTERM, grace period, SIGKILL), tears the sandbox down and removes the Pod object.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::envvars::{self, Refs};
use crate::images::ImageMap;
use crate::launch::LaunchSpec;
use crate::network::{self, IpAllocator};
use crate::probes::{self, Counter, Outcome, Target, Timing};
use crate::state::{StateDir, netns_name, read_trimmed};
use crate::status::{self, CState, ContainerRt, PodRt};
use crate::volumes::{self, ObjectChange, PodVolumes};

/// Kubelet-wide context shared by all pod workers.
pub struct Shared {
    pub client: Client,
    pub state: StateDir,
    pub images: ImageMap,
    pub ips: IpAllocator,
    /// Our own executable (the in-namespace exec wrapper).
    pub exe: PathBuf,
    /// Per node: true while the node is "stopped" by the fault hook.
    pub gates: BTreeMap<String, watch::Receiver<bool>>,
    pub changes: broadcast::Sender<ObjectChange>,
    pub cluster_dns: Option<crate::dns::ClusterDns>,
    /// Kubelet shutdown (SIGTERM): stop pods but keep the Pod objects.
    pub shutdown: CancellationToken,
    /// Per node: events as the kubelet reports them (`kubectl describe pod`). The events
    /// API requires a reporting instance, which is the node name as with the real kubelet.
    pub recorders: BTreeMap<String, kube::runtime::events::Recorder>,
}

/// What the dispatcher tells a worker.
#[derive(Clone, Debug)]
pub enum PodMsg {
    Update(Box<Pod>),
    Gone,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Init,
    Main,
}

enum End {
    Deleted(i64),
    Gone,
    Shutdown,
}

struct PodCtx {
    shared: Arc<Shared>,
    uid: String,
    ns: String,
    name: String,
    dir: PathBuf,
    pod: RwLock<Pod>,
    rt: Mutex<PodRt>,
    dirty: Notify,
    /// Labels/annotations changed: downward API volumes re-render at once.
    meta_changed: Notify,
    stop: CancellationToken,
    grace_secs: AtomicI64,
    gate: watch::Receiver<bool>,
    volumes: PodVolumes,
    ip: Mutex<Option<Ipv4Addr>>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(300);
const IMAGE_MAX_BACKOFF: Duration = Duration::from_secs(60);

impl PodCtx {
    fn pod(&self) -> Pod {
        self.pod.read().expect("pod lock").clone()
    }

    fn update(&self, f: impl FnOnce(&mut PodRt)) {
        f(&mut self.rt.lock().expect("rt lock"));
        self.dirty.notify_one();
    }

    fn update_container(&self, kind: Kind, idx: usize, f: impl FnOnce(&mut ContainerRt)) {
        self.update(|rt| {
            let list = match kind {
                Kind::Init => &mut rt.init,
                Kind::Main => &mut rt.containers,
            };
            if let Some(c) = list.get_mut(idx) {
                f(c);
            }
        })
    }

    fn container(&self, kind: Kind, idx: usize) -> Option<ContainerRt> {
        let rt = self.rt.lock().expect("rt lock");
        match kind {
            Kind::Init => rt.init.get(idx).cloned(),
            Kind::Main => rt.containers.get(idx).cloned(),
        }
    }

    /// Waits while the node is stopped (a powered-off node does nothing).
    /// Also returns once the pod is being stopped (a kubelet shutdown must not hang on a
    /// stopped node).
    async fn wait_gate(&self) {
        let mut g = self.gate.clone();
        tokio::select! {
            _ = g.wait_for(|stopped| !*stopped) => {}
            _ = self.stop.cancelled() => {}
        }
    }

    /// Sleeps unless the pod is being stopped; returns false if it is.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = self.stop.cancelled() => false,
        }
    }

    /// Publishes an Event about the pod (or one of its containers) in the background.
    fn event(&self, warning: bool, reason: &str, note: String, container: Option<&str>) {
        use kube::runtime::events::{Event, EventType};
        let pod = self.pod();
        let mut reference = kube::Resource::object_ref(&pod, &());
        if let Some(c) = container {
            reference.field_path = Some(format!("spec.containers{{{c}}}"));
        }
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let Some(rec) = self.shared.recorders.get(&node).cloned() else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = rec.publish(&ev, &reference).await {
                tracing::warn!(error = %e, "event not published");
            }
        });
    }

    fn pid_file(&self, c: &str) -> PathBuf {
        self.dir.join(format!("{c}.pid"))
    }

    fn log_file(&self, c: &str) -> PathBuf {
        self.dir.join(format!("{c}.log"))
    }
}

/// Builds the runtime view of a pod, carrying over restart counts and finished init
/// containers from the status a previous kubelet run published.
fn initial_rt(pod: &Pod) -> (PodRt, Vec<bool>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let st = pod.status.clone().unwrap_or_default();
    let prev = |list: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>, name: &str| {
        list.iter().flatten().find(|s| s.name == name).cloned()
    };
    let mut init_done = Vec::new();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let mut r = ContainerRt::new(&c.name, c.image.as_deref().unwrap_or_default());
            let mut done = false;
            if let Some(p) = prev(&st.init_container_statuses, &c.name) {
                r.restart_count = p.restart_count;
                if let Some(t) = p.state.and_then(|s| s.terminated)
                    && t.exit_code == 0
                    && c.restart_policy.as_deref() != Some("Always")
                {
                    r.state = CState::Terminated {
                        exit_code: 0,
                        signal: None,
                        reason: t.reason.unwrap_or_else(|| "Completed".into()),
                        message: None,
                        started_at: t.started_at.map(|t| t.0),
                        finished_at: t.finished_at.map(|t| t.0).unwrap_or_else(Timestamp::now),
                    };
                    done = true;
                }
            }
            init_done.push(done);
            r
        })
        .collect();
    let containers = spec
        .containers
        .iter()
        .map(|c| {
            let mut r = ContainerRt::new(&c.name, c.image.as_deref().unwrap_or_default());
            if let Some(p) = prev(&st.container_statuses, &c.name) {
                r.restart_count = p.restart_count;
            }
            r
        })
        .collect();
    let rt = PodRt {
        init,
        containers,
        start_time: st.start_time.map(|t| t.0),
        ..Default::default()
    };
    (rt, init_done)
}

/// The worker of one pod; returns when the pod is gone (or the kubelet shuts down).
pub async fn run_pod(shared: Arc<Shared>, pod: Pod, mut rx: watch::Receiver<PodMsg>) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let dir = shared.state.pod_dir(&ns, &name, &uid);
    let gate = shared
        .gates
        .get(&node)
        .cloned()
        .unwrap_or_else(|| watch::channel(false).1);
    let (rt, init_done) = initial_rt(&pod);
    let volumes = PodVolumes::new(
        pod.clone(),
        dir.clone(),
        shared.state.root.join("pvc"),
        shared.client.clone(),
    );
    let ctx = Arc::new(PodCtx {
        shared: shared.clone(),
        uid: uid.clone(),
        ns: ns.clone(),
        name: name.clone(),
        dir: dir.clone(),
        pod: RwLock::new(pod.clone()),
        rt: Mutex::new(rt),
        dirty: Notify::new(),
        meta_changed: Notify::new(),
        stop: CancellationToken::new(),
        grace_secs: AtomicI64::new(30),
        gate,
        volumes,
        ip: Mutex::new(None),
    });

    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let terminal = phase == "Succeeded" || phase == "Failed";
    let mut end = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|_| End::Deleted(pod.metadata.deletion_grace_period_seconds.unwrap_or(0)));

    // A finished pod's status is final (the apiserver rejects un-terminating containers),
    // and a pod deleted before it ran has nothing to report.
    let status_task = (!terminal && end.is_none()).then(|| tokio::spawn(status_loop(ctx.clone())));
    let refresh_task = tokio::spawn(refresh_loop(ctx.clone()));
    let main_task = (!terminal && end.is_none()).then(|| {
        tracing::info!(pod = %format!("{ns}/{name}"), %node, %uid, "starting pod");
        tokio::spawn(run_containers(ctx.clone(), init_done))
    });

    let end = loop {
        if let Some(e) = end.take() {
            break e;
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => end = Some(End::Shutdown),
            r = rx.changed() => {
                if r.is_err() {
                    end = Some(End::Gone);
                    continue;
                }
                let msg = rx.borrow_and_update().clone();
                match msg {
                    PodMsg::Gone => end = Some(End::Gone),
                    PodMsg::Update(p) => {
                        let old = ctx.pod();
                        if old.metadata.labels != p.metadata.labels
                            || old.metadata.annotations != p.metadata.annotations
                        {
                            ctx.meta_changed.notify_one();
                        }
                        ctx.volumes.set_pod((*p).clone());
                        let deleting = p.metadata.deletion_timestamp.is_some();
                        let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
                        *ctx.pod.write().expect("pod lock") = *p;
                        // Someone else may have changed our status (the node lifecycle
                        // controller marks pods not Ready while a node is NotReady): re-assert.
                        ctx.dirty.notify_one();
                        if deleting {
                            end = Some(End::Deleted(grace));
                        }
                    }
                }
            }
        }
    };

    let spec_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    let grace = match end {
        // A powered-off node does not act on deletions until it comes back.
        End::Deleted(g) => {
            tokio::select! {
                _ = ctx.wait_gate() => {}
                _ = shared.shutdown.cancelled() => {}
            }
            g
        }
        End::Gone => spec_grace.min(2),
        End::Shutdown => spec_grace.min(5),
    };
    tracing::info!(pod = %format!("{ns}/{name}"), grace, "stopping pod");
    ctx.grace_secs.store(grace, Ordering::SeqCst);
    ctx.stop.cancel();
    if let Some(t) = main_task {
        let _ = t.await;
    }
    refresh_task.abort();
    if let Some(t) = status_task {
        t.abort();
    }
    kill_leftovers(&dir, &uid);
    network::teardown_pod_network(&uid).await;
    match end {
        End::Deleted(_) if !shared.shutdown.is_cancelled() => {
            if let Some(ip) = *ctx.ip.lock().expect("ip lock") {
                shared.ips.release(ip);
            }
            let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "pod deleted"),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "final delete failed")
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        End::Gone => {
            if let Some(ip) = *ctx.ip.lock().expect("ip lock") {
                shared.ips.release(ip);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        _ => {}
    }
}

/// Kills processes recorded in a pod dir that are still alive (after a kubelet restart the
/// supervisors may never have adopted them, e.g. for a pod deleted meanwhile).
pub fn kill_leftovers(dir: &Path, uid: &str) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("pid") {
            continue;
        }
        if let Some(pid) = read_trimmed(&p).ok().and_then(|s| s.parse::<i32>().ok())
            && process_in_netns(pid, &netns_name(uid))
        {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = std::fs::remove_file(&p);
    }
}

/// True if `pid` is alive and lives in the named network namespace (guards against pid
/// reuse when adopting or killing after a restart).
pub fn process_in_netns(pid: i32, netns: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let a = std::fs::metadata(format!("/proc/{pid}/ns/net"));
    let b = std::fs::metadata(Path::new("/run/netns").join(netns));
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false);
    match (a, b) {
        (Ok(a), Ok(b)) => alive && a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Do the pod's conditions in the API (type and status) match what we would report?
fn conditions_agree(pod: &Pod, ours: &serde_json::Value) -> bool {
    let pairs = |conditions: Option<&Vec<serde_json::Value>>| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = conditions
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or_default().to_string(),
                    c["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let api = pod
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default();
    let api_pairs = pairs(api["conditions"].as_array());
    // Only the conditions we report are ours to compare (others, e.g. DisruptionTarget, are kept).
    let ours_pairs = pairs(ours["conditions"].as_array());
    ours_pairs
        .iter()
        .all(|o| api_pairs.iter().any(|a| a.0 == o.0 && a.1 == o.1))
}

async fn status_loop(ctx: Arc<PodCtx>) {
    let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ctx.ns);
    let mut last: Option<serde_json::Value> = None;
    ctx.dirty.notify_one();
    loop {
        ctx.dirty.notified().await;
        // Coalesce bursts of changes into one patch.
        tokio::time::sleep(Duration::from_millis(150)).await;
        ctx.wait_gate().await;
        let pod = ctx.pod();
        let status = {
            let mut rt = ctx.rt.lock().expect("rt lock");
            status::build_status(&pod, &mut rt, Timestamp::now())
        };
        let Ok(value) = serde_json::to_value(&status) else {
            continue;
        };
        if last.as_ref() == Some(&value) && conditions_agree(&pod, &value) {
            continue;
        }
        // The uid pins the patch to this incarnation of the pod (a recreated pod with the
        // same name rejects it).
        let patch = serde_json::json!({ "metadata": { "uid": ctx.uid }, "status": value });
        match api
            .patch_status(&ctx.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) => {
                tracing::debug!(pod = %ctx.name, phase = ?status.phase, "status patched");
                *ctx.pod.write().expect("pod lock") = p;
                last = Some(value);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", ctx.ns, ctx.name), error = %e, "status patch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                ctx.dirty.notify_one();
            }
        }
    }
}

async fn refresh_loop(ctx: Arc<PodCtx>) {
    let mut rx = ctx.shared.changes.subscribe();
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    tick.tick().await;
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                Ok(ch) if ch.namespace == ctx.ns => ctx.volumes.refresh(Some(&ch)).await,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => ctx.volumes.refresh(None).await,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => ctx.volumes.refresh(None).await,
            _ = ctx.meta_changed.notified() => ctx.volumes.refresh(None).await,
        }
    }
}

fn set_all_waiting(ctx: &PodCtx, reason: &str, message: Option<String>) {
    ctx.update(|rt| {
        for c in rt.init.iter_mut().chain(rt.containers.iter_mut()) {
            if matches!(c.state, CState::Waiting { .. }) {
                c.state = CState::waiting(reason, message.clone());
            }
        }
    });
}

async fn setup_sandbox(ctx: &PodCtx) -> anyhow::Result<Ipv4Addr> {
    std::fs::create_dir_all(&ctx.dir)?;
    let pod = ctx.pod();
    let from_file = read_trimmed(&ctx.dir.join("ip"))
        .ok()
        .and_then(|s| s.parse::<Ipv4Addr>().ok());
    let from_status = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_ref())
        .and_then(|s| s.parse().ok());
    let ip = match from_file.or(from_status) {
        Some(ip) => {
            ctx.shared.ips.reserve(ip);
            ip
        }
        None => ctx.shared.ips.allocate()?,
    };
    std::fs::write(ctx.dir.join("ip"), ip.to_string())?;
    *ctx.ip.lock().expect("ip lock") = Some(ip);
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    std::fs::write(ctx.dir.join("node"), &node)?;
    std::fs::write(ctx.dir.join("netns"), netns_name(&ctx.uid))?;
    std::fs::write(ctx.dir.join("uid"), &ctx.uid)?;
    network::setup_pod_network(&ctx.uid, ip).await?;
    Ok(ip)
}

async fn run_containers(ctx: Arc<PodCtx>, init_done: Vec<bool>) {
    // 1. sandbox
    let ip = loop {
        ctx.wait_gate().await;
        match setup_sandbox(&ctx).await {
            Ok(ip) => break ip,
            Err(e) => {
                tracing::warn!(pod = %ctx.name, error = %format!("{e:#}"), "sandbox setup failed; retrying");
                set_all_waiting(
                    &ctx,
                    "ContainerCreating",
                    Some(format!("FailedCreatePodSandBox: {e:#}")),
                );
                ctx.event(true, "FailedCreatePodSandBox", format!("{e:#}"), None);
                if !ctx.sleep(Duration::from_secs(2)).await {
                    return;
                }
            }
        }
    };
    ctx.update(|rt| {
        rt.sandbox_ready = true;
        rt.pod_ip = Some(ip.to_string());
        rt.start_time.get_or_insert_with(Timestamp::now);
    });
    // 2. volumes (a missing ConfigMap/Secret keeps the pod in ContainerCreating, retried)
    loop {
        match ctx.volumes.setup_all().await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(pod = %ctx.name, error = %format!("{e:#}"), "volume setup failed; retrying");
                set_all_waiting(
                    &ctx,
                    "ContainerCreating",
                    Some(format!("MountVolume.SetUp failed: {e:#}")),
                );
                ctx.event(
                    true,
                    "FailedMount",
                    format!("MountVolume.SetUp failed: {e:#}"),
                    None,
                );
                if !ctx.sleep(Duration::from_secs(2)).await {
                    return;
                }
            }
        }
    }
    if let Err(e) = volumes::write_etc_hosts(&ctx.dir, &ctx.pod(), &ip.to_string()) {
        tracing::warn!(error = %e, "writing /etc/hosts");
    }
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let resolv = crate::dns::resolv_conf(&ctx.pod(), ctx.shared.cluster_dns.as_ref(), &host_resolv);
    if let Err(e) = std::fs::write(ctx.dir.join("etc-resolv.conf"), resolv) {
        tracing::warn!(error = %e, "writing /etc/resolv.conf");
    }
    // 3. init containers, in order
    let spec = ctx.pod().spec.unwrap_or_default();
    let mut sidecars = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        if init_done.get(i).copied().unwrap_or(false) {
            continue;
        }
        if c.restart_policy.as_deref() == Some("Always") {
            // Native sidecar: keeps running; the next init container starts once it started.
            sidecars.push(tokio::spawn(supervise(ctx.clone(), Kind::Init, i)));
            loop {
                if ctx
                    .container(Kind::Init, i)
                    .is_some_and(|c| c.started && c.state.is_running())
                {
                    break;
                }
                if !ctx.sleep(Duration::from_millis(200)).await {
                    return;
                }
            }
            continue;
        }
        match supervise(ctx.clone(), Kind::Init, i).await {
            Some(0) => {}
            Some(_) => {
                ctx.update(|rt| rt.init_failed = true);
                return;
            }
            None => return,
        }
    }
    ctx.update(|rt| rt.initialized = true);
    // 4. containers
    let handles: Vec<_> = (0..spec.containers.len())
        .map(|i| tokio::spawn(supervise(ctx.clone(), Kind::Main, i)))
        .collect();
    for h in handles {
        let _ = h.await;
    }
    // All containers are done for good (Never/OnFailure): stop sidecars too, then the
    // sandbox goes, as the real kubelet kills a finished pod's sandbox (the IP stays
    // reserved in status until the pod is deleted).
    let finished = !ctx.stop.is_cancelled();
    if finished {
        ctx.grace_secs.store(
            spec.termination_grace_period_seconds.unwrap_or(30),
            Ordering::SeqCst,
        );
        ctx.stop.cancel();
    }
    for h in sidecars {
        let _ = h.await;
    }
    if finished && !ctx.shared.shutdown.is_cancelled() {
        kill_leftovers(&ctx.dir, &ctx.uid);
        network::teardown_pod_network(&ctx.uid).await;
        ctx.update(|rt| rt.sandbox_ready = false);
    }
}

async fn fetch_refs(ctx: &PodCtx, c: &Container) -> anyhow::Result<Refs> {
    let (cms, secrets) = envvars::referenced_objects(c);
    let mut refs = Refs::default();
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.shared.client.clone(), &ctx.ns);
    for n in cms {
        if let Some(cm) = cm_api
            .get_opt(&n)
            .await
            .with_context(|| format!("get configmap {n}"))?
        {
            refs.config_maps.insert(n, cm.data.unwrap_or_default());
        }
    }
    let s_api: Api<Secret> = Api::namespaced(ctx.shared.client.clone(), &ctx.ns);
    for n in secrets {
        if let Some(s) = s_api
            .get_opt(&n)
            .await
            .with_context(|| format!("get secret {n}"))?
        {
            let mut m: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                m.insert(k, v.into_bytes());
            }
            refs.secrets.insert(n, m);
        }
    }
    Ok(refs)
}

/// A running container process: our child, or one adopted after a kubelet restart.
enum Proc {
    Child(tokio::process::Child, i32),
    Adopted(i32),
    /// Recorded as running by a previous kubelet run, gone now (died while we were down).
    Vanished,
}

impl Proc {
    fn pid(&self) -> i32 {
        match self {
            Proc::Child(_, p) | Proc::Adopted(p) => *p,
            Proc::Vanished => 0,
        }
    }

    /// (exit code, signal)
    async fn wait(&mut self) -> (i32, Option<i32>) {
        match self {
            Proc::Child(c, _) => match c.wait().await {
                Ok(st) => {
                    use std::os::unix::process::ExitStatusExt;
                    match (st.code(), st.signal()) {
                        (Some(code), _) => (code, None),
                        (None, Some(sig)) => (128 + sig, Some(sig)),
                        _ => (255, None),
                    }
                }
                Err(_) => (255, None),
            },
            Proc::Vanished => (137, None),
            Proc::Adopted(pid) => {
                // Not our child: poll until it is gone. Its exit code is unknowable.
                let pid = *pid;
                loop {
                    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .map(|s| {
                            !s.rsplit(')')
                                .next()
                                .unwrap_or("")
                                .trim_start()
                                .starts_with('Z')
                        })
                        .unwrap_or(false);
                    if !alive {
                        return (255, None);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
}

fn signal_group(pid: i32, sig: Signal) {
    // Never 0/1: killpg(0) is our own group, -1 would reach init.
    if pid > 1 {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid), sig);
    }
}

/// preStop (exec), SIGTERM, wait up to `grace`, SIGKILL.
async fn kill_gracefully(
    proc: &mut Proc,
    grace: Duration,
    c: &Container,
    env: &[(String, String)],
) -> (i32, Option<i32>) {
    let pid = proc.pid();
    let deadline = tokio::time::Instant::now() + grace;
    if let Some(cmd) = c
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.exec.as_ref())
        .and_then(|e| e.command.clone())
    {
        let fut = tokio::process::Command::new("nsenter")
            .arg("-t")
            .arg(pid.to_string())
            .args(["-n", "-m", "--"])
            .args(&cmd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .kill_on_drop(true)
            .status();
        let _ = tokio::time::timeout_at(deadline, fut).await;
    }
    signal_group(pid, Signal::SIGTERM);
    // A paused (SIGSTOP) container must run to see its SIGTERM.
    signal_group(pid, Signal::SIGCONT);
    match tokio::time::timeout_at(deadline, proc.wait()).await {
        Ok(r) => r,
        Err(_) => {
            signal_group(pid, Signal::SIGKILL);
            proc.wait().await
        }
    }
}

fn start_process(ctx: &PodCtx, c: &Container, spec: &LaunchSpec) -> anyhow::Result<Proc> {
    let run_dir = ctx.dir.join("run");
    std::fs::create_dir_all(&run_dir)?;
    let spec_path = run_dir.join(format!("{}.json", c.name));
    std::fs::write(&spec_path, serde_json::to_vec_pretty(spec)?)?;
    let log = ctx.log_file(&c.name);
    if log.exists() {
        let _ = std::fs::rename(&log, ctx.dir.join(format!("{}.log.previous", c.name)));
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let err = out.try_clone()?;
    let child = tokio::process::Command::new("ip")
        .args(["netns", "exec", &netns_name(&ctx.uid)])
        .arg(&ctx.shared.exe)
        .arg("exec-container")
        .arg(&spec_path)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .context("spawning ip netns exec")?;
    let pid = child.id().context("no pid")? as i32;
    std::fs::write(ctx.pid_file(&c.name), pid.to_string())?;
    Ok(Proc::Child(child, pid))
}

fn adopt(ctx: &PodCtx, name: &str) -> Option<(Proc, Timestamp)> {
    let pf = ctx.pid_file(name);
    let pid: i32 = read_trimmed(&pf).ok()?.parse().ok()?;
    if !process_in_netns(pid, &netns_name(&ctx.uid)) {
        // It ran when the kubelet went away and is gone now: report it as exited (the
        // restart policy decides what next), as the real kubelet reports a container it
        // cannot find.
        tracing::info!(pod = %ctx.name, container = name, pid, "recorded container process is gone");
        // Its children may live on in its process group: they go with it.
        let procs = network::netns_processes(&netns_name(&ctx.uid));
        tracing::debug!(pod = %ctx.name, ?procs, "processes left in the pod's netns");
        for (p, pgrp) in procs {
            if pgrp == pid && p > 1 {
                let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
            }
        }
        return Some((Proc::Vanished, Timestamp::now()));
    }
    let since = std::fs::metadata(&pf)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| Timestamp::try_from(t).ok())
        .unwrap_or_else(Timestamp::now);
    tracing::info!(pod = %ctx.name, container = name, pid, "adopted running container");
    Some((Proc::Adopted(pid), since))
}

/// Supervises one container until it is done for good (Some(exit code)) or the pod stops
/// (None).
async fn supervise(ctx: Arc<PodCtx>, kind: Kind, idx: usize) -> Option<i32> {
    let pod = ctx.pod();
    let spec = pod.spec.clone().unwrap_or_default();
    let c = match kind {
        Kind::Init => spec
            .init_containers
            .clone()
            .unwrap_or_default()
            .get(idx)
            .cloned(),
        Kind::Main => spec.containers.get(idx).cloned(),
    }?;
    let image_ref = c.image.clone().unwrap_or_default();
    let sidecar = kind == Kind::Init && c.restart_policy.as_deref() == Some("Always");
    let policy = status::restart_policy(&spec).to_string();
    let mut backoff: Option<Duration> = None;
    let mut image_backoff = Duration::from_secs(10);
    let mut first = true;
    let mut image_changes = ctx.shared.images.subscribe();
    loop {
        if ctx.stop.is_cancelled() {
            return None;
        }
        ctx.wait_gate().await;
        // Image
        let Some(image) = ctx.shared.images.resolve(&image_ref) else {
            let msg = format!(
                "Failed to pull image \"{}\": image not found in the vk-kubelet image map",
                image_ref
            );
            tracing::warn!(pod = %ctx.name, container = %c.name, image = %image_ref, "unknown image");
            ctx.update_container(kind, idx, |s| {
                s.state = CState::waiting("ErrImagePull", Some(msg.clone()))
            });
            ctx.event(true, "Failed", msg.clone(), Some(&c.name));
            if !ctx.sleep(Duration::from_secs(2)).await {
                return None;
            }
            ctx.update_container(kind, idx, |s| {
                s.state = CState::waiting(
                    "ImagePullBackOff",
                    Some(format!(
                        "Back-off pulling image \"{}\": ErrImagePull: {msg}",
                        image_ref
                    )),
                )
            });
            ctx.event(
                true,
                "BackOff",
                format!("Back-off pulling image \"{image_ref}\""),
                Some(&c.name),
            );
            tokio::select! {
                _ = tokio::time::sleep(image_backoff) => {}
                _ = image_changes.changed() => {}
                _ = ctx.stop.cancelled() => return None,
            }
            image_backoff = (image_backoff * 2).min(IMAGE_MAX_BACKOFF);
            continue;
        };
        image_backoff = Duration::from_secs(10);
        // Environment
        let ip = ctx
            .ip
            .lock()
            .expect("ip lock")
            .map(|i| i.to_string())
            .unwrap_or_default();
        let env = match fetch_refs(&ctx, &c)
            .await
            .map_err(|e| format!("{e:#}"))
            .and_then(|refs| envvars::build_env(&ctx.pod(), &c, &ip, &image, &refs))
        {
            Ok(env) => env,
            Err(msg) => {
                ctx.update_container(kind, idx, |s| {
                    s.state = CState::waiting("CreateContainerConfigError", Some(msg.clone()))
                });
                ctx.event(true, "Failed", format!("Error: {msg}"), Some(&c.name));
                if !ctx.sleep(Duration::from_secs(3)).await {
                    return None;
                }
                continue;
            }
        };
        let argv = envvars::build_argv(&c, &image, &env);
        let launch = LaunchSpec {
            argv,
            env: env.clone(),
            working_dir: c.working_dir.clone(),
            mounts: {
                let mut m = ctx.volumes.mounts_for(&c);
                m.insert(
                    0,
                    volumes::MountSpec {
                        source: ctx.dir.join("etc-hosts"),
                        target: "/etc/hosts".into(),
                        read_only: false,
                    },
                );
                m.insert(
                    1,
                    volumes::MountSpec {
                        source: ctx.dir.join("etc-resolv.conf"),
                        target: "/etc/resolv.conf".into(),
                        read_only: false,
                    },
                );
                m
            },
        };
        // Start (or adopt what a previous kubelet run left running)
        let adopted = if first { adopt(&ctx, &c.name) } else { None };
        first = false;
        let (mut proc, started_at) = match adopted {
            Some(p) => p,
            None => match start_process(&ctx, &c, &launch) {
                Ok(p) => (p, Timestamp::now()),
                Err(e) => {
                    tracing::warn!(pod = %ctx.name, container = %c.name, error = %format!("{e:#}"), "start failed");
                    ctx.update_container(kind, idx, |s| {
                        s.state = CState::waiting("RunContainerError", Some(format!("{e:#}")))
                    });
                    if !ctx.sleep(Duration::from_secs(5)).await {
                        return None;
                    }
                    continue;
                }
            },
        };
        let pid = proc.pid();
        tracing::info!(pod = %format!("{}/{}", ctx.ns, ctx.name), container = %c.name, pid, "container running");
        if matches!(proc, Proc::Child(..)) {
            ctx.event(
                false,
                "Pulled",
                format!("Container image \"{image_ref}\" already present on machine"),
                Some(&c.name),
            );
            ctx.event(
                false,
                "Started",
                format!("Started container {}", c.name),
                Some(&c.name),
            );
        }
        let has_probes = (kind == Kind::Main || sidecar) && !matches!(proc, Proc::Vanished);
        ctx.update_container(kind, idx, |s| {
            s.state = CState::Running { started_at };
            s.instance += 1;
            s.started = !has_probes || c.startup_probe.is_none();
            s.ready = false;
        });
        // Probes, bound to this instance
        let run = CancellationToken::new();
        let unhealthy = Arc::new(Notify::new());
        if has_probes {
            let target = Target {
                pod_ip: ip.parse().unwrap_or(Ipv4Addr::UNSPECIFIED),
                pid,
                env: env.clone(),
            };
            let (ctx2, c2, run2, un2) = (ctx.clone(), c.clone(), run.clone(), unhealthy.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = run2.cancelled() => {}
                    _ = run_probes(ctx2, kind, idx, c2, target, un2) => {}
                }
            });
        }
        let term_grace =
            Duration::from_secs(spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64);
        let mut stopping = false;
        let mut liveness_kill = false;
        let (exit_code, signal) = tokio::select! {
            r = proc.wait() => r,
            _ = ctx.stop.cancelled() => {
                stopping = true;
                ctx.event(false, "Killing", format!("Stopping container {}", c.name), Some(&c.name));
                let g = Duration::from_secs(ctx.grace_secs.load(Ordering::SeqCst).max(1) as u64);
                kill_gracefully(&mut proc, g, &c, &env).await
            }
            _ = unhealthy.notified() => {
                liveness_kill = true;
                tracing::info!(pod = %ctx.name, container = %c.name, "liveness/startup probe failed; killing container");
                ctx.event(false, "Killing", format!("Container {} failed liveness probe, will be restarted", c.name), Some(&c.name));
                kill_gracefully(&mut proc, term_grace, &c, &env).await
            }
        };
        run.cancel();
        // The container's process group dies with it (like a pid namespace would).
        signal_group(pid, Signal::SIGKILL);
        let _ = std::fs::remove_file(ctx.pid_file(&c.name));
        let finished_at = Timestamp::now();
        let ran = finished_at.duration_since(started_at).unsigned_abs();
        let (reason, message) = if exit_code == 0 {
            ("Completed".to_string(), None)
        } else if matches!(proc, Proc::Vanished) {
            (
                "ContainerStatusUnknown".to_string(),
                Some("The container could not be located when the kubelet restarted".to_string()),
            )
        } else if matches!(proc, Proc::Adopted(_)) {
            (
                "Unknown".to_string(),
                Some(
                    "exit status unknown: process was adopted after a kubelet restart".to_string(),
                ),
            )
        } else if ran < Duration::from_secs(2)
            && exit_code == 1
            && last_log_line(&ctx.log_file(&c.name)).starts_with("vk-kubelet exec-container:")
        {
            (
                "StartError".to_string(),
                Some(last_log_line(&ctx.log_file(&c.name))),
            )
        } else if c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError") {
            // As the kubelet does: the log's tail stands in for a termination message.
            ("Error".to_string(), Some(log_tail(&ctx.log_file(&c.name))))
        } else {
            ("Error".to_string(), None)
        };
        tracing::info!(pod = %format!("{}/{}", ctx.ns, ctx.name), container = %c.name, exit_code, %reason, "container exited");
        let terminated = CState::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at: Some(started_at),
            finished_at,
        };
        ctx.update_container(kind, idx, |s| {
            s.state = terminated.clone();
            s.ready = false;
            s.started = false;
        });
        if stopping || ctx.stop.is_cancelled() {
            return None;
        }
        let restart = if sidecar {
            true
        } else {
            match kind {
                Kind::Init => exit_code != 0 && policy != "Never",
                Kind::Main => match policy.as_str() {
                    "Always" => true,
                    "OnFailure" => exit_code != 0,
                    _ => false,
                },
            }
        };
        let _ = liveness_kill;
        if !restart {
            return Some(exit_code);
        }
        if ran > Duration::from_secs(600) {
            backoff = None;
        }
        // First restart is immediate, then 10s, 20s, ... up to 5 min (the kubelet's backoff).
        let delay = backoff.unwrap_or(Duration::ZERO);
        backoff = Some(
            backoff
                .map(|d| d * 2)
                .unwrap_or(Duration::from_secs(10))
                .min(MAX_BACKOFF),
        );
        if !delay.is_zero() {
            ctx.event(
                true,
                "BackOff",
                "Back-off restarting failed container".into(),
                Some(&c.name),
            );
        }
        ctx.update_container(kind, idx, |s| {
            s.restart_count += 1;
            s.last_state = Some(terminated.clone());
            if !delay.is_zero() {
                s.state = CState::waiting(
                    "CrashLoopBackOff",
                    Some(format!(
                        "back-off {}s restarting failed container={} pod={}_{}({})",
                        delay.as_secs(),
                        c.name,
                        ctx.name,
                        ctx.ns,
                        ctx.uid
                    )),
                );
            }
        });
        if !delay.is_zero() && !ctx.sleep(delay).await {
            return None;
        }
    }
}

/// The last 80 lines of a container's log, at most 2048 bytes of them: what the kubelet puts
/// in `terminated.message` under `terminationMessagePolicy: FallbackToLogsOnError`.
fn log_tail(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let mut start = tail.len().saturating_sub(2048);
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    tail[start..].to_string()
}

fn last_log_line(p: &Path) -> String {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.lines().last().map(str::to_string))
        .unwrap_or_default()
}

async fn run_probes(
    ctx: Arc<PodCtx>,
    kind: Kind,
    idx: usize,
    c: Container,
    target: Target,
    unhealthy: Arc<Notify>,
) {
    let probe_loop = |probe: k8s_openapi::api::core::v1::Probe, what: &'static str| {
        let (ctx, c, target) = (ctx.clone(), c.clone(), target.clone());
        async move {
            let t = Timing::of(&probe);
            tokio::time::sleep(t.initial_delay).await;
            let mut counter = Counter::default();
            loop {
                ctx.wait_gate().await;
                let o = probes::run_once(&c, &probe, &target, t.timeout).await;
                if let Outcome::Failure(msg) = &o {
                    tracing::debug!(pod = %ctx.name, container = %c.name, probe = what, %msg, "probe failed");
                    let mut kind_name = what.to_string();
                    kind_name[..1].make_ascii_uppercase();
                    ctx.event(
                        true,
                        "Unhealthy",
                        format!("{kind_name} probe failed: {msg}"),
                        Some(&c.name),
                    );
                }
                if let Some(result) = counter.record(o == Outcome::Success, &t) {
                    match (what, result) {
                        ("readiness", r) => ctx.update_container(kind, idx, |s| s.ready = r),
                        ("liveness", true) => {}
                        (_, r) => {
                            if !r {
                                tracing::info!(pod = %ctx.name, container = %c.name, probe = what, outcome = ?o, "probe failed its threshold");
                            }
                            return r;
                        }
                    }
                }
                tokio::time::sleep(t.period).await;
            }
        }
    };
    if let Some(p) = c.startup_probe.clone() {
        if !probe_loop(p, "startup").await {
            unhealthy.notify_one();
            return;
        }
        ctx.update_container(kind, idx, |s| s.started = true);
    }
    let readiness = async {
        match c.readiness_probe.clone() {
            Some(p) => {
                probe_loop(p, "readiness").await;
            }
            None => ctx.update_container(kind, idx, |s| s.ready = true),
        }
        std::future::pending::<()>().await
    };
    let liveness = async {
        if let Some(p) = c.liveness_probe.clone() {
            // The liveness loop only returns on failure.
            if !probe_loop(p, "liveness").await {
                unhealthy.notify_one();
                return;
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = readiness => {}
        _ = liveness => {}
    }
}
