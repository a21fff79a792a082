//! ValkeyCluster controller. Each reconcile is the fixed pipeline of ARCHITECTURE.md, one
//! file per step, and [`reconcile`] reads as its table of contents:
//!
//! | step | where | touches the world |
//! |---|---|---|
//! | gate (deleted, menu not listed yet, not leader, paused) | `gate.rs` | status when paused |
//! | dereference → resolve | `resolve.rs` (stores in memory; resolution is pure) | status when blocked |
//! | TLS certificate (TLS clusters) | `tls.rs` (validation is pure: `crate::resolve::tls`) | copies the Secret; status when blocked |
//! | build | `build.rs` (pure) | no |
//! | apply | `apply.rs`, operator passwords in `credentials.rs` | yes |
//! | observe | `observe.rs`; what is seen is written onto the member pods by `pods.rs` | yes |
//! | plan | `crate::plan` (pure); the maxConcurrentRollouts gate in `rollout.rs` | status when waiting |
//! | act | `act.rs` (one function per plan step; the same steps again back off: `repeats.rs`, pure, the streaks in memory), ACL loading in `acl.rs`, certificate reload in `tls.rs` | yes |
//! | status | `status.rs` (pure; the condition types in `conditions.rs`), written with its Events by `publish.rs` | yes |
//! | next look (poll as the wait goes) | `cadence.rs` (pure interval; the waits in memory) | no |

pub mod acl;
mod act;
mod apply;
mod autoscale;
mod blocked;
pub mod build;
mod cadence;
mod conditions;
mod context;
mod creation;
mod credentials;
mod gate;
pub mod live;
pub mod observe;
mod observed;
mod planning;
mod pods;
mod publish;
mod published;
mod repeats;
mod resolve;
mod rollout;
pub mod status;
mod sweeps;
mod taints;
pub mod tls;
pub mod utilization;
mod volumes;
pub mod written;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{debug, warn};

pub use context::ClusterContext;
pub use context::Resolved;
pub use credentials::sweep_credentials;
use observed::cluster_nodes;
use planning::plan_off_the_runtime;
pub use resolve::resolve;

use crate::api::{ClusterState, ValkeyCluster, ValkeyNode};
use crate::controller::{Context, Error, object_key};
use crate::driver::FredDriver;
use crate::plan::{Member, Plan, Topology};
use crate::resolve::acl::OperatorCredentials;

