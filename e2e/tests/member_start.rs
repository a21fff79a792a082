//! Hardening: a member that cannot start is not recreated hundreds of times (issue 31, item 6).
//!
//! Seen live before: a config Valkey refuses at start made 305 member pods in 4 minutes while
//! the status said `Degraded=False, Healthy`. Here a config with a setting admission cannot
//! judge (`hz: fast`, not an integer) on a 1 x 1 cluster: over two minutes each member gets
//! single-digit pods (started again with a growing backoff, never replaced by new
//! ValkeyNodes), the cluster says `MembersFailingToStart` quoting Valkey's last log line and
//! never claims every member answers; fixing the config brings the cluster to Active.
#![cfg(feature = "e2e")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{Menu, apply, cluster};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyNode};

const NAME: &str = "nostart";

fn condition(c: &ValkeyCluster, type_: &str) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

/// Watches for `span`: every pod uid each member had, the ValkeyNode names seen, and whether
/// the cluster ever said every member runs and answers.
async fn watch_pods(
    client: &Client,
    ns: &str,
    span: Duration,
) -> anyhow::Result<(BTreeMap<String, BTreeSet<String>>, BTreeSet<String>, bool)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let nodes: Api<ValkeyNode> = Api::namespaced(client.clone(), ns);
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let (mut uids, mut names) = (BTreeMap::<String, BTreeSet<String>>::new(), BTreeSet::new());
    let mut claimed_healthy = false;
    let started = Instant::now();
    while started.elapsed() < span {
        for p in pods.list(&ListParams::default()).await? {
            let uid = p.uid().unwrap_or_default();
            uids.entry(p.name_any()).or_default().insert(uid);
        }
        names.extend(
            nodes
                .list(&ListParams::default())
                .await?
                .iter()
                .map(|n| n.name_any()),
        );
        let c = clusters.get(NAME).await?;
        if let Some((_, _, message)) = condition(&c, "Degraded") {
            claimed_healthy |= message == "every member the cluster has runs and answers";
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((uids, names, claimed_healthy))
}

#[tokio::test]
async fn a_member_that_cannot_start_gets_few_pods_and_says_why() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-nostart").await?;
    let menu = Menu::publish(&client, "e2e-nostart", "9.0.0").await?;
    let configs: Api<ValkeyConfig> = Api::all(client.clone());
    let set_hz = |hz: serde_json::Value| json!({"spec": {"valkey": {"hz": hz}}});
    configs
        .patch(
            &menu.config,
            &PatchParams::default(),
            &Patch::Merge(set_hz(json!("fast"))),
        )
        .await?;
    apply(
        &client,
        &ns.name,
        cluster(&ns.name, NAME, &menu.config, 1, 1),
    )
    .await?;

    let (uids, names, claimed_healthy) =
        watch_pods(&client, &ns.name, Duration::from_secs(120)).await?;
    ensure!(
        names.len() == 2,
        "the members were replaced by new ValkeyNodes: {names:?}"
    );
    for (pod, seen) in &uids {
        ensure!(
            seen.len() < 10,
            "member {pod} had {} pods in two minutes",
            seen.len()
        );
    }
    ensure!(
        uids.values().any(|seen| seen.len() >= 2),
        "no member was started again: {uids:?}"
    );
    ensure!(
        !claimed_healthy,
        "the status said every member runs and answers"
    );
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), &ns.name)
        .get(NAME)
        .await?;
    let (status, reason, message) =
        condition(&c, "MembersFailingToStart").context("no MembersFailingToStart condition")?;
    ensure!(
        status == "True" && reason == "ValkeyExitedAtStart",
        "{status} {reason}"
    );
    ensure!(
        message.contains("couldn't be parsed into an integer"),
        "quotes Valkey's last log line: {message}"
    );
    let node = Api::<ValkeyNode>::namespaced(client.clone(), &ns.name)
        .get(&format!("{NAME}-0-0"))
        .await?;
    let failures = node.status.and_then(|s| s.start_failures).unwrap_or(0);
    ensure!(failures >= 1, "startFailures counted: {failures}");

    // The config fixed: the failed members are replaced with the current spec, Active.
    configs
        .patch(
            &menu.config,
            &PatchParams::default(),
            &Patch::Merge(set_hz(json!("10"))),
        )
        .await?;
    let c = wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    let (status, _, _) = condition(&c, "MembersFailingToStart").context("condition")?;
    ensure!(status == "False", "still failing after the fix");
    menu.remove(&client).await?;
    Ok(())
}
