//! The operator's own passwords for each cluster (its ACL user and replication), kept in a
//! Secret in the operator's namespace, out of reach of the tenant namespace's editors. Part
//! of the apply step; the sweep of Secrets whose cluster is gone runs in the background
//! (`controller::run`), since no owner reference can span namespaces.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use tracing::info;

use super::{build, ensure_ours};
use crate::api::ValkeyCluster;
use crate::controller::{CLUSTER_MANAGER, Context, Error, names, object_key};
use crate::resolve::acl::OperatorCredentials;

/// The operator's passwords: generated once into a Secret in the operator's own namespace,
/// then read back from it (never regenerated, or running members would lock the operator out).
/// Clusters created by earlier versions kept them in `<cluster>-operator` in their own
/// namespace: those are moved over (and the tenant-readable copy deleted).
pub async fn ensure_operator_secret(
    ctx: &Context,
    cluster: &ValkeyCluster,
) -> Result<OperatorCredentials, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let secret_name = names::credentials_secret(&namespace, &cluster.name_any());
    let existing = api.get_opt(&secret_name).await?.filter(|s| {
        // One left by an earlier cluster of the same name is not this one's.
        s.labels().get(build::CREDENTIALS_UID_LABEL) == Some(&uid)
    });
    if let Some(secret) = existing {
        return read_credentials(&secret, &ctx.operator_namespace, &secret_name);
    }
    let legacy_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let legacy_name = names::operator_secret(&cluster.name_any());
    let legacy = match legacy_api.get_opt(&legacy_name).await? {
        // Credentials from a Secret somebody else put there would be theirs to know.
        Some(s) if ensure_ours(&s, Some(&uid)).is_ok() => Some(s),
        _ => None,
    };
    let credentials = match &legacy {
        Some(s) => read_credentials(s, &namespace, &legacy_name)?,
        None => OperatorCredentials {
            operator_password: random_password(),
            replication_password: random_password(),
        },
    };
    let secret = build::credentials_secret(cluster, &ctx.operator_namespace, &credentials);
    api.patch(
        &secret_name,
        &PatchParams::apply(CLUSTER_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    if legacy.is_some() {
        info!(cluster = %object_key(cluster), "moved the operator's credentials out of the cluster's namespace");
        let _ = legacy_api.delete(&legacy_name, &Default::default()).await;
    }
    Ok(credentials)
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
                    "Secret {namespace}/{name} has no key {key}; delete it to have it regenerated"
                ))
            })
    };
    Ok(OperatorCredentials {
        operator_password: read(build::OPERATOR_PASSWORD_KEY)?,
        replication_password: read(build::REPLICATION_PASSWORD_KEY)?,
    })
}

/// Deletes credentials Secrets whose cluster no longer exists (there is no cross-namespace
/// owner reference to do it). `live` holds the uids of every ValkeyCluster.
pub async fn sweep_credentials(
    client: &kube::Client,
    operator_namespace: &str,
    live: &std::collections::BTreeSet<String>,
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
        let uid = secret
            .labels()
            .get(build::CREDENTIALS_UID_LABEL)
            .cloned()
            .unwrap_or_default();
        if !live.contains(&uid) {
            api.delete(&secret.name_any(), &Default::default()).await?;
            deleted += 1;
        }
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
