//! TLS steps of a TLS cluster's reconcile.
//!
//! **Certificate** (before anything is applied): the Secret `spec.tls.secretRef` names is
//! read and validated ([`crate::resolve::tls`]); a missing or broken one blocks the cluster
//! with a message naming it (`TlsCertificateValid` false) and never reaches the members. A
//! valid one is copied into the operator's own Secret `<cluster>-member-tls`, the one every
//! member mounts: its name never changes, so a renewal or pointing `secretRef` at another
//! Secret changes only its content, never a member's spec or pod. The Secrets are watched
//! (see `run.rs`), so creating or fixing the Secret unblocks the cluster by itself.
//!
//! **Reload** (after the plan's steps): the kubelet refreshes the members' Secret volume
//! some time after the copy changes (about a minute at most with its default sync period).
//! For every running member the operator reads the certificate it serves (a verified TLS
//! handshake); a member serving another certificate than the copy holds gets
//! `CONFIG SET tls-cert-file/tls-key-file/tls-ca-cert-file` with the same paths, which makes
//! Valkey read the files again (any version), and is asked again. A member still serving the
//! old one has not had its volume refreshed yet: the cluster is looked at again in 2 s. On
//! Valkey 9.1 and later members also reload by themselves (`tls-auto-reload-interval`).
//! No member restarts.

use std::collections::BTreeMap;

use futures::future::join_all;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use rustls::pki_types::UnixTime;
use tracing::{debug, info, warn};

use super::build;
use super::context::ClusterContext;
use super::observed::Observed;
use crate::api::ValkeyCluster;
use crate::controller::{Context, Error, names, object_key};
use crate::driver::{ClusterDriver, MemberAddr, TlsSettings};
use crate::resolve::certificate_expiry::CertificateExpiry;
use crate::resolve::conf::tls_file_settings;
use crate::resolve::tls::{ServedCertificate, validate_member_copy, validate_tls_secret};

pub use super::conditions::{TLS_CERTIFICATE_SERVED, TLS_CERTIFICATE_VALID};

/// A TLS cluster's validated certificate and how the operator connects to its members.
#[derive(Clone, Debug)]
pub struct ClusterTls {
    pub certificate: ServedCertificate,
    /// The driver's TLS: the CA bundle, members verified as `<cluster>.<ns>.svc.cluster.local`.
    pub driver: TlsSettings,
}

/// What the certificate step found.
pub enum Certificate {
    /// `None` for a plaintext cluster; for a TLS cluster the validated certificate, copied
    /// into `<cluster>-member-tls`.
    Usable(Option<ClusterTls>),
    /// The cluster is Blocked for this reason (the source Secret missing or invalid, or the
    /// copy's name taken by someone else's object); nothing was copied.
    Unusable(CertificateBlocker),
}

/// Why a TLS cluster's certificate blocks it: a condition set to False with its reason.
pub struct CertificateBlocker {
    pub condition: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl CertificateBlocker {
    pub fn cause(&self) -> super::conditions::Blocker<'_> {
        super::conditions::Blocker {
            condition: self.condition,
            reason: self.reason,
            message: &self.message,
        }
    }
}

