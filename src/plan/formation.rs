//! Forming the cluster: members created, introduced to each other, slots assigned to each
//! shard's primary, replicas attached and in sync, the cluster healthy, members Active.

use std::collections::{BTreeMap, BTreeSet};

use super::context::{Answered, AnsweredMember, Observed, names, owned_slots, shard_primary};
use super::model::{Plan, Step, Topology, Wait, member_name};
use crate::api::{ClusterState, Lifecycle};
use crate::topology::NodeId;
use crate::topology::slots::{SLOT_COUNT, count_slots, even_ranges, subtract};

/// 1. Every shard has its members (replacements for the rollout shard included), named with
///    the lowest index not in use in their shard. Linear in the members: the indices in use
///    are read once, per shard, from the names.
pub(super) fn create_members(o: &Observed) -> Option<Plan> {
    let topology = o.topology;
    let used = used_indices(topology);
    let mut creates = Vec::new();
    for shard in 0..topology.shards {
        let list = o.shard_members(shard);
        let have = if Some(shard) == o.rollout_shard {
            list.iter().filter(|m| m.current).count()
        } else {
            list.len()
        };
        let taken = used.get(&shard);
        let free = (0..).filter(|index| taken.is_none_or(|t| !t.contains(index)));
        creates.extend(
            free.take(o.per_shard.saturating_sub(have))
                .map(|index| Step::CreateNode {
                    name: member_name(&topology.cluster, shard, index),
                    shard,
                }),
        );
    }
    if creates.is_empty() {
        return None;
    }
    let message = match o.rollout_shard {
        Some(shard) if o.ever_formed => format!(
            "{}: creating {} replacement member(s)",
            o.rollout_note(shard),
            creates.len()
        ),
        _ => format!("creating {} member(s)", creates.len()),
    };
    Some(Plan::new(o.changing, creates, message))
}

/// Indices in use, by shard, as the members' names say: a name is in use whatever shard its
/// member is in, so `(shard, index)` is taken when some member is called
/// `member_name(cluster, shard, index)` exactly.
fn used_indices(topology: &Topology) -> BTreeMap<usize, BTreeSet<usize>> {
    let mut used: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let prefix = format!("{}-", topology.cluster);
    for m in &topology.members {
        let parsed = m
            .name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(shard, index)| Some((shard.parse().ok()?, index.parse().ok()?)))
            .filter(|&(shard, index)| member_name(&topology.cluster, shard, index) == m.name);
        if let Some((shard, index)) = parsed {
            used.entry(shard).or_default().insert(index);
        }
    }
    used
}

/// 3. Everybody knows everybody. Meet through a seed: one that holds slots if any (it is part
///    of the established cluster), else the first by name; then wait for gossip.
pub(super) fn introduce(a: &Answered) -> Option<Plan> {
    if let Some(plan) = distinct_config_epochs(a) {
        return Some(plan);
    }
    if let Some(plan) = slots_before_meeting(a) {
        return Some(plan);
    }
    if let Some(plan) = reintroduce_moved(a) {
        return Some(plan);
    }
    let changing = &a.observed.changing;
    let seed = a
        .members
        .iter()
        .find(|m| !m.view.slots.is_empty())
        .or_else(|| a.members.iter().min_by(|x, y| x.name.cmp(&y.name)))?;
    let meets: Vec<Step> = a
        .members
        .iter()
        .filter(|m| m.name != seed.name && !seed.view.known.contains(&m.view.id))
        .map(|m| Step::Meet {
            via: seed.addr.clone(),
            target: m.addr.clone(),
        })
        .collect();
    if !meets.is_empty() {
        return Some(Plan::new(
            *changing,
            meets,
            format!("introducing {} member(s) to the cluster", a.members.len()),
        ));
    }
    // The seed knows everybody; gossip spreads that in a second or three. Members that have
    // not heard of each other yet are introduced directly instead (a MEET while the
    // handshake is already under way is a no-op), at most MEETS_PER_ROUND per round.
    let (unaware, strangers) = strangers(a);
    (!strangers.is_empty()).then(|| {
        Plan::new(
            *changing,
            strangers,
            format!(
                "introducing members that have not heard of each other yet: {}",
                names(&unaware)
            ),
        )
    })
}

