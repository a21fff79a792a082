//! The operator's own Valkey users, as the operator renders them (`resolve/acl.rs`), against
//! real `valkey-server` processes (9.0.0 and 9.1.2) that load that file and replicate as
//! `_valkey-replication`, as members do:
//!
//! - as `_valkey-operator`, the driver forms a cluster with a replica (which syncs), moves
//!   slots with keys of every type by atomic slot migration while a client writes to them,
//!   moves a slot key by key (`MIGRATE ... AUTH2` logs in to the target as the operator), and
//!   runs every other command it sends (`ACL DRYRUN` for the destructive ones);
//! - no member logs an ACL denial for either internal user;
//! - `_valkey-operator` can read no value, write none, flush nothing, publish nothing;
//! - `_valkey-replication` can flush nothing, read nothing with read commands, read no
//!   config (no `masterauth`), `MIGRATE` nothing away; it can still write keys, because
//!   atomic slot migration replays the moving slots' writes on the target as this user.
//! - `_valkey-backup` takes a replica's snapshot the way backup Jobs do (`backup::sync`),
//!   holding every key the replica has, and can do nothing else: no read, no write, no config.
//! - `_valkey-restore` may `RESTORE` keys and `FUNCTION LOAD` libraries, as restore Jobs do,
//!   and nothing else: no read, no plain write, no flush, no config.
//!
//! Binaries: `VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1`, else the cache filled by
//! `e2e/tools/install.sh`.

mod driver_common;
use driver_common::{assert_keys_readable, write_keys};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};
use fred::types::Value;
use valkey_operator::api::constants::{
    BACKUP_ACL_USERNAME, METRICS_ACL_USERNAME, REPLICATION_ACL_USERNAME, RESTORE_ACL_USERNAME,
};
use valkey_operator::driver::migrate::{KeyMove, move_slot_by_keys};
use valkey_operator::driver::parse::Reply;
use valkey_operator::driver::testing::{LocalServers, ValkeyBuild, form_cluster, wait_for};
use valkey_operator::driver::{
    ClusterDriver, Credentials, DriverConfig, FailoverMode, FredDriver, MemberAddr,
    MigrationOperation, MigrationState, NodeId, SlotMigration, SlotMigrationRequest, SlotRange,
};

const FORM_TIMEOUT: Duration = Duration::from_secs(120);
const STEP_TIMEOUT: Duration = Duration::from_secs(90);
const KEYS: usize = 3000;

fn driver(credentials: Credentials) -> FredDriver {
    FredDriver::new(DriverConfig::new(credentials))
}

fn args(words: &[&str]) -> Vec<Value> {
    words.iter().map(|w| Value::from(*w)).collect()
}

/// `words` run as whoever `driver` logs in as: the reply, or Valkey's error.
async fn run(driver: &FredDriver, member: &MemberAddr, words: &[&str]) -> Result<Reply, String> {
    driver
        .command(member, words[0], args(words))
        .await
        .map_err(|e| e.server_message().unwrap_or(&e.to_string()).to_string())
}

/// `ACL DRYRUN user words...`: `OK` when `user` may run it, else Valkey's reason.
async fn dryrun(admin: &FredDriver, member: &MemberAddr, user: &str, words: &[&str]) -> String {
    let mut full = vec!["ACL", "DRYRUN", user];
    full.extend_from_slice(words);
    match run(admin, member, &full).await {
        Ok(reply) => reply.as_text().unwrap_or_default(),
        Err(e) => e,
    }
}

/// A hash tag whose slot the first primary (slots 0-8191) serves, outside `0..=199`.
async fn tag_on_first_primary(admin: &FredDriver, member: &MemberAddr) -> (String, u16) {
    for i in 0.. {
        let tag = format!("t{i}");
        let slot = run(admin, member, &["CLUSTER", "KEYSLOT", &tag])
            .await
            .unwrap()
            .as_int()
            .unwrap();
        if (200..8192).contains(&slot) {
            return (tag, slot as u16);
        }
    }
    unreachable!()
}

