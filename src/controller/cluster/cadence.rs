//! When to look at a cluster again.
//!
//! Kubernetes' side of a change is watched (a pod turning ready reconciles at once), Valkey's
//! side is not: gossip after a MEET, a replica's sync, a slot move finishing are only seen by
//! looking. A fixed 2 s poll made every fast step of a formation wait up to 2 s for the next
//! look (a 3 x 1 cluster took ~6 s longer than forming it by hand); a fixed fast poll would
//! hammer a fleet whose clusters wait minutes for something slow. So the poll follows the
//! wait: a wait that just began is looked at again in 100 ms, one that has lasted `t` in
//! `t / 8` (what it costs is an eighth of what it already took), at most every 2 s. A step
//! that acted, or a wait for something else, starts again at 100 ms; the same steps acted on
//! round after round back off instead (see [`repeats`](super::repeats)).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plan::Plan;

/// The quickest look: Valkey's cluster cron (gossip, failover steps) ticks every 100 ms.
pub(super) const QUICKEST: Duration = Duration::from_millis(100);
/// The calmest look while something changes (the former fixed interval).
const CALMEST: Duration = Duration::from_secs(2);
/// Entries older than this are dropped (a cluster deleted mid-change leaves one behind).
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// How soon to look at a changing cluster whose current wait has lasted `waited`.
pub fn poll_interval(waited: Duration) -> Duration {
    (waited / 8).clamp(QUICKEST, CALMEST)
}

/// What a plan waits for, as a fingerprint: the same wait seen again hashes the same; any
/// progress (other members or shards waited on, figures that moved, other steps) hashes
/// differently. Read from the plan's data only ([`Plan::awaiting`], its state, kind of change
/// and steps), never from its message: rewording a message changes no cadence.
pub fn wait_fingerprint(plan: &Plan) -> u64 {
    let mut h = DefaultHasher::new();
    plan.state.hash(&mut h);
    plan.change.hash(&mut h);
    plan.steps.hash(&mut h);
    plan.awaiting.hash(&mut h);
    h.finish()
}

