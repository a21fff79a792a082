//! Members whose Valkey exits before they ever joined the cluster (a setting Valkey refuses, an
//! image without TLS support...). Such a member has no identity and no data, so starting its
//! pod again is safe; deleting and replacing the member instead made hundreds of pods in
//! minutes. Each new try waits twice as long as the last, as the kubelet's own crash backoff.
//! Pure: the node controller acts on it, the cluster controller reports it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::api::ValkeyNode;

/// The wait before the first new try.
pub const FIRST_RETRY: Duration = Duration::from_secs(10);
/// The longest wait between two tries.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// How the member's Valkey ended, when it ended before the member joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub exit_code: i32,
    pub reason: Option<String>,
    /// The last line Valkey logged (the termination message's; see the pod's
    /// `terminationMessagePolicy`).
    pub last_line: Option<String>,
    pub finished_at: Option<Timestamp>,
    /// Pods already started again for this member.
    pub restarts: i32,
}

impl StartFailure {
    /// For status and events: what happened, how often, and Valkey's own last words.
    pub fn describe(&self, now: Timestamp) -> String {
        let next = match self.wait_left(now) {
            Some(left) => format!("next try in {} s", left.as_secs()),
            None => "starting it again now".to_string(),
        };
        let mut text = format!(
            "its Valkey exited at start ({}, exit code {}; started again {} time(s), {next})",
            self.reason.as_deref().unwrap_or("Error"),
            self.exit_code,
            self.restarts,
        );
        if let Some(line) = &self.last_line {
            text.push_str(&format!(": {line}"));
        }
        text
    }

    /// How long the next try still waits; `None` when it is due.
    pub fn wait_left(&self, now: Timestamp) -> Option<Duration> {
        let delay = retry_delay(self.restarts);
        let since = match self.finished_at {
            Some(at) => now.duration_since(at).unsigned_abs(),
            None => Duration::MAX,
        };
        delay.checked_sub(since).filter(|left| !left.is_zero())
    }
}

/// The wait before try `restarts + 1`: 10 s, 20 s, 40 s ... at most 5 minutes.
pub fn retry_delay(restarts: i32) -> Duration {
    let doublings = u32::try_from(restarts.clamp(0, 16)).unwrap_or(0);
    FIRST_RETRY
        .checked_mul(1 << doublings)
        .map_or(MAX_RETRY, |d| d.min(MAX_RETRY))
}

/// The member's pod ended before the member ever had an identity, and nothing else restarts
/// it (a member that restarts in place is the kubelet's to restart, with its own backoff).
pub fn failed_before_joining(node: &ValkeyNode, pod: &Pod) -> Option<StartFailure> {
    let status = node.status.as_ref();
    if node.spec.restarts_in_place()
        || status.and_then(|s| s.node_id.as_ref()).is_some()
        || pod.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    let pod_status = pod.status.as_ref()?;
    if !matches!(pod_status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return None;
    }
    let terminated = pod_status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref());
    Some(StartFailure {
        exit_code: terminated.map_or(0, |t| t.exit_code),
        reason: terminated.and_then(|t| t.reason.clone()),
        last_line: terminated
            .and_then(|t| t.message.as_deref())
            .and_then(|m| m.lines().rev().find(|l| !l.trim().is_empty()))
            .map(|l| l.trim().to_string()),
        finished_at: terminated.and_then(|t| t.finished_at.as_ref()).map(|t| t.0),
        restarts: status.and_then(|s| s.start_failures).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyNodeSpec, ValkeyNodeStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(node_id: Option<&str>, restarts: Option<i32>) -> ValkeyNode {
        let spec: ValkeyNodeSpec = serde_json::from_value(serde_json::json!({
            "clusterName": "c", "shard": 0, "configRef": "m", "imageRef": "i",
            "image": "valkey/valkey:9.0.0", "version": "9.0.0",
            "resources": {}, "restartInPlace": false
        }))
        .unwrap();
        let mut n = ValkeyNode::new("c-0-0", spec);
        n.status = Some(ValkeyNodeStatus {
            node_id: node_id.map(Into::into),
            start_failures: restarts,
            ..Default::default()
        });
        n
    }

    fn exited(phase: &str, finished: Timestamp) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "valkey".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 1,
                            reason: Some("Error".into()),
                            message: Some(
                                "1:M * oO0OoO0OoO0Oo Valkey is starting\n1:M # Failed finding TLS support.\n"
                                    .into(),
                            ),
                            finished_at: Some(Time(finished)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_try_waits_twice_as_long_up_to_five_minutes() {
        let delays: Vec<u64> = (0..8).map(|r| retry_delay(r).as_secs()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_delay(-3), FIRST_RETRY);
        assert_eq!(retry_delay(i32::MAX), MAX_RETRY);
    }

    #[test]
    fn over_two_minutes_a_member_that_cannot_start_gets_single_digit_pods() {
        // Each pod lives about a second before Valkey exits.
        let (mut elapsed, mut pods) = (Duration::ZERO, 1);
        let mut restarts = 0;
        loop {
            elapsed += Duration::from_secs(1) + retry_delay(restarts);
            if elapsed > Duration::from_secs(120) {
                break;
            }
            pods += 1;
            restarts += 1;
        }
        assert!(pods < 10, "{pods} pods in two minutes");
    }

    #[test]
    fn only_a_member_that_never_joined_and_does_not_restart_in_place_is_started_again() {
        let now = Timestamp::now();
        let failure = failed_before_joining(&node(None, Some(2)), &exited("Failed", now)).unwrap();
        assert_eq!(failure.restarts, 2);
        assert_eq!(
            failure.last_line.as_deref(),
            Some("1:M # Failed finding TLS support.")
        );
        assert_eq!(failure.wait_left(now), Some(Duration::from_secs(40)));
        let text = failure.describe(now);
        assert!(text.contains("exit code 1"), "{text}");
        assert!(text.ends_with("Failed finding TLS support."), "{text}");
        // Had an identity: the cluster controller replaces it (its replicas may follow it).
        assert_eq!(
            failed_before_joining(&node(Some("abc"), None), &exited("Failed", now)),
            None
        );
        // Still running.
        assert_eq!(
            failed_before_joining(&node(None, None), &exited("Running", now)),
            None
        );
        let mut in_place = node(None, None);
        in_place.spec.restart_in_place = Some(true);
        assert_eq!(
            failed_before_joining(&in_place, &exited("Failed", now)),
            None
        );
    }

    #[test]
    fn the_next_try_is_due_once_its_delay_has_passed() {
        let now = Timestamp::now();
        let earlier = now - std::time::Duration::from_secs(15);
        let failure = failed_before_joining(&node(None, None), &exited("Failed", earlier)).unwrap();
        assert_eq!(failure.wait_left(now), None, "10 s delay, 15 s ago");
        let failure =
            failed_before_joining(&node(None, Some(1)), &exited("Failed", earlier)).unwrap();
        assert_eq!(failure.wait_left(now), Some(Duration::from_secs(5)));
    }
}
