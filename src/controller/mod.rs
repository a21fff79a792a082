//! The controllers: ValkeyCluster (resolve, build, apply, observe, plan, act, status) and
//! ValkeyNode (ConfigMap + Pod per member). Shared context, error policy and wiring here.

pub mod backup;
pub mod backup_schedule;
pub mod cluster;
pub mod events;
pub mod image_protection;
pub mod jobs;
pub mod leader;
pub mod menu_status;
pub mod metering;
pub mod names;
pub mod node;
pub mod owner;
pub mod patch;
pub mod permissions;
pub mod restore;
pub mod run;
#[cfg(test)]
pub mod testing;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio::sync::Mutex;

use crate::api::{
    ValkeyConfig, ValkeyConfigSpec, ValkeyImage, ValkeyImageSpec, ValkeyRole, ValkeyRoleSpec,
};
use crate::driver::fred::FredDriver;
use crate::driver::{Credentials, DriverConfig, TlsSettings};
use crate::resolve::Menu;
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// Resolves once `store` has listed, `false` if its writer went away first. Several tasks wait
/// on the same stores: kube's `Store::wait_until_ready` wakes only the waiter that polled last
/// (its one-shot receiver keeps a single waker), so an earlier waiter could sleep forever. Each
/// waiter here polls again every second instead (a receiver that already has its value answers
/// at once, without a wake-up).
pub async fn until_ready<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(listed) =
            tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await
        {
            return listed.is_ok();
        }
    }
}

/// Field manager for server-side apply, one per controller.
pub const CLUSTER_MANAGER: &str = "valkey-operator/cluster";
pub const NODE_MANAGER: &str = "valkey-operator/node";

/// The platform team's menu as the reflector stores hold it: resolution reads memory, not
/// the API, on every reconcile.
#[derive(Clone)]
pub struct MenuStores {
    pub configs: Store<ValkeyConfig>,
    pub images: Store<ValkeyImage>,
    pub roles: Store<ValkeyRole>,
}

impl Menu for MenuStores {
    fn config(&self, name: &str) -> Option<ValkeyConfigSpec> {
        self.configs
            .get(&ObjectRef::new(name))
            .map(|c| c.spec.clone())
    }
    fn image(&self, name: &str) -> Option<ValkeyImageSpec> {
        self.images
            .get(&ObjectRef::new(name))
            .map(|i| i.spec.clone())
    }
    fn role(&self, name: &str) -> Option<ValkeyRoleSpec> {
        self.roles
            .get(&ObjectRef::new(name))
            .map(|r| r.spec.clone())
    }
}

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    /// The operator's own namespace: where each cluster's operator credentials are kept, out
    /// of reach of the tenant namespace's editors.
    pub operator_namespace: String,
    pub menu: MenuStores,
    pub settings: Settings,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// Set once every store the resolver reads has listed: resolving earlier would report
    /// false Blocked states (the menu looks empty).
    pub menu_synced: std::sync::atomic::AtomicBool,
    /// The lease this replica must hold to act (None: leader election off).
    pub election: Option<leader::Election>,
    /// One driver per Valkey cluster (each has its own operator password and, with TLS, its
    /// own CA bundle), with what it was built from.
    drivers: Mutex<HashMap<String, (DriverKey, Arc<FredDriver>)>>,
    /// Consecutive failed reconciles per object (`controller/namespace/name`), for backoff.
    failures: std::sync::Mutex<HashMap<String, u32>>,
    /// Clusters admitted to run a rolling replacement (see `admit_rollout`).
    rollouts: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// When each pod (`namespace/name`) was last asked to refresh its Secret volumes.
    secret_refreshes: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// Until when this replica surely holds the leader lease (see [`Context::confirm_leading`]).
    lease_fence: std::sync::Mutex<Option<std::time::Instant>>,
    /// Each cluster as this replica last wrote its status, until the store catches up (see
    /// [`cluster::written`]).
    pub cluster_status_writes: cluster::written::StatusWrites,
    /// The address of each durable member's last pod, until its replacement may start (see
    /// [`node::fence`]).
    pub last_member_pods: node::fence::LastPods,
}

impl Context {
    pub fn new(
        client: Client,
        operator_namespace: String,
        menu: MenuStores,
        settings: Settings,
        metrics: Arc<Metrics>,
        election: Option<leader::Election>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "valkey-operator".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Context {
            client,
            operator_namespace,
            menu,
            settings,
            recorder,
            metrics,
            menu_synced: std::sync::atomic::AtomicBool::new(false),
            election,
            drivers: Mutex::new(HashMap::new()),
            failures: std::sync::Mutex::new(HashMap::new()),
            rollouts: Default::default(),
            secret_refreshes: Default::default(),
            lease_fence: std::sync::Mutex::new(None),
            cluster_status_writes: Default::default(),
            last_member_pods: Default::default(),
        }
    }

