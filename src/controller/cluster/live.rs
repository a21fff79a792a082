//! Live settings: a ValkeyConfig change to settings Valkey changes at runtime
//! (`resolve::live`) does not replace members (the spec hash leaves their values out); this
//! step sets them with `CONFIG SET` on every current member that started with other values.
//! Valkey keeps such a value only for the life of its process, so a member is set again
//! whenever its run id changes (a restarted container or a new pod: its valkey.conf still has
//! the values it was created with). What was set is remembered per member and run id, so a
//! settled cluster sends nothing.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tracing::{info, warn};

use super::observed::Observed;
use crate::api::{ValkeyCluster, ValkeyNodeSpec};
use crate::controller::{Context, object_key};
use crate::driver::ClusterDriver;
use crate::resolve::live::to_set;

/// Condition type: every current member runs with the config's live settings.
pub const SETTINGS_APPLIED: &str = "SettingsApplied";

/// What each cluster's members were set to, by member: `(run id, settings)`.
/// Only clusters with a member set live have an entry.
#[derive(Default)]
pub struct Applied {
    by_cluster: Mutex<HashMap<String, MemberRuns>>,
}

type MemberRuns = HashMap<String, (String, Vec<(String, String)>)>;

impl Applied {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, MemberRuns>> {
        self.by_cluster.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// This round's outcome: the members set now, and the ones Valkey refused (with its words).
#[derive(Debug, Default, PartialEq)]
pub struct LiveProgress {
    pub set: Vec<String>,
    pub refused: Vec<(String, String)>,
    /// Members still running with other values (not reached this round).
    pub pending: Vec<String>,
}

/// What a member needs set: the live settings its config wants that it did not start with,
/// unless its process already got exactly those (`done`, same run id).
pub fn wanted_now(
    started: &ValkeyNodeSpec,
    desired: &ValkeyNodeSpec,
    run_id: &str,
    done: Option<&(String, Vec<(String, String)>)>,
) -> Vec<(String, String)> {
    if started.version != desired.version {
        return Vec::new(); // another build: replaced by the rollout, not set live
    }
    let settings = to_set(&started.version, &started.valkey, &desired.valkey);
    match done {
        Some((run, already)) if run == run_id && *already == settings => Vec::new(),
        _ => settings,
    }
}

/// The step (see the module): `CONFIG SET` on each current, answering member that needs it.
pub async fn apply(
    (ctx, applied): (&Context, &Applied),
    cluster: &ValkeyCluster,
    driver: &dyn ClusterDriver,
    observed: &[Observed],
    desired: &ValkeyNodeSpec,
) -> LiveProgress {
    let key = object_key(cluster);
    let mut runs: MemberRuns = applied.lock().get(&key).cloned().unwrap_or_default();
    runs.retain(|member, _| observed.iter().any(|o| &o.member.name == member));
    let mut progress = LiveProgress::default();
    for o in observed.iter().filter(|o| o.member.current) {
        let (Some(addr), Some(run_id)) = (o.member.addr.as_ref(), o.run_id.as_deref()) else {
            continue;
        };
        let name = &o.member.name;
        let settings = wanted_now(&o.node.spec, desired, run_id, runs.get(name));
        if settings.is_empty() {
            continue;
        }
        match driver.config_set(addr, &settings).await {
            Ok(()) => {
                info!(cluster = %key, member = %name, ?settings, "live settings set");
                runs.insert(name.clone(), (run_id.to_owned(), settings));
                progress.set.push(name.clone());
            }
            Err(e) => {
                warn!(cluster = %key, member = %name, error = %e, "live settings refused");
                progress.refused.push((name.clone(), e.to_string()));
            }
        }
    }
    progress.pending = observed
        .iter()
        .filter(|o| o.member.current && o.run_id.is_none())
        .filter(|o| !to_set(&o.node.spec.version, &o.node.spec.valkey, &desired.valkey).is_empty())
        .map(|o| o.member.name.clone())
        .collect();
    if runs.is_empty() {
        applied.lock().remove(&key);
    } else {
        applied.lock().insert(key, runs);
    }
    if !progress.set.is_empty() {
        let note = format!(
            "set live on {} member(s) with CONFIG SET, no restart: {}",
            progress.set.len(),
            progress.set.join(", ")
        );
        crate::controller::events::normal(ctx, cluster, "SettingsApplied", &note).await;
    }
    progress
}

impl LiveProgress {
    /// `(ok, reason, message)` of the `SettingsApplied` condition.
    pub fn condition(&self) -> (bool, &'static str, String) {
        if let Some((member, why)) = self.refused.first() {
            return (
                false,
                "Refused",
                format!(
                    "Valkey refused the config's live settings on {} member(s) ({member}: {why}); the members keep their values. Fix the value in the ValkeyConfig",
                    self.refused.len()
                ),
            );
        }
        if !self.pending.is_empty() {
            return (
                false,
                "Pending",
                format!(
                    "{} member(s) not reached yet: {}",
                    self.pending.len(),
                    self.pending.join(", ")
                ),
            );
        }
        (
            true,
            "Applied",
            "every member runs with the config's live settings".into(),
        )
    }
}

/// The step's condition, for the cluster's status.
pub fn condition(cluster: &ValkeyCluster, progress: &LiveProgress) -> Condition {
    let (ok, reason, message) = progress.condition();
    super::conditions::cluster_condition(cluster, SETTINGS_APPLIED, ok, reason, &message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(version: &str, settings: &[(&str, &str)]) -> ValkeyNodeSpec {
        let mut s: ValkeyNodeSpec = serde_json::from_value(serde_json::json!({
            "clusterName": "c", "shard": 0, "configRef": "cfg", "imageRef": "img",
            "image": "valkey/valkey:9.1.2", "version": version,
            "resources": {"cpu": "100m", "memory": "128Mi"}, "valkey": {}, "placement": {}
        }))
        .expect("a node spec");
        s.valkey = settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>();
        s
    }

    #[test]
    fn a_member_is_set_once_per_process_and_only_what_it_did_not_start_with() {
        let started = spec(
            "9.1.2",
            &[("maxmemory-policy", "allkeys-lru"), ("hz", "10")],
        );
        let desired = spec("9.1.2", &[("maxmemory-policy", "noeviction"), ("hz", "10")]);
        let want = vec![("maxmemory-policy".to_string(), "noeviction".to_string())];
        assert_eq!(wanted_now(&started, &desired, "run1", None), want);
        let done = ("run1".to_string(), want.clone());
        assert!(wanted_now(&started, &desired, "run1", Some(&done)).is_empty());
        // A new process starts from its valkey.conf again: set again.
        assert_eq!(wanted_now(&started, &desired, "run2", Some(&done)), want);
        // Started with the values wanted: nothing.
        assert!(wanted_now(&desired, &desired, "run1", None).is_empty());
    }

    #[test]
    fn restart_only_settings_and_other_builds_are_never_set_live() {
        let started = spec("9.1.2", &[("databases", "4")]);
        let desired = spec("9.1.2", &[("databases", "8")]);
        assert!(wanted_now(&started, &desired, "r", None).is_empty());
        let other_build = spec("9.0.0", &[("hz", "20")]);
        let desired = spec("9.1.2", &[("hz", "10")]);
        assert!(wanted_now(&other_build, &desired, "r", None).is_empty());
    }

    #[test]
    fn the_condition_names_refusals_first_then_members_not_reached() {
        let ok = LiveProgress::default().condition();
        assert!(ok.0 && ok.1 == "Applied");
        let pending = LiveProgress {
            pending: vec!["c-0-1".into()],
            ..Default::default()
        };
        assert_eq!(pending.condition().1, "Pending");
        let refused = LiveProgress {
            refused: vec![("c-0-0".into(), "ERR bad value".into())],
            pending: vec!["c-0-1".into()],
            ..Default::default()
        };
        let (ok, reason, message) = refused.condition();
        assert!(
            !ok && reason == "Refused" && message.contains("ERR bad value"),
            "{message}"
        );
    }
}
