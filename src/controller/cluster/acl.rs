//! ACL step: every running member loads the current ACL file live, without a restart.
//!
//! The file lives in the `<cluster>-acl` Secret, mounted into every pod; the kubelet swaps
//! the volume's content a few seconds after the Secret changes. The rendered file carries a
//! revision marker user (`_rev-<hex>`, see [`crate::resolve::acl`]), so for each member the
//! operator asks `ACL USERS`: the marker tells which file the member has loaded. A member
//! still on another revision gets `ACL LOAD`, then is asked again; if it still reports the old
//! marker, its volume has not been refreshed yet and the next reconcile (soon) tries again.
//! Members that start later read the file at startup and need nothing.

use futures::future::join_all;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::{debug, info, warn};

use super::observed::Observed;
use crate::api::ValkeyCluster;
use crate::controller::{Context, object_key};
use crate::driver::{ClusterDriver, MemberAddr};
use crate::resolve::acl::{file_revision, loaded_revision};

/// What one member has loaded after this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberAcl {
    /// It reports the wanted revision (`reloaded`: thanks to an `ACL LOAD` this round).
    Loaded { reloaded: bool },
    /// It reports another revision (or none) even after `ACL LOAD`: its Secret volume still
    /// holds the previous file.
    Stale { seen: Option<String> },
    /// Its pod is not ready: nothing to ask (it reads the file when it starts).
    NotRunning,
    /// `ACL USERS` or `ACL LOAD` failed (for `ACL LOAD`: Valkey refused the file).
    Failed { error: String },
}

/// What the status before this round said about the ACL: the `AclApplied` condition's reason
/// and the revision that condition describes (`status.aclRevision`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    pub reason: String,
    pub revision: Option<String>,
}

impl Announced {
    /// From the cluster as this round found it (None: it has no `AclApplied` condition yet).
    pub fn of(cluster: &ValkeyCluster) -> Option<Announced> {
        let condition = super::conditions::previous_acl_condition(cluster)?;
        let recorded = cluster.status.as_ref().and_then(|s| s.acl_revision.clone());
        Some(Announced {
            revision: recorded.or_else(|| legacy_revision(&condition.message)),
            reason: condition.reason,
        })
    }
}

/// The revision named in an `AclApplied` message written by an operator from before
/// `status.aclRevision` (that version kept the revision only in its messages, each saying
/// `ACL revision <rev>`). Read only for such a cluster, whose next status write records the
/// revision, so that an upgrade announces no revision twice; nothing else reads a message.
fn legacy_revision(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("ACL revision ")?;
    rest.split(|c: char| c.is_whitespace() || c == ';')
        .next()
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

/// The ACL revision every member should run, and how far the cluster is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclProgress {
    pub revision: String,
    /// (member name, outcome), in member order.
    pub members: Vec<(String, MemberAcl)>,
}

impl AclProgress {
    pub fn loaded(&self) -> usize {
        self.members
            .iter()
            .filter(|(_, m)| matches!(m, MemberAcl::Loaded { .. }))
            .count()
    }

    pub fn reloaded(&self) -> usize {
        self.members
            .iter()
            .filter(|(_, m)| matches!(m, MemberAcl::Loaded { reloaded: true }))
            .count()
    }

    /// Every member (at least one) runs the wanted revision.
    pub fn applied(&self) -> bool {
        !self.members.is_empty() && self.loaded() == self.members.len()
    }

