//! Status step, its computation: the ValkeyCluster status a reconcile ends with (from the plan,
//! or blocked, paused, deleting, failed, a rollout held or waiting for its slot), pure; the
//! refusal a blocked cluster shows ([`Blocker`]). Written by [`super::publish`]; the condition
//! types and builders are in [`super::conditions`].

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::acl::AclProgress;
use super::conditions::{
    ACL_APPLIED, Blocker, CERTIFICATE_EXPIRING_SOON, DATA_LOST, DEGRADED, MEMBERS_FAILING_TO_START,
    STEPS_TAKING_EFFECT, TLS_CERTIFICATE_VALID, condition, previous_conditions,
};
use super::observed::Observed;
use super::repeats::Streak;
use crate::api::{
    ClusterNodeStatus, ClusterProgress, ClusterState, Lifecycle, ValkeyCluster,
    ValkeyClusterStatus, ValkeyNode,
};
use crate::plan::{Figures, Plan, Topology};
use crate::resolve::certificate_expiry::{CertificateExpiry, expiring_soon};
use crate::time::rfc3339;

/// Status of a blocked cluster (a reference does not resolve, or a name it needs is taken).
/// The node list is kept (the members keep running); the message says what is wrong and how to
/// fix it.
pub fn blocked(
    cluster: &ValkeyCluster,
    cause: Blocker<'_>,
    nodes: &Store<ValkeyNode>,
) -> ValkeyClusterStatus {
    let generation = cluster.metadata.generation;
    let previous = previous_conditions(cluster);
    let members = super::observed::cluster_nodes(
        nodes,
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    let message = cause.message.to_string();
    let last = cluster.status.clone().unwrap_or_default();
    let expiry = carried_expiry_condition(cluster, &last, generation, &previous);
    // Momento v0.9: a TLS problem of a cluster that has been Active is Invalid.
    let state = if cause.condition == TLS_CERTIFICATE_VALID && last.active_since.is_some() {
        ClusterState::Invalid
    } else {
        ClusterState::Blocked
    };
    let reason = format!("{state:?}");
    ValkeyClusterStatus {
        active_since: last.active_since.clone(),
        autoscaling: last.autoscaling.clone(),
        persistence: last.persistence.clone(),
        certificate_not_after: last.certificate_not_after.clone(),
        // Owned by the restore controller's field manager.
        restore: None,
        endpoint: last.endpoint,
        tls: Some(cluster.spec.tls.is_some()),
        ready: last.ready,
        version: last.version,
        progress: last.progress,
        state: Some(state),
        message: Some(message.clone()),
        observed_generation: generation,
        // The members keep the ACL revision they loaded: carry that condition over, and the
        // revision it describes.
        acl_revision: last.acl_revision.clone(),
        conditions: [
            condition(
                cause.condition,
                false,
                cause.reason,
                &message,
                generation,
                &previous,
            ),
            condition("Ready", false, &reason, &message, generation, &previous),
            condition(DEGRADED, true, &reason, &message, generation, &previous),
        ]
        .into_iter()
        .chain(previous.iter().find(|c| c.type_ == ACL_APPLIED).cloned())
        .chain(expiry)
        .collect(),
        nodes: cluster
            .status
            .as_ref()
            .map(|s| s.nodes.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                members
                    .iter()
                    .map(|n| ClusterNodeStatus {
                        name: n.name_any(),
                        pod: n.status.as_ref().and_then(|s| s.pod.clone()),
                        shard: n.spec.shard,
                        role: n.status.as_ref().and_then(|s| s.role),
                        version: Some(n.spec.version.clone()),
                        lifecycle: n.status.as_ref().and_then(|s| s.lifecycle),
                        slots: None,
                        lag_bytes: None,
                        volume: crate::controller::node::build::volume_of(n, None),
                    })
                    .collect()
            }),
    }
}

/// The cluster carries `valkey.gomomento.com/paused: "true"`.
pub fn is_paused(cluster: &ValkeyCluster) -> bool {
    cluster
        .annotations()
        .get(crate::api::constants::ANNOTATION_PAUSED)
        .is_some_and(|v| v == "true")
}

/// Status of a paused cluster: state and members as last observed, the message and a
/// `Progressing=False, Paused` condition saying how to resume.
pub fn paused(cluster: &ValkeyCluster) -> ValkeyClusterStatus {
    let previous = previous_conditions(cluster);
    let generation = cluster.metadata.generation;
    let message = format!(
        "reconciliation paused by the {} annotation: members keep running, nothing is changed; remove the annotation to resume",
        crate::api::constants::ANNOTATION_PAUSED
    );
    let mut status = cluster.status.clone().unwrap_or_default();
    status.message = Some(message.clone());
    status.autoscaling = super::autoscale::paused(cluster);
    status.conditions.retain(|c| c.type_ != "Progressing");
    status.conditions.push(condition(
        "Progressing",
        false,
        "Paused",
        &message,
        generation,
        &previous,
    ));
    status
}

