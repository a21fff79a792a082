//! docs/benchmarks.md from vk-bench's figures: a Markdown page with the runs' metadata, the
//! goals of issue 19 (met or not), and per benchmark an SVG plot, the raw figures and what
//! they measure.
//!
//! vk-bench fills a [`Report`] with the sections it measured and calls [`Report::publish`].
//! The figures of every section live in docs/benchmarks/figures.json: publishing loads them,
//! replaces the sections this run measured and writes everything again, so
//! `vk-bench --only formation` refreshes the formation section and keeps the others (each
//! section says which run measured it).

mod goals;
mod markdown;
mod plot;
mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use sections::Benchmark;

pub use goals::{Goal, Verdict};

/// The page, relative to the repository root.
pub const MARKDOWN: &str = "docs/benchmarks.md";
/// The plots and figures.json, relative to the repository root.
pub const FIGURES_DIR: &str = "docs/benchmarks";
/// Every section's figures, the input of the next partial run.
pub const FIGURES_JSON: &str = "docs/benchmarks/figures.json";

/// Valkey Cluster's slot count: the share of keys a slot move carries is slots / SLOTS.
const SLOTS: f64 = 16384.0;

/// The repository this crate is built from (vk-bench writes the report there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ is inside the repository")
        .to_path_buf()
}

/// Median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

/// Percentile `p` (0..=1) of ascending `sorted`: the value at index round((n - 1) × p), as
/// vk-bench has always taken it; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[(last as f64 * p).round() as usize])
}

fn ratio_of(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    Some(numerator? / denominator.filter(|d| *d > 0.0)?)
}

/// The operator's seconds next to the floor measured in the same run: a formation run, a
/// shard's rollout, a failover run. Their tables, plots and medians are built the same way.
pub trait AgainstFloor {
    fn floor(&self) -> f64;
    fn operator(&self) -> f64;

    fn ratio(&self) -> Option<f64> {
        ratio_of(Some(self.operator()), Some(self.floor()))
    }
}

/// Medians of a section's floors and operator figures, each on its own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Medians {
    pub floor_seconds: Option<f64>,
    pub operator_seconds: Option<f64>,
}

impl Medians {
    pub fn of<T: AgainstFloor>(runs: &[T]) -> Medians {
        let of = |figure: fn(&T) -> f64| median(&runs.iter().map(figure).collect::<Vec<_>>());
        Medians {
            floor_seconds: of(T::floor),
            operator_seconds: of(T::operator),
        }
    }

    /// Median operator over median floor.
    pub fn ratio(&self) -> Option<f64> {
        ratio_of(self.operator_seconds, self.floor_seconds)
    }
}

