//! Bounded memory (issue 31, item 5): a tenant labels 5,000 pods of its namespace like the
//! operator's members (`app.kubernetes.io/managed-by: valkey-operator`), each unschedulable
//! (a nodeSelector no node has). The operator's watch sees every one of them, but keeps only
//! the names of pods no ValkeyNode controls: its resident memory grows by less than 5 MiB.
//! Before the pod cache was trimmed it held each pod whole (spec, status, managed fields).
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use valkey_e2e::harness::{TestNamespace, client};
use valkey_e2e::valkey::{operator_pods, operator_rss_kib};

const PODS: usize = 5_000;
const GROWTH_LIMIT_KIB: u64 = 5 * 1024;

/// A pod labelled like a member, that no node can run, with a restricted securityContext.
fn lookalike(ns: &str, i: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("lookalike-{i}")),
            namespace: Some(ns.to_string()),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "valkey-operator".to_string(),
                ),
                (
                    "valkey.gomomento.com/cluster".to_string(),
                    "lookalike".to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([(
                "tenant.example.com/padding".to_string(),
                "x".repeat(512),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_selector: Some(BTreeMap::from([(
                "e2e.valkey.gomomento.com/nowhere".to_string(),
                "true".to_string(),
            )])),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(1000),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "valkey".into(),
                image: Some("valkey/valkey:9.0.0".into()),
                args: Some(vec!["--port".into(), "6379".into()]),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The operator's largest resident set, as the median of five samples a second apart (one
/// sample catches an allocation in flight).
async fn settled_rss_kib(client: &Client) -> anyhow::Result<u64> {
    let pods = operator_pods(client).await?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        samples.push(operator_rss_kib(&pods)?);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_lookalike_pods_do_not_grow_the_operator() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-lookalikes").await?;
    let before = settled_rss_kib(&client).await?;

    let api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let started = std::time::Instant::now();
    stream::iter(0..PODS)
        .map(|i| {
            let api = api.clone();
            let pod = lookalike(&ns.name, i);
            async move { api.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let listed = api
        .list_metadata(
            &ListParams::default().labels("app.kubernetes.io/managed-by=valkey-operator"),
        )
        .await?
        .items
        .len();
    ensure!(listed == PODS, "{listed} of {PODS} pods created");
    println!("{PODS} lookalike pods created in {:?}", started.elapsed());
    // The operator's watch delivers them within a few seconds; give it ample time.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let after = settled_rss_kib(&client).await?;
    let growth = after.saturating_sub(before);
    println!(
        "operator RSS {before} KiB before, {after} KiB with {PODS} lookalike pods: +{growth} KiB"
    );
    ensure!(
        growth < GROWTH_LIMIT_KIB,
        "the operator grew by {growth} KiB (limit {GROWTH_LIMIT_KIB} KiB) for {PODS} pods it does not own"
    );
    Ok(())
}