/// Status of a cluster being deleted while something holds it (foreground deletion waiting
/// for its members, a finalizer of someone else's): `Deleting`, `Ready=False`.
pub fn deleting(cluster: &ValkeyCluster) -> ValkeyClusterStatus {
    let previous = previous_conditions(cluster);
    let generation = cluster.metadata.generation;
    let held_by = cluster.metadata.finalizers.clone().unwrap_or_default();
    let message = match held_by.as_slice() {
        [] => "being deleted: Kubernetes removes its members, Services and Secrets with it".into(),
        held => format!(
            "being deleted: Kubernetes removes its members, Services and Secrets with it; the object goes once these finalizers are removed: {}",
            held.join(", ")
        ),
    };
    let mut status = cluster.status.clone().unwrap_or_default();
    status.state = Some(ClusterState::Deleting);
    status.message = Some(message.clone());
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.push(condition(
        "Ready", false, "Deleting", &message, generation, &previous,
    ));
    status
}

/// Status of a cluster whose creation cannot succeed (`cause`): `Failed`, `Ready=False,
/// CreationFailed`, members as last observed; the message says the way out.
pub fn failed(cluster: &ValkeyCluster, cause: &str) -> ValkeyClusterStatus {
    let previous = previous_conditions(cluster);
    let generation = cluster.metadata.generation;
    let message = format!(
        "creation failed: {cause}; fix the cause, then delete this ValkeyCluster and create it again (the spec cannot change now)"
    );
    let mut status = cluster.status.clone().unwrap_or_default();
    status.state = Some(ClusterState::Failed);
    status.message = Some(message.clone());
    status.observed_generation = generation;
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.push(condition(
        "Ready",
        false,
        "CreationFailed",
        &message,
        generation,
        &previous,
    ));
    status
}

/// Status of a formed cluster whose rollout is held (`reason`, `cause`): `Updating`, members and
/// `Ready` as last observed, `Progressing=False` with the reason and the way out.
pub fn rollout_held(cluster: &ValkeyCluster, reason: &str, cause: &str) -> ValkeyClusterStatus {
    let previous = previous_conditions(cluster);
    let generation = cluster.metadata.generation;
    let message = format!(
        "rollout held: {cause}; the new member does not join and the others keep serving: repoint the ValkeyConfig to an image whose binary is at least the floor, or fix the image"
    );
    let mut status = cluster.status.clone().unwrap_or_default();
    status.state = Some(ClusterState::Updating);
    status.message = Some(message.clone());
    status.observed_generation = generation;
    status.conditions.retain(|c| c.type_ != "Progressing");
    status.conditions.push(condition(
        "Progressing",
        false,
        reason,
        &message,
        generation,
        &previous,
    ));
    status
}

/// Status of a cluster whose rollout waits for one of the `maxConcurrentRollouts` slots: state,
/// members and `Ready` as last observed (nothing changes yet: it serves as before), the
/// message and `Progressing=True, WaitingForRolloutSlot`.
pub fn waiting_for_rollout_slot(cluster: &ValkeyCluster, rolling: usize) -> ValkeyClusterStatus {
    let previous = previous_conditions(cluster);
    let generation = cluster.metadata.generation;
    let message = format!(
        "waiting to roll out: {rolling} cluster(s) are rolling out, the operator's maxConcurrentRollouts; this one starts when one finishes"
    );
    let mut status = cluster.status.clone().unwrap_or_default();
    status.message = Some(message.clone());
    status.conditions.retain(|c| c.type_ != "Progressing");
    status.conditions.push(condition(
        "Progressing",
        true,
        "WaitingForRolloutSlot",
        &message,
        generation,
        &previous,
    ));
    status
}

/// Where applications connect: the client Service.
pub fn endpoint(cluster: &ValkeyCluster) -> String {
    format!(
        "{}.{}.svc:{}",
        crate::controller::names::client_service(&cluster.name_any()),
        cluster.namespace().unwrap_or_default(),
        crate::api::constants::CLIENT_PORT
    )
}

/// The Valkey version(s) the members run: one, or during a rollout the outdated members'
/// versions then the current ones (`8.1.1 -> 9.0.0`).
pub fn versions(observed: &[Observed]) -> Option<String> {
    let of = |current: bool| -> std::collections::BTreeSet<String> {
        observed
            .iter()
            .filter(|o| o.member.current == current)
            .filter_map(|o| {
                o.version
                    .clone()
                    .or_else(|| Some(o.node.spec.version.clone()))
            })
            .collect()
    };
    let join = |v: std::collections::BTreeSet<String>| v.into_iter().collect::<Vec<_>>().join(", ");
    let (old, new) = (of(false), of(true));
    match (old.is_empty(), new.is_empty()) {
        (true, true) => None,
        (true, false) => Some(join(new)),
        (false, true) => Some(join(old)),
        (false, false) if old == new => Some(join(new)),
        (false, false) => Some(format!("{} -> {}", join(old), join(new))),
    }
}

/// The cluster's figures for status.
fn progress(figures: &Figures) -> ClusterProgress {
    let n = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
    ClusterProgress {
        desired_members: n(figures.desired),
        ready_members: n(figures.ready),
        outdated_members: n(figures.outdated),
        slots_to_move: n(figures.slots_to_move),
    }
}