    /// May this replica act now? With leader election: yes while what the Lease last said
    /// still holds (its expiry as a standby sees it, less a margin: see
    /// [`leader::lease_left`]), else only once the API server confirms it again. A monotonic
    /// clock keeps the fence right across a freeze (SIGSTOP, a stalled VM): a leader that
    /// wakes past its lease asks first, and exits if another replica holds it. Checked before
    /// every step acted on, so in-flight work stops before a standby can take over; an API
    /// server that does not answer stops it too.
    pub async fn confirm_leading(&self) -> Result<(), Error> {
        let Some(election) = &self.election else {
            return Ok(());
        };
        let now = std::time::Instant::now();
        let fence = *self.lease_fence.lock().unwrap_or_else(|e| e.into_inner());
        if fence.is_some_and(|until| now < until) {
            return Ok(());
        }
        let left = leader::verify_still_leading(&self.client, election).await?;
        if left.is_zero() {
            return Err(Error::LeaseUnconfirmed {
                lease: format!("{}/{}", election.namespace, election.lease),
            });
        }
        *self.lease_fence.lock().unwrap_or_else(|e| e.into_inner()) = Some(now + left);
        Ok(())
    }

    /// How long to wait before retrying an object whose reconcile just failed: 2 s after the
    /// first failure, doubling with each consecutive one, at most 30 s, so a cluster that
    /// keeps failing (API refusing, Valkey unreachable) does not hammer either. Watch events
    /// (a pod turning ready, a spec change) still reconcile at once.
    pub fn failure_backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        backoff_after(*n)
    }

    /// What every controller's error policy returns: the next try after this object's backoff
    /// ([`Self::failure_backoff`]), the failure logged (`controller`, `object`, `error`,
    /// `retry_in`) and counted by controller and kind of error.
    pub fn retry_after_failure<K: ResourceExt>(
        &self,
        controller: &'static str,
        object: &K,
        error: &Error,
    ) -> Action {
        let key = object_key(object);
        let retry = self.failure_backoff(&format!("{controller}/{key}"));
        tracing::warn!(controller, object = %key, error = %error, retry_in = ?retry, "reconcile failed");
        self.metrics
            .reconcile_failed(controller, error.metric_label());
        Action::requeue(retry)
    }

    /// After `controller` reconciled `object`: a success resets its failure backoff (the one
    /// [`Self::retry_after_failure`] grows), so its next failure waits 2 s again.
    pub fn settle<K: ResourceExt, T>(
        &self,
        controller: &'static str,
        object: &K,
        result: &Result<T, Error>,
    ) {
        if result.is_ok() {
            self.reconciled(&format!("{controller}/{}", object_key(object)));
        }
    }

    /// A reconcile succeeded: the next failure starts the backoff again.
    pub fn reconciled(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(key);
    }

    /// The driver for a cluster, authenticated as the operator's ACL user, over TLS verifying
    /// `tls` when set. A new password or CA bundle builds a new driver (new connections).
    pub async fn driver(
        &self,
        key: &str,
        password: &str,
        tls: Option<TlsSettings>,
    ) -> Arc<FredDriver> {
        let mut drivers = self.drivers.lock().await;
        let wanted = DriverKey {
            password: password.to_string(),
            tls,
        };
        if let Some((known, driver)) = drivers.get(key)
            && *known == wanted
        {
            return driver.clone();
        }
        let mut config = DriverConfig::new(Credentials {
            username: crate::api::constants::OPERATOR_ACL_USERNAME.to_string(),
            password: password.to_string(),
        });
        config.tls = wanted.tls.clone();
        config.connect_timeout = Duration::from_secs(3);
        config.command_timeout = Duration::from_secs(10);
        config.observer = Some(self.metrics.clone());
        let driver = Arc::new(FredDriver::new(config));
        drivers.insert(key.to_string(), (wanted, driver.clone()));
        driver
    }

    /// Closes every cluster's connections idle for `idle_for` (see `FredDriver::close_idle`).
    pub async fn close_idle_connections(&self, idle_for: Duration) -> usize {
        let drivers: Vec<Arc<FredDriver>> = self
            .drivers
            .lock()
            .await
            .values()
            .map(|(_, d)| d.clone())
            .collect();
        let mut closed = 0;
        for driver in drivers {
            closed += driver.close_idle(idle_for).await;
        }
        closed
    }

    pub async fn forget_driver(&self, key: &str) {
        self.drivers.lock().await.remove(key);
    }

    /// Whether cluster `key` may take its next rolling-replacement step under the
    /// `maxConcurrentRollouts` setting; `started` says it already has replacement members (a
    /// rollout under way, say from before an operator restart, is never stopped half way).
    /// Err carries how many clusters are rolling.
    pub fn admit_rollout(&self, key: &str, started: bool) -> Result<(), usize> {
        let mut admitted = self.rollouts.lock().unwrap_or_else(|e| e.into_inner());
        admit(
            &mut admitted,
            key,
            started,
            self.settings.max_concurrent_rollouts,
        )
    }

    /// Cluster `key` has no outdated member any more: its rollout slot is free.
    pub fn rollout_done(&self, key: &str) {
        let mut admitted = self.rollouts.lock().unwrap_or_else(|e| e.into_inner());
        admitted.remove(key);
    }

    /// Whether member pod `key` (`namespace/name`), whose Secret volume is still stale, should
    /// be nudged again (see [`ANNOTATION_SECRETS_REFRESH`]); records the nudge when it is.
    /// At most one nudge per [`SECRET_REFRESH_EVERY`]: the kubelet may sync just before its
    /// Secret cache sees the new revision, so one nudge is not always enough.
    ///
    /// [`ANNOTATION_SECRETS_REFRESH`]: crate::api::constants::ANNOTATION_SECRETS_REFRESH
    pub fn secret_refresh_due(&self, key: &str) -> bool {
        let mut last = self
            .secret_refreshes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        let due = last
            .get(key)
            .is_none_or(|at| now.duration_since(*at) >= SECRET_REFRESH_EVERY);
        if due {
            last.insert(key.to_string(), now);
        }
        due
    }

    /// Drops what memory holds for objects that no longer exist (a deleted cluster is not
    /// reconciled once it is gone from the cache): driver connections of clusters not in
    /// `clusters` and failure counts of clusters and members not in `clusters`/`nodes`
    /// (`namespace/name` keys). Returns how many entries went.
    pub async fn retain_live(
        &self,
        clusters: &std::collections::BTreeSet<String>,
        nodes: &std::collections::BTreeSet<String>,
    ) -> usize {
        let mut dropped = 0;
        {
            let mut drivers = self.drivers.lock().await;
            let before = drivers.len();
            drivers.retain(|key, _| clusters.contains(key));
            dropped += before - drivers.len();
        }
        {
            let mut admitted = self.rollouts.lock().unwrap_or_else(|e| e.into_inner());
            let before = admitted.len();
            admitted.retain(|key| clusters.contains(key));
            dropped += before - admitted.len();
        }
        {
            let mut nudged = self
                .secret_refreshes
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let before = nudged.len();
            nudged.retain(|key, _| nodes.contains(key));
            dropped += before - nudged.len();
        }
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let before = failures.len();
        failures.retain(|key, _| failure_key_is_live(key, clusters, nodes));
        dropped + before - failures.len()
    }
}

