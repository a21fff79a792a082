//! Logging setup, Prometheus metrics, the admin server (/metrics, /healthz, /readyz) and
//! OTLP traces.

pub mod metering;
pub mod traces;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

/// A reconcile's controller and how it ended (`ok` or `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// One ValkeyCluster and its state, so an alert can name the cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub namespace: String,
    pub name: String,
    pub state: String,
}

/// One ValkeyCluster, for its per-cluster figures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterKey {
    pub namespace: String,
    pub name: String,
}

/// One admission webhook and its answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabel {
    pub webhook: String,
    pub allowed: String,
}

/// A Valkey command, by name (no arguments).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabel {
    pub command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabel {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: String,
}

/// How a failover was run: `coordinated` (with the primary, nothing lost), `force` (without
/// the primary, with a majority) or `takeover` (without any agreement, the last resort).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailoverLabel {
    pub mode: &'static str,
}

impl FailoverLabel {
    pub const MODES: [&'static str; 3] = ["coordinated", "force", "takeover"];
}

/// The operator's metrics. Names follow the words used in the API and docs.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    pub reconcile_errors: Family<ErrorLabel, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    pub clusters: Family<StateLabel, Gauge>,
    /// 1 for each ValkeyCluster, labelled with its namespace, name and state.
    pub cluster_info: Family<ClusterLabel, Gauge>,
    /// Per ValkeyCluster: members its spec asks for, members ready (running, answering, in
    /// the cluster), slots still to move, members still on an outdated spec.
    pub cluster_members: Family<ClusterKey, Gauge>,
    pub cluster_members_ready: Family<ClusterKey, Gauge>,
    pub cluster_slots_to_move: Family<ClusterKey, Gauge>,
    pub cluster_members_outdated: Family<ClusterKey, Gauge>,
    /// TLS clusters: when the first certificate of their chain expires (Unix seconds).
    pub cluster_certificate_not_after: Family<ClusterKey, Gauge>,
    pub topology_actions: Family<ActionLabel, Counter>,
    pub failovers: Family<FailoverLabel, Counter>,
    /// Slots (not jobs) the operator started moving.
    pub slots_moved: Counter,
    pub rollouts_in_progress: Gauge,
    /// 1 while this replica holds the leader lease and runs the controllers.
    pub leader: Gauge,
    pub webhook_duration: Family<PathLabel, Histogram>,
    pub webhook_admissions: Family<AdmissionLabel, Counter>,
    pub valkey_command_duration: Family<CommandLabel, Histogram>,
    pub valkey_command_errors: Family<CommandLabel, Counter>,
    /// Clusters with a rolling replacement under way (the gauge is its size).
    rolling_out: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("valkey_operator"),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            clusters: Family::default(),
            cluster_info: Family::default(),
            cluster_members: Family::default(),
            cluster_members_ready: Family::default(),
            cluster_slots_to_move: Family::default(),
            cluster_members_outdated: Family::default(),
            cluster_certificate_not_after: Family::default(),
            topology_actions: Family::default(),
            failovers: Family::default(),
            slots_moved: Counter::default(),
            rollouts_in_progress: Gauge::default(),
            leader: Gauge::default(),
            webhook_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 16))
            }),
            webhook_admissions: Family::default(),
            valkey_command_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            valkey_command_errors: Family::default(),
            rolling_out: Default::default(),
            ready: AtomicBool::new(false),
        };
        // Every failover mode from 0: a rate over a mode that has not happened yet is 0, not
        // absent, and the family is on the page before the first failover.
        for mode in FailoverLabel::MODES {
            metrics
                .failovers
                .get_or_create(&FailoverLabel { mode })
                .inc_by(0);
        }
        // The registry holds clones: handles on the same values the fields update. The order
        // of registration is the order of the /metrics page.
        metrics.register_build_info();
        metrics.register_reconcile_metrics();
        metrics.register_cluster_metrics();
        metrics.register_action_metrics();
        metrics.register_webhook_and_valkey_metrics();
        metrics
    }

    /// `build_info`: set once, never touched again, so not kept in a field.
    fn register_build_info(&mut self) {
        let build_info = Family::<VersionLabel, Gauge>::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        self.registry.register(
            "build_info",
            "1, labelled with the operator's version",
            build_info,
        );
    }

    fn register_reconcile_metrics(&mut self) {
        let r = &mut self.registry;
        r.register(
            "reconciles",
            "Reconciles run, per controller and result (ok or error)",
            self.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and error kind",
            self.reconcile_errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration, per controller",
            self.reconcile_duration.clone(),
        );
    }

    fn register_cluster_metrics(&mut self) {
        let r = &mut self.registry;
        r.register(
            "clusters",
            "ValkeyClusters per state",
            self.clusters.clone(),
        );
        r.register(
            "cluster_info",
            "1 per ValkeyCluster, labelled with its namespace, name and current state (alert on state=\"Degraded\" naming the cluster)",
            self.cluster_info.clone(),
        );
        r.register(
            "cluster_members",
            "Members a ValkeyCluster's spec asks for (shards x (1 + replicasPerShard))",
            self.cluster_members.clone(),
        );
        r.register(
            "cluster_members_ready",
            "Members of a ValkeyCluster that run, answer and are part of the cluster",
            self.cluster_members_ready.clone(),
        );
        r.register(
            "cluster_slots_to_move",
            "Hash slots a ValkeyCluster still has to move between shards (scaling, rebalancing)",
            self.cluster_slots_to_move.clone(),
        );
        r.register(
            "cluster_members_outdated",
            "Members of a ValkeyCluster still running an outdated spec (rollout progress: 0 when done)",
            self.cluster_members_outdated.clone(),
        );
        r.register(
            "cluster_certificate_not_after_seconds",
            "TLS ValkeyClusters: when the first certificate of the chain the members serve expires, in Unix seconds (condition CertificateExpiringSoon turns True 30 days before)",
            self.cluster_certificate_not_after.clone(),
        );
    }

    fn register_action_metrics(&mut self) {
        let r = &mut self.registry;
        r.register(
            "topology_actions",
            "Topology actions taken (meet, assign slots, replicate, ...)",
            self.topology_actions.clone(),
        );
        r.register(
            "failovers",
            "Failovers the operator initiated, by mode (coordinated, force, takeover)",
            self.failovers.clone(),
        );
        r.register(
            "slots_moved",
            "Hash slots the operator started moving between shards (each slot counts once)",
            self.slots_moved.clone(),
        );
        r.register(
            "rollouts_in_progress",
            "Rolling replacements in progress",
            self.rollouts_in_progress.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease and runs the controllers, 0 while it stands by (serving webhooks only)",
            self.leader.clone(),
        );
    }

    fn register_webhook_and_valkey_metrics(&mut self) {
        let r = &mut self.registry;
        r.register(
            "webhook_request_duration_seconds",
            "Admission and conversion request handling time, per webhook",
            self.webhook_duration.clone(),
        );
        r.register(
            "webhook_admissions",
            "Admission reviews answered, per webhook and answer (allowed true or false)",
            self.webhook_admissions.clone(),
        );
        r.register(
            "valkey_command_duration_seconds",
            "Round trip of the operator's commands to Valkey members (connection included), per command",
            self.valkey_command_duration.clone(),
        );
        r.register(
            "valkey_command_errors",
            "Commands to Valkey members that failed (refused, timed out, connection lost), per command",
            self.valkey_command_errors.clone(),
        );
    }

    /// Records one reconcile: how long it took and how it ended.
    pub fn reconciled(&self, controller: &str, started: Instant, ok: bool) {
        self.reconciles
            .get_or_create(&ResultLabel {
                controller: controller.to_string(),
                result: if ok { "ok" } else { "error" }.to_string(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabel {
                controller: controller.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Records one admission review's answer.
    pub fn admission(&self, webhook: &str, allowed: bool) {
        self.webhook_admissions
            .get_or_create(&AdmissionLabel {
                webhook: webhook.to_string(),
                allowed: allowed.to_string(),
            })
            .inc();
    }

    /// Sets a cluster's per-cluster figures.
    pub fn cluster_figures(&self, key: &ClusterKey, figures: ClusterFigures) {
        self.cluster_members.get_or_create(key).set(figures.members);
        self.cluster_members_ready
            .get_or_create(key)
            .set(figures.members_ready);
        self.cluster_slots_to_move
            .get_or_create(key)
            .set(figures.slots_to_move);
        self.cluster_members_outdated
            .get_or_create(key)
            .set(figures.members_outdated);
    }

    /// Drops a deleted cluster's per-cluster figures.
    pub fn forget_cluster(&self, key: &ClusterKey) {
        self.cluster_members.remove(key);
        self.cluster_members_ready.remove(key);
        self.cluster_slots_to_move.remove(key);
        self.cluster_members_outdated.remove(key);
    }

    pub fn reconcile_failed(&self, controller: &str, error: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabel {
                controller: controller.to_string(),
                error: error.to_string(),
            })
            .inc();
    }

    /// Records whether a cluster is rolling out (some member runs an outdated spec).
    pub fn rollout(&self, cluster: &str, in_progress: bool) {
        let mut set = self.rolling_out.lock().unwrap_or_else(|e| e.into_inner());
        if in_progress {
            set.insert(cluster.to_owned());
        } else {
            set.remove(cluster);
        }
        self.rollouts_in_progress.set(set.len() as i64);
    }

    /// Records how long one webhook request took to handle.
    pub fn webhook_latency(&self, path: &str, took: std::time::Duration) {
        self.webhook_duration
            .get_or_create(&PathLabel {
                path: path.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn action(&self, action: &str) {
        self.topology_actions
            .get_or_create(&ActionLabel {
                action: action.to_string(),
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String cannot fail");
        out
    }
}

/// A ValkeyCluster's figures, as its status reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterFigures {
    pub members: i64,
    pub members_ready: i64,
    pub slots_to_move: i64,
    pub members_outdated: i64,
}

/// The driver's commands, timed and counted.
impl crate::driver::CommandObserver for Metrics {
    fn observe_command(&self, command: &str, took: std::time::Duration, ok: bool) {
        let label = CommandLabel {
            command: command.to_string(),
        };
        self.valkey_command_duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if !ok {
            self.valkey_command_errors.get_or_create(&label).inc();
        }
    }
}

/// The classic Prometheus text format (0.0.4) of an OpenMetrics page: a counter family is named
/// with its `_total` suffix in HELP and TYPE (OpenMetrics names the family without it), and
/// the OpenMetrics-only lines (`# UNIT`, `# EOF`) go.
pub fn openmetrics_to_text(page: &str) -> String {
    let counters: std::collections::HashSet<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(page.len() + 64);
    for line in page.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Serves /metrics, /healthz and /readyz (ready once the controllers' caches are synced, or at
/// once on a replica standing by for the leader lease: it serves the webhooks only).
pub async fn serve_admin(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    // OpenMetrics for scrapers that ask for it (Prometheus does), the classic text format
    // otherwise (curl, promtool, older scrapers).
    async fn metrics_handler(
        State(m): State<Arc<Metrics>>,
        headers: axum::http::HeaderMap,
    ) -> impl IntoResponse {
        let openmetrics = headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("application/openmetrics-text"));
        if openmetrics {
            (
                [(
                    header::CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                m.encode(),
            )
        } else {
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                openmetrics_to_text(&m.encode()),
            )
        }
    }
    async fn ready_handler(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
        if m.ready.load(Ordering::Relaxed) {
            (StatusCode::OK, "ok")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "caches syncing")
        }
    }
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(metrics);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}

/// JSON or human logs, filtered by RUST_LOG (default info), and OpenTelemetry traces over
/// OTLP when an endpoint is configured ([`traces`]). Returns the tracer provider to shut down
/// (flush) at exit.
pub fn init_logging() -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,fred=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|f| f == "json");
    let logs = if json {
        fmt::layer().json().boxed()
    } else {
        // Colours only on a terminal: `kubectl logs` of the container showed the escape codes.
        fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .boxed()
    };
    let (provider, trace_error) = match traces::provider_from_env() {
        Ok(provider) => (provider, None),
        Err(e) => (None, Some(e)),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(provider.as_ref().map(traces::layer))
        .init();
    match (&provider, trace_error) {
        (_, Some(e)) => tracing::warn!(error = %e, "traces are not exported"),
        (Some(_), None) => tracing::info!("exporting traces over OTLP"),
        (None, None) => {}
    }
    provider
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_metrics_are_exported_per_controller() {
        let m = Metrics::new();
        m.reconciled("cluster", Instant::now(), false);
        m.reconcile_failed("cluster", "kube");
        let text = m.encode();
        assert!(
            text.contains(
                "valkey_operator_reconciles_total{controller=\"cluster\",result=\"error\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains(
            "valkey_operator_reconcile_errors_total{controller=\"cluster\",error=\"kube\"} 1"
        ));
        assert!(text.contains(
            "valkey_operator_reconcile_duration_seconds_count{controller=\"cluster\"} 1"
        ));
    }
}

#[cfg(test)]
mod text_format_tests {
    use super::*;

    #[test]
    fn every_metric_is_declared_before_its_first_sample() {
        // What e2e/metrics.txt lists, the operability suite finds on /metrics even when
        // nothing happened yet (no failover, no slot moved), every failover mode at 0.
        let text = openmetrics_to_text(&Metrics::new().encode());
        for family in ["failovers_total", "slots_moved_total"] {
            let declared = format!("# TYPE valkey_operator_{family} counter");
            assert!(text.contains(&declared), "{declared} missing:\n{text}");
        }
        for mode in FailoverLabel::MODES {
            let zero = format!("valkey_operator_failovers_total{{mode=\"{mode}\"}} 0");
            assert!(text.contains(&zero), "{zero} missing:\n{text}");
        }
    }

    #[test]
    fn counters_are_named_with_total_and_openmetrics_lines_go() {
        let m = Metrics::new();
        m.failovers
            .get_or_create(&FailoverLabel {
                mode: "coordinated",
            })
            .inc();
        m.reconciled("cluster", Instant::now(), true);
        let text = openmetrics_to_text(&m.encode());
        assert!(
            text.contains("# HELP valkey_operator_failovers_total "),
            "{text}"
        );
        assert!(
            text.contains("# TYPE valkey_operator_failovers_total counter"),
            "{text}"
        );
        assert!(
            text.contains("valkey_operator_failovers_total{mode=\"coordinated\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE valkey_operator_reconciles_total counter"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT "),
            "{text}"
        );
        // Every sample's family has HELP and TYPE lines under the sample's own base name.
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|b| text.contains(&format!("# TYPE {b} histogram")))
                })
                .unwrap_or(name);
            assert!(
                text.contains(&format!("# HELP {base} ")),
                "no HELP for {name}"
            );
        }
    }
}
