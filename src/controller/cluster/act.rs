//! Act step: carries out the plan's steps in order, one function per [`Step`] kind. The
//! dispatch names every variant and destructures every field, so a step (or a field)
//! added to the plan does not compile until it is carried out here.

use std::collections::HashMap;

use kube::Api;
use kube::api::PostParams;
use tracing::{info, warn};

use super::build;
use super::observed::Observed;
use crate::api::constants::CLUSTER_BUS_PORT;
use crate::api::{Lifecycle, ValkeyCluster, ValkeyNode, ValkeyNodeSpec};
use crate::controller::{Context, Error, object_key};
use crate::driver::migrate::{KeyMove, move_slot_by_keys};
use crate::driver::parse::NodeId;
use crate::driver::{ClusterDriver, FailoverMode, MemberAddr, SetSlot, SlotMigrationRequest};
use crate::plan::{self, MoveMethod, MoveTarget, Step};
use crate::topology::slots::SlotRange;

/// Slots a key-by-key move handles per reconcile, so one reconcile stays short; the rest is
/// planned again at once.
const KEY_MOVE_SLOTS_PER_ROUND: usize = 256;

/// What acting on one cluster needs: where to write (Kubernetes, Valkey), what for, and the
/// spec new members get.
pub struct Actor<'a> {
    ctx: &'a Context,
    cluster: &'a ValkeyCluster,
    /// `namespace/name`, the `cluster` field of every log line.
    key: String,
    node_api: &'a Api<ValkeyNode>,
    driver: &'a dyn ClusterDriver,
    desired_spec: &'a ValkeyNodeSpec,
    /// The ValkeyNode at each member address this round, so an Event about a member names it.
    names: HashMap<MemberAddr, String>,
}

impl<'a> Actor<'a> {
    pub fn new(
        ctx: &'a Context,
        cluster: &'a ValkeyCluster,
        node_api: &'a Api<ValkeyNode>,
        driver: &'a dyn ClusterDriver,
        desired_spec: &'a ValkeyNodeSpec,
    ) -> Self {
        Actor {
            ctx,
            cluster,
            key: object_key(cluster),
            node_api,
            driver,
            desired_spec,
            names: HashMap::new(),
        }
    }

    /// The same actor, knowing which ValkeyNode serves at each address `observed` found.
    pub fn naming(mut self, observed: &[Observed]) -> Self {
        self.names = observed
            .iter()
            .filter_map(|o| Some((o.member.addr.clone()?, o.member.name.clone())))
            .collect();
        self
    }

    /// `namespace/name` of the cluster acted on.
    pub fn key(&self) -> &str {
        &self.key
    }

    async fn event(&self, reason: &str, note: &str) {
        crate::controller::events::normal(self.ctx, self.cluster, reason, note).await;
    }

    /// An Event about member `name`: one of its own, not folded into another member's series.
    async fn member_event(&self, name: &str, reason: &str, note: &str) {
        let member = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(crate::api::constants::API_VERSION.into()),
            kind: Some("ValkeyNode".into()),
            name: Some(name.into()),
            namespace: self.cluster.metadata.namespace.clone(),
            ..Default::default()
        };
        crate::controller::events::normal_about(self.ctx, self.cluster, member, reason, note).await;
    }

    /// An Event about the member at `addr`: its own when the address is a known member's (a
    /// failover in one shard and one in another are two Events, each with its note).
    async fn event_at(&self, addr: &MemberAddr, reason: &str, note: &str) {
        match self.names.get(addr) {
            Some(name) => self.member_event(name, reason, note).await,
            None => self.event(reason, note).await,
        }
    }
}

/// Carries out this round's share of `steps` (see [`this_round`]) in order; the first that
/// fails ends the reconcile (it is planned again from what the world then looks like).
#[tracing::instrument(name = "cluster.act", skip_all, fields(steps = steps.len()))]
pub async fn carry_out(actor: &Actor<'_>, steps: &[Step]) -> Result<(), Error> {
    for step in this_round(steps) {
        // No step once the lease this replica holds may have run out (a standby could act).
        actor.ctx.confirm_leading().await?;
        dispatch(actor, step).await?;
    }
    Ok(())
}

