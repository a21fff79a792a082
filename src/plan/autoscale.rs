//! Shard autoscaling decisions (pure; Momento v0.9, issue 30, `../shared/spec/MOMENTO-V09.md`
//! sections 1 and 3): from a cluster's autoscaling policy, where the cluster stands and each
//! member's utilization, whether to add or remove one shard, or why not. A decision only moves
//! the shard target; the ordinary scaling path (add empty shards and move slots, or drain the
//! smallest shard and retire it) does the rest, exactly as for a `spec.shards` change.
//!
//! Autoscaling is a topology change the operator starts by itself, so every rule leans to
//! holding: nothing is decided on a cluster that is not settled, one shard per decision, a
//! missing sample never adds a shard and always holds back a removal, and a removal must leave
//! the data and load clear of the scale-out thresholds (the fit rule).

/// Which utilization figure a threshold applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    Memory,
    Cpu,
    Bandwidth,
}

impl Trigger {
    pub const ALL: [Trigger; 3] = [Trigger::Memory, Trigger::Cpu, Trigger::Bandwidth];

    /// The word Events use.
    pub fn word(self) -> &'static str {
        match self {
            Trigger::Memory => "memory",
            Trigger::Cpu => "cpu",
            Trigger::Bandwidth => "bandwidth",
        }
    }

    /// A figure as Events print it: `84.2%`, `812.0 Mbps`.
    fn figure(self, value: f64) -> String {
        match self {
            Trigger::Bandwidth => format!("{value:.1} Mbps"),
            _ => format!("{value:.1}%"),
        }
    }

    /// A threshold as Events print it: `80%`, `800 Mbps`.
    fn threshold(self, value: f64) -> String {
        match self {
            Trigger::Bandwidth => format!("{value} Mbps"),
            _ => format!("{value}%"),
        }
    }

    /// How far below a scale-out threshold a scale-in must leave every primary: 5 percentage
    /// points, or 5 % of a bandwidth threshold.
    fn margin(self, threshold: f64) -> f64 {
        match self {
            Trigger::Bandwidth => threshold * 0.05,
            _ => 5.0,
        }
    }
}

/// The thresholds of `scaleOut` or `scaleIn`; a trigger is active when set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub memory_percent: Option<u32>,
    pub cpu_percent: Option<u32>,
    pub bandwidth_mbps: Option<u32>,
}

impl Thresholds {
    pub fn get(&self, trigger: Trigger) -> Option<f64> {
        match trigger {
            Trigger::Memory => self.memory_percent,
            Trigger::Cpu => self.cpu_percent,
            Trigger::Bandwidth => self.bandwidth_mbps,
        }
        .map(f64::from)
    }

    /// The triggers set, with their thresholds.
    fn set(&self) -> impl Iterator<Item = (Trigger, f64)> + '_ {
        Trigger::ALL
            .into_iter()
            .filter_map(|t| Some((t, self.get(t)?)))
    }
}

/// One member's utilization figures; a figure is absent when it has no denominator (no
/// memory budget, no CPU limit) or no previous sample to take a rate from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    pub memory_percent: Option<f64>,
    pub cpu_percent: Option<f64>,
    pub bandwidth_mbps: Option<f64>,
}

impl Load {
    pub fn get(&self, trigger: Trigger) -> Option<f64> {
        match trigger {
            Trigger::Memory => self.memory_percent,
            Trigger::Cpu => self.cpu_percent,
            Trigger::Bandwidth => self.bandwidth_mbps,
        }
    }

    fn figure_mut(&mut self, trigger: Trigger) -> &mut Option<f64> {
        match trigger {
            Trigger::Memory => &mut self.memory_percent,
            Trigger::Cpu => &mut self.cpu_percent,
            Trigger::Bandwidth => &mut self.bandwidth_mbps,
        }
    }
}

/// `spec.autoscaling`, with its defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub min_shards: usize,
    pub max_shards: usize,
    pub scale_out: Thresholds,
    /// Absent: shards are never removed automatically.
    pub scale_in: Option<Thresholds>,
    pub scale_in_window_secs: u64,
    pub scale_out_cooldown_secs: u64,
    pub scale_in_cooldown_secs: u64,
}

