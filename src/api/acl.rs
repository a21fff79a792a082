//! ACL bindings: who may connect and what they may touch. The same shape appears in
//! `ValkeyConfig.spec.acl` (platform-level, every cluster of that config) and
//! `ValkeyCluster.spec.acl` (per cluster). Roles ([`super::ValkeyRole`]) hold command
//! permissions only; usernames, password hashes and key/channel patterns live here.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::validation::{
    ACL_PATTERN, ACL_USERNAME, DNS1123_SUBDOMAIN, SHA256_HEX, reserved_username_rule,
    unique_by_rule,
};

/// Maximum number of bindings in one `acl` list (Momento's documented limit).
pub const MAX_BINDINGS: usize = 64;
/// Maximum number of password hashes per user (rotation keeps old and new at once).
pub const MAX_PASSWORD_HASHES: usize = 8;

/// One Valkey ACL user: its name, accepted password hashes, and the roles it holds on which
/// keys and channels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclBinding {
    /// Valkey username. Letters, digits, '.', '_', ':', '@' and '-', at most 128 characters, no
    /// spaces; names starting with `_valkey-` are reserved for the operator's own users. Naming
    /// `default` enables Valkey's default user with these permissions (it is disabled
    /// otherwise). Must be unique within the list and across the config's and the cluster's
    /// bindings.
    #[schemars(length(max = 128))]
    #[x_kube(
        validation = ACL_USERNAME.rule("username"),
        validation = reserved_username_rule()
    )]
    pub username: String,

    /// SHA-256 hashes (64 lowercase hex characters) of the passwords this user may
    /// authenticate with. Several hashes are accepted at once, which is how passwords are
    /// rotated: add the new hash, move clients, remove the old one. Changes apply live.
    #[schemars(length(min = 1, max = 8), inner(length(max = 64)))]
    #[x_kube(
        validation = SHA256_HEX.each_rule("passwordHashes"),
        merge_strategy = ListMerge::Set
    )]
    pub password_hashes: Vec<String>,

    /// What this user may do: each entry grants the commands of one ValkeyRole on the given
    /// key and channel patterns (at most 16).
    #[schemars(length(min = 1, max = 16))]
    pub permissions: Vec<AclPermission>,
}

/// A ValkeyRole bound to key and channel patterns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclPermission {
    /// Name of the cluster-scoped ValkeyRole whose command and category rules are granted.
    /// Resolved live: a missing role blocks the Valkey cluster until it exists.
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("roleRef"))]
    pub role_ref: String,

    /// Key patterns the role's commands may touch, each with an access mode. Empty: no keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub keys: Vec<KeyPermission>,

    /// Pub/Sub channel patterns the role's commands may use, each a string (`events:*`) or
    /// `{pattern: events:*}`. Empty: no channels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub channels: Vec<ChannelPermission>,
}

/// A key glob pattern with an access mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyPermission {
    /// Glob pattern over key names, for example `app:*`. Printable ASCII, no spaces.
    #[schemars(length(max = 256))]
    #[x_kube(validation = ACL_PATTERN.rule("pattern"))]
    pub pattern: String,
    /// `read` (rendered `%R~pattern`), `write` (`%W~pattern`) or `readwrite` (`~pattern`,
    /// the default).
    #[serde(default)]
    pub access: KeyAccess,
}

/// Access mode on a key pattern.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum KeyAccess {
    /// Read-only access (`%R~`).
    Read,
    /// Write-only access (`%W~`).
    Write,
    /// Read and write access (`~`).
    #[default]
    Readwrite,
}

/// A Pub/Sub channel glob pattern, rendered `&pattern`. Written either as a plain string
/// (`events:*`, Momento's documented shape) or as `{pattern: events:*}`; both mean the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChannelPermission {
    /// Glob pattern over channel names, for example `events:*`.
    pub pattern: String,
}

impl<'de> Deserialize<'de> for ChannelPermission {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Shape {
            Plain(String),
            Object { pattern: String },
        }
        match Shape::deserialize(d)? {
            Shape::Plain(pattern) | Shape::Object { pattern } => Ok(ChannelPermission { pattern }),
        }
    }
}

impl schemars::JsonSchema for ChannelPermission {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ChannelPermission".into()
    }

    /// A string or an object: a structural CRD schema cannot say "one of two types", so the
    /// item keeps whatever it is given and the admission webhook checks it (a string, or an
    /// object with a `pattern`, either a printable-ASCII glob of at most 256 characters).
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A channel glob pattern: a string such as events:* or {pattern: events:*}.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

impl ChannelPermission {
    /// Whether the pattern is one Valkey's ACL file can take.
    pub fn is_valid(&self) -> bool {
        ACL_PATTERN.is_match(&self.pattern)
    }
}

/// The rule put on every `acl` list: usernames are unique.
pub fn unique_usernames_rule() -> kube::core::Rule {
    unique_by_rule("acl", "username")
}
