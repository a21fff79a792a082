//! Rendering the merged ACL bindings into a Valkey ACL file.
//!
//! Each binding becomes one `user` line: `on`, one `#<sha256>` per password hash, no root
//! permissions, and one selector per permission: `(<keys> <channels> <role rules>)`, so each
//! role's commands apply only to the keys and channels it was bound with. Key access renders
//! as `%R~` (read), `%W~` (write) or `~` (readwrite); channels as `&`; a role's categories
//! first, then its commands, each in list order.
//!
//! The operator adds two users of its own (names starting with `_`, which bindings may not
//! use): its administration user with exactly the commands its driver sends, and the user
//! replicas authenticate to their primary with. `default` is off unless a binding names it.
//!
//! The first line is a revision marker, `user _rev-<12 hex> off`: a disabled user (it cannot
//! log in) named after the SHA-256 of the rest of the file. After `ACL LOAD`, `ACL USERS` on a
//! member tells which revision it loaded, so the operator knows that member read the new file
//! and not the one its Secret volume held a moment earlier.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::api::constants::{
    BACKUP_ACL_USERNAME, METRICS_ACL_USERNAME, OPERATOR_ACL_USERNAME, REPLICATION_ACL_USERNAME,
    RESTORE_ACL_USERNAME,
};
use crate::api::{AclBinding, KeyAccess, RuleAccess, ValkeyRoleSpec};

use super::conf::sha256_hex;

/// Exactly the commands the operator's driver sends (`driver/fred.rs`; a unit test there
/// checks the two lists agree), plus what its connections and `MIGRATE` need: `AUTH` and
/// `CLIENT ID` (fred sends both on every connection), and on the target of a key-by-key move, where `MIGRATE ... AUTH2` logs in as
/// this user, `SELECT` and `RESTORE-ASKING`. No data command: the operator cannot read a
/// value (`MIGRATE` moves keys it cannot see), write one, or flush anything.
pub const OPERATOR_COMMANDS: &[&str] = &[
    "auth",
    "client|id",
    "ping",
    "info",
    "cluster|myid",
    "cluster|nodes",
    "cluster|shards",
    "cluster|info",
    "cluster|countkeysinslot",
    "cluster|getkeysinslot",
    "cluster|getslotmigrations",
    "cluster|meet",
    "cluster|addslotsrange",
    "cluster|replicate",
    "cluster|failover",
    "cluster|set-config-epoch",
    "cluster|forget",
    "cluster|reset",
    "cluster|setslot",
    "cluster|migrateslots",
    "cluster|cancelslotmigrations",
    "config|get",
    "config|set",
    "config|rewrite",
    "acl|load",
    "acl|users",
    "migrate",
    "restore-asking",
    "select",
];

/// Commands a replica runs against its primary (`AUTH`, `REPLCONF`, `PSYNC`/`SYNC`, `PING`),
/// and that one member runs against another during atomic slot migration: the exporting
/// member authenticates to the importing one as this user (`masteruser`), sends
/// `CLUSTER SYNCSLOTS`, then replays the slots' data (`SELECT` and the AOF-rewrite form of
/// each key: `SET`, `RPUSH`, `SADD`, `ZADD`, `HSET`, `XADD`, `PEXPIREAT`, ...) and every write
/// to those slots while they move, as commands, which the importing member checks against
/// this user's permissions (Valkey 9.0.0 and 9.1.2: without `@write` the import fails with
/// `NOPERM ... 'select'`). Any keyed write command can be replayed, so `@write` stays; the
/// write commands that are never replayed are taken away in [`REPLICATION_DENIED`].
pub const REPLICATION_COMMANDS: &[&str] = &[
    "psync",
    "sync",
    "replconf",
    "ping",
    "auth",
    "cluster|syncslots",
    "select",
    "multi",
    "exec",
    "@write",
];

