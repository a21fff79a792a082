//! Validating admission, one file per kind. Each `validate` is pure: it takes the
//! [`AdmissionRequest`] (and, for kinds whose rules read the menu, a snapshot of it) and returns
//! the [`AdmissionResponse`]: allowed, allowed with warnings, or denied with a message saying
//! what is wrong and what to do. Reading the menu from the API is the router's job
//! ([`MenuSource`]).

pub mod cluster;
pub mod config;
pub mod dependants;
pub mod downgrade;
pub mod image;
pub mod metering;
pub mod node;
pub mod role;
pub mod settings;

use crate::scope::WatchScope;
use futures::future::BoxFuture;
use kube::api::{Api, ListParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::{Client, Resource, ResourceExt};

use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyRole};
use crate::resolve::MenuMap;

/// Allow with the given warnings (none: plain allow).
pub fn allow_with_warnings<K: Resource>(
    req: &AdmissionRequest<K>,
    warnings: Vec<String>,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Deny with a message, keeping warnings computed so far.
pub fn deny<K: Resource>(
    req: &AdmissionRequest<K>,
    message: String,
    warnings: Vec<String>,
) -> AdmissionResponse {
    let mut response = allow_with_warnings(req, warnings).deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".into();
    response
}

/// Why the webhook could not read the menu or the ValkeyClusters. Never fails a request: it
/// becomes a warning (see [`lookup_warning`]), so the message is what the user reads there.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LookupError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// Shared, not owned: a menu snapshot (and with it this error) is cloned per review.
    #[error("{0}")]
    Api(std::sync::Arc<kube::Error>),
}

impl From<kube::Error> for LookupError {
    fn from(error: kube::Error) -> Self {
        LookupError::Api(std::sync::Arc::new(error))
    }
}

/// The platform's menu (configs, images, roles) as the webhook reads it: a snapshot, or why it
/// could not be read. A lookup failure never fails a request; it becomes a warning.
pub type MenuSnapshot = Result<MenuMap, LookupError>;

/// A ValkeyCluster as the menu rules see it: which config it names, which usernames it binds
/// in its own `spec.acl` (merged with its config's bindings, they must stay unique) and which
/// Valkey versions its members run (a repoint must not move it to an older one unnoticed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterSummary {
    pub namespace: String,
    pub name: String,
    pub config_ref: String,
    pub usernames: Vec<String>,
    /// `status.nodes[].version`, as observed by the operator.
    pub versions: Vec<String>,
}

impl From<&ValkeyCluster> for ClusterSummary {
    fn from(cluster: &ValkeyCluster) -> Self {
        ClusterSummary {
            namespace: cluster.namespace().unwrap_or_default(),
            name: cluster.name_any(),
            config_ref: cluster.spec.config_ref.clone(),
            usernames: cluster
                .spec
                .acl
                .iter()
                .map(|b| b.username.clone())
                .collect(),
            versions: cluster
                .status
                .iter()
                .flat_map(|s| &s.nodes)
                .filter_map(|n| n.version.clone())
                .collect(),
        }
    }
}

/// Every ValkeyCluster's usernames, or why they could not be read.
pub type Clusters = Result<Vec<ClusterSummary>, LookupError>;

/// Where the webhook reads the menu from.
pub trait MenuSource: Send + Sync {
    /// The menu, possibly from a cache a few milliseconds behind the API server (advisory
    /// checks: ValkeyCluster warnings).
    fn snapshot(&self) -> BoxFuture<'_, MenuSnapshot>;
    /// The menu as the API server has it now (checks that deny: ValkeyConfig cycles).
    fn fresh_snapshot(&self) -> BoxFuture<'_, MenuSnapshot> {
        self.snapshot()
    }
    /// Every ValkeyCluster, as the API server has it now (a ValkeyConfig's bindings must not
    /// clash with those of the clusters using it).
    fn clusters(&self) -> BoxFuture<'_, Clusters>;
    /// A ValkeyBackup and its location, as the API server has them now (a new cluster's
    /// `spec.restoreFrom`); `(None, None)` where the source cannot read them.
    fn restore_source<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
    ) -> BoxFuture<'a, RestoreSource> {
        Box::pin(async { Ok((None, None)) })
    }
}

/// A ValkeyBackup and its ValkeyBackupLocation, as found.
pub type RestoreSource = Result<
    (
        Option<crate::api::backup::ValkeyBackup>,
        Option<crate::api::backup::ValkeyBackupLocation>,
    ),
    LookupError,
>;

