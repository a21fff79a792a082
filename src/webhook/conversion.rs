//! CRD conversion between `v1alpha1` (stored) and `v1beta1` (see [`crate::api::v1beta1`]).
//!
//! Conversion is a pure rewrite of the JSON object: only the fields that moved are touched and
//! everything else (metadata, status, fields a newer client sent) is carried over as it is, so a
//! round trip in either direction gives back the same object.

use serde_json::{Map, Value};

use crate::api::constants::GROUP;

const ALPHA: &str = "v1alpha1";
const BETA: &str = "v1beta1";

/// Why an object cannot be converted; the API server shows this message to the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("object has no apiVersion")]
    NoApiVersion,
    #[error("object has no kind")]
    NoKind,
    #[error("cannot convert {0:?}: expected {GROUP}/{ALPHA} or {GROUP}/{BETA}")]
    UnknownVersion(String),
    #[error("spec.topology must be an object")]
    TopologyNotAnObject,
    #[error("{0} has a single version; nothing converts it")]
    SingleVersion(String),
}

/// Converts one object to `desired` (`valkey.gomomento.com/<version>`).
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConversionError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConversionError::NoApiVersion)?;
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::NoKind)?;
    let version = |api_version: &str| -> Result<String, ConversionError> {
        match api_version.split_once('/') {
            Some((group, v)) if group == GROUP && (v == ALPHA || v == BETA) => Ok(v.to_owned()),
            _ => Err(ConversionError::UnknownVersion(api_version.to_owned())),
        }
    };
    let (from_v, to_v) = (version(from)?, version(desired)?);
    let mut out = object.clone();
    out["apiVersion"] = Value::String(desired.to_owned());
    if from_v == to_v {
        return Ok(out);
    }
    let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(out);
    };
    match (kind, to_v.as_str()) {
        ("ValkeyCluster", BETA) => {
            let mut topology = Map::new();
            // v1alpha1's spec.autoscaling is spec.topology.autoscaling in v1beta1.
            for field in ["shards", "replicasPerShard", "autoscaling"] {
                if let Some(v) = spec.remove(field) {
                    topology.insert(field.to_owned(), v);
                }
            }
            if !topology.is_empty() {
                spec.insert("topology".into(), Value::Object(topology));
            }
        }
        ("ValkeyCluster", _) => {
            if let Some(topology) = spec.remove("topology") {
                let Value::Object(topology) = topology else {
                    return Err(ConversionError::TopologyNotAnObject);
                };
                spec.extend(topology);
            }
        }
        ("ValkeyConfig", BETA) => rename(spec, "valkey", "settings"),
        ("ValkeyConfig", _) => rename(spec, "settings", "valkey"),
        (other, _) => return Err(ConversionError::SingleVersion(other.to_owned())),
    }
    Ok(out)
}

