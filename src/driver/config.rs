//! How the driver connects and how long it waits: the operator's credentials, TLS and the
//! timeouts of a [`DriverConfig`]. Below `driver/mod.rs`, so the implementation
//! ([`super::fred`]) and [`super::tls`] never import the module that re-exports them.

use std::fmt;
use std::time::Duration;

/// The ACL user the operator authenticates as (`AUTH username password`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// TLS for driver connections: set for a TLS cluster, where every connection (commands,
/// `MIGRATE`'s own connections aside: members make those) is TLS with rustls, verifying the
/// member's certificate. Plaintext and TLS clusters differ only by this value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM bundle of the CA certificates to trust (every `CERTIFICATE` block: old and new CA
    /// during a CA rotation).
    pub ca_pem: String,
    /// Name every member's certificate is verified against (the operator uses the cluster's
    /// `<cluster>.<namespace>.svc.cluster.local`); `None`: the member's host.
    pub server_name: Option<String>,
    /// Verify certificates as of this time (seconds since the epoch) instead of now. Set only
    /// while a cluster is Blocked on a certificate that has expired, to its `notAfter`: the
    /// operator still verifies the chain and the name, and keeps handling failures (a
    /// replica promoted) until a renewed certificate arrives. `None`: now.
    pub verify_as_of: Option<u64>,
}

/// Told of every command the driver runs: its name (no arguments), its round trip and
/// whether it succeeded (the operator's metrics; the driver knows nothing of them).
pub trait CommandObserver: Send + Sync {
    fn observe_command(&self, command: &str, took: Duration, ok: bool);
}

/// How the driver connects and how long it waits.
#[derive(Clone)]
pub struct DriverConfig {
    pub credentials: Credentials,
    pub tls: Option<TlsSettings>,
    /// Told of every command and its outcome, when set.
    pub observer: Option<std::sync::Arc<dyn CommandObserver>>,
    /// Bound on establishing (and authenticating) a connection to one member.
    pub connect_timeout: Duration,
    /// Bound on one command round trip (connection included).
    pub command_timeout: Duration,
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .field("observed", &self.observer.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

impl DriverConfig {
    pub fn new(credentials: Credentials) -> Self {
        DriverConfig {
            credentials,
            tls: None,
            observer: None,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(10),
        }
    }
}
