//! Steps carried out again without effect.
//!
//! Every plan is re-derived from what is observed, so a step that "succeeds" without changing
//! what the operator observes (a command Valkey accepts and then ignores, a write the cache
//! never shows) is planned again at once, and a round that acted is looked at again after the
//! quickest look ([`cadence`](super::cadence)): about 12 API calls every 100 ms, forever. So
//! the same steps carried out again back off. The first few repetitions are normal and come
//! as quickly as before: gossip after a MEET, a replica attaching, a cache catching up take a
//! few of Valkey's 100 ms cron ticks. From then on each repetition waits twice as long as the
//! last, up to 30 s (the look at a settled cluster). Any other plan, progress or nothing to
//! do, ends the streak. A streak long enough to be more than a slow step is reported in the
//! `StepsTakingEffect` condition.
//!
//! The back-off holds even when something else reconciles the cluster early (an event on a
//! member's pod, the very status write that reports the streak): the same steps are not
//! carried out again before their interval has passed ([`Turn::Hold`]). Streaks are kept in
//! memory per cluster; a new leader starts afresh.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cadence::{FORGET_AFTER, QUICKEST};
use crate::plan::{Plan, Step, describe_steps};

/// The longest wait before the same steps are carried out again: the look at a settled
/// cluster. A step that does not take effect then costs a round every 30 s, not ten a second.
pub const SLOWEST: Duration = Duration::from_secs(30);

/// Repetitions that come at the quickest look, as every repetition did before the back-off:
/// 300 ms of Valkey's cron ticks for gossip or a replica to catch up with a step (a MEET while
/// the handshake is under way is a no-op, so repeating it is harmless, just wasted).
pub const QUICK_REPEATS: u32 = 3;

/// Repetitions after which the streak is reported (`StepsTakingEffect=False` and a Warning
/// Event). With the back-off above the 9th repetition comes about 13 s after the first try,
/// while the next try waits 12.8 s: beyond any step of a healthy cluster (gossip spreads in
/// a second or three; a coordinated failover that has not happened within Valkey's 5 s
/// manual-failover timeout never will), so the condition does not flap during an ordinary
/// formation or rollout, and a step that is stuck is named within a quarter of a minute.
pub const REPORT_AFTER_REPEATS: u32 = 9;

/// How long to wait before carrying out the same steps again after `repeats` repetitions
/// (0: they were carried out once): 100 ms for the first [`QUICK_REPEATS`], then doubling
/// (200 ms, 400 ms, ...) up to [`SLOWEST`].
pub fn retry_interval(repeats: u32) -> Duration {
    let doublings = repeats
        .saturating_add(1)
        .saturating_sub(QUICK_REPEATS)
        .min(16);
    QUICKEST.saturating_mul(1 << doublings).min(SLOWEST)
}

/// What a plan acts on, as a fingerprint: its state and its steps. The same steps planned
/// again hash the same; any progress (a member, an address, a slot range, the state) does not.
/// The message is left out: it may say how long something has lasted.
pub fn fingerprint(plan: &Plan) -> u64 {
    let mut h = DefaultHasher::new();
    plan.state.hash(&mut h);
    plan.steps.hash(&mut h);
    h.finish()
}

/// The same steps carried out round after round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Streak {
    /// The plan's [`fingerprint`].
    plan: u64,
    /// The steps in words (see [`describe_steps`]).
    pub steps: String,
    /// More than one step.
    several: bool,
    /// Times they were carried out again after the first (0: once).
    pub repeats: u32,
    /// When they were last carried out.
    last: Instant,
}

impl Streak {
    /// How long until the steps may be carried out again, as of `now` (zero: now).
    pub fn due_in(&self, now: Instant) -> Duration {
        retry_interval(self.repeats).saturating_sub(now.saturating_duration_since(self.last))
    }

    /// Long enough to be reported (see [`REPORT_AFTER_REPEATS`]).
    pub fn reported(&self) -> bool {
        self.repeats >= REPORT_AFTER_REPEATS
    }

    /// For the condition and the Event: which steps, how often, when next, and that nobody
    /// needs to clear it.
    pub fn message(&self) -> String {
        let (steps, take) = if self.several {
            ("steps", "they take")
        } else {
            ("step", "it takes")
        };
        format!(
            "the operator carried out the same {steps} {} times in a row and nothing it observes changed: {}. Next try in {} (the wait doubles after each try, up to {}); this clears by itself once {take} effect. If it stays, the members' Valkey logs and docs/troubleshooting.md say why",
            self.repeats.saturating_add(1),
            self.steps,
            in_words(retry_interval(self.repeats)),
            in_words(SLOWEST),
        )
    }
}

