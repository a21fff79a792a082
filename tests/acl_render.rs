//! The rendered ACL file against a real `valkey-server` (9.0 build): every file rendered for
//! generated bindings and roles is accepted by `ACL LOAD`, loads the operator's users with the
//! rights the operator needs (`ACL LOAD`, `ACL USERS`), every bound user and the revision
//! marker; no bound user may run CONFIG, whatever its roles grant. One server, reused for
//! every case; 20 cases.
//!
//! Binary: `VALKEY_SERVER_9_0`, else the cache filled by `e2e/tools/install.sh`.

use std::collections::{BTreeMap, BTreeSet};

use fred::types::Value;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use sha2::{Digest, Sha256};
use valkey_operator::api::constants::{OPERATOR_ACL_USERNAME, REPLICATION_ACL_USERNAME};
use valkey_operator::api::{
    AclBinding, AclPermission, CategoryRule, ChannelPermission, CommandRule, KeyAccess,
    KeyPermission, RuleAccess, ValkeyRoleSpec,
};
use valkey_operator::driver::testing::{LocalServers, ValkeyBuild};
use valkey_operator::driver::{ClusterDriver, Credentials, DriverConfig, FredDriver, MemberAddr};
use valkey_operator::resolve::acl::{
    OperatorCredentials, file_revision, loaded_revision, render_acl_file,
};

/// Commands and categories Valkey knows (a role naming an unknown one is refused by Valkey:
/// that is the validation's business, not the renderer's).
const COMMANDS: &[&str] = &[
    "get",
    "set",
    "del",
    "keys",
    "scan",
    "hget",
    "hset",
    "mget",
    "incr",
    "expire",
    "publish",
    "subscribe",
    "ping",
    "info",
    "flushall",
    "config|get",
    "client|setname",
    "cluster|slots",
    "cluster|info",
    "cluster|shards",
    "slowlog|get",
    "latency|latest",
];
const CATEGORIES: &[&str] = &[
    "read",
    "write",
    "keyspace",
    "string",
    "hash",
    "pubsub",
    "dangerous",
    "admin",
    "fast",
    "slow",
    "connection",
    "all",
];

fn access() -> impl Strategy<Value = RuleAccess> {
    prop_oneof![Just(RuleAccess::Allow), Just(RuleAccess::Deny)]
}

fn role() -> impl Strategy<Value = ValkeyRoleSpec> {
    (
        proptest::sample::subsequence(CATEGORIES, 1..4),
        proptest::sample::subsequence(COMMANDS, 0..5),
        proptest::collection::vec(access(), 10),
    )
        .prop_map(|(cats, cmds, acc)| ValkeyRoleSpec {
            categories: cats
                .iter()
                .zip(&acc)
                .map(|(c, a)| CategoryRule {
                    name: c.to_string(),
                    access: *a,
                })
                .collect(),
            commands: cmds
                .iter()
                .zip(acc.iter().rev())
                .map(|(c, a)| CommandRule {
                    name: c.to_string(),
                    subcommand: None,
                    access: *a,
                })
                .collect(),
        })
}

/// Patterns as the API admits them: printable ASCII without spaces (parentheses, quotes,
/// backslashes included).
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{1,12}",
        Just("*".to_string()),
        Just("app:*".to_string()),
        "[a-z]{1,4}[()\\\\\"']{1,2}",
    ]
}

fn key_access() -> impl Strategy<Value = KeyAccess> {
    prop_oneof![
        Just(KeyAccess::Read),
        Just(KeyAccess::Write),
        Just(KeyAccess::Readwrite)
    ]
}

fn permission(role_count: usize) -> impl Strategy<Value = AclPermission> {
    (
        0..role_count,
        proptest::collection::vec((pattern(), key_access()), 0..4),
        proptest::collection::vec(pattern(), 0..3),
    )
        .prop_map(|(role, keys, channels)| AclPermission {
            role_ref: format!("role-{role}"),
            keys: keys
                .into_iter()
                .map(|(pattern, access)| KeyPermission { pattern, access })
                .collect(),
            channels: channels
                .into_iter()
                .map(|pattern| ChannelPermission { pattern })
                .collect(),
        })
}

