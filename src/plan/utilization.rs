//! Utilization figures (pure; Momento v0.9, issue 30, `../shared/spec/MOMENTO-V09.md` section
//! 2): from two `INFO` samples of a member, its memory, CPU and bandwidth figures; and the
//! history kept in operator memory per member, from which the scale-in window's peaks come.

use std::collections::VecDeque;

use super::autoscale::Load;

/// The largest scale-in window allowed: history older than this (plus one period) is dropped.
pub const MAX_WINDOW_SECS: u64 = 3600;

/// What one `INFO memory`/`cpu`/`stats` of a member reports, as far as the figures need it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// When it was taken, Unix milliseconds.
    pub at_ms: u64,
    /// `used_memory`.
    pub used_memory: u64,
    /// `maxmemory` (0: none).
    pub maxmemory: u64,
    /// `used_cpu_sys + used_cpu_user`: CPU seconds of the process so far.
    pub cpu_seconds: f64,
    /// `total_net_input_bytes + total_net_output_bytes + total_net_repl_input_bytes +
    /// total_net_repl_output_bytes`.
    pub net_bytes: u64,
}

/// What a member's memory figure is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryBudget {
    /// Its `maxmemory`.
    MaxMemory,
    /// Its container's memory limit (the resolved config's `resources.memory`).
    ContainerLimit,
    /// Neither: no memory figure, the memory trigger is inactive for it.
    None,
}

/// The figures of `current`, with the previous sample of the same process for the rates:
/// memory relative to `maxmemory`, else to the container's `memory_limit`; CPU relative to
/// `cpu_limit_cores`; bandwidth in decimal megabits per second, replication included. A first
/// sample, or counters that went down (the process restarted), give no CPU or bandwidth
/// figure. Percentages are rounded to one decimal.
pub fn figures(
    previous: Option<&Sample>,
    current: &Sample,
    memory_limit: Option<u64>,
    cpu_limit_cores: Option<f64>,
) -> (Load, MemoryBudget) {
    let (memory_percent, budget) = if current.maxmemory > 0 {
        (
            Some(percent(
                current.used_memory as f64,
                current.maxmemory as f64,
            )),
            MemoryBudget::MaxMemory,
        )
    } else if let Some(limit) = memory_limit.filter(|l| *l > 0) {
        (
            Some(percent(current.used_memory as f64, limit as f64)),
            MemoryBudget::ContainerLimit,
        )
    } else {
        (None, MemoryBudget::None)
    };
    let elapsed = previous
        .filter(|p| current.at_ms > p.at_ms)
        .map(|p| (p, (current.at_ms - p.at_ms) as f64 / 1000.0));
    let cpu_percent = elapsed.and_then(|(p, secs)| {
        let cores = cpu_limit_cores.filter(|c| *c > 0.0)?;
        let used = current.cpu_seconds - p.cpu_seconds;
        (used >= 0.0).then(|| percent(used, secs * cores))
    });
    let bandwidth_mbps = elapsed.and_then(|(p, secs)| {
        let bytes = current.net_bytes.checked_sub(p.net_bytes)?;
        Some(round1(bytes as f64 * 8.0 / secs / 1e6))
    });
    (
        Load {
            memory_percent,
            cpu_percent,
            bandwidth_mbps,
        },
        budget,
    )
}

/// Cores of a Kubernetes CPU quantity (`"2"`, `"500m"`, `"1.5"`); `None` when it is not one.
pub fn cpu_cores(quantity: &str) -> Option<f64> {
    let q = quantity.trim();
    let cores = match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok()? / 1000.0,
        None => q.parse::<f64>().ok()?,
    };
    (cores.is_finite() && cores > 0.0).then_some(cores)
}