    /// Members still reading an older ACL file from their Secret volume.
    pub fn stale(&self) -> Vec<&str> {
        self.members
            .iter()
            .filter(|(_, m)| matches!(m, MemberAcl::Stale { .. }))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    pub fn failed(&self) -> bool {
        self.members
            .iter()
            .any(|(_, m)| matches!(m, MemberAcl::Failed { .. }))
    }

    /// The Event this round deserves, given what the status before it announced, as
    /// (warning, reason, note): `AclApplied` once per revision, when its last member loads it;
    /// `AclLoadFailed` when members start refusing a revision. A member that is briefly not
    /// running around a revision already announced gives none.
    pub fn event(&self, previous: Option<&Announced>) -> Option<(bool, &'static str, String)> {
        let (ok, reason, message) = self.condition();
        let same_revision = previous.is_some_and(|p| p.revision.as_ref() == Some(&self.revision));
        let same_reason = previous.is_some_and(|p| p.reason == reason);
        if ok {
            let reloaded = self.reloaded();
            // Loaded everywhere already, or completed by members that read it as they started.
            if same_revision && (same_reason || reloaded == 0) {
                return None;
            }
            let note = if reloaded > 0 {
                format!("{message} (ACL LOAD on {reloaded}, no restart)")
            } else {
                message
            };
            return Some((false, "AclApplied", note));
        }
        let already_reported = same_reason && same_revision;
        (self.failed() && !already_reported).then_some((true, "AclLoadFailed", message))
    }

    /// Condition `AclApplied`: (status, reason, message).
    pub fn condition(&self) -> (bool, &'static str, String) {
        let (rev, total, loaded) = (&self.revision, self.members.len(), self.loaded());
        if total == 0 {
            return (
                false,
                "NoMembers",
                format!("ACL revision {rev} rendered; no member exists yet"),
            );
        }
        if self.applied() {
            return (
                true,
                "Loaded",
                format!("ACL revision {rev} loaded on all {total} members"),
            );
        }
        let progress = format!("{loaded} of {total} members loaded ACL revision {rev}");
        if let Some((name, MemberAcl::Failed { error })) = self
            .members
            .iter()
            .find(|(_, m)| matches!(m, MemberAcl::Failed { .. }))
        {
            return (false, "LoadFailed", format!("{progress}; {name}: {error}"));
        }
        let names = |want: fn(&MemberAcl) -> bool| {
            self.members
                .iter()
                .filter(|(_, m)| want(m))
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut waiting = Vec::new();
        let stale = self.stale().join(", ");
        if !stale.is_empty() {
            waiting.push(format!(
                "waiting for the Secret volume to refresh on {stale}"
            ));
        }
        let down = names(|m| matches!(m, MemberAcl::NotRunning));
        if !down.is_empty() {
            waiting.push(format!("not running yet: {down}"));
        }
        (
            false,
            "Loading",
            format!("{progress}; {}", waiting.join("; ")),
        )
    }
}

/// The ACL step, after the plan's steps: every running member loads `acl_file` (the one
/// just applied), and an Event says when a new revision is loaded everywhere or refused.
#[tracing::instrument(name = "cluster.acl", skip_all)]
pub async fn load(
    ctx: &Context,
    cluster: &ValkeyCluster,
    driver: &dyn ClusterDriver,
    observed: &[Observed],
    acl_file: &str,
) -> AclProgress {
    let revision = file_revision(acl_file).unwrap_or_default();
    let progress = apply(driver, &object_key(cluster), observed, revision).await;
    let stale = progress.stale();
    if !stale.is_empty() {
        let namespace = cluster.namespace().unwrap_or_default();
        super::pods::refresh_secret_volumes(ctx, &namespace, &stale).await;
    }
    events(ctx, cluster, &progress).await;
    progress
}

/// An Event when a new ACL revision is loaded on every member, or when members refuse it
/// (decided by [`AclProgress::event`]).
async fn events(ctx: &Context, cluster: &ValkeyCluster, progress: &AclProgress) {
    let previous = Announced::of(cluster);
    if let Some((warning, reason, note)) = progress.event(previous.as_ref()) {
        publish_event(ctx, cluster, warning, reason, &progress.revision, &note).await;
    }
}

/// Makes every running member load `revision` (at most one `ACL LOAD` each), concurrently.
pub async fn apply(
    driver: &dyn ClusterDriver,
    cluster: &str,
    observed: &[Observed],
    revision: &str,
) -> AclProgress {
    let members = super::observe::reachable_addresses(observed);
    apply_members(driver, cluster, &members, revision).await
}

/// [`apply`] over (member name, client address if its pod is ready).
pub async fn apply_members(
    driver: &dyn ClusterDriver,
    cluster: &str,
    members: &[(String, Option<MemberAddr>)],
    revision: &str,
) -> AclProgress {
    let members = join_all(members.iter().map(|(name, addr)| async move {
        let name = name.clone();
        let Some(addr) = addr else {
            return (name, MemberAcl::NotRunning);
        };
        let seen = match driver.acl_users(addr).await {
            Ok(users) => loaded_revision(users.iter().map(String::as_str)).map(str::to_string),
            Err(e) => return (name, MemberAcl::Failed { error: e.to_string() }),
        };
        if seen.as_deref() == Some(revision) {
            return (name, MemberAcl::Loaded { reloaded: false });
        }
        if let Err(e) = driver.acl_load(addr).await {
            warn!(cluster, member = %name, revision, "ACL LOAD failed: {e}");
            return (name, MemberAcl::Failed { error: e.to_string() });
        }
        let outcome = match driver.acl_users(addr).await {
            Ok(users) => match loaded_revision(users.iter().map(String::as_str)) {
                Some(r) if r == revision => {
                    info!(cluster, member = %name, revision, previous = ?seen, "ACL revision loaded");
                    MemberAcl::Loaded { reloaded: true }
                }
                other => {
                    debug!(cluster, member = %name, revision, seen = ?other, "Secret volume not refreshed yet");
                    MemberAcl::Stale { seen: other.map(str::to_string) }
                }
            },
            Err(e) => MemberAcl::Failed { error: e.to_string() },
        };
        (name, outcome)
    }))
    .await;
    AclProgress {
        revision: revision.to_string(),
        members,
    }
}

/// Publishes an ACL Event. The revision is part of the Event's action: kube's recorder merges
/// Events with the same type, action and reason into one series that keeps the first note, and
/// each revision deserves its own Event.
pub async fn publish_event(
    ctx: &Context,
    cluster: &ValkeyCluster,
    warning: bool,
    reason: &str,
    revision: &str,
    note: &str,
) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let action = format!("LoadAcl:{revision}");
    crate::controller::events::publish(ctx, cluster, type_, &action, reason, note).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(members: &[(&str, MemberAcl)]) -> AclProgress {
        AclProgress {
            revision: "0123456789ab".into(),
            members: members
                .iter()
                .map(|(n, m)| (n.to_string(), m.clone()))
                .collect(),
        }
    }

    #[test]
    fn applied_when_every_member_reports_the_revision() {
        let p = progress(&[
            ("c-0-0", MemberAcl::Loaded { reloaded: true }),
            ("c-0-1", MemberAcl::Loaded { reloaded: false }),
        ]);
        assert!(p.applied());
        assert_eq!(p.reloaded(), 1);
        assert_eq!(
            p.condition(),
            (
                true,
                "Loaded",
                "ACL revision 0123456789ab loaded on all 2 members".to_string()
            )
        );
    }

    #[test]
    fn a_member_on_the_old_file_keeps_the_condition_false_and_is_named() {
        let p = progress(&[
            ("c-0-0", MemberAcl::Loaded { reloaded: true }),
            (
                "c-0-1",
                MemberAcl::Stale {
                    seen: Some("aaaaaaaaaaaa".into()),
                },
            ),
            ("c-0-2", MemberAcl::NotRunning),
        ]);
        let (ok, reason, message) = p.condition();
        assert!(!ok);
        assert_eq!(reason, "Loading");
        assert_eq!(
            message,
            "1 of 3 members loaded ACL revision 0123456789ab; waiting for the Secret volume to refresh on c-0-1; not running yet: c-0-2"
        );
    }

    #[test]
    fn a_refused_file_says_which_member_and_why() {
        let p = progress(&[
            (
                "c-0-0",
                MemberAcl::Failed {
                    error: "ERR Error in ACL line 5".into(),
                },
            ),
            ("c-0-1", MemberAcl::Loaded { reloaded: false }),
        ]);
        assert!(p.failed());
        let (ok, reason, message) = p.condition();
        assert!(!ok);
        assert_eq!(reason, "LoadFailed");
        assert_eq!(
            message,
            "1 of 2 members loaded ACL revision 0123456789ab; c-0-0: ERR Error in ACL line 5"
        );
    }

    #[test]
    fn no_member_is_not_applied() {
        let p = progress(&[]);
        assert!(!p.applied());
        assert_eq!(p.condition().1, "NoMembers");
    }

    /// What the status before said: the `AclApplied` reason and the revision it describes.
    fn previous(reason: &str, revision: &str) -> Announced {
        Announced {
            reason: reason.into(),
            revision: Some(revision.into()),
        }
    }

    #[test]
    fn one_applied_event_per_revision() {
        let loaded = progress(&[("c-0-0", MemberAcl::Loaded { reloaded: true })]);
        let old = previous("Loaded", "aaaaaaaaaaaa");
        let (warning, reason, note) = loaded.event(Some(&old)).unwrap();
        assert!(!warning);
        assert_eq!(reason, "AclApplied");
        assert_eq!(
            note,
            "ACL revision 0123456789ab loaded on all 1 members (ACL LOAD on 1, no restart)"
        );
        // The same state again (next reconcile, operator restart): nothing.
        let now = previous("Loaded", "0123456789ab");
        assert_eq!(loaded.event(Some(&now)), None);
    }

    #[test]
    fn a_member_back_from_a_restart_on_the_same_revision_is_not_a_new_event() {
        let back = progress(&[
            ("c-0-0", MemberAcl::Loaded { reloaded: false }),
            ("c-0-1", MemberAcl::Loaded { reloaded: false }),
        ]);
        // 1 of 2 members loaded revision 0123456789ab; c-0-1 not running yet.
        let flapped = previous("Loading", "0123456789ab");
        assert_eq!(back.event(Some(&flapped)), None);
        // A member that was waiting for its volume and now loads it completes the revision.
        let completed = progress(&[
            ("c-0-0", MemberAcl::Loaded { reloaded: false }),
            ("c-0-1", MemberAcl::Loaded { reloaded: true }),
        ]);
        assert_eq!(completed.event(Some(&flapped)).unwrap().1, "AclApplied");
        // A new cluster: its first revision is announced.
        assert_eq!(back.event(None).unwrap().1, "AclApplied");
    }

    #[test]
    fn a_refused_revision_warns_once() {
        let failed = progress(&[(
            "c-0-0",
            MemberAcl::Failed {
                error: "ERR bad".into(),
            },
        )]);
        let before = previous("Loaded", "aaaaaaaaaaaa");
        let (warning, reason, _) = failed.event(Some(&before)).unwrap();
        assert!(warning);
        assert_eq!(reason, "AclLoadFailed");
        // Already reported for this revision (with another error since): nothing.
        let reported = previous("LoadFailed", "0123456789ab");
        assert_eq!(failed.event(Some(&reported)), None);
    }

    /// A cluster whose status has an `AclApplied` condition with `message`, and
    /// `status.aclRevision` when `recorded`.
    fn cluster(reason: &str, message: &str, recorded: Option<&str>) -> ValkeyCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"configRef": "cfg", "shards": 1},
            "status": {
                "aclRevision": recorded,
                "conditions": [{
                    "type": "AclApplied",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"
                }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_revision_announced_is_read_from_status_not_from_words() {
        let loaded = progress(&[("c-0-0", MemberAcl::Loaded { reloaded: false })]);
        // However the message is worded, the recorded revision decides.
        let reworded = cluster(
            "Loaded",
            "all members run the current ACL",
            Some("0123456789ab"),
        );
        let announced = Announced::of(&reworded).unwrap();
        assert_eq!(announced, previous("Loaded", "0123456789ab"));
        assert_eq!(loaded.event(Some(&announced)), None);
        let other = cluster(
            "Loaded",
            "ACL revision 0123456789ab loaded on all 1 members",
            Some("aaaaaaaaaaaa"),
        );
        let announced = Announced::of(&other).unwrap();
        assert_eq!(announced.revision.as_deref(), Some("aaaaaaaaaaaa"));
        assert_eq!(loaded.event(Some(&announced)).unwrap().1, "AclApplied");
        // No condition yet: nothing announced.
        let mut fresh = reworded;
        fresh.status = None;
        assert_eq!(Announced::of(&fresh), None);
    }

    #[test]
    fn a_cluster_written_before_acl_revision_was_recorded_is_not_announced_again() {
        let loaded = progress(&[("c-0-0", MemberAcl::Loaded { reloaded: true })]);
        for message in [
            "ACL revision 0123456789ab loaded on all 1 members",
            "0 of 1 members loaded ACL revision 0123456789ab; not running yet: c-0-0",
            "ACL revision 0123456789ab rendered; no member exists yet",
        ] {
            let old = Announced::of(&cluster("Loaded", message, None)).unwrap();
            assert_eq!(old.revision.as_deref(), Some("0123456789ab"), "{message}");
        }
        let upgraded = Announced::of(&cluster(
            "Loaded",
            "ACL revision 0123456789ab loaded on all 1 members",
            None,
        ));
        assert_eq!(loaded.event(upgraded.as_ref()), None);
        let older = Announced::of(&cluster(
            "Loaded",
            "ACL revision aaaaaaaaaaaa loaded on all 1 members",
            None,
        ));
        assert_eq!(loaded.event(older.as_ref()).unwrap().1, "AclApplied");
    }
}