/// `200 ms`, `1.6 s`, `30 s`.
fn in_words(d: Duration) -> String {
    match d.as_millis() {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}

/// What a round does with its plan's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The plan has no steps.
    Nothing,
    /// Carry them out: new steps, or the same ones whose retry interval has passed.
    Act,
    /// The same steps were carried out less than their retry interval ago and the plan is
    /// unchanged: carry out nothing, look again when they are due.
    Hold(Duration),
}

/// This round's turn, from the cluster's streak, this round's plan (its [`fingerprint`] and
/// whether it has steps) and `now`. A streak of other steps does not hold anything back.
fn turn(streak: Option<&Streak>, fingerprint: u64, has_steps: bool, now: Instant) -> Turn {
    if !has_steps {
        return Turn::Nothing;
    }
    match streak
        .filter(|s| s.plan == fingerprint)
        .map(|s| s.due_in(now))
    {
        Some(left) if !left.is_zero() => Turn::Hold(left),
        _ => Turn::Act,
    }
}

/// The streak after carrying out the steps of the plan `fingerprint` (`steps`) at `now`.
fn after_acting(streak: Option<Streak>, fingerprint: u64, steps: &[Step], now: Instant) -> Streak {
    match streak {
        Some(s) if s.plan == fingerprint => Streak {
            repeats: s.repeats.saturating_add(1),
            last: now,
            ..s
        },
        _ => Streak {
            plan: fingerprint,
            steps: describe_steps(steps),
            several: steps.len() > 1,
            repeats: 0,
            last: now,
        },
    }
}

/// Each cluster's streak, by cluster key.
#[derive(Default)]
pub struct Repeats {
    streaks: Mutex<HashMap<String, Streak>>,
}

impl Repeats {
    /// Whether `cluster` carries out `plan`'s steps this round. A plan other than the streak's
    /// (progress, or nothing to do) ends the streak.
    pub fn turn(&self, cluster: &str, plan: &Plan, now: Instant) -> Turn {
        let fingerprint = fingerprint(plan);
        let mut streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        if streaks.len() > 64 {
            streaks.retain(|_, s| now.saturating_duration_since(s.last) < FORGET_AFTER);
        }
        let has_steps = !plan.steps.is_empty();
        if streaks
            .get(cluster)
            .is_some_and(|s| !has_steps || s.plan != fingerprint)
        {
            streaks.remove(cluster);
        }
        turn(streaks.get(cluster), fingerprint, has_steps, now)
    }

    /// `plan`'s steps were carried out at `now`: the streak they are part of.
    pub fn acted(&self, cluster: &str, plan: &Plan, now: Instant) -> Streak {
        let mut streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        let streak = after_acting(streaks.remove(cluster), fingerprint(plan), &plan.steps, now);
        streaks.insert(cluster.to_string(), streak.clone());
        streak
    }

