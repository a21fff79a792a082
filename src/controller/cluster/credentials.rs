//! The operator's own passwords for each cluster (its ACL user and replication), kept in a
//! Secret in the operator's namespace, out of reach of the tenant namespace's editors. Part
//! of the apply step; the sweep of Secrets whose cluster is gone runs in the background
//! (`controller::run`), since no owner reference can span namespaces.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use tracing::{info, warn};

use super::build;
use crate::api::ValkeyCluster;
use crate::controller::owner::ensure_ours;
use crate::controller::{CLUSTER_MANAGER, Context, Error, names, object_key};
use crate::resolve::acl::OperatorCredentials;

/// The operator's passwords: generated once into a Secret in the operator's own namespace,
/// then read back from it. Never regenerated for a `formed` cluster (one with members): its
/// members keep the passwords they started with, so new ones would lock the operator out for
/// good; a missing Secret blocks it instead ([`Error::CredentialsMissing`]) until restored.
/// Clusters created by earlier versions kept them in `<cluster>-operator` in their own
/// namespace: those are moved over, and the tenant-readable copy emptied (see
/// [`empty_legacy_secret`]).
pub async fn ensure_operator_secret(
    ctx: &Context,
    cluster: &ValkeyCluster,
    formed: bool,
) -> Result<OperatorCredentials, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let secret_name = names::credentials_secret(&namespace, &cluster.name_any());
    let found = api.get_opt(&secret_name).await?;
    let claim = found.as_ref().map(|s| secret_claim(s, &uid, formed));
    let restored = match claim {
        Some(SecretClaim::Ours) => {
            let secret = found.as_ref().expect("found");
            if has_key(secret, crate::controller::names::BACKUP_PASSWORD_KEY)
                && has_key(secret, crate::controller::names::RESTORE_PASSWORD_KEY)
                && has_key(secret, crate::controller::names::METRICS_PASSWORD_KEY)
            {
                return read_credentials(secret, &ctx.operator_namespace, &secret_name);
            }
            // Created before backups, restores or metrics: the passwords the members hold
            // stay, the backup, restore and metrics users' are generated and written beside
            // them below.
            found.as_ref()
        }
        Some(SecretClaim::Restored) => found.as_ref(),
        Some(SecretClaim::Foreign) | None => None,
    };
    let legacy_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let legacy_name = names::operator_secret(&cluster.name_any());
    let legacy = match legacy_api.get_opt(&legacy_name).await? {
        // Credentials from a Secret somebody else put there would be theirs to know; one this
        // operator already emptied holds none.
        Some(s) if ensure_ours(&s, Some(&uid)).is_ok() && holds_credentials(&s) => Some(s),
        _ => None,
    };
    let credentials = match (restored, &legacy) {
        (Some(s), _) => read_credentials(s, &ctx.operator_namespace, &secret_name)?,
        (None, Some(s)) => read_credentials(s, &namespace, &legacy_name)?,
        (None, None) if formed => {
            return Err(Error::CredentialsMissing {
                namespace: ctx.operator_namespace.clone(),
                name: secret_name,
                why: if found.is_some() {
                    "labelled for another cluster (valkey.gomomento.com/cluster-uid)"
                } else {
                    "missing"
                },
            });
        }
        (None, None) => OperatorCredentials {
            operator_password: random_password(),
            replication_password: random_password(),
            backup_password: random_password(),
            restore_password: random_password(),
            metrics_password: random_password(),
        },
    };
    let secret = build::credentials_secret(cluster, &ctx.operator_namespace, &credentials);
    api.patch(
        &secret_name,
        &PatchParams::apply(CLUSTER_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    if claim == Some(SecretClaim::Restored) {
        info!(cluster = %object_key(cluster), "the operator's credentials Secret is back (restored without its labels): labelled again");
    }
    if legacy.is_some() {
        let moved_to = format!("{}/{secret_name}", ctx.operator_namespace);
        empty_legacy_secret(ctx, &legacy_api, cluster, &legacy_name, &moved_to).await;
    }
    Ok(credentials)
}

/// Annotation on an emptied legacy credentials Secret: where its passwords went.
const CREDENTIALS_MOVED_TO_ANNOTATION: &str = "valkey.gomomento.com/credentials-moved-to";

/// Empties the legacy copy `<cluster>-operator` in the cluster's namespace, once its
/// passwords are safe in the operator's namespace (`moved_to`). It is emptied, not deleted:
/// the operator may not delete Secrets outside its own namespace (docs/security.md, RBAC),
/// and a patch is what it already needs for the ACL Secret. What is left holds no password,
/// says where they went, and is deleted with its cluster (it is owned by it); an admin may
/// delete it sooner. Best effort, like the delete it replaces: a failure is a Warning Event
/// saying what to do, since the next reconcile finds the moved Secret and does not come back.
async fn empty_legacy_secret(
    ctx: &Context,
    legacy_api: &Api<Secret>,
    cluster: &ValkeyCluster,
    legacy_name: &str,
    moved_to: &str,
) {
    let namespace = cluster.namespace().unwrap_or_default();
    let patch = Patch::Merge(emptied_legacy_secret(moved_to));
    match legacy_api
        .patch(legacy_name, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => {
            let note = format!(
                "moved the operator's credentials from Secret {namespace}/{legacy_name}, which the namespace's editors can read, to {moved_to}; {legacy_name} is now empty and is deleted with this cluster (or delete it)"
            );
            info!(cluster = %object_key(cluster), "{note}");
            crate::controller::events::normal(ctx, cluster, "CredentialsMoved", &note).await;
        }
        Err(e) => {
            let note = format!(
                "moved the operator's credentials to {moved_to}, but could not empty the old copy, Secret {namespace}/{legacy_name} ({e}): it still holds them, delete it (kubectl -n {namespace} delete secret {legacy_name})"
            );
            warn!(cluster = %object_key(cluster), "{note}");
            crate::controller::events::warning(ctx, cluster, "CredentialsCopyKept", &note).await;
        }
    }
}

/// The merge patch that empties a legacy credentials Secret: no data (`stringData` is never
/// stored), and an annotation naming where the passwords went.
fn emptied_legacy_secret(moved_to: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {CREDENTIALS_MOVED_TO_ANNOTATION: moved_to}},
        "data": null,
    })
}

