//! Operator settings from the `valkey-operator-config` ConfigMap: every key optional, built-in
//! defaults, and an invalid value stops the operator at startup with a message naming the key.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::api::ZoneSpread;
use crate::api::placement::UnknownZoneSpread;
use crate::scope::{InvalidNamespace, WatchScope};

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
    /// What the image webhook does with a ValkeyImage below Momento v0.9's version floor.
    pub version_floor: VersionFloor,
    /// Whether each member's utilization is sampled every 30 s (ValkeyNode
    /// `status.utilization`; autoscaling needs it and holds without it).
    pub utilization_sampling: bool,
    /// How long a TLS cluster may wait for its certificate Secret while it is created before
    /// creation fails (Momento v0.9 fails at once: 0); the Secret of a cluster applied with its
    /// cert-manager Certificate shows up seconds later.
    pub tls_secret_grace: std::time::Duration,
    /// The namespaces whose ValkeyClusters (and backups) the operator watches and reconciles;
    /// the chart's `watchNamespaces` sets it with the permissions that go with it.
    pub watch_namespaces: WatchScope,
}

/// The default `tlsSecretGracePeriod`: 120 s.
pub const DEFAULT_TLS_SECRET_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// `versionFloor`: Momento's operator v0.9 refuses a ValkeyImage whose `version` is not
/// `MAJOR.MINOR.PATCH` at least 9.0.1; v0.6 manifests (and Momento's own v0.6 samples) declare
/// 9.0.0, so by default such an image is accepted with a warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VersionFloor {
    /// Accepted with a warning (the default: v0.6 manifests keep applying).
    #[default]
    Warn,
    /// Refused, as Momento's operator v0.9 does.
    Enforce,
}

/// A word that is not a [`VersionFloor`] value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of warn, enforce")]
pub struct UnknownVersionFloor(pub String);

impl std::str::FromStr for VersionFloor {
    type Err = UnknownVersionFloor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "warn" => Ok(VersionFloor::Warn),
            "enforce" => Ok(VersionFloor::Enforce),
            other => Err(UnknownVersionFloor(other.to_owned())),
        }
    }
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

/// A word that is not a [`ClientsFrom`] value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of sameNamespace, anyNamespace, unrestricted")]
pub struct UnknownClientsFrom(pub String);

impl std::str::FromStr for ClientsFrom {
    type Err = UnknownClientsFrom;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sameNamespace" => Ok(ClientsFrom::SameNamespace),
            "anyNamespace" => Ok(ClientsFrom::AnyNamespace),
            "unrestricted" => Ok(ClientsFrom::Unrestricted),
            other => Err(UnknownClientsFrom(other.to_owned())),
        }
    }
}

/// Why the settings ConfigMap cannot be used: the operator stops at startup with this message,
/// which names the key and says what to do. (The parse errors are part of the message rather
/// than a `source`, so one line says it all.)
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{SETTINGS_CONFIGMAP}: key defaultZoneSpread: {0}; fix the ConfigMap and restart")]
    DefaultZoneSpread(UnknownZoneSpread),
    #[error("{SETTINGS_CONFIGMAP}: key clientsFrom: {0}; fix the ConfigMap and restart")]
    ClientsFrom(UnknownClientsFrom),
    #[error(
        "{SETTINGS_CONFIGMAP}: key maxConcurrentRollouts: {value:?} is not a positive whole number (leave the key out for no limit); fix the ConfigMap and restart"
    )]
    MaxConcurrentRollouts { value: String },
    #[error("{SETTINGS_CONFIGMAP}: key versionFloor: {0}; fix the ConfigMap and restart")]
    VersionFloor(UnknownVersionFloor),
    #[error(
        "{SETTINGS_CONFIGMAP}: key utilizationSampling: {value:?} is not one of on, off; fix the ConfigMap and restart"
    )]
    UtilizationSampling { value: String },
    #[error(
        "{SETTINGS_CONFIGMAP}: key tlsSecretGracePeriod: {value:?} is not a whole number of seconds, optionally followed by s (\"120\", \"120s\"; \"0\" fails creation at once, as Momento v0.9); fix the ConfigMap and restart"
    )]
    TlsSecretGracePeriod { value: String },
    #[error(
        "{SETTINGS_CONFIGMAP}: key watchNamespaces: {0}; set the chart's watchNamespaces (its permissions follow) and upgrade"
    )]
    WatchNamespaces(InvalidNamespace),
    /// Unknown keys are errors too: a typo must not silently fall back to a default.
    #[error("{SETTINGS_CONFIGMAP}: unknown key {key:?}; known keys: {known}", known = KNOWN_KEYS.join(", "))]
    UnknownKey { key: String },
    #[error("cannot read ConfigMap {namespace}/{SETTINGS_CONFIGMAP}: {error}")]
    Read {
        namespace: String,
        error: kube::Error,
    },
}