/// Hands on what a step produced (`ControlFlow::Continue`), or ends the reconcile with the
/// step's requeue (`ControlFlow::Break`): a step that blocks, pauses or waits has already
/// said so in the status, and the pipeline stops there.
macro_rules! or_stop {
    ($step:expr) => {
        match $step {
            ControlFlow::Continue(produced) => produced,
            ControlFlow::Break(requeue) => return Ok(requeue),
        }
    };
}

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(controller = "cluster", object = %object_key(cluster.as_ref()))
)]
pub async fn reconcile(
    cluster: Arc<ValkeyCluster>,
    cctx: Arc<ClusterContext>,
) -> Result<Action, Error> {
    let ctx = &cctx.ctx;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    // Deleted, menu still listing, leadership lost or paused: the pipeline does not run.
    or_stop!(gate::may_proceed(&cctx, &cluster).await?);

    // Dereference and resolve (spec.restoreFrom's backup too). A broken reference blocks the
    // cluster and touches nothing that runs.
    let resolved = or_stop!(resolve::or_block(&cctx, &cluster).await?);

    // TLS clusters: the certificate Secret is validated and copied for the members; a missing
    // or broken one blocks the cluster and never reaches them (failures are still handled,
    // with the certificate the members already serve).
    let tls = or_stop!(blocked::certificate_or_blocked(&cctx, &cluster).await?);

    // Build and apply the cluster-wide objects. A name taken by an object that is not this
    // cluster's blocks it; that object is never touched.
    let (credentials, acl_file) =
        or_stop!(apply::cluster_objects(&cctx, &cluster, &resolved).await?);

    // Observe members (store, pods, what Valkey says; pods carry it); a creation may fail here.
    let desired_spec =
        build::desired_node_spec(&cluster, &resolved.config, ctx.settings.default_zone_spread);
    let members = cluster_nodes(&cctx.nodes, &namespace, &name);
    let driver = member_driver(ctx, &cluster, &credentials, tls.as_ref()).await;
    let observed = observe::members(driver.as_ref(), &members, &cctx, &desired_spec).await;
    pods::sync(ctx, &cluster, &observed, &cctx.pods).await;
    or_stop!(creation::stop_below_floor(ctx, &cluster, &resolved, &observed).await?);

    // Plan the next step (a rolling replacement waits for a maxConcurrentRollouts slot).
    let topology = observe::topology(&cluster, &observed);
    let (topology, plan) = plan_off_the_runtime(topology).await;
    or_stop!(rollout::admit(ctx, &cluster, &topology, &plan).await?);

    // Act on the plan (the same steps again only once their back-off has passed); then every
    // running member loads the ACL file just applied.
    let node_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), &namespace);
    let actor =
        act::Actor::new(ctx, &cluster, &node_api, driver.as_ref(), &desired_spec).naming(&observed);
    let streak = act_on(&cctx, &actor, &plan).await?;
    let acl_progress = acl::load(ctx, &cluster, driver.as_ref(), &observed, &acl_file).await;
    // TLS: every running member serves the certificate just copied (reloaded without restart).
    let tls_progress = tls::reload_if_tls(ctx, &cluster, driver.as_ref(), &observed, &tls).await;
    // Settings Valkey changes at runtime: set on members that started with other values.
    let remembered = (ctx.as_ref(), &cctx.live);
    let live = live::apply(remembered, &cluster, &*driver, &observed, &desired_spec).await;
    // Volumes (configs with storage): retention and size of every member's claim.
    let volumes = volumes::sync(ctx, &cluster, resolved.config.storage.as_ref(), &members).await;

    // Status: each member's (utilization when due), then the cluster's (with autoscaling's).
    member_statuses(&cctx, &cluster, &resolved, &observed, &node_api).await?;
    let mut new_status = status::from_plan(
        &cluster,
        &plan,
        &observed,
        &topology,
        &acl_progress,
        tls_progress.as_ref(),
        streak.as_ref(),
    );
    let volume_wait = volumes::into_status(&mut new_status, volumes, &desired_spec);
    new_status.conditions.push(live::condition(&cluster, &live));
    let memory = (&cctx.samples, &cctx.episodes);
    new_status.autoscaling =
        autoscale::step(ctx, memory, &cluster, (&plan, &topology, &observed)).await;
    publish::cluster_status(ctx, &cluster, new_status).await?;

    // Sooner while a certificate reload or a volume's growth is under way.
    let tls_wait = tls_progress.and_then(|t| t.look_again_in());
    let look = (&plan, &topology, &acl_progress, streak.as_ref());
    let after = look_again_in(&cctx, &cluster, driver.as_ref(), look).await;
    Ok(Action::requeue(sooner(after, [tls_wait, volume_wait])))
}

/// `after`, or the soonest of the steps' own waits (in seconds) when one is sooner.
fn sooner(after: Duration, waits: [Option<u64>; 2]) -> Duration {
    waits
        .into_iter()
        .flatten()
        .map(Duration::from_secs)
        .fold(after, Duration::min)
}

/// Records each member's observed role, node id and pod on its ValkeyNode, then this round's
/// utilization samples of the members whose period is due (unless sampling is switched off).
async fn member_statuses(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    resolved: &Resolved,
    observed: &[observed::Observed],
    node_api: &Api<ValkeyNode>,
) -> Result<(), Error> {
    publish::update_node_statuses(&cctx.ctx, node_api, observed).await?;
    if !cctx.ctx.settings.utilization_sampling {
        return Ok(());
    }
    let window = cluster
        .spec
        .autoscaling
        .as_ref()
        .map(|a| u64::try_from(a.scale_in_window_seconds).unwrap_or(0));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let statuses = cctx.samples.record(
        &cluster.namespace().unwrap_or_default(),
        observed,
        utilization::Budget::of(&resolved.config.resources),
        window,
        now_ms,
    );
    utilization::publish(node_api, statuses).await;
    Ok(())
}