/// Whether a legacy credentials Secret still holds a password (an emptied one holds none).
fn holds_credentials(secret: &Secret) -> bool {
    has_key(secret, crate::controller::names::OPERATOR_PASSWORD_KEY)
        || has_key(secret, crate::controller::names::REPLICATION_PASSWORD_KEY)
}

fn has_key(secret: &Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|d| d.contains_key(key))
}

/// Whose the credentials Secret found under this cluster's name is.
#[derive(Debug, PartialEq, Eq)]
enum SecretClaim {
    /// Labelled with this cluster's uid.
    Ours,
    /// No uid label, and the cluster is formed: an admin restored it by hand (`kubectl create
    /// secret`); its passwords are what the members hold, so it is taken and labelled.
    Restored,
    /// Labelled for another cluster (an earlier one of the same name), or unlabelled while
    /// nothing was formed yet: never read.
    Foreign,
}

fn secret_claim(secret: &Secret, uid: &str, formed: bool) -> SecretClaim {
    match secret.labels().get(build::CREDENTIALS_UID_LABEL) {
        Some(label) if label == uid => SecretClaim::Ours,
        None if formed => SecretClaim::Restored,
        _ => SecretClaim::Foreign,
    }
}

/// Both passwords from `secret` (`namespace/name`, for the error that says how to recover).
fn read_credentials(
    secret: &Secret,
    namespace: &str,
    name: &str,
) -> Result<OperatorCredentials, Error> {
    let read = |key: &str| -> Result<String, Error> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .cloned()
            })
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "Secret {namespace}/{name} has no key {key}; restore it from your backup with both {} and {} (a cluster whose members never started can have it regenerated: delete it)",
                    crate::controller::names::OPERATOR_PASSWORD_KEY,
                    crate::controller::names::REPLICATION_PASSWORD_KEY
                ))
            })
    };
    Ok(OperatorCredentials {
        operator_password: read(crate::controller::names::OPERATOR_PASSWORD_KEY)?,
        replication_password: read(crate::controller::names::REPLICATION_PASSWORD_KEY)?,
        // Missing in Secrets written before backups (and in legacy copies): a new one.
        backup_password: read(crate::controller::names::BACKUP_PASSWORD_KEY)
            .unwrap_or_else(|_| random_password()),
        restore_password: read(crate::controller::names::RESTORE_PASSWORD_KEY)
            .unwrap_or_else(|_| random_password()),
        metrics_password: read(crate::controller::names::METRICS_PASSWORD_KEY)
            .unwrap_or_else(|_| random_password()),
    })
}