/// The certificate step: for a TLS cluster, validates the Secret `spec.tls.secretRef` names
/// and copies it into `<cluster>-member-tls` (the caller publishes Blocked when unusable).
#[tracing::instrument(name = "cluster.certificate", skip_all)]
pub async fn certificate(
    cctx: &ClusterContext,
    cluster: &ValkeyCluster,
) -> Result<Certificate, Error> {
    let Some(spec) = &cluster.spec.tls else {
        return Ok(Certificate::Usable(None));
    };
    let ctx = &cctx.ctx;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let source = secrets.get_opt(&spec.secret_ref).await?;
    let data = source.map(|s| secret_bytes(&s));
    let blocker = match validate_tls_secret(
        &namespace,
        &name,
        &spec.secret_ref,
        data.as_ref(),
        UnixTime::now(),
    ) {
        Ok(certificate) => {
            match crate::controller::owner::apply(
                ctx,
                &namespace,
                build::tls_secret(cluster, &certificate)?,
            )
            .await
            {
                Ok(_) => {
                    let driver = driver_settings(&certificate, &name, &namespace, None);
                    return Ok(Certificate::Usable(Some(ClusterTls {
                        certificate,
                        driver,
                    })));
                }
                Err(err @ Error::NameTaken { .. }) => CertificateBlocker {
                    condition: "ObjectsOwned",
                    reason: "NameTaken",
                    message: err.to_string(),
                },
                Err(err) => return Err(err),
            }
        }
        Err(err) => CertificateBlocker {
            condition: TLS_CERTIFICATE_VALID,
            reason: err.reason(),
            message: err.to_string(),
        },
    };
    info!(cluster = %object_key(cluster), reason = blocker.reason, "blocked: {}", blocker.message);
    Ok(Certificate::Unusable(blocker))
}

/// How the operator connects to members serving `certificate`: trusting its CA bundle,
/// verifying the cluster's name, as of `verify_as_of` (now when `None`).
fn driver_settings(
    certificate: &ServedCertificate,
    cluster: &str,
    namespace: &str,
    verify_as_of: Option<UnixTime>,
) -> TlsSettings {
    TlsSettings {
        ca_pem: String::from_utf8_lossy(&certificate.ca_pem).into_owned(),
        server_name: Some(names::cluster_hostname(cluster, namespace)),
        verify_as_of: verify_as_of.map(|t| t.as_secs()),
    }
}

/// While the cluster is Blocked on its certificate: the members' TLS from the operator's own
/// copy `<cluster>-member-tls` (what they serve), so failure handling goes on. An expired
/// copy is verified as of its `notAfter`; `None` when the copy is missing, not this
/// cluster's, or unusable for another reason.
pub async fn members_copy(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<Option<ClusterTls>, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(copy) = secrets.get_opt(&names::tls_secret(&name)).await? else {
        return Ok(None);
    };
    if !crate::controller::owner::owned_by(&copy, cluster) {
        return Ok(None);
    }
    let now = UnixTime::now();
    match validate_member_copy(&namespace, &name, Some(&secret_bytes(&copy)), now) {
        Ok((certificate, as_of)) => {
            let expired = (as_of != now).then_some(as_of);
            let driver = driver_settings(&certificate, &name, &namespace, expired);
            Ok(Some(ClusterTls {
                certificate,
                driver,
            }))
        }
        Err(err) => {
            warn!(cluster = %object_key(cluster), "the members' certificate copy is unusable too: {err}");
            Ok(None)
        }
    }
}

/// A Secret's data as bytes per key (`stringData` is folded into `data` by the API server).
fn secret_bytes(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, ByteString(v))| (k.clone(), v.clone()))
        .collect()
}

/// Where one member is with the current certificate after this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberTls {
    /// It serves the current certificate (`reloaded`: thanks to a `CONFIG SET` this round).
    Serving { reloaded: bool },
    /// It still serves another certificate after `CONFIG SET`: its Secret volume has not
    /// been refreshed yet.
    Stale,
    /// Its pod is not ready: it reads the files when it starts.
    NotRunning,
    /// The handshake or `CONFIG SET` failed.
    Failed { error: String },
}

/// Which members serve the current certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsProgress {
    /// (member name, outcome), in member order.
    pub members: Vec<(String, MemberTls)>,
    /// The first certificate of the current chain to expire (`CertificateExpiringSoon`).
    pub expiry: Option<CertificateExpiry>,
}