/// The benchmarks, in the page's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Section {
    Formation,
    Rollout,
    SlotMove,
    Fleet,
    Webhook,
    Failover,
    Durability,
    RealClients,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::Formation,
        Section::Rollout,
        Section::SlotMove,
        Section::Fleet,
        Section::Webhook,
        Section::Failover,
        Section::Durability,
        Section::RealClients,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Section::Formation => "Formation",
            Section::Rollout => "Rolling replacement",
            Section::SlotMove => "Slot move (shard scale-out 3 → 5)",
            Section::Fleet => "Fleet",
            Section::Webhook => "Webhook",
            Section::Failover => "Failover",
            Section::Durability => "Durability (full restart, write throughput with AOF)",
            Section::RealClients => "Real clients through planned operations (TLS)",
        }
    }

    /// File stem of the section's plot: docs/benchmarks/<stem>.svg.
    pub fn stem(self) -> &'static str {
        match self {
            Section::Formation => "formation",
            Section::Rollout => "rollout",
            Section::SlotMove => "slot-move",
            Section::Fleet => "fleet",
            Section::Webhook => "webhook",
            Section::Failover => "failover",
            Section::Durability => "durability",
            Section::RealClients => "real-clients",
        }
    }

    /// vk-bench's `--only` value that measures this section.
    pub fn only_flag(self) -> &'static str {
        match self {
            Section::SlotMove => "scaling",
            Section::RealClients => "clients",
            other => other.stem(),
        }
    }

    /// What the section measures (from vk-bench's module documentation).
    fn about(self) -> &'static str {
        match self {
            Section::Formation => {
                "Time-to-Active of a 3-shard × 1-replica ValkeyCluster (from the apply until its \
                 status says Active), next to the formation floor measured in the same run: \
                 `valkey-cli --cluster create` of 6 fresh valkey-servers of the same build into \
                 the same shape (`--cluster-replicas 1`), until every member reports \
                 `cluster_state:ok`, knows all six and sees the same slot owners, with no \
                 Kubernetes in between. The ratio is of the medians."
            }
            Section::Rollout => {
                "Rolling replacement of a 3 × 1 cluster from Valkey 9.0.0 to 9.1.2 by repointing \
                 its ValkeyImage: the operator's seconds per shard next to the floor vk-bench \
                 measures for the same replacement, and the longest pause a writer saw during the \
                 operator's rollout. The goal is checked on the worst shard."
            }
            Section::SlotMove => {
                "Shard scale-out 3 → 5 of a 3 × 1 cluster holding the same preloaded keys: atomic \
                 slot migration (CLUSTER MIGRATESLOTS) against key-by-key MIGRATE (the \
                 `valkey.gomomento.com/slot-migration: keys` annotation). The operator's slot move \
                 is set next to the raw floor (the same slots moved by CLUSTER MIGRATESLOTS sent \
                 directly, and by `valkey-cli --cluster reshard` for key by key); the whole \
                 scale-out runs from `spec.shards: 5` until the cluster is Active again. The \
                 atomic move runs from the first export job seen on a source primary to the last \
                 one seen finished (asked every 20 ms); the key-by-key move leaves no job record, \
                 so its goal is checked on the whole key-by-key scale-out, an upper bound."
            }
            Section::Fleet => {
                "1 × 0 ValkeyClusters (a config requesting 10m CPU and 64Mi per member) added \
                 until there are 10, 50, 100, then 200: the seconds until each step settles \
                 (every cluster Active, or waiting only for a pod the local nodes have no room \
                 for: they hold 110 pods and 2 CPUs each) and the operator's resident memory \
                 (its largest replica) at each step, then the reconciles per minute once \
                 everything is at rest. One cluster alone is timed first; most of its time is \
                 Valkey's: a new primary keeps its cluster state FAIL for 2 s after it starts. \
                 Then utilization sampling's cost: the operator restarted with \
                 `utilizationSampling` off, then on, each time measured at rest after its resync \
                 (issue 30 allows at most 10 % more RSS and reconciles per minute with it on)."
            }
            Section::Webhook => {
                "Latency of admission reviews sent straight to the operator's webhook over HTTPS \
                 at a steady rate (open loop: a request leaves every 1/rate seconds whatever the \
                 previous ones do), after a warm-up. A ValkeyRole review is pure; a ValkeyCluster \
                 review reads the menu from the API server."
            }
            Section::Failover => {
                "Write-back time: from SIGKILL of a primary's valkey-server until its replica is \
                 a primary serving the shard's slots (asked every 20 ms), for a 3 × 1 \
                 ValkeyCluster on the menu's default settings, next to the native floor in the \
                 same run: a bare 3 × 1 cluster of the same build and `cluster-node-timeout` \
                 (5000) failing over by itself. Also the write-back after `kubectl delete pod` of \
                 a primary (the API says the pod is gone: no node timeout to wait for)."
            }
            Section::Durability => {
                "A 2 × 1 cluster with member volumes (`storage`, `appendonly yes`, \
                 `appendfsync everysec`) and a memory-only 2 × 1 cluster, measured in the same \
                 run. Full restart: 100,000 keys written and replicated, then every member pod \
                 force-deleted at once; seconds until the cluster is Active again with every new \
                 pod Ready (the operator's holds-data gate), and the keys that did not read back. \
                 Write throughput: SETs per second of one client sending one SET at a time for \
                 the same duration on each, and their ratio (volumes over memory-only)."
            }
            Section::RealClients => {
                "The client programs of docs/connect.md, extracted from the page and run as \
                 written (Python valkey-py, Go valkey-go, Java Lettuce, Node.js iovalkey), and \
                 the bench's own writer (fred), all at once against a 3 × 1 TLS cluster \
                 (cert-manager's certificate, an ACL user), seeded with the client Service's \
                 name and resolving names through the cluster DNS as a pod does, through a \
                 scale-out 3 → 4, a scale-in 4 → 3, a rolling replacement of every member and \
                 `kubectl delete pod` of a primary (default grace). Per client: the writes \
                 acknowledged, the attempts that failed (each retried), the acknowledged writes \
                 that did not read back afterwards, and the longest time between two \
                 acknowledgements (the programs pause 10 ms between writes, the bench's writer \
                 5 ms)."
            }
        }
    }
}

