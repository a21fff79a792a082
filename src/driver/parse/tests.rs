//! Parser tests. Fixtures under `src/driver/fixtures/` were captured from real Valkey 9.0.0
//! servers by `tests/driver_cluster.rs` (`VALKEY_DRIVER_CAPTURE_FIXTURES=src/driver/fixtures`);
//! inline lines marked "synthetic" cover states that are hard to provoke on purpose.

use super::*;

const NODES_PRIMARY: &str = include_str!("../fixtures/cluster-nodes-primary.txt");
const NODES_REPLICA: &str = include_str!("../fixtures/cluster-nodes-replica.txt");
const NODES_MIGRATING: &str = include_str!("../fixtures/cluster-nodes-migrating.txt");
const NODES_IMPORTING: &str = include_str!("../fixtures/cluster-nodes-importing.txt");
const CLUSTER_INFO: &str = include_str!("../fixtures/cluster-info.txt");
const REPL_PRIMARY: &str = include_str!("../fixtures/info-replication-primary.txt");
const REPL_REPLICA: &str = include_str!("../fixtures/info-replication-replica.txt");
const SERVER: &str = include_str!("../fixtures/info-server.txt");
const USAGE: &str = include_str!("../fixtures/info-memory-cpu-stats.txt");
const SHARDS: &str = include_str!("../fixtures/cluster-shards.json");
const MIGRATIONS_EXPORT: &str = include_str!("../fixtures/getslotmigrations-export.json");
const MIGRATIONS_IMPORT: &str = include_str!("../fixtures/getslotmigrations-import.json");

fn reply(json: &str) -> Reply {
    serde_json::from_str(json).expect("fixture is a serialized Reply")
}

// ---- CLUSTER NODES ---------------------------------------------------------------------

#[test]
fn cluster_nodes_of_a_formed_3x1_cluster() {
    let nodes = parse_cluster_nodes(NODES_PRIMARY).unwrap();
    assert_eq!(nodes.len(), 6);
    let myself: Vec<_> = nodes.iter().filter(|n| n.flags.myself).collect();
    assert_eq!(myself.len(), 1);
    let me = myself[0];
    assert!(me.flags.primary && !me.flags.replica);
    assert_eq!(me.slots, vec![0..=5461]);
    assert_eq!(me.ip, "127.0.0.1");
    assert_eq!(me.bus_port, me.port + 10000);
    assert!(me.link_connected);
    assert!(me.primary_id.is_none());

    let primaries: Vec<_> = nodes.iter().filter(|n| n.flags.primary).collect();
    let replicas: Vec<_> = nodes.iter().filter(|n| n.flags.replica).collect();
    assert_eq!((primaries.len(), replicas.len()), (3, 3));
    // Every replica follows a primary listed in the same output.
    for r in &replicas {
        let p = r.primary_id.as_ref().expect("replica has a primary");
        assert!(primaries.iter().any(|x| &x.id == p), "{p} is not a primary");
        assert!(r.slots.is_empty());
    }
    let total: usize = nodes
        .iter()
        .flat_map(|n| n.slots.iter())
        .map(crate::driver::slots::range_len)
        .sum();
    assert_eq!(total, 16384);
    assert!(nodes.iter().all(|n| n.id.as_str().len() == 40));
    assert!(nodes.iter().all(|n| !n.is_failing()));
}

#[test]
fn cluster_nodes_seen_from_a_replica() {
    let nodes = parse_cluster_nodes(NODES_REPLICA).unwrap();
    let me = nodes.iter().find(|n| n.flags.myself).unwrap();
    assert!(me.flags.replica);
    let primary = me.primary_id.as_ref().unwrap();
    assert!(nodes.iter().any(|n| &n.id == primary && n.flags.primary));
}

#[test]
fn cluster_nodes_open_slot_markers() {
    let src = parse_cluster_nodes(NODES_MIGRATING).unwrap();
    let me = src.iter().find(|n| n.flags.myself).unwrap();
    assert_eq!(me.slots, vec![0..=5461]);
    assert_eq!(me.migrating.len(), 1);
    assert_eq!(me.migrating[0].slot, 0);
    assert!(me.importing.is_empty());
    let target = &me.migrating[0].peer;
    assert!(src.iter().any(|n| &n.id == target && !n.flags.myself));

    let dst = parse_cluster_nodes(NODES_IMPORTING).unwrap();
    let me = dst.iter().find(|n| n.flags.myself).unwrap();
    assert_eq!(me.importing.len(), 1);
    assert_eq!(me.importing[0].slot, 0);
    assert!(me.migrating.is_empty());
    // The importing node is the migrating node's target, and vice versa.
    assert_eq!(&me.id, target);
    let source = src.iter().find(|n| n.flags.myself).unwrap();
    assert_eq!(me.importing[0].peer, source.id);
}

