//! The topology state machine (pure): from the members the operator intends (ValkeyNodes)
//! and what each member's Valkey reports, the next safe step toward the desired cluster.
//!
//! Every decision is re-derived from live state on every reconcile, so a step that was cut
//! short by a crash is simply planned again: creating a node whose name exists, meeting a
//! member already known, or assigning slots already owned never happens twice. Roles are read
//! from Valkey (who holds slots, who replicates whom), never inferred from names.

pub mod autoscale;
mod context;
mod describe;
mod failures;
mod figures;
mod formation;
mod migrations;
mod model;
pub mod rebalance;
mod retirement;
mod rollout;
pub mod utilization;

use crate::api::{ClusterState, Lifecycle};

use context::{Answered, Observed, names};
pub use describe::describe_steps;
pub use figures::{Figures, degraded_reason, desired_members, figures};
pub use model::{
    Awaiting, BULK_STEPS_PER_ROUND, Change, ExportJob, MIGRATION_IDLE_LIMIT_SECS, Member,
    MemberView, MigrationMethod, MoveMethod, MoveTarget, Plan, Step, Topology, Wait, member_name,
};

/// What kind of change an Updating step belongs to, from the members: a failed member being
/// replaced first (that is what a product team most needs to know), then a rollout (members on
/// an outdated spec, serving or retiring), then a change of shape (members beyond the spec's shards, shards with
/// more or fewer members than asked, slots still to move, members retiring that answer as
/// themselves).
pub(crate) fn change_of(topology: &Topology, state: ClusterState) -> Change {
    if state != ClusterState::Updating {
        return Change::of(state);
    }
    let lost_identity =
        |m: &Member| matches!((&m.node_id, &m.view), (Some(id), Some(v)) if *id != v.id);
    let leaving = |m: &Member| m.lifecycle == Lifecycle::Leaving;
    if topology
        .members
        .iter()
        .any(|m| m.gone.is_some() || lost_identity(m) || (leaving(m) && m.view.is_none()))
    {
        return Change::ReplacingMembers;
    }
    // Outdated members, still serving or retiring: a rollout, to its last retirement.
    if topology.members.iter().any(|m| !m.current) {
        return Change::RollingOut;
    }
    let observed = Observed::new(topology);
    let wrong_size =
        (0..topology.shards).any(|s| observed.shard_members(s).len() != observed.per_shard);
    let beyond = topology.members.iter().any(|m| m.shard >= topology.shards);
    if wrong_size || beyond || !observed.leaving.is_empty() || figures(topology).slots_to_move > 0 {
        return Change::Scaling;
    }
    Change::Updating
}

/// The next step. Stages run in order; the first with something to do or wait for wins.
/// With silent members (see [`failures::silent_members`]) the cluster is at best Degraded,
/// and the status says who is missing.
pub fn plan(topology: &Topology) -> Plan {
    let mut plan = plan_stages(topology);
    plan.change = change_of(topology, plan.state);
    let silent = failures::silent_members(topology);
    if !silent.is_empty() && !plan.names_the_missing {
        plan.awaiting.silent = silent.iter().map(|m| m.name.clone()).collect();
        if plan.state == ClusterState::Active {
            plan.state = ClusterState::Degraded;
            plan.change = Change::Degraded;
        }
        plan.message.push_str(&format!(
            "; {} not answering (the rest of the cluster carries on without them; rollouts and slot moves wait)",
            names(&silent)
        ));
    }
    plan
}

/// The table of contents. The order is the safety argument (replicas in sync before anything
/// is retired, slot moves in flight finished before anything else changes...): do not reorder.
fn plan_stages(topology: &Topology) -> Plan {
    let observed = Observed::new(topology);
    // Each stage returns the plan when it has something to do or wait for, `None` to go on.
    let before_answers: [fn(&Observed) -> Option<Plan>; 5] = [
        // 0. A formed cluster none of whose established members answers changes nothing.
        failures::wait_for_the_established,
        // 1. Every shard has its members (replacements for the rollout shard included).
        formation::create_members,
        // 2a. Members gone for good are never waited for: each gone primary's most up-to-date
        //     replica takes over at once, and a gone member owning no slots is retired (step
        //     1 then creates its replacement).
        failures::replace_gone,
        // 2. Every member runs and answers: replacements for an outdated spec that never
        //    started are retired; anybody else missing is waited for, except silent
        //    established members when somebody answers (the rest carries on without them).
        failures::retire_abandoned,
        failures::wait_for_answers,
    ];
    if let Some(plan) = before_answers.iter().find_map(|stage| stage(&observed)) {
        return plan;
    }
    // From here on every member that matters answered: silent established members are left
    // out of the answered view, and `holding` keeps back what could need them (no slot move,
    // no scale-in, no rollout step).
    let holding = !failures::silent_members(topology).is_empty();
    let answered = Answered::new(observed, holding);
    let after_answers: [fn(&Answered) -> Option<Plan>; 14] = [
        // 2b. Failures: a member that lost its identity is replaced; a shard whose primary is
        //     gone for good is taken over by its most up-to-date replica at once.
        failures::replace_failed,
        // 2c. Silent primaries too many for Valkey to fail over (no majority left) are taken
        //     over once Kubernetes and every answering member agree they are down.
        failures::take_over_from_silent_primaries,
        // 3. Everybody knows everybody (meet through a seed, then wait for gossip).
        formation::introduce,
        // 3b. Shards beyond spec.shards whose slots have all moved away retire (scale-in).
        retirement::retire_drained,
        // 4. Every slot has an owner (never a slot any member still sees owned).
        formation::assign_slots,
        // 5. Every other member of a shard replicates its primary.
        formation::replicate,
        // 6. Replicas in sync before anything is retired or failed over.
        formation::wait_for_sync,
        // 6b. Slot moves in flight finish before anything else changes.
        migrations::finish_slot_moves,
        // 7. Retire what is Leaving: fail over, forget it everywhere, then delete.
        retirement::retire_leaving,
        // 8. Rolling replacement of the rollout shard, one shard at a time.
        rollout::roll_out,
        // 9. Shard count changed: move slots toward the even split.
        rebalance::rebalance_shards,
        // 10. Fewer replicas wanted: retire the excess replicas (never a primary).
        retirement::retire_excess_replicas,
        // 11. Forget node entries no member claims.
        retirement::forget_stale_entries,
        // 12. Healthy everywhere: cluster_state ok, all slots covered.
        formation::check_health,
    ];
    after_answers
        .iter()
        .find_map(|stage| stage(&answered))
        // 13. Formed: members still Joining become Active.
        .unwrap_or_else(|| formation::mark_active(&answered))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_large;
