//! vk-bench's floors on local valkey-server processes (no Kubernetes, no e2e feature): both
//! run at a tiny size and must finish with the figures they promise.
//!
//! Binaries: `VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1`, else the cache filled by
//! `e2e/tools/install.sh` (as the root crate's tests/driver_*.rs). A missing binary fails the
//! test with instructions. `cargo test -p valkey-e2e --test floors -- --ignored --nocapture`
//! runs them at the bench's size ([`PRELOADED`] keys) and prints the figures.

use valkey_e2e::floors::{
    MigrateFloor, RolloutFloor, cli_formation_floor, migrate_slots_floor, rollout_shard_floor,
};
use valkey_e2e::workload::PRELOADED;
use valkey_operator::driver::testing::ValkeyBuild;

fn print_rollout(floor: &RolloutFloor) {
    for (shard, s) in floor.per_shard.iter().enumerate() {
        println!(
            "rollout floor shard {shard}: seconds={:.3} start={:.3} introduce={:.3} sync={:.3} failover={:.3} retire={:.3}",
            s.seconds, s.start, s.introduce, s.sync, s.failover, s.retire
        );
    }
    println!(
        "rollout floor: total_seconds={:.3} mean_per_shard_seconds={:.3} settings={:?}",
        floor.total, floor.mean_per_shard, floor.settings
    );
}

fn print_migrate(keys: usize, floor: &MigrateFloor) {
    println!(
        "migrate floor ({keys} keys): atomic_seconds={:.3} slots_moved={} keys_moved={} settings={:?}",
        floor.seconds, floor.slots_moved, floor.keys_moved, floor.settings
    );
    for why in &floor.stalled_attempts {
        println!("migrate floor ({keys} keys): an attempt stalled and was retried: {why}");
    }
    match &floor.key_by_key {
        Some(Err(why)) => println!("migrate floor ({keys} keys): key-by-key floor failed: {why}"),
        Some(Ok(k)) => println!(
            "migrate floor ({keys} keys): valkey_cli_reshard_seconds={:.3} slots_moved={} keys_moved={}",
            k.seconds, k.slots_moved, k.keys_moved
        ),
        None => println!("migrate floor ({keys} keys): no valkey-cli, key-by-key floor skipped"),
    }
}

#[tokio::test]
async fn the_rollout_floor_replaces_every_shard() {
    let floor = rollout_shard_floor().await.expect("rollout floor");
    print_rollout(&floor);
    assert_eq!(floor.per_shard.len(), 3);
    let sum: f64 = floor.per_shard.iter().map(|s| s.seconds).sum();
    assert!((floor.total - sum).abs() < 1e-9);
    assert!(
        floor
            .per_shard
            .iter()
            .all(|s| s.seconds > 0.0 && s.sync > 0.0)
    );
    assert!(
        floor
            .settings
            .contains(&("repl-diskless-sync-delay".into(), "0".into())),
        "the bench menu's sync delay is applied: {:?}",
        floor.settings
    );
}

#[tokio::test]
async fn the_migrate_floor_moves_the_planned_slots_with_their_keys() {
    let keys = 1_000;
    let floor = migrate_slots_floor(keys).await.expect("migrate floor");
    print_migrate(keys, &floor);
    // 5462 + 5461 + 5461 down to 3277 + 3277 + 3277 (see src/plan/rebalance.rs).
    assert_eq!(floor.slots_moved, 6553);
    // About 6553 / 16384 of the keys.
    assert!(
        (300..500).contains(&floor.keys_moved),
        "{}",
        floor.keys_moved
    );
    if let Some(k) = &floor.key_by_key {
        let k = k.as_ref().expect("the key-by-key floor");
        assert_eq!(k.slots_moved, floor.slots_moved);
        assert!((300..500).contains(&k.keys_moved), "{}", k.keys_moved);
    }
}

/// The floors at the bench's size, for their figures.
#[tokio::test]
#[ignore = "minutes long; run with --ignored to print the figures at the bench's size"]
async fn the_floors_at_the_bench_size() {
    let floor = migrate_slots_floor(PRELOADED).await.expect("migrate floor");
    print_migrate(PRELOADED, &floor);
    print_rollout(&rollout_shard_floor().await.expect("rollout floor"));
}

/// `valkey-cli --cluster create` forms the bench's shape and the floor says how long it took
/// (the build the cache holds carries valkey-cli).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_formation_floor_forms_three_shards_with_a_replica_each() {
    let seconds = cli_formation_floor(ValkeyBuild::V9_0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
        .expect("valkey-cli beside valkey-server 9.0");
    println!("valkey-cli --cluster create floor: {seconds:.3} s");
    assert!(seconds > 0.0);
}