/// One key of every type (and one with an expiry) under `{tag}`, written through `member`.
async fn write_typed_keys(admin: &FredDriver, member: &MemberAddr, tag: &str) -> Vec<String> {
    let k = |name: &str| format!("{{{tag}}}{name}");
    let commands: Vec<Vec<String>> = vec![
        vec![
            "SET".into(),
            k("string"),
            "v".into(),
            "EX".into(),
            "1000".into(),
        ],
        vec!["RPUSH".into(), k("list"), "a".into(), "b".into()],
        vec!["SADD".into(), k("set"), "a".into(), "b".into()],
        vec!["ZADD".into(), k("zset"), "1".into(), "a".into()],
        vec!["HSET".into(), k("hash"), "f".into(), "v".into()],
        vec![
            "XADD".into(),
            k("stream"),
            "*".into(),
            "f".into(),
            "v".into(),
        ],
        vec![
            "XGROUP".into(),
            "CREATE".into(),
            k("stream"),
            "g".into(),
            "0".into(),
        ],
        vec!["PFADD".into(), k("hll"), "a".into()],
        vec!["SETBIT".into(), k("bits"), "7".into(), "1".into()],
    ];
    for c in &commands {
        let words: Vec<&str> = c.iter().map(String::as_str).collect();
        run(admin, member, &words).await.unwrap();
    }
    [
        "string", "list", "set", "zset", "hash", "stream", "hll", "bits",
    ]
    .iter()
    .map(|n| k(n))
    .collect()
}

/// A client writing to `{tag}` (INCR, SET, EXPIRE, DEL) until `stop`; counts the INCRs
/// Valkey acknowledged. The writes during the move reach the target as replayed commands.
fn start_writer(
    client: fred::clients::Client,
    tag: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (counter, scratch) = (format!("{{{tag}}}counter"), format!("{{{tag}}}scratch"));
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            if client.incr::<i64, _>(&counter).await.is_ok() {
                acked.fetch_add(1, Ordering::Relaxed);
            }
            let _ = client.set::<(), _, _>(&scratch, i, None, None, false).await;
            let _ = client.expire::<(), _>(&scratch, 1000, None).await;
            if i.is_multiple_of(3) {
                let _ = client.del::<(), _>(&scratch).await;
            }
        }
    })
}

/// The latest export job for `ranges` on `source`, once finished.
async fn finished_export(
    op: &FredDriver,
    source: &MemberAddr,
    ranges: &[SlotRange],
) -> SlotMigration {
    wait_for("the export job to finish", STEP_TIMEOUT, || async {
        let jobs = op
            .slot_migrations(source)
            .await
            .map_err(|e| e.to_string())?;
        let job = jobs
            .into_iter()
            .filter(|j| j.operation == MigrationOperation::Export && j.slot_ranges == ranges)
            .max_by_key(|j| j.create_time)
            .ok_or("no export job listed yet")?;
        match job.state.is_finished() {
            true => Ok(job),
            false => Err(format!("job state {:?}", job.state)),
        }
    })
    .await
    .unwrap()
}

/// Waits until `member` says `owner` serves `slot`.
async fn wait_owner(op: &FredDriver, member: &MemberAddr, slot: u16, owner: &NodeId) {
    wait_for("the new owner", STEP_TIMEOUT, || async {
        let nodes = op.cluster_nodes(member).await.map_err(|e| e.to_string())?;
        nodes
            .iter()
            .find(|n| &n.id == owner && n.slots.iter().any(|r| r.contains(&slot)))
            .map(|_| ())
            .ok_or_else(|| format!("{member} does not yet say {owner:?} serves {slot}"))
    })
    .await
    .unwrap();
}

/// No member logged an ACL denial for an internal user (`ACL LOG`).
async fn assert_no_internal_denials(admin: &FredDriver, members: &[MemberAddr]) {
    for m in members {
        let log = run(admin, m, &["ACL", "LOG"]).await.unwrap();
        let text = format!("{log:?}");
        assert!(
            !text.contains("_valkey-operator")
                && !text.contains(REPLICATION_ACL_USERNAME)
                && !text.contains(BACKUP_ACL_USERNAME),
            "{m} denied an internal user: {text}"
        );
    }
}