/// Since when each changing cluster has waited for the same thing, by cluster key.
#[derive(Default)]
pub struct Waits {
    started: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Waits {
    /// How long `cluster` has been waiting for `fingerprint` as of `now`; a new fingerprint,
    /// or a round that acted, starts a new wait (zero).
    pub fn waited(&self, cluster: &str, fingerprint: u64, acted: bool, now: Instant) -> Duration {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if started.len() > 64 {
            started.retain(|_, (_, since)| now.duration_since(*since) < FORGET_AFTER);
        }
        match started.get(cluster) {
            Some((seen, since)) if *seen == fingerprint && !acted => now.duration_since(*since),
            _ => {
                started.insert(cluster.to_string(), (fingerprint, now));
                Duration::ZERO
            }
        }
    }

    /// `cluster` is at rest (or gone): its next change starts with a quick look.
    pub fn settled(&self, cluster: &str) {
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterState;
    use crate::plan::{Awaiting, Change, Wait};

    #[test]
    fn a_fresh_wait_is_looked_at_quickly_and_a_long_one_calmly() {
        assert_eq!(poll_interval(Duration::ZERO), QUICKEST);
        assert_eq!(poll_interval(Duration::from_millis(800)), QUICKEST);
        assert_eq!(
            poll_interval(Duration::from_secs(1)),
            Duration::from_millis(125)
        );
        assert_eq!(
            poll_interval(Duration::from_secs(4)),
            Duration::from_millis(500)
        );
        assert_eq!(poll_interval(Duration::from_secs(16)), CALMEST);
        assert_eq!(poll_interval(Duration::from_secs(3600)), CALMEST);
    }

    #[test]
    fn the_interval_never_shrinks_as_a_wait_goes_on() {
        let mut last = Duration::ZERO;
        for ms in (0..40_000).step_by(50) {
            let i = poll_interval(Duration::from_millis(ms));
            assert!(i >= last && (QUICKEST..=CALMEST).contains(&i));
            last = i;
        }
    }

    #[test]
    fn the_same_wait_accumulates_and_progress_restarts_it() {
        let waits = Waits::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(waits.waited("ns/a", 1, false, t0), Duration::ZERO);
        assert_eq!(waits.waited("ns/a", 1, false, t0 + s(3)), s(3));
        assert_eq!(waits.waited("ns/b", 1, false, t0 + s(3)), Duration::ZERO);
        assert_eq!(waits.waited("ns/a", 1, false, t0 + s(5)), s(5));
        // Something else to wait for, or a round that acted: a new wait.
        assert_eq!(waits.waited("ns/a", 2, false, t0 + s(6)), Duration::ZERO);
        assert_eq!(waits.waited("ns/a", 2, true, t0 + s(7)), Duration::ZERO);
        assert_eq!(waits.waited("ns/a", 2, false, t0 + s(9)), s(2));
        waits.settled("ns/a");
        assert_eq!(waits.waited("ns/a", 2, false, t0 + s(10)), Duration::ZERO);
    }

    /// A plan waiting for `replicas` to sync, in `message`.
    fn syncing(replicas: &[&str], message: &str) -> Plan {
        Plan {
            state: ClusterState::Creating,
            steps: vec![],
            message: message.into(),
            change: Change::Forming,
            lost_shards: vec![],
            names_the_missing: false,
            awaiting: Awaiting {
                on: Wait::ReplicaSync {
                    replicas: replicas.iter().map(|r| r.to_string()).collect(),
                },
                silent: vec![],
            },
        }
    }

    #[test]
    fn rewording_a_message_keeps_the_wait() {
        let before = syncing(&["c-0-1"], "waiting for replicas to sync: c-0-1");
        let reworded = syncing(&["c-0-1"], "replica c-0-1 is still syncing");
        assert_eq!(wait_fingerprint(&before), wait_fingerprint(&reworded));
    }

    #[test]
    fn progress_in_what_is_waited_on_is_a_new_wait() {
        let message = "waiting for replicas to sync";
        let both = syncing(&["c-0-1", "c-1-1"], message);
        let one = syncing(&["c-1-1"], message);
        assert_ne!(wait_fingerprint(&both), wait_fingerprint(&one));
        // The same replicas, now waited on by another stage.
        let mut health = one.clone();
        health.awaiting.on = Wait::Health {
            not_ok: vec!["c-1-1".into()],
            slots_covered: 16384,
        };
        assert_ne!(wait_fingerprint(&one), wait_fingerprint(&health));
        // Figures moving are progress too.
        let covered = |slots_covered| {
            let mut p = health.clone();
            p.awaiting.on = Wait::Health {
                not_ok: vec![],
                slots_covered,
            };
            wait_fingerprint(&p)
        };
        assert_ne!(covered(8192), covered(16000));
        // A silent member coming back, or a state changing, too.
        let mut silent = one.clone();
        silent.awaiting.silent = vec!["c-2-0".into()];
        assert_ne!(wait_fingerprint(&one), wait_fingerprint(&silent));
        let mut degraded = one.clone();
        degraded.state = ClusterState::Degraded;
        assert_ne!(wait_fingerprint(&one), wait_fingerprint(&degraded));
    }

    #[test]
    fn waits_of_clusters_long_gone_are_forgotten() {
        let waits = Waits::default();
        let t0 = Instant::now();
        for i in 0..65 {
            waits.waited(&format!("ns/c{i}"), 1, false, t0);
        }
        let later = t0 + FORGET_AFTER + Duration::from_secs(1);
        waits.waited("ns/new", 1, false, later);
        let started = waits.started.lock().unwrap();
        assert_eq!(started.len(), 1, "only the fresh entry stays");
    }
}
