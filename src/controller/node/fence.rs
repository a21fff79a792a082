//! One Valkey process per volume. A force-deleted pod (`kubectl delete pod --force
//! --grace-period=0`) leaves the API at once, while its kubelet stops the container a few
//! seconds later. A replacement created meanwhile on the same volume loads the data directory
//! while the old process still writes to it and still acknowledges writes, and what it
//! acknowledged after the new one loaded is lost (seen: 10 writes a replica had confirmed
//! with `WAIT`, the new pod started 0.1 s before the kubelet stopped the old container). So
//! a durable member's pod is created again only once the address of the pod it last had stops
//! accepting connections. A pod deleted gracefully is gone from the API only after its
//! container stopped: the check then costs one refused connection.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::constants::CLIENT_PORT;

/// Past this, the replacement is created anyway (with a Warning Event): an address that still
/// answers this long after its pod left the API is a node whose kubelet stopped syncing, or
/// the address was given to another pod.
pub const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// How long a connection attempt may take: a live process on a reachable address accepts
/// within milliseconds; an address nobody holds any more may not answer at all.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// The address of each member's last running pod (by ValkeyNode uid), and since when its
/// replacement waits for it.
#[derive(Default)]
pub struct LastPods(Mutex<HashMap<String, LastPod>>);

#[derive(Clone, Debug, PartialEq)]
struct LastPod {
    ip: String,
    waiting_since: Option<Instant>,
}

/// What to do about a member whose pod is gone.
#[derive(Debug, PartialEq, Eq)]
pub enum Fence {
    /// Nothing of the old pod answers (or nothing is known of it): create the pod.
    Clear,
    /// The old pod's process still answers at `ip`: wait; `first` is the first round of it.
    Wait { ip: String, first: bool },
    /// It still answers after [`LONGEST_WAIT`]: create the pod anyway, and say so.
    GaveUp { ip: String },
}

impl LastPods {
    /// Remembers the address of `pod`, the running pod of the member `node_uid`.
    pub fn saw(&self, node_uid: &str, pod: &Pod) {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            return;
        };
        let mut pods = self.lock();
        let same = pods.get(node_uid).is_some_and(|p| p.ip == ip);
        if !same {
            pods.insert(
                node_uid.to_string(),
                LastPod {
                    ip,
                    waiting_since: None,
                },
            );
        }
    }

    /// Forgets the member `node_uid` (deleted).
    pub fn forget(&self, node_uid: &str) {
        self.lock().remove(node_uid);
    }

    /// Whether the member `node_uid`'s pod may be created again: its last pod's process no
    /// longer accepts connections.
    pub async fn check(&self, node_uid: &str) -> Fence {
        let Some(last) = self.lock().get(node_uid).cloned() else {
            return Fence::Clear;
        };
        let answers = accepts_connections(&last.ip).await;
        let now = Instant::now();
        let fence = decide(&last, answers, now);
        let mut pods = self.lock();
        match &fence {
            Fence::Clear | Fence::GaveUp { .. } => {
                pods.remove(node_uid);
            }
            Fence::Wait { first: true, .. } => {
                if let Some(p) = pods.get_mut(node_uid) {
                    p.waiting_since = Some(now);
                }
            }
            Fence::Wait { .. } => {}
        }
        fence
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LastPod>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fence for `last` when its address `answers` (or not) at `now`.
fn decide(last: &LastPod, answers: bool, now: Instant) -> Fence {
    if !answers {
        return Fence::Clear;
    }
    let ip = last.ip.clone();
    match last.waiting_since {
        None => Fence::Wait { ip, first: true },
        Some(since) if now.duration_since(since) < LONGEST_WAIT => Fence::Wait { ip, first: false },
        Some(_) => Fence::GaveUp { ip },
    }
}

/// Whether something accepts a TCP connection on Valkey's client port at `ip`.
async fn accepts_connections(ip: &str) -> bool {
    let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect((ip, CLIENT_PORT));
    matches!(
        tokio::time::timeout(CONNECT_TIMEOUT, connect).await,
        Ok(Ok(_))
    )
}

/// The key of member `node` in [`LastPods`]: its uid (its name before it has one).
pub fn node_uid(node: &crate::api::ValkeyNode) -> String {
    node.uid().unwrap_or_else(|| node.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(waiting_for: Option<Duration>, now: Instant) -> LastPod {
        LastPod {
            ip: "10.0.0.7".into(),
            waiting_since: waiting_for.map(|d| now - d),
        }
    }

    #[test]
    fn the_replacement_waits_while_the_old_address_answers_and_not_forever() {
        let now = Instant::now() + Duration::from_secs(600);
        assert_eq!(decide(&last(None, now), false, now), Fence::Clear);
        assert_eq!(
            decide(&last(Some(Duration::from_secs(5)), now), false, now),
            Fence::Clear
        );
        assert_eq!(
            decide(&last(None, now), true, now),
            Fence::Wait {
                ip: "10.0.0.7".into(),
                first: true
            }
        );
        assert_eq!(
            decide(&last(Some(Duration::from_secs(5)), now), true, now),
            Fence::Wait {
                ip: "10.0.0.7".into(),
                first: false
            }
        );
        assert_eq!(
            decide(&last(Some(LONGEST_WAIT), now), true, now),
            Fence::GaveUp {
                ip: "10.0.0.7".into()
            }
        );
    }

    #[tokio::test]
    async fn a_listening_address_answers_and_a_closed_one_does_not() {
        // Something listening on the client port of a loopback address stands for the old
        // process; the member is fenced until it stops.
        let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.77", CLIENT_PORT)).await else {
            // The port is taken on this machine: a Valkey of the developer's own answers,
            // which proves the same.
            assert!(accepts_connections("127.0.0.77").await);
            return;
        };
        let pods = LastPods::default();
        let pod = Pod {
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                pod_ip: Some("127.0.0.77".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        pods.saw("uid-1", &pod);
        assert!(matches!(
            pods.check("uid-1").await,
            Fence::Wait { first: true, .. }
        ));
        assert!(matches!(
            pods.check("uid-1").await,
            Fence::Wait { first: false, .. }
        ));
        drop(listener);
        assert_eq!(pods.check("uid-1").await, Fence::Clear);
        // Forgotten once clear: nothing is checked again.
        assert_eq!(pods.check("uid-1").await, Fence::Clear);
        assert_eq!(pods.check("never-seen").await, Fence::Clear);
    }
}
