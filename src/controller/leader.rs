//! Leader election: every replica serves the webhooks, one replica (the holder of a Lease in
//! the operator's namespace) runs the controllers. Two replicas reconciling the same cluster
//! would race on failovers and slot moves, so a replica only starts its controllers once it
//! holds the lease, and exits when it loses it: it cannot know how far its in-flight
//! reconciles got, and a restarted process re-lists everything before it acts again.
//! On shutdown (SIGTERM) the leader stops its controllers, then releases the lease, so a
//! standby takes over at once instead of after the lease expires.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tracing::{info, warn};

use crate::telemetry::Metrics;

/// The Lease the replicas compete for.
pub const LEASE_NAME: &str = "valkey-operator-leader";
/// How long a lease holds without renewal: the longest a crashed leader leaves the clusters
/// without a controller.
pub const LEASE_SECONDS: u64 = 15;
/// The holder renews this long before its lease expires.
pub const RENEW_BEFORE_EXPIRY_SECONDS: u64 = 5;

/// Who competes for which lease.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// This replica's name in the Lease's `holderIdentity` (its pod name).
    pub identity: String,
}

/// Resolves when the process is asked to stop (SIGTERM or Ctrl-C).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs `lead` once this replica holds the lease. Returns `Ok` when asked to stop (standing
/// by, or after `lead` returned), an error when the lease was lost while leading.
pub async fn run_while_leading<F>(
    client: Client,
    election: Election,
    metrics: Arc<Metrics>,
    lead: F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    let manager = LeaseManagerBuilder::new(client, election.lease.clone())
        .with_namespace(election.namespace.clone())
        .with_identity(election.identity.clone())
        .with_duration(LEASE_SECONDS)
        .with_grace(RENEW_BEFORE_EXPIRY_SECONDS)
        .build()
        .await
        .with_context(|| {
            format!(
                "cannot use Lease {}/{} for leader election (the operator's Role must allow get, create and patch on leases)",
                election.namespace, election.lease
            )
        })?;
    let (mut leading, task) = manager.watch().await;

    metrics.leader.set(0);
    if !*leading.borrow_and_update() {
        match stand_by(&election, &metrics, &mut leading).await? {
            StandBy::Leading => {}
            StandBy::Stopped => {
                release(leading, task).await;
                return Ok(());
            }
        }
    }
    metrics.leader.set(1);
    info!(identity = %election.identity, "holding the leader lease: starting the controllers");

    let lost = async {
        loop {
            if leading.changed().await.is_err() || !*leading.borrow_and_update() {
                return;
            }
        }
    };
    let result = tokio::select! {
        result = lead => result,
        _ = lost => Err(anyhow::anyhow!(
            "lost the leader lease {}/{}; exiting so that only the new leader reconciles (the restarted process stands by)",
            election.namespace,
            election.lease
        )),
    };
    metrics.leader.set(0);
    release(leading, task).await;
    result
}

/// How standing by ended.
enum StandBy {
    /// This replica now holds the lease.
    Leading,
    /// The process was asked to stop first.
    Stopped,
}

/// Waits, serving webhooks only, until this replica holds the lease or is asked to stop.
async fn stand_by(
    election: &Election,
    metrics: &Metrics,
    leading: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<StandBy> {
    info!(
        lease = %format!("{}/{}", election.namespace, election.lease),
        identity = %election.identity,
        "standing by: serving webhooks; the controllers start when this replica holds the lease"
    );
    // A standby serves the webhooks, which is all it needs to be ready for.
    metrics.ready.store(true, Ordering::Relaxed);
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() {
                    anyhow::bail!("leader election stopped unexpectedly");
                }
                if *leading.borrow_and_update() {
                    return Ok(StandBy::Leading);
                }
            }
            _ = &mut stop => return Ok(StandBy::Stopped),
        }
    }
}

