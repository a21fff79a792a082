//! `maxConcurrentRollouts`: a ValkeyImage repoint that three clusters use rolls at most one
//! of them at a time with the setting at 1 (never two Updating at once); the others stay
//! Active saying they wait for a slot, every cluster ends up on the new version, and the
//! verifying writers on all three lose nothing. Runs alone (`make e2e`'s serial group): it changes the
//! operator's settings and restarts it, and restores both at the end.
#![cfg(feature = "e2e")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, kubectl_run};
use valkey_e2e::valkey::{OPERATOR_NAMESPACE, explain, wait_state};
use valkey_e2e::workload::{Menu, Writer, apply, cluster};
use valkey_operator::api::{ClusterState, ValkeyCluster};

const CLUSTERS: [&str; 3] = ["r1", "r2", "r3"];

/// Sets (or removes, with `None`) the setting and restarts the operator so it reads it.
async fn set_limit(client: &Client, limit: Option<&str>) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .patch(
            valkey_operator::settings::SETTINGS_CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"maxConcurrentRollouts": limit}})),
        )
        .await?;
    restart_operator().await
}

async fn restart_operator() -> anyhow::Result<()> {
    tokio::task::spawn_blocking(|| {
        let deploy = "deployment/valkey-operator";
        kubectl_run(&["rollout", "restart", deploy, "-n", OPERATOR_NAMESPACE])?;
        kubectl_run(&[
            "rollout",
            "status",
            deploy,
            "-n",
            OPERATOR_NAMESPACE,
            "--timeout=180s",
        ])
    })
    .await??;
    Ok(())
}

/// Puts the settings back when dropped (a failed test included).
struct RestoreSettings;

impl Drop for RestoreSettings {
    fn drop(&mut self) {
        let _ = kubectl_run(&[
            "patch",
            "configmap",
            valkey_operator::settings::SETTINGS_CONFIGMAP,
            "-n",
            OPERATOR_NAMESPACE,
            "--type",
            "merge",
            "-p",
            r#"{"data": {"maxConcurrentRollouts": null}}"#,
        ]);
        let _ = kubectl_run(&[
            "rollout",
            "restart",
            "deployment/valkey-operator",
            "-n",
            OPERATOR_NAMESPACE,
        ]);
        let _ = kubectl_run(&[
            "rollout",
            "status",
            "deployment/valkey-operator",
            "-n",
            OPERATOR_NAMESPACE,
            "--timeout=180s",
        ]);
    }
}

fn progressing_reason(c: &ValkeyCluster) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|x| x.type_ == "Progressing"))
        .map(|x| x.reason.clone())
        .unwrap_or_default()
}

/// Each cluster's state, progressing reason, versions and status message, for a failure.
async fn where_each_stands(api: &Api<ValkeyCluster>) -> String {
    let mut out = Vec::new();
    for name in CLUSTERS {
        match api.get(name).await {
            Ok(c) => {
                let s = c.status.clone().unwrap_or_default();
                out.push(format!(
                    "{name}: {:?} {} {:?} {:?}",
                    s.state,
                    progressing_reason(&c),
                    versions(&c),
                    s.message
                ));
            }
            Err(e) => out.push(format!("{name}: {e}")),
        }
    }
    out.join("; ")
}

/// Versions its members run, from status.
fn versions(c: &ValkeyCluster) -> BTreeSet<String> {
    c.status
        .as_ref()
        .map(|s| s.nodes.iter().filter_map(|n| n.version.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_repoint_rolls_one_cluster_at_a_time_with_max_concurrent_rollouts_1() -> anyhow::Result<()>
{
    let client = client().await?;
    let _restore = RestoreSettings;
    set_limit(&client, Some("1")).await?;
    let ns = TestNamespace::create(&client, "e2e-rollout-limit").await?;
    let menu = Menu::publish(&client, "e2e-limit", "9.0.0").await?;
    for name in CLUSTERS {
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, name, &menu.config, 1, 1),
        )
        .await?;
    }
    for name in CLUSTERS {
        wait_state(
            &client,
            &ns.name,
            name,
            ClusterState::Active,
            Duration::from_secs(180),
        )
        .await?;
    }

    let mut writers = Vec::new();
    for name in CLUSTERS {
        writers.push((name, Writer::start(&client, &ns.name, name).await?));
    }
    let started = Instant::now();
    menu.repoint(&client, "9.1.2").await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let (mut most_at_once, mut most_updating, mut saw_waiting) = (0, 0, false);
    loop {
        let (mut rolling, mut updating, mut done) = (0, 0, 0);
        for name in CLUSTERS {
            let c = api.get(name).await?;
            let v = versions(&c);
            if c.status.as_ref().and_then(|s| s.state) == Some(ClusterState::Updating) {
                updating += 1;
            }
            // Mixed versions: its rollout is under way.
            if v.len() > 1 || progressing_reason(&c) == "RollingOut" {
                rolling += 1;
            }
            if progressing_reason(&c) == "WaitingForRolloutSlot" {
                saw_waiting = true;
            }
            let s = c.status.clone().unwrap_or_default();
            if s.state == Some(ClusterState::Active) && v == BTreeSet::from(["9.1.2".to_string()]) {
                done += 1;
            }
        }
        most_at_once = most_at_once.max(rolling);
        most_updating = most_updating.max(updating);
        if done == CLUSTERS.len() {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            let mut members = String::new();
            for name in CLUSTERS {
                members.push_str(&explain(&client, &ns.name, name).await);
            }
            bail!(
                "{done} of {} clusters rolled after 10 min: {}\n{members}",
                CLUSTERS.len(),
                where_each_stands(&api).await
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    println!(
        "3 clusters rolled one at a time in {:?} (most rolling at once: {most_at_once})",
        started.elapsed()
    );
    assert_eq!(
        most_at_once, 1,
        "maxConcurrentRollouts 1 let more roll at once"
    );
    assert!(saw_waiting, "no cluster said it waits for a rollout slot");
    assert!(
        most_updating <= 1,
        "{most_updating} clusters Updating at once"
    );
    for (name, writer) in writers {
        let report = writer.finish(&client, &ns.name, name).await?;
        println!(
            "{name}: {} acknowledged writes, 0 lost",
            report.acknowledged.len()
        );
    }

    for name in CLUSTERS {
        api.delete(name, &Default::default()).await?;
    }
    menu.remove(&client).await?;
    set_limit(&client, None).await?;
    Ok(())
}
