//! Scheduling on the menu (issue 32): tolerations, a priority class, node affinity and further
//! topology spread set by the platform team on a ValkeyConfig, and a ValkeyImage's pull
//! secrets, reach the members' pods, and a product team's ValkeyCluster cannot set them. The local cluster's `real-a` node carries the taint `valkey-operator.local/real-node`
//! (docs/local-cluster.md); clusters here are pinned to it with `placement.nodeSelector`:
//! on a config without the toleration the member cannot be scheduled and the cluster's status
//! says so in the scheduler's words and names the taint; on a config with it the cluster goes
//! Active on that node.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use valkey_e2e::harness::{
    TestNamespace, client, delete_cluster_scoped, kubectl_input, random_suffix, wait_for,
};
use valkey_e2e::real_node::{NODE, TAINT};
use valkey_e2e::valkey::wait_state;
use valkey_e2e::workload::{apply, image};
use valkey_operator::api::constants::LABEL_CLUSTER;
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyImage};

/// The registry credentials the test image is pulled with.
const PULL_SECRET: &str = "registry-creds";

/// The API server refuses scheduling a config cannot mean, saying what to change.
fn refuses_bad_scheduling(image: &str) -> anyhow::Result<()> {
    let cases = [
        (
            json!({"topologySpread": [{"topologyKey": "kubernetes.io/hostname"}]}),
            "the operator spreads every shard over kubernetes.io/hostname",
        ),
        (
            json!({"nodeAffinity": {"required": [{"matchExpressions": [
                {"key": "pool", "operator": "In"}]}]}}),
            "operators In and NotIn need at least one value",
        ),
        (
            json!({"nodeAffinity": {"required": [{"matchExpressions": [
                {"key": "cpus", "operator": "Gt", "values": ["many"]}]}]}}),
            "operators Gt and Lt take exactly one integer value",
        ),
    ];
    for (scheduling, says) in cases {
        let bad = config("e2e-bad-scheduling", image, Some(scheduling.clone()));
        let out = kubectl_input(&["apply", "-f", "-"], &bad.to_string())?;
        ensure!(
            !out.ok && out.stderr.contains(says),
            "scheduling {scheduling}: {} {}",
            out.stdout,
            out.stderr
        );
    }
    Ok(())
}

/// A 1 x 0 cluster on config `config`, pinned to the tainted node.
fn pinned_cluster(ns: &str, name: &str, config: &str) -> serde_json::Value {
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"configRef": config, "shards": 1, "replicasPerShard": 0,
                    "placement": {"nodeSelector": {"kubernetes.io/hostname": NODE}}}})
}

/// A small config on `image`, with `scheduling` when given.
fn config(name: &str, image: &str, scheduling: Option<serde_json::Value>) -> serde_json::Value {
    let mut spec = json!({"imageRef": image, "resources": {"cpu": "100m", "memory": "256Mi"}});
    if let Some(s) = scheduling {
        spec["scheduling"] = s;
    }
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig",
           "metadata": {"name": name}, "spec": spec})
}

/// The member pods of cluster `cluster`.
async fn member_pods(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={cluster}")))
        .await?
        .items)
}

#[tokio::test]
async fn a_configs_tolerations_and_priority_class_reach_the_members_and_a_cluster_cannot_set_them()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-sched").await?;
    let s = random_suffix(4);
    let (img, plain, pool, priority) = (
        format!("e2e-{s}-img"),
        format!("e2e-{s}-plain"),
        format!("e2e-{s}-pool"),
        format!("e2e-{s}-valkey"),
    );
    let priorities: Api<PriorityClass> = Api::all(client.clone());
    priorities
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": priority}, "value": 1000}))?,
        )
        .await?;
    // A private registry's credentials: a pull secret on the image, in the cluster's namespace.
    let mut private = image(&img, "9.0.0");
    private["spec"]["imagePullSecrets"] = json!([{"name": PULL_SECRET}]);
    apply(&client, "image", private).await?;
    let auth = json!({"auths": {"https://index.docker.io/v1/": {"auth": "ZTJlOmUyZQ=="}}});
    Api::<Secret>::namespaced(client.clone(), &ns.name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": PULL_SECRET}, "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": auth.to_string()}}))?,
        )
        .await?;
    apply(&client, "config", config(&plain, &img, None)).await?;
    // The pool: tolerate its taint, run at a priority, only on its node (required node
    // affinity; the cluster's nodeSelector says the same), preferring Linux nodes, and spread
    // over one more topology key.
    let scheduling = json!({"tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                            "priorityClassName": priority,
                            "nodeAffinity": {
                                "required": [{"matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}],
                                "preferred": [{"weight": 10, "preference": {"matchExpressions": [
                                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}}]},
                            "topologySpread": [{"topologyKey": "kubernetes.io/os", "scope": "cluster"}]});
    apply(&client, "config", config(&pool, &img, Some(scheduling))).await?;
    refuses_bad_scheduling(&img)?;

    // Without the toleration: the member cannot be scheduled, and the status says why.
    apply(&client, &ns.name, pinned_cluster(&ns.name, "plain", &plain)).await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);
    the_status_says_the_member_cannot_be_scheduled(&clusters).await?;

    // With it: Active on the tainted node, the pod carrying the toleration and the priority.
    apply(&client, &ns.name, pinned_cluster(&ns.name, "pool", &pool)).await?;
    wait_state(
        &client,
        &ns.name,
        "pool",
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await?;
    the_member_pod_carries_the_scheduling(&client, &ns.name, &priority).await?;

    a_cluster_cannot_set_scheduling(&ns.name, &plain, &priority)?;

    for name in ["plain", "pool"] {
        clusters.delete(name, &Default::default()).await?;
    }
    wait_for(
        "the clusters to go",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let clusters = clusters.clone();
            async move {
                let left = clusters.list(&ListParams::default()).await?.items.len();
                if left == 0 {
                    Ok(Some(()))
                } else {
                    bail!("{left} cluster(s) left")
                }
            }
        },
    )
    .await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &plain).await?;
    delete_cluster_scoped::<ValkeyConfig>(&client, &pool).await?;
    delete_cluster_scoped::<ValkeyImage>(&client, &img).await?;
    priorities.delete(&priority, &Default::default()).await?;
    Ok(())
}