    /// The streak of `cluster`, if its last plan had steps.
    pub fn streak(&self, cluster: &str) -> Option<Streak> {
        let streaks = self.streaks.lock().unwrap_or_else(|e| e.into_inner());
        streaks.get(cluster).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterState;
    use crate::plan::Change;
    use crate::topology::MemberAddr;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A plan meeting member `target` (distinct targets: distinct steps); none for no steps.
    fn plan(target: Option<u8>) -> Plan {
        Plan {
            state: ClusterState::Creating,
            steps: target
                .map(|t| Step::Meet {
                    via: MemberAddr::new("10.0.0.1", 6379),
                    target: MemberAddr::new(format!("10.0.0.{t}"), 6379),
                })
                .into_iter()
                .collect(),
            message: "introducing members".into(),
            change: Change::Forming,
            lost_shards: vec![],
            names_the_missing: false,
            awaiting: Default::default(),
        }
    }

    #[test]
    fn the_first_repetitions_come_quickly_then_each_waits_twice_as_long_up_to_30_s() {
        let expected = [
            100, 100, 100, 200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000,
        ];
        for (repeats, want) in expected.iter().enumerate() {
            assert_eq!(retry_interval(repeats as u32), ms(*want), "after {repeats}");
        }
        assert_eq!(retry_interval(u32::MAX), SLOWEST);
    }

    #[test]
    fn a_stuck_step_is_reported_after_about_13_s_never_during_an_ordinary_wait() {
        // When repetition n comes, counted from the first try (round durations left out).
        let at = |n: u32| (0..n).map(retry_interval).sum::<Duration>();
        assert_eq!(at(REPORT_AFTER_REPEATS), ms(12_900));
        // Gossip (a second or three) and Valkey's 5 s manual-failover timeout are behind us.
        assert!(at(REPORT_AFTER_REPEATS) > Duration::from_secs(10));
        // And the reported step is then tried no more than every 12.8 s.
        assert_eq!(retry_interval(REPORT_AFTER_REPEATS), ms(12_800));
    }

    #[test]
    fn the_fingerprint_is_the_phase_and_the_steps_not_the_words() {
        let a = plan(Some(2));
        let mut reworded = a.clone();
        reworded.message = "introducing members (for 3 s)".into();
        assert_eq!(fingerprint(&a), fingerprint(&reworded));
        let mut other_state = a.clone();
        other_state.state = ClusterState::Degraded;
        assert_ne!(fingerprint(&a), fingerprint(&other_state));
        assert_ne!(fingerprint(&a), fingerprint(&plan(Some(3))));
        assert_ne!(fingerprint(&a), fingerprint(&plan(None)));
    }

    #[test]
    fn the_same_steps_are_held_back_until_due_and_other_steps_act_at_once() {
        let repeats = Repeats::default();
        let t0 = Instant::now();
        let (a, b) = (plan(Some(2)), plan(Some(3)));
        let mut t = t0;
        // Four tries 100 ms apart: the first and three quick repetitions.
        for n in 0..=QUICK_REPEATS {
            assert_eq!(repeats.turn("ns/c", &a, t), Turn::Act);
            assert_eq!(repeats.acted("ns/c", &a, t).repeats, n);
            // Reconciled early (a pod event): nothing is carried out before it is due.
            let left = retry_interval(n) - ms(40);
            assert_eq!(repeats.turn("ns/c", &a, t + ms(40)), Turn::Hold(left));
            t += ms(100);
        }
        // The fourth repetition waits 200 ms.
        assert_eq!(repeats.turn("ns/c", &a, t), Turn::Hold(ms(100)));
        assert_eq!(repeats.turn("ns/c", &a, t + ms(100)), Turn::Act);
        let s = repeats.acted("ns/c", &a, t + ms(100));
        assert_eq!((s.repeats, s.due_in(t + ms(100))), (4, ms(400)));
        // Another cluster has its own streak.
        assert_eq!(repeats.turn("ns/d", &a, t), Turn::Act);
        // Progress: other steps are carried out at once, and start a new streak.
        assert_eq!(repeats.turn("ns/c", &b, t + ms(150)), Turn::Act);
        assert_eq!(repeats.acted("ns/c", &b, t + ms(150)).repeats, 0);
        assert_eq!(repeats.turn("ns/c", &a, t + ms(160)), Turn::Act);
        assert_eq!(repeats.acted("ns/c", &a, t + ms(160)).repeats, 0);
    }

    #[test]
    fn a_plan_without_steps_ends_the_streak() {
        let repeats = Repeats::default();
        let t0 = Instant::now();
        let a = plan(Some(2));
        for n in 0..12 {
            repeats.acted("ns/c", &a, t0 + ms(n));
        }
        assert!(repeats.streak("ns/c").unwrap().reported());
        // The step took effect: the next plan waits (or the cluster settled).
        assert_eq!(
            repeats.turn("ns/c", &plan(None), t0 + ms(20)),
            Turn::Nothing
        );
        assert_eq!(repeats.streak("ns/c"), None);
        // The same step planned again later is a new streak, carried out at once.
        assert_eq!(repeats.turn("ns/c", &a, t0 + ms(30)), Turn::Act);
        assert_eq!(repeats.acted("ns/c", &a, t0 + ms(30)).repeats, 0);
    }

    #[test]
    fn a_held_round_keeps_the_streak_for_status() {
        let repeats = Repeats::default();
        let t0 = Instant::now();
        let a = plan(Some(2));
        let acted = repeats.acted("ns/c", &a, t0);
        assert!(matches!(repeats.turn("ns/c", &a, t0), Turn::Hold(_)));
        assert_eq!(repeats.streak("ns/c"), Some(acted));
    }

    #[test]
    fn streaks_of_clusters_long_gone_are_forgotten() {
        let repeats = Repeats::default();
        let t0 = Instant::now();
        let a = plan(Some(2));
        for i in 0..65 {
            repeats.acted(&format!("ns/c{i}"), &a, t0);
        }
        let later = t0 + FORGET_AFTER + Duration::from_secs(1);
        repeats.turn("ns/new", &a, later);
        assert_eq!(repeats.streaks.lock().unwrap().len(), 0);
    }

    #[test]
    fn the_report_names_the_step_the_count_and_the_next_try_for_people() {
        let t0 = Instant::now();
        let a = plan(Some(2));
        let mut streak = after_acting(None, fingerprint(&a), &a.steps, t0);
        for _ in 0..REPORT_AFTER_REPEATS {
            assert!(!streak.reported());
            streak = after_acting(Some(streak), fingerprint(&a), &a.steps, t0);
        }
        assert!(streak.reported());
        assert_eq!(
            streak.message(),
            "the operator carried out the same step 10 times in a row and nothing it observes \
             changed: introduce 10.0.0.2:6379 to the cluster through 10.0.0.1:6379 (CLUSTER MEET). \
             Next try in 12.8 s (the wait doubles after each try, up to 30 s); this clears by \
             itself once it takes effect. If it stays, the members' Valkey logs and \
             docs/troubleshooting.md say why"
        );
        let mut two = plan(Some(2));
        two.steps.extend(plan(Some(3)).steps);
        let several = Streak {
            repeats: REPORT_AFTER_REPEATS,
            ..after_acting(None, fingerprint(&two), &two.steps, t0)
        };
        assert!(several.message().starts_with(
            "the operator carried out the same steps 10 times in a row and nothing it observes \
             changed: introduce 10.0.0.2:6379 to the cluster through 10.0.0.1:6379 (CLUSTER \
             MEET) and 1 more step(s). Next try in 12.8 s"
        ));
        assert!(several.message().contains("once they take effect"));
        assert_eq!(in_words(ms(200)), "200 ms");
        assert_eq!(in_words(ms(1600)), "1.6 s");
        assert_eq!(in_words(SLOWEST), "30 s");
    }

    proptest! {
        /// However many repetitions: never quicker than 100 ms, never slower than 30 s, and
        /// never quicker than after one repetition fewer.
        #[test]
        fn the_retry_interval_is_bounded_and_only_grows(repeats in any::<u32>()) {
            let i = retry_interval(repeats);
            prop_assert!((QUICKEST..=SLOWEST).contains(&i));
            prop_assert!(i <= retry_interval(repeats.saturating_add(1)));
        }

        /// Whatever the rounds (plans repeated or changing, reconciles early or late): the
        /// wait is never below 100 ms nor above 30 s, the same steps are never carried out
        /// again before their interval has passed, and other steps reset the count.
        #[test]
        fn the_back_off_stays_within_bounds_and_resets_on_change(
            rounds in proptest::collection::vec((proptest::option::of(0u8..3), 0u64..40_000), 1..200),
        ) {
            let repeats = Repeats::default();
            let mut now = Instant::now();
            let mut last: Option<(u64, Streak)> = None;
            for (target, after) in rounds {
                now += ms(after);
                let p = plan(target.map(|t| t + 2));
                let fp = fingerprint(&p);
                match repeats.turn("ns/c", &p, now) {
                    Turn::Nothing => {
                        prop_assert!(p.steps.is_empty());
                        prop_assert_eq!(repeats.streak("ns/c"), None);
                        last = None;
                    }
                    Turn::Hold(left) => {
                        let (seen, streak) = last.clone().expect("held without a streak");
                        prop_assert_eq!(seen, fp);
                        prop_assert!(!left.is_zero() && left <= retry_interval(streak.repeats));
                    }
                    Turn::Act => {
                        let s = repeats.acted("ns/c", &p, now);
                        let again = retry_interval(s.repeats);
                        prop_assert!((QUICKEST..=SLOWEST).contains(&again));
                        match &last {
                            Some((seen, before)) if *seen == fp => {
                                prop_assert_eq!(s.repeats, before.repeats + 1);
                                prop_assert!(now - before.last >= retry_interval(before.repeats));
                            }
                            _ => prop_assert_eq!(s.repeats, 0),
                        }
                        last = Some((fp, s));
                    }
                }
            }
        }
    }
}