fn percent(part: f64, whole: f64) -> f64 {
    round1(part / whole * 100.0)
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// One member's figures over time, newest last; `None` marks a period in which it did not
/// answer (a missing sample holds a scale-in back for a whole window).
#[derive(Clone, Debug, Default)]
pub struct History {
    entries: VecDeque<(u64, Option<Load>)>,
}

impl History {
    /// Records this period's figures (or `None`: no answer) at Unix second `at`, dropping
    /// what is older than the largest window.
    pub fn record(&mut self, at: u64, load: Option<Load>) {
        self.entries.push_back((at, load));
        let horizon = at.saturating_sub(MAX_WINDOW_SECS + 30);
        while self.entries.front().is_some_and(|(t, _)| *t < horizon) {
            self.entries.pop_front();
        }
    }

    /// The oldest entry held (`status.utilization.historySince`).
    pub fn since(&self) -> Option<u64> {
        self.entries.front().map(|(t, _)| *t)
    }

    /// The latest figures, unless the latest period had no answer.
    pub fn latest(&self) -> Option<Load> {
        self.entries.back().and_then(|(_, l)| *l)
    }

    /// Each figure's peak over the `window` seconds before `now`, only when the history covers
    /// the whole window with an answer in every period; a figure absent from some sample in the
    /// window (no budget, a first sample) is absent from the peaks.
    pub fn peak(&self, now: u64, window: u64) -> Option<Load> {
        let start = now.checked_sub(window)?;
        if self.since()? > start {
            return None;
        }
        let mut peak = Load {
            memory_percent: Some(0.0),
            cpu_percent: Some(0.0),
            bandwidth_mbps: Some(0.0),
        };
        // The sample taken at or just before the window's start stands for the period the start
        // falls in: without it, a 60 s window on 30 s samples would see only the two samples
        // after the start and could call a cluster quiet 31 s after its load went.
        let from = self.entries.iter().rposition(|(t, _)| *t <= start)?;
        let window_entries = self.entries.iter().skip(from);
        for (_, load) in window_entries.take_while(|(t, _)| *t <= now) {
            let load = (*load)?;
            peak.memory_percent = max(peak.memory_percent, load.memory_percent);
            peak.cpu_percent = max(peak.cpu_percent, load.cpu_percent);
            peak.bandwidth_mbps = max(peak.bandwidth_mbps, load.bandwidth_mbps);
        }
        Some(peak)
    }
}

/// The larger of two figures; absent when either is.
fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a?.max(b?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, used: u64, maxmemory: u64, cpu: f64, net: u64) -> Sample {
        Sample {
            at_ms: at_s * 1000,
            used_memory: used,
            maxmemory,
            cpu_seconds: cpu,
            net_bytes: net,
        }
    }

    #[test]
    fn memory_is_relative_to_maxmemory_first_then_the_container_limit() {
        let gib = 1 << 30;
        let (load, budget) = figures(
            None,
            &sample(0, 842 * gib / 1000, gib, 0.0, 0),
            Some(2 * gib),
            None,
        );
        assert_eq!(
            (load.memory_percent, budget),
            (Some(84.2), MemoryBudget::MaxMemory)
        );
        let (load, budget) = figures(None, &sample(0, gib / 2, 0, 0.0, 0), Some(2 * gib), None);
        assert_eq!(
            (load.memory_percent, budget),
            (Some(25.0), MemoryBudget::ContainerLimit)
        );
        let (load, budget) = figures(None, &sample(0, gib / 2, 0, 0.0, 0), None, None);
        assert_eq!((load.memory_percent, budget), (None, MemoryBudget::None));
    }

    #[test]
    fn cpu_limits_read_as_cores() {
        assert_eq!(cpu_cores("2"), Some(2.0));
        assert_eq!(cpu_cores("500m"), Some(0.5));
        assert_eq!(cpu_cores("1.5"), Some(1.5));
        assert_eq!(cpu_cores("0"), None);
        assert_eq!(cpu_cores("two"), None);
    }

    #[test]
    fn cpu_and_bandwidth_are_rates_between_two_samples_of_one_process() {
        let before = sample(0, 0, 0, 10.0, 1_000_000);
        // 30 s later: 6 CPU seconds on a 0.5-core limit, 79.77 MB moved (in + out + repl).
        let now = sample(30, 0, 0, 16.0, 1_000_000 + 79_770_000);
        let (load, _) = figures(Some(&before), &now, None, Some(0.5));
        assert_eq!(load.cpu_percent, Some(40.0));
        assert_eq!(load.bandwidth_mbps, Some(21.3));
        // A first sample, no CPU limit, or a restarted process: no rate.
        let (load, _) = figures(None, &now, None, Some(0.5));
        assert_eq!((load.cpu_percent, load.bandwidth_mbps), (None, None));
        let (load, _) = figures(Some(&before), &now, None, None);
        assert_eq!(load.cpu_percent, None);
        let restarted = sample(60, 0, 0, 1.0, 500);
        let (load, _) = figures(Some(&now), &restarted, None, Some(0.5));
        assert_eq!((load.cpu_percent, load.bandwidth_mbps), (None, None));
    }

    fn l(memory: f64) -> Option<Load> {
        Some(Load {
            memory_percent: Some(memory),
            cpu_percent: Some(memory / 2.0),
            bandwidth_mbps: Some(1.0),
        })
    }

    #[test]
    fn peaks_need_a_whole_window_with_an_answer_in_every_period() {
        let mut h = History::default();
        for (i, memory) in [30.0, 55.0, 40.0, 20.0].into_iter().enumerate() {
            h.record(1000 + 30 * i as u64, l(memory));
        }
        assert_eq!(h.since(), Some(1000));
        // Now 1090: a 90 s window starts at 1000, covered; 120 s is not.
        let peak = h.peak(1090, 90).unwrap();
        assert_eq!(
            (peak.memory_percent, peak.cpu_percent),
            (Some(55.0), Some(27.5))
        );
        assert_eq!(h.peak(1090, 120), None);
        // A window that starts after the 55 % sample.
        assert_eq!(h.peak(1090, 30).unwrap().memory_percent, Some(40.0));
        // A period without an answer holds the windows that include it.
        h.record(1120, None);
        assert_eq!(h.latest(), None);
        assert_eq!(h.peak(1120, 90), None);
        h.record(1150, l(10.0));
        // The unanswered period (1120-1150) overlaps a window starting at 1130.
        assert_eq!(h.peak(1150, 20), None);
        h.record(1180, l(10.0));
        assert_eq!(h.peak(1180, 20).unwrap().memory_percent, Some(10.0));
        // A window starting between two samples includes the earlier one: the load it saw
        // lasted into the window.
        assert_eq!(h.peak(1100, 25).unwrap().memory_percent, Some(40.0));
    }

    #[test]
    fn history_is_kept_for_the_largest_window_only() {
        let mut h = History::default();
        for i in 0..200 {
            h.record(30 * i, l(1.0));
        }
        let now = 30 * 199;
        assert!(h.since().unwrap() >= now - MAX_WINDOW_SECS - 30);
        assert!(h.peak(now, MAX_WINDOW_SECS).is_some());
        assert!(h.entries.len() <= 123, "{}", h.entries.len());
    }
}