#[test]
fn cluster_nodes_failure_flags_hostnames_and_noaddr() {
    // synthetic: flags Valkey prints for failing, handshaking and address-less nodes.
    let text = "\
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.0.0.1:6379@16379,my-node-0.svc myself,master - 0 0 3 connected 0-100 200 300-400
bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 10.0.0.2:6379@16379 master,fail - 1700000000000 1700000000000 4 disconnected
cccccccccccccccccccccccccccccccccccccccc 10.0.0.3:6379@16379 slave,fail?,nofailover aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0 1700000000000 3 connected
dddddddddddddddddddddddddddddddddddddddd :0@0 master,noaddr - 0 0 0 disconnected
eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee 10.0.0.5:6379@16379 handshake - 0 0 0 connected
ffffffffffffffffffffffffffffffffffffffff [::1]:6379@16379 noflags - 0 0 0 connected
";
    let nodes = parse_cluster_nodes(text).unwrap();
    assert_eq!(nodes.len(), 6);
    assert_eq!(nodes[0].hostname.as_deref(), Some("my-node-0.svc"));
    assert_eq!(nodes[0].slots, vec![0..=100, 200..=200, 300..=400]);
    assert!(nodes[1].flags.fail && !nodes[1].link_connected && nodes[1].is_failing());
    assert_eq!(nodes[1].ping_sent, 1_700_000_000_000);
    assert!(nodes[2].flags.pfail && nodes[2].flags.nofailover && nodes[2].flags.replica);
    assert_eq!(nodes[2].config_epoch, 3);
    assert!(nodes[3].flags.noaddr);
    assert_eq!((nodes[3].ip.as_str(), nodes[3].port), ("", 0));
    assert!(nodes[4].flags.handshake);
    assert_eq!(nodes[5].ip, "[::1]");
    assert_eq!(nodes[5].flags, NodeFlags::default());
}

#[test]
fn cluster_nodes_unknown_flags_are_kept() {
    let text = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.0.0.1:6379@16379 master,shiny - 0 0 1 connected";
    let nodes = parse_cluster_nodes(text).unwrap();
    assert_eq!(nodes[0].flags.other, vec!["shiny".to_owned()]);
}

#[test]
fn cluster_nodes_rejects_garbage_with_the_line() {
    let err = parse_cluster_nodes("not a nodes line").unwrap_err();
    assert!(err.detail.contains("not a nodes line"), "{err}");
    let err = parse_cluster_nodes(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.0.0.1:6379@16379 master - 0 0 1 connected 5-x",
    )
    .unwrap_err();
    assert!(err.detail.contains("5-x"), "{err}");
    let err = parse_cluster_nodes(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 10.0.0.1:6379@16379 master - 0 0 1 sideways",
    )
    .unwrap_err();
    assert!(err.detail.contains("sideways"), "{err}");
    assert!(parse_cluster_nodes("").unwrap().is_empty());
}

// ---- CLUSTER INFO ----------------------------------------------------------------------

#[test]
fn cluster_info_of_a_healthy_cluster() {
    let info = parse_cluster_info(CLUSTER_INFO).unwrap();
    assert!(info.state_ok);
    assert_eq!(info.slots_assigned, 16384);
    assert_eq!(info.slots_ok, 16384);
    assert_eq!((info.slots_pfail, info.slots_fail), (0, 0));
    assert_eq!(info.known_nodes, 6);
    assert_eq!(info.size, 3);
    assert!(info.current_epoch >= info.my_epoch);
}