/// How often a member pod whose Secret volume stays stale is nudged again.
pub const SECRET_REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// What a cached driver was built from.
#[derive(PartialEq, Eq)]
struct DriverKey {
    password: String,
    tls: Option<TlsSettings>,
}

/// Admission to the rollout slots: a cluster already admitted or already under way goes on;
/// another is admitted while fewer than `limit` are. Err: how many are rolling.
fn admit(
    admitted: &mut std::collections::BTreeSet<String>,
    key: &str,
    started: bool,
    limit: Option<usize>,
) -> Result<(), usize> {
    if admitted.contains(key) {
        return Ok(());
    }
    if started || limit.is_none_or(|l| admitted.len() < l) {
        admitted.insert(key.to_string());
        return Ok(());
    }
    Err(admitted.len())
}

/// Whether a failure count's key (`cluster/<ns>/<name>` or `node/<ns>/<name>`) names an object
/// that still exists; unknown kinds are kept.
fn failure_key_is_live(
    key: &str,
    clusters: &std::collections::BTreeSet<String>,
    nodes: &std::collections::BTreeSet<String>,
) -> bool {
    match key.split_once('/') {
        Some(("cluster", k)) => clusters.contains(k),
        Some(("node", k)) => nodes.contains(k),
        _ => true,
    }
}

/// Delay before the retry after `failures` consecutive failures (1-based).
pub fn backoff_after(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(2);
    const MAX: Duration = Duration::from_secs(30);
    FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX)
}

