//! ValkeyMeteringRecord: the operator's account of a cluster's usage, which a bill is made
//! from. Only the operator writes a record's spec and status, whatever RBAC a human holds (a
//! cluster-admin included); anyone allowed may annotate one (the release annotation) or delete
//! it. Registered for `valkeymeteringrecords` and `valkeymeteringrecords/status`, with a match
//! condition that leaves the operator's own writes out, so they never wait on this webhook.

use kube::ResourceExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{allow_with_warnings, deny};
use crate::api::metering::{RELEASE_ANNOTATION, ValkeyMeteringRecord};

/// The rule. `operator` is the operator's username (`system:serviceaccount:<ns>:<sa>`).
pub fn validate(req: &AdmissionRequest<ValkeyMeteringRecord>, operator: &str) -> AdmissionResponse {
    let user = req.user_info.username.clone().unwrap_or_default();
    if user == operator {
        return allow_with_warnings(req, vec![]);
    }
    let name = req
        .object
        .as_ref()
        .or(req.old_object.as_ref())
        .map(|r| r.name_any())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| req.name.clone());
    let namespace = req.namespace.clone().unwrap_or_default();
    let how_to_release = format!(
        "to release it, annotate it: kubectl annotate valkeymeteringrecord {name} -n {namespace} {RELEASE_ANNOTATION}=true"
    );
    let changed = match (&req.operation, &req.object, &req.old_object) {
        (Operation::Create, _, _) => Some("create"),
        (Operation::Update, Some(new), Some(old)) if new.spec != old.spec => {
            Some("change the spec of")
        }
        (Operation::Update, Some(new), Some(old)) if new.status != old.status => {
            Some("change the status of")
        }
        _ => None,
    };
    match changed {
        Some(what) => deny(
            req,
            format!(
                "ValkeyMeteringRecords are written by valkey-operator only (usage is billed from them): {user:?} may not {what} {namespace}/{name}; metadata changes and deletes are allowed; {how_to_release}"
            ),
            vec![],
        ),
        None => allow_with_warnings(req, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::request;
    use super::*;

    const OPERATOR: &str = "system:serviceaccount:valkey-operator-system:valkey-operator";
    const FIXTURE: &str = "valkeymeteringrecord-update-status.json";

    fn as_user(user: &str, edit: impl FnOnce(&mut serde_json::Value)) -> AdmissionResponse {
        let req = request::<ValkeyMeteringRecord>(FIXTURE, |v| {
            v["request"]["userInfo"]["username"] = user.into();
            edit(&mut v["request"]);
        });
        validate(&req, OPERATOR)
    }

    #[test]
    fn only_the_operator_writes_a_records_status_or_spec() {
        // A cluster-admin lowering a record's usage: refused, saying how to release instead.
        let forged = as_user("kubernetes-admin", |_| {});
        assert!(!forged.allowed);
        let message = &forged.result.message;
        assert!(
            message.contains("may not change the status of valkey-operator-system/my-app.shop.1")
                && message.contains("kubectl annotate valkeymeteringrecord my-app.shop.1")
                && message.contains(RELEASE_ANNOTATION),
            "{message}"
        );
        assert!(as_user(OPERATOR, |_| {}).allowed, "the operator writes it");
        let spec = as_user("kubernetes-admin", |r| {
            r["subResource"] = serde_json::Value::Null;
            r["object"]["status"] = r["oldObject"]["status"].clone();
            r["object"]["spec"]["sequence"] = 7.into();
        });
        assert!(!spec.allowed);
        assert!(spec.result.message.contains("change the spec of"));
        let created = as_user("platform-team", |r| {
            r["operation"] = "CREATE".into();
            r["oldObject"] = serde_json::Value::Null;
        });
        assert!(!created.allowed, "a forged record");
    }

    #[test]
    fn annotations_finalizers_and_deletes_stay_open() {
        let release = as_user("platform-team", |r| {
            r["subResource"] = serde_json::Value::Null;
            r["object"] = r["oldObject"].clone();
            r["object"]["metadata"]["annotations"] =
                serde_json::json!({RELEASE_ANNOTATION: "true"});
        });
        assert!(release.allowed, "{}", release.result.message);
        let finalizers = as_user(
            "system:serviceaccount:kube-system:generic-garbage-collector",
            |r| {
                r["subResource"] = serde_json::Value::Null;
                r["object"] = r["oldObject"].clone();
                r["object"]["metadata"]["finalizers"] = serde_json::json!([]);
            },
        );
        assert!(finalizers.allowed);
        let deleted = as_user("platform-team", |r| {
            r["operation"] = "DELETE".into();
            r["object"] = serde_json::Value::Null;
        });
        assert!(deleted.allowed);
    }
}
