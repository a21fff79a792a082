//! TLS for driver connections: the rustls client configuration (ring provider) that trusts
//! exactly the CA certificates of a cluster's Secret, and a handshake that reads the
//! certificate a member serves (how the operator sees that a renewed certificate is in use).
//!
//! Members are reached by pod IP; the server certificate is verified against
//! [`TlsSettings::server_name`] (the cluster's name `<cluster>.<namespace>.svc.cluster.local`,
//! one of the two names every member certificate must carry), never by skipping verification.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::TlsSettings;
use crate::topology::MemberAddr;

/// A ready-to-use client configuration and the name certificates are verified against.
/// TLS settings the driver cannot use, and why (a broken CA bundle, a bad server name).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsSettingsError(String);

fn unusable(why: impl Into<String>) -> TlsSettingsError {
    TlsSettingsError(why.into())
}

#[derive(Clone, Debug)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    /// `None`: the member's host (IP or name) is verified.
    pub server_name: Option<String>,
}

impl TlsClient {
    /// Builds the client side from the settings: every `CERTIFICATE` block of `ca_pem` is a
    /// trust anchor (a bundle holding the old and the new CA during a CA rotation trusts
    /// both). Err says what is wrong with the settings.
    pub fn new(settings: &TlsSettings) -> Result<TlsClient, TlsSettingsError> {
        let mut roots = RootCertStore::empty();
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(settings.ca_pem.as_bytes()) {
            let cert =
                cert.map_err(|e| unusable(format!("the CA bundle is not valid PEM: {e}")))?;
            roots.add(cert).map_err(|e| {
                unusable(format!(
                    "a CA certificate cannot be used as a trust anchor: {e}"
                ))
            })?;
            count += 1;
        }
        if count == 0 {
            return Err(unusable("the CA bundle holds no CERTIFICATE block"));
        }
        if let Some(name) = &settings.server_name {
            ServerName::try_from(name.as_str())
                .map_err(|e| unusable(format!("{name:?} is not a server name to verify: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| unusable(format!("TLS protocol versions: {e}")))?;
        let config = match settings.verify_as_of {
            None => builder.with_root_certificates(roots).with_no_client_auth(),
            Some(seconds) => {
                let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| unusable(format!("CA bundle: {e}")))?;
                let verifier = AsOf {
                    inner,
                    at: UnixTime::since_unix_epoch(Duration::from_secs(seconds)),
                };
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth()
            }
        };
        Ok(TlsClient {
            config: Arc::new(config),
            server_name: settings.server_name.clone(),
        })
    }

    /// The name the member's certificate is verified against.
    pub fn name_for<'a>(&'a self, member: &'a MemberAddr) -> &'a str {
        self.server_name.as_deref().unwrap_or(&member.host)
    }

    /// Connects to the member, completes a verified handshake and returns the leaf certificate
    /// it presented (DER), then closes. Err: connection or verification failure, in words.
    pub async fn served_certificate(
        &self,
        member: &MemberAddr,
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        let name = ServerName::try_from(self.name_for(member).to_string())
            .map_err(|e| format!("bad server name: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let handshake = async {
            let tcp = tokio::net::TcpStream::connect((member.host.as_str(), member.port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            let (_, session) = tls.get_ref();
            session
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| leaf.as_ref().to_vec())
                .ok_or_else(|| "the member presented no certificate".to_string())
        };
        tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| format!("no TLS handshake within {timeout:?}"))?
    }
}

/// The standard verification (chain to the CA bundle, the name, signatures), with the
/// validity checked as of a fixed time instead of now: see [`TlsSettings::verify_as_of`].
#[derive(Debug)]
struct AsOf {
    inner: Arc<WebPkiServerVerifier>,
    at: UnixTime,
}

impl ServerCertVerifier for AsOf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            self.at,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
