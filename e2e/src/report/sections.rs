//! Each benchmark's plot and table of raw figures, side by side so the two show the same
//! figures.

use super::markdown::{NOT_MEASURED, optional_seconds, ratio, seconds, table};
use super::plot::{self, Bars, Panel, Series};
use super::{
    AgainstFloor, Durability, Failover, Fleet, FleetStep, Formation, Medians, RealClients, Rollout,
    SLOTS, SlotMove, Webhook, WebhookKind, median,
};

/// What the page shows of a measured section.
pub(super) trait Benchmark {
    /// SVG text.
    fn plot(&self) -> anyhow::Result<String>;
    /// Markdown: the raw figures, and a line or two the table does not hold.
    fn figures(&self) -> String;
}

/// `what 1`, `what 2`, ... for `count` runs or shards.
fn numbered(what: &str, count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("{what} {i}")).collect()
}

fn series(name: &str, values: impl IntoIterator<Item = Option<f64>>) -> Series {
    Series {
        name: name.to_string(),
        values: values.into_iter().collect(),
    }
}

/// Floor bars next to the operator's, one group per run or shard.
fn floor_bars<T: AgainstFloor>(title: &str, group: &str, items: &[T]) -> anyhow::Result<String> {
    plot::grouped_bars(&Bars {
        title: title.to_string(),
        y_label: "seconds".to_string(),
        categories: numbered(group, items.len()),
        series: vec![
            series("floor", items.iter().map(|i| Some(i.floor()))),
            series("operator", items.iter().map(|i| Some(i.operator()))),
        ],
    })
}

/// A table of floor, operator and their ratio, one row per run or shard, then the medians
/// when `with_medians`.
fn floor_table<T: AgainstFloor>(headers: [&str; 4], items: &[T], with_medians: bool) -> String {
    let mut rows: Vec<_> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            [
                (i + 1).to_string(),
                seconds(item.floor()),
                seconds(item.operator()),
                ratio(item.ratio()),
            ]
        })
        .collect();
    if with_medians {
        let medians = Medians::of(items);
        rows.push([
            "median".to_string(),
            optional_seconds(medians.floor_seconds),
            optional_seconds(medians.operator_seconds),
            ratio(medians.ratio()),
        ]);
    }
    table(headers, rows)
}

impl Benchmark for Formation {
    fn plot(&self) -> anyhow::Result<String> {
        floor_bars("Formation: floor vs time-to-Active", "run", &self.runs)
    }

    fn figures(&self) -> String {
        let headers = ["Run", "Floor (s)", "Time-to-Active (s)", "Ratio"];
        let split = match self.split() {
            Some((running, after, ratio_after)) => format!(
                "\nWhere the time goes (medians): {} s until every member's valkey container ran \
                 (Kubernetes: the ValkeyNodes, scheduling, the image, the container start), then \
                 {} s to Active (formation; {} of the floor, which starts from running servers).\n",
                seconds(running),
                seconds(after),
                ratio(ratio_after)
            ),
            None => String::new(),
        };
        format!("{}{split}", floor_table(headers, &self.runs, true))
    }
}

impl Benchmark for Rollout {
    fn plot(&self) -> anyhow::Result<String> {
        floor_bars("Rolling replacement per shard", "shard", &self.shards)
    }

