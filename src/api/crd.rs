//! The generated CustomResourceDefinitions (`valkey-operator crd`, `crds/`).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, JSONSchemaProps, ServiceReference,
    WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

use super::constants::{MAX_CLUSTER_NAME_LEN, VERSION};
use super::{
    ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyMeteringRecord, ValkeyNode, ValkeyRole, v1beta1,
};

/// Where the API server sends ConversionReviews: the operator's webhook Service.
pub const CONVERSION_SERVICE_NAMESPACE: &str = "valkey-operator-system";
pub const CONVERSION_SERVICE_NAME: &str = "valkey-operator-webhook";
pub const CONVERSION_PATH: &str = "/convert";

/// Every CRD of the API group, in install order (menu first, then consumers).
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        ValkeyImage::crd(),
        converted(vec![ValkeyConfig::crd(), v1beta1::ValkeyConfig::crd()]),
        ValkeyRole::crd(),
        with_max_name_len(
            converted(vec![ValkeyCluster::crd(), v1beta1::ValkeyCluster::crd()]),
            MAX_CLUSTER_NAME_LEN,
        ),
        ValkeyNode::crd(),
        ValkeyMeteringRecord::crd(),
        super::backup::ValkeyBackupLocation::crd(),
        super::backup::ValkeyBackup::crd(),
    ]
    .into_iter()
    .map(unwrap_descriptions)
    .collect()
}

/// One CRD declaring several versions (v1alpha1 stored), converted by the operator's webhook.
/// The CA bundle is filled in at install time (cert-manager's CA injector, or the local
/// cluster's launcher).
///
/// Only the storage version is served by default. Kubernetes makes the highest served version
/// the group's preferred one (beta sorts above alpha), and every kubectl command that names no
/// version uses it: serving v1beta1 would turn `kubectl patch -p '{"spec":{"shards":4}}'` into a
/// silent no-op (the field is pruned) and show users a shape no doc uses. The chart's
/// `crds.serveV1beta1` opts in; conversion is configured either way.
fn converted(versions: Vec<CustomResourceDefinition>) -> CustomResourceDefinition {
    let mut crd = merge_crds(versions, VERSION).expect("the versions of a kind merge");
    for version in &mut crd.spec.versions {
        version.served = version.name == VERSION;
    }
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: CONVERSION_SERVICE_NAMESPACE.into(),
                    name: CONVERSION_SERVICE_NAME.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    crd
}

/// Doc comments are wrapped at 100 columns in the source; `kubectl explain` re-wraps text
/// itself, so join wrapped lines and keep only paragraph breaks.
fn unwrap_descriptions(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    match child {
                        serde_json::Value::String(text) if key == "description" => {
                            *text = unwrap(text);
                        }
                        _ => walk(child),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    fn unwrap(text: &str) -> String {
        text.split("\n\n")
            .map(|paragraph| {
                paragraph
                    .split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes to JSON");
    walk(&mut value);
    serde_json::from_value(value).expect("a CRD with rewritten descriptions deserializes")
}

/// Bound `metadata.name` in the schema (the only metadata constraint a CRD may declare). Besides
/// refusing long names early, the bound keeps the CEL cost estimate of rules that read
/// `self.metadata.name` small.
fn with_max_name_len(mut crd: CustomResourceDefinition, max: usize) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let name = JSONSchemaProps {
            type_: Some("string".into()),
            max_length: Some(max as i64),
            ..Default::default()
        };
        let metadata = JSONSchemaProps {
            type_: Some("object".into()),
            properties: Some(BTreeMap::from([("name".to_string(), name)])),
            ..Default::default()
        };
        schema
            .properties
            .get_or_insert_with(BTreeMap::new)
            .insert("metadata".into(), metadata);
    }
    crd
}

/// One CRD as a YAML document (no leading `---`).
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    serde_yaml_ng::to_string(crd).expect("a CRD always serializes to YAML")
}

/// All CRDs as one multi-document YAML stream, as `valkey-operator crd` prints it.
pub fn all_yaml() -> String {
    all()
        .iter()
        .map(|crd| format!("---\n{}", to_yaml(crd)))
        .collect()
}

/// File name of a CRD under `crds/`: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}
