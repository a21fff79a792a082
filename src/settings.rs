//! Operator settings from the `valkey-operator-config` ConfigMap: every key optional, built-in
//! defaults, and an invalid value stops the operator at startup with a message naming the key.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::api::ZoneSpread;

/// Name of the settings ConfigMap in the operator's namespace.
pub const SETTINGS_CONFIGMAP: &str = "valkey-operator-config";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Zone spread for clusters that do not set `placement.zoneSpread`.
    pub default_zone_spread: ZoneSpread,
    /// Where clients may reach the members' client port from (NetworkPolicy).
    pub clients_from: ClientsFrom,
    /// At most this many ValkeyClusters run a rolling replacement at once (a ValkeyImage
    /// repoint rolls every cluster on it); `None`: no limit.
    pub max_concurrent_rollouts: Option<usize>,
}

/// `clientsFrom`: the pods allowed to the client port of every cluster's members, besides the
/// members themselves and the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientsFrom {
    /// Pods in the cluster's own namespace (the default).
    SameNamespace,
    /// Pods in any namespace.
    AnyNamespace,
    /// No NetworkPolicy at all (the platform team manages policies itself).
    Unrestricted,
}

impl std::str::FromStr for ClientsFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sameNamespace" => Ok(ClientsFrom::SameNamespace),
            "anyNamespace" => Ok(ClientsFrom::AnyNamespace),
            "unrestricted" => Ok(ClientsFrom::Unrestricted),
            other => Err(format!(
                "{other:?} is not one of sameNamespace, anyNamespace, unrestricted"
            )),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_zone_spread: ZoneSpread::BestEffort,
            clients_from: ClientsFrom::SameNamespace,
            max_concurrent_rollouts: None,
        }
    }
}

/// Keys this version understands.
const KNOWN_KEYS: &[&str] = &["defaultZoneSpread", "clientsFrom", "maxConcurrentRollouts"];

impl Settings {
    /// Parses the ConfigMap's data. Unknown keys are errors too: a typo must not silently
    /// fall back to a default.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Settings, String> {
        let mut settings = Settings::default();
        for (key, value) in data {
            match key.as_str() {
                "defaultZoneSpread" => {
                    settings.default_zone_spread = value.trim().parse().map_err(|e| {
                        format!("{SETTINGS_CONFIGMAP}: key defaultZoneSpread: {e}; fix the ConfigMap and restart")
                    })?;
                }
                "clientsFrom" => {
                    settings.clients_from = value.trim().parse().map_err(|e| {
                        format!("{SETTINGS_CONFIGMAP}: key clientsFrom: {e}; fix the ConfigMap and restart")
                    })?;
                }
                "maxConcurrentRollouts" => {
                    let n: usize = value.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("{SETTINGS_CONFIGMAP}: key maxConcurrentRollouts: {value:?} is not a positive whole number (leave the key out for no limit); fix the ConfigMap and restart")
                    })?;
                    settings.max_concurrent_rollouts = Some(n);
                }
                other => {
                    return Err(format!(
                        "{SETTINGS_CONFIGMAP}: unknown key {other:?}; known keys: {}",
                        KNOWN_KEYS.join(", ")
                    ));
                }
            }
        }
        Ok(settings)
    }

    /// Reads the ConfigMap (absent: all defaults).
    pub async fn load(client: Client, namespace: &str) -> Result<Settings, String> {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        match api.get_opt(SETTINGS_CONFIGMAP).await {
            Ok(Some(cm)) => Settings::from_data(&cm.data.unwrap_or_default()),
            Ok(None) => Ok(Settings::default()),
            Err(e) => Err(format!(
                "cannot read ConfigMap {namespace}/{SETTINGS_CONFIGMAP}: {e}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_key_is_optional() {
        assert_eq!(
            Settings::from_data(&data(&[])).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn default_zone_spread_parses() {
        let s = Settings::from_data(&data(&[("defaultZoneSpread", "required")])).unwrap();
        assert_eq!(s.default_zone_spread, ZoneSpread::Required);
    }

    #[test]
    fn an_invalid_value_names_the_key_and_the_allowed_values() {
        let err = Settings::from_data(&data(&[("defaultZoneSpread", "always")])).unwrap_err();
        assert!(err.contains("defaultZoneSpread"), "{err}");
        assert!(err.contains("bestEffort or required"), "{err}");
    }

    #[test]
    fn max_concurrent_rollouts_is_a_positive_number() {
        let s = Settings::from_data(&data(&[("maxConcurrentRollouts", "2")])).unwrap();
        assert_eq!(s.max_concurrent_rollouts, Some(2));
        for bad in ["0", "-1", "two", ""] {
            let err = Settings::from_data(&data(&[("maxConcurrentRollouts", bad)])).unwrap_err();
            assert!(err.contains("maxConcurrentRollouts"), "{err}");
        }
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let err = Settings::from_data(&data(&[("defaultZoneSpred", "required")])).unwrap_err();
        assert!(err.contains("unknown key \"defaultZoneSpred\""), "{err}");
    }
}
