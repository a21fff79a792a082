//! Topology changes on the local cluster, each under a continuous writer that records every
//! acknowledged write and verifies them all at the end: rolling replacement when the image is
//! repointed (9.0.0 -> 9.1.2, both real binaries), a stalled rollout that resumes once fixed,
//! and replica scaling. Real API server, real kubelet pods, real valkey-server.
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::bail;
use kube::{Api, ResourceExt};

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, random_suffix, wait_for};
use valkey_e2e::valkey::{kill_operator, member_pods, wait_state};
use valkey_e2e::workload::{Writer, apply, cluster, config, image};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage};

#[tokio::test]
async fn repointing_the_image_rolls_every_member_to_9_1_2_without_losing_a_write()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-rollout").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "roll", &cfg, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let before: Vec<String> = member_pods(&client, &ns.name, "roll")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();

    let writer = Writer::start(&client, &ns.name, "roll").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    // The platform team repoints the allowlisted image: every cluster using it rolls.
    apply(&client, "image", image(&img, "9.1.2")).await?;
    wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Updating,
        Duration::from_secs(60),
    )
    .await?;
    let c = wait_state(
        &client,
        &ns.name,
        "roll",
        ClusterState::Active,
        Duration::from_secs(400),
    )
    .await?;
    println!(
        "rollout of 2 shards x 1 replica took {:?}",
        started.elapsed()
    );
    writer.finish(&client, &ns.name, "roll").await?;

    let nodes = c.status.unwrap().nodes;
    assert_eq!(nodes.len(), 4);
    assert!(
        nodes.iter().all(|n| n.version.as_deref() == Some("9.1.2")),
        "every member runs 9.1.2: {nodes:?}"
    );
    // A retired member's pod may still be terminating (a real kubelet stops Valkey within
    // its grace period after the cluster says Active): it is on its way out, not a member.
    let after: Vec<String> = member_pods(&client, &ns.name, "roll")
        .await?
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    assert!(
        before.iter().all(|p| !after.contains(p)),
        "members were replaced, not mutated: {before:?} -> {after:?}"
    );

    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

#[tokio::test]
async fn a_rollout_to_an_image_that_cannot_be_pulled_stalls_safely_and_resumes_when_fixed()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-stall").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "stall", &cfg, 1, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "stall",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let writer = Writer::start(&client, &ns.name, "stall").await?;

    apply(&client, "image", image(&img, "9.9.9-does-not-exist")).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    let message = wait_for(
        "the stall to be reported",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || {
            let api = api.clone();
            async move {
                let s = api.get("stall").await?.status.unwrap_or_default();
                let m = s.message.unwrap_or_default();
                if s.state == Some(ClusterState::Updating)
                    && (m.contains("ImagePullBackOff") || m.contains("ErrImagePull"))
                {
                    Ok(Some(m))
                } else {
                    bail!("{:?}: {m}", s.state)
                }
            }
        },
    )
    .await?;
    println!("stalled with: {message}");
    // Existing members keep serving while stalled.
    tokio::time::sleep(Duration::from_secs(5)).await;
    apply(&client, "image", image(&img, "9.1.2")).await?;
    let c = wait_state(
        &client,
        &ns.name,
        "stall",
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    writer.finish(&client, &ns.name, "stall").await?;
    assert!(
        c.status
            .unwrap()
            .nodes
            .iter()
            .all(|n| n.version.as_deref() == Some("9.1.2"))
    );
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

#[tokio::test]
async fn replicas_scale_1_2_0_1_without_losing_a_write() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-replicas").await?;
    let s = random_suffix(4);
    let (img, cfg) = (format!("e2e-{s}-img"), format!("e2e-{s}-cfg"));
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&cfg, &img)).await?;
    apply(&client, &ns.name, cluster(&ns.name, "reps", &cfg, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "reps",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let writer = Writer::start(&client, &ns.name, "reps").await?;
    for replicas in [2, 0, 1] {
        apply(
            &client,
            &ns.name,
            cluster(&ns.name, "reps", &cfg, 2, replicas),
        )
        .await?;
        let c = wait_state(
            &client,
            &ns.name,
            "reps",
            ClusterState::Active,
            Duration::from_secs(240),
        )
        .await?;
        let members = c.status.unwrap().nodes.len();
        assert_eq!(
            members,
            2 * (1 + replicas as usize),
            "members with replicasPerShard {replicas}"
        );
        // Retired members' pods terminate gracefully after their ValkeyNode is deleted.
        wait_for(
            "one pod per member",
            Duration::from_secs(90),
            Duration::from_secs(1),
            || {
                let client = client.clone();
                let ns = ns.name.clone();
                async move {
                    let pods = member_pods(&client, &ns, "reps").await?.len();
                    if pods == members {
                        Ok(Some(()))
                    } else {
                        bail!("{pods} pods for {members} members")
                    }
                }
            },
        )
        .await?;
    }
    writer.finish(&client, &ns.name, "reps").await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &cfg).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}

/// Switching `configRef` to a config with other resources replaces every member, and the
/// operator killed twice in the middle of that rollout picks it up where it was.
#[tokio::test]
async fn switching_config_ref_replaces_members_even_with_the_operator_killed_mid_rollout()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-cfgref").await?;
    let s = random_suffix(4);
    let (img, standard, large) = (
        format!("e2e-{s}-img"),
        format!("e2e-{s}-standard"),
        format!("e2e-{s}-large"),
    );
    apply(&client, "image", image(&img, "9.0.0")).await?;
    apply(&client, "config", config(&standard, &img)).await?;
    let mut bigger = config(&large, &img);
    bigger["spec"]["resources"] = serde_json::json!({"cpu": "200m", "memory": "512Mi"});
    apply(&client, "config", bigger).await?;
    apply(&client, &ns.name, cluster(&ns.name, "cfg", &standard, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "cfg",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    let before: Vec<String> = member_pods(&client, &ns.name, "cfg")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();

    let writer = Writer::start(&client, &ns.name, "cfg").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    apply(&client, &ns.name, cluster(&ns.name, "cfg", &large, 2, 1)).await?;
    wait_state(
        &client,
        &ns.name,
        "cfg",
        ClusterState::Updating,
        Duration::from_secs(60),
    )
    .await?;
    for pause in [2, 5] {
        tokio::time::sleep(Duration::from_secs(pause)).await;
        kill_operator(&client).await?;
        println!(
            "killed the operator {:?} into the rollout",
            started.elapsed()
        );
    }
    wait_state(
        &client,
        &ns.name,
        "cfg",
        ClusterState::Active,
        Duration::from_secs(400),
    )
    .await?;
    println!(
        "configRef switch on 2 shards x 1 replica took {:?}",
        started.elapsed()
    );
    writer.finish(&client, &ns.name, "cfg").await?;

    let pods = member_pods(&client, &ns.name, "cfg").await?;
    let live: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), 4);
    for p in &live {
        assert!(
            !before.contains(&p.name_any()),
            "{} was not replaced",
            p.name_any()
        );
        let limits = p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        assert_eq!(limits.get("memory").map(|q| q.0.as_str()), Some("512Mi"));
        assert_eq!(limits.get("cpu").map(|q| q.0.as_str()), Some("200m"));
    }
    delete_cluster_scoped::<ValkeyConfig>(&client, &standard).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &large).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    Ok(())
}
