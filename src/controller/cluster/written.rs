//! Reading our own status writes. The cluster store sees a status this replica wrote only when
//! the watch delivers it, a moment after the write; a reconcile that starts in between (a
//! member pod's event queued it) reads the status from before. Conditions carried from round
//! to round would then be lost: the `DataLost` condition set in one round (the only round
//! that can see the loss) was dropped by the next, which wrote its status without it. So each
//! write's result is kept until the store catches up, and a reconcile starts from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::api::ValkeyCluster;

/// The cluster as the API server returned it after this replica's last status write, per
/// cluster (by uid), until the store holds that version or a later one.
#[derive(Default)]
pub struct StatusWrites(Mutex<HashMap<String, Written>>);

struct Written {
    /// The resourceVersion the write replaced (what the store held when the round began).
    replaced: Option<String>,
    /// The cluster after the write.
    cluster: Arc<ValkeyCluster>,
    at: Instant,
}

/// A store lags a write by the watch's delay, well under this; a write older than this is
/// forgotten (the cluster was deleted, so no round comes to forget it).
const KEPT_FOR: Duration = Duration::from_secs(60);

impl StatusWrites {
    /// Remembers `after`, the result of writing the status of `before`.
    pub fn record(&self, before: &ValkeyCluster, after: ValkeyCluster) {
        let Some(uid) = before.uid() else {
            return;
        };
        let written = Written {
            replaced: before.resource_version(),
            cluster: Arc::new(after),
            at: Instant::now(),
        };
        let mut writes = self.lock();
        writes.retain(|_, w| w.at.elapsed() < KEPT_FOR);
        writes.insert(uid, written);
    }

    /// `from_store`, or the cluster as this replica last wrote it while the store has not
    /// caught up with that write yet. Once it has, the write is forgotten.
    pub fn freshest(&self, from_store: Arc<ValkeyCluster>) -> Arc<ValkeyCluster> {
        let Some(uid) = from_store.uid() else {
            return from_store;
        };
        let mut writes = self.lock();
        let Some(written) = writes.get(&uid) else {
            return from_store;
        };
        let store_version = from_store.resource_version();
        if store_lags(
            store_version.as_deref(),
            written.replaced.as_deref(),
            written.cluster.resource_version().as_deref(),
        ) {
            return written.cluster.clone();
        }
        writes.remove(&uid);
        from_store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether the store, at `store`, has not yet seen the write that turned `replaced` into
/// `written`. It still holds the replaced version: it lags. Any other version: it is at or
/// past the write, unless both parse as numbers and the store's is smaller (somebody else's
/// write between the round's read and ours). Kubernetes calls resourceVersions opaque; every
/// API server backed by etcd gives numbers that grow, and anything else falls back to the
/// store, which is what the controller would have read anyway.
fn store_lags(store: Option<&str>, replaced: Option<&str>, written: Option<&str>) -> bool {
    if store.is_some() && store == replaced {
        return true;
    }
    let number = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
    matches!((number(store), number(written)), (Some(s), Some(w)) if s < w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(uid: &str, version: &str, message: &str) -> ValkeyCluster {
        let mut c: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.io/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid, "resourceVersion": version},
            "spec": {"configRef": "cfg", "shards": 1}
        }))
        .unwrap();
        c.status = Some(crate::api::ValkeyClusterStatus {
            message: Some(message.into()),
            ..Default::default()
        });
        c
    }

    fn message(c: &ValkeyCluster) -> &str {
        c.status.as_ref().unwrap().message.as_deref().unwrap()
    }

    #[test]
    fn the_store_lags_while_it_holds_the_replaced_or_an_older_version() {
        assert!(store_lags(Some("10"), Some("10"), Some("12")));
        assert!(store_lags(Some("11"), Some("10"), Some("12")));
        assert!(!store_lags(Some("12"), Some("10"), Some("12")));
        assert!(!store_lags(Some("13"), Some("10"), Some("12")));
        // Versions that are not numbers: only the replaced one is known to lag.
        assert!(store_lags(Some("a"), Some("a"), Some("c")));
        assert!(!store_lags(Some("b"), Some("a"), Some("c")));
        assert!(!store_lags(None, None, Some("12")));
    }

    #[test]
    fn a_round_starts_from_its_own_write_until_the_store_catches_up() {
        let writes = StatusWrites::default();
        let before = cluster("u1", "10", "DataLost set");
        writes.record(&before, cluster("u1", "12", "written"));
        // The store still holds version 10: the write is what the round starts from.
        let stale = Arc::new(cluster("u1", "10", "before the write"));
        assert_eq!(message(&writes.freshest(stale)), "written");
        // Another cluster is not touched.
        let other = Arc::new(cluster("u2", "10", "other"));
        assert_eq!(message(&writes.freshest(other)), "other");
        // The store caught up: its own copy from then on, and the write is forgotten.
        let caught_up = Arc::new(cluster("u1", "12", "from the store"));
        assert_eq!(message(&writes.freshest(caught_up)), "from the store");
        let stale_again = Arc::new(cluster("u1", "10", "before the write"));
        assert_eq!(message(&writes.freshest(stale_again)), "before the write");
    }
}
