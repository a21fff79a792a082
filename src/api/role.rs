//! ValkeyRole: a reusable ACL permission template (commands and categories only).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::validation::{CATEGORY_NAME, COMMAND_NAME, SUBCOMMAND_NAME, unique_by_rule};

/// A reusable set of Valkey command permissions (platform team), for example
/// `cache-readwrite` or `metrics-readonly`. Roles hold commands and categories only; users,
/// password hashes and key/channel patterns are given where the role is bound (`acl` in a
/// ValkeyConfig or ValkeyCluster). Rendered as categories first, then commands, each in list
/// order, so a command rule can refine a category.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema,
)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyRole",
    doc = "A reusable Valkey ACL permission template (cluster-scoped, platform team): command and category rules only. Bound to users, passwords and key patterns in the acl of a ValkeyConfig or ValkeyCluster.",
    plural = "valkeyroles",
    shortname = "vkrole",
    category = "valkey",
    status = "ValkeyRoleStatus",
    cel,
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyRoleSpec {
    /// ACL categories (without `@`), each allowed or denied, for example
    /// `{name: read, access: allow}`. Applied before `commands`.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(validation = unique_by_rule("categories", "name"))]
    pub categories: Vec<CategoryRule>,

    /// Commands, each allowed or denied, with an optional subcommand as `command|subcommand`
    /// in `name` (for example `config|get`) or in `subcommand`. Applied after `categories`.
    /// A role with no rules grants nothing.
    #[serde(default)]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(
        "self.all(x, self.exists_one(y, y.name == x.name && (has(y.subcommand) ? y.subcommand : '') == (has(x.subcommand) ? x.subcommand : '')))"
    ).message("commands must not contain two entries with the same name and subcommand").reason(Reason::FieldValueDuplicate))]
    pub commands: Vec<CommandRule>,
}

/// A command permission.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.subcommand) || !self.name.contains('|')")
    .message("give the subcommand either in name (command|subcommand) or in subcommand, not both"))]
#[serde(rename_all = "camelCase")]
pub struct CommandRule {
    /// Command name, optionally `command|subcommand` (for example `get`, `client|setname`);
    /// any case, rendered lowercase.
    #[schemars(length(max = 128))]
    #[x_kube(validation = COMMAND_NAME.rule("name"))]
    pub name: String,
    /// Subcommand of `name` (Momento's shape): `{name: cluster, subcommand: info}` means
    /// `cluster|info`. Not together with a `|` in `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = SUBCOMMAND_NAME.rule("subcommand"))]
    pub subcommand: Option<String>,
    /// `allow` (rendered `+name`) or `deny` (`-name`).
    pub access: RuleAccess,
}

impl CommandRule {
    /// `command` or `command|subcommand`, lowercase, as Valkey's ACL file takes it.
    pub fn full_name(&self) -> String {
        match &self.subcommand {
            Some(sub) => format!("{}|{}", self.name, sub).to_lowercase(),
            None => self.name.to_lowercase(),
        }
    }
}

/// A category permission.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CategoryRule {
    /// ACL category name without `@`, for example `read`, `write`, `keyspace`, `all`.
    #[schemars(length(max = 64))]
    #[x_kube(validation = CATEGORY_NAME.rule("name"))]
    pub name: String,
    /// `allow` (rendered `+@name`) or `deny` (`-@name`).
    pub access: RuleAccess,
}

/// Whether a role rule grants or revokes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuleAccess {
    /// Grant (`+`).
    Allow,
    /// Revoke (`-`).
    Deny,
}

/// Observed state of a ValkeyRole (the operator writes `observedGeneration` once its caches hold that generation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyRoleStatus {
    /// Generation of the spec last observed by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