/// Why a reconcile failed. Each variant has a metric label.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Valkey: {0}")]
    Driver(#[from] crate::driver::DriverError),
    #[error("{0}")]
    Invalid(String),
    /// An object the operator would create exists and is not this cluster's: it is left
    /// untouched and the cluster is blocked until the name is free.
    #[error(
        "{kind} {namespace}/{name} already exists and was not created by valkey-operator for this ValkeyCluster; the operator leaves it untouched. Rename or delete that {kind}, or give the ValkeyCluster another name"
    )]
    NameTaken {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The operator's credentials Secret of a formed cluster is gone (or is not this
    /// cluster's): its members still hold the old passwords, so new ones would lock the
    /// operator out for good. Nothing is regenerated; the cluster is blocked until it is back.
    #[error(
        "the operator's credentials Secret {namespace}/{name} for this cluster is {why}, and the cluster's members still use the passwords it held: the operator does not generate new ones (the members would refuse them) and changes nothing until it is back. Restore it from your backup (kubectl apply -f <backup of {namespace}/{name}>); see docs/operations.md, \"What to back up\""
    )]
    CredentialsMissing {
        namespace: String,
        name: String,
        why: &'static str,
    },
    /// This replica holds the leader lease, but the lease has not been renewed in time to
    /// cover another step: it stops acting until a renewal shows (a standby may take over).
    #[error(
        "the leader lease {lease} was not renewed in time to cover another step; stopping this round before acting (it goes on once the lease is renewed; if this repeats, the operator cannot reach the API server in time)"
    )]
    LeaseUnconfirmed { lease: String },
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Driver(_) => "valkey",
            Error::Invalid(_) => "invalid",
            Error::NameTaken { .. } => "name_taken",
            Error::CredentialsMissing { .. } => "credentials_missing",
            Error::LeaseUnconfirmed { .. } => "lease_unconfirmed",
        }
    }
}

/// Namespace/name key of an object.
pub fn object_key<K: ResourceExt>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    /// A failure grows the object's backoff (2 s, 4 s, ...) and a success of the same
    /// controller on it starts it over; another controller's key is its own. The backup and
    /// restore controllers never started it over before (each failure after a few waited 30 s).
    #[tokio::test]
    async fn a_success_starts_the_failure_backoff_over() {
        let (ctx, _server) = crate::controller::testing::context();
        let cluster = crate::controller::testing::cluster(serde_json::Value::Null);
        let failed = || Error::Invalid("refused".into());
        assert_eq!(
            ctx.retry_after_failure("restore", &cluster, &failed()),
            Action::requeue(Duration::from_secs(2))
        );
        assert_eq!(
            ctx.retry_after_failure("restore", &cluster, &failed()),
            Action::requeue(Duration::from_secs(4))
        );
        ctx.settle("backup", &cluster, &Ok::<(), Error>(()));
        assert_eq!(
            ctx.retry_after_failure("restore", &cluster, &failed()),
            Action::requeue(Duration::from_secs(8)),
            "another controller's success is not this one's"
        );
        ctx.settle("restore", &cluster, &Err::<(), _>(failed()));
        ctx.settle("restore", &cluster, &Ok::<(), Error>(()));
        assert_eq!(
            ctx.retry_after_failure("restore", &cluster, &failed()),
            Action::requeue(Duration::from_secs(2))
        );
    }

    #[test]
    fn rollouts_are_admitted_up_to_the_limit_and_started_ones_always() {
        let mut admitted = std::collections::BTreeSet::new();
        assert_eq!(admit(&mut admitted, "a", false, Some(2)), Ok(()));
        assert_eq!(admit(&mut admitted, "b", false, Some(2)), Ok(()));
        assert_eq!(admit(&mut admitted, "c", false, Some(2)), Err(2));
        assert_eq!(
            admit(&mut admitted, "a", false, Some(2)),
            Ok(()),
            "admitted stays"
        );
        assert_eq!(
            admit(&mut admitted, "d", true, Some(2)),
            Ok(()),
            "under way goes on"
        );
        admitted.remove("a");
        admitted.remove("b");
        assert_eq!(admit(&mut admitted, "c", false, Some(2)), Ok(()));
        assert_eq!(admit(&mut admitted, "e", false, None), Ok(()), "no limit");
    }

    #[test]
    fn failure_counts_of_deleted_objects_are_dropped() {
        let clusters = std::collections::BTreeSet::from(["ns/a".to_string()]);
        let nodes = std::collections::BTreeSet::from(["ns/a-0-0".to_string()]);
        assert!(failure_key_is_live("cluster/ns/a", &clusters, &nodes));
        assert!(!failure_key_is_live("cluster/ns/gone", &clusters, &nodes));
        assert!(failure_key_is_live("node/ns/a-0-0", &clusters, &nodes));
        assert!(!failure_key_is_live("node/ns/a-0-1", &clusters, &nodes));
        assert!(
            !failure_key_is_live("node/ns/a", &clusters, &nodes),
            "kinds are not mixed"
        );
        assert!(failure_key_is_live("other/x", &clusters, &nodes));
    }

    #[test]
    fn retries_back_off_exponentially_up_to_30_seconds() {
        let delays: Vec<u64> = (1..=6).map(|n| backoff_after(n).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff_after(u32::MAX), Duration::from_secs(30));
    }
}
