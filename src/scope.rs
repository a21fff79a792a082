//! Which namespaces the operator works in: every namespace (the default), or only those the
//! chart's `watchNamespaces` lists (settings key `watchNamespaces`), where the chart binds its
//! permissions over the clusters' objects. In the second mode no watch, list or cache of a
//! namespaced kind spans the Kubernetes cluster: there is one watch per namespace, merged by
//! [`NamespaceMerge`] into the event stream a single store expects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// The namespaces the operator watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WatchScope {
    /// Every namespace (the default).
    #[default]
    AllNamespaces,
    /// Only these (never empty).
    Only(BTreeSet<String>),
}

/// A `watchNamespaces` value that is not a list of namespace names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit); give a comma-separated list, or leave the key out to watch every namespace"
)]
pub struct InvalidNamespace(pub String);

impl WatchScope {
    /// Parses a comma-separated list of namespace names (spaces around names ignored); an
    /// empty value means every namespace.
    pub fn parse(value: &str) -> Result<WatchScope, InvalidNamespace> {
        let names: BTreeSet<String> = value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                if is_namespace_name(n) {
                    Ok(n.to_owned())
                } else {
                    Err(InvalidNamespace(n.to_owned()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(if names.is_empty() {
            WatchScope::AllNamespaces
        } else {
            WatchScope::Only(names)
        })
    }

    /// Whether the operator works in `namespace`.
    pub fn includes(&self, namespace: &str) -> bool {
        match self {
            WatchScope::AllNamespaces => true,
            WatchScope::Only(names) => names.contains(namespace),
        }
    }

    /// The namespaces listed, or `None` for every namespace.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        match self {
            WatchScope::AllNamespaces => None,
            WatchScope::Only(names) => Some(names),
        }
    }
}

impl std::fmt::Display for WatchScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchScope::AllNamespaces => f.write_str("every namespace"),
            WatchScope::Only(names) => {
                f.write_str(&names.iter().cloned().collect::<Vec<_>>().join(", "))
            }
        }
    }
}

/// An RFC 1123 label, what Kubernetes accepts as a namespace name.
fn is_namespace_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// Merges the watch events of one watch per namespace into what one store expects from one
/// watch. A store's `Init … InitDone` replaces its whole content, so a namespace's list
/// cannot be passed on as such: the first lists are held until every namespace has listed,
/// then passed on as one (the store becomes ready only then, as with a single watch); a later
/// list of one namespace (after its watch expired) becomes updates of its objects and the
/// deletion of those of its objects the store has and the new list lacks.
#[derive(Debug)]
pub struct NamespaceMerge<K> {
    /// Namespaces whose first list has not ended.
    unlisted: BTreeSet<String>,
    /// Until every first list has ended: the objects seen, by (namespace, name).
    held: Option<BTreeMap<(String, String), K>>,
    /// Namespaces listing again, with the names listed so far.
    relisting: BTreeMap<String, BTreeSet<String>>,
}

impl<K: ResourceExt + Clone> NamespaceMerge<K> {
    pub fn new(namespaces: &BTreeSet<String>) -> Self {
        NamespaceMerge {
            unlisted: namespaces.clone(),
            held: Some(BTreeMap::new()),
            relisting: BTreeMap::new(),
        }
    }

