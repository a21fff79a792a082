//! ValkeyConfig: a curated configuration "menu item" published by the platform team.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::acl::{AclBinding, unique_usernames_rule};
pub use super::resources::Resources;
use super::validation::{
    DNS1123_SUBDOMAIN, refused_settings_rules, setting_keys_rule, setting_values_rule,
};

/// A configuration menu item (platform team): which allowlisted image, how much CPU and
/// memory, which Valkey settings and which platform-level ACL bindings. Product teams choose one
/// by name in `ValkeyCluster.spec.configRef`. Configs inherit through `baseRef` (up to 10
/// levels): fields set here win, `valkey` settings merge per key, and `acl` set here replaces
/// the base's bindings entirely.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyConfig",
    doc = "A curated configuration menu item (cluster-scoped, platform team): image, resources, Valkey settings and platform ACL bindings, with inheritance via spec.baseRef. Product teams select one in ValkeyCluster.spec.configRef.",
    plural = "valkeyconfigs",
    shortname = "vkcfg",
    category = "valkey",
    status = "ValkeyConfigStatus",
    cel,
    validation = Rule::new("!has(self.spec.baseRef) || self.spec.baseRef != self.metadata.name")
        .message("spec.baseRef must name another ValkeyConfig: a config cannot inherit from itself")
        .field_path(".spec.baseRef"),
    printcolumn(name = "BASE", type_ = "string", json_path = ".spec.baseRef", description = "ValkeyConfig this one inherits from"),
    printcolumn(name = "IMAGE", type_ = "string", json_path = ".spec.imageRef", description = "ValkeyImage set on this config (inherited when empty)"),
    printcolumn(name = "CPU", type_ = "string", json_path = ".spec.resources.cpu", priority = 1),
    printcolumn(name = "MEMORY", type_ = "string", json_path = ".spec.resources.memory", priority = 1),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyConfigSpec {
    /// Name of the ValkeyConfig this one inherits from. Fields set here win; `valkey` settings
    /// merge per key; `acl` set here replaces the base's bindings. Resolved live on every
    /// reconcile; a missing base, a cycle or a chain deeper than 10 blocks the clusters using
    /// this config until fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("baseRef"))]
    pub base_ref: Option<String>,

    /// Name of the ValkeyImage (allowlist entry) nodes run. When unset, the first imageRef found
    /// walking up the baseRef chain is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("imageRef"))]
    pub image_ref: Option<String>,

    /// CPU and memory of every Valkey container (requests and limits are both set to these).
    /// Each field set here overrides the base's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Valkey settings (valkey.conf names, lowercase) and their values, for example
    /// `maxmemory: 1500mb`, `maxmemory-policy: allkeys-lru`. Merged per key over the base's.
    /// Authentication and ACL settings (requirepass, primaryauth/masterauth,
    /// primaryuser/masteruser, aclfile, user), tls-* and include are refused: users come from
    /// spec.acl, TLS from the cluster's spec.tls. The other settings the operator forces
    /// (cluster-enabled, port, cluster-port, bind, dir, cluster-config-file, replicaof,
    /// replica-announce-*, cluster-announce-*, daemonize, rename-command) are accepted with an
    /// admission warning and ignored: the operator's value wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::validation::settings_map_schema")]
    #[x_kube(
        validation = setting_keys_rule("valkey"),
        validation = setting_values_rule("valkey"),
        validation = refused_settings_rules("spec.valkey")[0].clone(),
        validation = refused_settings_rules("spec.valkey")[1].clone(),
        validation = refused_settings_rules("spec.valkey")[2].clone()
    )]
    pub valkey: BTreeMap<String, String>,

    /// Platform-level ACL bindings applied to every Valkey cluster using this config (cluster
    /// bindings are added to them). Set here, it replaces the base's bindings entirely; an
    /// empty list removes them. Unset: inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = unique_usernames_rule(),
        merge_strategy = ListMerge::Map(vec!["username".into()])
    )]
    pub acl: Option<Vec<AclBinding>>,

    /// Scheduling of the members (tolerations, priority class): the platform team's choice,
    /// which a ValkeyCluster cannot override. Set here, it replaces the base's as a whole;
    /// unset: inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<super::placement::Scheduling>,

    /// Volumes of the members: each member gets its own PersistentVolumeClaim at Valkey's
    /// data directory. Set here, it replaces the base's as a whole; unset: inherited (no
    /// config in the chain setting it: memory-only members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<super::storage::Storage>,

    /// Valkey's own metrics: an exporter beside every member, and who may scrape it. Set
    /// here, it replaces the base's as a whole; unset: inherited (no config in the chain
    /// setting it: no exporter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<super::metrics::Metrics>,

    /// Which Service types clusters on this config may ask for in `spec.externalAccess` to be
    /// reached from outside the Kubernetes cluster (one Service per member). Set here, it
    /// replaces the base's; unset: inherited (nowhere in the chain: no external access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<super::external::ExternalAccessPolicy>,
}

/// Observed state of a ValkeyConfig (the operator writes `observedGeneration` once its caches hold that generation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyConfigStatus {
    /// Generation of the spec last observed by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
