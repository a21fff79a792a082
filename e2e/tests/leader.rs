//! Leader election on the local cluster: two operator replicas, one Lease. Only the holder
//! reconciles (the standby's reconcile counters stay at zero) while both serve the webhooks;
//! a frozen leader (SIGSTOP past its lease) is replaced by the standby, which reconciles a
//! change made meanwhile, and the old leader exits when it wakes instead of acting; a deleted
//! leader pod hands the lease over at once (released on SIGTERM, not left to expire).
//! Runs alone (it freezes the operator): `make e2e` runs it after the parallel suites.
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::faults::PodRef;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::pod_metrics as metrics;
use valkey_e2e::valkey::{member_pods, wait_state};
use valkey_e2e::workload::{Menu, apply, cluster};
use valkey_operator::api::{ClusterState, ValkeyCluster};
use valkey_operator::controller::leader::{LEASE_NAME, LEASE_SECONDS};

const NS: &str = "valkey-operator-system";
const DEPLOYMENT: &str = "valkey-operator";

async fn scale_operator(client: &Client, replicas: i32) -> anyhow::Result<()> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .patch(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?;
    Ok(())
}

/// The operator pods that are Ready and not being deleted, by name.
async fn ready_operator_pods(client: &Client) -> anyhow::Result<Vec<Pod>> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect())
}