/// The run that measured a section: where, on what, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// "YYYY-MM-DD HH:MM UTC".
    pub date_utc: String,
    /// Short commit, with "-dirty" when the work tree had uncommitted changes.
    pub commit: String,
    pub cores: usize,
    pub memory_gib: f64,
    /// "release" or "debug": how the operator under test was built.
    pub operator_build: String,
    pub valkey_versions: Vec<String>,
    pub command: String,
}

impl Metadata {
    /// This machine and checkout now. The operator always runs from its image, the static
    /// release build (e2e/release-build.sh).
    pub fn collect(repo_root: &Path, command: &str, valkey_versions: &[&str]) -> Metadata {
        Metadata {
            date_utc: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            commit: git_commit(repo_root).unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: total_memory_gib().unwrap_or(0.0),
            operator_build: "release".into(),
            valkey_versions: valkey_versions.iter().map(|v| v.to_string()).collect(),
            command: command.to_string(),
        }
    }

    fn machine(&self) -> String {
        format!("{} cores, {:.1} GiB", self.cores, self.memory_gib)
    }
}

fn git_commit(repo_root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo_root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    // Figures of uncommitted code cannot be traced back to a commit: say so.
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

fn total_memory_gib() -> Option<f64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / (1024.0 * 1024.0))
}

/// A measurement and its floor from the same run, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorAndOperator {
    pub floor_seconds: f64,
    pub operator_seconds: f64,
}

impl AgainstFloor for FloorAndOperator {
    fn floor(&self) -> f64 {
        self.floor_seconds
    }

    fn operator(&self) -> f64 {
        self.operator_seconds
    }
}

/// One formation: the floor, then the operator's time-to-Active.
pub type FormationRun = FloorAndOperator;
/// One shard's replacement: the floor, then the operator's.
pub type ShardRollout = FloorAndOperator;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Formation {
    pub runs: Vec<FormationRun>,
    /// Per run, in the same order: seconds from the apply until every member's valkey
    /// container ran (Kubernetes' share: the ValkeyNodes, scheduling, the image, the container
    /// start). Empty in figures measured before it was recorded.
    #[serde(default)]
    pub members_running_seconds: Vec<Option<f64>>,
}

impl Formation {
    pub fn medians(&self) -> Medians {
        Medians::of(&self.runs)
    }