/// A new cluster's primaries get their slots before they meet, as `valkey-cli --cluster
/// create` gives them: the handshake of each `CLUSTER MEET` then carries the slots, and every
/// member knows every owner as soon as it knows the member. Given after the meeting (step 4),
/// slot ownership spreads only by gossip, a node pinging about one other per second: a 3 x 1
/// cluster's primaries reported `cluster_state:fail` for 4 to 5 s after the assignment
/// (`vk-bench --only formation`). Only while nobody could own a slot: the cluster never
/// formed, no member knows another, none owns a slot; step 4's check against slots some
/// member still sees owned matters only once members know each other.
fn slots_before_meeting(a: &Answered) -> Option<Plan> {
    let fresh = !a.observed.ever_formed
        && a.members.len() > 1
        && a.members
            .iter()
            .all(|m| m.view.known.len() <= 1 && m.view.slots.is_empty());
    if !fresh {
        return None;
    }
    assign_slots(a)
}

/// A new cluster's members get distinct config epochs before they meet, as `valkey-cli
/// --cluster create` gives them. Left to Valkey, equal epochs are told apart only between
/// primaries, by gossip; a member made a replica before its tie was broken keeps its
/// primary's epoch, and if it ever has to take over (`TAKEOVER` bumps the epoch only when
/// the replica's is not already the highest) it claims the slots with an epoch nobody
/// prefers to the dead primary's: the shard stays without a primary. Only members that know
/// nobody and still have epoch 0 accept `SET-CONFIG-EPOCH`; members of a formed cluster
/// join at 0, which `TAKEOVER` always bumps.
fn distinct_config_epochs(a: &Answered) -> Option<Plan> {
    if a.observed.ever_formed || a.members.len() < 2 {
        return None;
    }
    let mut fresh: Vec<&AnsweredMember> = a
        .members
        .iter()
        .filter(|m| m.view.config_epoch == 0 && m.view.known.len() <= 1)
        .collect();
    fresh.sort_by(|x, y| x.name.cmp(&y.name));
    let highest = a.members.iter().map(|m| m.view.config_epoch).max()?;
    let steps: Vec<Step> = fresh
        .iter()
        .zip(highest + 1..)
        .map(|(m, epoch)| Step::SetConfigEpoch {
            member: m.addr.clone(),
            epoch,
        })
        .collect();
    (!steps.is_empty()).then(|| {
        Plan::new(
            a.observed.changing,
            steps,
            format!(
                "giving {} new member(s) distinct config epochs before they meet",
                fresh.len()
            ),
        )
    })
}

/// Members that have not heard of every member (themselves included), and at most
/// MEETS_PER_ROUND introductions of a member to one it has not heard of. One pass over the
/// members, each looking the others up in its own known set until the first it does not know
/// (at most what the members reported: each knows about as many as there are); strangers are
/// only looked for among members that have some, and only while the round has room.
fn strangers<'a>(a: &Answered<'a>) -> (Vec<AnsweredMember<'a>>, Vec<Step>) {
    let mut unaware = Vec::new();
    let mut meets = Vec::new();
    for m in &a.members {
        if a.members.iter().all(|t| m.view.known.contains(&t.view.id)) {
            continue;
        }
        unaware.push(*m);
        let room = MEETS_PER_ROUND.saturating_sub(meets.len());
        meets.extend(
            a.members
                .iter()
                .filter(|t| t.name != m.name && !m.view.known.contains(&t.view.id))
                .take(room)
                .map(|t| Step::Meet {
                    via: m.addr.clone(),
                    target: t.addr.clone(),
                }),
        );
    }
    (unaware, meets)
}

