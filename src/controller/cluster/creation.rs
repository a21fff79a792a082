//! A creation that cannot succeed ends `Failed` (Momento v0.9, MOMENTO-V09.md sections 5 and
//! 8.2): a member whose running Valkey binary is older than the supported floor 9.0.1 before the
//! cluster was ever Active. Under `versionFloor: warn` only a mislabelled image counts (the
//! binary is also older than the version its ValkeyImage declares), so images declaring 9.0.0
//! and running it keep working. `Failed` is terminal: nothing more is done to the cluster
//! (members already created stay for inspection; deleting the cluster removes them), and the
//! spec is frozen (CEL), so the way out is to fix the image, delete and create again.

use std::ops::ControlFlow;

use kube::runtime::controller::Action;

use super::observe::Observed;
use super::status;
use crate::api::{ClusterState, ValkeyCluster};
use crate::controller::{Context, Error};
use crate::driver::Version;
use crate::settings::VersionFloor;
use crate::webhook::admission::image::VERSION_FLOOR;

/// The cluster has never been Active: no status yet, or `Creating`.
pub fn still_creating(cluster: &ValkeyCluster) -> bool {
    matches!(
        cluster.status.as_ref().and_then(|s| s.state),
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
/// below the floor.
pub async fn fail_below_floor(
    ctx: &Context,
    cluster: &ValkeyCluster,
    resolved: &super::Resolved,
    observed: &[Observed],
) -> Result<ControlFlow<Action>, Error> {
    if !still_creating(cluster) {
        return Ok(ControlFlow::Continue(()));
    }
    let running = observed
        .iter()
        .filter_map(|o| Some((o.member.name.as_str(), o.version.as_deref()?)));
    let config = &resolved.config;
    let Some(cause) = binary_below_floor(
        running,
        &config.image_ref,
        &config.image.version,
        ctx.settings.version_floor,
    ) else {
        return Ok(ControlFlow::Continue(()));
    };
    let failed = status::failed(cluster, &cause);
    let message = failed.message.clone().unwrap_or_default();
    status::publish(ctx, cluster, failed).await?;
    status::warning(ctx, cluster, "CreationFailed", &message).await;
    Ok(ControlFlow::Break(Action::await_change()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