#[test]
fn cluster_info_of_a_fresh_node() {
    // synthetic, shaped like a node before MEET.
    let text = "cluster_state:fail\r\ncluster_slots_assigned:0\r\ncluster_slots_ok:0\r\n\
                cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n\
                cluster_size:0\r\ncluster_current_epoch:0\r\ncluster_my_epoch:0\r\n";
    let info = parse_cluster_info(text).unwrap();
    assert!(!info.state_ok);
    assert_eq!(
        (info.slots_assigned, info.known_nodes, info.size),
        (0, 1, 0)
    );
    let err = parse_cluster_info("cluster_state:ok\n").unwrap_err();
    assert!(err.detail.contains("cluster_slots_assigned"), "{err}");
}

// ---- INFO replication / server ---------------------------------------------------------

#[test]
fn replication_info_of_a_primary_with_one_replica() {
    let r = parse_replication_info(REPL_PRIMARY).unwrap();
    assert_eq!(r.role, Role::Primary);
    assert!(r.primary_link.is_none());
    assert_eq!(r.connected_replicas.len(), 1);
    let c = &r.connected_replicas[0];
    assert_eq!(c.ip, "127.0.0.1");
    assert!(c.is_online());
    assert!(c.offset >= 0 && c.lag >= 0);
    assert!(r.repl_offset > 0);
    assert_eq!(r.failover_state, "no-failover");
}

#[test]
fn replication_info_of_a_synced_replica() {
    let r = parse_replication_info(REPL_REPLICA).unwrap();
    assert_eq!(r.role, Role::Replica);
    let link = r.primary_link.unwrap();
    assert!(link.link_up && !link.sync_in_progress);
    assert_eq!(link.host, "127.0.0.1");
    assert!(link.replica_offset > 0);
    assert!(r.connected_replicas.is_empty());
}

#[test]
fn replication_info_during_initial_sync_and_with_many_replicas() {
    // synthetic, shaped like the 9.0 output right after REPLICATE.
    let replica = "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n\
                   master_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\n\
                   master_sync_in_progress:1\r\nslave_repl_offset:1\r\nmaster_repl_offset:0\r\n";
    let r = parse_replication_info(replica).unwrap();
    let link = r.primary_link.unwrap();
    assert!(!link.link_up && link.sync_in_progress);
    assert_eq!(link.last_io_seconds_ago, -1);

    let primary = "role:master\r\nconnected_slaves:11\r\n\
                   slave10:ip=10.0.0.11,port=6379,state=online,offset=90,lag=0,type=replica\r\n\
                   slave2:ip=10.0.0.3,port=6379,state=wait_bgsave,offset=0,lag=0,type=replica\r\n\
                   master_repl_offset:100\r\n";
    let r = parse_replication_info(primary).unwrap();
    // Ordered by index (slave2 before slave10), not by text.
    let ports: Vec<&str> = r.connected_replicas.iter().map(|c| c.ip.as_str()).collect();
    assert_eq!(ports, ["10.0.0.3", "10.0.0.11"]);
    assert!(!r.connected_replicas[0].is_online());

    let err = parse_replication_info("role:sentinel\r\n").unwrap_err();
    assert!(err.detail.contains("sentinel"), "{err}");
}

#[test]
fn server_info_reports_the_valkey_version() {
    let s = parse_server_info(SERVER).unwrap();
    assert_eq!(s.version, Version::new(9, 0, 0));
    assert!(s.version.supports_atomic_slot_migration());
    assert!(s.cluster_mode);
    assert!(s.tcp_port > 0);
    assert_eq!(s.run_id.len(), 40);
    assert_eq!(s.aof_bytes, None, "no persistence section");
    let with_aof =
        format!("{SERVER}\r\n# Persistence\r\naof_enabled:1\r\naof_current_size:12582912\r\n");
    assert_eq!(
        parse_server_info(&with_aof).unwrap().aof_bytes,
        Some(12 << 20)
    );
    let aof_off = format!("{SERVER}\r\n# Persistence\r\naof_enabled:0\r\n");
    assert_eq!(parse_server_info(&aof_off).unwrap().aof_bytes, None);
}

#[test]
fn server_info_reports_what_the_member_uses() {
    let s = parse_server_info(&format!("{SERVER}\r\n{USAGE}")).unwrap();
    assert_eq!(
        s.usage,
        Usage {
            used_memory: 2625688,
            not_counted_for_evict: 0,
            maxmemory: 100 << 20,
            cpu_micros: 5974,
            net_bytes: 73 + 35,
        }
    );
    // Replication buffers are not held against maxmemory.
    let buffered = Usage {
        used_memory: 1000,
        not_counted_for_evict: 300,
        ..Usage::default()
    };
    assert_eq!(buffered.counted_memory(), 700);
    assert_eq!(parse_server_info(SERVER).unwrap().usage.maxmemory, 0);
}

