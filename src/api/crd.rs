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
