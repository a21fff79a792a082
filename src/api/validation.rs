//! Validation rules shared by the CRD schemas (CEL `x-kubernetes-validations`) and Rust code
//! (webhooks, resolver). A [`Pattern`] is written once and used twice: as a CEL `matches()`
//! rule the API server evaluates at apply time, and as a Rust check. Unit tests run every
//! pattern through both and require them to agree.

use std::sync::OnceLock;

use kube::core::{Message, Reason, Rule};
use regex::Regex;

use super::constants::{
    FORCED_SETTING_PREFIXES, FORCED_SETTINGS, MAX_MEMBERS, REFUSED_AUTH_SETTINGS, REFUSED_INCLUDE,
    REFUSED_SETTING_PREFIX, RESERVED_PREFIX,
};

/// Builder helpers for rules whose message is computed.
pub trait RuleExt {
    /// Set a fixed message.
    fn msg(self, message: String) -> Rule;
    /// Set a CEL message expression.
    fn msg_expr(self, expression: String) -> Rule;
}

impl RuleExt for Rule {
    fn msg(self, message: String) -> Rule {
        self.message(Message::Message(message))
    }

    fn msg_expr(self, expression: String) -> Rule {
        self.message(Message::Expression(expression))
    }
}

/// A string format: an RE2-compatible regular expression (no backslashes, so it can be embedded
/// verbatim in a CEL string literal), a maximum length and a human description used in
/// messages ("must be <describe>").
pub struct Pattern {
    pub regex: &'static str,
    pub max_len: usize,
    pub describe: &'static str,
    compiled: OnceLock<Regex>,
}

impl Pattern {
    const fn new(regex: &'static str, max_len: usize, describe: &'static str) -> Self {
        Self {
            regex,
            max_len,
            describe,
            compiled: OnceLock::new(),
        }
    }

    /// Rust check, identical in meaning to [`Pattern::rule`].
    pub fn is_match(&self, value: &str) -> bool {
        let re = self
            .compiled
            .get_or_init(|| Regex::new(self.regex).expect("validation patterns are valid regexes"));
        value.chars().count() <= self.max_len && re.is_match(value)
    }

    /// The CEL expression for a string value bound to `var`.
    pub fn cel(&self, var: &str) -> String {
        format!(
            "size({var}) <= {} && {var}.matches('{}')",
            self.max_len, self.regex
        )
    }

    /// A CEL rule on a string field: `<field> must be <describe>`.
    pub fn rule(&self, field: &str) -> Rule {
        Rule::new(self.cel("self")).msg(format!("{field} must be {}", self.describe))
    }

    /// A CEL rule on a list of strings: every item must match.
    pub fn each_rule(&self, field: &str) -> Rule {
        Rule::new(format!("self.all(x, {})", self.cel("x")))
            .msg(format!("every entry of {field} must be {}", self.describe))
    }

    /// The same rule as a Rust check with the same message.
    pub fn check(&self, field: &str, value: &str) -> Result<(), Mismatch> {
        if self.is_match(value) {
            Ok(())
        } else {
            Err(Mismatch {
                field: field.to_owned(),
                describe: self.describe,
                value: value.to_owned(),
            })
        }
    }
}

/// A value that does not match a [`Pattern`]: `<field> must be <describe>, got <value>`, the
/// CEL rule's message plus the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {describe}, got {value:?}")]
pub struct Mismatch {
    pub field: String,
    pub describe: &'static str,
    pub value: String,
}

/// Kubernetes object names (DNS-1123 subdomain): the format of every reference.
pub static DNS1123_SUBDOMAIN: Pattern = Pattern::new(
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    253,
    "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending \
     with a letter or digit, at most 253 characters",
);

/// ValkeyCluster names (DNS-1035 label, short enough to derive pod and Service names).
pub static CLUSTER_NAME: Pattern = Pattern::new(
    "^[a-z]([-a-z0-9]*[a-z0-9])?$",
    super::constants::MAX_CLUSTER_NAME_LEN,
    "a DNS-1035 label of at most 40 characters: lowercase letters, digits and '-', starting \
     with a letter and ending with a letter or digit",
);

/// Container image repository, optionally with a registry host and port.
pub static IMAGE_REPOSITORY: Pattern = Pattern::new(
    "^(([a-zA-Z0-9-]+([.][a-zA-Z0-9-]+)+|localhost)(:[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$",
    255,
    "an image repository such as valkey/valkey or registry.example.com:5000/team/valkey \
     (lowercase path, no tag or digest)",
);

/// Container image tag.
pub static IMAGE_TAG: Pattern = Pattern::new(
    "^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
    128,
    "an image tag: letters, digits, '_', '.' and '-', not starting with '.' or '-', at most 128 characters",
);