    /// Medians of the members-running share and of what followed it (formation proper), and
    /// the latter over the floor; `None` when not recorded.
    pub fn split(&self) -> Option<(f64, f64, Option<f64>)> {
        let running: Vec<f64> = self
            .members_running_seconds
            .iter()
            .flatten()
            .copied()
            .collect();
        let after: Vec<f64> = self
            .runs
            .iter()
            .zip(&self.members_running_seconds)
            .filter_map(|(run, r)| Some(run.operator_seconds - (*r)?))
            .collect();
        let (running, after) = (median(&running)?, median(&after)?);
        Some((
            running,
            after,
            ratio_of(Some(after), self.medians().floor_seconds),
        ))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// In the order the operator replaced them (of the run shown: the worst).
    pub shards: Vec<ShardRollout>,
    /// Longest gap between a writer's successful writes during the operator's rollout, the
    /// longest of every run.
    pub writer_longest_pause_seconds: Option<f64>,
    /// Every run's worst-shard ratio, in the order measured (figures from before runs were
    /// repeated have none).
    #[serde(default)]
    pub runs_worst_ratio: Vec<f64>,
}

impl Rollout {
    /// The run with the worst [`Rollout::worst_ratio`] of `runs` (a goal is met when the worst
    /// of its runs meets it), remembering every run's worst ratio and the longest pause of all.
    pub fn worst_of(runs: Vec<Rollout>) -> Option<Rollout> {
        let ratios: Vec<f64> = runs.iter().filter_map(Rollout::worst_ratio).collect();
        let pause = runs
            .iter()
            .filter_map(|r| r.writer_longest_pause_seconds)
            .reduce(f64::max);
        let mut worst = runs.into_iter().max_by(|a, b| {
            let key = |r: &Rollout| r.worst_ratio().unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b))
        })?;
        worst.runs_worst_ratio = ratios;
        worst.writer_longest_pause_seconds = pause;
        Some(worst)
    }

    /// The slowest shard relative to its floor: the goal holds for every shard or not at all.
    pub fn worst_ratio(&self) -> Option<f64> {
        self.shards
            .iter()
            .filter_map(ShardRollout::ratio)
            .reduce(f64::max)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotMove {
    /// Keys in the cluster before the scale-out.
    pub keys: u64,
    /// Slots that change shard (3 -> 5 shards moves 6553 of 16384).
    pub slots_moved: u32,
    /// The operator's atomic slot move (CLUSTER MIGRATESLOTS).
    pub atomic_seconds: f64,
    /// The same slots moved by CLUSTER MIGRATESLOTS sent directly.
    pub migrateslots_floor_seconds: f64,
    /// The operator's key-by-key slot move (MIGRATE).
    pub key_by_key_seconds: Option<f64>,
    /// The same slots moved by `valkey-cli --cluster reshard`.
    pub reshard_floor_seconds: Option<f64>,
    /// From `spec.shards: 5` to Active, atomic.
    pub scale_out_atomic_seconds: f64,
    /// From `spec.shards: 5` to Active, key by key.
    pub scale_out_key_by_key_seconds: Option<f64>,
}

impl SlotMove {
    pub fn atomic_ratio(&self) -> Option<f64> {
        ratio_of(
            Some(self.atomic_seconds),
            Some(self.migrateslots_floor_seconds),
        )
    }

    /// The key-by-key move against `valkey-cli --cluster reshard`. Its phase alone leaves no
    /// job record to time it by; without it, the whole key-by-key scale-out (members created
    /// and synced too) stands in: an upper bound on the ratio.
    pub fn key_by_key_ratio(&self) -> Option<f64> {
        ratio_of(
            self.key_by_key_seconds
                .or(self.scale_out_key_by_key_seconds),
            self.reshard_floor_seconds,
        )
    }

    /// How many times faster the atomic scale-out is than the key-by-key one.
    pub fn atomic_speedup(&self) -> Option<f64> {
        ratio_of(
            self.scale_out_key_by_key_seconds,
            Some(self.scale_out_atomic_seconds),
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetStep {
    /// Clusters present once the step's were created.
    pub clusters: usize,
    /// Clusters this step created (its settled_seconds counts from their creation).
    pub added: usize,
    pub settled_seconds: f64,
    pub operator_rss_mib: f64,
    /// Clusters counted as settled while waiting for a pod the nodes have no room for.
    #[serde(default)]
    pub waiting_for_room: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub steps: Vec<FleetStep>,
    /// Time-to-Active of one 1 × 0 cluster alone.
    pub one_cluster_active_seconds: f64,
    /// How many clusters the operator is expected to bring up at once; vk-bench sets it.
    pub parallelism: u32,
    pub reconciles_per_minute_at_rest: f64,
    pub rss_at_rest_mib: f64,
    /// Utilization sampling's cost with the fleet at rest: the operator restarted with
    /// `utilizationSampling` off, then on (issue 30: at most 10 % more either way).
    #[serde(default)]
    pub sampling: Vec<SamplingCost>,
}

/// The operator at rest with the fleet, restarted with utilization sampling on or off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingCost {
    pub sampling: bool,
    pub reconciles_per_minute: f64,
    pub operator_rss_mib: f64,
}

impl Fleet {
    /// (RSS, reconciles per minute) with sampling on over off, when both were measured.
    pub fn sampling_ratios(&self) -> Option<(f64, f64)> {
        let of = |on: bool| self.sampling.iter().find(|s| s.sampling == on);
        let (on, off) = (of(true)?, of(false)?);
        Some((
            on.operator_rss_mib / off.operator_rss_mib.max(f64::MIN_POSITIVE),
            on.reconciles_per_minute / off.reconciles_per_minute.max(1.0),
        ))
    }
}

/// The fleet size the goals are set for.
pub const FLEET_GOAL_CLUSTERS: usize = 200;

impl Fleet {
    /// The first step with the goal's fleet size.
    fn goal_step(&self) -> Option<&FleetStep> {
        self.steps
            .iter()
            .find(|s| s.clusters >= FLEET_GOAL_CLUSTERS)
    }

    /// The goal step's settling time over one cluster's time × its added clusters ÷ parallelism.
    pub fn settle_ratio(&self) -> Option<f64> {
        let step = self.goal_step()?;
        let expected = self.one_cluster_active_seconds * step.added as f64
            / f64::from(self.parallelism.max(1));
        ratio_of(Some(step.settled_seconds), Some(expected))
    }

    /// The largest RSS with the goal's fleet present: at its step and at rest after it.
    pub fn rss_with_goal_fleet_mib(&self) -> Option<f64> {
        let step = self.goal_step()?;
        Some(step.operator_rss_mib.max(self.rss_at_rest_mib))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookKind {
    /// The review sent, e.g. "ValkeyCluster create".
    pub name: String,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub requests: usize,
    pub failed: usize,
    pub rate_per_second: f64,
    /// ValkeyClusters in the API server while the reviews ran.
    pub clusters_present: usize,
}

impl WebhookKind {
    /// Percentiles from the ascending latencies (seconds) of the reviews that succeeded.
    pub fn from_latencies(
        name: &str,
        sorted_seconds: &[f64],
        failed: usize,
        rate_per_second: f64,
        clusters_present: usize,
    ) -> WebhookKind {
        let ms = |p: f64| percentile(sorted_seconds, p).unwrap_or_default() * 1e3;
        WebhookKind {
            name: name.to_string(),
            p50_ms: ms(0.50),
            p90_ms: ms(0.90),
            p99_ms: ms(0.99),
            max_ms: ms(1.0),
            requests: sorted_seconds.len() + failed,
            failed,
            rate_per_second,
            clusters_present,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub kinds: Vec<WebhookKind>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverRun {
    pub native_floor_seconds: f64,
    pub operator_sigkill_write_back_seconds: f64,
}

impl AgainstFloor for FailoverRun {
    fn floor(&self) -> f64 {
        self.native_floor_seconds
    }

    fn operator(&self) -> f64 {
        self.operator_sigkill_write_back_seconds
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    pub runs: Vec<FailoverRun>,
    pub pod_deleted_write_back_seconds: Vec<f64>,
}

impl Failover {
    /// Of the SIGKILL runs (pod deletions have no floor to set them against).
    pub fn medians(&self) -> Medians {
        Medians::of(&self.runs)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Durability {
    /// Keys written and replicated before each full restart.
    pub keys: usize,
    pub restart_with_volumes_seconds: f64,
    pub keys_lost_with_volumes: usize,
    pub restart_memory_only_seconds: f64,
    pub keys_lost_memory_only: usize,
    /// How long the one client wrote on each cluster.
    pub write_seconds: f64,
    pub sets_per_second_with_volumes: f64,
    pub sets_per_second_memory_only: f64,
}

impl Durability {
    /// Write throughput with volumes and AOF over memory-only.
    pub fn write_ratio(&self) -> Option<f64> {
        ratio_of(
            Some(self.sets_per_second_with_volumes),
            Some(self.sets_per_second_memory_only),
        )
    }

    /// Full-restart time with volumes over memory-only.
    pub fn restart_ratio(&self) -> Option<f64> {
        ratio_of(
            Some(self.restart_with_volumes_seconds),
            Some(self.restart_memory_only_seconds),
        )
    }
}

/// One client through the real-client section's operations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientRun {
    /// "python (valkey-py)", ..., "vk-bench writer (fred)".
    pub client: String,
    pub acknowledged: usize,
    pub failed_attempts: usize,
    /// Acknowledged writes that did not read back.
    pub lost: usize,
    pub longest_pause_seconds: f64,
    /// What the first failed attempt said.
    #[serde(default)]
    pub first_failure: Option<String>,
    /// Per operation, in [`RealClients::operations`]' order (empty for a client whose
    /// acknowledgements are not timed one by one).
    #[serde(default)]
    pub by_operation: Vec<DuringOperation>,
}

/// What one client saw while one operation ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DuringOperation {
    pub failed_attempts: usize,
    pub longest_pause_seconds: f64,
}

impl ClientRun {
    /// One client's runs as one (see [`RealClients::worst_of`]); `each` is not empty.
    fn combined(each: &[&ClientRun]) -> ClientRun {
        let longest = |pauses: &mut dyn Iterator<Item = f64>| pauses.fold(0.0, f64::max);
        let operations = each.iter().map(|c| c.by_operation.len()).max().unwrap_or(0);
        ClientRun {
            client: each[0].client.clone(),
            acknowledged: each.iter().map(|c| c.acknowledged).sum(),
            failed_attempts: each.iter().map(|c| c.failed_attempts).sum(),
            lost: each.iter().map(|c| c.lost).sum(),
            longest_pause_seconds: longest(&mut each.iter().map(|c| c.longest_pause_seconds)),
            first_failure: each.iter().find_map(|c| c.first_failure.clone()),
            by_operation: (0..operations)
                .map(|i| {
                    let during: Vec<&DuringOperation> =
                        each.iter().filter_map(|c| c.by_operation.get(i)).collect();
                    DuringOperation {
                        failed_attempts: during.iter().map(|d| d.failed_attempts).sum(),
                        longest_pause_seconds: longest(
                            &mut during.iter().map(|d| d.longest_pause_seconds),
                        ),
                    }
                })
                .collect(),
        }
    }

    /// "3 failed attempts, 1 lost" when either is not 0.
    pub fn trouble(&self) -> Option<String> {
        (self.failed_attempts > 0 || self.lost > 0).then(|| {
            format!(
                "{} failed attempts, {} acknowledged writes lost",
                self.failed_attempts, self.lost
            )
        })
    }
}

/// Real clients through planned operations (TLS).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RealClients {
    /// The operations, in the order they ran.
    pub operations: Vec<String>,
    pub clients: Vec<ClientRun>,
    /// How many runs the figures combine ([`RealClients::worst_of`]); 0 in figures from
    /// before runs were repeated (one run).
    #[serde(default)]
    pub runs: usize,
}

/// The client name of the bench's own writer in [`RealClients`].
pub const BENCH_WRITER: &str = "vk-bench writer (fred)";

impl RealClients {
    /// `runs` as one: per client, the longest pause of any run (overall and per operation) and
    /// the failed attempts, losses and acknowledged writes of all runs summed, so a goal is met
    /// only when the worst run meets it.
    pub fn worst_of(runs: Vec<RealClients>) -> Option<RealClients> {
        let first = runs.first()?;
        let clients = first
            .clients
            .iter()
            .map(|c| {
                let each: Vec<&ClientRun> =
                    runs.iter().filter_map(|r| r.client(&c.client)).collect();
                ClientRun::combined(&each)
            })
            .collect();
        Some(RealClients {
            operations: first.operations.clone(),
            clients,
            runs: runs.len(),
        })
    }

    pub fn client(&self, starting: &str) -> Option<&ClientRun> {
        self.clients.iter().find(|c| c.client.starts_with(starting))
    }
}

/// Every benchmark's figures; a section is `None` when no run measured it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(default)]
    pub formation: Option<Formation>,
    #[serde(default)]
    pub rollout: Option<Rollout>,
    #[serde(default)]
    pub slot_move: Option<SlotMove>,
    #[serde(default)]
    pub fleet: Option<Fleet>,
    #[serde(default)]
    pub webhook: Option<Webhook>,
    #[serde(default)]
    pub failover: Option<Failover>,
    #[serde(default)]
    pub durability: Option<Durability>,
    #[serde(default)]
    pub real_clients: Option<RealClients>,
    /// The run that measured each present section ([`Report::stamp`] fills it).
    #[serde(default)]
    pub measured_in: BTreeMap<Section, Metadata>,
}

impl Report {
    pub fn has(&self, section: Section) -> bool {
        self.benchmark(section).is_some()
    }

    /// `section`'s figures, as what renders them; `None` when not measured.
    fn benchmark(&self, section: Section) -> Option<&dyn Benchmark> {
        fn dynamic<T: Benchmark>(figures: &Option<T>) -> Option<&dyn Benchmark> {
            figures.as_ref().map(|f| f as &dyn Benchmark)
        }
        match section {
            Section::Formation => dynamic(&self.formation),
            Section::Rollout => dynamic(&self.rollout),
            Section::SlotMove => dynamic(&self.slot_move),
            Section::Fleet => dynamic(&self.fleet),
            Section::Webhook => dynamic(&self.webhook),
            Section::Failover => dynamic(&self.failover),
            Section::Durability => dynamic(&self.durability),
            Section::RealClients => dynamic(&self.real_clients),
        }
    }

    /// Records `run` as the run that measured every section present.
    pub fn stamp(&mut self, run: &Metadata) {
        let measured: Vec<_> = Section::ALL.into_iter().filter(|s| self.has(*s)).collect();
        for section in measured {
            self.measured_in.insert(section, run.clone());
        }
    }

    /// Takes the sections `newer` measured (and their runs); keeps the others.
    pub fn merge(&mut self, newer: Report) {
        fn take<T>(mine: &mut Option<T>, newer: Option<T>) {
            if newer.is_some() {
                *mine = newer;
            }
        }
        for section in Section::ALL.into_iter().filter(|s| newer.has(*s)) {
            self.measured_in.remove(&section);
            if let Some(run) = newer.measured_in.get(&section) {
                self.measured_in.insert(section, run.clone());
            }
        }
        take(&mut self.formation, newer.formation);
        take(&mut self.rollout, newer.rollout);
        take(&mut self.slot_move, newer.slot_move);
        take(&mut self.fleet, newer.fleet);
        take(&mut self.webhook, newer.webhook);
        take(&mut self.failover, newer.failover);
        take(&mut self.durability, newer.durability);
        take(&mut self.real_clients, newer.real_clients);
    }

    /// The figures saved under `repo_root`, or an empty report when there are none yet. A
    /// file that does not parse is an error: writing over it would lose its sections.
    pub fn load_json(repo_root: &Path) -> anyhow::Result<Report> {
        let path = repo_root.join(FIGURES_JSON);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Report::default()),
            Err(e) => Err(e).with_context(|| path.display().to_string()),
        }
    }

    pub fn save_json(&self, repo_root: &Path) -> anyhow::Result<()> {
        let path = repo_root.join(FIGURES_JSON);
        std::fs::create_dir_all(repo_root.join(FIGURES_DIR))?;
        let text = serde_json::to_string_pretty(self)? + "\n";
        std::fs::write(&path, text).with_context(|| path.display().to_string())
    }

    /// Writes docs/benchmarks.md and a plot per measured section under docs/benchmarks/
    /// (removing the plot of a section no longer measured, which the page no longer shows).
    pub fn write(&self, repo_root: &Path) -> anyhow::Result<()> {
        let dir = repo_root.join(FIGURES_DIR);
        std::fs::create_dir_all(&dir)?;
        for section in Section::ALL {
            let path = dir.join(format!("{}.svg", section.stem()));
            match self.benchmark(section) {
                Some(figures) => std::fs::write(&path, figures.plot()?)?,
                None => match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e)?,
                    _ => {}
                },
            }
        }
        std::fs::write(repo_root.join(MARKDOWN), self.markdown())?;
        Ok(())
    }

    /// What vk-bench calls at the end: `self` holds what this run measured; the sections it
    /// did not measure keep their figures from figures.json. Returns the whole report.
    pub fn publish(mut self, repo_root: &Path, run: &Metadata) -> anyhow::Result<Report> {
        self.stamp(run);
        let mut all = Report::load_json(repo_root)?;
        all.merge(self);
        all.save_json(repo_root)?;
        all.write(repo_root)?;
        Ok(all)
    }
}

#[cfg(test)]
mod tests;