    fn figures(&self) -> String {
        let headers = ["Shard", "Floor (s)", "Operator (s)", "Ratio"];
        let pause = self
            .writer_longest_pause_seconds
            .map_or_else(|| NOT_MEASURED.to_string(), |s| format!("{} s", seconds(s)));
        let runs = match self.runs_worst_ratio.len() {
            0 | 1 => String::new(),
            n => format!(
                "\nThe worst of {n} runs is shown (the goal is checked on it); every run's worst shard: {}. The writer's pause is the longest of all runs.\n",
                self.runs_worst_ratio
                    .iter()
                    .map(|r| ratio(Some(*r)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "{}\nWriter's longest pause during the operator's rollout: {pause}.\n{runs}",
            floor_table(headers, &self.shards, false)
        )
    }
}

impl SlotMove {
    /// Slots and keys per second of a move that took `took` seconds.
    fn rates(&self, took: Option<f64>) -> [String; 2] {
        let keys_moved = self.keys as f64 * f64::from(self.slots_moved) / SLOTS;
        match took.filter(|t| *t > 0.0) {
            Some(t) => [
                format!("{:.0}", f64::from(self.slots_moved) / t),
                format!("{:.0}", keys_moved / t),
            ],
            None => [NOT_MEASURED.to_string(), NOT_MEASURED.to_string()],
        }
    }

    fn row(&self, measure: &str, took: Option<f64>, floor: Option<f64>) -> [String; 6] {
        let [slots_per_second, keys_per_second] = self.rates(took);
        [
            measure.to_string(),
            optional_seconds(took),
            floor.map_or_else(String::new, seconds),
            floor.map_or_else(String::new, |f| ratio(took.map(|t| t / f))),
            slots_per_second,
            keys_per_second,
        ]
    }
}

impl Benchmark for SlotMove {
    fn plot(&self) -> anyhow::Result<String> {
        let (atomic, key_by_key) = (
            self.scale_out_atomic_seconds,
            self.scale_out_key_by_key_seconds,
        );
        plot::grouped_bars(&Bars {
            title: format!("Scale-out 3 → 5 with {} keys", self.keys),
            y_label: "seconds".to_string(),
            categories: vec![
                "atomic (MIGRATESLOTS)".into(),
                "key by key (MIGRATE)".into(),
            ],
            series: vec![
                series(
                    "floor",
                    [
                        Some(self.migrateslots_floor_seconds),
                        self.reshard_floor_seconds,
                    ],
                ),
                series(
                    "operator slot move",
                    [Some(self.atomic_seconds), self.key_by_key_seconds],
                ),
                series("operator whole scale-out", [Some(atomic), key_by_key]),
            ],
        })
    }

    fn figures(&self) -> String {
        let rows = [
            self.row(
                "Slot move, atomic (floor: CLUSTER MIGRATESLOTS)",
                Some(self.atomic_seconds),
                Some(self.migrateslots_floor_seconds),
            ),
            self.row(
                "Slot move, key by key (floor: `valkey-cli --cluster reshard`)",
                self.key_by_key_seconds,
                self.reshard_floor_seconds,
            ),
            self.row(
                "Whole scale-out, atomic",
                Some(self.scale_out_atomic_seconds),
                None,
            ),
            self.row(
                "Whole scale-out, key by key",
                self.scale_out_key_by_key_seconds,
                None,
            ),
        ];
        let headers = [
            "Measure",
            "Operator (s)",
            "Floor (s)",
            "Ratio",
            "Slots/s",
            "Keys/s",
        ];
        format!(
            "{}\n{} keys; {} of 16384 slots (about {:.0} keys) change shard. The atomic scale-out \
             is {} as fast as the key-by-key one.\n",
            table(headers, rows),
            self.keys,
            self.slots_moved,
            self.keys as f64 * f64::from(self.slots_moved) / SLOTS,
            ratio(self.atomic_speedup())
        )
    }
}

impl Benchmark for Fleet {
    fn plot(&self) -> anyhow::Result<String> {
        let panel = |title: &str, y_label: &str, y: fn(&FleetStep) -> f64| Panel {
            title: title.to_string(),
            x_label: "clusters".to_string(),
            y_label: y_label.to_string(),
            points: self
                .steps
                .iter()
                .map(|s| (s.clusters as f64, y(s)))
                .collect(),
        };
        plot::line_panels(
            "Fleet of 1 × 0 clusters",
            &[
                panel("Seconds to settle each step", "seconds", |s| {
                    s.settled_seconds
                }),
                panel("Operator RSS", "MiB", |s| s.operator_rss_mib),
            ],
        )
    }

    fn figures(&self) -> String {
        let rows = self.steps.iter().map(|s| {
            [
                s.clusters.to_string(),
                s.added.to_string(),
                seconds(s.settled_seconds),
                s.waiting_for_room.to_string(),
                format!("{:.1}", s.operator_rss_mib),
            ]
        });
        let headers = [
            "Clusters",
            "Added",
            "Settled (s)",
            "Waiting for room",
            "Operator RSS (MiB)",
        ];
        let sampling: String = self
            .sampling
            .iter()
            .map(|s| {
                format!(
                    "* Restarted with utilizationSampling {}: {:.0} reconciles per minute, operator RSS {:.1} MiB.\n",
                    if s.sampling { "on" } else { "off" },
                    s.reconciles_per_minute,
                    s.operator_rss_mib
                )
            })
            .chain(self.sampling_ratios().map(|(rss, rpm)| {
                format!(
                    "* Sampling on over off: RSS x{rss:.2}, reconciles per minute x{rpm:.2} (goal: at most x1.10 each).\n"
                )
            }))
            .collect();
        format!(
            "{}\n* One cluster alone: Active in {} s (parallelism {}).\n\
             * At rest with {} clusters: {:.0} reconciles per minute, operator RSS {:.1} MiB.\n{sampling}",
            table(headers, rows),
            seconds(self.one_cluster_active_seconds),
            self.parallelism,
            self.steps.last().map_or(0, |s| s.clusters),
            self.reconciles_per_minute_at_rest,
            self.rss_at_rest_mib
        )
    }
}

impl Benchmark for Webhook {
    fn plot(&self) -> anyhow::Result<String> {
        let percentile = |name: &str, value: fn(&WebhookKind) -> f64| {
            series(name, self.kinds.iter().map(|k| Some(value(k))))
        };
        plot::grouped_bars(&Bars {
            title: "Webhook review latency".to_string(),
            y_label: "milliseconds".to_string(),
            categories: self.kinds.iter().map(|k| k.name.clone()).collect(),
            series: vec![
                percentile("p50", |k| k.p50_ms),
                percentile("p90", |k| k.p90_ms),
                percentile("p99", |k| k.p99_ms),
                percentile("max", |k| k.max_ms),
            ],
        })
    }

    fn figures(&self) -> String {
        let ms = |v: f64| format!("{v:.2}");
        let rows = self.kinds.iter().map(|k| {
            [
                k.name.clone(),
                format!("{:.0}", k.rate_per_second),
                k.clusters_present.to_string(),
                k.requests.to_string(),
                k.failed.to_string(),
                ms(k.p50_ms),
                ms(k.p90_ms),
                ms(k.p99_ms),
                ms(k.max_ms),
            ]
        });
        let headers = [
            "Review",
            "Rate (req/s)",
            "Clusters present",
            "Requests",
            "Failed",
            "p50 (ms)",
            "p90 (ms)",
            "p99 (ms)",
            "max (ms)",
        ];
        table(headers, rows)
    }
}

impl Benchmark for Failover {
    fn plot(&self) -> anyhow::Result<String> {
        // Pod deletions are fewer runs than SIGKILLs: their bars stop where their runs do.
        let deleted = &self.pod_deleted_write_back_seconds;
        let runs = self.runs.len().max(deleted.len());
        let at = |figure: &dyn Fn(usize) -> Option<f64>| (0..runs).map(figure).collect::<Vec<_>>();
        plot::grouped_bars(&Bars {
            title: "Failover write-back per run".to_string(),
            y_label: "seconds".to_string(),
            categories: numbered("run", runs),
            series: vec![
                series("native floor", at(&|i| self.runs.get(i).map(|r| r.floor()))),
                series(
                    "operator, SIGKILL",
                    at(&|i| self.runs.get(i).map(|r| r.operator())),
                ),
                series("operator, pod deleted", at(&|i| deleted.get(i).copied())),
            ],
        })
    }

    fn figures(&self) -> String {
        let headers = ["Run", "Native floor (s)", "Operator, SIGKILL (s)", "Ratio"];
        let deleted = &self.pod_deleted_write_back_seconds;
        let each: Vec<_> = deleted.iter().map(|s| seconds(*s)).collect();
        let deleted_shown = if each.is_empty() {
            NOT_MEASURED.to_string()
        } else {
            format!(
                "{} s (median {} s)",
                each.join(", "),
                optional_seconds(median(deleted))
            )
        };
        format!(
            "{}\nWrite-back after `kubectl delete pod` of a primary: {deleted_shown}.\n",
            floor_table(headers, &self.runs, true)
        )
    }
}

impl Benchmark for Durability {
    fn plot(&self) -> anyhow::Result<String> {
        plot::grouped_bars(&Bars {
            title: format!("Full restart of 2 × 1 with {} keys", self.keys),
            y_label: "seconds to Active".to_string(),
            categories: vec!["full restart".to_string()],
            series: vec![
                series("memory-only", [Some(self.restart_memory_only_seconds)]),
                series("volumes + AOF", [Some(self.restart_with_volumes_seconds)]),
            ],
        })
    }

    fn figures(&self) -> String {
        let headers = [
            "Measure",
            "Memory-only",
            "Volumes + AOF (everysec)",
            "Ratio",
        ];
        let rows = vec![
            [
                format!("Full restart, seconds to Active ({} keys)", self.keys),
                seconds(self.restart_memory_only_seconds),
                seconds(self.restart_with_volumes_seconds),
                ratio(self.restart_ratio()),
            ],
            [
                "Keys lost in the full restart".to_string(),
                self.keys_lost_memory_only.to_string(),
                self.keys_lost_with_volumes.to_string(),
                String::new(),
            ],
            [
                format!(
                    "SETs per second, one client, {} s each",
                    seconds(self.write_seconds)
                ),
                format!("{:.0}", self.sets_per_second_memory_only),
                format!("{:.0}", self.sets_per_second_with_volumes),
                ratio(self.write_ratio()),
            ],
        ];
        table(headers, rows)
    }
}

impl Benchmark for RealClients {
    fn plot(&self) -> anyhow::Result<String> {
        plot::grouped_bars(&Bars {
            title: "Longest pause between two acknowledged writes".to_string(),
            y_label: "seconds".to_string(),
            categories: self.clients.iter().map(|c| c.client.clone()).collect(),
            series: vec![series(
                "longest pause",
                self.clients.iter().map(|c| Some(c.longest_pause_seconds)),
            )],
        })
    }

    fn figures(&self) -> String {
        let headers = [
            "Client",
            "Acknowledged writes",
            "Failed attempts",
            "Lost",
            "Longest pause (s)",
        ];
        let rows: Vec<_> = self
            .clients
            .iter()
            .map(|c| {
                [
                    c.client.clone(),
                    c.acknowledged.to_string(),
                    c.failed_attempts.to_string(),
                    c.lost.to_string(),
                    seconds(c.longest_pause_seconds),
                ]
            })
            .collect();
        let failures: String = self
            .clients
            .iter()
            .filter_map(|c| Some(format!("- {}: {}\n", c.client, c.first_failure.as_ref()?)))
            .collect();
        let failures = if failures.is_empty() {
            String::new()
        } else {
            format!("\nFirst failed attempt of each client that had one:\n\n{failures}")
        };
        let runs = match self.runs {
            0 | 1 => String::new(),
            n => format!(
                "\n{n} runs, combined: per client the longest pause of any run, and the acknowledged writes, failed attempts and losses of all runs.\n"
            ),
        };
        format!(
            "{}{runs}\nOperations, in order: {}.\n\n{}{failures}",
            table(headers, rows),
            self.operations.join(", "),
            self.by_operation_table()
        )
    }
}

impl RealClients {
    /// Failed attempts and longest pause of each client during each operation.
    fn by_operation_table(&self) -> String {
        let mut text = format!("| Client | {} |\n", self.operations.join(" | "));
        text.push_str(&format!("|---|{}\n", "---|".repeat(self.operations.len())));
        for c in &self.clients {
            let cells: Vec<String> = (0..self.operations.len())
                .map(|i| match c.by_operation.get(i) {
                    Some(d) => format!(
                        "{} failed, {} s",
                        d.failed_attempts,
                        seconds(d.longest_pause_seconds)
                    ),
                    None => NOT_MEASURED.to_string(),
                })
                .collect();
            text.push_str(&format!("| {} | {} |\n", c.client, cells.join(" | ")));
        }
        format!("Failed attempts and longest pause during each operation:\n\n{text}")
    }
}
