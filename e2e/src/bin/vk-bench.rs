//! `make bench`: time-to-Active of a 3-shard x 1-replica ValkeyCluster on the running local
//! cluster, next to the formation floor measured in the same run (6 fresh valkey-servers
//! formed with driver calls alone), and their ratio. Prints figures; asserts nothing.
//!
//! Usage: vk-bench [--runs N]   (the local cluster must be up: `make up`)

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_operator::api::{ClusterState, ValkeyCluster};
use valkey_operator::driver::testing::{LocalServers, ValkeyBuild, form_cluster};
use valkey_operator::driver::{DriverConfig, FredDriver};

const SHARDS: usize = 3;

async fn formation_floor() -> anyhow::Result<Duration> {
    let servers = LocalServers::start(ValkeyBuild::V9_0, SHARDS * 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let driver = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let started = Instant::now();
    form_cluster(&driver, &servers.addrs(), SHARDS, Duration::from_secs(300))
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(started.elapsed())
}

async fn time_to_active(client: &Client) -> anyhow::Result<Duration> {
    let ns = TestNamespace::create(client, "bench").await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let cluster = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "bench", "namespace": ns.name},
        "spec": {"configRef": "standard", "shards": SHARDS, "replicasPerShard": 1},
    });
    let started = Instant::now();
    api.patch(
        "bench",
        &PatchParams::apply("vk-bench"),
        &Patch::Apply(&cluster),
    )
    .await?;
    wait_for(
        "the bench cluster to be Active",
        Duration::from_secs(300),
        Duration::from_millis(100),
        || {
            let api = api.clone();
            async move {
                let c = api.get("bench").await?;
                match c.status.and_then(|s| s.state) {
                    Some(ClusterState::Active) => Ok(Some(())),
                    Some(ClusterState::Blocked) => {
                        bail!("blocked: is the `standard` sample config installed? (make up)")
                    }
                    _ => Ok(None),
                }
            }
        },
    )
    .await?;
    Ok(started.elapsed())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut runs = 3usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().context("--runs needs a value")?.parse()?,
            other => bail!("unknown argument {other:?}; usage: vk-bench [--runs N]"),
        }
    }
    let client = client().await?;
    let mut floors = Vec::new();
    let mut actives = Vec::new();
    for run in 1..=runs {
        let floor = formation_floor().await?.as_secs_f64();
        let active = time_to_active(&client).await?.as_secs_f64();
        println!(
            "run={run} formation_floor_seconds={floor:.2} operator_time_to_active_seconds={active:.2} ratio={:.2}",
            active / floor
        );
        floors.push(floor);
        actives.push(active);
    }
    let (floor, active) = (median(floors), median(actives));
    println!(
        "median: formation_floor_seconds={floor:.2} operator_time_to_active_seconds={active:.2} ratio={:.2} (3 shards x 1 replica, valkey 9.0.0, {runs} runs)",
        active / floor
    );
    Ok(())
}
