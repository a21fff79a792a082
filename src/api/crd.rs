//! The generated CustomResourceDefinitions (`valkey-operator crd`, `crds/`).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

use super::constants::MAX_CLUSTER_NAME_LEN;
use super::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};

/// Every CRD of the API group, in install order (menu first, then consumers).
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        ValkeyImage::crd(),
        ValkeyConfig::crd(),
        ValkeyRole::crd(),
        with_max_name_len(ValkeyCluster::crd(), MAX_CLUSTER_NAME_LEN),
        ValkeyNode::crd(),
    ]
    .into_iter()
    .map(unwrap_descriptions)
    .collect()
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
    serde_yaml::to_string(crd).expect("a CRD always serializes to YAML")
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