impl TlsProgress {
    fn names(&self, want: fn(&MemberTls) -> bool) -> Vec<&str> {
        self.members
            .iter()
            .filter(|(_, m)| want(m))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Seconds until the cluster should be looked at again for the certificate's sake: 2 while
    /// a member waits for its Secret volume (the rotation's bound depends on it), 10 while a
    /// handshake or reload fails, `None` when nothing waits.
    pub fn look_again_in(&self) -> Option<u64> {
        let any = |want: fn(&MemberTls) -> bool| self.members.iter().any(|(_, m)| want(m));
        if any(|m| matches!(m, MemberTls::Stale)) {
            Some(2)
        } else if any(|m| matches!(m, MemberTls::Failed { .. })) {
            Some(10)
        } else {
            None
        }
    }

    pub fn reloaded(&self) -> usize {
        self.names(|m| matches!(m, MemberTls::Serving { reloaded: true }))
            .len()
    }

    /// Condition `TlsCertificateServed`: (status, reason, message).
    pub fn condition(&self) -> (bool, &'static str, String) {
        let total = self.members.len();
        let serving = self.names(|m| matches!(m, MemberTls::Serving { .. })).len();
        if total > 0 && serving == total {
            return (
                true,
                "Serving",
                format!("all {total} members serve the current certificate"),
            );
        }
        let mut waiting = Vec::new();
        let stale = self.names(|m| matches!(m, MemberTls::Stale));
        if !stale.is_empty() {
            waiting.push(format!(
                "waiting for the Secret volume to refresh on {}",
                stale.join(", ")
            ));
        }
        if let Some((name, MemberTls::Failed { error })) = self
            .members
            .iter()
            .find(|(_, m)| matches!(m, MemberTls::Failed { .. }))
        {
            waiting.push(format!("{name}: {error}"));
        }
        let down = self.names(|m| matches!(m, MemberTls::NotRunning));
        if !down.is_empty() {
            waiting.push(format!("not running yet: {}", down.join(", ")));
        }
        let reason = if self
            .members
            .iter()
            .any(|(_, m)| matches!(m, MemberTls::Failed { .. }))
        {
            "ReloadFailed"
        } else {
            "Reloading"
        };
        (
            false,
            reason,
            format!(
                "{serving} of {total} members serve the current certificate; {}",
                waiting.join("; ")
            ),
        )
    }
}

/// The reload step: every running member ends up serving `certificate` (see the module docs).
#[tracing::instrument(name = "cluster.reload", skip_all)]
/// [`reload`] for a TLS cluster (`tls` is its certificate); nothing for a plaintext one.
pub async fn reload_if_tls(
    ctx: &Context,
    cluster: &ValkeyCluster,
    driver: &dyn ClusterDriver,
    observed: &[Observed],
    tls: &Option<ClusterTls>,
) -> Option<TlsProgress> {
    match tls {
        Some(tls) => Some(reload(ctx, cluster, driver, observed, tls).await),
        None => None,
    }
}

pub async fn reload(
    ctx: &Context,
    cluster: &ValkeyCluster,
    driver: &dyn ClusterDriver,
    observed: &[Observed],
    tls: &ClusterTls,
) -> TlsProgress {
    let members = super::observe::reachable_addresses(observed);
    let files: Vec<(String, String)> = tls_file_settings()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut progress = reload_members(
        driver,
        &object_key(cluster),
        &members,
        &tls.certificate.leaf_der,
        &files,
    )
    .await;
    progress.expiry = Some(tls.certificate.expiry.clone());
    let stale = progress.names(|m| matches!(m, MemberTls::Stale));
    if !stale.is_empty() {
        let namespace = cluster.namespace().unwrap_or_default();
        super::pods::refresh_secret_volumes(ctx, &namespace, &stale).await;
    }
    let reloaded = progress.reloaded();
    if reloaded > 0 {
        info!(cluster = %object_key(cluster), reloaded, "members reloaded their TLS certificate");
        let names: Vec<&str> = progress
            .members
            .iter()
            .filter(|(_, m)| *m == MemberTls::Serving { reloaded: true })
            .map(|(n, _)| n.as_str())
            .collect();
        let note = format!(
            "{} now serve the current certificate (its files re-read, no restart)",
            names.join(", ")
        );
        let (action, reason) = ("ReloadCertificate", "CertificateReloaded");
        crate::controller::events::publish(ctx, cluster, EventType::Normal, action, reason, &note)
            .await;
    }
    progress
}

/// [`reload`] over (member name, client address if its pod is ready), with the `CONFIG SET`
/// that makes a member read its TLS files again (`files`: setting and path).
pub async fn reload_members(
    driver: &dyn ClusterDriver,
    cluster: &str,
    members: &[(String, Option<MemberAddr>)],
    leaf_der: &[u8],
    files: &[(String, String)],
) -> TlsProgress {
    let members = join_all(members.iter().map(|(name, addr)| async move {
        let name = name.clone();
        let Some(addr) = addr else {
            return (name, MemberTls::NotRunning);
        };
        match driver.served_certificate(addr).await {
            Ok(Some(served)) if served == leaf_der => {
                return (name, MemberTls::Serving { reloaded: false });
            }
            Ok(_) => {}
            Err(e) => {
                return (
                    name,
                    MemberTls::Failed {
                        error: e.to_string(),
                    },
                );
            }
        }
        if let Err(e) = driver.config_set(addr, files).await {
            warn!(cluster, member = %name, "TLS reload (CONFIG SET) failed: {e}");
            return (
                name,
                MemberTls::Failed {
                    error: e.to_string(),
                },
            );
        }
        let outcome = match driver.served_certificate(addr).await {
            Ok(Some(served)) if served == leaf_der => MemberTls::Serving { reloaded: true },
            Ok(_) => {
                debug!(cluster, member = %name, "TLS Secret volume not refreshed yet");
                MemberTls::Stale
            }
            Err(e) => MemberTls::Failed {
                error: e.to_string(),
            },
        };
        (name, outcome)
    }))
    .await;
    TlsProgress {
        members,
        expiry: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(members: &[(&str, MemberTls)]) -> TlsProgress {
        TlsProgress {
            members: members
                .iter()
                .map(|(n, m)| (n.to_string(), m.clone()))
                .collect(),
            expiry: None,
        }
    }

    #[test]
    fn served_when_every_member_serves_the_current_certificate() {
        let p = progress(&[
            ("c-0-0", MemberTls::Serving { reloaded: true }),
            ("c-0-1", MemberTls::Serving { reloaded: false }),
        ]);
        assert_eq!(p.look_again_in(), None);
        assert_eq!(p.reloaded(), 1);
        assert_eq!(
            p.condition(),
            (
                true,
                "Serving",
                "all 2 members serve the current certificate".to_string()
            )
        );
    }

    #[test]
    fn a_member_on_the_old_certificate_is_named_and_looked_at_again_soon() {
        let p = progress(&[
            ("c-0-0", MemberTls::Serving { reloaded: true }),
            ("c-0-1", MemberTls::Stale),
            ("c-1-0", MemberTls::NotRunning),
        ]);
        assert_eq!(p.look_again_in(), Some(2));
        let (ok, reason, message) = p.condition();
        assert!(!ok);
        assert_eq!(reason, "Reloading");
        assert_eq!(
            message,
            "1 of 3 members serve the current certificate; waiting for the Secret volume to refresh on c-0-1; not running yet: c-1-0"
        );
    }

    #[test]
    fn a_failed_reload_says_why() {
        let p = progress(&[(
            "c-0-0",
            MemberTls::Failed {
                error: "boom".into(),
            },
        )]);
        assert_eq!(p.look_again_in(), Some(10));
        let (ok, reason, message) = p.condition();
        assert!(!ok);
        assert_eq!(reason, "ReloadFailed");
        assert!(message.contains("c-0-0: boom"), "{message}");
    }
}