/// Container image digest.
pub static IMAGE_DIGEST: Pattern = Pattern::new(
    "^sha256:[0-9a-f]{64}$",
    71,
    "an image digest of the form sha256:<64 lowercase hex characters>",
);

/// SHA-256 password hash as Valkey's ACL `#<hash>` expects it.
pub static SHA256_HEX: Pattern = Pattern::new(
    "^[0-9a-f]{64}$",
    64,
    "a SHA-256 hash written as 64 lowercase hexadecimal characters (for example the output of \
     `printf '%s' \"$PASSWORD\" | sha256sum`)",
);

/// Valkey ACL username as bindings may use it: Momento's documented shape (up to 128 of
/// `[a-zA-Z0-9_-]`, a leading `_` allowed) plus '.', ':' and '@'. Names starting with
/// [`RESERVED_USERNAME_PREFIX`] are the operator's own users ([`reserved_username_rule`]).
pub static ACL_USERNAME: Pattern = Pattern::new(
    "^[A-Za-z0-9_][A-Za-z0-9._:@-]*$",
    128,
    "a valid ACL username: at most 128 letters, digits, '.', '_', ':', '@' or '-', not starting \
     with '.', ':', '@' or '-' (no spaces)",
);

/// Usernames of the operator's own ACL users start with this; bindings may not.
pub const RESERVED_USERNAME_PREFIX: &str = "_valkey-";

/// A binding may not take a name of the operator's own users.
pub fn reserved_username_rule() -> Rule {
    Rule::new(format!("!self.startsWith('{RESERVED_USERNAME_PREFIX}')")).msg(format!(
        "username must not start with {RESERVED_USERNAME_PREFIX}: that prefix is reserved for the operator's own users"
    ))
}

/// Key or channel glob pattern: printable ASCII without spaces.
pub static ACL_PATTERN: Pattern = Pattern::new(
    "^[!-~]+$",
    256,
    "a non-empty glob pattern of printable ASCII characters without spaces (for example app:*)",
);

/// Valkey command name, optionally with one subcommand (`config|get`); any case (Valkey's
/// command names are case-insensitive; the operator renders them lowercase).
pub static COMMAND_NAME: Pattern = Pattern::new(
    "^[a-zA-Z][a-zA-Z0-9._-]*([|][a-zA-Z][a-zA-Z0-9._-]*)?$",
    128,
    "a Valkey command name, optionally with a subcommand as command|subcommand \
     (for example get or config|get)",
);

/// A subcommand given on its own (Momento's `subcommand` field).
pub static SUBCOMMAND_NAME: Pattern = Pattern::new(
    "^[a-zA-Z][a-zA-Z0-9._-]*$",
    64,
    "a Valkey subcommand name (for example info, or setname)",
);

/// Valkey ACL category name, without the leading `@`; any case.
pub static CATEGORY_NAME: Pattern = Pattern::new(
    "^[a-zA-Z][a-zA-Z0-9_-]*$",
    64,
    "an ACL category name without the leading '@' (for example read, write, keyspace)",
);

/// Valkey setting name as used in valkey.conf.
pub static SETTING_KEY: Pattern = Pattern::new(
    "^[a-z][a-z0-9-]*$",
    128,
    "a lowercase Valkey setting name (letters, digits and '-', for example maxmemory-policy)",
);

/// Kubernetes label value (zone names, nodeSelector values).
pub static LABEL_VALUE: Pattern = Pattern::new(
    "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
    63,
    "a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', starting and ending \
     with a letter or digit",
);

/// A zone name (a non-empty label value of `topology.kubernetes.io/zone`).
pub static ZONE_NAME: Pattern = Pattern::new(
    "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    63,
    "a zone name (a non-empty Kubernetes label value: at most 63 letters, digits, '-', '_' or \
     '.', starting and ending with a letter or digit)",
);

/// Kubernetes qualified name (label and annotation keys): `[prefix/]name`.
pub static QUALIFIED_NAME: Pattern = Pattern::new(
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    317,
    "a Kubernetes qualified name [prefix/]name: an optional DNS subdomain prefix and a name of at \
     most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
);

