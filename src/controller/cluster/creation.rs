//! A creation that cannot succeed ends `Failed` (Momento v0.9, MOMENTO-V09.md sections 5 and
//! 8.2): a TLS cluster whose certificate Secret is still missing or unusable once the grace
//! `tlsSecretGracePeriod` after its creation has passed, or a member whose running Valkey
//! binary is older than the supported floor 9.0.1, before the cluster was ever Active. Under `versionFloor: warn` only a mislabelled image counts (the
//! binary is also older than the version its ValkeyImage declares), so images declaring 9.0.0
//! and running it keep working. `Failed` is terminal: nothing more is done to the cluster
//! (members already created stay for inspection; deleting the cluster removes them), and the
//! spec is frozen (CEL), so the way out is to fix the image, delete and create again.
//!
//! On a cluster that has been Active (its image repointed), the same check holds the rollout
//! instead ([`hold_below_floor`]): a new member below the floor never joins, the old members
//! keep serving, and the cluster is never `Failed`.

use std::ops::ControlFlow;

use kube::runtime::controller::Action;

use std::time::Duration;

use super::context::ClusterContext;
use super::observed::Observed;
use super::{status, tls};
use crate::api::{ClusterState, ValkeyCluster};
use crate::controller::{Context, Error};
use crate::driver::Version;
use crate::settings::VersionFloor;
use crate::webhook::admission::image::VERSION_FLOOR;

/// The cluster has never been Active: no status yet, or `Creating` without
/// `status.activeSince` (a formed cluster that lost every member forms again as `Creating`,
/// yet is not being created).
pub fn still_creating(cluster: &ValkeyCluster) -> bool {
    let status = cluster.status.as_ref();
    status.and_then(|s| s.active_since.as_ref()).is_none()
        && matches!(
            status.and_then(|s| s.state),
            None | Some(ClusterState::Creating)
        )
}

/// Why creation fails, naming the member, what it runs, the floor and what the image declares;
/// `None` when every member that answered runs an acceptable binary.
pub fn binary_below_floor<'a>(
    running: impl IntoIterator<Item = (&'a str, &'a str)>,
    image: &str,
    declared: &str,
    floor: VersionFloor,
) -> Option<String> {
    let (a, b, c) = VERSION_FLOOR;
    let minimum = Version::new(a as u32, b as u32, c as u32);
    let declared_version = Version::parse(declared);
    running.into_iter().find_map(|(member, version)| {
        let v = Version::parse(version)?;
        let mislabelled = declared_version.is_some_and(|d| v < d);
        let refused = v < minimum && (floor == VersionFloor::Enforce || mislabelled);
        refused.then(|| {
            format!(
                "member {member} runs Valkey {version}, below the supported floor {a}.{b}.{c} (ValkeyImage {image:?} declares {declared})"
            )
        })
    })
}

/// While the cluster is created: `Break` after marking it `Failed` when a member runs a binary
/// below the floor. Once it has been Active: [`hold_below_floor`].
pub async fn stop_below_floor(
    ctx: &Context,
    cluster: &ValkeyCluster,
    resolved: &super::context::Resolved,
    observed: &[Observed],
) -> Result<ControlFlow<Action>, Error> {
    if !still_creating(cluster) {
        return hold_below_floor(ctx, cluster, resolved, observed).await;
    }
    let Some(cause) = floor_cause(ctx, resolved, observed.iter()) else {
        return Ok(ControlFlow::Continue(()));
    };
    let failed = status::failed(cluster, &cause);
    let message = failed.message.clone().unwrap_or_default();
    super::publish::cluster_status(ctx, cluster, failed).await?;
    crate::controller::events::warning(ctx, cluster, "CreationFailed", &message).await;
    Ok(ControlFlow::Break(Action::await_change()))
}

/// [`binary_below_floor`] for these members (those that answered) against the resolved image.
fn floor_cause<'a>(
    ctx: &Context,
    resolved: &super::context::Resolved,
    members: impl Iterator<Item = &'a Observed>,
) -> Option<String> {
    let running = members.filter_map(|o| Some((o.member.name.as_str(), o.version.as_deref()?)));
    let config = &resolved.config;
    binary_below_floor(
        running,
        &config.image_ref,
        &config.image.version,
        ctx.settings.version_floor,
    )
}

/// Reason of `Progressing=False` while a rollout is held by a binary below the floor.
pub const VERSION_BELOW_FLOOR: &str = "VersionBelowFloor";

/// On a formed cluster: `Break` while a member on the current spec (a rollout's new member)
/// runs a binary below the floor: nothing is planned, so it never joins and the old members
/// keep serving; `Updating` with `Progressing=False, VersionBelowFloor`, and one Warning Event.
/// Repointing the config to a good image (or fixing the image) lets the rollout go on.
async fn hold_below_floor(
    ctx: &Context,
    cluster: &ValkeyCluster,
    resolved: &super::context::Resolved,
    observed: &[Observed],
) -> Result<ControlFlow<Action>, Error> {
    let current = observed.iter().filter(|o| o.member.current);
    let Some(cause) = floor_cause(ctx, resolved, current) else {
        return Ok(ControlFlow::Continue(()));
    };
    let held = status::rollout_held(cluster, VERSION_BELOW_FLOOR, &cause);
    let first = !super::conditions::has_reason(cluster, "Progressing", VERSION_BELOW_FLOOR);
    let message = held.message.clone().unwrap_or_default();
    super::publish::cluster_status(ctx, cluster, held).await?;
    if first {
        crate::controller::events::warning(ctx, cluster, VERSION_BELOW_FLOOR, &message).await;
    }
    Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(30))))
}