/// The driver that reaches this cluster's members: the context keeps one per cluster while
/// its operator password and TLS settings stay the same.
async fn member_driver(
    ctx: &Context,
    cluster: &ValkeyCluster,
    credentials: &OperatorCredentials,
    tls: Option<&tls::ClusterTls>,
) -> Arc<FredDriver> {
    let tls = tls.map(|t| t.driver.clone());
    let key = object_key(cluster);
    ctx.driver(&key, &credentials.operator_password, tls).await
}

/// Carries out the plan's steps, unless the same steps were carried out less than their
/// back-off ago and nothing observed has changed since (see [`repeats`]). Returns the streak
/// of rounds that planned them: the status reports a long one.
async fn act_on(
    cctx: &ClusterContext,
    actor: &act::Actor<'_>,
    plan: &Plan,
) -> Result<Option<repeats::Streak>, Error> {
    let key = actor.key();
    match cctx.repeats.turn(key, plan, Instant::now()) {
        repeats::Turn::Nothing => Ok(None),
        repeats::Turn::Hold(left) => {
            debug!(cluster = %key, ?left, "same steps as the last round, not due yet");
            Ok(cctx.repeats.streak(key))
        }
        repeats::Turn::Act => {
            act::carry_out(actor, &plan.steps).await?;
            let streak = cctx.repeats.acted(key, plan, Instant::now());
            if streak.repeats == repeats::REPORT_AFTER_REPEATS {
                warn!(cluster = %key, steps = %streak.steps, repeats = streak.repeats, "the same steps keep being carried out without effect");
            }
            Ok(Some(streak))
        }
    }
}

/// How soon to look at the cluster again (see [`Look`]), from this round's plan, topology,
/// ACL progress and the streak of its steps; a changing cluster's wait is followed in
/// `cctx.waits`, a calm one's forgotten and its connections closed until then. Steps are
/// looked at again when they are due (see [`repeats`]), a wait as it goes (see [`cadence`]).
async fn look_again_in(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
    driver: &crate::driver::FredDriver,
    (plan, topology, acl_progress, streak): (
        &Plan,
        &Topology,
        &acl::AclProgress,
        Option<&repeats::Streak>,
    ),
) -> Duration {
    let key = object_key(cluster);
    match next_look(plan, topology, acl_progress) {
        Look::Changing => {
            let now = Instant::now();
            let waited = cctx.waits.waited(
                &key,
                cadence::wait_fingerprint(plan),
                !plan.steps.is_empty(),
                now,
            );
            streak.map_or_else(|| cadence::poll_interval(waited), |s| s.due_in(now))
        }
        Look::Calm(after) => {
            cctx.waits.settled(&key);
            if after >= CALM_LOOK {
                // Nothing to do until the next look: its connections are not kept open
                // meanwhile (ones another task is using stay; see `FredDriver::close_idle`).
                driver.close_idle(Duration::ZERO).await;
            }
            after
        }
    }
}

/// A settled cluster's next look.
const CALM_LOOK: Duration = Duration::from_secs(30);

/// How the next look at a cluster is timed.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    /// Forming or changing: Valkey's side (gossip, syncs) is not watched, so look again as
    /// the wait goes (see [`cadence`]).
    Changing,
    /// After a fixed interval: settled, waiting only on pods Kubernetes cannot run (a pod
    /// event reconciles at once when that changes; 200 such clusters polling every 2 s were
    /// 1,200 reconciles a minute), or an ACL load that failed.
    Calm(Duration),
}

/// When to look at the cluster again, from what this round planned and saw.
fn next_look(plan: &Plan, topology: &Topology, acl_progress: &acl::AclProgress) -> Look {
    let settled = plan.state == ClusterState::Active && plan.steps.is_empty();
    let unanswered: Vec<&Member> = topology
        .members
        .iter()
        .filter(|m| m.view.is_none())
        .collect();
    let waiting_on_pods = plan.steps.is_empty()
        && !unanswered.is_empty()
        && unanswered.iter().all(|m| m.pod_problem.is_some());
    look_for(settled, waiting_on_pods, acl_progress)
}

