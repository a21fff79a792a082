//! When a TLS cluster's certificate expires, and what the `CertificateExpiringSoon` condition
//! says about it (pure). The certificate that counts is the earliest to expire of the chain in
//! `tls.crt` (the leaf and any intermediates) and the CAs in `ca.crt` that chain signs to: a
//! leaf renewed every 60 days under a CA that expires next week still stops verifying next
//! week. A CA in `ca.crt` the chain does not lead to (the old CA kept during a CA rotation)
//! does not count.

use rustls::pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Within this many days of its expiry a certificate is "expiring soon" (Momento v0.9's line).
pub const EXPIRING_WITHIN_DAYS: i64 = 30;

const DAY: i64 = 86_400;

/// The certificate of a chain that expires first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateExpiry {
    /// Which one, in words: `the certificate in tls.crt`, `intermediate CA "CN=..." in tls.crt`
    /// or `CA "CN=..." in ca.crt`.
    pub which: String,
    /// Its `notAfter`, in seconds since the Unix epoch.
    pub not_after: i64,
}

/// The earliest `notAfter` of `chain` (from `tls.crt`, leaf first) and of the certificates in
/// `cas` (from `ca.crt`) it chains to; an error names a certificate that does not parse.
pub fn earliest_expiry(
    chain: &[CertificateDer<'_>],
    cas: &[CertificateDer<'_>],
) -> Result<CertificateExpiry, String> {
    let parse =
        |der: &CertificateDer<'_>, key: &str| -> Result<(Vec<u8>, Vec<u8>, String, i64), String> {
            let (_, cert) = X509Certificate::from_der(der.as_ref())
                .map_err(|e| format!("a certificate in {key} does not parse as X.509 ({e})"))?;
            Ok((
                cert.subject().as_raw().to_vec(),
                cert.issuer().as_raw().to_vec(),
                cert.subject().to_string(),
                cert.validity().not_after.timestamp(),
            ))
        };
    let chain = chain
        .iter()
        .map(|c| parse(c, "tls.crt"))
        .collect::<Result<Vec<_>, _>>()?;
    let cas = cas
        .iter()
        .map(|c| parse(c, "ca.crt"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut candidates: Vec<CertificateExpiry> = chain
        .iter()
        .enumerate()
        .map(|(i, (_, _, subject, not_after))| CertificateExpiry {
            which: if i == 0 {
                "the certificate in tls.crt".to_string()
            } else {
                format!("intermediate CA \"{subject}\" in tls.crt")
            },
            not_after: *not_after,
        })
        .collect();
    // The CAs the chain leads to: those named as an issuer, then their issuers, and so on.
    let mut issuers: Vec<&[u8]> = chain
        .iter()
        .map(|(_, issuer, ..)| issuer.as_slice())
        .collect();
    let mut counted = vec![false; cas.len()];
    while let Some(next) =
        (0..cas.len()).find(|&i| !counted[i] && issuers.contains(&cas[i].0.as_slice()))
    {
        counted[next] = true;
        let (_, issuer, subject, not_after) = &cas[next];
        issuers.push(issuer);
        candidates.push(CertificateExpiry {
            which: format!("CA \"{subject}\" in ca.crt"),
            not_after: *not_after,
        });
    }
    // The leaf wins a tie: it is the one to renew.
    candidates
        .into_iter()
        .min_by_key(|c| c.not_after)
        .ok_or_else(|| "tls.crt holds no certificate".to_string())
}

/// Condition `CertificateExpiringSoon` at `now` (seconds since the Unix epoch) for the
/// certificate in Secret `secret`: (status, reason, message). True within
/// [`EXPIRING_WITHIN_DAYS`] of the expiry (`ExpiresWithin30Days`) and after it (`Expired`).
pub fn expiring_soon(
    secret: &str,
    expiry: &CertificateExpiry,
    now: i64,
) -> (bool, &'static str, String) {
    let at = crate::time::rfc3339(expiry.not_after);
    let left = expiry.not_after - now;
    let renew = "renew it (cert-manager: check the Certificate and its Issuer)";
    let which = &expiry.which;
    if left <= 0 {
        (
            true,
            "Expired",
            format!("{which} in Secret \"{secret}\" expired at {at}: {renew}"),
        )
    } else if left <= EXPIRING_WITHIN_DAYS * DAY {
        (
            true,
            "ExpiresWithin30Days",
            format!(
                "{which} in Secret \"{secret}\" expires at {at} (in {}): {renew}",
                days(left)
            ),
        )
    } else {
        (
            false,
            "CertificateValid",
            format!(
                "certificate in Secret \"{secret}\" is valid until {at} ({}; first to expire: {which})",
                days(left)
            ),
        )
    }
}

/// `seconds` as whole days (`19 days`, `1 day`); under a day as hours.
fn days(seconds: i64) -> String {
    match seconds / DAY {
        0 => format!("{} hours", seconds / 3600),
        1 => "1 day".to_string(),
        n => format!("{n} days"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd,
    };

    const JAN_1_2030: i64 = 1_893_456_000;

    fn ca(name: &str, until: (i32, u8, u8)) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.not_after = date_time_ymd(until.0, until.1, until.2);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    fn intermediate(
        name: &str,
        until: (i32, u8, u8),
        by: &CertifiedIssuer<'static, KeyPair>,
    ) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.not_after = date_time_ymd(until.0, until.1, until.2);
        CertifiedIssuer::signed_by(params, KeyPair::generate().unwrap(), by).unwrap()
    }

    fn leaf(
        until: (i32, u8, u8),
        by: &CertifiedIssuer<'static, KeyPair>,
    ) -> CertificateDer<'static> {
        let mut params =
            CertificateParams::new(vec!["cache.team.svc.cluster.local".to_string()]).unwrap();
        params.not_after = date_time_ymd(until.0, until.1, until.2);
        let cert = params.signed_by(&KeyPair::generate().unwrap(), by).unwrap();
        cert.der().clone()
    }

    fn der(issuer: &CertifiedIssuer<'static, KeyPair>) -> CertificateDer<'static> {
        issuer.der().clone()
    }

    #[test]
    fn the_leaf_or_its_ca_counts_whichever_expires_first() {
        for (leaf_until, ca_until, first) in [
            ((2030, 1, 1), (2035, 1, 1), "the certificate in tls.crt"),
            ((2031, 1, 1), (2030, 1, 1), "CA \"CN=root\" in ca.crt"),
        ] {
            let root = ca("root", ca_until);
            let expiry = earliest_expiry(&[leaf(leaf_until, &root)], &[der(&root)]).unwrap();
            assert_eq!(
                (expiry.which.as_str(), expiry.not_after),
                (first, JAN_1_2030)
            );
        }
    }

    #[test]
    fn a_ca_the_chain_does_not_lead_to_does_not_count() {
        // A CA rotation's bundle: the old CA, about to expire, signed nothing in this chain.
        let (old, new) = (ca("old", (2029, 1, 1)), ca("new", (2040, 1, 1)));
        let expiry = earliest_expiry(&[leaf((2030, 1, 1), &new)], &[der(&old), der(&new)]).unwrap();
        assert_eq!(expiry.which, "the certificate in tls.crt");
    }

    #[test]
    fn a_root_above_an_intermediate_counts_and_so_does_the_intermediate() {
        let root = ca("root", (2030, 1, 1));
        let inter = intermediate("inter", (2032, 1, 1), &root);
        // The intermediate in ca.crt, the root above it.
        let expiry =
            earliest_expiry(&[leaf((2034, 1, 1), &inter)], &[der(&inter), der(&root)]).unwrap();
        assert_eq!(expiry.which, "CA \"CN=root\" in ca.crt");
        // The intermediate in tls.crt after the leaf, expiring first.
        let root = ca("root", (2040, 1, 1));
        let inter = intermediate("inter", (2030, 1, 1), &root);
        let chain = [leaf((2034, 1, 1), &inter), der(&inter)];
        let expiry = earliest_expiry(&chain, &[der(&root)]).unwrap();
        assert_eq!(expiry.which, "intermediate CA \"CN=inter\" in tls.crt");
        assert_eq!(expiry.not_after, JAN_1_2030);
    }

    #[test]
    fn garbage_is_named() {
        let err = earliest_expiry(&[CertificateDer::from(vec![1, 2, 3])], &[]).unwrap_err();
        assert!(err.contains("tls.crt"), "{err}");
    }

    fn expiry(not_after: i64) -> CertificateExpiry {
        CertificateExpiry {
            which: "the certificate in tls.crt".into(),
            not_after,
        }
    }

    #[test]
    fn the_condition_reads_like_the_spec() {
        let (soon, reason, message) =
            expiring_soon("my-cluster-tls", &expiry(JAN_1_2030), JAN_1_2030 - 90 * DAY);
        assert!(!soon);
        assert_eq!(reason, "CertificateValid");
        assert_eq!(
            message,
            "certificate in Secret \"my-cluster-tls\" is valid until 2030-01-01T00:00:00Z (90 days; first to expire: the certificate in tls.crt)"
        );
        let (soon, reason, message) = expiring_soon(
            "my-cluster-tls",
            &expiry(JAN_1_2030),
            JAN_1_2030 - 19 * DAY - 5,
        );
        assert!(soon);
        assert_eq!(reason, "ExpiresWithin30Days");
        assert_eq!(
            message,
            "the certificate in tls.crt in Secret \"my-cluster-tls\" expires at 2030-01-01T00:00:00Z (in 19 days): renew it (cert-manager: check the Certificate and its Issuer)"
        );
        let (soon, reason, message) = expiring_soon("s", &expiry(JAN_1_2030), JAN_1_2030 + 1);
        assert!(soon);
        assert_eq!(reason, "Expired");
        assert!(
            message.contains("expired at 2030-01-01T00:00:00Z"),
            "{message}"
        );
        assert!(
            expiring_soon("s", &expiry(JAN_1_2030), JAN_1_2030 - 3 * 3600)
                .2
                .contains("in 3 hours")
        );
    }

    proptest! {
        /// True exactly within 30 days of the expiry (and after it); the message always names
        /// the Secret and the time.
        #[test]
        fn true_exactly_within_thirty_days(left in -400 * DAY..400 * DAY) {
            let (soon, reason, message) = expiring_soon("s", &expiry(JAN_1_2030), JAN_1_2030 - left);
            prop_assert_eq!(soon, left <= EXPIRING_WITHIN_DAYS * DAY);
            prop_assert_eq!(reason == "Expired", left <= 0);
            prop_assert!(message.contains("Secret \"s\"") && message.contains("2030-01-01T00:00:00Z"));
        }
    }
}
