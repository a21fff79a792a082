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
    pub fn naming(self, observed: &[Observed]) -> Self {
        self.with_names(
            observed
                .iter()
                .filter_map(|o| Some((o.member.addr.clone()?, o.member.name.clone()))),
        )
    }

    /// The same actor, knowing the ValkeyNode at each address of `names`.
    fn with_names(mut self, names: impl IntoIterator<Item = (MemberAddr, String)>) -> Self {
        self.names = names.into_iter().collect();
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

/// The Valkey calls of the steps that reach Valkey, against a [`FakeDriver`] (which records
/// them) and the mocked API server (which takes their Events): which command goes to which
/// member, in which order, and what a failed command does to the round.
///
/// [`FakeDriver`]: crate::driver::fake::FakeDriver
#[cfg(test)]
mod driver_tests {
    use std::sync::Arc;

    use serde_json::Value;

    use super::*;
    use crate::controller::testing::{self, ApiServer};
    use crate::driver::DriverErrorKind;
    use crate::driver::fake::FakeDriver;

    const EVENTS: &str = "POST /apis/events.k8s.io/v1/namespaces/team/events";

    fn member(n: u8) -> MemberAddr {
        MemberAddr::new(format!("10.0.0.{n}"), 6379)
    }

    fn id(name: &str) -> NodeId {
        NodeId::from(name)
    }

    fn refused(why: &str) -> DriverErrorKind {
        DriverErrorKind::Server(why.into())
    }

    /// Carries out `steps` for the cluster `shop` through `driver` in a task; the test answers
    /// its requests to the API server.
    fn act(
        driver: &Arc<FakeDriver>,
        steps: Vec<Step>,
    ) -> (ApiServer, tokio::task::JoinHandle<Result<(), Error>>) {
        let (ctx, server) = testing::context();
        let driver = driver.clone();
        let task = tokio::spawn(async move {
            let (cluster, spec) = (testing::cluster(Value::Null), testing::member_spec());
            let node_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), "team");
            let actor = Actor::new(&ctx, &cluster, &node_api, driver.as_ref(), &spec);
            carry_out(&actor, &steps).await
        });
        (server, task)
    }

    /// Takes the next request, which must be an Event on the cluster, and returns its body.
    async fn event(server: &mut ApiServer) -> Value {
        let call = server.next().await;
        assert_eq!(call.route(), EVENTS);
        assert_eq!(call.body["regarding"]["name"], "shop");
        let body = call.body.clone();
        call.echo();
        body
    }

    /// The note of an Event body.
    fn note(event: &Value) -> &str {
        event["note"].as_str().unwrap_or_default()
    }

    /// Forming steps go to the member each names, in plan order, and touch no Kubernetes
    /// object.
    #[tokio::test]
    async fn forming_steps_reach_the_members_they_name_in_plan_order() {
        let fake = Arc::new(FakeDriver::default());
        let steps = vec![
            Step::SetConfigEpoch {
                member: member(1),
                epoch: 3,
            },
            Step::Meet {
                via: member(1),
                target: member(2),
            },
            Step::AssignSlots {
                member: member(1),
                ranges: vec![0..=5460, 10000..=10000],
            },
            Step::Replicate {
                member: member(2),
                primary: id("id-a"),
            },
            Step::Forget {
                via: member(1),
                node: id("id-gone"),
            },
            Step::CloseSlots {
                member: member(1),
                slots: vec![5, 9],
            },
        ];
        let (mut server, task) = act(&fake, steps);
        task.await.unwrap().unwrap();
        assert_eq!(
            fake.calls(),
            [
                "set_config_epoch 10.0.0.1:6379 3".to_string(),
                format!("meet 10.0.0.1:6379 10.0.0.2 6379 {CLUSTER_BUS_PORT}"),
                "add_slots_range 10.0.0.1:6379 0-5460 10000".into(),
                "replicate 10.0.0.2:6379 id-a".into(),
                "forget 10.0.0.1:6379 id-gone".into(),
                "set_slot 10.0.0.1:6379 5 STABLE".into(),
                "set_slot 10.0.0.1:6379 9 STABLE".into(),
            ]
        );
        assert!(server.idle());
    }

    /// A replicate or forget that fails (gossip has not caught up) is planned again next
    /// round; the steps after it are still carried out.
    #[tokio::test]
    async fn a_failed_replicate_or_forget_does_not_end_the_round() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail("replicate 10.0.0.2:6379", refused("ERR Unknown node id-a"));
        fake.fail("forget 10.0.0.1:6379", refused("ERR Unknown node id-gone"));
        let steps = vec![
            Step::Replicate {
                member: member(2),
                primary: id("id-a"),
            },
            Step::Forget {
                via: member(1),
                node: id("id-gone"),
            },
            Step::Meet {
                via: member(1),
                target: member(3),
            },
        ];
        let (mut server, task) = act(&fake, steps);
        task.await.unwrap().unwrap();
        let calls = fake.calls();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(
            calls[2].starts_with("meet 10.0.0.1:6379 10.0.0.3 "),
            "{calls:?}"
        );
        assert!(server.idle());
    }

    /// A failed meet ends the round: what follows it is planned again from what Valkey then
    /// reports.
    #[tokio::test]
    async fn a_failed_meet_ends_the_round_with_the_members_error() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail("meet 10.0.0.1:6379", DriverErrorKind::Io("reset".into()));
        let steps = vec![
            Step::Meet {
                via: member(1),
                target: member(2),
            },
            Step::AssignSlots {
                member: member(1),
                ranges: vec![0..=16383],
            },
        ];
        let (mut server, task) = act(&fake, steps);
        let error = task.await.unwrap().unwrap_err();
        let Error::Driver(e) = error else {
            panic!("not a driver error: {error:?}");
        };
        assert_eq!((e.member, e.command.as_str()), (member(1), "meet"));
        assert_eq!(fake.calls().len(), 1, "{:?}", fake.calls());
        assert!(server.idle());
    }

    /// A coordinated failover is sent to the replica and announced with an Event naming the
    /// shard and the new primary.
    #[tokio::test]
    async fn a_coordinated_failover_is_announced_with_an_event() {
        let fake = Arc::new(FakeDriver::default());
        let (mut server, task) = act(
            &fake,
            vec![Step::Failover {
                member: member(2),
                shard: 1,
                mode: FailoverMode::Default,
            }],
        );
        let event = event(&mut server).await;
        task.await.unwrap().unwrap();
        assert_eq!(fake.calls(), ["failover 10.0.0.2:6379 Default"]);
        assert_eq!(event["reason"], "Failover");
        assert_eq!(event["type"], "Normal");
        assert!(note(&event).contains("10.0.0.2:6379"), "{event}");
        assert!(note(&event).to_lowercase().contains("shard 1"), "{event}");
        assert!(server.idle());
    }

    /// Failovers of two shards in one round are two Events, each naming its member's
    /// ValkeyNode as related: kube's recorder would otherwise fold the second into the first
    /// one's series, keeping the first note (the second shard's failover unseen).
    #[tokio::test]
    async fn failovers_of_two_shards_are_two_events_each_about_its_member() {
        let fake = Arc::new(FakeDriver::default());
        let (ctx, mut server) = testing::context();
        let driver = fake.clone();
        let task = tokio::spawn(async move {
            let (cluster, spec) = (testing::cluster(Value::Null), testing::member_spec());
            let node_api: Api<ValkeyNode> = Api::namespaced(ctx.client.clone(), "team");
            let names = [
                (member(2), "shop-0-1".into()),
                (member(4), "shop-1-1".into()),
            ];
            let actor =
                Actor::new(&ctx, &cluster, &node_api, driver.as_ref(), &spec).with_names(names);
            let failover = |member, shard| Step::Failover {
                member,
                shard,
                mode: FailoverMode::Default,
            };
            carry_out(&actor, &[failover(member(2), 0), failover(member(4), 1)]).await
        });
        for (name, shard) in [("shop-0-1", "Shard 0"), ("shop-1-1", "Shard 1")] {
            let event = event(&mut server).await;
            assert_eq!(event["reason"], "Failover");
            assert_eq!(event["related"]["kind"], "ValkeyNode");
            assert_eq!(event["related"]["name"], name);
            assert!(note(&event).starts_with(shard), "{event}");
        }
        task.await.unwrap().unwrap();
        assert_eq!(
            fake.calls(),
            [
                "failover 10.0.0.2:6379 Default",
                "failover 10.0.0.4:6379 Default"
            ]
        );
        assert!(server.idle());
    }

    /// A forced failover that fails (Valkey's own failover won the race) is re-planned, not an
    /// error, and announces nothing.
    #[tokio::test]
    async fn a_failed_forced_failover_is_tolerated_without_an_event() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail(
            "failover 10.0.0.2:6379 Force",
            refused("ERR You should send CLUSTER FAILOVER to a replica"),
        );
        let steps = vec![
            Step::Failover {
                member: member(2),
                shard: 0,
                mode: FailoverMode::Force,
            },
            Step::Meet {
                via: member(1),
                target: member(3),
            },
        ];
        let (mut server, task) = act(&fake, steps);
        task.await.unwrap().unwrap();
        let calls = fake.calls();
        assert_eq!(calls[0], "failover 10.0.0.2:6379 Force");
        assert!(calls[1].starts_with("meet 10.0.0.1:6379"), "{calls:?}");
        assert!(server.idle(), "no Event for a failover that did not happen");
    }

    /// A coordinated failover that fails ends the round with the error, and announces nothing.
    #[tokio::test]
    async fn a_failed_coordinated_failover_ends_the_round_without_an_event() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail(
            "failover 10.0.0.2:6379",
            DriverErrorKind::Timeout(std::time::Duration::from_secs(10)),
        );
        let steps = vec![
            Step::Failover {
                member: member(2),
                shard: 0,
                mode: FailoverMode::Default,
            },
            Step::Meet {
                via: member(1),
                target: member(3),
            },
        ];
        let (mut server, task) = act(&fake, steps);
        let error = task.await.unwrap().unwrap_err();
        assert!(
            matches!(&error, Error::Driver(e) if e.command == "failover"),
            "{error:?}"
        );
        assert_eq!(fake.calls(), ["failover 10.0.0.2:6379 Default"]);
        assert!(server.idle());
    }

    /// The move of slots from 10.0.0.1 (id-a) to 10.0.0.2 (id-b) and 10.0.0.3 (id-c).
    fn move_slots(method: MoveMethod, to_b: Vec<SlotRange>, to_c: Vec<SlotRange>) -> Step {
        Step::MoveSlots {
            source: member(1),
            source_id: id("id-a"),
            method,
            targets: vec![
                MoveTarget {
                    member: member(2),
                    id: id("id-b"),
                    ranges: to_b,
                },
                MoveTarget {
                    member: member(3),
                    id: id("id-c"),
                    ranges: to_c,
                },
            ],
            primaries: vec![member(1), member(2), member(3)],
        }
    }

    /// An atomic move is one `CLUSTER MIGRATESLOTS` on the source naming every target, then
    /// an Event.
    #[tokio::test]
    async fn an_atomic_move_starts_one_migration_on_the_source_and_announces_it() {
        let fake = Arc::new(FakeDriver::default());
        let step = move_slots(MoveMethod::Atomic, vec![0..=99], vec![100..=100]);
        let (mut server, task) = act(&fake, vec![step]);
        let event = event(&mut server).await;
        task.await.unwrap().unwrap();
        assert_eq!(
            fake.calls(),
            ["migrate_slots 10.0.0.1:6379 0-99 to id-b; 100 to id-c"]
        );
        assert_eq!(event["reason"], "MigratingSlots");
        assert!(note(&event).contains("10.0.0.1:6379"), "{event}");
        assert!(server.idle());
    }

    /// An atomic move the source refuses ends the round and announces nothing.
    #[tokio::test]
    async fn a_refused_atomic_move_ends_the_round_without_an_event() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail("migrate_slots 10.0.0.1:6379", refused("ERR busy"));
        let step = move_slots(MoveMethod::Atomic, vec![0..=99], vec![100..=100]);
        let (mut server, task) = act(&fake, vec![step]);
        let error = task.await.unwrap().unwrap_err();
        assert!(matches!(error, Error::Driver(_)), "{error:?}");
        assert!(server.idle());
    }

    /// Key by key, per slot: the target imports, the source migrates, the keys go over in
    /// batches until none is left, then the target, the source and every other primary are
    /// told the new owner.
    #[tokio::test]
    async fn a_key_by_key_move_opens_moves_and_announces_each_slot() {
        let fake = Arc::new(FakeDriver::default());
        fake.hold_keys(&member(1), 7, &["k1", "k2"]);
        let step = move_slots(MoveMethod::Keys, vec![7..=7], vec![8..=8]);
        let (mut server, task) = act(&fake, vec![step]);
        let event = event(&mut server).await;
        task.await.unwrap().unwrap();
        let slot_7 = [
            "set_slot 10.0.0.2:6379 7 IMPORTING id-a",
            "set_slot 10.0.0.1:6379 7 MIGRATING id-b",
            "keys_in_slot 10.0.0.1:6379 7 200",
            "migrate_keys 10.0.0.1:6379 10.0.0.2:6379 k1,k2 REPLACE",
            "keys_in_slot 10.0.0.1:6379 7 200",
            "set_slot 10.0.0.2:6379 7 NODE id-b",
            "set_slot 10.0.0.1:6379 7 NODE id-b",
            "set_slot 10.0.0.3:6379 7 NODE id-b",
        ];
        let slot_8 = [
            "set_slot 10.0.0.3:6379 8 IMPORTING id-a",
            "set_slot 10.0.0.1:6379 8 MIGRATING id-c",
            "keys_in_slot 10.0.0.1:6379 8 200",
            "set_slot 10.0.0.3:6379 8 NODE id-c",
            "set_slot 10.0.0.1:6379 8 NODE id-c",
            "set_slot 10.0.0.2:6379 8 NODE id-c",
        ];
        assert_eq!(fake.calls(), [&slot_7[..], &slot_8[..]].concat());
        assert_eq!(event["reason"], "MigratingSlots");
        assert!(note(&event).contains("10.0.0.1:6379"), "{event}");
        assert!(server.idle());
    }

    /// A key-by-key move cut short after the target took the slot is finished by telling the
    /// owner to everybody, without migrating again.
    #[tokio::test]
    async fn a_key_by_key_move_cut_short_is_finished_by_announcing_the_owner() {
        let fake = Arc::new(FakeDriver::default());
        fake.fail(
            "set_slot 10.0.0.2:6379 7 IMPORTING",
            refused("ERR I'm already the owner of hash slot 7"),
        );
        let step = move_slots(MoveMethod::Keys, vec![7..=7], vec![]);
        let (mut server, task) = act(&fake, vec![step]);
        event(&mut server).await;
        task.await.unwrap().unwrap();
        assert_eq!(
            fake.calls(),
            [
                "set_slot 10.0.0.2:6379 7 IMPORTING id-a",
                "set_slot 10.0.0.2:6379 7 NODE id-b",
                "set_slot 10.0.0.1:6379 7 NODE id-b",
                "set_slot 10.0.0.3:6379 7 NODE id-b",
            ]
        );
        assert!(server.idle());
    }

    /// One round moves at most its share of slots key by key; the rest is planned again.
    #[tokio::test]
    async fn a_key_by_key_move_stops_after_its_share_of_slots() {
        let fake = Arc::new(FakeDriver::default());
        let step = move_slots(MoveMethod::Keys, vec![0..=199], vec![200..=399]);
        let (mut server, task) = act(&fake, vec![step]);
        event(&mut server).await;
        task.await.unwrap().unwrap();
        let imports: Vec<String> = fake
            .calls()
            .into_iter()
            .filter(|c| c.contains(" IMPORTING "))
            .collect();
        assert_eq!(imports.len(), KEY_MOVE_SLOTS_PER_ROUND);
        let last = format!("set_slot 10.0.0.3:6379 {} IMPORTING id-a", 200 + 55);
        assert_eq!(imports.last(), Some(&last));
        assert!(server.idle());
    }

    /// A stalled atomic migration is cancelled on its source, with an Event naming it.
    #[tokio::test]
    async fn a_stalled_migration_is_cancelled_on_its_source_and_announced() {
        let fake = Arc::new(FakeDriver::default());
        let (mut server, task) = act(
            &fake,
            vec![Step::CancelSlotMigrations { member: member(1) }],
        );
        let event = event(&mut server).await;
        task.await.unwrap().unwrap();
        assert_eq!(fake.calls(), ["cancel_slot_migrations 10.0.0.1:6379"]);
        assert_eq!(event["reason"], "SlotMigrationCancelled");
        assert!(note(&event).contains("10.0.0.1:6379"), "{event}");
        assert!(server.idle());
    }
}
