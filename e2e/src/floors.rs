//! Floors vk-bench compares the operator against: what the operator does for a rolling
//! replacement and for a shard scale-out, done by hand with the operator's own driver
//! ([`FredDriver`]) on real `valkey-server` processes on 127.0.0.1 (no Kubernetes), as fast
//! as the build allows. They need the valkey-server builds only (see [`ValkeyBuild::binary`]).
//!
//! Member settings. The servers run with the settings that matter for these timings as the
//! bench's clusters have them ([`member_conf`]):
//! * `cluster-node-timeout 5000`, `repl-diskless-sync-delay 0` (and `shutdown-on-sigterm
//!   failover`): the operator's defaults ([`operator_defaults`]); the harness sets the same
//!   node timeout. The menu vk-bench publishes ([`MENU_SETTINGS`]) sets the same sync delay
//!   explicitly: without it the servers would wait Valkey's default 5 s before each full sync.
//! * `repl-diskless-sync yes`: Valkey's default; nobody overrides it.
//!
//! Every figure is the value of [`FLOOR_SETTINGS`] read back from a member, in
//! [`RolloutFloor::settings`] and [`MigrateFloor::settings`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fred::prelude::ClientLike;
use futures::future::try_join_all;
use valkey_operator::driver::migrate::KEYS_PER_BATCH;
use valkey_operator::driver::testing::{
    LocalServers, ValkeyBuild, form_cluster, wait_all_known, wait_for_polling,
};
use valkey_operator::driver::{
    ClusterDriver, DriverConfig, FailoverMode, FredDriver, MemberAddr, MigrationState, NodeId,
    SlotMigrationRequest, SlotRange, even_ranges,
};
use valkey_operator::plan::rebalance::{SlotMove, rebalance};
use valkey_operator::resolve::conf::operator_defaults;
use valkey_operator::topology::slots::{count_slots, normalize};

use crate::workload::{MENU_SETTINGS, preload_keys, preloaded_key};

/// Shards of the clusters the bench rolls out and scales out from.
const SHARDS: usize = 3;
/// Shards after the bench's scale-out.
const SCALED_SHARDS: usize = 5;
/// Bound on any one wait; generous, as the machine may be busy.
const TIMEOUT: Duration = Duration::from_secs(300);
/// Longest pause between two polls of a timed wait, so that polling adds at most this much
/// to a floor.
const TIMED_POLL: Duration = Duration::from_millis(20);
/// Pause between polls of an untimed wait (setting up), easier on 2 shared cores.
const SETUP_POLL: Duration = Duration::from_millis(250);

/// One floor at a time: each runs 10 valkey-servers, and two at once on 2 cores starve
/// their cluster buses into false failure reports (`cargo test` runs a binary's tests in
/// parallel).
static ONE_FLOOR_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until the cluster of `members` has settled: every member reports `cluster_state:ok`,
/// knows all of them, flags none as failing or in handshake, and sees the same owner for
/// every slot. A move started before then races gossip: a target that still counts the
/// cluster down answers `CLUSTERDOWN` to `MIGRATE`, and a member that has not heard of the
/// target yet may never take its ownership.
async fn wait_settled(driver: &dyn ClusterDriver, members: &[MemberAddr]) -> anyhow::Result<()> {
    wait_settled_polling(driver, members, SETUP_POLL).await
}

