//! The cluster driver against real `valkey-server` processes (9.0 and 9.1 builds).
//!
//! Binaries: `VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1`, else the cache filled by
//! `e2e/tools/install.sh`. A missing binary fails the test with instructions.
//! Set `VALKEY_DRIVER_CAPTURE_FIXTURES=<dir>` to write the raw replies the parser fixtures
//! in `src/driver/fixtures/` were captured from.

mod driver_common;
use driver_common::{assert_keys_readable, write_keys};

use std::collections::BTreeMap;
use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::Value;
use valkey_operator::driver::migrate::{KeyMove, move_slot_by_keys};
use valkey_operator::driver::testing::{
    DEFAULT_USER_LINE, LocalServers, STRICT_DEFAULT_USER_LINE, ValkeyBuild, form_cluster, wait_for,
};
use valkey_operator::driver::{
    ClusterDriver, ClusterNode, DriverConfig, DriverErrorKind, FailoverMode, FredDriver,
    MemberAddr, MigrateKeys, MigrationOperation, MigrationState, NodeId, Role, SetSlot,
    SlotMigration, SlotMigrationRequest, SlotRange, Version, slots,
};

/// Generous: CI runs on 2 loaded cores.
const FORM_TIMEOUT: Duration = Duration::from_secs(120);
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

async fn start(build: ValkeyBuild, count: usize) -> (LocalServers, FredDriver) {
    start_with(build, count, DEFAULT_USER_LINE).await
}

async fn start_with(
    build: ValkeyBuild,
    count: usize,
    default_user_line: &str,
) -> (LocalServers, FredDriver) {
    let servers = LocalServers::start_with_default_user(build, count, default_user_line)
        .await
        .unwrap_or_else(|e| panic!("cannot start {count} valkey-servers ({build:?}): {e}"));
    let driver = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    (servers, driver)
}

async fn data_client(servers: &LocalServers) -> fred::clients::Client {
    servers
        .cluster_client()
        .await
        .expect("clustered data client connects")
}

fn capture(name: &str, contents: &str) {
    if let Some(dir) = std::env::var_os("VALKEY_DRIVER_CAPTURE_FIXTURES") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("capture dir");
        std::fs::write(dir.join(name), contents).expect("write capture");
    }
}

async fn capture_text(driver: &FredDriver, member: &MemberAddr, name: &str, args: &[&str]) {
    if std::env::var_os("VALKEY_DRIVER_CAPTURE_FIXTURES").is_none() {
        return;
    }
    let args: Vec<Value> = args.iter().map(|a| Value::from(*a)).collect();
    let reply = driver.command(member, name, args).await.expect("capture");
    match reply.as_text() {
        Some(text) => capture(name, &text),
        None => capture(name, &serde_json::to_string_pretty(&reply).unwrap()),
    }
}

/// Which node serves each slot, according to one member.
fn owners(nodes: &[ClusterNode]) -> BTreeMap<u16, NodeId> {
    nodes
        .iter()
        .flat_map(|n| {
            n.slots
                .iter()
                .flat_map(|r| r.clone())
                .map(|s| (s, n.id.clone()))
        })
        .collect()
}

