//! Which taints keep a member's pod off the nodes it may run on. Kubernetes 1.34's scheduler
//! counts them ("1 node(s) had untolerated taint(s)") without naming them; the platform team
//! needs the name to add the toleration to the config's `scheduling`.

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, PodSpec, Taint, Toleration};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tracing::debug;

use super::observed::Observed;

/// How the scheduler says a node has a taint the pod does not tolerate.
const UNTOLERATED: &str = "untolerated taint";

/// Adds to each member whose pod is unschedulable for an untolerated taint which taints of
/// which nodes those are (one Node list for the whole cluster, only then).
pub async fn name_untolerated(
    client: &Client,
    pods: &kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod>,
    observed: &mut [Observed],
) {
    let waiting = |o: &Observed| {
        o.member
            .pod_problem
            .as_deref()
            .is_some_and(|p| p.contains(UNTOLERATED))
    };
    if !observed.iter().any(waiting) {
        return;
    }
    let nodes = match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            debug!("listing nodes to name their taints failed: {e}");
            return;
        }
    };
    for o in observed.iter_mut().filter(|o| waiting(o)) {
        let namespace = o.node.namespace().unwrap_or_default();
        let Some(pod) = o
            .pod
            .as_ref()
            .and_then(|name| pods.get(&ObjectRef::new(name).within(&namespace)))
        else {
            continue;
        };
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let named = untolerated(spec, &nodes);
        if let (Some(problem), false) = (o.member.pod_problem.as_mut(), named.is_empty()) {
            problem.push_str(&format!(
                " (untolerated: {}; a toleration goes in the ValkeyConfig's spec.scheduling)",
                named.join(", ")
            ));
        }
    }
}

/// `node key=value:Effect` for every taint that keeps the pod off a node it could otherwise
/// run on (its node selector and required node affinity match): NoSchedule and NoExecute
/// taints none of its tolerations tolerates.
pub fn untolerated(pod: &PodSpec, nodes: &[Node]) -> Vec<String> {
    let tolerations = pod.tolerations.as_deref().unwrap_or_default();
    nodes
        .iter()
        .filter(|n| selects(pod, n))
        .flat_map(|n| {
            let taints = n.spec.as_ref().and_then(|s| s.taints.as_deref());
            taints
                .unwrap_or_default()
                .iter()
                .filter(|t| t.effect != "PreferNoSchedule")
                .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
                .map(|t| format!("{} {}", n.name_any(), describe(t)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `key=value:Effect`, or `key:Effect` without a value, as `kubectl taint` writes it.
fn describe(taint: &Taint) -> String {
    match taint.value.as_deref().filter(|v| !v.is_empty()) {
        Some(value) => format!("{}={value}:{}", taint.key, taint.effect),
        None => format!("{}:{}", taint.key, taint.effect),
    }
}

/// Whether a toleration tolerates a taint (the kubelet's and the scheduler's rule).
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// Whether the pod's node selector and required node affinity let it run on the node.
fn selects(pod: &PodSpec, node: &Node) -> bool {
    let labels = node.labels();
    let selector = pod.node_selector.as_ref();
    let selected = selector
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affine = required.is_none_or(|r| {
        r.node_selector_terms.iter().any(|term| {
            let expressions = term.match_expressions.as_deref().unwrap_or_default();
            expressions.iter().all(|e| meets(e, labels.get(&e.key)))
        })
    });
    selected && affine
}

/// Whether a node label's value meets a node selector requirement.
fn meets(requirement: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    let compare = |want: fn(i64, i64) -> bool| {
        let label = value.and_then(|v| number(v));
        let bound = values.first().and_then(|v| number(v));
        matches!((label, bound), (Some(l), Some(b)) if want(l, b))
    };
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(|l, b| l > b),
        "Lt" => compare(|l, b| l < b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorTerm, NodeSpec,
    };
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(key, value, effect)| Taint {
                            key: key.to_string(),
                            value: (!value.is_empty()).then(|| value.to_string()),
                            effect: effect.to_string(),
                            time_added: None,
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: some(key),
            operator: some(operator),
            value: some(value),
            effect: some(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn names_the_taints_of_the_nodes_the_pod_may_run_on() {
        let nodes = [
            node(
                "real-a",
                &[("kubernetes.io/hostname", "real-a")],
                &[
                    ("dedicated", "valkey", "NoSchedule"),
                    ("soft", "", "PreferNoSchedule"),
                ],
            ),
            node(
                "node-a",
                &[("kubernetes.io/hostname", "node-a")],
                &[("gpu", "", "NoExecute")],
            ),
        ];
        let pinned = PodSpec {
            node_selector: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_string(),
                "real-a".to_string(),
            )])),
            ..Default::default()
        };
        assert_eq!(
            untolerated(&pinned, &nodes),
            ["real-a dedicated=valkey:NoSchedule"],
            "only the node it may run on; a preference is no obstacle"
        );
        assert_eq!(
            untolerated(&PodSpec::default(), &nodes),
            ["real-a dedicated=valkey:NoSchedule", "node-a gpu:NoExecute"]
        );
        let tolerant = PodSpec {
            tolerations: Some(vec![toleration("dedicated", "Exists", "", "NoSchedule")]),
            ..pinned.clone()
        };
        assert!(untolerated(&tolerant, &nodes).is_empty());
    }

    #[test]
    fn a_toleration_matches_as_the_scheduler_matches_it() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("valkey".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let cases = [
            (
                toleration("dedicated", "Equal", "valkey", "NoSchedule"),
                true,
            ),
            (toleration("dedicated", "", "valkey", ""), true),
            (toleration("dedicated", "Equal", "other", ""), false),
            (toleration("dedicated", "Exists", "", ""), true),
            (toleration("dedicated", "Exists", "", "NoExecute"), false),
            (toleration("", "Exists", "", ""), true),
            (toleration("other", "Exists", "", ""), false),
        ];
        for (t, want) in cases {
            assert_eq!(tolerates(&t, &taint), want, "{t:?}");
        }
    }

    #[test]
    fn required_node_affinity_narrows_the_nodes_considered() {
        let nodes = [
            node(
                "a",
                &[("zone", "z1"), ("cpus", "16")],
                &[("t", "", "NoSchedule")],
            ),
            node(
                "b",
                &[("zone", "z2"), ("cpus", "4")],
                &[("t", "", "NoSchedule")],
            ),
        ];
        let requiring = |key: &str, operator: &str, values: &[&str]| PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: key.into(),
                                operator: operator.into(),
                                values: Some(values.iter().map(|v| v.to_string()).collect()),
                            }]),
                            match_fields: None,
                        }],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let on = |spec: PodSpec| -> Vec<String> {
            untolerated(&spec, &nodes)
                .iter()
                .map(|s| s.split(' ').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(on(requiring("zone", "In", &["z1"])), ["a"]);
        assert_eq!(on(requiring("zone", "NotIn", &["z1"])), ["b"]);
        assert_eq!(on(requiring("cpus", "Gt", &["8"])), ["a"]);
        assert_eq!(on(requiring("cpus", "Lt", &["8"])), ["b"]);
        assert_eq!(on(requiring("rack", "Exists", &[])), Vec::<String>::new());
        assert_eq!(on(requiring("rack", "DoesNotExist", &[])), ["a", "b"]);
    }
}