/// [`wait_settled`], asking every `poll`.
async fn wait_settled_polling(
    driver: &dyn ClusterDriver,
    members: &[MemberAddr],
    poll: Duration,
) -> anyhow::Result<()> {
    wait_for_polling("the cluster to settle", TIMEOUT, poll, || async {
        let mut first_view: Option<(MemberAddr, BTreeMap<NodeId, Vec<SlotRange>>)> = None;
        for m in members {
            let info = driver.cluster_info(m).await.map_err(|e| e.to_string())?;
            if !info.state_ok || info.known_nodes as usize != members.len() {
                return Err(format!(
                    "{m}: cluster_state ok={}, knows {} of {}",
                    info.state_ok,
                    info.known_nodes,
                    members.len()
                ));
            }
            let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
            if let Some(n) = nodes
                .iter()
                .find(|n| n.flags.pfail || n.flags.fail || n.flags.handshake)
            {
                return Err(format!("{m} flags {} as {:?}", n.id, n.flags));
            }
            let view: BTreeMap<NodeId, Vec<SlotRange>> = nodes
                .into_iter()
                .filter(|n| !n.slots.is_empty())
                .map(|n| (n.id, normalize(n.slots)))
                .collect();
            match &first_view {
                None => first_view = Some((m.clone(), view)),
                Some((first, seen)) if *seen != view => {
                    return Err(format!("{m} and {first} disagree on slot owners"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    })
    .await?;
    Ok(())
}

/// The settings that decide these timings, read back from a member for the report.
pub const FLOOR_SETTINGS: &[&str] = &[
    "cluster-node-timeout",
    "repl-diskless-sync",
    "repl-diskless-sync-delay",
    "repl-diskless-load",
];

/// Lines appended to every floor server's valkey.conf: the operator's defaults, then the
/// bench menu's settings (a later line wins, as a ValkeyConfig setting wins over a default).
pub fn member_conf(build: ValkeyBuild) -> String {
    // No memory limit here (local processes), so no derived maxmemory: it does not bear on
    // the timings.
    let defaults = operator_defaults(build.version(), None);
    defaults
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .chain(MENU_SETTINGS.iter().copied())
        .map(|(key, value)| format!("{key} {value}\n"))
        .collect()
}

/// [`FLOOR_SETTINGS`] as `member` runs with them.
async fn read_settings(
    driver: &dyn ClusterDriver,
    member: &MemberAddr,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut settings = Vec::new();
    for name in FLOOR_SETTINGS {
        settings.extend(driver.config_get(member, name).await?);
    }
    Ok(settings)
}

/// A driver authenticated as the servers' admin user, as the operator's is.
fn driver_for(servers: &LocalServers) -> FredDriver {
    FredDriver::new(DriverConfig::new(servers.credentials.clone()))
}

/// Node ids of `members`, in order.
async fn ids_of(driver: &dyn ClusterDriver, members: &[MemberAddr]) -> anyhow::Result<Vec<NodeId>> {
    Ok(try_join_all(members.iter().map(|m| driver.my_id(m))).await?)
}

// ---- formation --------------------------------------------------------------------------

/// The formation floor nobody here wrote: `valkey-cli --cluster create` of [`SHARDS`] x 1
/// replica from 6 fresh valkey-servers of `build`, timed from the command's start until the
/// cluster has settled ([`wait_settled`], asked every [`TIMED_POLL`]: every member reports
/// `cluster_state:ok`, knows all six and sees the same slot owners). None when the build has
/// no valkey-cli. A failed attempt is retried once on fresh servers.
pub async fn cli_formation_floor(build: ValkeyBuild) -> anyhow::Result<Option<f64>> {
    let Some(cli) = valkey_cli(build) else {
        return Ok(None);
    };
    let _one = ONE_FLOOR_AT_A_TIME.lock().await;
    let mut errors = Vec::new();
    for attempt in 1..=2 {
        match cli_formation(&cli, build).await {
            Ok(seconds) => return Ok(Some(seconds)),
            Err(e) => errors.push(format!("attempt {attempt}: {e:#}")),
        }
    }
    bail!("valkey-cli --cluster create: {}", errors.join("; "))
}

async fn cli_formation(cli: &PathBuf, build: ValkeyBuild) -> anyhow::Result<f64> {
    let servers = LocalServers::start(build, SHARDS * 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let driver = driver_for(&servers);
    let auth = &servers.credentials;
    let members: Vec<String> = servers.addrs().iter().map(|m| m.to_string()).collect();
    let started = Instant::now();
    let output = tokio::process::Command::new(cli)
        .args(["--no-auth-warning", "--user", &auth.username])
        .args(["--pass", &auth.password, "--cluster", "create"])
        .args(&members)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .await
        .with_context(|| format!("run {}", cli.display()))?;
    if !output.status.success() {
        bail!(
            "failed ({}): {}",
            output.status,
            last_lines(&output.stdout, &output.stderr)
        );
    }
    wait_settled_polling(&driver, &servers.addrs(), TIMED_POLL).await?;
    Ok(started.elapsed().as_secs_f64())
}

// ---- rolling replacement ----------------------------------------------------------------

/// Seconds one shard's replacement took, by step (see [`rollout_shard_floor`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ShardReplacement {
    /// From starting the shard's new servers to its old members stopped: the sum of the
    /// steps below.
    pub seconds: f64,
    /// Starting the new valkey-servers until each accepts connections (the operator's pods).
    pub start: f64,
    /// `CLUSTER MEET` through a member holding slots, until every member knows every other.
    pub introduce: f64,
    /// `CLUSTER REPLICATE` of both new servers to the shard's primary, until both report
    /// their link up and no sync in progress (the operator's `replica_in_sync`).
    pub sync: f64,
    /// `CLUSTER FAILOVER` (coordinated, the operator's mode) on the first new server, until it
    /// reports itself a primary serving the shard's slots.
    pub failover: f64,
    /// `CLUSTER FORGET` of both old members on every remaining member, then both stopped.
    pub retire: f64,
}

/// What [`rollout_shard_floor`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutFloor {
    /// Per shard, in the order they were replaced (shard 0 first).
    pub per_shard: Vec<ShardReplacement>,
    /// Mean of the shards' `seconds`.
    pub mean_per_shard: f64,
    /// From starting shard 0's new servers to shard 2's old members stopped: the sum of the
    /// shards' `seconds` (nothing happens between two shards).
    pub total: f64,
    /// [`FLOOR_SETTINGS`] as the members ran with them.
    pub settings: Vec<(String, String)>,
}

/// The rolling replacement of a 3-shard x 1-replica cluster from Valkey 9.0 to 9.1, shard by
/// shard, with the operator's steps (src/plan/rollout.rs, formation.rs, retirement.rs) and
/// nothing in between: for each shard, two new 9.1 servers are started, introduced, attached
/// as replicas of the shard's primary and waited for in sync; the first takes over by a
/// coordinated failover; the two old members are forgotten by every remaining member and
/// stopped. Forming the 9.0 cluster is not timed.
pub async fn rollout_shard_floor() -> anyhow::Result<RolloutFloor> {
    let _alone = ONE_FLOOR_AT_A_TIME.lock().await;
    let mut old = LocalServers::start_with_conf(
        ValkeyBuild::V9_0,
        SHARDS * 2,
        &member_conf(ValkeyBuild::V9_0),
    )
    .await?;
    let driver = driver_for(&old);
    let formation = form_cluster(&driver, &old.addrs(), SHARDS, TIMEOUT).await?;
    let settings = read_settings(&driver, &old.servers[0].addr).await?;
    let mut live: Vec<(MemberAddr, NodeId)> = formation.primaries.clone();
    live.extend(
        formation
            .replicas
            .iter()
            .map(|(m, id, _)| (m.clone(), id.clone())),
    );
    // Kept until the end: dropping a set stops its servers.
    let mut new_sets = Vec::new();
    let mut per_shard = Vec::new();
    for (shard, range) in even_ranges(SHARDS).into_iter().enumerate() {
        let (primary, primary_id) = formation.primaries[shard].clone();
        let mut stale = vec![(primary.clone(), primary_id.clone())];
        stale.extend(
            formation
                .replicas
                .iter()
                .filter(|(_, _, of)| *of == primary_id)
                .map(|(m, id, _)| (m.clone(), id.clone())),
        );
        let started = Instant::now();
        let fresh = old.start_siblings(ValkeyBuild::V9_1, stale.len()).await?;
        let start = started.elapsed().as_secs_f64();
        let mut times = replace_shard(&driver, &mut live, &stale, &fresh.addrs(), &range).await?;
        let retiring = Instant::now();
        for (member, _) in &stale {
            if let Some(server) = old.servers.iter_mut().find(|s| s.addr == *member) {
                server.kill();
            }
        }
        times.retire += retiring.elapsed().as_secs_f64();
        times.start = start;
        times.seconds = started.elapsed().as_secs_f64();
        per_shard.push(times);
        new_sets.push(fresh);
    }
    let total: f64 = per_shard.iter().map(|s| s.seconds).sum();
    Ok(RolloutFloor {
        mean_per_shard: total / per_shard.len() as f64,
        per_shard,
        total,
        settings,
    })
}

/// One shard's replacement once its new servers run: introduce, replicate and sync, fail
/// over, forget the old members. `live` (every member with its id) loses `stale` and gains
/// the new servers. The caller stops the old processes and fills in `start` and `seconds`.
async fn replace_shard(
    driver: &dyn ClusterDriver,
    live: &mut Vec<(MemberAddr, NodeId)>,
    stale: &[(MemberAddr, NodeId)],
    fresh: &[MemberAddr],
    range: &SlotRange,
) -> anyhow::Result<ShardReplacement> {
    let (primary, primary_id) = &stale[0];
    let step = Instant::now();
    let joined = introduce(driver, live, primary, fresh, TIMED_POLL).await?;
    let introduce = step.elapsed().as_secs_f64();
    let step = Instant::now();
    attach_replicas(driver, fresh, primary_id, TIMED_POLL).await?;
    let sync = step.elapsed().as_secs_f64();
    let step = Instant::now();
    take_over(driver, &fresh[0], range).await?;
    let failover = step.elapsed().as_secs_f64();
    let step = Instant::now();
    live.retain(|(m, _)| !stale.iter().any(|(s, _)| s == m));
    live.extend(joined);
    forget_everywhere(driver, live, stale).await?;
    Ok(ShardReplacement {
        seconds: 0.0,
        start: 0.0,
        introduce,
        sync,
        failover,
        retire: step.elapsed().as_secs_f64(),
    })
}

/// `CLUSTER MEET` of each newcomer through `seed` (a member holding slots, as the operator
/// picks), then waits until every member knows every other. Returns the newcomers with ids.
async fn introduce(
    driver: &dyn ClusterDriver,
    members: &[(MemberAddr, NodeId)],
    seed: &MemberAddr,
    newcomers: &[MemberAddr],
    poll: Duration,
) -> anyhow::Result<Vec<(MemberAddr, NodeId)>> {
    let new_ids = ids_of(driver, newcomers).await?;
    for m in newcomers {
        driver
            .meet(seed, &m.host, m.port, Some(m.port + 10000))
            .await?;
    }
    let joined: Vec<(MemberAddr, NodeId)> = newcomers.iter().cloned().zip(new_ids).collect();
    let (addrs, ids): (Vec<MemberAddr>, Vec<NodeId>) =
        members.iter().chain(&joined).cloned().unzip();
    wait_all_known(driver, &addrs, &ids, TIMEOUT, poll).await?;
    Ok(joined)
}

/// `CLUSTER REPLICATE primary` on each of `replicas`, then waits until each is in sync as the
/// operator's observation sees it: link to its primary up and no sync in progress.
async fn attach_replicas(
    driver: &dyn ClusterDriver,
    replicas: &[MemberAddr],
    primary: &NodeId,
    poll: Duration,
) -> anyhow::Result<()> {
    for m in replicas {
        driver.replicate(m, primary).await?;
    }
    wait_for_polling("the new replicas to be in sync", TIMEOUT, poll, || async {
        for m in replicas {
            let repl = driver
                .replication_info(m)
                .await
                .map_err(|e| e.to_string())?;
            let in_sync = repl
                .primary_link
                .as_ref()
                .is_some_and(|l| l.link_up && !l.sync_in_progress);
            if !in_sync {
                return Err(format!("{m}: {:?}", repl.primary_link));
            }
        }
        Ok(())
    })
    .await?;
    Ok(())
}

/// Coordinated `CLUSTER FAILOVER` on `replica`, until it reports itself a primary serving
/// exactly `range`.
async fn take_over(
    driver: &dyn ClusterDriver,
    replica: &MemberAddr,
    range: &SlotRange,
) -> anyhow::Result<()> {
    driver.failover(replica, FailoverMode::Default).await?;
    let what = format!("{replica} to serve slots {range:?}");
    wait_for_polling(&what, TIMEOUT, TIMED_POLL, || async {
        let nodes = driver
            .cluster_nodes(replica)
            .await
            .map_err(|e| e.to_string())?;
        let me = nodes
            .iter()
            .find(|n| n.flags.myself)
            .ok_or("no myself line")?;
        if me.primary_id.is_none() && normalize(me.slots.clone()) == [range.clone()] {
            Ok(())
        } else {
            Err(format!(
                "primary of {:?}, slots {:?}",
                me.primary_id, me.slots
            ))
        }
    })
    .await?;
    Ok(())
}

/// `CLUSTER FORGET` of every `leaving` node on every remaining member, each retried until
/// accepted: a replica refuses to forget the primary it still follows until gossip has
/// moved it to the new one (the operator re-plans such a refusal the same way).
async fn forget_everywhere(
    driver: &dyn ClusterDriver,
    remaining: &[(MemberAddr, NodeId)],
    leaving: &[(MemberAddr, NodeId)],
) -> anyhow::Result<()> {
    for (member, _) in remaining {
        for (_, node) in leaving {
            let what = format!("{member} to forget {node}");
            wait_for_polling(&what, TIMEOUT, TIMED_POLL, || driver.forget(member, node)).await?;
        }
    }
    Ok(())
}

// ---- slot migration ---------------------------------------------------------------------

/// A key-by-key move of the same slots (see [`migrate_slots_floor`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KeyByKeyFloor {
    /// All `valkey-cli --cluster reshard` runs, one per (source, target) pair in turn, process
    /// start and its cluster check included.
    pub seconds: f64,
    pub slots_moved: usize,
    /// Keys in the slots the new shards own afterwards.
    pub keys_moved: usize,
}

/// What [`migrate_slots_floor`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrateFloor {
    /// From issuing the `CLUSTER MIGRATESLOTS` jobs to every moved slot owned by its target
    /// on every member (5 primaries, 5 replicas) and no job in flight on any of them.
    pub seconds: f64,
    /// Slots the operator's planner moves for 3 -> 5 shards (6553).
    pub slots_moved: usize,
    /// Keys in those slots.
    pub keys_moved: usize,
    /// `valkey-cli --cluster reshard` moving as many slots between the same shards, on a
    /// fresh cluster with the same keys; `None` when the build has no `valkey-cli`, an error
    /// (why, with valkey-cli's own words) when it failed on [`RESHARD_ATTEMPTS`] fresh
    /// clusters: the bench reports it as not measured, the test fails on it.
    pub key_by_key: Option<Result<KeyByKeyFloor, String>>,
    /// [`FLOOR_SETTINGS`] as the members ran with them.
    pub settings: Vec<(String, String)>,
    /// Why earlier attempts stalled (jobs done, a member still seeing an old owner after
    /// [`MIGRATE_STALL`]); empty when the first attempt finished.
    pub stalled_attempts: Vec<String>,
}

/// Fresh clusters the atomic floor is tried on before it counts as failed.
pub const MIGRATE_ATTEMPTS: usize = 2;
/// An attempt whose moves are not seen by every member after this long is stuck, not slow:
/// the moves take a fraction of a second, and once (a fresh clone's `make test`, on a loaded
/// machine) one member kept the old owner for the whole 300 s.
const MIGRATE_STALL: Duration = Duration::from_secs(90);

/// The slot-move phase of the bench's scale-out from 3 to 5 shards x 1 replica (Valkey 9.1,
/// as the bench's scale-out runs) holding `keys` keys of [`preload_keys`]' shape: the exact
/// moves of the operator's planner ([`rebalance`]), each source's in one atomic
/// `CLUSTER MIGRATESLOTS`, all sources at once (as the operator issues them in one round).
/// The new shards (primary and in-sync replica each, no slots) and the keys are set up
/// untimed.
pub async fn migrate_slots_floor(keys: usize) -> anyhow::Result<MigrateFloor> {
    let _alone = ONE_FLOOR_AT_A_TIME.lock().await;
    let mut stalled_attempts = Vec::new();
    let (seconds, moves, settings) = loop {
        let cluster = ScaledOut::start(keys).await?;
        let moves = cluster.planned_moves();
        let settings = read_settings(&cluster.driver, &cluster.primaries[0].0).await?;
        let started = Instant::now();
        match cluster.migrate_atomically(&moves, MIGRATE_STALL).await {
            Ok(()) => break (started.elapsed().as_secs_f64(), moves, settings),
            Err(e) if stalled_attempts.len() + 1 < MIGRATE_ATTEMPTS => {
                stalled_attempts.push(format!("{e:#}"));
            }
            Err(e) => return Err(e.context(format!("earlier attempts: {stalled_attempts:?}"))),
        }
    };
    let slots_moved = moves.iter().map(SlotMove::slot_count).sum();
    let moved_ranges: Vec<SlotRange> = moves.iter().flat_map(|m| m.ranges.clone()).collect();
    let keys_moved = keys_in(keys, &moved_ranges);
    let key_by_key = match valkey_cli(ValkeyBuild::V9_1) {
        Some(cli) => Some(reshard_floor_attempts(&cli, keys).await),
        None => None,
    };
    Ok(MigrateFloor {
        seconds,
        slots_moved,
        keys_moved,
        key_by_key,
        settings,
        stalled_attempts,
    })
}

/// How many of the keys `pre:0`..`pre:<count>` hash to a slot in `ranges`.
fn keys_in(count: usize, ranges: &[SlotRange]) -> usize {
    (0..count)
        .map(|i| fred::util::redis_keyslot(preloaded_key(i).as_bytes()))
        .filter(|slot| ranges.iter().any(|r| r.contains(slot)))
        .count()
}

/// The `valkey-cli` next to `build`'s valkey-server, if there is one.
fn valkey_cli(build: ValkeyBuild) -> Option<PathBuf> {
    let cli = build.binary().ok()?.with_file_name("valkey-cli");
    cli.is_file().then_some(cli)
}

/// 3 shards x 1 replica holding keys, plus 2 shards (primary and in-sync replica) without
/// slots: the cluster just before the scale-out's slot moves.
struct ScaledOut {
    servers: LocalServers,
    driver: FredDriver,
    /// Shard primaries with their ids, shard order (the last two own no slots).
    primaries: Vec<(MemberAddr, NodeId)>,
}

impl ScaledOut {
    async fn start(keys: usize) -> anyhow::Result<ScaledOut> {
        let servers = LocalServers::start_with_conf(
            ValkeyBuild::V9_1,
            SCALED_SHARDS * 2,
            &member_conf(ValkeyBuild::V9_1),
        )
        .await?;
        let driver = driver_for(&servers);
        let addrs = servers.addrs();
        let (formed, added) = addrs.split_at(SHARDS * 2);
        let formation = form_cluster(&driver, formed, SHARDS, TIMEOUT).await?;
        let mut members = formation.primaries.clone();
        members.extend(
            formation
                .replicas
                .iter()
                .map(|(m, id, _)| (m.clone(), id.clone())),
        );
        let seed = &formed[0];
        let joined = introduce(&driver, &members, seed, added, SETUP_POLL).await?;
        let (new_primaries, new_replicas) = joined.split_at(SCALED_SHARDS - SHARDS);
        for ((replica, _), (_, primary_id)) in new_replicas.iter().zip(new_primaries) {
            attach_replicas(
                &driver,
                std::slice::from_ref(replica),
                primary_id,
                SETUP_POLL,
            )
            .await?;
        }
        let mut primaries = formation.primaries;
        primaries.extend(new_primaries.iter().cloned());
        let valkey = servers.cluster_client().await?;
        preload_keys(&valkey, keys).await?;
        let _ = valkey.quit().await;
        wait_settled(&driver, &servers.addrs()).await?;
        Ok(ScaledOut {
            servers,
            driver,
            primaries,
        })
    }

    /// The operator planner's moves from the even 3-shard layout to 5 shards.
    fn planned_moves(&self) -> Vec<SlotMove> {
        let owned: BTreeMap<usize, Vec<SlotRange>> = even_ranges(SHARDS)
            .into_iter()
            .enumerate()
            .map(|(shard, range)| (shard, vec![range]))
            .collect();
        rebalance(&owned, SCALED_SHARDS)
    }

    /// One `CLUSTER MIGRATESLOTS` per source (a group per target), all sources at once, then
    /// waits until the moves are done everywhere.
    async fn migrate_atomically(
        &self,
        moves: &[SlotMove],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let mut by_source: BTreeMap<usize, Vec<SlotMigrationRequest>> = BTreeMap::new();
        for m in moves {
            by_source
                .entry(m.from)
                .or_default()
                .push(SlotMigrationRequest {
                    ranges: m.ranges.clone(),
                    target: self.primaries[m.to].1.clone(),
                });
        }
        try_join_all(by_source.iter().map(|(source, requests)| {
            self.driver
                .migrate_slots(&self.primaries[*source].0, requests)
        }))
        .await?;
        self.wait_moved(moves, timeout).await
    }

    /// Waits until every member sees each moved range owned by its target and no member has
    /// a migration job in flight; fails at once on a failed or cancelled job.
    async fn wait_moved(&self, moves: &[SlotMove], timeout: Duration) -> anyhow::Result<()> {
        let members = self.servers.addrs();
        let failure = wait_for_polling("the slot moves to finish", timeout, TIMED_POLL, || async {
            // Every member's jobs first: a stall then says which job hangs, and where.
            let mut running = Vec::new();
            for member in &members {
                for job in self
                    .driver
                    .slot_migrations(member)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    match job.state {
                        MigrationState::InProgress(state) => running.push(format!(
                            "{member}: job {} {:?} {:?} {state} (last ack {}, last update {})",
                            job.name,
                            job.operation,
                            job.slot_ranges,
                            job.last_ack_time,
                            job.last_update_time
                        )),
                        MigrationState::Success => {}
                        failed => return Ok(Some(format!("{member}: {failed:?} {}", job.message))),
                    }
                }
            }
            if !running.is_empty() {
                return Err(format!("jobs in flight: {running:?}"));
            }
            for member in &members {
                let nodes = self
                    .driver
                    .cluster_nodes(member)
                    .await
                    .map_err(|e| e.to_string())?;
                for m in moves {
                    let target = &self.primaries[m.to].1;
                    let owned = nodes.iter().find(|n| &n.id == target).map(|n| &n.slots);
                    let held = owned.is_some_and(|slots| {
                        m.ranges.iter().all(|r| {
                            slots
                                .iter()
                                .any(|s| s.contains(r.start()) && s.contains(r.end()))
                        })
                    });
                    if !held {
                        // Who this member thinks owns the range, with the epochs it knows.
                        let first = m.ranges.first().map_or(0, |r| *r.start());
                        let seen = nodes
                            .iter()
                            .filter(|n| {
                                n.id == *target || n.slots.iter().any(|s| s.contains(&first))
                            })
                            .map(|n| {
                                format!("{} epoch {} slots {:?}", n.id, n.config_epoch, n.slots)
                            })
                            .collect::<Vec<_>>();
                        return Err(format!(
                            "{member}: shard {} does not own {:?} yet (its view: {seen:?})",
                            m.to, m.ranges
                        ));
                    }
                }
            }
            Ok(None)
        })
        .await?;
        match failure {
            Some(why) => bail!("a slot migration failed: {why}"),
            None => Ok(()),
        }
    }
}

/// Fresh clusters [`reshard_floor`] is tried on before the key-by-key floor counts as not
/// measured.
pub const RESHARD_ATTEMPTS: usize = 2;

/// [`reshard_floor`], on a fresh cluster each time, until one attempt completes; the errors
/// of every attempt otherwise.
async fn reshard_floor_attempts(cli: &PathBuf, keys: usize) -> Result<KeyByKeyFloor, String> {
    let mut errors = Vec::new();
    for attempt in 1..=RESHARD_ATTEMPTS {
        match reshard_floor(cli, keys).await {
            Ok(floor) => return Ok(floor),
            Err(e) => errors.push(format!("attempt {attempt}: {e:#}")),
        }
    }
    Err(errors.join("; "))
}

/// The key-by-key floor: on a fresh [`ScaledOut`] with the same keys, `valkey-cli --cluster
/// reshard` moves as many slots between the same shards as the planner does, one (source,
/// target) pair after the other (a reshard refuses to start while another leaves slots open),
/// [`KEYS_PER_BATCH`] keys per `MIGRATE` as the operator's key-by-key moves. valkey-cli picks
/// which of the source's slots go (its lowest; the planner gives the highest), so the keys
/// moved are counted from the slots the new shards own afterwards.
///
/// A reshard starts with valkey-cli's own cluster check and gives up when the members do not
/// yet agree on every slot's owner (gossip after the set-up or the previous pair's moves, slow
/// on a busy machine), so each pair waits, untimed, until `--cluster check` passes.
async fn reshard_floor(cli: &PathBuf, keys: usize) -> anyhow::Result<KeyByKeyFloor> {
    let cluster = ScaledOut::start(keys).await?;
    let moves = cluster.planned_moves();
    let seed = cluster.primaries[0].0.to_string();
    let auth = cluster.servers.credentials.clone();
    let cli_run = |args: Vec<String>| {
        let mut command = tokio::process::Command::new(cli);
        command
            .args(args)
            .args(["--no-auth-warning", "--user", &auth.username])
            .args(["--pass", &auth.password]);
        command
    };
    let mut seconds = 0.0;
    for m in &moves {
        wait_cluster_check(&cli_run, &seed).await?;
        wait_settled(&cluster.driver, &cluster.servers.addrs()).await?;
        let started = Instant::now();
        let output = cli_run(vec![
            "--cluster".into(),
            "reshard".into(),
            seed.clone(),
            "--cluster-from".into(),
            cluster.primaries[m.from].1.to_string(),
            "--cluster-to".into(),
            cluster.primaries[m.to].1.to_string(),
            "--cluster-slots".into(),
            m.slot_count().to_string(),
            "--cluster-pipeline".into(),
            KEYS_PER_BATCH.to_string(),
            "--cluster-yes".into(),
        ])
        .output()
        .await
        .with_context(|| format!("run {}", cli.display()))?;
        seconds += started.elapsed().as_secs_f64();
        if !output.status.success() {
            bail!(
                "{} --cluster reshard of shard {} to {} failed ({}): {}",
                cli.display(),
                m.from,
                m.to,
                output.status,
                last_lines(&output.stdout, &output.stderr)
            );
        }
    }
    let nodes = cluster
        .driver
        .cluster_nodes(&cluster.primaries[0].0)
        .await?;
    let new_shards = &cluster.primaries[SHARDS..];
    let owned: Vec<SlotRange> = nodes
        .iter()
        .filter(|n| new_shards.iter().any(|(_, id)| *id == n.id))
        .flat_map(|n| n.slots.clone())
        .collect();
    Ok(KeyByKeyFloor {
        seconds,
        slots_moved: count_slots(owned.iter().cloned()),
        keys_moved: keys_in(keys, &owned),
    })
}

/// Waits until `valkey-cli --cluster check` of the cluster `seed` belongs to passes: every
/// member agrees on every slot's owner, no slot is open, all 16384 are covered.
async fn wait_cluster_check(
    cli_run: &impl Fn(Vec<String>) -> tokio::process::Command,
    seed: &str,
) -> anyhow::Result<()> {
    let what = "valkey-cli --cluster check to pass";
    wait_for_polling(what, TIMEOUT, SETUP_POLL, || async {
        let output = cli_run(vec!["--cluster".into(), "check".into(), seed.into()])
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(last_lines(&output.stdout, &output.stderr))
        }
    })
    .await?;
    Ok(())
}

/// The last lines valkey-cli printed (it reports its errors on stdout), for an error message.
fn last_lines(stdout: &[u8], stderr: &[u8]) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr)
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(4)..].join(" | ")
}
