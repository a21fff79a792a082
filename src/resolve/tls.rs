//! Validating a TLS cluster's certificate Secret (pure): what `spec.tls.secretRef` names must
//! be a certificate the members can serve and every client can verify, or it never reaches
//! the members. Checked here, each with a message saying what is wrong and how to fix it:
//! the Secret exists and has `tls.crt`, `tls.key` and `ca.crt`; each parses as PEM; the key
//! belongs to the certificate; the certificate chains to a CA in `ca.crt` (every CA there is
//! trusted: a bundle with the old and the new CA during a CA rotation), is valid now, and
//! covers both `<cluster>.<ns>.svc.cluster.local` and the members' names under
//! `*.<cluster>.<ns>.svc.cluster.local`.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::CertificateError;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;

use super::certificate_expiry::{CertificateExpiry, earliest_expiry};
use super::conf::{TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
use crate::controller::names;

/// A validated certificate, as the members get it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServedCertificate {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub ca_pem: Vec<u8>,
    /// The leaf certificate (DER): what a member serving this certificate presents.
    pub leaf_der: Vec<u8>,
    /// The first certificate of the chain to expire (condition `CertificateExpiringSoon`).
    pub expiry: CertificateExpiry,
}

impl std::fmt::Debug for ServedCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedCertificate")
            .field("leaf_der_len", &self.leaf_der.len())
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// How [`TlsSecretError::Missing`] ends: true of a Blocked cluster, not of one whose creation
/// failed (which leaves it out).
pub const STARTS_ONCE_IT_EXISTS: &str = "; the cluster starts by itself once it exists";

/// What is wrong with the Secret `spec.tls.secretRef` names. Every message names the Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsSecretError {
    #[error(
        "TLS Secret {namespace}/{secret} (spec.tls.secretRef) does not exist; create it (with cert-manager: a Certificate with secretName {secret}, see docs/tls.md){STARTS_ONCE_IT_EXISTS}"
    )]
    Missing { namespace: String, secret: String },
    #[error(
        "TLS Secret {namespace}/{secret} is named like the operator's own copy of the certificate ({secret}); give your Secret another name and point spec.tls.secretRef at it"
    )]
    ReservedName { namespace: String, secret: String },
    #[error(
        "TLS Secret {namespace}/{secret} has no {key}; a kubernetes.io/tls Secret needs tls.crt, tls.key and ca.crt (cert-manager writes ca.crt when the Issuer is a CA Issuer)"
    )]
    MissingKey {
        namespace: String,
        secret: String,
        key: &'static str,
    },
    #[error("TLS Secret {namespace}/{secret}: {key} is not usable: {detail}; fix that key")]
    Unparsable {
        namespace: String,
        secret: String,
        key: &'static str,
        detail: String,
    },
    #[error(
        "TLS Secret {namespace}/{secret}: tls.key is not the private key of the certificate in tls.crt; put the matching key (or re-issue the certificate)"
    )]
    KeyMismatch { namespace: String, secret: String },
    #[error(
        "TLS Secret {namespace}/{secret}: the certificate in tls.crt {problem}; members would not be verifiable, so the cluster keeps its current certificate: {fix}"
    )]
    Unverifiable {
        namespace: String,
        secret: String,
        problem: String,
        fix: String,
    },
}

impl TlsSecretError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            TlsSecretError::Missing { .. } => "SecretMissing",
            TlsSecretError::ReservedName { .. } => "SecretNameReserved",
            _ => "SecretInvalid",
        }
    }
}

/// Checks the Secret `secret` of cluster `cluster` in `namespace` (`data`: its data, `None`
/// when it does not exist) at time `now`; returns what the members may serve.
pub fn validate_tls_secret(
    namespace: &str,
    cluster: &str,
    secret: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    now: UnixTime,
) -> Result<ServedCertificate, TlsSecretError> {
    let at = SecretAt { namespace, secret };
    if secret == names::tls_secret(cluster) {
        return Err(TlsSecretError::ReservedName {
            namespace: at.ns(),
            secret: at.name(),
        });
    }
    at.validate(data, cluster, now)
}