/// Status from the plan, this round's observations, the ACL and TLS steps, and the streak of
/// rounds that carried out the plan's steps.
pub fn from_plan(
    cluster: &ValkeyCluster,
    plan: &Plan,
    observed: &[Observed],
    topology: &Topology,
    acl: &AclProgress,
    tls: Option<&super::tls::TlsProgress>,
    streak: Option<&Streak>,
) -> ValkeyClusterStatus {
    let generation = cluster.metadata.generation;
    let previous = previous_conditions(cluster);
    let tls_conditions = tls_conditions(cluster, tls, generation, &previous);
    let certificate_not_after = tls
        .and_then(|t| t.expiry.as_ref())
        .map(|e| rfc3339(e.not_after));
    let (state, message) = restore_gate(cluster, plan.state, &plan.message);
    let figures = crate::plan::figures(topology);
    ValkeyClusterStatus {
        // Set by the autoscaling step (`autoscale::step`), after the plan.
        autoscaling: None,
        // Set by the volumes step (`volumes::into_status`), which knows the desired spec.
        persistence: None,
        certificate_not_after,
        active_since: active_since(cluster, state),
        // Owned by the restore controller's field manager.
        restore: None,
        state: Some(state),
        message: Some(message.clone()),
        observed_generation: generation,
        // The revision the `AclApplied` condition below describes.
        acl_revision: Some(acl.revision.clone()).filter(|r| !r.is_empty()),
        conditions: plan_conditions(
            plan,
            (state, &message),
            topology,
            acl,
            generation,
            &previous,
        )
        .into_iter()
        .chain([
            start_condition(observed, generation, &previous),
            steps_condition(streak, generation, &previous),
        ])
        .chain(tls_conditions.into_iter().flatten())
        .chain(data_lost_condition(plan, generation, &previous))
        .collect(),
        endpoint: Some(endpoint(cluster)),
        tls: Some(cluster.spec.tls.is_some()),
        ready: Some(format!("{}/{}", figures.ready, figures.desired)),
        version: versions(observed),
        progress: Some(progress(&figures)),
        nodes: observed
            .iter()
            .map(|o| node_status(o, plan, observed))
            .collect(),
    }
}

/// `status.activeSince`: kept once set; set when the cluster is Active for the first time.
fn active_since(cluster: &ValkeyCluster, state: ClusterState) -> Option<String> {
    let kept = cluster.status.as_ref().and_then(|s| s.active_since.clone());
    kept.or_else(|| (state == ClusterState::Active).then(|| rfc3339(crate::time::now_seconds())))
}

/// A cluster created with `spec.restoreFrom` is not Active before its keys are in: Restoring
/// (Failed once the restore gave up), with the restore's own message.
pub fn restore_gate(
    cluster: &ValkeyCluster,
    state: ClusterState,
    message: &str,
) -> (ClusterState, String) {
    let Some(from) = &cluster.spec.restore_from else {
        return (state, message.to_string());
    };
    let restore = cluster
        .status
        .as_ref()
        .and_then(|s| s.restore.clone())
        .unwrap_or_default();
    if restore.completed() || state != ClusterState::Active {
        return (state, message.to_string());
    }
    let (namespace, backup) = crate::backup::restore::source_of(cluster, from);
    let source = format!("{namespace}/{backup}");
    let gave_up = restore.gave_up();
    let said = restore
        .message
        .unwrap_or_else(|| "the restore Job starts".to_string());
    if gave_up {
        return (
            ClusterState::Failed,
            format!("restoring ValkeyBackup {source} failed: {said}"),
        );
    }
    (
        ClusterState::Restoring,
        format!("formed; restoring ValkeyBackup {source}: {said}"),
    )
}

/// `ConfigResolved`, `Ready`, `Progressing`, `Degraded` and `AclApplied`, in that order.
fn plan_conditions(
    plan: &Plan,
    (state, message): (ClusterState, &str),
    topology: &Topology,
    acl: &AclProgress,
    generation: Option<i64>,
    previous: &[Condition],
) -> [Condition; 5] {
    let ready = plan.state == ClusterState::Active && state == ClusterState::Active;
    let degraded = plan.state == ClusterState::Degraded;
    let (degraded_reason, degraded_message) = if degraded {
        (
            crate::plan::degraded_reason(topology),
            plan.message.as_str(),
        )
    } else if all_members_answer(topology) {
        ("Healthy", "every member the cluster has runs and answers")
    } else {
        (
            "Healthy",
            "no member that served is missing; new members are still starting",
        )
    };
    let (acl_ok, acl_reason, acl_message) = acl.condition();
    [
        condition(
            "ConfigResolved",
            true,
            "Resolved",
            "configRef, base chain, image and roles resolved",
            generation,
            previous,
        ),
        condition(
            "Ready",
            ready,
            &format!("{state:?}"),
            message,
            generation,
            previous,
        ),
        condition(
            "Progressing",
            plan.change.progressing(),
            plan.change.reason(),
            &plan.message,
            generation,
            previous,
        ),
        condition(
            DEGRADED,
            degraded,
            degraded_reason,
            degraded_message,
            generation,
            previous,
        ),
        condition(
            ACL_APPLIED,
            acl_ok,
            acl_reason,
            &acl_message,
            generation,
            previous,
        ),
    ]
}