#[test]
fn versions_parse_and_order() {
    assert_eq!(Version::parse("9.1.2"), Some(Version::new(9, 1, 2)));
    assert_eq!(Version::parse("8.1"), Some(Version::new(8, 1, 0)));
    assert_eq!(Version::parse("9.0.0-rc1"), Some(Version::new(9, 0, 0)));
    assert_eq!(Version::parse("nine"), None);
    assert!(Version::new(9, 1, 2) > Version::new(9, 0, 10));
    assert!(!Version::new(8, 1, 4).supports_atomic_slot_migration());
    // Old servers only report redis_version.
    let s = parse_server_info("redis_version:7.2.4\r\ntcp_port:6379\r\nuptime_in_seconds:5\r\n")
        .unwrap();
    assert_eq!(s.version, Version::new(7, 2, 4));
    assert!(!s.cluster_mode);
}

// ---- CLUSTER SHARDS --------------------------------------------------------------------

#[test]
fn cluster_shards_resp2_of_a_3x1_cluster() {
    let shards = parse_cluster_shards(&reply(SHARDS)).unwrap();
    assert_eq!(shards.len(), 3);
    let mut all = Vec::new();
    for shard in &shards {
        assert_eq!(shard.nodes.len(), 2);
        let primary = shard.primary().unwrap();
        assert_eq!(primary.health, Health::Online);
        assert_eq!(primary.ip, "127.0.0.1");
        assert!(primary.port.is_some() && primary.tls_port.is_none());
        assert_eq!(
            shard
                .nodes
                .iter()
                .filter(|n| n.role == Role::Replica)
                .count(),
            1
        );
        all.extend(shard.slots.clone());
    }
    assert_eq!(crate::driver::slots::count_slots(all), 16384);
}

#[test]
fn cluster_shards_resp3_maps_and_odd_shapes() {
    // synthetic RESP3 shape (maps instead of flat arrays), with a failed replica and a
    // shard without slots (a fresh primary before slot assignment).
    let t = |s: &str| Reply::Text(s.to_owned());
    let node = |id: &str, role: &str, health: &str| {
        Reply::Map(vec![
            (t("id"), t(id)),
            (t("port"), Reply::Int(6379)),
            (t("ip"), t("10.0.0.1")),
            (t("endpoint"), t("10.0.0.1")),
            (t("hostname"), t("node-a")),
            (t("role"), t(role)),
            (t("replication-offset"), Reply::Int(42)),
            (t("health"), t(health)),
        ])
    };
    let r = Reply::Array(vec![
        Reply::Map(vec![
            (
                t("slots"),
                Reply::Array(vec![
                    Reply::Int(0),
                    Reply::Int(10),
                    Reply::Int(20),
                    Reply::Int(30),
                ]),
            ),
            (
                t("nodes"),
                Reply::Array(vec![
                    node("a", "master", "online"),
                    node("b", "replica", "failed"),
                ]),
            ),
        ]),
        Reply::Map(vec![
            (t("slots"), Reply::Array(vec![])),
            (
                t("nodes"),
                Reply::Array(vec![node("c", "master", "loading")]),
            ),
        ]),
    ]);
    let shards = parse_cluster_shards(&r).unwrap();
    assert_eq!(shards[0].slots, vec![0..=10, 20..=30]);
    assert_eq!(shards[0].nodes[1].health, Health::Failed);
    assert_eq!(shards[0].nodes[0].hostname.as_deref(), Some("node-a"));
    assert_eq!(shards[0].nodes[0].replication_offset, 42);
    assert!(shards[1].slots.is_empty());
    assert_eq!(shards[1].nodes[0].health, Health::Loading);

    assert!(parse_cluster_shards(&Reply::Text("nope".into())).is_err());
    let odd = Reply::Array(vec![Reply::Map(vec![(
        t("slots"),
        Reply::Array(vec![Reply::Int(1)]),
    )])]);
    assert!(parse_cluster_shards(&odd).is_err());
}

// ---- CLUSTER GETSLOTMIGRATIONS ---------------------------------------------------------