/// CEL list literal of the forced setting names.
fn forced_list() -> String {
    let quoted: Vec<String> = FORCED_SETTINGS.iter().map(|k| format!("'{k}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL predicate: `var` is a forced setting key.
fn forced_cel(var: &str) -> String {
    let mut parts = vec![format!("{var} in {}", forced_list())];
    parts.extend(
        FORCED_SETTING_PREFIXES
            .iter()
            .map(|p| format!("{var}.startsWith('{p}')")),
    );
    parts.join(" || ")
}

/// The settings map of a ValkeyConfig (`spec.valkey`, `spec.settings` in v1beta1) may not
/// set settings the operator forces; `field` names it in the message.
pub fn forced_settings_rule(field: &str) -> Rule {
    Rule::new(format!("!self.exists(k, {})", forced_cel("k")))
        .msg_expr(format!(
            "'{field} must not set operator-forced settings (cluster mode, ports, paths, \
             replication identity, tls-*); remove: ' + self.filter(k, {})[0]",
            forced_cel("k")
        ))
        .reason(Reason::FieldValueForbidden)
}

/// The settings map `field` (`spec.valkey`, `spec.settings` in v1beta1) names no setting a
/// config may not set (Momento v0.9): authentication and ACL settings, `tls-*`, `include`.
/// One rule per family, each naming the first such key (Rust twin:
/// [`super::constants::refused_setting`]).
pub fn refused_settings_rules(field: &str) -> [Rule; 3] {
    let auth: Vec<String> = REFUSED_AUTH_SETTINGS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect();
    let auth = format!("k in [{}]", auth.join(", "));
    let tls = format!("k.startsWith('{REFUSED_SETTING_PREFIX}')");
    let family = |predicate: &str, why: &str| {
        Rule::new(format!("!self.exists(k, {predicate})"))
            .msg_expr(format!(
                "'{field}.' + self.filter(k, {predicate})[0] + ' {why}'"
            ))
            .reason(Reason::FieldValueForbidden)
    };
    [
        family(
            &auth,
            "is managed by the operator: bind users with spec.acl",
        ),
        family(
            &tls,
            "is managed by the operator: use spec.tls on the ValkeyCluster",
        ),
        Rule::new(format!("!('{REFUSED_INCLUDE}' in self)"))
            .msg(format!(
                "{field}.{REFUSED_INCLUDE} would bypass the operator's settings and is not allowed"
            ))
            .reason(Reason::FieldValueForbidden),
    ]
}

/// Rust twin of [`forced_settings_rule`]: the forced keys present in a settings map.
pub fn forced_keys_in<'a>(keys: impl IntoIterator<Item = &'a String>) -> Vec<&'a str> {
    keys.into_iter()
        .map(String::as_str)
        .filter(|k| super::constants::is_forced_setting(k))
        .collect()
}

/// Setting names in a ValkeyConfig's settings map (`field`) must be lowercase names.
pub fn setting_keys_rule(field: &str) -> Rule {
    Rule::new(format!("self.all(k, {})", SETTING_KEY.cel("k"))).msg(format!(
        "every key of {field} must be {}",
        SETTING_KEY.describe
    ))
}

/// Setting values must be single-line.
pub fn setting_values_rule(field: &str) -> Rule {
    Rule::new("self.all(k, !self[k].matches('[[:cntrl:]]'))").msg(format!(
        "values in {field} must be single-line strings without control characters (no newlines or tabs)"
    ))
}

/// Is a setting value acceptable (single line, no control characters)?
pub fn is_valid_setting_value(value: &str) -> bool {
    !value.chars().any(|c| c.is_ascii_control())
}

/// Pod annotation keys may not use the operator's reserved prefix.
pub fn reserved_annotations_rule() -> Rule {
    Rule::new(format!(
        "!self.exists(k, k.startsWith('{RESERVED_PREFIX}'))"
    ))
    .msg_expr(format!(
        "'podAnnotations keys under {RESERVED_PREFIX} are reserved for the operator; remove: ' \
             + self.filter(k, k.startsWith('{RESERVED_PREFIX}'))[0]"
    ))
    .reason(Reason::FieldValueForbidden)
}

/// Annotation and label keys must be qualified names.
pub fn qualified_keys_rule(field: &str) -> Rule {
    Rule::new(format!("self.all(k, {})", QUALIFIED_NAME.cel("k"))).msg(format!(
        "every key of {field} must be {}",
        QUALIFIED_NAME.describe
    ))
}

/// Label values in a map must be label values.
pub fn label_values_rule(field: &str) -> Rule {
    Rule::new(format!("self.all(k, {})", LABEL_VALUE.cel("self[k]"))).msg(format!(
        "every value of {field} must be {}",
        LABEL_VALUE.describe
    ))
}

/// Items of a list of objects must be unique by `key`.
pub fn unique_by_rule(field: &str, key: &str) -> Rule {
    Rule::new(format!(
        "self.all(a, self.exists_one(b, b.{key} == a.{key}))"
    ))
    .msg(format!(
        "{field} must not contain two entries with the same {key}"
    ))
    .reason(Reason::FieldValueDuplicate)
}

/// Why a spec edit is refused while the cluster is created (Momento v0.9, MOMENTO-V09.md
/// section 6).
pub const FROZEN_WHILE_CREATING: &str = "spec cannot change while the cluster is being created \
     (status.state Creating) or after creation failed: wait for Active, or delete and recreate \
     it with the new spec";

/// The root transition rule of ValkeyCluster (both versions): the spec is frozen until the
/// cluster has a state past `Creating`. Metadata (labels, annotations, the pause annotation)
/// and deletion stay free; re-applying the same manifest changes nothing and passes.
pub fn frozen_while_creating_rule() -> Rule {
    Rule::new(
        "self.spec == oldSelf.spec || (has(oldSelf.status) && has(oldSelf.status.state) \
         && !(oldSelf.status.state in ['Creating', 'Failed']))",
    )
    .message(FROZEN_WHILE_CREATING)
    .field_path(".spec")
    .reason(Reason::FieldValueForbidden)
}

/// Members `shards x (1 + replicasPerShard)` asks for, in `i64`: exact for every pair of `i32`
/// (at most about 2^62), never an overflow; a negative input counts as 0.
pub fn desired_members(shards: i32, replicas_per_shard: i32) -> i64 {
    i64::from(shards.max(0)) * (1 + i64::from(replicas_per_shard.max(0)))
}

/// The CEL rule bounding the member count, on the object holding `shards` and
/// `replicasPerShard` (`spec` in v1alpha1, `spec.topology` in v1beta1). The first two terms
/// only keep the product from overflowing CEL's `int` when the API server lets a value beyond
/// `int32` through (both are implied by the third for valid values: `shards >= 1`,
/// `replicasPerShard >= 0`); CEL's `&&` is false when any term is false, even if another errs.
/// Constant cost: no list, map or string is traversed.
pub fn member_count_rule() -> Rule {
    Rule::new(format!(
        "self.shards <= {MAX_MEMBERS} && self.replicasPerShard <= {MAX_MEMBERS} \
         && self.shards * (1 + self.replicasPerShard) <= {MAX_MEMBERS}"
    ))
    // A fixed message: the API server estimates a messageExpression that formats the numbers
    // (string() of unbounded ints) at over 100x its cost budget and refuses the whole CRD.
    // The webhook's twin adds the numbers.
    .msg(member_count_message())
    .field_path(".replicasPerShard")
    .reason(Reason::FieldValueInvalid)
}

/// The rule's message, which the webhook's begins with.
fn member_count_message() -> String {
    format!(
        "a cluster has at most {MAX_MEMBERS} members: shards x (1 + replicasPerShard) must be at most {MAX_MEMBERS}; {MEMBER_COUNT_ADVICE}"
    )
}

/// What to do about too many members (the end of the rule's message and the webhook's).
const MEMBER_COUNT_ADVICE: &str = "lower shards or replicasPerShard (larger members, from a \
     ValkeyConfig with more memory, hold more data per shard)";

/// Rust twin of [`member_count_rule`]: the same message, with the numbers.
pub fn check_member_count(shards: i32, replicas_per_shard: i32) -> Result<(), String> {
    let members = desired_members(shards, replicas_per_shard);
    if members <= MAX_MEMBERS {
        return Ok(());
    }
    Err(format!(
        "{} (it is {members}: {shards} x (1 + {replicas_per_shard}))",
        member_count_message()
    ))
}

/// A Kubernetes quantity that is strictly positive (`cpu`, `memory`).
pub fn positive_quantity_rule(field: &str, example: &str) -> Rule {
    Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").msg(format!(
        "{field} must be a positive Kubernetes quantity (for example {example})"
    ))
}

/// Rust twin of the quantity rule: a Kubernetes quantity (number with an optional suffix).
pub fn is_positive_quantity(value: &str) -> bool {
    static QUANTITY: OnceLock<Regex> = OnceLock::new();
    let re = QUANTITY.get_or_init(|| {
        Regex::new(
            r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$",
        )
        .expect("valid regex")
    });
    re.is_match(value)
        && value
            .trim_start_matches('+')
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .any(|c| c.is_ascii_digit() && c != '0')
}

fn string_map_schema(max_properties: u32, max_value_len: u32) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": max_properties,
        "additionalProperties": {"type": "string", "maxLength": max_value_len}
    })
}

/// Schema of `ValkeyConfig.spec.valkey`: at most 200 settings, values up to 1024 characters.
pub fn settings_map_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    string_map_schema(200, 1024)
}

/// Schema of `ValkeyCluster.spec.podAnnotations`: at most 64 annotations.
pub fn annotations_map_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    string_map_schema(64, 4096)
}

/// Schema of `placement.nodeSelector`: at most 32 labels, values up to 63 characters.
pub fn node_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    string_map_schema(32, 63)
}