impl SettingsError {
    /// The API server could not be asked (it restarts, the network blips, a 5xx or 429): worth
    /// asking again, unlike a ConfigMap that says something wrong. A 401/403/404 on the read is
    /// final too: retrying does not grant a permission.
    pub fn is_transient(&self) -> bool {
        match self {
            SettingsError::Read { error, .. } => match error {
                kube::Error::Api(status) => status.code >= 500 || status.code == 429,
                _ => true,
            },
            _ => false,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_zone_spread: ZoneSpread::BestEffort,
            clients_from: ClientsFrom::SameNamespace,
            max_concurrent_rollouts: None,
            version_floor: VersionFloor::Warn,
            utilization_sampling: true,
            tls_secret_grace: DEFAULT_TLS_SECRET_GRACE,
            watch_namespaces: WatchScope::AllNamespaces,
        }
    }
}

/// Keys this version understands.
const KNOWN_KEYS: &[&str] = &[
    "defaultZoneSpread",
    "clientsFrom",
    "maxConcurrentRollouts",
    "versionFloor",
    "utilizationSampling",
    "tlsSecretGracePeriod",
    "watchNamespaces",
];

impl Settings {
    /// Parses the ConfigMap's data. Unknown keys are errors too: a typo must not silently
    /// fall back to a default.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Settings, SettingsError> {
        let mut settings = Settings::default();
        for (key, value) in data {
            match key.as_str() {
                "defaultZoneSpread" => {
                    settings.default_zone_spread = value
                        .trim()
                        .parse()
                        .map_err(SettingsError::DefaultZoneSpread)?;
                }
                "clientsFrom" => {
                    settings.clients_from =
                        value.trim().parse().map_err(SettingsError::ClientsFrom)?;
                }
                "maxConcurrentRollouts" => {
                    let n: usize =
                        value
                            .trim()
                            .parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| SettingsError::MaxConcurrentRollouts {
                                value: value.clone(),
                            })?;
                    settings.max_concurrent_rollouts = Some(n);
                }
                "versionFloor" => {
                    settings.version_floor =
                        value.trim().parse().map_err(SettingsError::VersionFloor)?;
                }
                "utilizationSampling" => {
                    settings.utilization_sampling = match value.trim() {
                        "on" => true,
                        "off" => false,
                        _ => {
                            return Err(SettingsError::UtilizationSampling {
                                value: value.clone(),
                            });
                        }
                    };
                }
                "tlsSecretGracePeriod" => {
                    let seconds: u64 =
                        value.trim().trim_end_matches('s').parse().map_err(|_| {
                            SettingsError::TlsSecretGracePeriod {
                                value: value.clone(),
                            }
                        })?;
                    settings.tls_secret_grace = std::time::Duration::from_secs(seconds);
                }
                "watchNamespaces" => {
                    settings.watch_namespaces =
                        WatchScope::parse(value).map_err(SettingsError::WatchNamespaces)?;
                }
                other => {
                    return Err(SettingsError::UnknownKey {
                        key: other.to_owned(),
                    });
                }
            }
        }
        Ok(settings)
    }

    /// Reads the ConfigMap (absent: all defaults).
    /// [`Settings::load`], asking again while the API server cannot answer (a startup during
    /// an API server restart must not crash-loop the operator), at most for `patience`.
    pub async fn load_patiently(
        client: Client,
        namespace: &str,
        patience: std::time::Duration,
    ) -> Result<Settings, SettingsError> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(500);
        loop {
            match Settings::load(client.clone(), namespace).await {
                Err(e) if e.is_transient() && started.elapsed() + pause < patience => {
                    tracing::warn!(error = %e, retry_in = ?pause, "cannot read the settings yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(10));
                }
                result => return result,
            }
        }
    }

    pub async fn load(client: Client, namespace: &str) -> Result<Settings, SettingsError> {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        match api.get_opt(SETTINGS_CONFIGMAP).await {
            Ok(Some(cm)) => Settings::from_data(&cm.data.unwrap_or_default()),
            Ok(None) => Ok(Settings::default()),
            Err(error) => Err(SettingsError::Read {
                namespace: namespace.to_owned(),
                error,
            }),
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
    fn only_an_unanswered_read_is_asked_again() {
        let read = |error| SettingsError::Read {
            namespace: "ops".into(),
            error,
        };
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(read(api(503)).is_transient());
        assert!(read(api(429)).is_transient());
        assert!(!read(api(403)).is_transient());
        assert!(!read(api(404)).is_transient());
        assert!(!SettingsError::UnknownKey { key: "typo".into() }.is_transient());
    }

    #[test]
    fn every_key_is_optional() {
        assert_eq!(
            Settings::from_data(&data(&[])).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn tls_secret_grace_is_whole_seconds() {
        assert_eq!(Settings::default().tls_secret_grace.as_secs(), 120);
        for (text, secs) in [("0", 0), ("30", 30), ("300s", 300), (" 45s ", 45)] {
            let s = Settings::from_data(&data(&[("tlsSecretGracePeriod", text)])).unwrap();
            assert_eq!(s.tls_secret_grace.as_secs(), secs, "{text}");
        }
        for bad in ["-1", "2m", "", "1.5"] {
            let err = Settings::from_data(&data(&[("tlsSecretGracePeriod", bad)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("tlsSecretGracePeriod"), "{err}");
        }
    }

    #[test]
    fn watch_namespaces_names_the_namespaces_or_stops_with_the_bad_name() {
        let s = Settings::from_data(&data(&[("watchNamespaces", "team-a,team-b")])).unwrap();
        assert!(s.watch_namespaces.includes("team-a") && !s.watch_namespaces.includes("x"));
        let err = Settings::from_data(&data(&[("watchNamespaces", "team-a,Team_B")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("key watchNamespaces") && err.contains("\"Team_B\""),
            "{err}"
        );
    }

    #[test]
    fn default_zone_spread_parses() {
        let s = Settings::from_data(&data(&[("defaultZoneSpread", "required")])).unwrap();
        assert_eq!(s.default_zone_spread, ZoneSpread::Required);
    }

    #[test]
    fn an_invalid_value_names_the_key_and_the_allowed_values() {
        let err = Settings::from_data(&data(&[("defaultZoneSpread", "always")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("defaultZoneSpread"), "{err}");
        assert!(err.contains("bestEffort or required"), "{err}");
    }

    #[test]
    fn max_concurrent_rollouts_is_a_positive_number() {
        let s = Settings::from_data(&data(&[("maxConcurrentRollouts", "2")])).unwrap();
        assert_eq!(s.max_concurrent_rollouts, Some(2));
        for bad in ["0", "-1", "two", ""] {
            let err = Settings::from_data(&data(&[("maxConcurrentRollouts", bad)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("maxConcurrentRollouts"), "{err}");
        }
    }

    #[test]
    fn messages_say_which_key_and_what_to_do() {
        let err = Settings::from_data(&data(&[("maxConcurrentRollouts", "0")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "valkey-operator-config: key maxConcurrentRollouts: \"0\" is not a positive whole number (leave the key out for no limit); fix the ConfigMap and restart"
        );
        let err = Settings::from_data(&data(&[("clientsFrom", "all")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "valkey-operator-config: key clientsFrom: \"all\" is not one of sameNamespace, anyNamespace, unrestricted; fix the ConfigMap and restart"
        );
        let err = Settings::from_data(&data(&[("x", "1")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "valkey-operator-config: unknown key \"x\"; known keys: defaultZoneSpread, clientsFrom, maxConcurrentRollouts, versionFloor, utilizationSampling, tlsSecretGracePeriod, watchNamespaces"
        );
        let err = Settings::from_data(&data(&[("versionFloor", "strict")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "valkey-operator-config: key versionFloor: \"strict\" is not one of warn, enforce; fix the ConfigMap and restart"
        );
    }

    #[test]
    fn the_version_floor_warns_unless_enforced() {
        assert_eq!(Settings::default().version_floor, VersionFloor::Warn);
        let s = Settings::from_data(&data(&[("versionFloor", "enforce")])).unwrap();
        assert_eq!(s.version_floor, VersionFloor::Enforce);
    }

    #[test]
    fn utilization_is_sampled_unless_switched_off() {
        assert!(Settings::default().utilization_sampling);
        let s = Settings::from_data(&data(&[("utilizationSampling", "off")])).unwrap();
        assert!(!s.utilization_sampling);
        let err = Settings::from_data(&data(&[("utilizationSampling", "no")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "valkey-operator-config: key utilizationSampling: \"no\" is not one of on, off; fix the ConfigMap and restart"
        );
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let err = Settings::from_data(&data(&[("defaultZoneSpred", "required")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown key \"defaultZoneSpred\""), "{err}");
    }
}