impl ApiMenu {
    /// Two GETs (restores are rare: no watch is kept for them).
    fn get_restore_source<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, RestoreSource> {
        Box::pin(async move {
            let lookups = crate::backup::restore::find_source(&self.client, namespace, name);
            Ok(tokio::time::timeout(self.timeout, lookups)
                .await
                .map_err(|_| LookupError::Timeout(self.timeout))??)
        })
    }
}

/// The menu from the API server: three cluster-scoped lists, bounded in time.
pub struct ApiMenu {
    pub client: Client,
    pub timeout: std::time::Duration,
    /// Where ValkeyClusters are listed (`watchNamespaces`: where the operator may list them).
    pub scope: WatchScope,
}

impl MenuSource for ApiMenu {
    fn snapshot(&self) -> BoxFuture<'_, MenuSnapshot> {
        Box::pin(async move {
            let lp = ListParams::default();
            let configs = Api::<ValkeyConfig>::all(self.client.clone());
            let images = Api::<ValkeyImage>::all(self.client.clone());
            let roles = Api::<ValkeyRole>::all(self.client.clone());
            let lists =
                async { tokio::try_join!(configs.list(&lp), images.list(&lp), roles.list(&lp)) };
            let (configs, images, roles) = tokio::time::timeout(self.timeout, lists)
                .await
                .map_err(|_| LookupError::Timeout(self.timeout))??;
            Ok(MenuMap::from_objects(configs, images, roles))
        })
    }

    fn restore_source<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, RestoreSource> {
        self.get_restore_source(namespace, name)
    }

    fn clusters(&self) -> BoxFuture<'_, Clusters> {
        Box::pin(async move {
            let apis: Vec<Api<ValkeyCluster>> = match self.scope.namespaces() {
                None => vec![Api::all(self.client.clone())],
                Some(namespaces) => namespaces
                    .iter()
                    .map(|ns| Api::namespaced(self.client.clone(), ns))
                    .collect(),
            };
            let lp = ListParams::default();
            let lists = futures::future::try_join_all(apis.iter().map(|api| api.list(&lp)));
            let lists = tokio::time::timeout(self.timeout, lists)
                .await
                .map_err(|_| LookupError::Timeout(self.timeout))??;
            Ok(lists
                .iter()
                .flat_map(|list| list.iter().map(ClusterSummary::from))
                .collect())
        })
    }
}

/// The menu and the ValkeyClusters from watch caches (one reflector per kind), so a review
/// costs no API call: what matters at 200 reviews/s, where listing every ValkeyCluster of the
/// fleet per ValkeyConfig or ValkeyImage review would load the API server (see `make bench`).
/// Until every cache has listed once, reviews fall back to [`ApiMenu`].
pub struct WatchedMenu {
    configs: kube::runtime::reflector::Store<ValkeyConfig>,
    images: kube::runtime::reflector::Store<ValkeyImage>,
    roles: kube::runtime::reflector::Store<ValkeyRole>,
    clusters: kube::runtime::reflector::Store<ValkeyCluster>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    fallback: ApiMenu,
}

impl WatchedMenu {
    /// Starts the four watches (background tasks for the life of the process); ValkeyClusters
    /// are watched in `scope` only.
    pub fn start(client: Client, timeout: std::time::Duration, scope: WatchScope) -> WatchedMenu {
        use crate::cache::watched_store as watch;
        let (configs, images, roles) = (watch(&client), watch(&client), watch(&client));
        let clusters = crate::cache::watched_store_in(&client, &scope);
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, i, r, k, flag) = (
            configs.clone(),
            images.clone(),
            roles.clone(),
            clusters.clone(),
            ready.clone(),
        );
        tokio::spawn(async move {
            if c.wait_until_ready().await.is_ok()
                && i.wait_until_ready().await.is_ok()
                && r.wait_until_ready().await.is_ok()
                && k.wait_until_ready().await.is_ok()
            {
                flag.store(true, std::sync::atomic::Ordering::Release);
            }
        });
        WatchedMenu {
            configs,
            images,
            roles,
            clusters,
            ready,
            fallback: ApiMenu {
                client,
                timeout,
                scope,
            },
        }
    }
}

/// Every review reads the caches, ValkeyConfig cycle checks included: a cache is milliseconds
/// behind the API server, and a cycle that two concurrent edits slip past it is still caught
/// by the controller (the clusters on it are Blocked, `ConfigResolved=False`), so no review
/// costs a LIST.
impl MenuSource for WatchedMenu {
    fn restore_source<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, RestoreSource> {
        self.fallback.get_restore_source(namespace, name)
    }

