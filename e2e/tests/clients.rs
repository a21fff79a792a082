//! The client guides of docs/connect.md (issue 33), run as the page shows them: the Python
//! (valkey-py), Go (valkey-go), Java (Lettuce, adaptive topology refresh) and Node.js
//! (iovalkey) programs are extracted from the page and built by `e2e/clients/prepare.sh`, then
//! run all at once against a 3 x 1 TLS cluster with cert-manager's certificate and an ACL user,
//! seeded with the client Service's name, each resolving names as an app in a pod does
//! (`valkey_e2e::guides`).
//!
//! Through `kubectl delete pod` of a primary (it hands over on SIGTERM) and a scale-out from 3
//! to 4 shards, every program keeps writing, and every write a program printed as acknowledged
//! reads back afterwards. The certificate names no IP address, so a program that dialled a
//! member by its pod IP instead of the hostname it announces would fail to verify it.
#![cfg(feature = "e2e")]

use anyhow::{Context as _, ensure};
use serde_json::json;

use valkey_e2e::certs;
use valkey_e2e::guides::{self, AppEnvironment, Program, every_program_writes};
use valkey_e2e::harness::{TestNamespace, client, kubectl_run};
use valkey_e2e::safety::{members_with, settled};
use valkey_e2e::workload::{self, Menu, PASSWORD};
use valkey_operator::api::NodeRole;

/// The image built with TLS (docs/local-cluster.md).
const TLS_TAG: &str = "9.1.2";
const CLUSTER: &str = "guides";
/// Writes each program acknowledges after each step before the next one starts.
const PROGRESS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_client_guides_write_through_a_primary_hand_over_and_a_scale_out()
-> anyhow::Result<()> {
    let built = guides::prepare()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-clients").await?;
    let ns = ns.name.as_str();
    certs::issue_for_clusters(&client, ns, &[CLUSTER]).await?;
    let menu = Menu::publish(&client, "e2e-clients", TLS_TAG).await?;
    let mut spec = workload::cluster(ns, CLUSTER, &menu.config, 3, 1);
    spec["spec"]["tls"] = json!({"secretRef": format!("{CLUSTER}-tls")});
    workload::apply(&client, ns, spec.clone()).await?;
    settled(&client, ns, CLUSTER, 3, &[]).await?;

    let app = AppEnvironment::of(&client, ns, CLUSTER, &format!("{CLUSTER}-tls"), PASSWORD).await?;
    let mut running = app.start_all(&built)?;
    let outcome = exercise(&client, ns, &mut spec, &mut running).await;
    running.iter_mut().for_each(Program::stop);
    outcome?;

    for p in &running {
        let acknowledged = p.acknowledged();
        let prefix = guides::key_prefix(&p.language);
        let missing = workload::missing_of(&client, ns, CLUSTER, &prefix, &acknowledged).await?;
        let (failed, first) = p.failed_attempts();
        println!(
            "{}: {} acknowledged writes, {missing} missing, {failed} failed attempts retried{}",
            p.language,
            acknowledged.len(),
            first.map(|l| format!(" (first: {l})")).unwrap_or_default()
        );
        ensure!(
            missing == 0,
            "the {} program: {missing} acknowledged writes do not read back",
            p.language
        );
    }
    menu.remove(&client).await?;
    app.remove()
}

/// The steps the programs write through: a primary's pod deleted with its default grace period,
/// then a scale-out to 4 shards.
async fn exercise(
    client: &kube::Client,
    ns: &str,
    spec: &mut serde_json::Value,
    running: &mut [Program],
) -> anyhow::Result<()> {
    every_program_writes(running, PROGRESS, "after starting").await?;

    let primaries = members_with(client, ns, CLUSTER, NodeRole::Primary).await?;
    let victim = primaries.first().context("no primary")?;
    kubectl_run(&["delete", "pod", "-n", ns, &victim.pod])?;
    println!(
        "deleted primary pod {} with its default grace period",
        victim.pod
    );
    every_program_writes(running, PROGRESS, "after the primary's pod was deleted").await?;
    settled(client, ns, CLUSTER, 3, &[victim.name.as_str()]).await?;
    every_program_writes(running, PROGRESS, "after the lost member was replaced").await?;

    spec["spec"]["shards"] = json!(4);
    workload::apply(client, ns, spec.clone()).await?;
    settled(client, ns, CLUSTER, 4, &[]).await?;
    println!("scaled out to 4 shards");
    every_program_writes(running, PROGRESS, "after the scale-out").await
}