/// Every member the spec asks for exists and answered this round (not vacuously: a cluster
/// whose members are not created yet has members to wait for).
fn all_members_answer(topology: &Topology) -> bool {
    let desired = topology
        .shards
        .saturating_mul(topology.replicas_per_shard.saturating_add(1));
    topology.members.len() >= desired && topology.members.iter().all(|m| m.view.is_some())
}

/// `MembersFailingToStart`: True naming each such member and quoting Valkey's last log line.
fn start_condition(
    observed: &[Observed],
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let failing: Vec<String> = observed
        .iter()
        .filter_map(|o| Some(format!("{}: {}", o.member.name, o.start_failure.as_ref()?)))
        .collect();
    if failing.is_empty() {
        return condition(
            MEMBERS_FAILING_TO_START,
            false,
            "NoneFailing",
            "every member that was started is running",
            generation,
            previous,
        );
    }
    condition(
        MEMBERS_FAILING_TO_START,
        true,
        "ValkeyExitedAtStart",
        &format!(
            "{}; serving members keep serving. Fix what Valkey says (the config on the menu, the image) and the members are replaced",
            failing.join("; ")
        ),
        generation,
        previous,
    )
}

/// `StepsTakingEffect`: False naming the steps, how often they were carried out and when
/// next, once the streak is long enough to be more than a slow step.
fn steps_condition(
    streak: Option<&Streak>,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    match streak.filter(|s| s.reported()) {
        Some(s) => condition(
            STEPS_TAKING_EFFECT,
            false,
            "StepRepeatsWithoutEffect",
            &s.message(),
            generation,
            previous,
        ),
        None => condition(
            STEPS_TAKING_EFFECT,
            true,
            "TakingEffect",
            "the steps the operator carries out change what it observes",
            generation,
            previous,
        ),
    }
}

/// `DataLost`: set (True) in the round the planner finds shards whose every data-holding
/// member is gone, naming them; kept until the cluster's spec next changes (its generation),
/// so whoever looks later still sees it. None when no data was ever lost.
fn data_lost_condition(
    plan: &Plan,
    generation: Option<i64>,
    previous: &[Condition],
) -> Option<Condition> {
    let kept = previous
        .iter()
        .find(|c| c.type_ == DATA_LOST && c.observed_generation == generation);
    // Shards lost in earlier rounds of this generation stay named: members that come back one
    // by one have their shards' slots given out in different rounds.
    let mut lost: BTreeSet<usize> = kept.map(shards_named).unwrap_or_default();
    let before = lost.len();
    lost.extend(plan.lost_shards.iter().copied());
    if lost.len() == before {
        return kept.cloned();
    }
    let shards: Vec<String> = lost.iter().map(|s| s.to_string()).collect();
    let message = format!(
        "shard(s) {} lost their data at {}: every member holding it was gone or came back empty, and its members keep no data across a pod's loss (no storage on the config); they were re-created empty. Give the config `storage` and `appendonly: \"yes\"` to survive this (docs/durability.md). Cleared by the next change to the cluster's spec",
        shards.join(", "),
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
    );
    Some(Condition {
        type_: DATA_LOST.into(),
        status: "True".into(),
        reason: "MembersLostTheirData".into(),
        message,
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    })
}