async fn wait_ready_pods(client: &Client, n: usize) -> anyhow::Result<Vec<Pod>> {
    wait_for(
        &format!("{n} ready operator pods"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async move {
            let pods = ready_operator_pods(client).await?;
            Ok((pods.len() == n).then_some(pods))
        },
    )
    .await
}

async fn holder(client: &Client) -> anyhow::Result<Option<String>> {
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get(LEASE_NAME)
        .await?;
    Ok(lease.spec.and_then(|s| s.holder_identity))
}

/// The value of a sample line (`name{labels} value`), 0 when absent.
fn sample(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Reconciles run by the operator whose /metrics page this is: every sample of
/// `valkey_operator_reconciles_total` (each controller, each result), 0 when none.
fn reconciles(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("valkey_operator_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

/// (leader, standby) among two ready pods, checked against the Lease and both /metrics.
async fn roles(client: &Client) -> anyhow::Result<(Pod, Pod)> {
    wait_for(
        "one leader and one standby",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async move {
            let pods = ready_operator_pods(client).await?;
            let Some(holder) = holder(client).await? else {
                return Ok(None);
            };
            let (leaders, standbys): (Vec<Pod>, Vec<Pod>) =
                pods.into_iter().partition(|p| p.name_any() == holder);
            if leaders.len() != 1 || standbys.len() != 1 {
                return Ok(None);
            }
            let (leader, standby) = (leaders[0].clone(), standbys[0].clone());
            let (lm, sm) = (metrics(&leader)?, metrics(&standby)?);
            if sample(&lm, "valkey_operator_leader ") != 1.0
                || sample(&sm, "valkey_operator_leader ") != 0.0
            {
                return Ok(None);
            }
            Ok(Some((leader, standby)))
        },
    )
    .await
}

/// Waits until cluster `name` has `n` member pods (the leader of the moment made them).
async fn wait_members(client: &Client, ns: &str, name: &str, n: usize) -> anyhow::Result<()> {
    wait_for(
        &format!("{ns}/{name} to have {n} members"),
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async move { Ok((member_pods(client, ns, name).await?.len() == n).then_some(())) },
    )
    .await
}

async fn set_replicas(client: &Client, ns: &str, name: &str, n: i32) -> anyhow::Result<()> {
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicasPerShard": n}})),
        )
        .await?;
    Ok(())
}

/// Waits until the operator's one pod holds a lease that is not about to expire. Suites
/// before this one freeze nodes and kill the operator; a standby started while the lease is
/// expired (its holder just thawed) rightly takes it, and the old holder then exits into its
/// restart back-off, which is not what this test is about.
async fn wait_fresh_lease(client: &Client) -> anyhow::Result<()> {
    wait_for(
        "the operator to hold a fresh lease",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async move {
            let pods = ready_operator_pods(client).await?;
            let lease = Api::<Lease>::namespaced(client.clone(), NS)
                .get(LEASE_NAME)
                .await?;
            let spec = lease.spec.unwrap_or_default();
            let (Some(holder), Some(renewed), Some(duration)) = (
                spec.holder_identity,
                spec.renew_time,
                spec.lease_duration_seconds,
            ) else {
                return Ok(None);
            };
            let renewed: std::time::SystemTime = renewed.0.into();
            let left = (renewed + Duration::from_secs(duration as u64))
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            let holds = pods.len() == 1 && pods[0].name_any() == holder;
            Ok((holds && left > Duration::from_secs(5)).then_some(()))
        },
    )
    .await
}

/// Both serve the webhooks: both are endpoints of the webhook Service.
async fn both_replicas_serve_the_webhooks(client: &Client) -> anyhow::Result<()> {
    let endpoints = Api::<Endpoints>::namespaced(client.clone(), NS)
        .get("valkey-operator-webhook")
        .await?;
    let addresses = endpoints
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten())
        .count();
    assert_eq!(addresses, 2, "both replicas serve the webhooks");
    Ok(())
}

/// Freeze the leader past its lease (but not past its liveness probe, 3 x 10 s: the
/// kubelet would restart it and prove nothing): the standby takes over and reconciles
/// a change made meanwhile; the old leader, thawed, finds the lease gone and exits on
/// its own (its container restarts and stands by) instead of reconciling.
/// Returns the old leader's pod as it restarted.
async fn a_frozen_leader_is_replaced_and_exits_when_thawed(
    client: &Client,
    ns: &str,
    leader: &Pod,
    standby: &Pod,
) -> anyhow::Result<Pod> {
    let frozen = PodRef::find(NS, &leader.name_any())?;
    let log_before = frozen
        .log_path("operator")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let restarts_before = restarts(leader);
    frozen.pause("operator")?;
    let paused = Instant::now();
    set_replicas(client, ns, "led", 1).await?;
    let took_over = wait_for(
        "the standby to take the lease",
        Duration::from_secs(LEASE_SECONDS * 2),
        Duration::from_millis(200),
        || {
            let client = client.clone();
            let standby = standby.name_any();
            async move { Ok((holder(&client).await?.as_deref() == Some(&standby)).then_some(())) }
        },
    )
    .await;
    let takeover = paused.elapsed();
    let woke = Instant::now();
    frozen.resume("operator")?;
    took_over?;
    println!(
        "frozen leader: standby holds the lease {:.1} s after the freeze (lease {LEASE_SECONDS} s)",
        takeover.as_secs_f64()
    );
    let old = wait_for(
        "the thawed leader to restart",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let client = client.clone();
            let name = leader.name_any();
            async move {
                let pod = Api::<Pod>::namespaced(client, NS).get(&name).await?;
                Ok((restarts(&pod) > restarts_before).then_some(pod))
            }
        },
    )
    .await?;
    println!(
        "thawed leader exited {:.1} s after SIGCONT",
        woke.elapsed().as_secs_f64()
    );
    // The exited process's last lines are in its previous run's log once the new one has
    // started.
    let current = frozen.log_path("operator")?;
    let previous = frozen.previous_log_path("operator")?;
    let mut new_lines = String::new();
    for path in [previous, current] {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let tail = if text.starts_with(log_before.as_str()) {
            &text[log_before.len()..]
        } else {
            &text[..]
        };
        new_lines.push_str(tail);
    }
    assert!(
        new_lines.contains("lost the leader lease"),
        "the thawed leader exited for another reason than the lost lease:\n{new_lines}"
    );
    wait_members(client, ns, "led", 2).await?;
    wait_state(
        client,
        ns,
        "led",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    assert!(
        reconciles(&metrics(standby)?) > 0.0,
        "the new leader reconciles"
    );
    Ok(old)
}

/// A deleted leader releases the lease on SIGTERM: another replica leads at once (the
/// standby, or the Deployment's replacement pod if it starts first and finds the lease
/// free while the standby waits out the old expiry).
async fn a_deleted_leader_hands_the_lease_over_at_once(
    client: &Client,
    leader2: &Pod,
    standby2: &Pod,
) -> anyhow::Result<()> {
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&leader2.name_any(), &DeleteParams::default())
        .await?;
    let next = wait_for(
        "the lease to move to another replica",
        Duration::from_secs(LEASE_SECONDS * 4),
        Duration::from_millis(100),
        || {
            let client = client.clone();
            let old = leader2.name_any();
            async move { Ok(holder(&client).await?.filter(|h| *h != old)) }
        },
    )
    .await?;
    let handover = deleted.elapsed();
    println!(
        "deleted leader: {next} holds the lease {:.1} s after the delete (standby was {})",
        handover.as_secs_f64(),
        standby2.name_any()
    );
    assert!(
        handover < Duration::from_secs(LEASE_SECONDS),
        "the lease was left to expire ({handover:?}) instead of being released"
    );
    Ok(())
}

#[tokio::test]
async fn one_replica_reconciles_and_a_standby_takes_over() -> anyhow::Result<()> {
    let client = client().await?;
    wait_fresh_lease(&client).await?;
    scale_operator(&client, 2).await?;
    let ns = TestNamespace::create(&client, "e2e-leader").await?;
    let menu = Menu::publish(&client, "e2e-leader", "9.0.0").await?;
    let result = async {
        wait_ready_pods(&client, 2).await?;
        let (leader, standby) = roles(&client).await?;
        println!(
            "leader {}, standby {}",
            leader.name_any(),
            standby.name_any()
        );

        both_replicas_serve_the_webhooks(&client).await?;

        // The leader provisions a cluster; the standby reconciles nothing.
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, "led", &menu.config, 1, 0),
        )
        .await?;
        wait_state(
            &client,
            &ns.name,
            "led",
            ClusterState::Active,
            Duration::from_secs(180),
        )
        .await?;
        assert_eq!(
            reconciles(&metrics(&standby)?),
            0.0,
            "the standby reconciled"
        );
        assert!(reconciles(&metrics(&leader)?) > 0.0);

        let old =
            a_frozen_leader_is_replaced_and_exits_when_thawed(&client, &ns.name, &leader, &standby)
                .await?;

        wait_ready_pods(&client, 2).await?;
        let (leader2, standby2) = roles(&client).await?;
        assert_eq!(leader2.name_any(), standby.name_any());
        assert_eq!(standby2.name_any(), old.name_any());

        a_deleted_leader_hands_the_lease_over_at_once(&client, &leader2, &standby2).await?;
        set_replicas(&client, &ns.name, "led", 0).await?;
        wait_members(&client, &ns.name, "led", 1).await?;
        anyhow::Ok(())
    }
    .await;
    scale_operator(&client, 1).await?;
    let _ = Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .delete("led", &DeleteParams::default())
        .await;
    if let Err(e) = wait_ready_pods(&client, 1).await {
        bail!("{e:#}; and the test said: {result:?}");
    }
    menu.remove(&client).await?;
    result
}
