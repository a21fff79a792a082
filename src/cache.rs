//! What the operator's in-memory caches (kube reflector stores) keep of each object. Every
//! store holds one object per resource in the cluster, so what no reader needs is dropped as
//! the watch delivers it: with a fleet of clusters, that is most of the operator's memory.

use std::fmt::Debug;

use futures::stream::{BoxStream, select_all};
use futures::{Stream, StreamExt};
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::scope::{NamespaceMerge, WatchScope};

/// Server-side apply's field ownership is read by no reconcile and no review, and in memory it
/// is most of an object (22 KB of a pod's 32 KB as JSON, more as parsed values; a cluster
/// whose status several field managers write carries one entry per manager): stores drop it.
/// Objects are written back by patch, never by replacing a cached copy, so nothing the API
/// server keeps is lost.
pub fn forget_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A watch of every `K` (as `config` selects) filling a store with its objects, managed fields
/// dropped, and the watch's events. The store fills only while the events are polled.
pub fn trimmed_watch<K>(
    client: &Client,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let events = watcher(Api::<K>::all(client.clone()), config)
        .default_backoff()
        .modify(forget_managed_fields)
        .reflect(writer);
    (store, events)
}

/// A namespaced kind a cache can hold.
pub trait NamespacedKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> NamespacedKind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// [`trimmed_watch`] of a namespaced kind, in the namespaces of `scope` only.
pub fn trimmed_watch_in<K>(
    client: &Client,
    scope: &WatchScope,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: NamespacedKind,
{
    let (store, writer) = reflector::store::<K>();
    let events = events_in(client, scope, config, &store)
        .modify(forget_managed_fields)
        .reflect(writer);
    (store, events)
}

/// The watch events of every `K` in `scope` (as `config` selects), in the form the store
/// they fill (`store`) expects: with a list of namespaces, one watch per namespace merged by
/// [`NamespaceMerge`]; the API's list and watch of every namespace otherwise.
pub fn events_in<K>(
    client: &Client,
    scope: &WatchScope,
    config: watcher::Config,
    store: &Store<K>,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: NamespacedKind,
{
    let Some(namespaces) = scope.namespaces() else {
        return watcher(Api::<K>::all(client.clone()), config)
            .default_backoff()
            .boxed();
    };
    let tagged = select_all(namespaces.iter().map(|namespace| {
        let tag = namespace.clone();
        watcher(
            Api::<K>::namespaced(client.clone(), namespace),
            config.clone(),
        )
        .default_backoff()
        .map(move |event| (tag.clone(), event))
        .boxed()
    }));
    let mut merge = NamespaceMerge::new(namespaces);
    let store = store.clone();
    tagged
        .flat_map(move |(namespace, event)| {
            let out: Vec<_> = match event {
                Ok(event) => merge
                    .next(&namespace, event, || store.state())
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(out)
        })
        .boxed()
}

/// The metadata of every `K` in `scope` as it changes, to trigger reconciles with (a
/// controller's `owns_stream`, `watches_stream`): nothing is stored from it, so the
/// namespaces' watches are simply merged.
pub fn metadata_changes_in<K>(
    client: &Client,
    scope: &WatchScope,
    config: watcher::Config,
) -> BoxStream<'static, Result<PartialObjectMeta<K>, watcher::Error>>
where
    K: NamespacedKind,
{
    let watch = |api: Api<PartialObjectMeta<K>>| {
        watcher(api, config.clone())
            .default_backoff()
            .touched_objects()
            .boxed()
    };
    match scope.namespaces() {
        None => watch(Api::all(client.clone())),
        Some(namespaces) => select_all(
            namespaces
                .iter()
                .map(|namespace| watch(Api::namespaced(client.clone(), namespace))),
        )
        .boxed(),
    }
}

/// A controller for every `K` in `scope` (as `config` selects) whose own store is a
/// [`trimmed_watch_in`].
pub fn controller_for<K>(
    client: &Client,
    scope: &WatchScope,
    config: watcher::Config,
) -> Controller<K>
where
    K: NamespacedKind,
{
    let (store, events) = trimmed_watch_in(client, scope, config);
    Controller::for_stream(events.applied_objects(), store)
}

/// A store of every `K` ([`trimmed_watch`]), kept by a background task for the life of the
/// process. Must be called within a tokio runtime.
pub fn watched_store<K>(client: &Client) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, events) = trimmed_watch(client, watcher::Config::default());
    tokio::spawn(events.for_each(|_| futures::future::ready(())));
    store
}

/// [`watched_store`] of a namespaced kind, in the namespaces of `scope` only.
pub fn watched_store_in<K>(client: &Client, scope: &WatchScope) -> Store<K>
where
    K: NamespacedKind,
{
    let (store, events) = trimmed_watch_in(client, scope, watcher::Config::default());
    tokio::spawn(events.for_each(|_| futures::future::ready(())));
    store
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ValkeyCluster;

    #[test]
    fn a_cached_object_keeps_everything_but_its_managed_fields() {
        let mut cluster: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "app", "labels": {"team": "a"},
                         "managedFields": [{"manager": "kubectl"}, {"manager": "valkey-operator"}]},
            "spec": {"configRef": "standard", "shards": 3},
        }))
        .unwrap();
        let before = cluster.clone();
        forget_managed_fields(&mut cluster);
        assert!(cluster.metadata.managed_fields.is_none());
        assert_eq!(cluster.metadata.labels, before.metadata.labels);
        assert_eq!(cluster.spec, before.spec);
    }
}