fn binding(role_count: usize) -> impl Strategy<Value = AclBinding> {
    (
        "[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}",
        proptest::collection::vec("[0-9a-f]{64}", 1..4),
        proptest::collection::vec(permission(role_count), 1..4),
    )
        .prop_map(|(username, password_hashes, permissions)| AclBinding {
            username,
            password_hashes,
            permissions,
        })
}

/// Roles, and bindings with unique usernames (as the resolver guarantees), sometimes `default`.
fn inputs() -> impl Strategy<Value = (BTreeMap<String, ValkeyRoleSpec>, Vec<AclBinding>)> {
    (1usize..4)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(role(), n),
                proptest::collection::vec(binding(n), 0..5),
                any::<bool>(),
            )
        })
        .prop_map(|(roles, bindings, with_default)| {
            let roles = roles
                .into_iter()
                .enumerate()
                .map(|(i, r)| (format!("role-{i}"), r))
                .collect();
            let mut seen = BTreeSet::new();
            let mut bindings: Vec<AclBinding> = bindings
                .into_iter()
                .filter(|b| b.username != "default" && seen.insert(b.username.to_ascii_lowercase()))
                .collect();
            if with_default && let Some(first) = bindings.first_mut() {
                first.username = "default".into();
            }
            (roles, bindings)
        })
}

