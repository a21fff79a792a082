//! cert-manager on the local cluster (built from its Go module, installed with its own chart by
//! e2e/cluster.sh): it issues the certificate a TLS ValkeyCluster uses from a CA Issuer and
//! renews it when forced; and the operator's webhook runs on the certificate cert-manager
//! issued for it (the chart's default), with the CA injected into the webhook configuration
//! and the converting CRDs, and serves a renewed one without a restart.
#![cfg(feature = "e2e")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use valkey_e2e::certs::{
    ca_issuer_yaml, force_renewal, issue, presented, secret_pem, serial, text,
    valkey_certificate_yaml, verifies,
};
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::OPERATOR_NAMESPACE;

const WEBHOOK_SECRET: &str = "valkey-operator-webhook-cert";
const WEBHOOK_CERTIFICATE: &str = "valkey-operator-webhook";

#[tokio::test]
async fn a_ca_issuer_issues_the_valkey_certificate_and_renews_it_when_forced() -> anyhow::Result<()>
{
    let client = client().await?;
    let ns = TestNamespace::create(&client, "cm").await?;
    let ns = ns.name.as_str();
    let yaml = format!(
        "{}---\n{}",
        ca_issuer_yaml(ns, "valkey-ca"),
        valkey_certificate_yaml(ns, "cache", "cache-tls", "valkey-ca")
    );
    issue(&client, ns, &yaml, "cache-tls").await?;

    let cert = secret_pem(&client, ns, "cache-tls", "tls.crt").await?;
    let ca = secret_pem(&client, ns, "cache-tls", "ca.crt").await?;
    secret_pem(&client, ns, "cache-tls", "tls.key").await?;
    let described = text(&cert)?;
    for expected in [
        "id-ecPublicKey",
        "prime256v1",
        &format!("DNS:cache.{ns}.svc.cluster.local"),
        &format!("DNS:*.cache.{ns}.svc.cluster.local"),
        "Issuer: CN = valkey-ca-ca",
    ] {
        ensure!(
            described.contains(expected),
            "issued certificate lacks {expected}:\n{described}"
        );
    }
    ensure!(
        verifies(&cert, &ca)?,
        "tls.crt does not verify against ca.crt"
    );

    // Forced renewal: a new certificate (new serial) from the same CA.
    let before = serial(&cert)?;
    force_renewal(&client, ns, "cache-tls").await?;
    let renewed = wait_for(
        "the renewed certificate in the Secret",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            let cert = secret_pem(&client, ns, "cache-tls", "tls.crt").await?;
            Ok((serial(&cert)? != before).then_some(cert))
        },
    )
    .await?;
    ensure!(
        verifies(&renewed, &ca)?,
        "the renewed certificate does not verify against the CA"
    );
    Ok(())
}

/// The webhook pod's address, and the Service's.
async fn webhook_addrs(client: &Client) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    let ip = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .context("no running operator pod")?;
    let svc = Api::<Service>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get("valkey-operator-webhook")
        .await?;
    let cluster_ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .context("webhook Service has no clusterIP")?;
    Ok((
        format!("{ip}:9443").parse()?,
        format!("{cluster_ip}:443").parse()?,
    ))
}

fn sni() -> String {
    format!("valkey-operator-webhook.{OPERATOR_NAMESPACE}.svc")
}

#[tokio::test]
async fn the_operator_webhook_serves_cert_managers_certificate_with_the_ca_injected()
-> anyhow::Result<()> {
    let client = client().await?;
    let cert = secret_pem(&client, OPERATOR_NAMESPACE, WEBHOOK_SECRET, "tls.crt").await?;
    let ca = secret_pem(&client, OPERATOR_NAMESPACE, WEBHOOK_SECRET, "ca.crt").await?;
    let issuer = text(&cert)?;
    ensure!(
        issuer.contains("Issuer: CN = valkey-operator-webhook-ca"),
        "the webhook certificate is not the one the chart's cert-manager CA issues:\n{issuer}"
    );

    // cainjector copied the CA into every place the API server reads it from.
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("valkey-operator")
        .await?;
    for w in webhooks.webhooks.iter().flatten() {
        let bundle = w.client_config.ca_bundle.as_ref().map(|b| b.0.clone());
        ensure!(
            bundle.as_deref() == Some(ca.as_slice()),
            "webhook {} has no injected CA bundle",
            w.name
        );
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in ["valkeyclusters.valkey.gomomento.com"] {
        let crd = crds.get(name).await?;
        let bundle = crd
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .and_then(|c| c.ca_bundle)
            .map(|b| b.0);
        ensure!(
            bundle.as_deref() == Some(ca.as_slice()),
            "CRD {name}'s conversion webhook has no injected CA bundle"
        );
    }

    // The webhook presents that certificate, on its pod and through its Service.
    let (pod_addr, service_addr) = webhook_addrs(&client).await?;
    let served = serial(&presented(pod_addr, &sni())?)?;
    ensure!(
        served == serial(&cert)?,
        "the webhook serves another certificate"
    );
    ensure!(
        serial(&presented(service_addr, &sni())?)? == served,
        "the webhook Service leads elsewhere"
    );

    // A forced renewal reaches the serving webhook without restarting the operator.
    let pod_uid = |pods: &[Pod]| pods.iter().map(|p| p.uid()).collect::<Vec<_>>();
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let uids_before = pod_uid(&pods.list(&ListParams::default()).await?.items);
    force_renewal(&client, OPERATOR_NAMESPACE, WEBHOOK_CERTIFICATE).await?;
    let started = Instant::now();
    let renewed = wait_for(
        "the webhook to serve the renewed certificate",
        Duration::from_secs(150),
        Duration::from_secs(1),
        || async {
            let secret = secret_pem(&client, OPERATOR_NAMESPACE, WEBHOOK_SECRET, "tls.crt").await?;
            let now = serial(&presented(pod_addr, &sni())?)?;
            Ok((now != served && now == serial(&secret)?).then_some(now))
        },
    )
    .await?;
    println!(
        "webhook serves the renewed certificate {renewed} {:.1}s after the forced renewal",
        started.elapsed().as_secs_f64()
    );
    ensure!(
        uids_before == pod_uid(&pods.list(&ListParams::default()).await?.items),
        "operator pods were replaced"
    );
    Ok(())
}
