//! The goals of issue 19, each next to the figure that answers it.

use super::{
    BENCH_WRITER, FLEET_GOAL_CLUSTERS, Fleet, RealClients, Report, Rollout, Section, SlotMove,
    Webhook,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    /// No figure, or one measured under other conditions than the goal's.
    NotMeasured,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**not met**",
            Verdict::NotMeasured => "not measured",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    pub what: String,
    /// The figure as the page shows it; `None` when not measured.
    pub figure: Option<String>,
    /// "≤ 1.5×".
    pub limit: String,
    pub verdict: Verdict,
    /// Why a figure does not answer the goal, or what failed besides it.
    pub note: Option<String>,
}

#[derive(Clone, Copy)]
enum Unit {
    Ratio,
    MiB,
    Ms,
    Seconds,
}

impl Unit {
    fn show(self, value: f64) -> String {
        match self {
            Unit::Ratio => format!("{value:.2}×"),
            Unit::MiB => format!("{value:.1} MiB"),
            Unit::Ms => format!("{value:.2} ms"),
            Unit::Seconds => format!("{value:.2} s"),
        }
    }

    fn decimals(self) -> i32 {
        match self {
            Unit::Ratio | Unit::Ms | Unit::Seconds => 2,
            Unit::MiB => 1,
        }
    }
}

/// `figure` must be at most `limit`. It is compared as the page shows it (rounded to the
/// unit's decimals), so a ratio shown as 1.50× meets a 1.5× limit rather than failing on a
/// digit the reader cannot see.
fn at_most(what: &str, figure: Option<f64>, limit: f64, unit: Unit) -> Goal {
    let scale = 10f64.powi(unit.decimals());
    let verdict = match figure {
        None => Verdict::NotMeasured,
        Some(v) if (v * scale).round() / scale <= limit => Verdict::Met,
        Some(_) => Verdict::NotMet,
    };
    Goal {
        what: what.to_string(),
        figure: figure.map(|v| unit.show(v)),
        limit: format!("≤ {}", unit.show(limit)),
        verdict,
        note: None,
    }
}

impl Goal {
    /// The figure stands, but does not answer this goal: `why`.
    fn not_comparable(mut self, why: String) -> Goal {
        self.verdict = Verdict::NotMeasured;
        self.note = Some(why);
        self
    }

    /// The figure may be within its limit, but the goal also failed on `why`.
    fn failed(mut self, why: String) -> Goal {
        if self.verdict == Verdict::Met {
            self.verdict = Verdict::NotMet;
        }
        self.note = Some(why);
        self
    }
}

/// The webhook goal's conditions: the load and the fleet the reviews ran against.
const WEBHOOK_RATE: f64 = 200.0;
const WEBHOOK_P99_MS: f64 = 5.0;

impl Report {
    /// Every goal, in the page's order; a section not measured gives "not measured".
    pub fn goals(&self) -> Vec<Goal> {
        let ratio =
            |what: &str, figure: Option<f64>, limit: f64| at_most(what, figure, limit, Unit::Ratio);
        vec![
            ratio(
                "Time-to-Active ÷ `valkey-cli --cluster create` floor (medians)",
                self.formation.as_ref().and_then(|f| f.medians().ratio()),
                1.3,
            ),
            ratio(
                "Rollout per shard ÷ floor (worst shard)",
                self.rollout.as_ref().and_then(Rollout::worst_ratio),
                1.3,
            ),
            ratio(
                "Atomic slot move ÷ raw CLUSTER MIGRATESLOTS",
                self.slot_move.as_ref().and_then(SlotMove::atomic_ratio),
                1.3,
            ),
            ratio(
                "Key-by-key slot move (whole scale-out when not timed alone) ÷ `valkey-cli --cluster reshard`",
                self.slot_move.as_ref().and_then(SlotMove::key_by_key_ratio),
                1.3,
            ),
            self.rss_goal(),
            ratio(
                "200 clusters settled ÷ (one cluster's time-to-Active × clusters added ÷ parallelism)",
                self.fleet.as_ref().and_then(Fleet::settle_ratio),
                2.0,
            ),
            self.webhook_goal(),
            self.client_goal(
                "Real client (valkey-py, TLS, cluster DNS) through scale-out, scale-in, rolling \
                 replacement, `kubectl delete pod` of a primary: longest pause, with 0 errors and \
                 0 lost",
                "python",
                1.0,
            ),
            self.client_goal(
                "The bench's own writer through the same operations (TLS): longest pause, with 0 \
                 errors and 0 lost",
                BENCH_WRITER,
                0.5,
            ),
        ]
    }

    /// The longest pause of the client named `starting` at most `limit` seconds, failed by
    /// any failed attempt or lost write.
    fn client_goal(&self, what: &str, starting: &str, limit: f64) -> Goal {
        let run = self
            .real_clients
            .as_ref()
            .and_then(|r: &RealClients| r.client(starting));
        let goal = at_most(
            what,
            run.map(|r| r.longest_pause_seconds),
            limit,
            Unit::Seconds,
        );
        match run.and_then(|r| r.trouble()) {
            Some(why) => goal.failed(why),
            None => goal,
        }
    }

    fn rss_goal(&self) -> Goal {
        let goal = at_most(
            "Operator RSS with 200 clusters (release build)",
            self.fleet.as_ref().and_then(Fleet::rss_with_goal_fleet_mib),
            40.0,
            Unit::MiB,
        );
        match self.measured_in.get(&Section::Fleet) {
            Some(run) if run.operator_build != "release" && goal.figure.is_some() => {
                goal.not_comparable(format!("measured on a {} build", run.operator_build))
            }
            _ => goal,
        }
    }

    fn webhook_goal(&self) -> Goal {
        let kinds = self
            .webhook
            .as_ref()
            .map_or(&[][..], |w: &Webhook| &w.kinds[..]);
        let worst_p99 = kinds.iter().map(|k| k.p99_ms).reduce(f64::max);
        let goal = at_most(
            "Webhook p99 of every review kind at 200 req/s with 200 clusters present",
            worst_p99,
            WEBHOOK_P99_MS,
            Unit::Ms,
        );
        let off_load = kinds
            .iter()
            .find(|k| k.rate_per_second < WEBHOOK_RATE || k.clusters_present < FLEET_GOAL_CLUSTERS);
        let failed: usize = kinds.iter().map(|k| k.failed).sum();
        if let Some(k) = off_load {
            goal.not_comparable(format!(
                "{} measured at {} req/s with {} clusters present",
                k.name, k.rate_per_second, k.clusters_present
            ))
        } else if failed > 0 {
            goal.failed(format!("{failed} reviews failed"))
        } else {
            goal
        }
    }
}