/// One member as sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberLoad {
    /// Its ValkeyNode's name (Events name it).
    pub name: String,
    pub shard: usize,
    pub primary: bool,
    /// Slots it owns (primaries).
    pub slots: usize,
    /// Its latest sample; absent when it did not answer in the last period.
    pub latest: Option<Load>,
    /// Its peaks over the scale-in window; absent unless its samples cover the whole window
    /// (a member created less than a window ago, or an operator restarted since).
    pub window_peak: Option<Load>,
}

/// Where the cluster stands this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNow {
    /// Unix seconds.
    pub now: u64,
    /// `status.autoscaling.desiredShards`.
    pub desired_shards: usize,
    /// Shards serving slots.
    pub serving_shards: usize,
    /// Every member Active and no slot moving.
    pub settled: bool,
    /// The cluster's state is `Active`.
    pub active: bool,
    /// The pause annotation is set.
    pub paused: bool,
    pub last_scale_out: Option<u64>,
    pub last_scale_in: Option<u64>,
    /// `ScaleOutLimited` was already recorded for the episode under way (the trigger has not
    /// cleared since).
    pub limited_recorded: bool,
}

/// Why no decision could be taken (`status.autoscaling.holding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    NotConverged,
    OutCooldown,
    InCooldown,
    HistoryTooShort,
    AtMaxShards,
    AtMinShards,
    WouldNotFit,
    NoBudget,
    Paused,
}

impl Holding {
    pub fn as_str(self) -> &'static str {
        match self {
            Holding::NotConverged => "NotConverged",
            Holding::OutCooldown => "OutCooldown",
            Holding::InCooldown => "InCooldown",
            Holding::HistoryTooShort => "HistoryTooShort",
            Holding::AtMaxShards => "AtMaxShards",
            Holding::AtMinShards => "AtMinShards",
            Holding::WouldNotFit => "WouldNotFit",
            Holding::NoBudget => "NoBudget",
            Holding::Paused => "Paused",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Out,
    In,
}

impl Direction {
    /// The Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Direction::Out => "ScaleOut",
            Direction::In => "ScaleIn",
        }
    }
}

/// A change of the shard target, with the Event note that records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub direction: Direction,
    pub from: usize,
    pub to: usize,
    /// The trigger that added a shard (none for a removal or a range edit).
    pub trigger: Option<Trigger>,
    pub note: String,
}

/// What this round decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub desired_shards: usize,
    pub decision: Option<Decision>,
    pub holding: Option<Holding>,
    /// A `ScaleOutLimited` Warning to record (once per episode).
    pub limited: Option<String>,
}

impl Outcome {
    fn hold(now: &ClusterNow, holding: Option<Holding>) -> Outcome {
        Outcome {
            desired_shards: now.desired_shards,
            decision: None,
            holding,
            limited: None,
        }
    }
}

/// The shard target a cluster starts with, or goes to when autoscaling is switched on:
/// `shards` moved into `[minShards, maxShards]`.
pub fn initial_target(policy: &Policy, shards: usize) -> usize {
    shards.clamp(policy.min_shards, policy.max_shards.max(policy.min_shards))
}

/// This round's decision. Order: the gate (paused, not settled), a target outside the range
/// (moved to the nearest bound at once), a scale-out (primaries only), then a scale-in.
pub fn decide(policy: &Policy, now: &ClusterNow, members: &[MemberLoad]) -> Outcome {
    if now.paused {
        return Outcome::hold(now, Some(Holding::Paused));
    }
    if !now.active || !now.settled || now.serving_shards != now.desired_shards {
        return Outcome::hold(now, Some(Holding::NotConverged));
    }
    if let Some(outcome) = into_range(policy, now, members) {
        return outcome;
    }
    if let Some(outcome) = scale_out(policy, now, members) {
        return outcome;
    }
    scale_in(policy, now, members)
}

/// A target outside `[minShards, maxShards]` (the range was edited) goes to the nearest bound
/// at once, with no cooldown; shrinking stops at the smallest count the data fits in.
fn into_range(policy: &Policy, now: &ClusterNow, members: &[MemberLoad]) -> Option<Outcome> {
    let from = now.desired_shards;
    let (to, holding) = if from < policy.min_shards {
        (policy.min_shards, None)
    } else if from > policy.max_shards {
        let fitting = smallest_fitting(policy, members, from, policy.max_shards);
        let holding = (fitting > policy.max_shards).then_some(Holding::WouldNotFit);
        (fitting, holding)
    } else {
        return None;
    };
    let direction = if to > from {
        Direction::Out
    } else {
        Direction::In
    };
    let decision = (to != from).then(|| Decision {
        direction,
        from,
        to,
        trigger: None,
        note: format!(
            "{from} -> {to} shards: the autoscaling range is now [{}, {}]{}",
            policy.min_shards,
            policy.max_shards,
            if holding.is_some() {
                format!(", and the data fits in no fewer than {to} shards")
            } else {
                String::new()
            }
        ),
    });
    Some(Outcome {
        desired_shards: to,
        decision,
        holding,
        limited: None,
    })
}