/// Waits until cluster `plain`'s status says its member is unschedulable, naming the taint.
async fn the_status_says_the_member_cannot_be_scheduled(
    clusters: &Api<ValkeyCluster>,
) -> anyhow::Result<()> {
    let message = wait_for(
        "the cluster to say its member cannot be scheduled",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || {
            let clusters = clusters.clone();
            async move {
                let status = clusters.get("plain").await?.status.unwrap_or_default();
                let message = status.message.unwrap_or_default();
                // The scheduler's words, and the taint they count without naming it.
                let named = format!("untolerated: {NODE} {TAINT}=");
                if message.contains("Unschedulable") && message.contains(&named) {
                    Ok(Some(message))
                } else {
                    bail!("status: {:?}: {message}", status.state)
                }
            }
        },
    )
    .await?;
    println!("without the toleration: {message}");
    Ok(())
}

/// The pool member's pod runs on the tainted node and carries the config's scheduling.
async fn the_member_pod_carries_the_scheduling(
    client: &Client,
    ns: &str,
    priority: &str,
) -> anyhow::Result<()> {
    let pods = member_pods(client, ns, "pool").await?;
    let pod = pods.first().context("the pool cluster's member pod")?;
    let spec = pod.spec.as_ref().context("pod spec")?;
    ensure!(
        spec.node_name.as_deref() == Some(NODE),
        "member runs on {:?}",
        spec.node_name
    );
    ensure!(
        spec.priority_class_name.as_deref() == Some(priority) && spec.priority == Some(1000),
        "priority class {:?}, priority {:?}",
        spec.priority_class_name,
        spec.priority
    );
    ensure!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some(TAINT)),
        "tolerations {:?}",
        spec.tolerations
    );
    let pulled_with: Vec<&str> = spec
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    ensure!(
        pulled_with == [PULL_SECRET],
        "image pull secrets {pulled_with:?}"
    );
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .context("node affinity")?;
    let required =
        serde_json::to_string(&node_affinity.required_during_scheduling_ignored_during_execution)?;
    ensure!(
        required.contains("kubernetes.io/hostname") && required.contains(NODE),
        "required node affinity {required}"
    );
    ensure!(
        node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .is_some_and(|p| p[0].weight == 10),
        "preferred node affinity {:?}",
        node_affinity.preferred_during_scheduling_ignored_during_execution
    );
    ensure!(
        spec.topology_spread_constraints
            .iter()
            .flatten()
            .any(|c| c.topology_key == "kubernetes.io/os"),
        "topology spread {:?}",
        spec.topology_spread_constraints
    );
    Ok(())
}

/// A product team's ValkeyCluster setting tolerations or scheduling is refused (unknown field).
fn a_cluster_cannot_set_scheduling(ns: &str, plain: &str, priority: &str) -> anyhow::Result<()> {
    // A product team cannot set scheduling on its cluster: the API server knows no such field.
    let mut cluster = pinned_cluster(ns, "sneaky", plain);
    cluster["spec"]["tolerations"] = json!([{"key": TAINT, "operator": "Exists"}]);
    cluster["spec"]["scheduling"] = json!({"priorityClassName": priority});
    let out = kubectl_input(&["apply", "-f", "-"], &cluster.to_string())?;
    ensure!(
        !out.ok && out.stderr.contains("unknown field"),
        "a cluster setting tolerations: {} {}",
        out.stdout,
        out.stderr
    );
    println!("a cluster setting them: {}", out.stderr.trim());
    Ok(())
}
