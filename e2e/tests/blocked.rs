//! Blocked is not unmanaged (issue 31, item 7). A 1 x 1 cluster holding keys loses its
//! ValkeyConfig (deleted from the menu: Blocked, `ConfigNotFound`, the DELETE warned about),
//! then its primary's pod. Failure handling goes on while Blocked: the replica is promoted
//! and the lost member replaced with the members' current spec, every key still there; the
//! status stays Blocked and says what was done. The config restored: Active again.
//! The same for a TLS cluster whose certificate Secret is deleted (with its cert-manager
//! Certificate): failures are handled with the certificate the members serve (the operator's
//! copy); the Certificate issued again: Active, every key there.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use valkey_e2e::certs;
use valkey_e2e::harness::{TestNamespace, client, kubectl_outcome, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{
    self, Menu, active_cluster, apply, config, missing_confirmed, write_confirmed,
};
use valkey_operator::api::{ClusterState, Lifecycle, NodeRole, ValkeyCluster, ValkeyNode};

const NAME: &str = "orphan";
const KEYS: usize = 1_000;

async fn nodes(client: &Client, ns: &str) -> anyhow::Result<Vec<ValkeyNode>> {
    Ok(Api::<ValkeyNode>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items)
}

#[tokio::test]
async fn failures_are_handled_while_the_menu_reference_is_broken() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-blocked").await?;
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (1, 1)).await?;
    write_confirmed(&client, &ns.name, NAME, "kept", KEYS).await?;

    // The config deleted: warned (one cluster blocked), then Blocked.
    let out = kubectl_outcome(&["delete", "valkeyconfig", &menu.config])?;
    ensure!(out.ok, "{}", out.stderr);
    ensure!(
        out.stderr
            .contains("is in use: 1 ValkeyCluster(s) will be Blocked"),
        "the DELETE is warned about: {}",
        out.stderr
    );
    wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Blocked,
        Duration::from_secs(60),
    )
    .await?;

    let message = replaced_while_blocked(&client, &ns.name, NAME, ClusterState::Blocked).await?;
    ensure!(
        message.contains("ConfigNotFound") || message.contains(&menu.config),
        "{message}"
    );
    let missing = missing_confirmed(&client, &ns.name, NAME, "kept", KEYS).await?;
    ensure!(missing == 0, "{missing} of {KEYS} keys lost");

    // The config back: Active.
    apply(&client, "config", config(&menu.config, &menu.image)).await?;
    wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    menu.remove(&client).await?;
    Ok(())
}

#[tokio::test]
async fn failures_are_handled_while_the_tls_certificate_is_missing() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-blocked-tls").await?;
    let (name, secret) = ("orphan-tls", "orphan-tls-cert");
    let objects = format!(
        "{}---\n{}",
        certs::ca_issuer_yaml(&ns.name, "e2e-ca"),
        certs::valkey_certificate_yaml(&ns.name, name, secret, "e2e-ca")
    );
    certs::issue(&client, &ns.name, &objects, secret).await?;
    // The TLS-capable build (see e2e/tests/tls.rs).
    let menu = Menu::publish(&client, "e2e-blocked-tls", "9.1.2").await?;
    let mut cluster = workload::cluster(&ns.name, name, &menu.config, 1, 1);
    cluster["spec"]["tls"] = serde_json::json!({"secretRef": secret});
    workload::apply(&client, &ns.name, cluster).await?;
    wait_state(
        &client,
        &ns.name,
        name,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    // Through the client Service's name: its DNS record and the Service's rules may trail
    // Active by a moment (seen: connection refused right after Active).
    wait_for(
        "keys written through the Service",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            write_confirmed(&client, &ns.name, name, "kept", KEYS).await?;
            Ok(Some(()))
        },
    )
    .await?;

    // The Certificate and its Secret deleted (cert-manager would issue a deleted Secret again).
    for kind in ["certificate", "secret"] {
        let out = kubectl_outcome(&["-n", &ns.name, "delete", kind, secret])?;
        ensure!(out.ok, "{}", out.stderr);
    }
    wait_state(
        &client,
        &ns.name,
        name,
        ClusterState::Invalid,
        Duration::from_secs(60),
    )
    .await?;

    // Momento v0.9: a cluster that has been Active and loses its Secret is Invalid.
    let message = replaced_while_blocked(&client, &ns.name, name, ClusterState::Invalid).await?;
    // Repaired: the message is the cause again (while repairing it said "Meanwhile failures
    // are still handled ...").
    ensure!(message.contains(secret), "{message}");

    // Issued again: Active, every key there.
    certs::issue(
        &client,
        &ns.name,
        &certs::valkey_certificate_yaml(&ns.name, name, secret, "e2e-ca"),
        secret,
    )
    .await?;
    wait_state(
        &client,
        &ns.name,
        name,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let missing = wait_for(
        "keys read through the Service",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            Ok(Some(
                missing_confirmed(&client, &ns.name, name, "kept", KEYS).await?,
            ))
        },
    )
    .await?;
    ensure!(missing == 0, "{missing} of {KEYS} keys lost");
    menu.remove(&client).await?;
    Ok(())
}

/// Deletes the primary's pod of 1 x 1 cluster `name` (`held`: Blocked, or Invalid for a TLS
/// problem) and waits until the lost member is replaced while the cluster stays `held`: two
/// members, neither the lost one, both Active. The cluster's message then.
async fn replaced_while_blocked(
    client: &Client,
    ns: &str,
    name: &str,
    held: ClusterState,
) -> anyhow::Result<String> {
    let before = nodes(client, ns).await?;
    let primary = before
        .iter()
        .find(|n| n.status.as_ref().and_then(|s| s.role) == Some(NodeRole::Primary))
        .context("a primary")?
        .name_any();
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&primary, &DeleteParams::default())
        .await?;

    // Replaced while Blocked: two members again, neither the lost one, both Active.
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the lost member replaced while Blocked",
        Duration::from_secs(240),
        Duration::from_secs(1),
        || {
            let (primary, api) = (&primary, &api);
            async move {
                let now = nodes(client, ns).await?;
                let state = api.get(name).await?.status.unwrap_or_default();
                ensure!(state.state == Some(held), "state {:?}", state.state);
                let active = now
                    .iter()
                    .filter(|n| {
                        n.status.as_ref().and_then(|s| s.lifecycle) == Some(Lifecycle::Active)
                    })
                    .count();
                if now.len() == 2 && active == 2 && now.iter().all(|n| n.name_any() != *primary) {
                    return Ok(Some(()));
                }
                bail!(
                    "{} members ({active} Active): {}",
                    now.len(),
                    state.message.unwrap_or_default()
                )
            }
        },
    )
    .await?;
    let message = api
        .get(name)
        .await?
        .status
        .unwrap_or_default()
        .message
        .unwrap_or_default();
    Ok(message)
}