    fn clusters(&self) -> BoxFuture<'_, Clusters> {
        if !self.ready.load(std::sync::atomic::Ordering::Acquire) {
            return self.fallback.clusters();
        }
        let clusters: Vec<ClusterSummary> = self
            .clusters
            .state()
            .iter()
            .map(|c| ClusterSummary::from(c.as_ref()))
            .collect();
        Box::pin(async move { Ok(clusters) })
    }

    fn snapshot(&self) -> BoxFuture<'_, MenuSnapshot> {
        if !self.ready.load(std::sync::atomic::Ordering::Acquire) {
            return self.fallback.snapshot();
        }
        let images = self.images.state();
        let menu = MenuMap {
            configs: self
                .configs
                .state()
                .iter()
                .map(|c| (c.name_any(), c.spec.clone()))
                .collect(),
            images: images
                .iter()
                .map(|i| (i.name_any(), i.spec.clone()))
                .collect(),
            terminating_images: crate::resolve::chain::terminating(images.iter().map(|i| &**i)),
            roles: self
                .roles
                .state()
                .iter()
                .map(|r| (r.name_any(), r.spec.clone()))
                .collect(),
        };
        Box::pin(async move { Ok(menu) })
    }
}

/// A fixed menu and no clusters: tests, and a server without API access.
pub struct FixedMenu(pub MenuSnapshot);

impl MenuSource for FixedMenu {
    fn snapshot(&self) -> BoxFuture<'_, MenuSnapshot> {
        let menu = self.0.clone();
        Box::pin(async move { menu })
    }

    fn clusters(&self) -> BoxFuture<'_, Clusters> {
        Box::pin(async move { Ok(Vec::new()) })
    }
}

/// `1 ValkeyCluster`, `3 ValkeyClusters`. Replies to writes of the menu count the clusters
/// concerned and never name them: they live in the tenants' namespaces, which the webhook reads
/// (all of them) and the caller may not. [`impact_hint`] says how to list them with the
/// caller's own access.
pub fn count_clusters(count: usize) -> String {
    match count {
        1 => "1 ValkeyCluster".to_string(),
        n => format!("{n} ValkeyClusters"),
    }
}

/// How the caller lists the clusters a menu object concerns, with the caller's own read access
/// (`kind`: `config` or `image`, as the plugin spells it).
pub fn impact_hint(kind: &str, name: &str) -> String {
    format!("`kubectl valkey impact {kind} {name}` lists the clusters using it that you may read")
}

/// The first channel entry of `bindings` that is not a printable-ASCII glob (the CRD schema
/// cannot check entries that may be a string or an object), as a denial message.
pub fn invalid_channels(field: &str, bindings: &[crate::api::AclBinding]) -> Option<String> {
    for (b, binding) in bindings.iter().enumerate() {
        for (p, permission) in binding.permissions.iter().enumerate() {
            for (c, channel) in permission.channels.iter().enumerate() {
                if !channel.is_valid() {
                    return Some(format!(
                        "{field}[{b}].permissions[{p}].channels[{c}] must be {} (a string, or {{pattern: ...}}), got {:?}",
                        crate::api::validation::ACL_PATTERN.describe,
                        channel.pattern
                    ));
                }
            }
        }
    }
    None
}

/// The warning added when the menu could not be read.
pub fn lookup_warning(error: &LookupError) -> String {
    format!(
        "references were not checked (the webhook could not read the ValkeyConfig/ValkeyImage/ValkeyRole menu: {error}); the operator resolves them when it reconciles"
    )
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! AdmissionReview fixtures under `webhooks/fixtures/`.
    use std::path::PathBuf;

    use kube::core::admission::{AdmissionRequest, AdmissionReview};

    pub fn path(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("webhooks/fixtures")
            .join(name)
    }

    /// A menu or cluster lookup that failed with `why`, as a client error would.
    pub fn unreadable(why: &str) -> super::LookupError {
        kube::Error::Service(why.into()).into()
    }

    pub fn raw(name: &str) -> serde_json::Value {
        let text =
            std::fs::read_to_string(path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    /// The fixture with `edit` applied to its JSON, as a typed request.
    pub fn request<K>(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> AdmissionRequest<K>
    where
        K: kube::Resource + serde::de::DeserializeOwned,
    {
        let mut value = raw(name);
        edit(&mut value);
        let review: AdmissionReview<K> =
            serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
        review.try_into().expect("fixture has a request")
    }
}