fn rename(spec: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = spec.remove(from) {
        spec.insert(to.to_owned(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize as _;
    use serde_json::json;

    const A: &str = "valkey.gomomento.com/v1alpha1";
    const B: &str = "valkey.gomomento.com/v1beta1";

    /// Every Momento-shaped fixture (e2e/fixtures/momento, and momento-v09 from Momento's v0.9
    /// docs) of a converted kind survives v1alpha1 -> v1beta1 -> v1alpha1 unchanged, and reads
    /// back as our typed object.
    #[test]
    fn momento_shaped_fixtures_round_trip_through_v1beta1() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/fixtures");
        let entries = ["momento", "momento-v09"]
            .into_iter()
            .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap())
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"));
        let mut converted = 0;
        for path in entries {
            let text = std::fs::read_to_string(&path).unwrap();
            for document in serde_yaml_ng::Deserializer::from_str(&text) {
                let object = Value::deserialize(document).unwrap();
                converted += round_trip(&path, object);
            }
        }
        assert!(
            converted >= 10,
            "the fixture sets have clusters and configs"
        );
    }

    /// One fixture object through v1beta1 and back; 1 when its kind converts.
    fn round_trip(path: &std::path::Path, object: Value) -> usize {
        let kind = object["kind"].as_str().unwrap().to_string();
        if kind != "ValkeyCluster" && kind != "ValkeyConfig" {
            return 0;
        }
        let beta = convert(&object, B).unwrap();
        assert_eq!(beta["apiVersion"], B);
        assert_eq!(convert(&beta, A).unwrap(), object, "{path:?} round trip");
        match kind.as_str() {
            "ValkeyCluster" => {
                serde_json::from_value::<crate::api::ValkeyCluster>(object).unwrap();
            }
            _ => {
                serde_json::from_value::<crate::api::ValkeyConfig>(object).unwrap();
            }
        }
        1
    }

    #[test]
    fn a_cluster_groups_its_topology_in_v1beta1() {
        let alpha = json!({"apiVersion": A, "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"configRef": "standard", "shards": 3, "replicasPerShard": 1},
            "status": {"state": "Active"}});
        let beta = convert(&alpha, B).unwrap();
        assert_eq!(
            beta,
            json!({"apiVersion": B, "kind": "ValkeyCluster",
                "metadata": {"name": "c", "namespace": "n"},
                "spec": {"configRef": "standard", "topology": {"shards": 3, "replicasPerShard": 1}},
                "status": {"state": "Active"}})
        );
        assert_eq!(convert(&beta, A).unwrap(), alpha);
    }

    #[test]
    fn autoscaling_lives_in_the_topology_in_v1beta1() {
        let autoscaling =
            json!({"minShards": 2, "maxShards": 6, "scaleOut": {"memoryPercent": 80}});
        let alpha = json!({"apiVersion": A, "kind": "ValkeyCluster", "metadata": {"name": "c"},
            "spec": {"configRef": "standard", "shards": 3, "autoscaling": autoscaling}});
        let beta = convert(&alpha, B).unwrap();
        assert_eq!(beta["spec"]["topology"]["autoscaling"], autoscaling);
        assert!(beta["spec"].get("autoscaling").is_none());
        assert_eq!(convert(&beta, A).unwrap(), alpha);
    }

    #[test]
    fn a_config_calls_its_settings_settings_in_v1beta1() {
        let alpha = json!({"apiVersion": A, "kind": "ValkeyConfig", "metadata": {"name": "s"},
            "spec": {"imageRef": "valkey-9-0", "valkey": {"maxmemory": "1gb"}}});
        let beta = convert(&alpha, B).unwrap();
        assert_eq!(beta["spec"]["settings"], json!({"maxmemory": "1gb"}));
        assert!(beta["spec"].get("valkey").is_none());
        assert_eq!(convert(&beta, A).unwrap(), alpha);
    }

    #[test]
    fn unknown_versions_and_kinds_are_refused_with_a_reason() {
        let o =
            json!({"apiVersion": "valkey.gomomento.com/v9", "kind": "ValkeyCluster", "spec": {}});
        assert_eq!(
            convert(&o, B).unwrap_err().to_string(),
            "cannot convert \"valkey.gomomento.com/v9\": expected valkey.gomomento.com/v1alpha1 or valkey.gomomento.com/v1beta1"
        );
        let o = json!({"apiVersion": A, "kind": "ValkeyNode", "spec": {}});
        assert!(
            convert(&o, B)
                .unwrap_err()
                .to_string()
                .contains("single version")
        );
        let o = json!({"apiVersion": A, "kind": "ValkeyCluster", "spec": {}});
        assert!(convert(&o, "apps/v1").is_err());
        let o = json!({"apiVersion": B, "kind": "ValkeyCluster", "spec": {"topology": 3}});
        assert!(convert(&o, A).is_err());
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i32>().prop_map(Value::from),
            "[a-z0-9-]{0,12}".prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ]
    }

    fn extra_fields() -> impl Strategy<Value = Map<String, Value>> {
        proptest::collection::btree_map("[a-z][a-zA-Z]{0,8}", scalar(), 0..5).prop_map(|m| {
            m.into_iter()
                .filter(|(k, _)| {
                    ![
                        "shards",
                        "replicasPerShard",
                        "topology",
                        "valkey",
                        "settings",
                    ]
                    .contains(&k.as_str())
                })
                .collect()
        })
    }

    proptest! {
        /// v1alpha1 -> v1beta1 -> v1alpha1 is the identity, for both kinds, whatever else the
        /// object carries.
        #[test]
        fn alpha_round_trips(
            extra in extra_fields(),
            shards in proptest::option::of(1i32..500),
            replicas in proptest::option::of(0i32..5),
            settings in proptest::option::of(proptest::collection::btree_map("[a-z-]{1,10}", "[a-z0-9]{0,6}", 0..4)),
            status in proptest::option::of(extra_fields()),
        ) {
            let mut spec = extra.clone();
            if let Some(s) = shards { spec.insert("shards".into(), s.into()); }
            if let Some(r) = replicas { spec.insert("replicasPerShard".into(), r.into()); }
            let mut cluster = json!({"apiVersion": A, "kind": "ValkeyCluster", "metadata": {"name": "x"}, "spec": spec});
            if let Some(st) = &status { cluster["status"] = Value::Object(st.clone()); }
            let back = convert(&convert(&cluster, B).unwrap(), A).unwrap();
            prop_assert_eq!(back, cluster);

            let mut spec = extra;
            if let Some(s) = settings { spec.insert("valkey".into(), json!(s)); }
            let config = json!({"apiVersion": A, "kind": "ValkeyConfig", "metadata": {"name": "x"}, "spec": spec});
            let back = convert(&convert(&config, B).unwrap(), A).unwrap();
            prop_assert_eq!(back, config);
        }

        /// v1beta1 -> v1alpha1 -> v1beta1 is the identity too.
        #[test]
        fn beta_round_trips(
            extra in extra_fields(),
            shards in proptest::option::of(1i32..500),
            replicas in proptest::option::of(0i32..5),
            settings in proptest::option::of(proptest::collection::btree_map("[a-z-]{1,10}", "[a-z0-9]{0,6}", 0..4)),
        ) {
            let mut spec = extra.clone();
            let mut topology = Map::new();
            if let Some(s) = shards { topology.insert("shards".into(), s.into()); }
            if let Some(r) = replicas { topology.insert("replicasPerShard".into(), r.into()); }
            if !topology.is_empty() { spec.insert("topology".into(), Value::Object(topology)); }
            let cluster = json!({"apiVersion": B, "kind": "ValkeyCluster", "metadata": {"name": "x"}, "spec": spec});
            let back = convert(&convert(&cluster, A).unwrap(), B).unwrap();
            prop_assert_eq!(back, cluster);

            let mut spec = extra;
            if let Some(s) = settings { spec.insert("settings".into(), json!(s)); }
            let config = json!({"apiVersion": B, "kind": "ValkeyConfig", "metadata": {"name": "x"}, "spec": spec});
            let back = convert(&convert(&config, A).unwrap(), B).unwrap();
            prop_assert_eq!(back, config);
        }
    }
}
