//! ValkeyNode: operator-owned. Only the operator's service account creates, updates and
//! deletes ValkeyNodes, whatever RBAC a human holds; nobody changes a node's spec (the operator
//! replaces nodes instead). Kubernetes' own garbage collector and namespace controller may
//! delete them and update their metadata (owner references, finalizers), so deleting a
//! ValkeyCluster or its namespace keeps working.
//!
//! The webhook is registered for `valkeynodes` and `valkeynodes/status`: the status (lifecycle,
//! node id) is what the operator plans from, so only the operator writes it either.

use kube::ResourceExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{allow_with_warnings, deny};
use crate::api::ValkeyNode;

/// Who may do what to ValkeyNodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePolicy {
    /// The operator's username (`system:serviceaccount:<namespace>:<serviceaccount>`).
    pub operator: String,
    /// Kubernetes controllers that may delete ValkeyNodes and update their metadata.
    pub system_controllers: Vec<String>,
}

impl NodePolicy {
    /// The operator's service account in `namespace`, plus the garbage collector and the
    /// namespace controller (as service accounts, and as kube-controller-manager itself when it
    /// runs without per-controller credentials).
    pub fn new(operator: impl Into<String>) -> Self {
        Self {
            operator: operator.into(),
            system_controllers: vec![
                "system:serviceaccount:kube-system:generic-garbage-collector".into(),
                "system:serviceaccount:kube-system:namespace-controller".into(),
                "system:kube-controller-manager".into(),
            ],
        }
    }
}

fn verb(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "create",
        Operation::Update => "update",
        Operation::Delete => "delete",
        Operation::Connect => "connect to",
    }
}

