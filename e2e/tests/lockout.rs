//! Hardening: the operator never locks itself out of a formed cluster (issue 31, item 2).
//!
//! A 2 x 1 cluster holding keys; its credentials Secret (in the operator's namespace) is
//! deleted and the operator restarted. The operator must not generate new passwords (the
//! members keep the old ACL: new ones would lock it out for good): the cluster is Blocked with
//! `CredentialsMissing`, saying how to recover. A scale-out asked for meanwhile creates no
//! member (it would form an island owning slots the old shards still serve). The Secret
//! restored from the backup taken before: the cluster is Active with 3 shards and every key.
//! Then the same with a Secret restored by hand (`kubectl create secret`, no labels).
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::{OPERATOR_NAMESPACE, kill_operator, wait_state};
use valkey_e2e::workload::{active_cluster, missing_confirmed, write_confirmed};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyNode};
use valkey_operator::controller::names::credentials_secret;

const NAME: &str = "locked";
const KEYS: usize = 2_000;

/// The Secret as an admin's backup keeps it: data and labels, no server-set fields.
fn backup_of(secret: &Secret) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: secret.metadata.name.clone(),
            namespace: secret.metadata.namespace.clone(),
            labels: secret.metadata.labels.clone(),
            ..Default::default()
        },
        data: secret.data.clone(),
        type_: secret.type_.clone(),
        ..Default::default()
    }
}

async fn members(client: &Client, ns: &str) -> anyhow::Result<usize> {
    Ok(Api::<ValkeyNode>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .len())
}

/// Waits until the cluster is Blocked with `CredentialsMissing` naming the Secret.
async fn wait_blocked(client: &Client, ns: &str, secret: &str) -> anyhow::Result<()> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the cluster to be Blocked with CredentialsMissing",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let status = api.get(NAME).await?.status.unwrap_or_default();
                let reason = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "CredentialsAvailable")
                    .map(|c| (c.status.clone(), c.reason.clone()));
                let message = status.message.clone().unwrap_or_default();
                if status.state == Some(ClusterState::Blocked)
                    && reason == Some(("False".into(), "CredentialsMissing".into()))
                {
                    ensure!(
                        message.contains(secret),
                        "message names the Secret: {message}"
                    );
                    ensure!(
                        message.contains("Restore it"),
                        "says how to recover: {message}"
                    );
                    return Ok(Some(()));
                }
                bail!("state {:?}, {reason:?}: {message}", status.state)
            }
        },
    )
    .await
}

/// Deletes the credentials Secret, restarts the operator, and checks for `settle` that
/// nothing is regenerated and no member created while the spec asks for `shards`.
async fn lose_credentials(
    client: &Client,
    ns: &str,
    shards: i32,
    settle: Duration,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let name = credentials_secret(ns, NAME);
    let before = members(client, ns).await?;
    secrets.delete(&name, &Default::default()).await?;
    kill_operator(client).await?;
    wait_blocked(client, ns, &name).await?;
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shards": shards}})),
        )
        .await?;
    tokio::time::sleep(settle).await;
    ensure!(
        secrets.get_opt(&name).await?.is_none(),
        "the operator regenerated {name} for a formed cluster"
    );
    let after = members(client, ns).await?;
    ensure!(
        after == before,
        "members were created while the operator could not reach the cluster: {before} -> {after}"
    );
    wait_blocked(client, ns, &name).await
}

#[tokio::test]
async fn lost_credentials_block_the_cluster_and_restoring_them_recovers_it() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-lockout").await?;
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (2, 1)).await?;
    write_confirmed(&client, &ns.name, NAME, "kept", KEYS).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let name = credentials_secret(&ns.name, NAME);
    let backup = backup_of(&secrets.get(&name).await?);

    // Deleted, operator restarted, scale-out asked for: blocked, nothing regenerated or created.
    lose_credentials(&client, &ns.name, 3, Duration::from_secs(20)).await?;

    // Restored from the backup: Active with the third shard, every key there.
    secrets.create(&PostParams::default(), &backup).await?;
    wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    ensure!(
        members(&client, &ns.name).await? == 6,
        "3 shards x 2 members"
    );
    let missing = missing_confirmed(&client, &ns.name, NAME, "kept", KEYS).await?;
    ensure!(missing == 0, "{missing} of {KEYS} keys lost");

    // Lost again, restored by hand without the operator's labels (kubectl create secret
    // generic --from-literal=...): taken as the members' passwords, labelled again.
    let data = backup.data.clone().context("backup has data")?;
    lose_credentials(&client, &ns.name, 2, Duration::from_secs(10)).await?;
    let by_hand = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &by_hand).await?;
    wait_state(
        &client,
        &ns.name,
        NAME,
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    let relabelled = secrets.get(&name).await?;
    ensure!(
        relabelled
            .labels()
            .contains_key("valkey.gomomento.com/cluster-uid"),
        "the restored Secret is labelled again: {:?}",
        relabelled.labels()
    );
    let missing = missing_confirmed(&client, &ns.name, NAME, "kept", KEYS).await?;
    ensure!(
        missing == 0,
        "{missing} of {KEYS} keys lost after the scale-in"
    );
    menu.remove(&client).await?;
    Ok(())
}