fn look_for(settled: bool, waiting_on_pods: bool, acl: &acl::AclProgress) -> Look {
    if acl.failed() {
        Look::Calm(Duration::from_secs(10))
    } else if waiting_on_pods {
        Look::Calm(CALM_LOOK)
    } else if !settled || !acl.applied() {
        // Forming, or a member's Secret volume has not caught up yet.
        Look::Changing
    } else {
        Look::Calm(CALM_LOOK)
    }
}

/// A failed reconcile is retried after a backoff that grows with each failure in a row (a
/// successful one resets it), and counted by error kind.
pub fn error_policy(
    cluster: Arc<ValkeyCluster>,
    error: &Error,
    cctx: Arc<ClusterContext>,
) -> Action {
    cctx.ctx
        .retry_after_failure("cluster", cluster.as_ref(), error)
}

#[cfg(test)]
mod tests {
    use super::planning::off_the_runtime;
    use super::*;
    use crate::plan;

    #[test]
    fn a_step_waiting_sooner_than_the_calm_look_brings_the_next_look_forward() {
        let calm = CALM_LOOK;
        assert_eq!(sooner(calm, [None, None]), calm);
        assert_eq!(sooner(calm, [Some(10), None]), Duration::from_secs(10));
        assert_eq!(sooner(calm, [Some(10), Some(5)]), Duration::from_secs(5));
        // A step's wait never delays a look that is due sooner.
        let changing = Duration::from_millis(200);
        assert_eq!(sooner(changing, [Some(2), Some(5)]), changing);
    }

    /// On a single-threaded runtime, work handed off must leave the runtime free: here the
    /// work waits for a task of the same runtime, which could never run if the work blocked
    /// the runtime's only thread (the wait would time out instead).
    #[tokio::test(flavor = "current_thread")]
    async fn planning_a_large_cluster_leaves_the_runtime_free() {
        let (tx, rx) = std::sync::mpsc::channel::<&str>();
        let other = tokio::spawn(async move { tx.send("the runtime answered").unwrap() });
        let heard = off_the_runtime(move || rx.recv_timeout(Duration::from_secs(30))).await;
        assert_eq!(heard, Ok("the runtime answered"));
        other.await.unwrap();

        let topology = |members: usize| Topology {
            cluster: "c".into(),
            shards: 500,
            replicas_per_shard: 1,
            members: (0..members)
                .map(|i| Member::new(plan::member_name("c", i / 2, i % 2), i / 2))
                .collect(),
            migration: Default::default(),
        };
        for members in [0, 10, 999, 1000] {
            let (back, planned) = plan_off_the_runtime(topology(members)).await;
            assert_eq!(back, topology(members), "the topology is handed back");
            assert_eq!(planned, plan::plan(&back), "the same plan as in place");
        }
    }

    #[test]
    fn clusters_waiting_only_on_pods_kubernetes_cannot_run_are_looked_at_calmly() {
        use super::acl::{AclProgress, MemberAcl};
        let acl = |m: MemberAcl| AclProgress {
            revision: "r".into(),
            members: vec![("c-0-0".into(), m)],
        };
        let loaded = acl(MemberAcl::Loaded { reloaded: false });
        let calm = |s| Look::Calm(Duration::from_secs(s));
        assert_eq!(look_for(true, false, &loaded), calm(30), "settled");
        assert_eq!(
            look_for(false, false, &loaded),
            Look::Changing,
            "forming or changing"
        );
        assert_eq!(
            look_for(false, true, &loaded),
            calm(30),
            "unschedulable pods"
        );
        assert_eq!(
            look_for(true, false, &acl(MemberAcl::NotRunning)),
            Look::Changing,
            "ACL not loaded yet"
        );
        let failed = acl(MemberAcl::Failed { error: "x".into() });
        assert_eq!(look_for(false, true, &failed), calm(10));
    }
}