/// What a cluster being created does about an unusable certificate Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateWait {
    /// Waits (state `Creating`) until this instant, Unix seconds.
    Until(i64),
    /// The grace is over: creation fails.
    Over,
}

/// `grace` after the cluster's creation (`created`, Unix seconds); a grace of 0 fails at once,
/// as Momento's operator v0.9 does.
pub fn certificate_wait(created: i64, now: i64, grace: Duration) -> CertificateWait {
    let deadline = created.saturating_add(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX));
    if grace.is_zero() || now >= deadline {
        CertificateWait::Over
    } else {
        CertificateWait::Until(deadline)
    }
}

/// While the cluster is created, an unusable certificate Secret (`blocker`) does not block it:
/// it stays `Creating`, saying what it waits for and until when, and looks again as the
/// deadline nears (a Secret appearing reconciles it at once); past the grace, `Failed`.
pub async fn wait_for_certificate_or_fail(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    blocker: &tls::CertificateBlocker,
) -> Result<Action, Error> {
    let ctx = &cctx.ctx;
    let created = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(crate::time::now_seconds, |t| t.0.as_second());
    let now = crate::time::now_seconds();
    let secret = cluster
        .spec
        .tls
        .as_ref()
        .map(|t| t.secret_ref.clone())
        .unwrap_or_default();
    match certificate_wait(created, now, ctx.settings.tls_secret_grace) {
        CertificateWait::Until(deadline) => {
            let message = format!(
                "waiting for TLS Secret {secret:?} (Failed after {}): {}",
                crate::time::rfc3339(deadline),
                blocker.message
            );
            let cause = super::conditions::Blocker {
                message: &message,
                ..blocker.cause()
            };
            let mut waiting = status::blocked(cluster, cause, &cctx.nodes);
            waiting.state = Some(ClusterState::Creating);
            // Nothing runs yet that could be degraded.
            waiting
                .conditions
                .retain(|c| c.type_ != super::conditions::DEGRADED);
            for condition in &mut waiting.conditions {
                if condition.type_ == "Ready" {
                    condition.reason = "WaitingForTlsSecret".into();
                }
            }
            super::publish::cluster_status(ctx, cluster, waiting).await?;
            let left = u64::try_from(deadline - now).unwrap_or(0);
            Ok(Action::requeue(Duration::from_secs(left.clamp(1, 10))))
        }
        CertificateWait::Over => {
            // The problem and its fix, without the promise that a Blocked cluster heals by
            // itself: a Failed one does not.
            let problem = blocker
                .message
                .trim_end_matches(crate::resolve::tls::STARTS_ONCE_IT_EXISTS);
            let cause = format!(
                "{problem} (TLS Secret {secret:?} still unusable {} s after the cluster was created, the operator's tlsSecretGracePeriod)",
                ctx.settings.tls_secret_grace.as_secs()
            );
            let failed = status::failed(cluster, &cause);
            let message = failed.message.clone().unwrap_or_default();
            super::publish::cluster_status(ctx, cluster, failed).await?;
            crate::controller::events::warning(ctx, cluster, "CreationFailed", &message).await;
            Ok(Action::await_change())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_certificate_is_waited_for_until_the_grace_is_over() {
        let grace = Duration::from_secs(120);
        assert_eq!(
            certificate_wait(1_000, 1_000, grace),
            CertificateWait::Until(1_120)
        );
        assert_eq!(
            certificate_wait(1_000, 1_119, grace),
            CertificateWait::Until(1_120)
        );
        assert_eq!(certificate_wait(1_000, 1_120, grace), CertificateWait::Over);
        assert_eq!(certificate_wait(1_000, 9_999, grace), CertificateWait::Over);
        // Momento's behaviour: no grace at all.
        assert_eq!(
            certificate_wait(1_000, 1_000, Duration::ZERO),
            CertificateWait::Over
        );
    }

    #[test]
    fn a_mislabelled_image_fails_creation_naming_both_versions() {
        let warn = VersionFloor::Warn;
        assert_eq!(
            binary_below_floor([("c-0-0", "9.0.0")], "valkey-9", "9.0.1", warn).unwrap(),
            "member c-0-0 runs Valkey 9.0.0, below the supported floor 9.0.1 (ValkeyImage \"valkey-9\" declares 9.0.1)"
        );
        // An image that says what it runs is only warned about at admission.
        assert_eq!(
            binary_below_floor([("c-0-0", "9.0.0")], "v", "9.0.0", warn),
            None
        );
        assert_eq!(
            binary_below_floor([("c-0-0", "8.1.1")], "v", "8.1.1", warn),
            None
        );
        // Enforced: any binary below the floor.
        assert!(
            binary_below_floor([("c-0-0", "9.0.0")], "v", "9.0.0", VersionFloor::Enforce).is_some()
        );
        // At or above the floor, or newer than declared: fine.
        assert_eq!(
            binary_below_floor([("c-0-0", "9.1.2")], "v", "9.0.1", warn),
            None
        );
        assert_eq!(
            binary_below_floor([("c-0-0", "9.0.1")], "v", "9.0.1", VersionFloor::Enforce),
            None
        );
    }
}