/// A primary at or above a `scaleOut` threshold adds one shard, unless at `maxShards` or
/// within the cooldown since the last scale-out. Replicas never add a shard.
fn scale_out(policy: &Policy, now: &ClusterNow, members: &[MemberLoad]) -> Option<Outcome> {
    let (member, trigger, value, threshold) = members
        .iter()
        .filter(|m| m.primary)
        .filter_map(|m| Some((m, m.latest?)))
        .flat_map(|(m, load)| {
            policy
                .scale_out
                .set()
                .filter_map(move |(t, threshold)| Some((m, t, load.get(t)?, threshold)))
        })
        .filter(|(_, _, value, threshold)| value >= threshold)
        .max_by(|a, b| (a.2 / a.3).total_cmp(&(b.2 / b.3)))?;
    let from = now.desired_shards;
    let firing = format!(
        "{} {} >= {}",
        trigger.word(),
        trigger.figure(value),
        trigger.threshold(threshold)
    );
    if from >= policy.max_shards {
        return Some(Outcome {
            limited: (!now.limited_recorded).then(|| {
                format!(
                    "{firing} on node {}, but already at maxShards {}",
                    member.name, policy.max_shards
                )
            }),
            ..Outcome::hold(now, Some(Holding::AtMaxShards))
        });
    }
    if within(now.now, now.last_scale_out, policy.scale_out_cooldown_secs) {
        return Some(Outcome::hold(now, Some(Holding::OutCooldown)));
    }
    Some(Outcome {
        desired_shards: from + 1,
        decision: Some(Decision {
            direction: Direction::Out,
            from,
            to: from + 1,
            trigger: Some(trigger),
            note: format!(
                "{from} -> {} shards: node {} {firing}",
                from + 1,
                member.name
            ),
        }),
        holding: None,
        limited: None,
    })
}

/// Removes one shard when every member's peaks over the whole window are below every
/// `scaleIn` threshold, the cooldown has passed and the data fits in one shard fewer.
fn scale_in(policy: &Policy, now: &ClusterNow, members: &[MemberLoad]) -> Outcome {
    let Some(scale_in) = &policy.scale_in else {
        return Outcome::hold(now, None);
    };
    let from = now.desired_shards;
    if from <= policy.min_shards {
        return Outcome::hold(now, Some(Holding::AtMinShards));
    }
    let mut peaks = Vec::with_capacity(members.len());
    for m in members {
        match (&m.latest, &m.window_peak) {
            (Some(_), Some(peak)) => peaks.push(peak),
            _ => return Outcome::hold(now, Some(Holding::HistoryTooShort)),
        }
    }
    let mut below = Vec::new();
    for (trigger, threshold) in scale_in.set() {
        let values: Option<Vec<f64>> = peaks.iter().map(|p| p.get(trigger)).collect();
        let Some(values) = values else {
            let holding = match trigger {
                Trigger::Bandwidth => Holding::HistoryTooShort,
                _ => Holding::NoBudget,
            };
            return Outcome::hold(now, Some(holding));
        };
        let peak = values.into_iter().fold(0.0, f64::max);
        if peak >= threshold {
            // Not quiet: nothing to hold, the cluster is simply in use.
            return Outcome::hold(now, None);
        }
        below.push(format!(
            "{} {} < {}",
            trigger.word(),
            trigger.figure(peak),
            trigger.threshold(threshold)
        ));
    }
    if within(now.now, now.last_scale_in, policy.scale_in_cooldown_secs) {
        return Outcome::hold(now, Some(Holding::InCooldown));
    }
    match fits_one_fewer(policy, &primaries(members), from) {
        Fit::Fits => {}
        Fit::NoBudget => return Outcome::hold(now, Some(Holding::NoBudget)),
        Fit::TooFull => return Outcome::hold(now, Some(Holding::WouldNotFit)),
    }
    Outcome {
        desired_shards: from - 1,
        decision: Some(Decision {
            direction: Direction::In,
            from,
            to: from - 1,
            trigger: None,
            note: format!(
                "{from} -> {} shards: peaks over {}s below scale-in thresholds ({})",
                from - 1,
                policy.scale_in_window_secs,
                below.join(", ")
            ),
        }),
        holding: None,
        limited: None,
    }
}

