//! What the operator's in-memory caches (kube reflector stores) keep of each object. Every
//! store holds one object per resource in the cluster, so what no reader needs is dropped as
//! the watch delivers it: with a fleet of clusters, that is most of the operator's memory.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

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

/// A controller for every `K` (as `config` selects) whose own store is a [`trimmed_watch`].
pub fn controller_for<K>(client: &Client, config: watcher::Config) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, events) = trimmed_watch(client, config);
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