/// Waits until every member agrees that `target` serves all of `range` and no member has
/// a slot left importing or migrating.
async fn wait_owned_and_closed(
    driver: &FredDriver,
    members: &[MemberAddr],
    range: &SlotRange,
    target: &NodeId,
) {
    wait_for(
        "new owner agreed everywhere, no open slot",
        STEP_TIMEOUT,
        || async {
            for m in members {
                let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
                let owner = owners(&nodes);
                if let Some(s) = range.clone().find(|s| owner.get(s) != Some(target)) {
                    return Err(format!(
                        "{m} says slot {s} is served by {:?}",
                        owner.get(&s)
                    ));
                }
                let me = nodes
                    .iter()
                    .find(|n| n.flags.myself)
                    .ok_or("no myself line")?;
                if !me.migrating.is_empty() || !me.importing.is_empty() {
                    return Err(format!("{m} has open slots: {me:?}"));
                }
            }
            Ok(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

async fn keys_in(driver: &FredDriver, member: &MemberAddr, range: &SlotRange) -> u64 {
    let mut total = 0;
    for slot in range.clone() {
        total += driver.count_keys_in_slot(member, slot).await.unwrap();
    }
    total
}

// ---------------------------------------------------------------------------------------

async fn forms_three_primaries_with_one_replica_each(build: ValkeyBuild) {
    let (servers, driver) = start(build, 6).await;
    let members = servers.addrs();
    let formation = form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("formation failed: {e}"));

    // Every member: cluster_state:ok, all slots, all six known.
    for m in &members {
        let obs = driver.observe(m).await.unwrap();
        assert!(obs.info.state_ok, "{m}: {:?}", obs.info);
        assert_eq!(obs.info.slots_assigned, 16384, "{m}");
        assert_eq!(obs.info.known_nodes, 6, "{m}");
        assert_eq!(obs.info.size, 3, "{m}");
        assert_eq!(obs.myself().map(|n| &n.id), Some(&obs.id));
        let expected = match build {
            ValkeyBuild::V9_0 => Version::new(9, 0, 0),
            ValkeyBuild::V9_1 | ValkeyBuild::V9_1Tls => Version::new(9, 1, 2),
        };
        assert_eq!(obs.server.version, expected);
        assert!(obs.server.cluster_mode);
    }

    // CLUSTER SHARDS: 3 shards, each one primary + one replica, slots cover 16384 once.
    let shards = driver.cluster_shards(&members[0]).await.unwrap();
    assert_eq!(shards.len(), 3, "{shards:?}");
    let covered: Vec<SlotRange> = shards.iter().flat_map(|s| s.slots.clone()).collect();
    assert_eq!(slots::count_slots(covered.clone()), 16384);
    assert_eq!(covered.iter().map(slots::range_len).sum::<usize>(), 16384);
    for shard in &shards {
        let roles: Vec<Role> = shard.nodes.iter().map(|n| n.role).collect();
        assert_eq!(
            roles.iter().filter(|r| **r == Role::Primary).count(),
            1,
            "{shard:?}"
        );
        assert_eq!(
            roles.iter().filter(|r| **r == Role::Replica).count(),
            1,
            "{shard:?}"
        );
    }

    // Each primary has exactly its replica connected; each replica follows its primary.
    for (primary, primary_id) in &formation.primaries {
        let repl = wait_for("replica online at its primary", STEP_TIMEOUT, || async {
            let r = driver
                .replication_info(primary)
                .await
                .map_err(|e| e.to_string())?;
            if r.connected_replicas.iter().all(|c| c.is_online()) && r.connected_replicas.len() == 1
            {
                Ok(r)
            } else {
                Err(format!("{r:?}"))
            }
        })
        .await
        .unwrap();
        assert_eq!(repl.role, Role::Primary);
        let (replica, _, followed) = formation
            .replicas
            .iter()
            .find(|(_, _, p)| p == primary_id)
            .expect("a replica for every primary");
        assert_eq!(followed, primary_id);
        assert_eq!(repl.connected_replicas[0].port, replica.port);
        let nodes = driver.cluster_nodes(replica).await.unwrap();
        let me = nodes.iter().find(|n| n.flags.myself).unwrap();
        assert!(me.flags.replica);
        assert_eq!(me.primary_id.as_ref(), Some(primary_id));
    }

    // Data path: a clustered client writes and reads back 10,000 keys.
    let client = data_client(&servers).await;
    write_keys(&client, 10_000).await;
    assert_keys_readable(&client, 10_000).await;
    let _ = client.quit().await;

    if build == ValkeyBuild::V9_0 {
        let (p, r) = (&formation.primaries[0].0, &formation.replicas[0].0);
        capture_text(
            &driver,
            p,
            "cluster-nodes-primary.txt",
            &["CLUSTER", "NODES"],
        )
        .await;
        capture_text(
            &driver,
            r,
            "cluster-nodes-replica.txt",
            &["CLUSTER", "NODES"],
        )
        .await;
        capture_text(&driver, p, "cluster-info.txt", &["CLUSTER", "INFO"]).await;
        capture_text(&driver, p, "cluster-shards.json", &["CLUSTER", "SHARDS"]).await;
        capture_text(
            &driver,
            p,
            "info-replication-primary.txt",
            &["INFO", "replication"],
        )
        .await;
        capture_text(
            &driver,
            r,
            "info-replication-replica.txt",
            &["INFO", "replication"],
        )
        .await;
        capture_text(&driver, p, "info-server.txt", &["INFO", "server"]).await;
    }
}

/// A replica whose own config epoch is already the highest does not bump it on `TAKEOVER`:
/// its claim wins only because formation gave every member a distinct epoch (tied with its
/// primary's, the other members would keep the dead primary as the slots' owner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_by_the_replica_with_the_highest_epoch_is_accepted_by_every_member() {
    let (mut servers, driver) = start(ValkeyBuild::V9_0, 4).await;
    let members = servers.addrs();
    // Epochs 1..=4: members[3] (epoch 4, the highest) replicates members[1] (epoch 2).
    let formation = form_cluster(&driver, &members, 2, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("formation failed: {e}"));
    let (replica, replica_id, primary_id) = formation.replicas[1].clone();
    assert_eq!(replica, members[3]);
    let refused = driver.set_config_epoch(&members[0], 9).await;
    assert!(
        refused.is_err(),
        "SET-CONFIG-EPOCH is refused once a member knows others"
    );
    servers.servers[1].kill();
    driver
        .failover(&replica, FailoverMode::Takeover)
        .await
        .expect("takeover");
    let range = slots::even_ranges(2)[1].clone();
    for witness in [&members[0], &members[2]] {
        wait_for("the takeover's claim to spread", STEP_TIMEOUT, || async {
            let nodes = driver
                .cluster_nodes(witness)
                .await
                .map_err(|e| e.to_string())?;
            let owner = nodes.iter().find(|n| n.slots.contains(&range));
            match owner {
                Some(n) if n.id == replica_id => Ok(()),
                other => Err(format!(
                    "{witness} sees {:?} owning {range:?} (dead primary {primary_id})",
                    other.map(|n| (&n.id, n.config_epoch))
                )),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("the takeover was not accepted: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_3x1_cluster_through_the_driver_on_9_0() {
    forms_three_primaries_with_one_replica_each(ValkeyBuild::V9_0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_3x1_cluster_through_the_driver_on_9_1() {
    forms_three_primaries_with_one_replica_each(ValkeyBuild::V9_1).await;
}

// ---------------------------------------------------------------------------------------

const MIGRATION_KEYS: usize = 3000;

/// Three primaries without replicas, 3000 keys; returns the range to move (the first 200
/// slots of the first primary, which hold keys), source and target.
async fn migration_setup(
    build: ValkeyBuild,
    default_user_line: &str,
) -> (
    LocalServers,
    FredDriver,
    fred::clients::Client,
    SlotRange,
    MemberAddr,
    NodeId,
    MemberAddr,
    NodeId,
) {
    let (servers, driver) = start_with(build, 3, default_user_line).await;
    let members = servers.addrs();
    let formation = form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("formation failed: {e}"));
    let client = data_client(&servers).await;
    write_keys(&client, MIGRATION_KEYS).await;
    let (source, source_id) = formation.primaries[0].clone();
    let (target, target_id) = formation.primaries[1].clone();
    let range: SlotRange = 0..=199;
    (
        servers, driver, client, range, source, source_id, target, target_id,
    )
}

/// The latest export job for `range` on `source`, once finished.
async fn finished_export(
    driver: &FredDriver,
    source: &MemberAddr,
    range: &SlotRange,
) -> SlotMigration {
    wait_for("the export job to finish", STEP_TIMEOUT, || async {
        let jobs = driver
            .slot_migrations(source)
            .await
            .map_err(|e| e.to_string())?;
        let job = jobs
            .into_iter()
            .filter(|j| {
                j.operation == MigrationOperation::Export && j.slot_ranges == [range.clone()]
            })
            .max_by_key(|j| j.create_time)
            .ok_or("no export job listed yet")?;
        if job.state.is_finished() {
            Ok(job)
        } else {
            Err(format!("job state {:?}", job.state))
        }
    })
    .await
    .unwrap()
}

async fn atomic_slot_migration_moves_a_range(build: ValkeyBuild) {
    let (servers, driver, client, range, source, source_id, target, target_id) =
        migration_setup(build, DEFAULT_USER_LINE).await;
    let members = servers.addrs();
    let before = keys_in(&driver, &source, &range).await;
    assert!(before > 0, "the range to move must hold keys");
    assert!(
        !driver.cancel_slot_migrations(&source).await.unwrap(),
        "nothing to cancel before the migration"
    );

    let request = [SlotMigrationRequest {
        ranges: vec![range.clone()],
        target: target_id.clone(),
    }];
    driver.migrate_slots(&source, &request).await.unwrap();
    let job = finished_export(&driver, &source, &range).await;
    assert_eq!(job.state, MigrationState::Success, "{job:?}");
    assert_eq!(job.source_node, source_id);
    assert_eq!(job.target_node, target_id);

    // The target lists the matching import.
    let imports = driver.slot_migrations(&target).await.unwrap();
    assert!(
        imports
            .iter()
            .any(|j| j.operation == MigrationOperation::Import && j.name == job.name),
        "{imports:?}"
    );

    wait_owned_and_closed(&driver, &members, &range, &target_id).await;
    assert_eq!(keys_in(&driver, &target, &range).await, before);
    assert_eq!(keys_in(&driver, &source, &range).await, 0);
    assert_keys_readable(&client, MIGRATION_KEYS).await;
    let _ = client.quit().await;

    if build == ValkeyBuild::V9_0 {
        capture_text(
            &driver,
            &source,
            "getslotmigrations-export.json",
            &["CLUSTER", "GETSLOTMIGRATIONS"],
        )
        .await;
        capture_text(
            &driver,
            &target,
            "getslotmigrations-import.json",
            &["CLUSTER", "GETSLOTMIGRATIONS"],
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_slot_migration_moves_keys_on_9_0() {
    atomic_slot_migration_moves_a_range(ValkeyBuild::V9_0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_slot_migration_moves_keys_on_9_1() {
    atomic_slot_migration_moves_a_range(ValkeyBuild::V9_1).await;
}

/// Valkey 9.0.0 runs the exporting side of `CLUSTER SYNCSLOTS` as the `default` user:
/// with a `default` user lacking `cluster|syncslots` the migration fails (cleanly: slots
/// stay with the source, nothing left open). 9.1.2 does not care.
async fn atomic_slot_migration_with_a_bare_default_user(build: ValkeyBuild) -> SlotMigration {
    let (servers, driver, client, range, source, source_id, _target, target_id) =
        migration_setup(build, STRICT_DEFAULT_USER_LINE).await;
    let request = [SlotMigrationRequest {
        ranges: vec![range.clone()],
        target: target_id.clone(),
    }];
    driver.migrate_slots(&source, &request).await.unwrap();
    let job = finished_export(&driver, &source, &range).await;
    let expected_owner = if job.state == MigrationState::Success {
        target_id
    } else {
        source_id
    };
    wait_owned_and_closed(&driver, &servers.addrs(), &range, &expected_owner).await;
    assert_keys_readable(&client, MIGRATION_KEYS).await;
    let _ = client.quit().await;
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_slot_migration_on_9_0_needs_syncslots_for_the_default_user() {
    let job = atomic_slot_migration_with_a_bare_default_user(ValkeyBuild::V9_0).await;
    assert_eq!(job.state, MigrationState::Failed, "{job:?}");
    assert!(job.message.contains("Failed to process command"), "{job:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_slot_migration_on_9_1_works_with_a_bare_default_user() {
    let job = atomic_slot_migration_with_a_bare_default_user(ValkeyBuild::V9_1).await;
    assert_eq!(job.state, MigrationState::Success, "{job:?}");
}

async fn setslot_and_migrate_moves_a_range(build: ValkeyBuild) {
    let (servers, driver, client, range, source, source_id, target, target_id) =
        migration_setup(build, DEFAULT_USER_LINE).await;
    let members = servers.addrs();
    let before = keys_in(&driver, &source, &range).await;
    assert!(before > 0);

    let mv = KeyMove {
        source: &source,
        source_id: &source_id,
        target: &target,
        target_id: &target_id,
        others: &members,
    };
    // Two slots start from moves cut short, the way an operator crash leaves them: the first
    // after some of its keys moved, the second after only the target took ownership.
    let mut first = *range.start();
    while driver.count_keys_in_slot(&source, first).await.unwrap() == 0 {
        first += 1;
    }
    assert!(range.contains(&(first + 1)), "the range has keys early on");
    for slot in [first, first + 1] {
        driver
            .set_slot(&target, slot, &SetSlot::Importing(source_id.clone()))
            .await
            .unwrap();
        driver
            .set_slot(&source, slot, &SetSlot::Migrating(target_id.clone()))
            .await
            .unwrap();
    }
    if build == ValkeyBuild::V9_0 {
        capture_text(
            &driver,
            &source,
            "cluster-nodes-migrating.txt",
            &["CLUSTER", "NODES"],
        )
        .await;
        capture_text(
            &driver,
            &target,
            "cluster-nodes-importing.txt",
            &["CLUSTER", "NODES"],
        )
        .await;
    }
    let nodes = driver.cluster_nodes(&source).await.unwrap();
    let me = nodes.iter().find(|n| n.flags.myself).unwrap();
    assert_eq!(me.migrating.len(), 2);
    assert_eq!(me.migrating[0].peer, target_id);
    let some = driver.keys_in_slot(&source, first, 1).await.unwrap();
    assert_eq!(some.len(), 1, "slot {first} holds keys");
    let request = MigrateKeys {
        target: target.clone(),
        keys: some,
        timeout: Duration::from_secs(10),
        replace: false,
    };
    assert!(driver.migrate_keys(&source, &request).await.unwrap());
    // A third slot: a MIGRATE whose reply was lost, so the target took a key the source
    // still holds (a stale copy, written there with ASKING). Resuming must not wedge on
    // BUSYKEY, and the source's copy, the one that kept serving, wins.
    let mut busy = first + 2;
    while driver.count_keys_in_slot(&source, busy).await.unwrap() == 0 {
        busy += 1;
    }
    assert!(
        range.contains(&busy),
        "the range has a third slot with keys"
    );
    driver
        .set_slot(&target, busy, &SetSlot::Importing(source_id.clone()))
        .await
        .unwrap();
    let stale = driver.keys_in_slot(&source, busy, 1).await.unwrap();
    plant_on_importing_target(&servers, &target, &String::from_utf8_lossy(&stale[0])).await;
    loop {
        let keys = driver.keys_in_slot(&source, first + 1, 100).await.unwrap();
        if keys.is_empty() {
            break;
        }
        let request = MigrateKeys {
            target: target.clone(),
            keys,
            timeout: Duration::from_secs(10),
            replace: false,
        };
        driver.migrate_keys(&source, &request).await.unwrap();
    }
    driver
        .set_slot(&target, first + 1, &SetSlot::Node(target_id.clone()))
        .await
        .unwrap();

    // Resuming the interrupted slots and moving the rest is the same call.
    let mut moved = 0;
    for slot in range.clone() {
        moved += move_slot_by_keys(&driver, mv, slot).await.unwrap();
    }
    assert!(moved > 0);

    wait_owned_and_closed(&driver, &members, &range, &target_id).await;
    assert_eq!(keys_in(&driver, &target, &range).await, before);
    assert_eq!(keys_in(&driver, &source, &range).await, 0);
    assert_keys_readable(&client, MIGRATION_KEYS).await;
    let _ = client.quit().await;
}

/// Writes `key` = `stale` on `target` (importing its slot) with ASKING, through valkey-cli (one
/// connection for both commands).
async fn plant_on_importing_target(servers: &LocalServers, target: &MemberAddr, key: &str) {
    use tokio::io::AsyncWriteExt;
    let cli = servers.build.binary().unwrap().with_file_name("valkey-cli");
    let mut child = tokio::process::Command::new(&cli)
        .args(["-h", &target.host, "-p", &target.port.to_string()])
        .args(["--user", &servers.credentials.username])
        .args(["--pass", &servers.credentials.password, "--no-auth-warning"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", cli.display()));
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("ASKING\nSET {key} stale\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.matches("OK").count() == 2,
        "ASKING + SET on the target: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setslot_and_migrate_moves_keys_key_by_key_on_9_0() {
    setslot_and_migrate_moves_a_range(ValkeyBuild::V9_0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setslot_and_migrate_moves_keys_key_by_key_on_9_1() {
    setslot_and_migrate_moves_a_range(ValkeyBuild::V9_1).await;
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_on_a_replica_makes_it_primary() {
    let (servers, driver) = start(ValkeyBuild::V9_0, 6).await;
    let members = servers.addrs();
    let formation = form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("formation failed: {e}"));
    let (replica, replica_id, old_primary_id) = formation.replicas[0].clone();
    let old_primary = formation
        .primaries
        .iter()
        .find(|(_, id)| *id == old_primary_id)
        .map(|(a, _)| a.clone())
        .unwrap();

    driver
        .failover(&replica, FailoverMode::Default)
        .await
        .unwrap();

    wait_for(
        "the replica to be primary and the old primary its replica",
        STEP_TIMEOUT,
        || async {
            let new = driver
                .replication_info(&replica)
                .await
                .map_err(|e| e.to_string())?;
            let old = driver
                .replication_info(&old_primary)
                .await
                .map_err(|e| e.to_string())?;
            let nodes = driver
                .cluster_nodes(&old_primary)
                .await
                .map_err(|e| e.to_string())?;
            let me = nodes.iter().find(|n| n.flags.myself).ok_or("no myself")?;
            if new.role == Role::Primary
                && old.role == Role::Replica
                && me.primary_id.as_ref() == Some(&replica_id)
                && old.primary_link.as_ref().is_some_and(|l| l.link_up)
            {
                Ok(())
            } else {
                Err(format!("new={:?} old={:?}", new.role, old.role))
            }
        },
    )
    .await
    .unwrap();
    wait_for("cluster_state:ok everywhere", STEP_TIMEOUT, || async {
        for m in &members {
            let info = driver.cluster_info(m).await.map_err(|e| e.to_string())?;
            if !info.state_ok {
                return Err(format!("{m} not ok"));
            }
        }
        Ok(())
    })
    .await
    .unwrap();
    let shards = driver.cluster_shards(&members[2]).await.unwrap();
    let shard = shards
        .iter()
        .find(|s| s.nodes.iter().any(|n| n.id == replica_id))
        .unwrap();
    assert_eq!(shard.primary().map(|p| &p.id), Some(&replica_id));
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_member_and_the_command() {
    let (servers, driver) = start(ValkeyBuild::V9_0, 1).await;
    let member = servers.servers[0].addr.clone();

    // A server error: REPLICATE to a node nobody knows.
    let unknown = NodeId("0123456789012345678901234567890123456789".into());
    let err = driver.replicate(&member, &unknown).await.unwrap_err();
    assert_eq!(err.member, member);
    assert_eq!(err.command, "CLUSTER REPLICATE");
    assert!(matches!(err.kind, DriverErrorKind::Server(_)), "{err:?}");
    assert!(!err.is_transient());
    let text = err.to_string();
    assert!(
        text.contains(&member.to_string()) && text.contains("CLUSTER REPLICATE"),
        "{text}"
    );

    // The connection stays usable after a server error.
    driver.ping(&member).await.unwrap();

    // Wrong password: a connect error, not a hang.
    let mut bad = DriverConfig::new(servers.credentials.clone());
    bad.credentials.password = "wrong".into();
    let err = FredDriver::new(bad).ping(&member).await.unwrap_err();
    assert!(matches!(err.kind, DriverErrorKind::Connect(_)), "{err:?}");

    // Nobody listening: a transient connect error within the timeout.
    let mut quick = DriverConfig::new(servers.credentials.clone());
    quick.connect_timeout = Duration::from_secs(2);
    quick.command_timeout = Duration::from_secs(3);
    let closed = MemberAddr::new("127.0.0.1", 1);
    let err = FredDriver::new(quick).my_id(&closed).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(err.command, "CLUSTER MYID");

    // A killed member: the cached connection is dropped and the error is transient.
    let mut servers = servers;
    servers.servers[0].kill();
    let err = driver.cluster_info(&member).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");

    // Config round trip and ACL LOAD on a fresh member.
    let (servers, driver) = start(ValkeyBuild::V9_0, 1).await;
    let member = servers.servers[0].addr.clone();
    driver
        .config_set(
            &member,
            &[("maxmemory-policy".into(), "allkeys-lru".into())],
        )
        .await
        .unwrap();
    let got = driver
        .config_get(&member, "maxmemory-policy")
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![("maxmemory-policy".to_owned(), "allkeys-lru".to_owned())]
    );
    driver.acl_load(&member).await.unwrap();
    driver.config_rewrite(&member).await.unwrap();
}

/// Clients of the operator's user connected to `member`, from `CLIENT LIST` asked over a
/// connection of our own (counted out).
async fn operator_connections(servers: &LocalServers, member: &MemberAddr) -> usize {
    let own = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let list = own
        .command(
            member,
            "CLIENT LIST",
            vec![Value::from("CLIENT"), Value::from("LIST")],
        )
        .await
        .expect("CLIENT LIST")
        .as_text()
        .expect("text");
    own.close_idle(Duration::ZERO).await;
    list.lines().count() - 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_ones_in_use_are_kept() {
    let (servers, driver) = start(ValkeyBuild::V9_1, 1).await;
    let member = servers.servers[0].addr.clone();
    driver.my_id(&member).await.expect("first command connects");
    assert_eq!(operator_connections(&servers, &member).await, 1);

    // Not idle long enough: kept.
    assert_eq!(driver.close_idle(Duration::from_secs(60)).await, 0);
    assert_eq!(operator_connections(&servers, &member).await, 1);

    // A command in flight holds its connection: never closed under it.
    // (WAIT for a replica this member does not have: blocks for its full 1,000 ms.)
    let blocked = driver.command(
        &member,
        "WAIT",
        vec![Value::from("WAIT"), Value::from("1"), Value::from("1000")],
    );
    let sweep = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        driver.close_idle(Duration::ZERO).await
    };
    let (reply, closed) = tokio::join!(blocked, sweep);
    assert!(reply.is_ok(), "the blocked command finished: {reply:?}");
    assert_eq!(closed, 0, "a connection in use is not idle");

    // Idle and unused: closed on the server too; the next command connects again.
    assert_eq!(driver.close_idle(Duration::ZERO).await, 1);
    wait_for(
        "the closed connection to leave CLIENT LIST",
        STEP_TIMEOUT,
        || async {
            match operator_connections(&servers, &member).await {
                0 => Ok(()),
                n => Err(format!("{n} connection(s)")),
            }
        },
    )
    .await
    .expect("closed");
    driver.my_id(&member).await.expect("reconnects");
    assert_eq!(operator_connections(&servers, &member).await, 1);
}
