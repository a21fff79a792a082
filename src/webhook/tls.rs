//! The webhook's serving certificate: read from PEM files (a mounted Secret, rotated by
//! cert-manager or by hand) and reloaded when their contents change. Reloading swaps the
//! rustls configuration behind the listener: handshakes after the swap present the new
//! certificate, open connections and the server itself are untouched.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

/// Why the serving certificate cannot be used (logged; the previous certificate, if any, stays
/// in service and the files are read again on the next check).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the certificate file is not valid PEM: {0}")]
    CertificatePem(rustls::pki_types::pem::Error),
    #[error("the certificate file holds no CERTIFICATE block")]
    NoCertificate,
    #[error("the key file holds no usable private key: {0}")]
    KeyPem(rustls::pki_types::pem::Error),
    #[error("TLS protocol versions: {0}")]
    ProtocolVersions(rustls::Error),
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(rustls::Error),
}

/// Where the serving certificate and key are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// Both files exist (a Secret volume may be mounted after the process started).
    pub fn present(&self) -> bool {
        self.cert.exists() && self.key.exists()
    }

    /// Reads both files: (certificate PEM, key PEM, digest identifying both contents).
    #[allow(clippy::type_complexity)]
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>, [u8; 32]), TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|error| TlsError::Read {
                path: p.to_owned(),
                error,
            })
        };
        let cert = read(&self.cert)?;
        let key = read(&self.key)?;
        let mut h = Sha256::new();
        h.update(&cert);
        h.update([0u8]);
        h.update(&key);
        Ok((cert, key, h.finalize().into()))
    }
}

/// A rustls server configuration (ring provider, HTTP/1.1) from PEM certificate chain and key.
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::CertificatePem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::ProtocolVersions)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Pair)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The live configuration and the reloader that keeps it in step with the files.
pub struct ReloadingTls {
    pub config: RustlsConfig,
    files: CertFiles,
    digest: [u8; 32],
}

impl ReloadingTls {
    /// Loads the files once; fails when they are unreadable or do not parse.
    pub fn load(files: CertFiles) -> Result<Self, TlsError> {
        let (cert, key, digest) = files.read()?;
        let config = RustlsConfig::from_config(server_config(&cert, &key)?);
        Ok(Self {
            config,
            files,
            digest,
        })
    }

    /// Re-reads the files; swaps the configuration when their contents changed and parse.
    /// Returns whether a new certificate is now served. A half-written rotation (unreadable,
    /// mismatched pair) keeps the previous certificate and is retried on the next call.
    pub fn reload_if_changed(&mut self) -> bool {
        let (cert, key, digest) = match self.files.read() {
            Ok(read) => read,
            Err(e) => {
                warn!(error = %e, "webhook serving certificate not readable; keeping the current one");
                return false;
            }
        };
        if digest == self.digest {
            return false;
        }
        match server_config(&cert, &key) {
            Ok(config) => {
                self.config.reload_from_config(config);
                self.digest = digest;
                info!(cert = %self.files.cert.display(), "webhook serving certificate reloaded");
                true
            }
            Err(e) => {
                warn!(error = %e, "new webhook serving certificate is not usable yet; keeping the current one");
                false
            }
        }
    }

    /// Polls the files every `interval` for as long as the task lives.
    pub fn spawn_reloader(mut self, interval: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                self.reload_if_changed();
            }
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

    /// A CA and a function issuing `localhost` leaves with a given common name.
    pub(crate) struct TestCa {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    impl TestCa {
        pub(crate) fn new() -> Self {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, "webhook test CA");
            let issuer =
                CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            Self { issuer }
        }

        pub(crate) fn ca_der(&self) -> CertificateDer<'static> {
            self.issuer.der().clone()
        }

        /// (cert PEM, key PEM, cert DER)
        pub(crate) fn leaf(&self, cn: &str) -> (String, String, Vec<u8>) {
            let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            (cert.pem(), key.serialize_pem(), cert.der().to_vec())
        }
    }

    /// The certificate a fresh TLS handshake with `addr` is presented.
    pub(crate) async fn served_certificate(addr: std::net::SocketAddr, ca: &TestCa) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.ca_der()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        let (_, conn) = tls.get_ref();
        conn.peer_certificates().unwrap()[0].to_vec()
    }

    #[test]
    fn garbage_files_are_refused_with_a_reason() {
        assert!(
            server_config(b"not pem", b"not pem")
                .unwrap_err()
                .to_string()
                .contains("CERTIFICATE")
        );
        let ca = TestCa::new();
        let (cert, _, _) = ca.leaf("a");
        let (_, other_key, _) = ca.leaf("b");
        assert!(server_config(cert.as_bytes(), b"").is_err());
        // A key that does not belong to the certificate (a half-done rotation).
        assert!(server_config(cert.as_bytes(), other_key.as_bytes()).is_err());
    }

    /// Replacing the certificate files makes new handshakes present the new certificate, with
    /// no restart of the server.
    #[tokio::test]
    async fn replacing_the_files_changes_the_served_certificate_without_restart() {
        let dir = std::env::temp_dir().join(format!("vko-webhook-tls-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let ca = TestCa::new();
        let (cert_a, key_a, der_a) = ca.leaf("first");
        std::fs::write(&files.cert, &cert_a).unwrap();
        std::fs::write(&files.key, &key_a).unwrap();

        let tls = ReloadingTls::load(files.clone()).unwrap();
        let handle = axum_server::Handle::new();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = axum_server::bind_rustls(
            "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
            tls.config.clone(),
        )
        .handle(handle.clone())
        .serve(app.into_make_service());
        let server = tokio::spawn(server);
        let addr = handle.listening().await.unwrap();
        let reloader = tls.spawn_reloader(Duration::from_millis(50));

        assert_eq!(served_certificate(addr, &ca).await, der_a);

        // Rotate: write the new pair (key first, as a careless rotation might).
        let (cert_b, key_b, der_b) = ca.leaf("second");
        std::fs::write(&files.key, &key_b).unwrap();
        std::fs::write(&files.cert, &cert_b).unwrap();
        let mut served = Vec::new();
        for _ in 0..100 {
            served = served_certificate(addr, &ca).await;
            if served == der_b {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            served, der_b,
            "new handshakes must present the rotated certificate"
        );
        assert!(
            !server.is_finished(),
            "the server kept running through the rotation"
        );

        reloader.abort();
        handle.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_half_written_rotation_keeps_the_current_certificate() {
        let dir = std::env::temp_dir().join(format!("vko-webhook-tls-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let ca = TestCa::new();
        let (cert_a, key_a, _) = ca.leaf("first");
        std::fs::write(&files.cert, &cert_a).unwrap();
        std::fs::write(&files.key, &key_a).unwrap();
        let mut tls = ReloadingTls::load(files.clone()).unwrap();
        assert!(!tls.reload_if_changed(), "unchanged files: nothing to do");
        let (cert_b, key_b, _) = ca.leaf("second");
        std::fs::write(&files.cert, &cert_b).unwrap();
        assert!(
            !tls.reload_if_changed(),
            "new cert with the old key is not served"
        );
        std::fs::write(&files.key, &key_b).unwrap();
        assert!(tls.reload_if_changed(), "the completed pair is served");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