/// Deletes credentials Secrets whose cluster no longer exists (there is no cross-namespace
/// owner reference to do it). `live` holds the uids of every ValkeyCluster in the cache; a
/// Secret whose uid is not there is deleted only after a live read of its cluster proves it
/// gone (a stale or still-filling cache would otherwise sweep a formed cluster's passwords).
pub async fn sweep_credentials(
    client: &kube::Client,
    operator_namespace: &str,
    live: &std::collections::BTreeSet<String>,
    scope: &crate::scope::WatchScope,
) -> Result<usize, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), operator_namespace);
    let selector = format!(
        "{}={},{}",
        crate::api::constants::LABEL_APP_COMPONENT,
        "credentials",
        build::CREDENTIALS_UID_LABEL
    );
    let mut deleted = 0;
    for secret in api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
    {
        let labels = secret.labels();
        let uid = labels.get(build::CREDENTIALS_UID_LABEL);
        if uid.is_some_and(|uid| live.contains(uid)) {
            continue;
        }
        let owner = (
            labels.get(build::CREDENTIALS_NAMESPACE_LABEL),
            labels.get(crate::api::constants::LABEL_CLUSTER),
        );
        // A cluster in a namespace no longer watched (watchNamespaces changed) is not seen
        // here, but may live: its credentials stay, or the operator would lock itself out of
        // it should the namespace be watched again.
        if owner.0.is_some_and(|namespace| !scope.includes(namespace)) {
            continue;
        }
        let current_uid = match owner {
            (Some(namespace), Some(name)) => {
                Api::<ValkeyCluster>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await?
                    .and_then(|c| c.metadata.uid)
            }
            _ => None,
        };
        if current_uid.is_some() && current_uid.as_ref() == uid {
            continue;
        }
        api.delete(&secret.name_any(), &Default::default()).await?;
        deleted += 1;
    }
    Ok(deleted)
}

/// 40 alphanumerics: about 238 bits, and no character that needs quoting in an ACL file.
fn random_password() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(uid: Option<&str>) -> Secret {
        let mut s = Secret::default();
        if let Some(uid) = uid {
            s.metadata.labels =
                Some([(build::CREDENTIALS_UID_LABEL.to_string(), uid.to_string())].into());
        }
        s
    }

    /// A legacy credentials Secret holding `keys`.
    fn legacy(keys: &[&str]) -> Secret {
        let data = keys
            .iter()
            .map(|k| (k.to_string(), k8s_openapi::ByteString(b"p".to_vec())))
            .collect();
        Secret {
            data: Some(data),
            ..Default::default()
        }
    }

    #[test]
    fn a_legacy_copy_is_emptied_not_deleted_and_then_holds_no_credentials() {
        let both = [
            crate::controller::names::OPERATOR_PASSWORD_KEY,
            crate::controller::names::REPLICATION_PASSWORD_KEY,
        ];
        assert!(holds_credentials(&legacy(&both)));
        // What the API server keeps after the merge patch: no data, the annotation.
        let patch = emptied_legacy_secret("valkey-operator-system/ns.c.credentials");
        assert_eq!(patch["data"], serde_json::Value::Null);
        assert_eq!(
            patch["metadata"]["annotations"][CREDENTIALS_MOVED_TO_ANNOTATION],
            "valkey-operator-system/ns.c.credentials"
        );
        assert!(!holds_credentials(&Secret::default()));
        assert!(!holds_credentials(&legacy(&[])));
        // One password left is still a credential (read, and its error says what is missing).
        assert!(holds_credentials(&legacy(&[
            crate::controller::names::REPLICATION_PASSWORD_KEY
        ])));
    }

    #[test]
    fn a_formed_clusters_secret_is_never_replaced_only_read_or_restored() {
        assert_eq!(
            secret_claim(&secret(Some("u1")), "u1", true),
            SecretClaim::Ours
        );
        assert_eq!(
            secret_claim(&secret(Some("u1")), "u1", false),
            SecretClaim::Ours
        );
        // Restored by hand without labels: the members' passwords, taken.
        assert_eq!(
            secret_claim(&secret(None), "u1", true),
            SecretClaim::Restored
        );
        // Before any member exists an unlabelled Secret is nobody's word.
        assert_eq!(
            secret_claim(&secret(None), "u1", false),
            SecretClaim::Foreign
        );
        // An earlier cluster's of the same name.
        assert_eq!(
            secret_claim(&secret(Some("u0")), "u1", true),
            SecretClaim::Foreign
        );
        assert_eq!(
            secret_claim(&secret(Some("u0")), "u1", false),
            SecretClaim::Foreign
        );
    }
}