/// Atomic slot migration of `0..=199` (3000 string keys) and of the slot of `{tag}` (a key of
/// every type), with a client writing to that slot throughout, driven by `_valkey-operator`
/// and replayed on the target as `_valkey-replication`.
async fn migrate_with_writes(
    servers: &LocalServers,
    op: &FredDriver,
    admin: &FredDriver,
    source: (&MemberAddr, &NodeId),
    target: (&MemberAddr, &NodeId),
) {
    let client = servers.cluster_client().await.expect("data client");
    write_keys(&client, KEYS).await;
    let (tag, slot) = tag_on_first_primary(admin, source.0).await;
    let typed = write_typed_keys(admin, source.0, &tag).await;
    let (stop, acked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let writer = start_writer(client.clone(), tag.clone(), stop.clone(), acked.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let ranges: Vec<SlotRange> = vec![0..=199, slot..=slot];
    let request = [SlotMigrationRequest {
        ranges: ranges.clone(),
        target: target.1.clone(),
    }];
    op.migrate_slots(source.0, &request).await.unwrap();
    let job = finished_export(op, source.0, &ranges).await;
    assert_eq!(job.state, MigrationState::Success, "{job:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    wait_owner(op, source.0, slot, target.1).await;
    assert_keys_readable(&client, KEYS).await;
    for key in &typed {
        let kind = run(admin, target.0, &["TYPE", key]).await.unwrap();
        assert_ne!(
            kind.as_text().as_deref(),
            Some("none"),
            "{key} not on the target"
        );
    }
    let counter: Option<i64> = client.get(format!("{{{tag}}}counter")).await.unwrap();
    let acked = acked.load(Ordering::Relaxed) as i64;
    assert!(
        acked > 0 && counter.unwrap_or(0) >= acked,
        "{counter:?} < {acked}"
    );
    let _ = client.quit().await;
}

/// A slot of the first primary holding keys, moved key by key: `MIGRATE ... AUTH2` as the
/// operator, `RESTORE-ASKING` and `SELECT` on the target as the operator.
async fn key_by_key_move(op: &FredDriver, members: &[MemberAddr], ids: &[NodeId]) {
    let mut slot = 200;
    while op.count_keys_in_slot(&members[0], slot).await.unwrap() == 0 {
        slot += 1;
    }
    let mv = KeyMove {
        source: &members[0],
        source_id: &ids[0],
        target: &members[1],
        target_id: &ids[1],
        others: &members[..2],
    };
    let moved = move_slot_by_keys(op, mv, slot).await.unwrap();
    assert!(moved > 0, "slot {slot} had keys");
    assert_eq!(
        op.count_keys_in_slot(&members[1], slot).await.unwrap(),
        moved
    );
}

/// Every command the driver sends is allowed to `_valkey-operator` (`ACL DRYRUN`, which checks
/// without running: FORGET, RESET and the like would break the cluster).
async fn operator_may_run_what_the_driver_sends(admin: &FredDriver, m: &MemberAddr, id: &str) {
    let k = "key:1";
    let sent: &[&[&str]] = &[
        &["PING"],
        &["INFO", "replication"],
        &["INFO", "server"],
        &["CLUSTER", "MYID"],
        &["CLUSTER", "NODES"],
        &["CLUSTER", "SHARDS"],
        &["CLUSTER", "INFO"],
        &["CLUSTER", "COUNTKEYSINSLOT", "1"],
        &["CLUSTER", "GETKEYSINSLOT", "1", "200"],
        &["CLUSTER", "GETSLOTMIGRATIONS"],
        &["CLUSTER", "MEET", "127.0.0.1", "1", "10001"],
        &["CLUSTER", "ADDSLOTSRANGE", "0", "1"],
        &["CLUSTER", "REPLICATE", id],
        &["CLUSTER", "FAILOVER", "TAKEOVER"],
        &["CLUSTER", "FORGET", id],
        &["CLUSTER", "RESET", "SOFT"],
        &["CLUSTER", "SETSLOT", "1", "NODE", id],
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            "0",
            "1",
            "NODE",
            id,
        ],
        &["CLUSTER", "CANCELSLOTMIGRATIONS"],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["CONFIG", "REWRITE"],
        &["ACL", "LOAD"],
        &["ACL", "USERS"],
        &[
            "MIGRATE",
            "127.0.0.1",
            "1",
            "",
            "0",
            "5000",
            "REPLACE",
            "KEYS",
            k,
        ],
        &["RESTORE-ASKING", k, "0", "payload", "REPLACE"],
        &["SELECT", "0"],
        &["CLIENT", "ID"],
    ];
    for words in sent {
        let verdict = dryrun(admin, m, "_valkey-operator", words).await;
        assert_eq!(verdict, "OK", "_valkey-operator may not run {words:?}");
    }
}

/// What the operator's user cannot do, run for real.
async fn operator_can_do_nothing_else(op: &FredDriver, m: &MemberAddr) {
    refused(
        op,
        "_valkey-operator",
        m,
        &[
            &["GET", "key:1"][..],
            &["SET", "key:1", "x"],
            &["DEL", "key:1"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["FLUSHALL"],
            &["PUBLISH", "channel", "x"],
            &["ACL", "SETUSER", "intruder", "on", "+@all"],
            &["ACL", "GETUSER", "_valkey-replication"],
            &["CONFIG", "RESETSTAT"],
            &["MODULE", "LIST"],
            &["CLIENT", "KILL", "ID", "1"],
            &["EVAL", "return 1", "0"],
        ],
    )
    .await;
}

/// What the replication user cannot do, run for real; and that it may still write (the one
/// right atomic slot migration needs that a tenant would want).
async fn replication_can_only_replicate_and_write(servers: &LocalServers, m: &MemberAddr) {
    let password = servers.operator_acl().unwrap().replication_password.clone();
    let rep = driver(Credentials {
        username: REPLICATION_ACL_USERNAME.into(),
        password,
    });
    refused(
        &rep,
        "_valkey-replication",
        m,
        &[
            &["FLUSHALL"][..],
            &["FLUSHDB"],
            &["SWAPDB", "0", "1"],
            &["CLUSTER", "FLUSHSLOT", "1"],
            &["FUNCTION", "FLUSH"],
            &["GET", "key:1"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["CONFIG", "GET", "masterauth"],
            &[
                "MIGRATE",
                "127.0.0.1",
                "1",
                "",
                "0",
                "5000",
                "KEYS",
                "key:1",
            ],
            &["CLUSTER", "NODES"],
            &["ACL", "LOAD"],
            &["PUBLISH", "channel", "x"],
            &["EVAL", "return 1", "0"],
        ],
    )
    .await;
    // Kept on purpose (see resolve/acl.rs REPLICATION_COMMANDS): writes are replayed as it.
    let written = run(&rep, m, &["SET", "{replication-user}probe", "1"]).await;
    assert!(written.is_ok() || written.as_ref().is_err_and(|e| e.starts_with("MOVED")));
}

/// A backup Job's copy of `replica`, as `_valkey-backup`: a whole snapshot whose key count is
/// the replica's.
async fn backup_takes_a_snapshot(servers: &LocalServers, admin: &FredDriver, replica: &MemberAddr) {
    let password = servers.operator_acl().unwrap().backup_password.clone();
    let conn = tokio::net::TcpStream::connect((replica.host.as_str(), replica.port))
        .await
        .unwrap();
    let mut copy = Vec::new();
    let fetched =
        valkey_operator::backup::sync::fetch_rdb(conn, BACKUP_ACL_USERNAME, &password, &mut copy)
            .await
            .unwrap_or_else(|e| panic!("snapshot as {BACKUP_ACL_USERNAME}: {e}"));
    assert_eq!(fetched.bytes, copy.len() as u64);
    assert!(copy.starts_with(b"REDIS") || copy.starts_with(b"VALKEY"));
    let Ok(Reply::Int(dbsize)) = run(admin, replica, &["DBSIZE"]).await else {
        panic!("DBSIZE")
    };
    assert!(dbsize > 0, "the replica holds the migrated keys");
    assert_eq!(
        fetched.header.keys,
        Some(dbsize as u64),
        "{:?}",
        fetched.header
    );
}

/// Everything but the snapshot is refused to the backup user.
async fn backup_can_do_nothing_else(servers: &LocalServers, m: &MemberAddr) {
    let password = servers.operator_acl().unwrap().backup_password.clone();
    let backup = driver(Credentials {
        username: BACKUP_ACL_USERNAME.into(),
        password,
    });
    refused(
        &backup,
        BACKUP_ACL_USERNAME,
        m,
        &[
            &["GET", "key:1"][..],
            &["SET", "key:1", "x"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["DUMP", "key:1"],
            &["FLUSHALL"],
            &["CONFIG", "GET", "masterauth"],
            &["CLUSTER", "NODES"],
            &["ACL", "LOAD"],
            &["INFO"],
            &["PUBLISH", "channel", "x"],
            &["EVAL", "return 1", "0"],
        ],
    )
    .await;
}

/// The restore user may replay keys and function libraries (`RESTORE`, `FUNCTION LOAD`: a bad
/// payload is refused by Valkey, not by the ACL) and can do nothing else: it reads no key.
async fn restore_can_only_restore(servers: &LocalServers, m: &MemberAddr) {
    let password = servers.operator_acl().unwrap().restore_password.clone();
    let restore = driver(Credentials {
        username: RESTORE_ACL_USERNAME.into(),
        password,
    });
    for words in [
        &[
            "RESTORE",
            "{restore-user}probe",
            "0",
            "not-a-payload",
            "REPLACE",
        ][..],
        &["FUNCTION", "LOAD", "REPLACE", "not lua"],
    ] {
        let outcome = run(&restore, m, words).await;
        assert!(
            !matches!(&outcome, Err(e) if e.starts_with("NOPERM")),
            "{RESTORE_ACL_USERNAME} may run {words:?}: {outcome:?}"
        );
    }
    refused(
        &restore,
        RESTORE_ACL_USERNAME,
        m,
        &[
            &["GET", "key:1"][..],
            &["SET", "key:1", "x"],
            &["DEL", "key:1"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["DUMP", "key:1"],
            &["FLUSHALL"],
            &["FUNCTION", "FLUSH"],
            &["CONFIG", "GET", "masterauth"],
            &["CLUSTER", "NODES"],
            &["ACL", "LOAD"],
            &["INFO"],
            &["PUBLISH", "channel", "x"],
            &["EVAL", "return 1", "0"],
            &["SYNC"],
        ],
    )
    .await;
}

async fn internal_users_do_their_job_and_no_more(build: ValkeyBuild) {
    let servers = LocalServers::start_with_operator_acl(build, 3)
        .await
        .unwrap_or_else(|e| panic!("cannot start valkey-servers ({build:?}): {e}"));
    let op = driver(servers.operator_credentials().unwrap());
    let admin = driver(servers.credentials.clone());
    let members = servers.addrs();
    // Two primaries; the third member replicates the first and syncs as _valkey-replication.
    let formation = form_cluster(&op, &members, 2, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("formation as _valkey-operator failed: {e}"));
    let ids: Vec<NodeId> = formation.primaries.iter().map(|p| p.1.clone()).collect();
    migrate_with_writes(
        &servers,
        &op,
        &admin,
        (&members[0], &ids[0]),
        (&members[1], &ids[1]),
    )
    .await;
    key_by_key_move(&op, &members, &ids).await;
    let replica = &members[2];
    wait_for("the replica to catch up", STEP_TIMEOUT, || async {
        let info = op
            .replication_info(replica)
            .await
            .map_err(|e| e.to_string())?;
        let primary = op
            .replication_info(&members[0])
            .await
            .map_err(|e| e.to_string())?;
        match info.primary_link {
            Some(l) if l.link_up && l.replica_offset == primary.repl_offset => Ok(()),
            other => Err(format!("{other:?} vs {}", primary.repl_offset)),
        }
    })
    .await
    .unwrap();
    // While the replica is in sync (after the failover below it would be a primary whose
    // role change drops every replica connection, this one included).
    backup_takes_a_snapshot(&servers, &admin, replica).await;
    // The driver's other calls, run for real as the operator.
    op.config_get(replica, "maxmemory").await.unwrap();
    op.config_set(replica, &[("maxmemory-policy".into(), "noeviction".into())])
        .await
        .unwrap();
    op.config_rewrite(replica).await.unwrap();
    op.acl_users(replica).await.unwrap();
    op.acl_load(replica).await.unwrap();
    assert!(!op.cancel_slot_migrations(&members[0]).await.unwrap());
    op.failover(replica, FailoverMode::Default).await.unwrap();

    // Before the refusals below, which Valkey logs.
    assert_no_internal_denials(&admin, &members).await;
    operator_may_run_what_the_driver_sends(&admin, &members[1], ids[0].as_str()).await;
    operator_can_do_nothing_else(&op, &members[1]).await;
    replication_can_only_replicate_and_write(&servers, &members[1]).await;
    backup_can_do_nothing_else(&servers, &members[1]).await;
    restore_can_only_restore(&servers, &members[1]).await;
    metrics_reads_statistics_and_nothing_else(&servers, &members[1]).await;
}

/// Each of `commands` is refused to `user` (`client`) on `m` for want of permission.
async fn refused(client: &FredDriver, user: &str, m: &MemberAddr, commands: &[&[&str]]) {
    for words in commands {
        let outcome = run(client, m, words).await;
        assert!(
            matches!(&outcome, Err(e) if e.starts_with("NOPERM")),
            "{user} ran {words:?}: {outcome:?}"
        );
    }
}

/// The metrics exporter's user runs what the exporter sends (with its config command off)
/// and nothing else: no key, no `CONFIG` (which would return `masterauth`), no client list.
async fn metrics_reads_statistics_and_nothing_else(servers: &LocalServers, m: &MemberAddr) {
    let password = servers.operator_acl().unwrap().metrics_password.clone();
    let metrics = driver(Credentials {
        username: METRICS_ACL_USERNAME.into(),
        password,
    });
    for words in [
        &["INFO", "ALL"][..],
        &["PING"],
        &["CLUSTER", "INFO"],
        &["SLOWLOG", "GET", "10"],
        &["SLOWLOG", "LEN"],
        &["LATENCY", "LATEST"],
        &["CLIENT", "SETNAME", "redis_exporter"],
    ] {
        let outcome = run(&metrics, m, words).await;
        assert!(
            outcome.is_ok(),
            "{METRICS_ACL_USERNAME} may run {words:?}: {outcome:?}"
        );
    }
    refused(
        &metrics,
        METRICS_ACL_USERNAME,
        m,
        &[
            &["GET", "key:1"][..],
            &["SET", "key:1", "x"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["DBSIZE"],
            &["CONFIG", "GET", "masterauth"],
            &["CONFIG", "GET", "maxmemory"],
            &["CLIENT", "LIST"],
            &["CLUSTER", "NODES"],
            &["ACL", "LIST"],
            &["SLOWLOG", "RESET"],
            &["PUBLISH", "channel", "x"],
            &["SYNC"],
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_users_do_their_job_and_no_more_on_9_0() {
    internal_users_do_their_job_and_no_more(ValkeyBuild::V9_0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_users_do_their_job_and_no_more_on_9_1() {
    internal_users_do_their_job_and_no_more(ValkeyBuild::V9_1).await;
}
