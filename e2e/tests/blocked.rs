//! Blocked is not unmanaged (issue 31, item 7). A 1 x 1 cluster holding keys loses its
//! ValkeyConfig (deleted from the menu: Blocked, `ConfigNotFound`, the DELETE warned about),
//! then its primary's pod. Failure handling goes on while Blocked: the replica is promoted
//! and the lost member replaced with the members' current spec, every key still there; the
//! status stays Blocked and says what was done. The config restored: Active again.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use valkey_e2e::harness::{TestNamespace, client, kubectl_outcome, wait_for};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{active_cluster, apply, config, missing_confirmed, write_confirmed};
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

    // The primary's pod lost.
    let before = nodes(&client, &ns.name).await?;
    let primary = before
        .iter()
        .find(|n| n.status.as_ref().and_then(|s| s.role) == Some(NodeRole::Primary))
        .context("a primary")?
        .name_any();
    Api::<Pod>::namespaced(client.clone(), &ns.name)
        .delete(&primary, &DeleteParams::default())
        .await?;

    // Replaced while Blocked: two members again, neither the lost one, both Active.
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    wait_for(
        "the lost member replaced while Blocked",
        Duration::from_secs(240),
        Duration::from_secs(1),
        || {
            let (client, ns, primary, api) = (&client, &ns.name, &primary, &api);
            async move {
                let now = nodes(client, ns).await?;
                let state = api.get(NAME).await?.status.unwrap_or_default();
                ensure!(
                    state.state == Some(ClusterState::Blocked),
                    "state {:?}",
                    state.state
                );
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
        .get(NAME)
        .await?
        .status
        .unwrap_or_default()
        .message
        .unwrap_or_default();
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