#[test]
fn slot_migrations_after_a_successful_atomic_migration() {
    let export = parse_slot_migrations(&reply(MIGRATIONS_EXPORT)).unwrap();
    let import = parse_slot_migrations(&reply(MIGRATIONS_IMPORT)).unwrap();
    assert_eq!((export.len(), import.len()), (1, 1));
    let (e, i) = (&export[0], &import[0]);
    assert_eq!(e.operation, MigrationOperation::Export);
    assert_eq!(i.operation, MigrationOperation::Import);
    assert_eq!(e.slot_ranges, vec![0..=199]);
    assert_eq!(e.state, MigrationState::Success);
    assert!(e.state.is_finished());
    // Both sides describe the same job.
    assert_eq!(e.name, i.name);
    assert_eq!(
        (&e.source_node, &e.target_node),
        (&i.source_node, &i.target_node)
    );
    assert!(e.message.is_empty());
    assert!(e.create_time > 0);
}

#[test]
fn slot_migrations_in_progress_failed_and_multi_range() {
    // synthetic, field names as 9.0 prints them; states from the 9.0 sources.
    let t = |s: &str| Reply::Text(s.to_owned());
    let job = |state: &str, ranges: &str, message: &str| {
        Reply::Array(vec![
            t("name"),
            t("job"),
            t("operation"),
            t("EXPORT"),
            t("slot_ranges"),
            t(ranges),
            t("target_node"),
            t("b"),
            t("source_node"),
            t("a"),
            t("create_time"),
            Reply::Int(1),
            t("last_update_time"),
            Reply::Int(2),
            t("state"),
            t(state),
            t("message"),
            t(message),
        ])
    };
    let r = Reply::Array(vec![
        job("snapshotting", "0-99 200-299", ""),
        job(
            "failed",
            "5",
            "Failed to process command during slot migration",
        ),
        job("cancelled", "6-7", "Cancelled by user"),
    ]);
    let jobs = parse_slot_migrations(&r).unwrap();
    assert_eq!(
        jobs[0].state,
        MigrationState::InProgress("snapshotting".into())
    );
    assert!(!jobs[0].state.is_finished());
    assert_eq!(jobs[0].slot_ranges, vec![0..=99, 200..=299]);
    assert_eq!(jobs[1].state, MigrationState::Failed);
    assert_eq!(jobs[1].slot_ranges, vec![5..=5]);
    assert!(jobs[1].message.starts_with("Failed"));
    assert_eq!(jobs[2].state, MigrationState::Cancelled);
    assert!(
        parse_slot_migrations(&Reply::Array(vec![]))
            .unwrap()
            .is_empty()
    );
    let bad = Reply::Array(vec![job("success", "0-x", "")]);
    assert!(parse_slot_migrations(&bad).is_err());
}

#[test]
fn slot_migrations_listed_by_a_replica_have_no_peers() {
    // As a 9.0.0 replica prints the jobs it replicated (seen on the local cluster).
    let t = |s: &str| Reply::Text(s.to_owned());
    let r = Reply::Array(vec![Reply::Array(vec![
        t("name"),
        t("68e6cc91a91f611672a916e2618abef989f96432"),
        t("operation"),
        t("IMPORT"),
        t("slot_ranges"),
        t("8739-9830"),
        t("create_time"),
        Reply::Int(1795994585),
        t("last_update_time"),
        Reply::Int(1795994585),
        t("last_ack_time"),
        Reply::Int(1795994585),
        t("state"),
        t("success"),
        t("message"),
        t(""),
        t("cow_size"),
        Reply::Int(0),
    ])]);
    let jobs = parse_slot_migrations(&r).unwrap();
    assert_eq!(jobs[0].slot_ranges, vec![8739..=9830]);
    assert_eq!(jobs[0].source_node.as_str(), "");
    assert_eq!(jobs[0].last_ack_time, 1795994585);
}

// ---- generic -----------------------------------------------------------------------------

#[test]
fn kv_lines_skip_headers_and_keep_colons_in_values() {
    let kv = parse_kv_lines("# Server\r\nexecutable:/a:b\r\n\r\nfoo:bar\r\n");
    assert_eq!(kv.get("executable").map(String::as_str), Some("/a:b"));
    assert_eq!(kv.get("foo").map(String::as_str), Some("bar"));
    assert_eq!(kv.len(), 2);
}