#[test]
fn every_rendered_acl_file_is_accepted_by_valkey() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let servers = rt
        .block_on(LocalServers::start(ValkeyBuild::V9_0, 1))
        .unwrap_or_else(|e| panic!("cannot start valkey-server: {e}"));
    let server = &servers.servers[0];
    let member = server.addr.clone();
    let acl_path = server.dir.join("users.acl");
    // The test server's admin password becomes the operator user's: after the first load, the
    // operator's own user must be able to reload and inspect.
    let credentials = OperatorCredentials {
        operator_password: servers.credentials.password.clone(),
        replication_password: "replication-secret".into(),
        backup_password: "backup-secret".into(),
        restore_password: "restore-secret".into(),
        metrics_password: "metrics-secret".into(),
    };
    let bootstrap = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let operator = FredDriver::new(DriverConfig::new(Credentials {
        username: OPERATOR_ACL_USERNAME.into(),
        password: servers.credentials.password.clone(),
    }));
    // Hand over from the harness's admin user to the operator's own user. The harness user
    // stays in this first file: Valkey 9.0.0 crashes (SIGSEGV) when `ACL LOAD` deletes the
    // user of the connection that runs it. The operator's files always keep its own user.
    // It stays in every file below, to inspect what Valkey loaded (`ACL GETUSER`, `ACL DRYRUN`),
    // which the operator's own user may not.
    let admin_line = format!(
        "user {} on #{} ~* &* +@all\n",
        servers.credentials.username,
        hex::encode(Sha256::digest(servers.credentials.password.as_bytes())),
    );
    let handover = format!(
        "{}{admin_line}",
        render_acl_file(&[], &BTreeMap::new(), &credentials)
    );
    std::fs::write(&acl_path, handover).unwrap();
    rt.block_on(bootstrap.acl_load(&member))
        .unwrap_or_else(|e| panic!("first ACL LOAD: {e}"));

    let mut runner = TestRunner::new(ProptestConfig {
        cases: 20,
        ..ProptestConfig::default()
    });
    let outcome = runner.run(&inputs(), |(roles, bindings)| {
        let file = render_acl_file(&bindings, &roles, &credentials);
        std::fs::write(&acl_path, format!("{file}{admin_line}")).unwrap();
        rt.block_on(async {
            operator
                .acl_load(&member)
                .await
                .map_err(|e| TestCaseError::fail(format!("ACL LOAD refused:\n{file}\n{e}")))?;
            let users = operator
                .acl_users(&member)
                .await
                .map_err(|e| TestCaseError::fail(format!("ACL USERS as the operator: {e}")))?;
            let names: BTreeSet<&str> = users.iter().map(String::as_str).collect();
            prop_assert_eq!(loaded_revision(names.iter().copied()), file_revision(&file));
            for want in [OPERATOR_ACL_USERNAME, REPLICATION_ACL_USERNAME, "default"] {
                prop_assert!(names.contains(want), "{} missing from {:?}", want, names);
            }
            for b in &bindings {
                prop_assert!(
                    names.contains(b.username.as_str()),
                    "{} missing",
                    b.username
                );
                check_selectors(&bootstrap, &member, b, &file).await?;
                check_no_config(&bootstrap, &member, &b.username, &file).await?;
            }
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}\nserver log:\n{}", server.log_tail(20));
    }
}

/// No bound user may run CONFIG (`CONFIG GET masterauth` returns the replication password),
/// whatever its roles grant (`@all`, `@admin`, `@dangerous`, `@slow`, `config|get`).
async fn check_no_config(
    admin: &FredDriver,
    member: &MemberAddr,
    username: &str,
    file: &str,
) -> Result<(), TestCaseError> {
    for words in [
        &["CONFIG", "GET", "masterauth"][..],
        &["CONFIG", "SET", "maxmemory", "1"],
    ] {
        let mut args = vec!["ACL", "DRYRUN", username];
        args.extend_from_slice(words);
        let args: Vec<Value> = args.into_iter().map(|a| Value::String(a.into())).collect();
        let verdict = admin
            .command(member, "ACL DRYRUN", args)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .as_text()
            .unwrap_or_default();
        prop_assert!(
            verdict.contains("no permissions"),
            "{} may run {:?}: {}\n{}",
            username,
            words,
            verdict,
            file
        );
    }
    Ok(())
}

/// What Valkey loaded for a binding: one selector per permission, each holding exactly the
/// key and channel rules it was bound with (a mis-quoted selector loads silently empty).
async fn check_selectors(
    driver: &FredDriver,
    member: &MemberAddr,
    binding: &AclBinding,
    file: &str,
) -> Result<(), TestCaseError> {
    let args = ["ACL", "GETUSER", binding.username.as_str()].map(|a| Value::String(a.into()));
    let reply = driver
        .command(member, "ACL GETUSER", args.to_vec())
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let pairs = reply.as_pairs().unwrap_or_default();
    let selectors = pairs
        .iter()
        .find(|(k, _)| k == "selectors")
        .and_then(|(_, v)| v.as_array())
        .unwrap_or_default();
    prop_assert_eq!(
        selectors.len(),
        binding.permissions.len(),
        "selectors of {}:\n{}",
        binding.username,
        file
    );
    for (permission, selector) in binding.permissions.iter().zip(selectors) {
        let fields = selector.as_pairs().unwrap_or_default();
        let field = |name: &str| -> BTreeSet<String> {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.as_text())
                .unwrap_or_default()
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        };
        let all_keys = permission
            .keys
            .iter()
            .any(|k| k.pattern == "*" && k.access == KeyAccess::Readwrite);
        let want_keys: BTreeSet<String> = if all_keys {
            ["~*".to_string()].into()
        } else {
            // Valkey merges rules on the same pattern: read + write is readwrite.
            let mut flags: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
            for k in &permission.keys {
                let f = flags.entry(k.pattern.as_str()).or_default();
                f.0 |= matches!(k.access, KeyAccess::Read | KeyAccess::Readwrite);
                f.1 |= matches!(k.access, KeyAccess::Write | KeyAccess::Readwrite);
            }
            flags
                .into_iter()
                .map(|(pattern, rw)| match rw {
                    (true, true) => format!("~{pattern}"),
                    (true, false) => format!("%R~{pattern}"),
                    _ => format!("%W~{pattern}"),
                })
                .collect()
        };
        let want_channels: BTreeSet<String> =
            if permission.channels.iter().any(|c| c.pattern == "*") {
                ["&*".to_string()].into()
            } else {
                permission
                    .channels
                    .iter()
                    .map(|c| format!("&{}", c.pattern))
                    .collect()
            };
        prop_assert_eq!(
            field("keys"),
            want_keys,
            "keys of {}:\n{}",
            binding.username,
            file
        );
        prop_assert_eq!(
            field("channels"),
            want_channels,
            "channels of {}:\n{}",
            binding.username,
            file
        );
    }
    Ok(())
}