/// Members that came back under their node id at a new IP (their pods were recreated with
/// their volumes) are introduced again to every member that still has the old IP: Valkey
/// takes the handshake's answer from a node id it knows as that node's new address. Members
/// learn a single moved peer from gossip, but after a full restart every member has every
/// other at an address nobody answers at any more, and nobody would ever hear of the moves.
fn reintroduce_moved(a: &Answered) -> Option<Plan> {
    let mut moved = BTreeSet::new();
    let mut meets = Vec::new();
    for m in &a.members {
        for t in &a.members {
            let Some(seen) = m.view.addresses.get(&t.view.id) else {
                continue;
            };
            if t.name == m.name || *seen == t.addr.host {
                continue;
            }
            moved.insert(t.name.as_str());
            if meets.len() < MEETS_PER_ROUND {
                meets.push(Step::Meet {
                    via: m.addr.clone(),
                    target: t.addr.clone(),
                });
            }
        }
    }
    (!meets.is_empty()).then(|| {
        Plan::new(
            a.observed.changing,
            meets,
            format!(
                "introducing {} member(s) that came back at a new address with their data: {}",
                moved.len(),
                moved.into_iter().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

/// Direct introductions per round once the seed knows everybody: enough for a large cluster's
/// stragglers, few enough that a 100-member formation does not send thousands at once.
const MEETS_PER_ROUND: usize = 64;

/// 4. Every slot has an owner: each shard's range goes to its primary (the member owning
///    slots, or for a new cluster the member chosen to spread primaries over Kubernetes
///    nodes, see `context::spread_new_leaders`).
///    Owned means owned by anyone any member knows of: the slots of a failed primary that is
///    no longer one of our members (its pod lost its data and came back as a new node) are NOT
///    free. Assigning them to the empty node would make the old primary's replica follow it
///    and wipe the shard's data; the shard waits for its replica to take over instead.
pub(super) fn assign_slots(a: &Answered) -> Option<Plan> {
    let topology = a.observed.topology;
    let owned = owned_slots(topology);
    let mut assigns = Vec::new();
    let mut lost_shards = Vec::new();
    for (shard, range) in even_ranges(topology.shards).iter().enumerate() {
        let unowned = subtract(range, &owned);
        if unowned.is_empty() {
            continue;
        }
        let list = a.shard_members(shard);
        // A formed cluster's shard with members that served it but slots nobody owns: those
        // members came back empty under new node ids (restarted in place without a volume),
        // and the shard's data is gone. Said loudly, in the round that gives the slots out.
        if a.observed.ever_formed
            && list
                .iter()
                .any(|m| m.member.lifecycle == Lifecycle::Active && m.member.node_id.is_some())
        {
            lost_shards.push(shard);
        }
        let owner = shard_primary(list).or_else(|| a.new_leader(shard));
        if let Some(owner) = owner {
            assigns.push(Step::AssignSlots {
                member: owner.addr.clone(),
                ranges: unowned,
            });
        }
    }
    (!assigns.is_empty()).then(|| {
        let message = super::failures::lost_data_note(&lost_shards)
            .map_or("assigning hash slots".to_string(), |lost| {
                format!("{lost}; assigning hash slots")
            });
        Plan {
            lost_shards,
            ..Plan::new(a.observed.changing, assigns, message)
        }
    })
}

/// Node ids of the silent members (see [`super::failures::silent_members`]): a replica that
/// follows one of them has its primary, only not answering now; its shard is not without a
/// primary and its replicas are not waited for (the rest of the cluster carries on).
fn silent_ids(a: &Answered) -> BTreeSet<NodeId> {
    super::failures::silent_members(a.observed.topology)
        .into_iter()
        .filter_map(|m| m.node_id.clone())
        .collect()
}

/// 5. Every other member of a shard replicates its primary.
pub(super) fn replicate(a: &Answered) -> Option<Plan> {
    let mut replicates = Vec::new();
    let mut no_primary: Vec<usize> = Vec::new();
    let silent = silent_ids(a);
    for (shard, list) in &a.by_shard {
        let Some(primary) = a.shard_leader(*shard) else {
            let follows_silent = list.iter().any(|m| {
                m.view
                    .primary_id
                    .as_ref()
                    .is_some_and(|p| silent.contains(p))
            });
            if !follows_silent {
                no_primary.push(*shard);
            }
            continue;
        };
        let primary_id = &primary.view.id;
        for m in list.iter().filter(|m| m.name != primary.name) {
            if m.view.primary_id.as_ref() != Some(primary_id) {
                replicates.push(Step::Replicate {
                    member: m.addr.clone(),
                    primary: primary_id.clone(),
                });
            }
        }
    }
    if !replicates.is_empty() {
        return Some(Plan::new(
            a.observed.changing,
            replicates,
            "attaching replicas to their primaries",
        ));
    }
    (!no_primary.is_empty()).then(|| {
        Plan::new(
            ClusterState::Degraded,
            vec![],
            format!(
                "shard(s) {} have no primary owning slots",
                no_primary
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .waiting(Wait::NoPrimary { shards: no_primary })
    })
}

/// 6. Replicas in sync before anything is retired or failed over.
pub(super) fn wait_for_sync(a: &Answered) -> Option<Plan> {
    let o = &a.observed;
    let silent = silent_ids(a);
    let syncing: Vec<AnsweredMember> = a
        .members
        .iter()
        .copied()
        .filter(|m| m.view.primary_id.is_some() && !m.view.replica_in_sync)
        .filter(|m| {
            m.view
                .primary_id
                .as_ref()
                .is_none_or(|p| !silent.contains(p))
        })
        .collect();
    if syncing.is_empty() {
        return None;
    }
    let message = match o.rollout_shard {
        Some(shard) if o.ever_formed => format!(
            "{}: waiting for replicas to sync: {}",
            o.rollout_note(shard),
            names(&syncing)
        ),
        _ => format!("waiting for replicas to sync: {}", names(&syncing)),
    };
    let on = Wait::ReplicaSync {
        replicas: syncing.iter().map(|m| m.name.clone()).collect(),
    };
    Some(Plan::new(o.changing, vec![], message).waiting(on))
}

/// 12. Healthy everywhere: cluster_state ok, all slots covered.
pub(super) fn check_health(a: &Answered) -> Option<Plan> {
    let not_ok: Vec<AnsweredMember> = a
        .members
        .iter()
        .copied()
        .filter(|m| !m.view.cluster_ok)
        .collect();
    let covered = count_slots(owned_slots(a.observed.topology));
    if not_ok.is_empty() && covered == usize::from(SLOT_COUNT) {
        return None;
    }
    let mut parts = Vec::new();
    if !not_ok.is_empty() {
        parts.push(format!("cluster_state not ok on {}", names(&not_ok)));
    }
    if covered != usize::from(SLOT_COUNT) {
        parts.push(format!("{covered} of {SLOT_COUNT} slots covered"));
    }
    let state = if a.observed.ever_formed {
        ClusterState::Degraded
    } else {
        ClusterState::Creating
    };
    let on = Wait::Health {
        not_ok: not_ok.iter().map(|m| m.name.clone()).collect(),
        slots_covered: covered,
    };
    Some(Plan::new(state, vec![], format!("waiting: {}", parts.join("; "))).waiting(on))
}

/// 13. Formed: members still Joining become Active.
pub(super) fn mark_active(a: &Answered) -> Plan {
    let topology = a.observed.topology;
    let joining: Vec<String> = a
        .members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::Joining)
        .map(|m| m.name.clone())
        .collect();
    let message = format!(
        "{} shard(s) with {} replica(s) each; all {SLOT_COUNT} slots served",
        topology.shards, topology.replicas_per_shard
    );
    if joining.is_empty() {
        return Plan::new(ClusterState::Active, vec![], message);
    }
    Plan::new(
        ClusterState::Active,
        vec![Step::MarkActive { names: joining }],
        message,
    )
}
