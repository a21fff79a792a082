//! An HTTPS client of the operator's webhook as the API server reaches it: to one of the
//! webhook Service's endpoints on 9443, trusting the CA the API server trusts for it (the
//! ValidatingWebhookConfiguration's caBundle, cert-manager's or the chart's), verifying the
//! Service's name. vk-bench's webhook load and the webhook flood suite use it.

use anyhow::Context as _;
use http_body_util::Full;
use hyper::body::Bytes;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client};

use crate::valkey::OPERATOR_NAMESPACE;

/// The webhook Service's name, which its certificate covers.
pub const SERVICE: &str = "valkey-operator-webhook.valkey-operator-system.svc";

pub type HttpsClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// The client, and the address (`ip`) of one webhook endpoint.
pub async fn webhook_client(client: &Client) -> anyhow::Result<(HttpsClient, String)> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let ip = slices
        .list(
            &kube::api::ListParams::default()
                .labels("kubernetes.io/service-name=valkey-operator-webhook"),
        )
        .await?
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .flat_map(|e| e.addresses.iter())
        .next()
        .cloned()
        .context("the webhook Service has no endpoint: is the operator running? (make up)")?;
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let ca = webhooks
        .get("valkey-operator")
        .await?
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .find_map(|w| w.client_config.ca_bundle)
        .context("the valkey-operator ValidatingWebhookConfiguration has no caBundle yet")?
        .0;
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem_certs(&ca)? {
        roots.add(cert)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            rustls::pki_types::ServerName::try_from(SERVICE)?,
        ))
        .enable_http1()
        .wrap_connector(http);
    let https_client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    Ok((https_client, ip))
}

/// The certificates of a PEM bundle.
pub fn pem_certs(pem: &[u8]) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    Ok(rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?)
}
