//! OTLP traces on the local cluster: with `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set on the
//! operator's Deployment, the operator pod posts OTLP/HTTP protobuf batches to a receiver this
//! test runs on the bridge address, with a `reconcile` span naming the reconciled cluster (and
//! a child span per pipeline step it ran: `cluster.gate`, `cluster.resolve`, ...) and a
//! `webhook` span naming the webhook path, under service name `valkey-operator`. Without the
//! variable nothing is sent. Runs alone (it restarts the operator).
#![cfg(feature = "e2e")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, kubectl_run, wait_for};

const NS: &str = "valkey-operator-system";
/// The bridge's address: pods reach the host (and the API server) there.
const GATEWAY: &str = "198.18.0.1";

fn set_env(vars: &[&str]) -> anyhow::Result<()> {
    let mut args = vec!["-n", NS, "set", "env", "deployment/valkey-operator"];
    args.extend_from_slice(vars);
    kubectl_run(&args)?;
    kubectl_run(&[
        "-n",
        NS,
        "rollout",
        "status",
        "deployment/valkey-operator",
        "--timeout=120s",
    ])?;
    Ok(())
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

type Received = Arc<Mutex<Vec<Vec<u8>>>>;

#[tokio::test]
async fn reconciles_and_webhook_requests_are_exported_over_otlp() -> anyhow::Result<()> {
    let client = client().await?;
    let (received, endpoint, server) = otlp_receiver().await?;
    set_env(&[
        &format!("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={endpoint}"),
        "OTEL_BSP_SCHEDULE_DELAY=500",
    ])?;
    let ns = TestNamespace::create(&client, "e2e-traces").await?;
    let result = spans_of_a_reconcile_and_a_webhook_request(&ns.name, &received).await;
    set_env(&[
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT-",
        "OTEL_BSP_SCHEDULE_DELAY-",
    ])?;
    // Without the variable the operator sends nothing. The old pod flushes its last batch as
    // it shuts down: count from when it is gone.
    traced_operator_pod_gone(&client).await?;
    let before = received.lock().unwrap().len();
    // Right after the restart the API server may still route the (v1beta1) conversion call
    // to the old pod's address: retry until the new pod answers.
    wait_for(
        "the annotation to be written",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || {
            let ns = ns.name.clone();
            async move {
                kubectl_run(&[
                    "-n",
                    &ns,
                    "annotate",
                    "valkeycluster",
                    "traced",
                    "e2e/touched=yes",
                    "--overwrite",
                ])
                .map(|_| Some(()))
            }
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = received.lock().unwrap().len();
    server.abort();
    result?;
    assert_eq!(before, after, "spans were exported without an endpoint");
    Ok(())
}

/// An OTLP/HTTP traces receiver on the gateway address: what it received, its endpoint and
/// its server task.
async fn otlp_receiver() -> anyhow::Result<(
    Received,
    String,
    tokio::task::JoinHandle<std::io::Result<()>>,
)> {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(body.to_vec());
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind((GATEWAY, 0)).await?;
    let endpoint = format!("http://{}/v1/traces", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((received, endpoint, server))
}

/// A reconcile (the cluster names a config that does not exist: Blocked, no pods) and a
/// webhook request (its admission review) in namespace `ns` arrive as spans.
async fn spans_of_a_reconcile_and_a_webhook_request(
    ns: &str,
    received: &Received,
) -> anyhow::Result<()> {
    let cluster = json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": "traced", "namespace": ns},
        "spec": {"configRef": "e2e-traces-missing", "shards": 1, "replicasPerShard": 0},
    });
    let file = std::env::temp_dir().join(format!("{ns}.json"));
    std::fs::write(&file, serde_json::to_string(&cluster)?)?;
    kubectl_run(&["apply", "-f", &file.to_string_lossy()])?;
    let object = format!("{ns}/traced");
    wait_for(
        "spans of the reconcile and of the webhook request",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let received = received.clone();
            let object = object.clone();
            async move {
                let batches = received.lock().unwrap().clone();
                let all: Vec<u8> = batches.concat();
                let seen = [
                    contains(&all, "valkey-operator"),
                    contains(&all, "reconcile") && contains(&all, &object),
                    // The pipeline's steps as child spans, up to where this one stops.
                    contains(&all, "cluster.gate") && contains(&all, "cluster.resolve"),
                    contains(&all, "webhook") && contains(&all, "/validate/valkeycluster"),
                ];
                if seen.iter().all(|s| *s) {
                    Ok(Some(()))
                } else {
                    anyhow::bail!(
                        "{} batches, {} bytes; service/reconcile/steps/webhook seen: {seen:?}",
                        batches.len(),
                        all.len()
                    )
                }
            }
        },
    )
    .await?;
    println!("received {} OTLP batches", received.lock().unwrap().len());
    Ok(())
}

/// Waits until no operator pod has the OTLP endpoint variable.
async fn traced_operator_pod_gone(client: &kube::Client) -> anyhow::Result<()> {
    wait_for(
        "the traced operator pod to be gone",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let client = client.clone();
            async move {
                let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, NS)
                    .list(
                        &kube::api::ListParams::default()
                            .labels("app.kubernetes.io/name=valkey-operator"),
                    )
                    .await?;
                let traced = pods.items.iter().any(|p| {
                    p.spec.as_ref().is_some_and(|s| {
                        s.containers.iter().any(|c| {
                            c.env
                                .iter()
                                .flatten()
                                .any(|e| e.name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                        })
                    })
                });
                Ok((!traced).then_some(()))
            }
        },
    )
    .await
}