/// The operator's own copy `<cluster>-member-tls` (what the members serve), checked as the
/// source is, for failure handling while the cluster is Blocked on its source Secret: the
/// certificate and the time to verify members as of: `now`, or the leaf's `notAfter` when it
/// has expired (the members still serve it; chain, key and names are still checked, so the
/// operator keeps verifying whom it talks to).
pub fn validate_member_copy(
    namespace: &str,
    cluster: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    now: UnixTime,
) -> Result<(ServedCertificate, UnixTime), TlsSecretError> {
    let secret = names::tls_secret(cluster);
    let at = SecretAt {
        namespace,
        secret: &secret,
    };
    match at.validate(data, cluster, now) {
        Ok(certificate) => Ok((certificate, now)),
        Err(expired @ TlsSecretError::Unverifiable { .. }) => {
            let Some(not_after) = at.expired_at(data, cluster, now) else {
                return Err(expired);
            };
            Ok((at.validate(data, cluster, not_after)?, not_after))
        }
        Err(other) => Err(other),
    }
}

/// The Secret under validation: every error names it.
struct SecretAt<'a> {
    namespace: &'a str,
    secret: &'a str,
}

impl SecretAt<'_> {
    /// Every check but the name's: the Secret exists, its keys parse, the key matches, the
    /// leaf verifies for both names as of `now`.
    fn validate(
        &self,
        data: Option<&BTreeMap<String, Vec<u8>>>,
        cluster: &str,
        now: UnixTime,
    ) -> Result<ServedCertificate, TlsSecretError> {
        let data = data.ok_or_else(|| TlsSecretError::Missing {
            namespace: self.ns(),
            secret: self.name(),
        })?;
        let (cert_pem, key_pem, ca_pem) = (
            self.key(data, TLS_CERT_KEY)?,
            self.key(data, TLS_KEY_KEY)?,
            self.key(data, TLS_CA_KEY)?,
        );
        let chain = self.certificates(TLS_CERT_KEY, cert_pem)?;
        let cas = self.certificates(TLS_CA_KEY, ca_pem)?;
        self.check_key_matches(&chain, key_pem)?;
        let verifier = self.verifier(&cas)?;
        self.check_names_covered(verifier.as_ref(), &chain, cluster, now)?;
        let expiry = earliest_expiry(&chain, &cas).map_err(|e| self.unparsable(TLS_CERT_KEY, e))?;
        Ok(ServedCertificate {
            cert_pem: cert_pem.clone(),
            key_pem: key_pem.clone(),
            ca_pem: ca_pem.clone(),
            leaf_der: chain[0].as_ref().to_vec(),
            expiry,
        })
    }

    /// The leaf's `notAfter` when verifying it as of `now` fails only because it has expired.
    fn expired_at(
        &self,
        data: Option<&BTreeMap<String, Vec<u8>>>,
        cluster: &str,
        now: UnixTime,
    ) -> Option<UnixTime> {
        let data = data?;
        let chain = self
            .certificates(TLS_CERT_KEY, self.key(data, TLS_CERT_KEY).ok()?)
            .ok()?;
        let cas = self
            .certificates(TLS_CA_KEY, self.key(data, TLS_CA_KEY).ok()?)
            .ok()?;
        let verifier = self.verifier(&cas).ok()?;
        let name = ServerName::try_from(names::cluster_hostname(cluster, self.namespace)).ok()?;
        match verifier.verify_server_cert(&chain[0], &chain[1..], &name, &[], now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
                not_after,
                ..
            })) => Some(not_after),
            _ => None,
        }
    }

    fn ns(&self) -> String {
        self.namespace.to_string()
    }

    fn name(&self) -> String {
        self.secret.to_string()
    }

    fn unparsable(&self, key: &'static str, detail: String) -> TlsSecretError {
        TlsSecretError::Unparsable {
            namespace: self.ns(),
            secret: self.name(),
            key,
            detail,
        }
    }

    /// The value of `key`; a key holding only whitespace counts as missing.
    fn key<'d>(
        &self,
        data: &'d BTreeMap<String, Vec<u8>>,
        key: &'static str,
    ) -> Result<&'d Vec<u8>, TlsSecretError> {
        data.get(key)
            .filter(|v| !v.iter().all(u8::is_ascii_whitespace))
            .ok_or_else(|| TlsSecretError::MissingKey {
                namespace: self.ns(),
                secret: self.name(),
                key,
            })
    }

    /// The certificates in `key`'s PEM: at least one.
    fn certificates(
        &self,
        key: &'static str,
        pem: &[u8],
    ) -> Result<Vec<CertificateDer<'static>>, TlsSecretError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.unparsable(key, format!("not valid PEM ({e})")))?;
        if certs.is_empty() {
            return Err(self.unparsable(key, "no CERTIFICATE block".to_string()));
        }
        Ok(certs)
    }

    /// `tls.key` parses, is a type TLS can sign with, and is the key of the leaf in `chain`.
    fn check_key_matches(
        &self,
        chain: &[CertificateDer<'static>],
        key_pem: &[u8],
    ) -> Result<(), TlsSecretError> {
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| self.unparsable(TLS_KEY_KEY, format!("no usable private key ({e})")))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
            self.unparsable(
                TLS_KEY_KEY,
                format!("a key type TLS cannot use ({e}); ECDSA P-256 is recommended"),
            )
        })?;
        // `InconsistentKeys::Unknown` (the key cannot tell its public half) passes: Valkey checks
        // the pair again when it loads the files.
        if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
            CertifiedKey::new(chain.to_vec(), signing).keys_match()
        {
            return Err(TlsSecretError::KeyMismatch {
                namespace: self.ns(),
                secret: self.name(),
            });
        }
        Ok(())
    }

    /// A verifier trusting every CA in `ca.crt` (a bundle with the old and the new CA during a
    /// CA rotation).
    fn verifier(
        &self,
        cas: &[CertificateDer<'static>],
    ) -> Result<Arc<WebPkiServerVerifier>, TlsSecretError> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in cas {
            roots.add(ca.clone()).map_err(|e| {
                self.unparsable(
                    TLS_CA_KEY,
                    format!("a certificate is not a usable CA ({e})"),
                )
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| self.unparsable(TLS_CA_KEY, e.to_string()))
    }

    /// The leaf verifies, now, for the cluster's name and for a member's name under its
    /// wildcard.
    fn check_names_covered(
        &self,
        verifier: &WebPkiServerVerifier,
        chain: &[CertificateDer<'static>],
        cluster: &str,
        now: UnixTime,
    ) -> Result<(), TlsSecretError> {
        let cluster_name = names::cluster_hostname(cluster, self.namespace);
        // Any member name under the wildcard will do: they differ only in the first label.
        let member_name =
            names::member_hostname(&format!("{cluster}-0-0"), cluster, self.namespace);
        for (expected, covers) in [
            (&cluster_name, cluster_name.clone()),
            (&member_name, format!("*.{cluster_name}")),
        ] {
            let server_name = ServerName::try_from(expected.as_str())
                .map_err(|e| self.unparsable(TLS_CERT_KEY, format!("{expected}: {e}")))?;
            if let Err(e) =
                verifier.verify_server_cert(&chain[0], &chain[1..], &server_name, &[], now)
            {
                let (problem, fix) = describe(&e, &covers);
                return Err(TlsSecretError::Unverifiable {
                    namespace: self.ns(),
                    secret: self.name(),
                    problem,
                    fix,
                });
            }
        }
        Ok(())
    }
}

/// (what is wrong, what to do) for a verification failure.
fn describe(e: &rustls::Error, covers: &str) -> (String, String) {
    let reissue = "re-issue it (cert-manager: check the Certificate's status)".to_string();
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                let presented = match c {
                    CertificateError::NotValidForNameContext { presented, .. } => {
                        format!(" (it names {})", presented.join(", "))
                    }
                    _ => String::new(),
                };
                (
                    format!("does not cover {covers}{presented}"),
                    "issue it with both DNS names <cluster>.<namespace>.svc.cluster.local and *.<cluster>.<namespace>.svc.cluster.local (cert-manager: spec.dnsNames)".to_string(),
                )
            }
            CertificateError::UnknownIssuer | CertificateError::BadSignature => (
                "is not signed by a CA in ca.crt".to_string(),
                "put the issuing CA in ca.crt (during a CA rotation, both CAs)".to_string(),
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                ("has expired".to_string(), reissue)
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                ("is not valid yet".to_string(), reissue)
            }
            other => (format!("does not verify ({other:?})"), reissue),
        },
        other => (format!("does not verify ({other})"), reissue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

    struct Ca(CertifiedIssuer<'static, KeyPair>);

    impl Ca {
        fn new() -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(DnType::CommonName, "test CA");
            Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
        }

        /// (cert PEM, key PEM) for `names`.
        fn leaf(&self, names: &[&str]) -> (String, String) {
            let params =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                    .unwrap();
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.0).unwrap();
            (cert.pem(), key.serialize_pem())
        }
    }

    const NAMES: [&str; 2] = [
        "cache.team.svc.cluster.local",
        "*.cache.team.svc.cluster.local",
    ];

    fn secret(cert: &str, key: &str, ca: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("tls.crt".to_string(), cert.as_bytes().to_vec()),
            ("tls.key".to_string(), key.as_bytes().to_vec()),
            ("ca.crt".to_string(), ca.as_bytes().to_vec()),
        ])
    }

    fn check(
        data: Option<&BTreeMap<String, Vec<u8>>>,
    ) -> Result<ServedCertificate, TlsSecretError> {
        validate_tls_secret("team", "cache", "cache-cert", data, UnixTime::now())
    }

    /// The copy of cluster `cache` in `team`, its leaf valid until 2030-01-01 00:00 UTC.
    fn copy_until_2030(ca: &Ca, names: &[&str]) -> BTreeMap<String, Vec<u8>> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.0).unwrap();
        secret(&cert.pem(), &key.serialize_pem(), &ca.0.pem())
    }

    fn at(year_2030_offset_secs: i64) -> UnixTime {
        const JAN_1_2030: i64 = 1_893_456_000;
        let secs = JAN_1_2030 + year_2030_offset_secs;
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs as u64))
    }

    #[test]
    fn the_members_copy_is_verified_as_of_now_while_valid_and_as_of_its_expiry_after() {
        let ca = Ca::new();
        let copy = copy_until_2030(&ca, &NAMES);
        let (_, when) = validate_member_copy("team", "cache", Some(&copy), at(-60)).unwrap();
        assert_eq!(when, at(-60), "valid: verified as of now");
        let (served, when) =
            validate_member_copy("team", "cache", Some(&copy), at(86_400)).unwrap();
        assert_eq!(when, at(0), "expired: verified as of its notAfter");
        assert!(!served.leaf_der.is_empty());
        // The source Secret itself is refused once expired: the cluster stays Blocked.
        let err = validate_tls_secret("team", "cache", "cache-cert", Some(&copy), at(86_400))
            .unwrap_err();
        assert!(err.to_string().contains("has expired"), "{err}");
    }

    #[test]
    fn an_expired_copy_still_has_to_chain_to_the_ca_and_cover_the_names() {
        let ca = Ca::new();
        let wrong_names = copy_until_2030(&ca, &["other.team.svc.cluster.local"]);
        let err =
            validate_member_copy("team", "cache", Some(&wrong_names), at(86_400)).unwrap_err();
        assert!(err.to_string().contains("does not cover"), "{err}");
        let mut foreign_ca = copy_until_2030(&ca, &NAMES);
        foreign_ca.insert("ca.crt".into(), Ca::new().0.pem().into_bytes());
        let err = validate_member_copy("team", "cache", Some(&foreign_ca), at(86_400)).unwrap_err();
        assert!(err.to_string().contains("not signed by a CA"), "{err}");
        let err = validate_member_copy("team", "cache", None, at(0)).unwrap_err();
        assert!(err.to_string().contains("cache-member-tls"), "{err}");
    }

    #[test]
    fn a_cert_manager_shaped_certificate_is_accepted() {
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&NAMES);
        let served = check(Some(&secret(&cert, &key, &ca.0.pem()))).unwrap();
        assert_eq!(served.cert_pem, cert.as_bytes());
        assert!(!served.leaf_der.is_empty());
    }

    #[test]
    fn a_missing_secret_is_named_with_how_to_create_it() {
        let err = check(None).unwrap_err();
        assert_eq!(err.reason(), "SecretMissing");
        let text = err.to_string();
        assert!(text.contains("team/cache-cert"), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(text.contains("secretName cache-cert"), "{text}");
    }

    #[test]
    fn each_missing_key_is_named() {
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&NAMES);
        for missing in ["tls.crt", "tls.key", "ca.crt"] {
            let mut data = secret(&cert, &key, &ca.0.pem());
            data.remove(missing);
            let err = check(Some(&data)).unwrap_err();
            assert_eq!(err.reason(), "SecretInvalid");
            assert!(
                err.to_string().contains(&format!("has no {missing}")),
                "{err}"
            );
        }
    }

    #[test]
    fn garbage_pem_is_named_by_key() {
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&NAMES);
        let err = check(Some(&secret("not pem", &key, &ca.0.pem()))).unwrap_err();
        assert!(err.to_string().contains("tls.crt is not usable"), "{err}");
        let err = check(Some(&secret(&cert, "not pem", &ca.0.pem()))).unwrap_err();
        assert!(err.to_string().contains("tls.key is not usable"), "{err}");
        let err = check(Some(&secret(&cert, &key, "not pem"))).unwrap_err();
        assert!(err.to_string().contains("ca.crt is not usable"), "{err}");
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let ca = Ca::new();
        let (cert, _) = ca.leaf(&NAMES);
        let (_, other_key) = ca.leaf(&NAMES);
        let err = check(Some(&secret(&cert, &other_key, &ca.0.pem()))).unwrap_err();
        assert!(matches!(err, TlsSecretError::KeyMismatch { .. }), "{err}");
        assert!(err.to_string().contains("not the private key"), "{err}");
    }

    #[test]
    fn a_certificate_missing_either_name_is_refused_naming_it() {
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&[NAMES[0]]);
        let err = check(Some(&secret(&cert, &key, &ca.0.pem()))).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not cover *.cache.team.svc.cluster.local"),
            "{err}"
        );
        let (cert, key) = ca.leaf(&[NAMES[1]]);
        let err = check(Some(&secret(&cert, &key, &ca.0.pem()))).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not cover cache.team.svc.cluster.local"),
            "{err}"
        );
    }

    #[test]
    fn a_certificate_of_another_ca_is_refused_and_a_two_ca_bundle_accepted() {
        let (old, new) = (Ca::new(), Ca::new());
        let (cert, key) = new.leaf(&NAMES);
        let err = check(Some(&secret(&cert, &key, &old.0.pem()))).unwrap_err();
        assert!(
            err.to_string().contains("not signed by a CA in ca.crt"),
            "{err}"
        );
        let bundle = format!("{}{}", old.0.pem(), new.0.pem());
        check(Some(&secret(&cert, &key, &bundle))).unwrap();
        let (old_cert, old_key) = old.leaf(&NAMES);
        check(Some(&secret(&old_cert, &old_key, &bundle))).unwrap();
    }

    #[test]
    fn the_operators_own_copy_cannot_be_the_source() {
        let err = validate_tls_secret("team", "cache", "cache-member-tls", None, UnixTime::now())
            .unwrap_err();
        assert_eq!(err.reason(), "SecretNameReserved");
    }
}