/// The rule.
pub fn validate(req: &AdmissionRequest<ValkeyNode>, policy: &NodePolicy) -> AdmissionResponse {
    let user = req.user_info.username.clone().unwrap_or_default();
    let namespace = req.namespace.clone().unwrap_or_default();
    let object = req.object.as_ref().or(req.old_object.as_ref());
    let name = object
        .map(|o| o.name_any())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| req.name.clone());
    let cluster = object
        .map(|o| o.spec.cluster_name.clone())
        .unwrap_or_default();

    if req.operation == Operation::Update
        && let (Some(new), Some(old)) = (&req.object, &req.old_object)
        && new.spec != old.spec
    {
        return deny(
            req,
            format!(
                "spec of ValkeyNode {namespace}/{name} is immutable: the operator replaces nodes instead of changing them. \
                 Change ValkeyCluster {namespace}/{cluster} (or its ValkeyConfig) and the operator rolls a replacement"
            ),
            vec![],
        );
    }
    if user == policy.operator {
        return allow_with_warnings(req, vec![]);
    }
    if req.sub_resource.as_deref() == Some("status") {
        return deny(
            req,
            format!(
                "the status of ValkeyNode {namespace}/{name} is written by valkey-operator only: {user:?} may not change it (its lifecycle and node id are what the operator plans failovers and replacements from); read it with kubectl get valkeynode {name} -n {namespace} -o yaml"
            ),
            vec![],
        );
    }
    if matches!(req.operation, Operation::Delete | Operation::Update)
        && policy.system_controllers.contains(&user)
    {
        return allow_with_warnings(req, vec![]);
    }
    let fix = if cluster.is_empty() {
        "change the ValkeyCluster instead".to_string()
    } else {
        format!(
            "change ValkeyCluster {namespace}/{cluster} instead (shards, replicasPerShard, configRef) or delete it"
        )
    };
    deny(
        req,
        format!(
            "ValkeyNodes are managed by valkey-operator only: {user:?} may not {} ValkeyNode {namespace}/{name}; {fix}",
            verb(&req.operation)
        ),
        vec![],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::admission::fixtures::request;

    const OPERATOR: &str = "system:serviceaccount:valkey-operator-system:valkey-operator";

    fn policy() -> NodePolicy {
        NodePolicy::new(OPERATOR)
    }

    fn as_user(user: &str) -> impl FnOnce(&mut serde_json::Value) + '_ {
        move |v| v["request"]["userInfo"]["username"] = user.into()
    }

    /// The chart's ValkeyNode webhooks skip (matchConditions) exactly the Kubernetes
    /// controllers this policy allows, so skipping them changes no decision.
    #[test]
    fn the_webhook_configuration_skips_exactly_the_controllers_the_policy_allows() {
        for file in [
            "charts/valkey-operator/templates/webhooks.yaml",
            "webhooks/validating.yaml",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let yaml = std::fs::read_to_string(path).unwrap();
            let lines: Vec<&str> = yaml.lines().collect();
            // (match condition name, the names its expression lists)
            let conditions: Vec<(&str, Vec<&str>)> = lines
                .windows(2)
                .filter(|w| w[1].trim_start().starts_with("expression:"))
                .map(|w| {
                    let name = w[0].trim_start().trim_start_matches("- name:").trim();
                    (name, w[1].split('"').skip(1).step_by(2).collect())
                })
                .collect();
            let controllers = policy().system_controllers;
            let nodes: Vec<_> = conditions
                .iter()
                .filter(|(name, _)| *name == "not-kubernetes-controllers")
                .collect();
            assert_eq!(nodes.len(), 2, "{file}: both ValkeyNode entries");
            for (_, listed) in nodes {
                assert_eq!(listed, &controllers, "{file}");
            }
            // Metering records: the operator's own writes and the same controllers skip it.
            let (_, metering) = conditions
                .iter()
                .find(|(name, _)| *name == "not-the-operator-or-kubernetes-controllers")
                .unwrap_or_else(|| panic!("{file}: the metering entry"));
            assert!(
                metering[0].ends_with(":valkey-operator"),
                "{file}: {metering:?}"
            );
            assert_eq!(metering[1..], controllers, "{file}");
        }
    }

    #[test]
    fn only_the_operator_writes_a_node_status() {
        let status_update = |user: &'static str| {
            request::<ValkeyNode>("valkeynode-update-metadata.json", move |v| {
                v["request"]["userInfo"]["username"] = user.into();
                v["request"]["subResource"] = "status".into();
                v["request"]["object"]["status"] = serde_json::json!({"lifecycle": "Leaving"});
            })
        };
        let resp = validate(&status_update("system:masters-admin"), &policy());
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("is written by valkey-operator only"),
            "{}",
            resp.result.message
        );
        // Not even Kubernetes' own controllers, which may edit metadata.
        let gc = "system:serviceaccount:kube-system:generic-garbage-collector";
        assert!(!validate(&status_update(gc), &policy()).allowed);
        assert!(validate(&status_update(OPERATOR), &policy()).allowed);
    }

    #[test]
    fn the_operator_may_create_nodes() {
        let req = request::<ValkeyNode>("valkeynode-create.json", as_user(OPERATOR));
        let resp = validate(&req, &policy());
        assert!(resp.allowed, "{:?}", resp.result);
        assert_eq!(resp.uid, req.uid);
    }

    #[test]
    fn a_product_team_user_may_not_create_nodes() {
        let req = request::<ValkeyNode>("valkeynode-create.json", as_user("alice@product"));
        let resp = validate(&req, &policy());
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("managed by valkey-operator only"),
            "{}",
            resp.result.message
        );
        assert!(
            resp.result
                .message
                .contains("\"alice@product\" may not create ValkeyNode my-app/my-cluster-0-a1b2c3")
        );
        assert!(
            resp.result
                .message
                .contains("ValkeyCluster my-app/my-cluster")
        );
    }

    #[test]
    fn cluster_admin_may_not_change_a_nodes_labels_or_delete_it() {
        let req = request::<ValkeyNode>("valkeynode-update-metadata.json", |_| {});
        assert_eq!(req.user_info.username.as_deref(), Some("kubernetes-admin"));
        let resp = validate(&req, &policy());
        assert!(!resp.allowed);
        assert!(resp.result.message.contains("may not update ValkeyNode"));

        let req = request::<ValkeyNode>("valkeynode-delete.json", |_| {});
        let resp = validate(&req, &policy());
        assert!(!resp.allowed);
        assert!(resp.result.message.contains("may not delete ValkeyNode"));
    }

    #[test]
    fn spec_changes_are_denied_for_everyone_including_the_operator() {
        for user in [OPERATOR, "kubernetes-admin"] {
            let req = request::<ValkeyNode>("valkeynode-update-spec.json", as_user(user));
            let resp = validate(&req, &policy());
            assert!(!resp.allowed, "{user}");
            assert!(
                resp.result
                    .message
                    .contains("spec of ValkeyNode my-app/my-cluster-0-a1b2c3 is immutable"),
                "{}",
                resp.result.message
            );
        }
    }

    #[test]
    fn the_operator_may_update_metadata_and_delete() {
        let req = request::<ValkeyNode>("valkeynode-update-metadata.json", as_user(OPERATOR));
        assert!(validate(&req, &policy()).allowed);
        let req = request::<ValkeyNode>("valkeynode-delete.json", as_user(OPERATOR));
        assert!(validate(&req, &policy()).allowed);
    }

    #[test]
    fn the_garbage_collector_and_namespace_controller_may_delete_but_not_create() {
        for user in [
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "system:serviceaccount:kube-system:namespace-controller",
        ] {
            let req = request::<ValkeyNode>("valkeynode-delete.json", as_user(user));
            assert!(validate(&req, &policy()).allowed, "{user} delete");
            let req = request::<ValkeyNode>("valkeynode-update-metadata.json", as_user(user));
            assert!(validate(&req, &policy()).allowed, "{user} metadata update");
            let req = request::<ValkeyNode>("valkeynode-create.json", as_user(user));
            assert!(!validate(&req, &policy()).allowed, "{user} create");
        }
    }

    #[test]
    fn the_operator_username_is_configurable() {
        let custom = NodePolicy::new("system:serviceaccount:ops:vko");
        let req = request::<ValkeyNode>(
            "valkeynode-create.json",
            as_user("system:serviceaccount:ops:vko"),
        );
        assert!(validate(&req, &custom).allowed);
        let req = request::<ValkeyNode>("valkeynode-create.json", as_user(OPERATOR));
        assert!(!validate(&req, &custom).allowed);
    }
}