    /// The events to pass on for `event` from `namespace`'s watch; `stored` gives what the
    /// store holds now (read only when a namespace's later list ends).
    pub fn next(
        &mut self,
        namespace: &str,
        event: Event<K>,
        stored: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Vec<Event<K>> {
        match self.held.as_mut() {
            Some(held) => {
                match event {
                    Event::Init => {
                        held.retain(|(ns, _), _| ns != namespace);
                        self.unlisted.insert(namespace.to_owned());
                    }
                    Event::InitApply(o) | Event::Apply(o) => {
                        held.insert(key(&o), o);
                    }
                    Event::Delete(o) => {
                        held.remove(&key(&o));
                    }
                    Event::InitDone => {
                        self.unlisted.remove(namespace);
                    }
                }
                if !self.unlisted.is_empty() {
                    return Vec::new();
                }
                let held = self.held.take().unwrap_or_default();
                std::iter::once(Event::Init)
                    .chain(held.into_values().map(Event::InitApply))
                    .chain(std::iter::once(Event::InitDone))
                    .collect()
            }
            None => self.after_first_lists(namespace, event, stored),
        }
    }

    fn after_first_lists(
        &mut self,
        namespace: &str,
        event: Event<K>,
        stored: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Vec<Event<K>> {
        match event {
            Event::Init => {
                self.relisting.insert(namespace.to_owned(), BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                if let Some(listed) = self.relisting.get_mut(namespace) {
                    listed.insert(o.name_any());
                }
                vec![Event::Apply(o)]
            }
            Event::InitDone => {
                let listed = self.relisting.remove(namespace).unwrap_or_default();
                stored()
                    .into_iter()
                    .filter(|o| o.namespace().as_deref() == Some(namespace))
                    .filter(|o| !listed.contains(&o.name_any()))
                    .map(|o| Event::Delete((*o).clone()))
                    .collect()
            }
            event => vec![event],
        }
    }
}

fn key<K: ResourceExt>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    #[test]
    fn watch_namespaces_is_a_comma_separated_list_of_names_or_nothing() {
        assert_eq!(WatchScope::parse("").unwrap(), WatchScope::AllNamespaces);
        assert_eq!(WatchScope::parse(" , ").unwrap(), WatchScope::AllNamespaces);
        let scope = WatchScope::parse("team-a, team-b,team-a").unwrap();
        assert_eq!(
            scope.namespaces().unwrap().iter().collect::<Vec<_>>(),
            ["team-a", "team-b"]
        );
        assert!(scope.includes("team-b") && !scope.includes("team-c"));
        assert!(WatchScope::AllNamespaces.includes("anything"));
        assert_eq!(scope.to_string(), "team-a, team-b");
        for bad in ["Team", "team_a", "-a", "a-", &"a".repeat(64), "a b"] {
            let e = WatchScope::parse(&format!("ok,{bad}")).unwrap_err();
            assert_eq!(e, InvalidNamespace(bad.to_owned()));
            assert!(e.to_string().contains("comma-separated"), "{e}");
        }
    }

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c.data = Some([("v".to_string(), v.to_string())].into());
        c
    }

    /// Feeds `events` (namespace, event) through a merge into a real store; returns the
    /// store's content as "ns/name=v", sorted, and whether it is ready.
    fn run(
        (merge, writer, store): &mut Merged,
        events: Vec<(&str, Event<ConfigMap>)>,
    ) -> Vec<String> {
        for (ns, event) in events {
            for out in merge.next(ns, event, || store.state()) {
                writer.apply_watcher_event(&out);
            }
        }
        let mut content: Vec<String> = store
            .state()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}={}",
                    c.namespace().unwrap(),
                    c.name_any(),
                    c.data.as_ref().unwrap()["v"]
                )
            })
            .collect();
        content.sort();
        content
    }

    type Merged = (
        NamespaceMerge<ConfigMap>,
        reflector::store::Writer<ConfigMap>,
        reflector::Store<ConfigMap>,
    );

    /// A merge of namespaces a and b, and the store it fills.
    fn a_and_b() -> Merged {
        let namespaces: BTreeSet<String> = ["a".into(), "b".into()].into();
        let (store, writer) = reflector::store::<ConfigMap>();
        (NamespaceMerge::new(&namespaces), writer, store)
    }

    #[test]
    fn the_store_fills_once_every_namespace_has_listed_and_follows_relists_of_one() {
        let mut m = a_and_b();
        // a lists, changes and deletes while b still lists: nothing shows, nothing is ready.
        let content = run(
            &mut m,
            vec![
                ("a", Event::Init),
                ("b", Event::Init),
                ("a", Event::InitApply(cm("a", "x", "1"))),
                ("a", Event::InitApply(cm("a", "gone", "1"))),
                ("a", Event::InitDone),
                ("b", Event::InitApply(cm("b", "y", "1"))),
                ("a", Event::Apply(cm("a", "x", "2"))),
                ("a", Event::Delete(cm("a", "gone", "1"))),
            ],
        );
        assert!(content.is_empty());
        assert!(m.2.wait_until_ready().now_or_never().is_none());
        let content = run(&mut m, vec![("b", Event::InitDone)]);
        assert_eq!(content, ["a/x=2", "b/y=1"]);
        assert!(m.2.wait_until_ready().now_or_never().is_some());
        // Later events pass on; a relist of b drops what b's new list lacks, and only that.
        let content = run(
            &mut m,
            vec![
                ("b", Event::Apply(cm("b", "z", "1"))),
                ("a", Event::Apply(cm("a", "w", "1"))),
                ("b", Event::Init),
                ("b", Event::InitApply(cm("b", "z", "2"))),
                ("a", Event::Delete(cm("a", "w", "1"))),
                ("b", Event::InitDone),
            ],
        );
        assert_eq!(content, ["a/x=2", "b/z=2"]);
    }

    #[test]
    fn a_namespace_listing_again_before_the_others_first_list_replaces_what_it_listed() {
        let mut m = a_and_b();
        let content = run(
            &mut m,
            vec![
                ("a", Event::Init),
                ("a", Event::InitApply(cm("a", "old", "1"))),
                ("a", Event::InitDone),
                ("a", Event::Init),
                ("a", Event::InitApply(cm("a", "new", "1"))),
                ("a", Event::InitDone),
                ("b", Event::Init),
                ("b", Event::InitDone),
            ],
        );
        assert_eq!(content, ["a/new=1"]);
    }

    use futures::FutureExt;
}