/// The steps acted on this round, in plan order: at most [`plan::BULK_STEPS_PER_ROUND`] of
/// each kind a plan holds one of per member or per pair of members; every other step (slot
/// assignments and moves, failovers, marks: bounded by the shards) is kept. What is left out
/// is planned again next round from live state.
fn this_round(steps: &[Step]) -> Vec<&Step> {
    let mut taken: std::collections::BTreeMap<&'static str, usize> = Default::default();
    steps
        .iter()
        .filter(|step| {
            let kind = match step {
                Step::CreateNode { .. } => "create",
                Step::Meet { .. } => "meet",
                Step::SetConfigEpoch { .. } => "set_config_epoch",
                Step::Replicate { .. } => "replicate",
                Step::Forget { .. } => "forget",
                Step::DeleteNode { .. } => "delete",
                _ => return true,
            };
            let count = taken.entry(kind).or_default();
            *count += 1;
            *count <= plan::BULK_STEPS_PER_ROUND
        })
        .collect()
}

async fn dispatch(a: &Actor<'_>, step: &Step) -> Result<(), Error> {
    match step {
        Step::CreateNode { name, shard } => create_node(a, name, *shard).await,
        Step::Meet { via, target } => meet(a, via, target).await,
        Step::AssignSlots { member, ranges } => assign_slots(a, member, ranges).await,
        Step::Replicate { member, primary } => replicate(a, member, primary).await,
        Step::Failover {
            member,
            shard,
            mode,
        } => failover(a, member, *shard, *mode).await,
        Step::MoveSlots {
            source,
            source_id,
            method,
            targets,
            primaries,
        } => match method {
            MoveMethod::Atomic => move_slots_atomic(a, source, targets).await,
            MoveMethod::Keys => move_slots_by_keys(a, source, source_id, targets, primaries).await,
        },
        Step::CloseSlots { member, slots } => close_slots(a, member, slots).await,
        Step::CancelSlotMigrations { member } => cancel_slot_migrations(a, member).await,
        Step::MarkActive { names } => mark_active(a, names).await,
        Step::MarkLeaving { names } => mark_leaving(a, names).await,
        Step::SetConfigEpoch { member, epoch } => set_config_epoch(a, member, *epoch).await,
        Step::Forget { via, node } => forget(a, via, node).await,
        Step::DeleteNode { name } => delete_node(a, name).await,
    }
}

