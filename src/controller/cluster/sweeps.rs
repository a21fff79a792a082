//! Which generation of each cluster had its stray objects deleted (see `apply.rs`): kept in
//! memory, so a sweep runs once per spec change and once per operator start.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::ValkeyCluster;

/// The generation of each cluster (by uid) last swept for strays: the lists run once per spec
/// change and once per operator start (an upgrade that renames an object), not every round.
#[derive(Default)]
pub struct Sweeps(Mutex<HashMap<String, i64>>);

/// A sweep that is due; [`Sweep::done`] records it.
pub struct Sweep<'a> {
    sweeps: &'a Sweeps,
    uid: String,
    generation: i64,
}

impl Sweeps {
    /// A sweep when this generation of `cluster` was not swept yet.
    pub fn due(&self, cluster: &ValkeyCluster) -> Option<Sweep<'_>> {
        let uid = cluster.uid()?;
        let generation = cluster.metadata.generation.unwrap_or_default();
        let swept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (swept.get(&uid) != Some(&generation)).then_some(Sweep {
            sweeps: self,
            uid,
            generation,
        })
    }

    /// A deleted cluster is not swept again.
    pub fn forget(&self, cluster: &ValkeyCluster) {
        if let Some(uid) = cluster.uid() {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
        }
    }
}

impl Sweep<'_> {
    /// Records the sweep: this generation is not swept again.
    pub fn done(self) {
        let mut swept = self.sweeps.0.lock().unwrap_or_else(|e| e.into_inner());
        swept.insert(self.uid, self.generation);
    }
}
