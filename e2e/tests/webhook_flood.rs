//! Webhook robustness (issue 31, item 3): 200 parallel 8 MiB request bodies sent to the
//! webhook port, as anything on the pod network could. Every one is refused (413, or 503 when
//! its turn does not come), no operator process restarts, the operator's resident memory
//! stays far under its 512 MiB limit, and admission keeps working meanwhile: a ValkeyNode
//! written by a human is still denied with the webhook's own message (its failure policy is
//! Fail, so a webhook that did not answer would show as a timeout, not that message).
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::ensure;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use valkey_e2e::harness::{TestNamespace, client, kubectl_input};
use valkey_e2e::valkey::{operator_pods, operator_rss_kib};
use valkey_e2e::webhook::webhook_client;

const SENDERS: usize = 200;
const BODY: usize = 8 << 20;

fn restarts(pods: &[Pod]) -> BTreeMap<String, i32> {
    pods.iter()
        .map(|p| {
            let n = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
            (p.name_any(), n)
        })
        .collect()
}

const HUMAN_NODE: &str = r#"{"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyNode",
 "metadata": {"name": "forged-0-0"},
 "spec": {"clusterName": "forged", "shard": 0, "configRef": "standard", "imageRef": "valkey-9",
          "image": "valkey/valkey:9.0.0", "version": "9.0.0", "resources": {}}}"#;

#[tokio::test]
async fn a_flood_of_large_bodies_is_refused_and_admission_keeps_working() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-flood").await?;
    let pods = operator_pods(&client).await?;
    let before = restarts(&pods);
    let (https, ip) = webhook_client(&client).await?;
    let body = Bytes::from(vec![b' '; BODY]);
    let uri: hyper::Uri = format!("https://{ip}:9443/validate/valkeycluster").parse()?;

    // Sample the operator's memory while the flood lasts.
    let flooding = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (flooding, peak, pods) = (flooding.clone(), peak.clone(), pods.clone());
        tokio::spawn(async move {
            while flooding.load(Ordering::SeqCst) {
                if let Ok(kib) = operator_rss_kib(&pods) {
                    peak.fetch_max(kib, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (https, uri, body) = (https.clone(), uri.clone(), body.clone());
            tokio::spawn(async move {
                let request = hyper::Request::post(uri)
                    .header("content-type", "application/json")
                    .body(Full::new(body))
                    .expect("request");
                match tokio::time::timeout(Duration::from_secs(60), https.request(request)).await {
                    Ok(Ok(response)) => {
                        let status = response.status().as_u16();
                        let _ = response.into_body().collect().await;
                        Some(status)
                    }
                    // The server may close a connection whose body it refuses mid-upload.
                    _ => None,
                }
            })
        })
        .collect();

    // Meanwhile, a human's ValkeyNode is denied by the webhook itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ns_name = ns.name.clone();
    let denied = tokio::task::spawn_blocking(move || {
        kubectl_input(
            &["-n", &ns_name, "create", "--dry-run=server", "-f", "-"],
            HUMAN_NODE,
        )
    })
    .await??;

    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for s in senders {
        let key = s.await?.map_or("closed".to_string(), |c| c.to_string());
        *statuses.entry(key).or_default() += 1;
    }
    flooding.store(false, Ordering::SeqCst);
    sampler.await?;
    println!(
        "flood: {statuses:?}; operator peak RSS {} MiB; human ValkeyNode: {}",
        peak.load(Ordering::SeqCst) / 1024,
        denied.stderr.trim()
    );
    ensure!(
        !denied.ok && denied.stderr.contains("denied the request"),
        "admission during the flood: {}",
        denied.stderr
    );
    ensure!(
        statuses
            .keys()
            .all(|k| ["413", "503", "closed"].contains(&k.as_str())),
        "every oversized body refused: {statuses:?}"
    );
    ensure!(
        statuses.get("413").copied().unwrap_or(0) > 0,
        "{statuses:?}"
    );
    let after = restarts(&operator_pods(&client).await?);
    ensure!(before == after, "operator restarts {before:?} -> {after:?}");
    let peak_mib = peak.load(Ordering::SeqCst) / 1024;
    ensure!(
        peak_mib > 0 && peak_mib < 256,
        "operator peak RSS {peak_mib} MiB (limit 512)"
    );
    Ok(())
}
