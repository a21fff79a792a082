//! `valkey-operator check-webhook`: what the chart's `helm test` runs. It reaches the webhook
//! the way the API server does (the Service's DNS name, HTTPS, verified against the CA the
//! webhook configuration trusts) and asks `/healthz`, so a wrong Service, a certificate for
//! another name or from another CA, or a NetworkPolicy in the way fails the test with that
//! reason instead of every later `kubectl apply`.

use std::time::Duration;

/// Why the webhook did not answer as the API server needs it to.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot read the CA bundle {path}: {source}")]
    ReadCa {
        path: String,
        source: std::io::Error,
    },
    #[error("the CA bundle {0} holds no PEM certificate")]
    NoCertificate(String),
    #[error("cannot build an HTTPS client: {0}")]
    Client(reqwest::Error),
    #[error(
        "no answer from {url}: {error} (is the operator running, does its certificate name the \
         Service, signed by this CA, and does a NetworkPolicy let this pod in?)"
    )]
    Unreachable { url: String, error: String },
    #[error("{url} answered {status}: {body}")]
    Unhealthy {
        url: String,
        status: reqwest::StatusCode,
        body: String,
    },
}

/// GETs `url`, trusting only the certificates in the PEM file `ca_file`; Ok with the answer
/// when it is 200.
pub async fn check(url: &str, ca_file: &str) -> Result<String, CheckError> {
    let pem = std::fs::read(ca_file).map_err(|source| CheckError::ReadCa {
        path: ca_file.into(),
        source,
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .ok()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| CheckError::NoCertificate(ca_file.into()))?;
    let client = reqwest::Client::builder()
        .tls_certs_only(certs)
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(CheckError::Client)?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| CheckError::Unreachable {
            url: url.into(),
            error: error_chain(&e),
        })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(body)
    } else {
        Err(CheckError::Unhealthy {
            url: url.into(),
            status,
            body,
        })
    }
}

/// An error and its causes on one line (reqwest's own message says only "error sending
/// request"; the cause says which: DNS, refused, certificate).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    line
}