/// Stops the lease manager: closing the channel makes it release the lease if it holds it,
/// so a standby takes over at once instead of after the lease expires.
async fn release(
    leading: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) {
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(_))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "releasing the leader lease failed"),
        Ok(Err(e)) => warn!(error = %e, "lease manager task failed"),
        Err(_) => warn!("releasing the leader lease timed out; it expires on its own"),
    }
}

/// Time kept back from what the Lease says this replica still holds: the step in flight when
/// the fence passes (one command, one API write) and clock skew between the replicas.
pub const FENCE_MARGIN: Duration = Duration::from_secs(3);

/// How long the holder of `lease` may still act as of `now`: until the lease expires as a
/// standby sees it (`renewTime + leaseDurationSeconds`), less [`FENCE_MARGIN`]; zero when that
/// has passed or the Lease does not say.
pub fn lease_left(lease: &Lease, now: jiff::Timestamp) -> Duration {
    let Some(spec) = &lease.spec else {
        return Duration::ZERO;
    };
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return Duration::ZERO;
    };
    let expires = renewed.0 + jiff::SignedDuration::from_secs(i64::from(seconds));
    let left = now.duration_until(expires).as_secs_f64() - FENCE_MARGIN.as_secs_f64();
    Duration::try_from_secs_f64(left.max(0.0)).unwrap_or(Duration::ZERO)
}

/// Before a cluster reconcile acts on Valkey (failovers, slot moves, deletions): is this
/// replica still the Lease's holder as the API server has it, and for how long at least (see
/// [`lease_left`])? A leader that was frozen (SIGSTOP, a stalled VM) past its lease wakes up
/// with timers due and reconciles queued; the lease manager notices the loss a moment later,
/// which is too late for a failover. Not the holder: the process exits at once (another
/// replica leads; the restarted container stands by). [`crate::controller::Context::confirm_leading`]
/// asks again whenever what it last heard has run out, before every step it acts on.
pub async fn verify_still_leading(
    client: &Client,
    election: &Election,
) -> Result<Duration, kube::Error> {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &election.namespace);
    let lease = leases.get(&election.lease).await?;
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    if holder.as_deref() != Some(election.identity.as_str()) {
        tracing::error!(
            holder = holder.as_deref().unwrap_or("nobody"),
            identity = %election.identity,
            "lost the leader lease {}/{} while reconciling; exiting without acting so that only the holder reconciles",
            election.namespace,
            election.lease
        );
        // process::exit runs no destructors: make sure the reason is on record first.
        eprintln!(
            "error: lost the leader lease {}/{} to {}; exiting without acting",
            election.namespace,
            election.lease,
            holder.as_deref().unwrap_or("nobody")
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::process::exit(1);
    }
    Ok(lease_left(&lease, jiff::Timestamp::now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(renewed: Option<jiff::Timestamp>, seconds: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("me".into()),
                renew_time: renewed.map(MicroTime),
                lease_duration_seconds: seconds,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_lease_leaves_its_duration_less_the_margin() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let left = lease_left(&lease(Some(now), Some(15)), now);
        assert_eq!(left, Duration::from_secs(12));
        let later = now + jiff::SignedDuration::from_secs(10);
        assert_eq!(
            lease_left(&lease(Some(now), Some(15)), later),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn an_expired_or_silent_lease_leaves_nothing() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let much_later = now + jiff::SignedDuration::from_secs(13);
        assert_eq!(
            lease_left(&lease(Some(now), Some(15)), much_later),
            Duration::ZERO
        );
        let long_after = now + jiff::SignedDuration::from_secs(3600);
        assert_eq!(
            lease_left(&lease(Some(now), Some(15)), long_after),
            Duration::ZERO
        );
        assert_eq!(lease_left(&lease(None, Some(15)), now), Duration::ZERO);
        assert_eq!(lease_left(&lease(Some(now), None), now), Duration::ZERO);
        assert_eq!(lease_left(&Lease::default(), now), Duration::ZERO);
    }
}