/// The shards a `DataLost` condition's message names (`shard(s) 0, 2 lost ...`).
fn shards_named(c: &Condition) -> BTreeSet<usize> {
    c.message
        .strip_prefix("shard(s) ")
        .and_then(|rest| rest.split(" lost").next())
        .map(|list| list.split(", ").filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default()
}

/// While Blocked (the source Secret unusable, e.g. its certificate expired): the previous
/// `CertificateExpiringSoon`, turned `Expired` once the certificate the members still serve
/// is past its `notAfter`. None for a plaintext cluster or before the condition was first set.
fn carried_expiry_condition(
    cluster: &ValkeyCluster,
    last: &ValkeyClusterStatus,
    generation: Option<i64>,
    previous: &[Condition],
) -> Option<Condition> {
    let spec = cluster.spec.tls.as_ref()?;
    let kept = previous
        .iter()
        .find(|c| c.type_ == CERTIFICATE_EXPIRING_SOON)?;
    let not_after = last
        .certificate_not_after
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    if not_after.as_second() > now {
        return Some(kept.clone());
    }
    let expiry = CertificateExpiry {
        which: "the certificate the members serve".into(),
        not_after: not_after.as_second(),
    };
    Some(expiry_condition(
        &spec.secret_ref,
        &expiry,
        generation,
        previous,
    ))
}

/// `CertificateExpiringSoon` as of now for `expiry`, the certificate in Secret `secret`.
fn expiry_condition(
    secret: &str,
    expiry: &CertificateExpiry,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let (soon, reason, message) = expiring_soon(secret, expiry, now);
    condition(
        CERTIFICATE_EXPIRING_SOON,
        soon,
        reason,
        &message,
        generation,
        previous,
    )
}

/// TLS clusters: the certificate Secret was valid this round, who serves it, and whether it
/// expires soon. None for a cluster without TLS (or before the TLS step ran).
fn tls_conditions(
    cluster: &ValkeyCluster,
    tls: Option<&super::tls::TlsProgress>,
    generation: Option<i64>,
    previous: &[Condition],
) -> Option<Vec<Condition>> {
    let (spec, progress) = cluster.spec.tls.as_ref().zip(tls)?;
    let expiring = progress
        .expiry
        .as_ref()
        .map(|expiry| expiry_condition(&spec.secret_ref, expiry, generation, previous));
    let valid = format!(
        "Secret {} holds a valid certificate; members mount its copy {}",
        spec.secret_ref,
        crate::controller::names::tls_secret(&cluster.name_any())
    );
    let (ok, reason, message) = progress.condition();
    let mut conditions = vec![
        condition(
            TLS_CERTIFICATE_VALID,
            true,
            "Valid",
            &valid,
            generation,
            previous,
        ),
        condition(
            super::tls::TLS_CERTIFICATE_SERVED,
            ok,
            reason,
            &message,
            generation,
            previous,
        ),
    ];
    conditions.extend(expiring);
    Some(conditions)
}

/// One member's entry in the cluster's node list.
fn node_status(o: &Observed, plan: &Plan, observed: &[Observed]) -> ClusterNodeStatus {
    ClusterNodeStatus {
        name: o.member.name.clone(),
        pod: o.pod.clone(),
        shard: o.member.shard as i32,
        role: o.role,
        version: o
            .version
            .clone()
            .or_else(|| Some(o.node.spec.version.clone())),
        // Marked active by this round's steps, after it was observed.
        lifecycle: Some(if marked_active(plan, &o.member.name) {
            Lifecycle::Active
        } else {
            o.member.lifecycle
        }),
        slots: slot_ranges(o),
        lag_bytes: replication_lag(o, observed),
        volume: crate::controller::node::build::volume_of(&o.node, o.aof_bytes),
    }
}

/// The plan has a `MarkActive` step naming this member.
fn marked_active(plan: &Plan, member: &str) -> bool {
    plan.steps.iter().any(|a| match a {
        crate::plan::Step::MarkActive { names } => names.iter().any(|n| n == member),
        _ => false,
    })
}

/// The slots a member serves as normalized ranges (`0-5460,5462`); None when it serves none
/// or was not seen.
fn slot_ranges(o: &Observed) -> Option<String> {
    o.member
        .view
        .as_ref()
        .filter(|v| !v.slots.is_empty())
        .map(|v| {
            crate::driver::slots::normalize(v.slots.iter().cloned())
                .iter()
                .map(crate::driver::slots::format_range)
                .collect::<Vec<_>>()
                .join(",")
        })
}

/// How far a replica's replication offset is behind its primary's, both as observed this round.
fn replication_lag(member: &Observed, observed: &[Observed]) -> Option<i64> {
    let view = member.member.view.as_ref()?;
    let primary_id = view.primary_id.as_ref()?;
    let primary = observed
        .iter()
        .filter_map(|o| o.member.view.as_ref())
        .find(|v| &v.id == primary_id)?;
    Some((primary.repl_offset - view.repl_offset).max(0))
}

#[cfg(test)]
mod answering_tests {
    use super::*;
    use crate::plan::{Member, MemberView, MigrationMethod};

    #[test]
    fn every_member_answers_only_once_every_member_exists_and_answered() {
        let mut topology = Topology {
            cluster: "c".into(),
            shards: 1,
            replicas_per_shard: 1,
            members: vec![],
            migration: MigrationMethod::Auto,
        };
        assert!(!all_members_answer(&topology), "no member created yet");
        let answered = |name: &str| Member {
            view: Some(MemberView::bare(name)),
            ..Member::new(name, 0)
        };
        topology.members = vec![answered("c-0-0"), Member::new("c-0-1", 0)];
        assert!(!all_members_answer(&topology), "one still starting");
        topology.members[1] = answered("c-0-1");
        assert!(all_members_answer(&topology));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cluster::conditions::expiry_flip;

    #[test]
    fn data_lost_names_every_shard_lost_this_generation_and_keeps_them() {
        let plan = |lost: Vec<usize>| Plan {
            state: ClusterState::Degraded,
            steps: vec![],
            message: String::new(),
            change: crate::plan::Change::Degraded,
            lost_shards: lost,
            names_the_missing: false,
            awaiting: Default::default(),
        };
        let first = data_lost_condition(&plan(vec![1]), Some(3), &[]).unwrap();
        assert!(
            first.message.starts_with("shard(s) 1 lost"),
            "{}",
            first.message
        );
        // Another shard in a later round: both named.
        let both =
            data_lost_condition(&plan(vec![0]), Some(3), std::slice::from_ref(&first)).unwrap();
        assert!(
            both.message.starts_with("shard(s) 0, 1 lost"),
            "{}",
            both.message
        );
        // Nothing new: the condition stays as it was; after a spec change it is gone.
        assert_eq!(
            data_lost_condition(&plan(vec![]), Some(3), std::slice::from_ref(&both)),
            Some(both.clone())
        );
        assert_eq!(
            data_lost_condition(&plan(vec![1]), Some(3), std::slice::from_ref(&both)),
            Some(both.clone())
        );
        assert_eq!(data_lost_condition(&plan(vec![]), Some(4), &[both]), None);
    }

    #[test]
    fn a_cluster_held_while_being_deleted_says_deleting_and_by_what() {
        let c: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "shop", "finalizers": ["foregroundDeletion"],
                         "deletionTimestamp": "2026-12-06T10:00:00Z"},
            "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0},
            "status": {"state": "Active", "message": "all good",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Active",
                                       "message": "", "lastTransitionTime": "2026-12-06T09:00:00Z"}]},
        }))
        .unwrap();
        let s = deleting(&c);
        assert_eq!(s.state, Some(ClusterState::Deleting));
        assert!(
            s.message
                .unwrap()
                .ends_with("finalizers are removed: foregroundDeletion")
        );
        let ready: Vec<_> = s.conditions.iter().filter(|c| c.type_ == "Ready").collect();
        assert_eq!(ready.len(), 1, "one condition per type");
        assert_eq!(
            (ready[0].status.as_str(), ready[0].reason.as_str()),
            ("False", "Deleting")
        );
    }

    #[test]
    fn a_paused_cluster_keeps_its_state_and_says_how_to_resume() {
        let mut c: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "shop", "annotations": {"valkey.gomomento.com/paused": "true"}},
            "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0},
            "status": {"state": "Active", "message": "all good"},
        }))
        .unwrap();
        assert!(is_paused(&c));
        let s = paused(&c);
        assert_eq!(s.state, Some(ClusterState::Active));
        assert!(
            s.message
                .unwrap()
                .contains("remove the annotation to resume")
        );
        let p = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap();
        assert_eq!((p.status.as_str(), p.reason.as_str()), ("False", "Paused"));
        c.metadata.annotations = Some(
            [(
                crate::api::constants::ANNOTATION_PAUSED.to_string(),
                "false".to_string(),
            )]
            .into(),
        );
        assert!(!is_paused(&c));
    }

    #[test]
    fn the_endpoint_is_the_client_service() {
        let mut c: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "shop"},
            "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0},
        }))
        .unwrap();
        c.metadata.namespace = Some("my-app".into());
        assert_eq!(endpoint(&c), "shop.my-app.svc:6379");
    }

    pub(super) fn tls_cluster(status: serde_json::Value) -> ValkeyCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "shop", "namespace": "team", "generation": 2},
            "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0,
                     "tls": {"secretRef": "shop-cert"}},
            "status": status,
        }))
        .unwrap()
    }

    fn expiring_in(days: i64) -> super::super::tls::TlsProgress {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        super::super::tls::TlsProgress {
            members: vec![],
            expiry: Some(CertificateExpiry {
                which: "the certificate in tls.crt".into(),
                not_after: now + days * 86_400 + 600,
            }),
        }
    }

    fn expiry_of(conditions: &[Condition]) -> Option<&Condition> {
        conditions
            .iter()
            .find(|c| c.type_ == CERTIFICATE_EXPIRING_SOON)
    }

    #[test]
    fn a_tls_cluster_says_whether_its_certificate_expires_within_30_days() {
        let c = tls_cluster(serde_json::json!({}));
        let far = tls_conditions(&c, Some(&expiring_in(90)), Some(2), &[]).unwrap();
        let far = expiry_of(&far).unwrap().clone();
        assert_eq!(
            (far.status.as_str(), far.reason.as_str()),
            ("False", "CertificateValid")
        );
        assert!(far.message.contains("(90 days;"), "{}", far.message);
        let near = tls_conditions(
            &c,
            Some(&expiring_in(19)),
            Some(2),
            std::slice::from_ref(&far),
        )
        .unwrap();
        let near = expiry_of(&near).unwrap().clone();
        assert_eq!(
            (near.status.as_str(), near.reason.as_str()),
            ("True", "ExpiresWithin30Days")
        );
        assert!(near.message.contains("(in 19 days)"), "{}", near.message);
        // Only a flip is told: a Warning when it turns True, a Normal one back to False.
        let (f, n) = (std::slice::from_ref(&far), std::slice::from_ref(&near));
        assert!(matches!(expiry_flip(f, n), Some((true, _))));
        assert!(matches!(expiry_flip(&[], n), Some((true, _))));
        assert!(expiry_flip(n, n).is_none() && expiry_flip(f, f).is_none());
        assert!(
            expiry_flip(&[], f).is_none(),
            "a new cluster's valid certificate is no news"
        );
        assert!(matches!(expiry_flip(n, f), Some((false, _))));
        // A plaintext cluster has no such condition.
        let mut plain = c.clone();
        plain.spec.tls = None;
        assert!(tls_conditions(&plain, Some(&expiring_in(19)), Some(2), &[]).is_none());
    }

    #[test]
    fn a_blocked_tls_cluster_keeps_the_condition_and_says_when_its_certificate_expired() {
        let kept = condition(
            CERTIFICATE_EXPIRING_SOON,
            true,
            "ExpiresWithin30Days",
            "soon",
            Some(2),
            &[],
        );
        let status = |not_after: &str| -> ValkeyClusterStatus {
            serde_json::from_value(serde_json::json!({"certificateNotAfter": not_after})).unwrap()
        };
        let previous = std::slice::from_ref(&kept);
        let c = tls_cluster(serde_json::json!({}));
        let later =
            carried_expiry_condition(&c, &status("2099-01-01T00:00:00Z"), Some(2), previous);
        assert_eq!(later.as_ref(), Some(&kept));
        let past = carried_expiry_condition(&c, &status("2020-01-01T00:00:00Z"), Some(2), previous)
            .unwrap();
        assert_eq!(
            (past.status.as_str(), past.reason.as_str()),
            ("True", "Expired")
        );
        assert!(
            past.message
                .contains("Secret \"shop-cert\" expired at 2020-01-01T00:00:00Z"),
            "{}",
            past.message
        );
        assert!(
            carried_expiry_condition(&c, &status("2020-01-01T00:00:00Z"), Some(2), &[]).is_none()
        );
    }
}