/// Write commands atomic slot migration never replays, denied to the replication user: the
/// keyless ones (a migration feeds only commands on keys of its slots: `FLUSHALL`, `FLUSHDB`,
/// `SWAPDB`, `FUNCTION LOAD/DELETE/FLUSH/RESTORE`, `CLUSTER FLUSHSLOT`), `MIGRATE` (replicated
/// as `DEL`; it would let the holder of the password copy keys to any host) and
/// `RESTORE-ASKING` (only key-by-key moves send it, never to slots under atomic migration).
pub const REPLICATION_DENIED: &[&str] = &[
    "flushall",
    "flushdb",
    "swapdb",
    "function",
    "cluster|flushslot",
    "migrate",
    "restore-asking",
];

/// What a backup Job sends (`backup::sync`): it logs in, says it wants the snapshot only and
/// takes it. `SYNC` hands over every key, which no key pattern restricts; the user can write
/// nothing, read no single key, and see no setting.
pub const BACKUP_COMMANDS: &[&str] = &["auth", "ping", "replconf", "sync"];

/// The restore user (restore Jobs): replays a backup's keys and function libraries into a
/// new cluster's primaries. It writes any key, reads none (`RESTORE` returns no value).
pub const RESTORE_COMMANDS: &[&str] = &["auth", "ping", "restore", "function|load"];

/// The metrics user (the exporter beside each member): server statistics, nothing else. No
/// key, no channel, and no `CONFIG` (`CONFIG GET` returns the replication password): the
/// exporter runs with its config command off.
pub const METRICS_COMMANDS: &[&str] = &[
    "auth",
    "ping",
    "info",
    "cluster|info",
    "slowlog|get",
    "slowlog|len",
    "latency|latest",
    "client|setname",
];

/// Denied at the end of every selector of every bound user, whatever its role grants: `CONFIG
/// GET` returns `masterauth`, the replication user's password, and `CONFIG SET` changes what
/// the operator manages. Roles cannot grant it (the role webhook refuses an explicit
/// `config` rule); this keeps it out when the webhook was not serving or a category such as
/// `@admin`, `@dangerous`, `@slow` or `@all` grants it.
pub const TENANT_DENIED: &[&str] = &["config"];

/// Passwords of the operator's own users (held in a Secret the operator generates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorCredentials {
    pub operator_password: String,
    pub replication_password: String,
    /// Backup Jobs' password; clusters created before backups existed get one on their next
    /// reconcile (no member knows it yet, so it can be added at any time).
    pub backup_password: String,
    /// Restore Jobs' password (added as the backup user's was).
    pub restore_password: String,
    /// The metrics exporters' password (added as the backup user's was).
    pub metrics_password: String,
}

/// Prefix of the revision marker user (reserved: bindings may not start a name with `_`).
pub const REVISION_USER_PREFIX: &str = "_rev-";

/// Length of a revision: the first hex digits of the SHA-256 of the file below the marker.
pub const REVISION_LEN: usize = 12;

/// Name of the marker user of a revision.
pub fn revision_user(revision: &str) -> String {
    format!("{REVISION_USER_PREFIX}{revision}")
}

/// The revision a rendered file carries (its marker line), if any.
pub fn file_revision(file: &str) -> Option<&str> {
    file.lines().find_map(|line| {
        let rest = line
            .strip_prefix("user ")?
            .strip_prefix(REVISION_USER_PREFIX)?;
        rest.split_whitespace().next()
    })
}

/// The revision marker among the usernames a member reports (`ACL USERS`), if any.
pub fn loaded_revision<'a>(usernames: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    usernames
        .into_iter()
        .find_map(|u| u.strip_prefix(REVISION_USER_PREFIX))
}

/// The ACL file: the revision marker, operator users, `default`, then the bindings in order.
pub fn render_acl_file(
    bindings: &[AclBinding],
    roles: &BTreeMap<String, ValkeyRoleSpec>,
    credentials: &OperatorCredentials,
) -> String {
    render_acl_file_hashed(bindings, roles, &credentials.hashes())
}

/// The SHA-256 (hex) of the passwords of the operator's own users: all the ACL file holds of
/// them. What a reader without the operator's credentials Secret (a product team, the kubectl
/// plugin) can take from a rendered file ([`operator_user_hashes`]) to render it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorUserHashes {
    pub operator: String,
    pub replication: String,
    /// None in files rendered before backups existed.
    pub backup: Option<String>,
    /// None in files rendered before restores existed.
    pub restore: Option<String>,
    /// None unless the cluster's config turns metrics on.
    pub metrics: Option<String>,
}