/// Creates the member's ValkeyNode (the node controller makes its pod) and marks it Joining.
async fn create_node(a: &Actor<'_>, name: &str, shard: usize) -> Result<(), Error> {
    a.ctx.metrics.action("create_node");
    let node = build::node(a.cluster, name, shard, a.desired_spec)?;
    match a.node_api.create(&PostParams::default(), &node).await {
        Ok(_) => {
            info!(cluster = %a.key, node = %name, shard, "created member");
            let note = format!("Creating member {name} for shard {shard}");
            a.member_event(name, "CreatingMember", &note).await;
        }
        // Planned again after a crash or a stale cache: the object is already there.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    super::publish::set_node_lifecycle(a.node_api, name, Lifecycle::Joining).await
}

async fn meet(a: &Actor<'_>, via: &MemberAddr, target: &MemberAddr) -> Result<(), Error> {
    a.ctx.metrics.action("meet");
    info!(cluster = %a.key, via = %via, target = %target, "CLUSTER MEET");
    a.driver
        .meet(via, &target.host, target.port, Some(CLUSTER_BUS_PORT))
        .await?;
    Ok(())
}

async fn assign_slots(
    a: &Actor<'_>,
    member: &MemberAddr,
    ranges: &[SlotRange],
) -> Result<(), Error> {
    a.ctx.metrics.action("assign_slots");
    info!(cluster = %a.key, member = %member, ?ranges, "CLUSTER ADDSLOTSRANGE");
    a.driver.add_slots_range(member, ranges).await?;
    Ok(())
}

async fn replicate(a: &Actor<'_>, member: &MemberAddr, primary: &NodeId) -> Result<(), Error> {
    a.ctx.metrics.action("replicate");
    info!(cluster = %a.key, member = %member, primary = %primary.as_str(), "CLUSTER REPLICATE");
    if let Err(e) = a.driver.replicate(member, primary).await {
        // Most often: the member has not learned the primary's id yet. Re-planned.
        warn!(cluster = %a.key, member = %member, "replicate failed, will retry: {e}");
    }
    Ok(())
}

/// Promotes `member` to its shard's primary, with an Event saying how and why.
async fn failover(
    a: &Actor<'_>,
    member: &MemberAddr,
    shard: usize,
    mode: FailoverMode,
) -> Result<(), Error> {
    a.ctx.metrics.action("failover");
    let [coordinated, force, takeover] = crate::telemetry::FailoverLabel::MODES;
    let how = match mode {
        FailoverMode::Default => coordinated,
        FailoverMode::Force => force,
        FailoverMode::Takeover => takeover,
    };
    let label = crate::telemetry::FailoverLabel { mode: how };
    a.ctx.metrics.failovers.get_or_create(&label).inc();
    info!(cluster = %a.key, member = %member, shard, ?mode, "CLUSTER FAILOVER");
    match a.driver.failover(member, mode).await {
        Ok(()) => {}
        // A forced promotion races Valkey's own failover: whichever wins, the shard
        // gets a primary; the next round re-plans from what Valkey then reports.
        Err(e) if mode != FailoverMode::Default => {
            warn!(cluster = %a.key, member = %member, "forced failover failed, will re-plan: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    let how = match mode {
        FailoverMode::Default => "coordinated failover to the in-sync replica",
        FailoverMode::Force => {
            "forced failover (its primary is gone for good) to the most up-to-date replica"
        }
        FailoverMode::Takeover => {
            "takeover (its primary is gone and no majority can vote) by the most up-to-date replica"
        }
    };
    a.event_at(
        member,
        "Failover",
        &format!("Shard {shard}: {how} at {member}"),
    )
    .await;
    Ok(())
}

/// How many slots a move covers, for its log line and Event.
fn slot_count(targets: &[MoveTarget]) -> usize {
    targets
        .iter()
        .flat_map(|t| &t.ranges)
        .map(crate::driver::slots::range_len)
        .sum()
}

/// Starts one atomic slot migration job on `source` (Valkey 9.0+), followed by observe.
async fn move_slots_atomic(
    a: &Actor<'_>,
    source: &MemberAddr,
    targets: &[MoveTarget],
) -> Result<(), Error> {
    let total = slot_count(targets);
    a.ctx.metrics.action("migrate_slots_atomic");
    let requests: Vec<SlotMigrationRequest> = targets
        .iter()
        .map(|t| SlotMigrationRequest {
            ranges: t.ranges.clone(),
            target: t.id.clone(),
        })
        .collect();
    info!(cluster = %a.key, source = %source, slots = total, "CLUSTER MIGRATESLOTS");
    a.driver.migrate_slots(source, &requests).await?;
    a.ctx.metrics.slots_moved.inc_by(total as u64);
    let to: Vec<String> = targets.iter().map(|t| t.member.to_string()).collect();
    a.event_at(
        source,
        "MigratingSlots",
        &format!(
            "Moving {total} slot(s) from {source} to {} (atomic slot migration)",
            to.join(", ")
        ),
    )
    .await;
    Ok(())
}

/// Moves up to [`KEY_MOVE_SLOTS_PER_ROUND`] slots key by key; every primary is told each
/// moved slot's new owner.
async fn move_slots_by_keys(
    a: &Actor<'_>,
    source: &MemberAddr,
    source_id: &NodeId,
    targets: &[MoveTarget],
    primaries: &[MemberAddr],
) -> Result<(), Error> {
    let total = slot_count(targets);
    a.ctx.metrics.action("migrate_slots_keys");
    let mut budget = KEY_MOVE_SLOTS_PER_ROUND;
    let mut moved_slots = 0u64;
    let mut moved_keys = 0u64;
    for t in targets {
        let mv = KeyMove {
            source,
            source_id,
            target: &t.member,
            target_id: &t.id,
            others: primaries,
        };
        for slot in t.ranges.iter().flat_map(|r| r.clone()) {
            if budget == 0 {
                break;
            }
            budget -= 1;
            moved_keys += move_slot_by_keys(a.driver, mv, slot).await?;
            moved_slots += 1;
            a.ctx.metrics.slots_moved.inc();
        }
    }
    info!(cluster = %a.key, source = %source, slots = moved_slots, keys = moved_keys, "moved slots key by key");
    a.event_at(
        source,
        "MigratingSlots",
        &format!(
            "Moved {moved_slots} of {total} slot(s) from {source} key by key ({moved_keys} keys)"
        ),
    )
    .await;
    Ok(())
}

/// Closes slots left importing or migrating toward a node that is gone.
async fn close_slots(a: &Actor<'_>, member: &MemberAddr, slots: &[u16]) -> Result<(), Error> {
    a.ctx.metrics.action("close_slots");
    for slot in slots {
        info!(cluster = %a.key, member = %member, slot, "CLUSTER SETSLOT STABLE (peer gone)");
        a.driver.set_slot(member, *slot, &SetSlot::Stable).await?;
    }
    Ok(())
}

async fn cancel_slot_migrations(a: &Actor<'_>, member: &MemberAddr) -> Result<(), Error> {
    a.ctx.metrics.action("cancel_slot_migrations");
    warn!(cluster = %a.key, member = %member, "slot migration made no progress: cancelling it");
    a.driver.cancel_slot_migrations(member).await?;
    a.event_at(
        member,
        "SlotMigrationCancelled",
        &format!("Cancelled the slot migration on {member}: no progress for {} s; it will be planned again", plan::MIGRATION_IDLE_LIMIT_SECS),
    )
    .await;
    Ok(())
}

async fn mark_active(a: &Actor<'_>, names: &[String]) -> Result<(), Error> {
    for name in names {
        super::publish::set_node_lifecycle(a.node_api, name, Lifecycle::Active).await?;
    }
    Ok(())
}

/// The first step of retiring members: they are marked Leaving, with an Event each.
async fn mark_leaving(a: &Actor<'_>, names: &[String]) -> Result<(), Error> {
    for name in names {
        info!(cluster = %a.key, node = %name, "retiring member");
        super::publish::set_node_lifecycle(a.node_api, name, Lifecycle::Leaving).await?;
        let note = format!("Retiring member {name}");
        a.member_event(name, "RetiringMember", &note).await;
    }
    Ok(())
}

async fn set_config_epoch(a: &Actor<'_>, member: &MemberAddr, epoch: u64) -> Result<(), Error> {
    a.ctx.metrics.action("set_config_epoch");
    info!(cluster = %a.key, member = %member, epoch, "CLUSTER SET-CONFIG-EPOCH");
    a.driver.set_config_epoch(member, epoch).await?;
    Ok(())
}

async fn forget(a: &Actor<'_>, via: &MemberAddr, node: &NodeId) -> Result<(), Error> {
    a.ctx.metrics.action("forget");
    info!(cluster = %a.key, via = %via, node = %node.as_str(), "CLUSTER FORGET");
    if let Err(e) = a.driver.forget(via, node).await {
        // Already forgotten, or gossip not settled: re-planned next round.
        warn!(cluster = %a.key, via = %via, "forget failed, will retry: {e}");
    }
    Ok(())
}

/// Deletes a retired member's ValkeyNode (its pod and ConfigMap go with it).
async fn delete_node(a: &Actor<'_>, name: &str) -> Result<(), Error> {
    a.ctx.metrics.action("delete_node");
    info!(cluster = %a.key, node = %name, "deleting retired member");
    match a
        .node_api
        .delete(name, &kube::api::DeleteParams::default())
        .await
    {
        Ok(_) => {}
        // Already gone: deleted by an earlier round whose cache had not caught up.
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::BULK_STEPS_PER_ROUND;

    fn addr(i: usize) -> MemberAddr {
        MemberAddr::new(format!("10.0.{}.{}", i / 250, i % 250), 6379)
    }

    #[test]
    fn at_most_64_creations_or_meets_are_acted_on_per_round() {
        assert_eq!(BULK_STEPS_PER_ROUND, 64);
        let creates: Vec<Step> = (0..1000)
            .map(|i| Step::CreateNode {
                name: format!("c-{i}-0"),
                shard: i,
            })
            .collect();
        let round = this_round(&creates);
        assert_eq!(round.len(), BULK_STEPS_PER_ROUND);
        // The first ones, in plan order: the next round plans the rest from live state.
        assert!(round.iter().zip(&creates).all(|(a, b)| *a == b));
        let meets: Vec<Step> = (1..1000)
            .map(|i| Step::Meet {
                via: addr(0),
                target: addr(i),
            })
            .collect();
        assert_eq!(this_round(&meets).len(), BULK_STEPS_PER_ROUND);
        let few = &meets[..10];
        assert_eq!(this_round(few).len(), 10, "a small plan is acted on whole");
    }

    #[test]
    fn the_cap_is_per_kind_and_leaves_shard_bounded_steps_alone() {
        let mut steps: Vec<Step> = (0..100)
            .map(|i| Step::Forget {
                via: addr(i),
                node: NodeId(format!("gone-{i}")),
            })
            .collect();
        steps.extend((0..100).map(|i| Step::DeleteNode {
            name: format!("c-{i}-1"),
        }));
        steps.extend((0..500).map(|i| Step::AssignSlots {
            member: addr(i),
            ranges: vec![],
        }));
        let round = this_round(&steps);
        let count = |f: fn(&Step) -> bool| round.iter().filter(|s| f(s)).count();
        assert_eq!(count(|s| matches!(s, Step::Forget { .. })), 64);
        assert_eq!(count(|s| matches!(s, Step::DeleteNode { .. })), 64);
        assert_eq!(count(|s| matches!(s, Step::AssignSlots { .. })), 500);
    }
}

/// The Kubernetes calls of the steps that touch only Kubernetes, against the mocked API server
/// (the driver is built but never reached).
#[cfg(test)]
mod api_tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::constants::API_VERSION;
    use crate::controller::testing::{self, ApiServer};

    /// Carries out `steps` for the cluster `shop` in a task; the test answers its requests.
    fn act(steps: Vec<Step>) -> (ApiServer, tokio::task::JoinHandle<Result<(), Error>>) {
        let (ctx, server) = testing::context();
        let task = tokio::spawn(async move {
            let (cluster, spec) = (testing::cluster(Value::Null), testing::member_spec());
            let driver = ctx.driver("team/shop", "unused", None).await;
            let node_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), "team");
            let actor = Actor::new(&ctx, &cluster, &node_api, driver.as_ref(), &spec);
            carry_out(&actor, &steps).await
        });
        (server, task)
    }

    fn nodes_path() -> String {
        format!("/apis/{API_VERSION}/namespaces/team/valkeynodes")
    }

    /// A member is created owned by its cluster with the desired spec in its shard, announced,
    /// then marked Joining.
    #[tokio::test]
    async fn creating_a_member_posts_it_owned_announces_it_then_marks_it_joining() {
        let (mut server, task) = act(vec![Step::CreateNode {
            name: "shop-0-1".into(),
            shard: 0,
        }]);
        let create = server.next().await;
        assert_eq!(create.route(), format!("POST {}", nodes_path()));
        assert_eq!(create.body["metadata"]["name"], "shop-0-1");
        assert_eq!(
            create.body["metadata"]["ownerReferences"][0]["uid"],
            "uid-shop"
        );
        assert_eq!(
            create.body["metadata"]["ownerReferences"][0]["controller"],
            true
        );
        assert_eq!(create.body["spec"]["shard"], 0);
        assert_eq!(create.body["spec"]["image"], "valkey/valkey:9.0.0");
        create.echo();
        let event = server.next().await;
        assert_eq!(event.body["reason"], "CreatingMember");
        assert_eq!(event.body["related"]["kind"], "ValkeyNode");
        assert_eq!(event.body["related"]["name"], "shop-0-1");
        event.echo();
        let joining = server.next().await;
        assert_eq!(
            joining.route(),
            format!("PATCH {}/shop-0-1/status", nodes_path())
        );
        assert_eq!(joining.body, json!({"status": {"lifecycle": "Joining"}}));
        let node = testing::member("shop-0-1", json!({"lifecycle": "Joining"}));
        joining.respond(http::StatusCode::OK, node);
        task.await.unwrap().unwrap();
        assert!(server.idle());
    }

    /// A member already deleted (an earlier round's cache lagged) is not an error.
    #[tokio::test]
    async fn deleting_a_member_that_is_already_gone_succeeds() {
        let (mut server, task) = act(vec![Step::DeleteNode {
            name: "shop-0-2".into(),
        }]);
        let delete = server.next().await;
        assert_eq!(delete.route(), format!("DELETE {}/shop-0-2", nodes_path()));
        delete.not_found();
        task.await.unwrap().unwrap();
        assert!(server.idle());
    }

    /// Retiring marks each member Leaving, with an Event each, in order.
    #[tokio::test]
    async fn retiring_marks_each_member_leaving_with_an_event() {
        let names = vec!["shop-0-1".to_string(), "shop-0-2".to_string()];
        let (mut server, task) = act(vec![Step::MarkLeaving { names }]);
        for name in ["shop-0-1", "shop-0-2"] {
            let leaving = server.next().await;
            assert_eq!(
                leaving.route(),
                format!("PATCH {}/{name}/status", nodes_path())
            );
            assert_eq!(leaving.body, json!({"status": {"lifecycle": "Leaving"}}));
            let node = testing::member(name, json!({"lifecycle": "Leaving"}));
            leaving.respond(http::StatusCode::OK, node);
            let event = server.next().await;
            assert_eq!(
                event.route(),
                "POST /apis/events.k8s.io/v1/namespaces/team/events",
                "an Event of its own, not the first member's series"
            );
            assert_eq!(event.body["reason"], "RetiringMember");
            assert_eq!(event.body["note"], format!("Retiring member {name}"));
            assert_eq!(event.body["related"]["name"], name);
            event.echo();
        }
        task.await.unwrap().unwrap();
        assert!(server.idle());
    }
}