#[cfg(test)]
mod steps_tests {
    use super::*;
    use crate::controller::cluster::conditions::{has_reason, turned_false};
    use crate::controller::cluster::repeats::{REPORT_AFTER_REPEATS, Repeats};
    use crate::plan::{Change, Step};

    /// The streak after the same step was carried out `times` times in a row.
    fn streak(times: u32) -> Streak {
        let plan = Plan {
            state: ClusterState::Updating,
            steps: vec![Step::DeleteNode {
                name: "shop-0-2".into(),
            }],
            message: "retiring shop-0-2".into(),
            change: Change::Scaling,
            lost_shards: vec![],
            names_the_missing: false,
            awaiting: Default::default(),
        };
        let repeats = Repeats::default();
        let now = std::time::Instant::now();
        (1..times).for_each(|_| {
            repeats.acted("ns/shop", &plan, now);
        });
        repeats.acted("ns/shop", &plan, now)
    }

    #[test]
    fn steps_taking_effect_turns_false_naming_a_step_repeated_without_effect() {
        let ok = steps_condition(None, Some(3), &[]);
        assert_eq!(
            (ok.type_.as_str(), ok.status.as_str(), ok.reason.as_str()),
            (STEPS_TAKING_EFFECT, "True", "TakingEffect")
        );
        let short = streak(REPORT_AFTER_REPEATS);
        assert_eq!(steps_condition(Some(&short), Some(3), &[]).status, "True");
        let stuck = streak(REPORT_AFTER_REPEATS + 1);
        let c = steps_condition(Some(&stuck), Some(3), std::slice::from_ref(&ok));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "StepRepeatsWithoutEffect")
        );
        assert!(c.message.contains("delete the retired member shop-0-2"));
        assert!(c.message.contains("10 times in a row"));
        assert!(c.message.contains("Next try in 12.8 s"));
        assert!(c.message.contains("clears by itself once it takes effect"));
        assert_eq!(c.observed_generation, Some(3));
        // Back to True once the streak ends (progress, or nothing to do).
        assert_eq!(steps_condition(None, Some(3), &[c]).status, "True");
    }

    #[test]
    fn a_warning_is_due_only_when_steps_taking_effect_turns_false() {
        let ok = steps_condition(None, None, &[]);
        let stuck = steps_condition(Some(&streak(12)), None, &[]);
        let later = steps_condition(Some(&streak(13)), None, &[]);
        let turned = |before: &[Condition], now: &[Condition]| {
            turned_false(before, now, STEPS_TAKING_EFFECT).is_some()
        };
        assert!(turned(
            std::slice::from_ref(&ok),
            std::slice::from_ref(&stuck)
        ));
        assert!(
            turned(&[], std::slice::from_ref(&stuck)),
            "absent before (new, or was Blocked)"
        );
        assert!(
            !turned(std::slice::from_ref(&stuck), std::slice::from_ref(&later)),
            "still False: once"
        );
        assert!(!turned(
            std::slice::from_ref(&stuck),
            std::slice::from_ref(&ok)
        ));
        assert!(!turned(&[], std::slice::from_ref(&ok)));
    }

    fn restored_cluster(restore: serde_json::Value) -> ValkeyCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "copy", "namespace": "team"},
            "spec": {"configRef": "standard", "shards": 1, "replicasPerShard": 0,
                     "restoreFrom": {"backup": "nightly"}},
            "status": {"restore": restore},
        }))
        .unwrap()
    }

    #[test]
    fn a_restored_cluster_is_restoring_until_its_keys_are_in_then_active_or_failed() {
        let gate = |restore| {
            let c = restored_cluster(restore);
            let (state, message) = restore_gate(&c, ClusterState::Active, "formed");
            (state, message, c.restore_outstanding())
        };
        let (state, message, outstanding) = gate(serde_json::json!({}));
        assert_eq!(state, ClusterState::Restoring);
        assert!(message.contains("team/nightly"), "{message}");
        assert!(outstanding);
        let (state, message, outstanding) =
            gate(serde_json::json!({"phase": "Failed", "attempts": 1, "message": "bucket gone"}));
        assert_eq!(state, ClusterState::Restoring, "another attempt follows");
        assert!(message.contains("bucket gone"), "{message}");
        assert!(outstanding);
        let (state, message, outstanding) =
            gate(serde_json::json!({"phase": "Failed", "attempts": 3,
                                                        "message": "bucket gone"}));
        assert_eq!(state, ClusterState::Failed);
        assert!(message.contains("failed: bucket gone"), "{message}");
        assert!(!outstanding, "given up: no more Jobs, no restore user");
        let (state, message, outstanding) = gate(serde_json::json!({"phase": "Completed"}));
        assert_eq!((state, message.as_str()), (ClusterState::Active, "formed"));
        assert!(!outstanding);
        // A cluster that is not formed yet keeps its own state; one without restoreFrom is
        // never held.
        let c = restored_cluster(serde_json::json!({}));
        assert_eq!(
            restore_gate(&c, ClusterState::Creating, "forming").0,
            ClusterState::Creating
        );
        let mut plain = c.clone();
        plain.spec.restore_from = None;
        assert!(!plain.restore_outstanding());
        assert_eq!(
            restore_gate(&plain, ClusterState::Active, "formed").0,
            ClusterState::Active
        );
    }

    #[test]
    fn a_tls_problem_is_invalid_once_the_cluster_has_been_active_and_blocked_before() {
        let nodes = kube::runtime::reflector::store::Writer::<ValkeyNode>::default().as_reader();
        let tls = Blocker {
            condition: super::TLS_CERTIFICATE_VALID,
            reason: "SecretMissing",
            message: "Secret team/shop-cert does not exist",
        };
        let config = Blocker {
            condition: "ConfigResolved",
            reason: "ConfigMissing",
            message: "ValkeyConfig standard does not exist",
        };
        let formed = super::tests::tls_cluster(serde_json::json!({"state": "Active",
                                                    "activeSince": "2026-12-01T00:00:00Z"}));
        let status = blocked(&formed, tls, &nodes);
        assert_eq!(status.state, Some(ClusterState::Invalid));
        assert_eq!(status.active_since.as_deref(), Some("2026-12-01T00:00:00Z"));
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Invalid")
        );
        assert_eq!(
            blocked(&formed, config, &nodes).state,
            Some(ClusterState::Blocked),
            "a dangling menu reference stays Blocked"
        );
        // Never Active: Blocked (and, while Creating, not "formed": creation still decides).
        let new = super::tests::tls_cluster(serde_json::json!({"state": "Creating"}));
        assert_eq!(
            blocked(&new, tls, &nodes).state,
            Some(ClusterState::Blocked)
        );
        assert!(super::super::creation::still_creating(&new));
        let reforming = super::tests::tls_cluster(serde_json::json!({"state": "Creating",
                                                       "activeSince": "2026-12-01T00:00:00Z"}));
        assert!(
            !super::super::creation::still_creating(&reforming),
            "a formed cluster forming again is not being created"
        );
    }

    #[test]
    fn active_since_is_set_the_first_time_the_cluster_is_active_and_kept() {
        let fresh = super::tests::tls_cluster(serde_json::json!({"state": "Creating"}));
        assert_eq!(active_since(&fresh, ClusterState::Creating), None);
        let first = active_since(&fresh, ClusterState::Active).unwrap();
        assert!(first.ends_with('Z'), "{first}");
        let kept = super::tests::tls_cluster(serde_json::json!({"state": "Degraded",
                                                  "activeSince": "2026-12-01T00:00:00Z"}));
        for state in [
            ClusterState::Active,
            ClusterState::Degraded,
            ClusterState::Creating,
        ] {
            assert_eq!(
                active_since(&kept, state).as_deref(),
                Some("2026-12-01T00:00:00Z")
            );
        }
    }

    #[test]
    fn a_held_rollout_is_updating_and_says_why_and_the_way_out() {
        let formed = super::tests::tls_cluster(serde_json::json!({"state": "Updating",
                                                                  "activeSince": "2026-12-01T00:00:00Z"}));
        let cause = "member shop-0-x runs Valkey 9.0.0, below the supported floor 9.0.1 (ValkeyImage \"v\" declares 9.1.2)";
        let held = rollout_held(&formed, "VersionBelowFloor", cause);
        assert_eq!(held.state, Some(ClusterState::Updating));
        let message = held.message.clone().unwrap();
        assert!(
            message.starts_with("rollout held: member shop-0-x runs Valkey 9.0.0"),
            "{message}"
        );
        assert!(message.contains("repoint the ValkeyConfig"), "{message}");
        let progressing: Vec<_> = held
            .conditions
            .iter()
            .filter(|c| c.type_ == "Progressing")
            .collect();
        assert_eq!(progressing.len(), 1);
        assert_eq!(
            (
                progressing[0].status.as_str(),
                progressing[0].reason.as_str()
            ),
            ("False", "VersionBelowFloor")
        );
        assert!(!has_reason(&formed, "Progressing", "VersionBelowFloor"));
        let mut after = formed.clone();
        after.status = Some(held);
        assert!(
            has_reason(&after, "Progressing", "VersionBelowFloor"),
            "one Warning Event"
        );
        assert_eq!(
            after.status.unwrap().active_since.as_deref(),
            Some("2026-12-01T00:00:00Z")
        );
    }
}