/// Whether `last` is less than `cooldown` seconds before `now`.
fn within(now: u64, last: Option<u64>, cooldown: u64) -> bool {
    last.is_some_and(|t| now.saturating_sub(t) < cooldown)
}

/// A primary for the fit rule: the slots it owns and its window peaks (latest figures when
/// the window is not covered yet: a range edit does not wait for history).
#[derive(Clone, Copy, Debug)]
struct Shard {
    slots: usize,
    load: Load,
}

fn primaries(members: &[MemberLoad]) -> Vec<Shard> {
    members
        .iter()
        .filter(|m| m.primary)
        .map(|m| Shard {
            slots: m.slots,
            load: m.window_peak.or(m.latest).unwrap_or_default(),
        })
        .collect()
}

enum Fit {
    Fits,
    NoBudget,
    TooFull,
}

/// The fit rule: with `n` shards, `p_i` each primary's peak of a figure and `s` the primary of
/// the smallest shard (fewest slots, then least memory), one shard fewer fits when
/// `max_i(p_i) + p_s / (n - 1) < T - margin` for every trigger `T` set in `scaleOut`, and for
/// memory with `T = 90` when `scaleOut` sets none. Without a memory figure on some primary the
/// memory check is impossible: no removal.
fn fits_one_fewer(policy: &Policy, shards: &[Shard], n: usize) -> Fit {
    if n < 2 || shards.is_empty() {
        return Fit::TooFull;
    }
    let Some(smallest) = smallest_shard(shards) else {
        return Fit::TooFull;
    };
    for (trigger, threshold) in fit_triggers(policy) {
        let values: Option<Vec<f64>> = shards.iter().map(|s| s.load.get(trigger)).collect();
        let Some(values) = values else {
            if trigger == Trigger::Memory {
                return Fit::NoBudget;
            }
            continue;
        };
        let max = values.iter().copied().fold(0.0, f64::max);
        let moved = shards[smallest].load.get(trigger).unwrap_or(0.0) / (n - 1) as f64;
        if max + moved >= threshold - trigger.margin(threshold) {
            return Fit::TooFull;
        }
    }
    Fit::Fits
}

/// The triggers the fit rule checks: those set in `scaleOut`, and memory at 90 % when unset.
fn fit_triggers(policy: &Policy) -> Vec<(Trigger, f64)> {
    let mut triggers: Vec<(Trigger, f64)> = policy.scale_out.set().collect();
    if policy.scale_out.memory_percent.is_none() {
        triggers.push((Trigger::Memory, 90.0));
    }
    triggers
}

/// The index of the shard a scale-in drains: fewest slots, then least memory.
fn smallest_shard(shards: &[Shard]) -> Option<usize> {
    (0..shards.len()).min_by(|&a, &b| {
        let memory = |i: usize| shards[i].load.memory_percent.unwrap_or(0.0);
        shards[a]
            .slots
            .cmp(&shards[b].slots)
            .then(memory(a).total_cmp(&memory(b)))
    })
}

/// The smallest shard count at or above `floor` the data fits in, removing shards one at a
/// time from `from` by the fit rule: each removal spreads the drained shard's slots and load
/// evenly over the rest.
fn smallest_fitting(policy: &Policy, members: &[MemberLoad], from: usize, floor: usize) -> usize {
    let mut shards = primaries(members);
    let mut n = from;
    while n > floor {
        if !matches!(fits_one_fewer(policy, &shards, n), Fit::Fits) {
            break;
        }
        let Some(s) = smallest_shard(&shards) else {
            break;
        };
        let drained = shards.remove(s);
        let rest = shards.len().max(1);
        for shard in &mut shards {
            shard.slots += drained.slots / rest;
            for t in Trigger::ALL {
                let add = drained.load.get(t).unwrap_or(0.0) / rest as f64;
                if let Some(v) = shard.load.figure_mut(t).as_mut() {
                    *v += add;
                }
            }
        }
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests;