impl OperatorCredentials {
    pub fn hashes(&self) -> OperatorUserHashes {
        OperatorUserHashes {
            operator: sha256_hex(&self.operator_password),
            replication: sha256_hex(&self.replication_password),
            backup: Some(sha256_hex(&self.backup_password)),
            restore: Some(sha256_hex(&self.restore_password)),
            metrics: Some(sha256_hex(&self.metrics_password)),
        }
    }

    /// The hashes a cluster's ACL file carries: the restore user only while `restoring` (it
    /// may write every key; outside a restore nothing needs it, so no member knows it), the
    /// metrics user only while the members run exporters (`metrics`).
    pub fn hashes_of_users(&self, restoring: bool, metrics: bool) -> OperatorUserHashes {
        let hashes = self.hashes();
        OperatorUserHashes {
            restore: hashes.restore.filter(|_| restoring),
            metrics: hashes.metrics.filter(|_| metrics),
            ..hashes
        }
    }
}

/// The password hashes of the operator's own users in a rendered ACL file, if it has both.
pub fn operator_user_hashes(file: &str) -> Option<OperatorUserHashes> {
    let hash_of = |user: &str| {
        file.lines().find_map(|line| {
            let rest = line.strip_prefix("user ")?.strip_prefix(user)?;
            rest.strip_prefix(" on #")?
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
    };
    Some(OperatorUserHashes {
        operator: hash_of(OPERATOR_ACL_USERNAME)?,
        replication: hash_of(REPLICATION_ACL_USERNAME)?,
        backup: hash_of(BACKUP_ACL_USERNAME),
        restore: hash_of(RESTORE_ACL_USERNAME),
        metrics: hash_of(METRICS_ACL_USERNAME),
    })
}

/// [`render_acl_file`] from the hashes of the operator's passwords (the file holds nothing else
/// of them).
pub fn render_acl_file_hashed(
    bindings: &[AclBinding],
    roles: &BTreeMap<String, ValkeyRoleSpec>,
    operator_users: &OperatorUserHashes,
) -> String {
    let body = render_acl_body(bindings, roles, operator_users);
    let revision = &sha256_hex(&body)[..REVISION_LEN];
    format!("user {} off\n{body}", revision_user(revision))
}

fn render_acl_body(
    bindings: &[AclBinding],
    roles: &BTreeMap<String, ValkeyRoleSpec>,
    operator_users: &OperatorUserHashes,
) -> String {
    let mut out = String::new();
    let rules = |allowed: &[&str], denied: &[&str]| {
        let allow = allowed.iter().map(|c| format!("+{c}"));
        let deny = denied.iter().map(|c| format!("-{c}"));
        allow.chain(deny).collect::<Vec<_>>().join(" ")
    };
    // Every key (MIGRATE and slot migration move any key), no channel.
    let _ = writeln!(
        out,
        "user {OPERATOR_ACL_USERNAME} on #{} resetchannels ~* -@all {}",
        operator_users.operator,
        rules(OPERATOR_COMMANDS, &[])
    );
    let _ = writeln!(
        out,
        "user {REPLICATION_ACL_USERNAME} on #{} resetchannels ~* -@all {}",
        operator_users.replication,
        rules(REPLICATION_COMMANDS, REPLICATION_DENIED)
    );
    if let Some(backup) = &operator_users.backup {
        let _ = writeln!(
            out,
            "user {BACKUP_ACL_USERNAME} on #{backup} resetkeys resetchannels -@all {}",
            rules(BACKUP_COMMANDS, &[])
        );
    }
    if let Some(restore) = &operator_users.restore {
        let _ = writeln!(
            out,
            "user {RESTORE_ACL_USERNAME} on #{restore} resetchannels ~* -@all {}",
            rules(RESTORE_COMMANDS, &[])
        );
    }
    if let Some(metrics) = &operator_users.metrics {
        let _ = writeln!(
            out,
            "user {METRICS_ACL_USERNAME} on #{metrics} resetkeys resetchannels -@all {}",
            rules(METRICS_COMMANDS, &[])
        );
    }
    if !bindings.iter().any(|b| b.username == "default") {
        // Off, yet allowed `cluster|syncslots`: Valkey 9.0's atomic slot migration checks that
        // subcommand, sent by the importing member, against the default user. An off user
        // cannot log in, so this grants nothing to clients.
        out.push_str(
            "user default off resetpass resetkeys resetchannels -@all +cluster|syncslots\n",
        );
    }
    for binding in bindings {
        out.push_str(&render_user(binding, roles));
        out.push('\n');
    }
    out
}

/// One binding's `user` line.
pub fn render_user(binding: &AclBinding, roles: &BTreeMap<String, ValkeyRoleSpec>) -> String {
    let mut line = format!("user {} reset on", binding.username);
    for hash in &binding.password_hashes {
        let _ = write!(line, " #{}", hash.to_ascii_lowercase());
    }
    for permission in &binding.permissions {
        let mut selector: Vec<String> = Vec::new();
        // `~*` and `&*` mean every key / every channel, and Valkey refuses any pattern after
        // them in the same selector: when one is bound, it is the only one rendered.
        let all_keys = permission
            .keys
            .iter()
            .any(|k| k.pattern == "*" && k.access == KeyAccess::Readwrite);
        let all_channels = permission.channels.iter().any(|c| c.pattern == "*");
        let keys = permission
            .keys
            .iter()
            .filter(|k| !all_keys || k.pattern == "*" && k.access == KeyAccess::Readwrite);
        let channels = permission
            .channels
            .iter()
            .filter(|c| !all_channels || c.pattern == "*");
        for key in keys.take(if all_keys { 1 } else { usize::MAX }) {
            let prefix = match key.access {
                KeyAccess::Read => "%R~",
                KeyAccess::Write => "%W~",
                KeyAccess::Readwrite => "~",
            };
            selector.push(selector_token(&format!("{prefix}{}", key.pattern)));
        }
        for channel in channels.take(if all_channels { 1 } else { usize::MAX }) {
            selector.push(selector_token(&format!("&{}", channel.pattern)));
        }
        // A missing role is a resolution error before rendering; render nothing for it here.
        if let Some(role) = roles.get(&permission.role_ref) {
            selector.extend(role_rules(role));
            selector.extend(TENANT_DENIED.iter().map(|c| format!("-{c}")));
        }
        if !selector.is_empty() {
            let _ = write!(line, " ({})", selector.join(" "));
        }
    }
    line
}

/// One key or channel rule (`%R~app:*`) as it can sit inside a selector. Valkey reads a
/// selector's content with quote processing (a bare `"` or `'` silently empties the whole
/// selector) and ends a selector at the first argument that ends with `)`. A rule containing a
/// quote or ending with `)` is therefore written double-quoted, with `\` and `"` escaped.
/// Nothing else needs it: the file splits arguments on spaces, and patterns have none.
pub fn selector_token(rule: &str) -> String {
    if !rule.contains(['"', '\'']) && !rule.ends_with(')') {
        return rule.to_string();
    }
    format!("\"{}\"", rule.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A role's rules: categories first, then commands, each in list order.
pub fn role_rules(role: &ValkeyRoleSpec) -> Vec<String> {
    let sign = |access: RuleAccess| match access {
        RuleAccess::Allow => '+',
        RuleAccess::Deny => '-',
    };
    role.categories
        .iter()
        .map(|c| format!("{}@{}", sign(c.access), c.name.to_lowercase()))
        .chain(
            role.commands
                .iter()
                .map(|c| format!("{}{}", sign(c.access), c.full_name())),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AclPermission, CategoryRule, ChannelPermission, CommandRule, KeyPermission};

    fn roles() -> BTreeMap<String, ValkeyRoleSpec> {
        let mut roles = BTreeMap::new();
        roles.insert(
            "readonly".to_string(),
            ValkeyRoleSpec {
                categories: vec![CategoryRule {
                    name: "read".into(),
                    access: RuleAccess::Allow,
                }],
                commands: vec![CommandRule {
                    name: "keys".into(),
                    subcommand: None,
                    access: RuleAccess::Deny,
                }],
            },
        );
        roles.insert(
            "readwrite".to_string(),
            ValkeyRoleSpec {
                categories: vec![
                    CategoryRule {
                        name: "read".into(),
                        access: RuleAccess::Allow,
                    },
                    CategoryRule {
                        name: "write".into(),
                        access: RuleAccess::Allow,
                    },
                ],
                commands: vec![],
            },
        );
        roles
    }

    fn creds() -> OperatorCredentials {
        OperatorCredentials {
            operator_password: "op".into(),
            replication_password: "rep".into(),
            backup_password: "bak".into(),
            restore_password: "res".into(),
            metrics_password: "m".into(),
        }
    }

    fn binding(user: &str, hashes: &[&str], perms: Vec<AclPermission>) -> AclBinding {
        AclBinding {
            username: user.into(),
            password_hashes: hashes.iter().map(|h| h.to_string()).collect(),
            permissions: perms,
        }
    }

    fn perm(role: &str, keys: &[(&str, KeyAccess)], channels: &[&str]) -> AclPermission {
        AclPermission {
            role_ref: role.into(),
            keys: keys
                .iter()
                .map(|(p, a)| KeyPermission {
                    pattern: p.to_string(),
                    access: *a,
                })
                .collect(),
            channels: channels
                .iter()
                .map(|c| ChannelPermission {
                    pattern: c.to_string(),
                })
                .collect(),
        }
    }

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn each_user_is_on_with_one_hash_per_password() {
        let line = render_user(
            &binding("app", &[H1, H2], vec![perm("readonly", &[], &[])]),
            &roles(),
        );
        assert!(
            line.starts_with(&format!("user app reset on #{H1} #{H2} ")),
            "{line}"
        );
    }

    #[test]
    fn key_access_renders_read_write_and_readwrite() {
        let b = binding(
            "app",
            &[H1],
            vec![perm(
                "readwrite",
                &[
                    ("r:*", KeyAccess::Read),
                    ("w:*", KeyAccess::Write),
                    ("rw:*", KeyAccess::Readwrite),
                ],
                &[],
            )],
        );
        let line = render_user(&b, &roles());
        assert!(
            line.contains("(%R~r:* %W~w:* ~rw:* +@read +@write -config)"),
            "{line}"
        );
    }

    #[test]
    fn channels_render_with_ampersand() {
        let line = render_user(
            &binding("app", &[H1], vec![perm("readonly", &[], &["events:*"])]),
            &roles(),
        );
        assert!(line.contains("(&events:* +@read -keys -config)"), "{line}");
    }

    #[test]
    fn a_subcommand_given_on_its_own_renders_as_command_pipe_subcommand() {
        // Momento's shape {name: cluster, subcommand: info}: +cluster|info, never +cluster.
        let role = ValkeyRoleSpec {
            categories: vec![CategoryRule {
                name: "READ".into(),
                access: RuleAccess::Allow,
            }],
            commands: vec![
                CommandRule {
                    name: "CLUSTER".into(),
                    subcommand: Some("Info".into()),
                    access: RuleAccess::Allow,
                },
                CommandRule {
                    name: "config|get".into(),
                    subcommand: None,
                    access: RuleAccess::Allow,
                },
            ],
        };
        assert_eq!(
            role_rules(&role),
            vec!["+@read", "+cluster|info", "+config|get"]
        );
    }

    #[test]
    fn role_categories_come_before_commands() {
        assert_eq!(role_rules(&roles()["readonly"]), vec!["+@read", "-keys"]);
    }

    #[test]
    fn each_permission_is_its_own_selector() {
        let b = binding(
            "app",
            &[H1],
            vec![
                perm("readonly", &[("app:*", KeyAccess::Read)], &[]),
                perm("readwrite", &[("tmp:*", KeyAccess::Readwrite)], &[]),
            ],
        );
        let line = render_user(&b, &roles());
        assert!(
            line.ends_with("(%R~app:* +@read -keys -config) (~tmp:* +@read +@write -config)"),
            "{line}"
        );
    }

    #[test]
    fn default_user_is_off_unless_a_binding_names_it() {
        let file = render_acl_file(&[], &roles(), &creds());
        assert!(file.contains("user default off"));
        let file = render_acl_file(
            &[binding("default", &[H1], vec![perm("readonly", &[], &[])])],
            &roles(),
            &creds(),
        );
        assert!(!file.contains("user default off"));
        assert!(file.contains("user default reset on"));
    }

    #[test]
    fn operator_users_get_exactly_their_commands() {
        let file = render_acl_file(&[], &roles(), &creds());
        let op = file
            .lines()
            .find(|l| l.starts_with("user _valkey-operator "))
            .unwrap();
        assert!(op.contains(&format!("#{}", sha256_hex("op"))));
        assert!(
            op.ends_with(
                " resetchannels ~* -@all +auth +client|id +ping +info +cluster|myid +cluster|nodes \
                 +cluster|shards +cluster|info +cluster|countkeysinslot +cluster|getkeysinslot \
                 +cluster|getslotmigrations +cluster|meet +cluster|addslotsrange \
                 +cluster|replicate +cluster|failover +cluster|set-config-epoch \
                 +cluster|forget +cluster|reset \
                 +cluster|setslot +cluster|migrateslots +cluster|cancelslotmigrations \
                 +config|get +config|set +config|rewrite +acl|load +acl|users +migrate \
                 +restore-asking +select"
            ),
            "{op}"
        );
        let rep = file
            .lines()
            .find(|l| l.starts_with("user _valkey-replication "))
            .unwrap();
        assert!(
            rep.ends_with(
                " resetchannels ~* -@all +psync +sync +replconf +ping +auth +cluster|syncslots \
                 +select +multi +exec +@write -flushall -flushdb -swapdb -function \
                 -cluster|flushslot -migrate -restore-asking"
            ),
            "{rep}"
        );
    }

    #[test]
    fn hashes_are_rendered_lowercase() {
        let upper = H1.replace('1', "A");
        let line = render_user(
            &binding("app", &[&upper], vec![perm("readonly", &[], &[])]),
            &roles(),
        );
        assert!(line.contains(&format!("#{}", upper.to_ascii_lowercase())));
    }

    #[test]
    fn the_first_line_is_a_disabled_revision_marker_named_after_the_rest_of_the_file() {
        let file = render_acl_file(&[], &roles(), &creds());
        let (first, body) = file.split_once('\n').unwrap();
        let revision = file_revision(&file).unwrap();
        assert_eq!(first, format!("user _rev-{revision} off"));
        assert_eq!(revision, &sha256_hex(body)[..REVISION_LEN]);
        assert!(revision.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn the_revision_changes_with_the_content_and_only_with_it() {
        let a = render_acl_file(
            &[binding("app", &[H1], vec![perm("readonly", &[], &[])])],
            &roles(),
            &creds(),
        );
        let again = render_acl_file(
            &[binding("app", &[H1], vec![perm("readonly", &[], &[])])],
            &roles(),
            &creds(),
        );
        let rotated = render_acl_file(
            &[binding("app", &[H1, H2], vec![perm("readonly", &[], &[])])],
            &roles(),
            &creds(),
        );
        assert_eq!(file_revision(&a), file_revision(&again));
        assert_ne!(file_revision(&a), file_revision(&rotated));
    }

    #[test]
    fn the_loaded_revision_is_read_from_the_usernames_a_member_reports() {
        assert_eq!(
            loaded_revision(["default", "_rev-0123456789ab", "app"]),
            Some("0123456789ab")
        );
        assert_eq!(loaded_revision(["default", "app"]), None);
    }

    #[test]
    fn the_file_renders_again_from_the_hashes_it_holds_of_the_operator_passwords() {
        let bindings = vec![binding(
            "app",
            &["AB"],
            vec![perm("readwrite", &[("app:*", KeyAccess::Readwrite)], &[])],
        )];
        let file = render_acl_file(&bindings, &roles(), &creds());
        let hashes = operator_user_hashes(&file).expect("both operator users");
        assert_eq!(hashes, creds().hashes());
        assert_eq!(render_acl_file_hashed(&bindings, &roles(), &hashes), file);
    }

    #[test]
    fn every_line_is_a_user_line() {
        let file = render_acl_file(
            &[binding(
                "app",
                &[H1],
                vec![perm("readonly", &[("app:*", KeyAccess::Read)], &[])],
            )],
            &roles(),
            &creds(),
        );
        assert!(file.ends_with('\n'));
        for line in file.lines() {
            assert!(line.starts_with("user "), "{line}");
        }
        assert_eq!(
            file.lines().count(),
            8,
            "marker, five operator users, default, app:\n{file}"
        );
    }

    #[test]
    fn bindings_keep_their_order_one_line_each() {
        let file = render_acl_file(
            &[
                binding("zeta", &[H1], vec![perm("readonly", &[], &[])]),
                binding("alpha", &[H2], vec![perm("readonly", &[], &[])]),
            ],
            &roles(),
            &creds(),
        );
        let users: Vec<&str> = file.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
        assert_eq!(
            &users[1..],
            [
                "_valkey-operator",
                "_valkey-replication",
                "_valkey-backup",
                "_valkey-restore",
                "_valkey-metrics",
                "default",
                "zeta",
                "alpha"
            ]
        );
    }

    #[test]
    fn the_restore_user_is_in_the_file_only_while_a_restore_is_outstanding() {
        let render = |restoring| {
            render_acl_file_hashed(&[], &roles(), &creds().hashes_of_users(restoring, false))
        };
        let (restoring, done) = (render(true), render(false));
        assert!(
            restoring.contains("user _valkey-restore on #"),
            "{restoring}"
        );
        assert!(!done.contains("_valkey-restore"), "{done}");
        assert_ne!(file_revision(&restoring), file_revision(&done));
        // Read back from the file (as the plugin does), the hashes render the same file.
        for file in [&restoring, &done] {
            let hashes = operator_user_hashes(file).unwrap();
            assert_eq!(&render_acl_file_hashed(&[], &roles(), &hashes), file);
        }
        assert_eq!(creds().hashes_of_users(true, true), creds().hashes());
    }

    #[test]
    fn the_metrics_user_is_in_the_file_only_with_metrics_and_reads_no_key() {
        let render = |metrics| {
            render_acl_file_hashed(&[], &roles(), &creds().hashes_of_users(false, metrics))
        };
        let (on, off) = (render(true), render(false));
        assert!(!off.contains("_valkey-metrics"), "{off}");
        let line = on
            .lines()
            .find(|l| l.starts_with("user _valkey-metrics on #"))
            .unwrap_or_else(|| panic!("{on}"));
        assert!(line.contains(" resetkeys resetchannels -@all "), "{line}");
        assert!(!line.contains('~') && !line.contains("config"), "{line}");
        assert!(
            line.ends_with(
                "+info +cluster|info +slowlog|get +slowlog|len +latency|latest +client|setname"
            ),
            "{line}"
        );
        let hashes = operator_user_hashes(&on).unwrap();
        assert_eq!(render_acl_file_hashed(&[], &roles(), &hashes), on);
        assert_ne!(file_revision(&on), file_revision(&off));
    }

    #[test]
    fn each_binding_starts_from_reset() {
        let line = render_user(
            &binding("app", &[H1], vec![perm("readonly", &[], &[])]),
            &roles(),
        );
        assert!(line.starts_with("user app reset on "), "{line}");
        assert!(
            !line.contains("nopass") && !line.contains("+@all"),
            "{line}"
        );
    }

    #[test]
    fn a_role_without_keys_or_channels_grants_its_commands_on_no_key() {
        let line = render_user(
            &binding("app", &[H1], vec![perm("readonly", &[], &[])]),
            &roles(),
        );
        assert!(line.ends_with(" (+@read -keys -config)"), "{line}");
        assert!(!line.contains('~') && !line.contains('&'), "{line}");
    }

    #[test]
    fn no_role_grants_config_to_a_bound_user() {
        // CONFIG GET returns masterauth: even `+@all` followed by `+config|get` (which the role
        // webhook refuses, but it may not have been serving) ends with `-config`.
        let mut roles = roles();
        roles.insert(
            "admin".to_string(),
            ValkeyRoleSpec {
                categories: vec![CategoryRule {
                    name: "all".into(),
                    access: RuleAccess::Allow,
                }],
                commands: vec![CommandRule {
                    name: "config|get".into(),
                    subcommand: None,
                    access: RuleAccess::Allow,
                }],
            },
        );
        let b = binding(
            "ops",
            &[H1],
            vec![
                perm("admin", &[("*", KeyAccess::Readwrite)], &[]),
                perm("readonly", &[("app:*", KeyAccess::Read)], &[]),
            ],
        );
        assert!(
            render_user(&b, &roles)
                .ends_with(" (~* +@all +config|get -config) (%R~app:* +@read -keys -config)"),
            "{}",
            render_user(&b, &roles)
        );
    }

    #[test]
    fn default_off_keeps_only_what_atomic_slot_migration_needs() {
        let file = render_acl_file(&[], &roles(), &creds());
        let default = file
            .lines()
            .find(|l| l.starts_with("user default "))
            .unwrap();
        assert_eq!(
            default,
            "user default off resetpass resetkeys resetchannels -@all +cluster|syncslots"
        );
    }

    #[test]
    fn the_operator_and_the_replication_user_reach_every_key_but_replication_reads_none() {
        let file = render_acl_file(&[], &roles(), &creds());
        let op = file
            .lines()
            .find(|l| l.starts_with("user _valkey-operator "))
            .unwrap();
        assert!(op.contains(" resetchannels ~* -@all "), "{op}");
        assert!(!op.contains('&') && !op.contains("+@"), "{op}");
        let rep = file
            .lines()
            .find(|l| l.starts_with("user _valkey-replication "))
            .unwrap();
        // Atomic slot migration replays writes on the importing member as this user.
        assert!(rep.contains(" resetchannels ~* -@all "), "{rep}");
        assert!(!rep.contains('&') && !rep.contains("+config"), "{rep}");
        assert!(!rep.contains("@read") && !rep.contains("+@all"), "{rep}");
        assert!(rep.contains(&format!("#{}", sha256_hex("rep"))));
    }

    #[test]
    fn rules_with_quotes_or_a_closing_parenthesis_are_quoted_inside_selectors() {
        assert_eq!(selector_token("~app:*"), "~app:*");
        assert_eq!(selector_token(r"~a\b"), r"~a\b");
        assert_eq!(selector_token("~f(x)"), r#""~f(x)""#);
        assert_eq!(selector_token(r#"~a"b"#), r#""~a\"b""#);
        assert_eq!(selector_token(r"&it's\"), r#""&it's\\""#);
        let b = binding(
            "app",
            &[H1],
            vec![perm("readonly", &[("a)", KeyAccess::Read)], &["c'"])],
        );
        assert!(render_user(&b, &roles()).ends_with(r#" ("%R~a)" "&c'" +@read -keys -config)"#));
    }

    #[test]
    fn all_keys_or_all_channels_is_rendered_alone() {
        let b = binding(
            "app",
            &[H1],
            vec![perm(
                "readonly",
                &[
                    ("app:*", KeyAccess::Read),
                    ("*", KeyAccess::Readwrite),
                    ("*", KeyAccess::Readwrite),
                ],
                &["a:*", "*", "b:*"],
            )],
        );
        assert!(render_user(&b, &roles()).ends_with(" (~* &* +@read -keys -config)"));
        // `*` read-only does not cover writes: kept with the other patterns.
        let b = binding(
            "app",
            &[H1],
            vec![perm(
                "readonly",
                &[("*", KeyAccess::Read), ("w:*", KeyAccess::Write)],
                &[],
            )],
        );
        assert!(render_user(&b, &roles()).ends_with(" (%R~* %W~w:* +@read -keys -config)"));
    }
}
