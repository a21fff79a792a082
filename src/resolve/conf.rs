//! Rendering valkey.conf for one member: the config chain's settings, then the settings the
//! operator forces whatever a config says (cluster mode, ports, file paths, ACL file,
//! replication identity and authentication, TLS). A forced key that slipped into the settings
//! is dropped, so the forced value always wins.

use std::collections::BTreeMap;
use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::api::constants::{CLIENT_PORT, CLUSTER_BUS_PORT, is_forced_setting};

/// Where things live inside a Valkey pod. One place, shared by the renderer and the pod builder.
pub mod paths {
    /// ConfigMap volume with valkey.conf.
    pub const CONFIG_DIR: &str = "/etc/valkey";
    pub const CONFIG_FILE: &str = "/etc/valkey/valkey.conf";
    /// Secret volume with the ACL file and the replication credentials.
    pub const ACL_DIR: &str = "/etc/valkey-acl";
    pub const ACL_FILE: &str = "/etc/valkey-acl/users.acl";
    pub const REPLICATION_AUTH_FILE: &str = "/etc/valkey-acl/replication.conf";
    /// Secret volume with the TLS certificate when the cluster uses TLS.
    pub const TLS_DIR: &str = "/etc/valkey-tls";
    /// Data directory (emptyDir): nodes.conf and any persistence files.
    pub const DATA_DIR: &str = "/data";
    pub const NODES_CONF: &str = "/data/nodes.conf";
}

/// ACL Secret keys (mounted at [`paths::ACL_DIR`]).
pub const ACL_FILE_KEY: &str = "users.acl";
pub const REPLICATION_AUTH_KEY: &str = "replication.conf";

/// TLS Secret keys (mounted at [`paths::TLS_DIR`]), as in a `kubernetes.io/tls` Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
pub const TLS_CA_KEY: &str = "ca.crt";

/// The TLS files members read, as `(setting, path)`: the same paths a `CONFIG SET` names to
/// make a member read them again (the operator does so when a member serves another
/// certificate than its Secret holds).
pub fn tls_file_settings() -> [(&'static str, String); 3] {
    [
        (
            "tls-cert-file",
            format!("{}/{TLS_CERT_KEY}", paths::TLS_DIR),
        ),
        ("tls-key-file", format!("{}/{TLS_KEY_KEY}", paths::TLS_DIR)),
        (
            "tls-ca-cert-file",
            format!("{}/{TLS_CA_KEY}", paths::TLS_DIR),
        ),
    ]
}

/// Seconds between Valkey's own checks of its TLS files (`tls-auto-reload-interval`, Valkey
/// 9.1 and later): a renewed certificate is served at most this long after the Secret volume
/// has been refreshed, whether or not the operator is running.
pub const TLS_AUTO_RELOAD_SECONDS: u32 = 10;

/// First Valkey version with `tls-auto-reload-interval`.
pub const TLS_AUTO_RELOAD_SINCE: (u32, u32) = (9, 1);

/// Whether Valkey `version` (`9.1.2`) has `tls-auto-reload-interval`; an unreadable version
/// does not get it (an unknown key would stop the server from starting).
pub fn supports_tls_auto_reload(version: &str) -> bool {
    crate::driver::Version::parse(version)
        .is_some_and(|v| (v.major, v.minor) >= TLS_AUTO_RELOAD_SINCE)
}

/// What the renderer needs to know about one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberConf<'a> {
    /// Merged settings of the config chain.
    pub settings: &'a BTreeMap<String, String>,
    /// TLS-only: clients, replication and the bus.
    pub tls: bool,
    /// Valkey version of the member's image (version-gated settings).
    pub version: &'a str,
    /// The container's memory limit (a Kubernetes quantity), when it has one.
    pub memory_limit: Option<&'a str>,
}

/// valkey.conf text. The member's IP is not known before its pod runs, so the pod passes
/// `--cluster-announce-ip` on the command line (see the pod builder); everything else is here.
/// Settings the operator chooses when the config chain does not set them.
///
/// `cluster-node-timeout` 5000 ms (Valkey's default is 15000): the time before Valkey itself
/// promotes a replica of a primary it cannot reach. The operator promotes at once when the API
/// server says a member is gone (process exited, pod lost); Valkey's own detection is for what
/// the API server cannot see (a partitioned or frozen primary), where 15 s of refused writes is
/// long. 5 s stays well above the gossip and scheduling hiccups of a busy node.
///
/// `shutdown-on-sigterm failover` (Valkey 9.0+): a primary told to stop (`kubectl delete
/// pod`, an eviction, a node drain) first lets its replicas catch up with writes paused, then
/// hands its slots to one of them before it exits, so no write waits for a failure
/// detection. The operator's own failover (rollouts) leaves the member a replica before its
/// pod is deleted, so the two never race: a replica's SIGTERM hands nothing over.
///
/// `repl-diskless-sync-delay 0` (Valkey's default is 5 s): a new replica's full sync starts at
/// once. The delay lets several replicas that attach within it share one transfer, but the
/// operator attaches a shard's replicas as it creates them, and every second a new replica
/// waits is a second the shard has one copy fewer: a cluster's formation waited those 5 s for
/// nothing (`vk-bench --only formation`). A config that sets it keeps its value.
///
/// `maxmemory` ([`derived_maxmemory`]): without one Valkey grows until the kernel kills it at
/// the container's memory limit, losing what the replica had not received yet; with one it
/// refuses writes (or evicts, per `maxmemory-policy`) and keeps serving.
pub fn operator_defaults(version: &str, memory_limit: Option<&str>) -> Vec<(&'static str, String)> {
    let mut defaults = vec![
        ("cluster-node-timeout", "5000".to_string()),
        ("repl-diskless-sync-delay", "0".to_string()),
    ];
    if supports_shutdown_failover(version) {
        defaults.push(("shutdown-on-sigterm", "failover".to_string()));
    }
    if let Some(maxmemory) = memory_limit.and_then(derived_maxmemory) {
        defaults.push(("maxmemory", maxmemory));
    }
    defaults
}

/// Share of the container's memory limit given to `maxmemory` when no config sets it, in
/// quarters: the last quarter is for what `maxmemory` does not count (replication and client
/// output buffers, the copy-on-write pages of a fork for a full sync or a save, allocator
/// overhead).
pub const DERIVED_MAXMEMORY_QUARTERS: u128 = 3;

/// `maxmemory` for a container memory limit (a Kubernetes quantity): three quarters of it, in
/// whole MiB (`256Mi` -> `192mb`); `None` when the quantity does not parse or leaves less
/// than 1 MiB.
pub fn derived_maxmemory(memory_limit: &str) -> Option<String> {
    const MIB: u128 = 1024 * 1024;
    let bytes = super::memory::parse_quantity_bytes(memory_limit).ok()?;
    let mib = bytes * DERIVED_MAXMEMORY_QUARTERS / 4 / MIB;
    (mib > 0).then(|| format!("{mib}mb"))
}

/// First Valkey version whose `shutdown-on-sigterm failover` we have run (9.0.0 and 9.1.2).
pub const SHUTDOWN_FAILOVER_SINCE: (u32, u32) = (9, 0);

/// Whether Valkey `version` takes `shutdown-on-sigterm failover`; an unreadable version does
/// not get it (an unknown value would stop the server from starting).
pub fn supports_shutdown_failover(version: &str) -> bool {
    crate::driver::Version::parse(version)
        .is_some_and(|v| (v.major, v.minor) >= SHUTDOWN_FAILOVER_SINCE)
}

pub fn render_valkey_conf(member: &MemberConf<'_>) -> String {
    let mut out = String::from(
        "# Rendered by valkey-operator. Do not edit: changes come from the ValkeyConfig chain.\n",
    );
    out.push_str("# Settings from the ValkeyConfig chain:\n");
    for (key, value) in member.settings {
        if is_forced_setting(key) {
            continue;
        }
        // The schema refuses line breaks; never let one through to start a new directive.
        let value = value.replace(['\n', '\r'], " ");
        let value = if value.trim().is_empty() {
            "\"\"".to_string()
        } else {
            value
        };
        let _ = writeln!(out, "{key} {value}");
    }
    out.push_str("# Operator defaults (a ValkeyConfig setting the key wins):\n");
    for (key, value) in operator_defaults(member.version, member.memory_limit) {
        if !member.settings.contains_key(key) {
            let _ = writeln!(out, "{key} {value}");
        }
    }
    out.push_str("# Forced by the operator:\n");
    for (key, value) in forced_settings(member) {
        let _ = writeln!(out, "{key} {value}");
    }
    let _ = writeln!(out, "include {}", paths::REPLICATION_AUTH_FILE);
    out
}

/// The forced settings, in file order.
pub fn forced_settings(member: &MemberConf<'_>) -> Vec<(&'static str, String)> {
    let mut forced = vec![
        ("cluster-enabled", "yes".to_string()),
        ("cluster-port", CLUSTER_BUS_PORT.to_string()),
        ("bind", "* -::*".to_string()),
        ("daemonize", "no".to_string()),
        ("dir", paths::DATA_DIR.to_string()),
        ("cluster-config-file", paths::NODES_CONF.to_string()),
        ("aclfile", paths::ACL_FILE.to_string()),
    ];
    if member.tls {
        // TLS-only. Members announce a hostname under the certificate's wildcard (passed on
        // the command line, see the pod builder) and clients are sent there (MOVED, CLUSTER
        // SLOTS/SHARDS), so a verifying client can check the certificate. Clients present no
        // certificate: authentication is by ACL user and password.
        forced.extend([
            ("cluster-preferred-endpoint-type", "hostname".to_string()),
            ("port", "0".to_string()),
            ("tls-port", CLIENT_PORT.to_string()),
            ("tls-cluster", "yes".to_string()),
            ("tls-replication", "yes".to_string()),
        ]);
        forced.extend(tls_file_settings());
        forced.push(("tls-auth-clients", "no".to_string()));
        if supports_tls_auto_reload(member.version) {
            forced.push((
                "tls-auto-reload-interval",
                TLS_AUTO_RELOAD_SECONDS.to_string(),
            ));
        }
    } else {
        // Members are announced by IP (passed on the command line). The hostname is not
        // announced: cluster clients prefer announced hostnames, which needs cluster DNS that
        // not every cluster has.
        forced.extend([
            ("cluster-preferred-endpoint-type", "ip".to_string()),
            ("port", CLIENT_PORT.to_string()),
        ]);
    }
    forced
}

/// The replication credentials file included by valkey.conf (lives in the ACL Secret).
pub fn render_replication_auth(username: &str, password: &str) -> String {
    format!("masteruser {username}\nmasterauth {password}\n")
}

/// Hex SHA-256, the content hash used to name and compare rendered artefacts.
pub fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(data.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn conf(s: &BTreeMap<String, String>, tls: bool) -> String {
        render_valkey_conf(&MemberConf {
            settings: s,
            tls,
            version: "9.0.0",
            memory_limit: None,
        })
    }

    fn directive<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
        text.lines()
            .filter_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(' ')))
            .collect()
    }

    #[test]
    fn chain_settings_are_rendered() {
        let text = conf(
            &settings(&[("maxmemory", "1500mb"), ("maxmemory-policy", "allkeys-lru")]),
            false,
        );
        assert_eq!(directive(&text, "maxmemory"), vec!["1500mb"]);
        assert_eq!(directive(&text, "maxmemory-policy"), vec!["allkeys-lru"]);
    }

    #[test]
    fn the_node_timeout_defaults_to_5_seconds_unless_the_config_sets_it() {
        let text = conf(&BTreeMap::new(), false);
        assert_eq!(directive(&text, "cluster-node-timeout"), vec!["5000"]);
        let text = conf(&settings(&[("cluster-node-timeout", "15000")]), false);
        assert_eq!(directive(&text, "cluster-node-timeout"), vec!["15000"]);
    }

    #[test]
    fn a_new_replica_syncs_at_once_unless_the_config_sets_a_delay() {
        let text = conf(&BTreeMap::new(), false);
        assert_eq!(directive(&text, "repl-diskless-sync-delay"), vec!["0"]);
        let text = conf(&settings(&[("repl-diskless-sync-delay", "5")]), false);
        assert_eq!(directive(&text, "repl-diskless-sync-delay"), vec!["5"]);
    }

    #[test]
    fn a_primary_stopped_by_sigterm_hands_over_on_valkey_9_unless_the_config_says_otherwise() {
        let text = conf(&BTreeMap::new(), false);
        assert_eq!(directive(&text, "shutdown-on-sigterm"), vec!["failover"]);
        let text = conf(&settings(&[("shutdown-on-sigterm", "nosave")]), false);
        assert_eq!(directive(&text, "shutdown-on-sigterm"), vec!["nosave"]);
        for older in ["8.1.1", "8.0.2", "not-a-version"] {
            let s = BTreeMap::new();
            let text = render_valkey_conf(&MemberConf {
                settings: &s,
                tls: false,
                version: older,
                memory_limit: None,
            });
            assert!(
                directive(&text, "shutdown-on-sigterm").is_empty(),
                "{older}"
            );
        }
    }

    #[test]
    fn maxmemory_is_three_quarters_of_the_memory_limit_unless_the_config_sets_it() {
        let render = |settings: &BTreeMap<String, String>, limit: Option<&str>| {
            render_valkey_conf(&MemberConf {
                settings,
                tls: false,
                version: "9.0.0",
                memory_limit: limit,
            })
        };
        let none = BTreeMap::new();
        assert_eq!(
            directive(&render(&none, Some("256Mi")), "maxmemory"),
            vec!["192mb"]
        );
        assert_eq!(
            directive(&render(&none, Some("1Gi")), "maxmemory"),
            vec!["768mb"]
        );
        assert_eq!(
            directive(&render(&none, Some("2G")), "maxmemory"),
            vec!["1430mb"]
        );
        let set = settings(&[("maxmemory", "100mb")]);
        assert_eq!(
            directive(&render(&set, Some("256Mi")), "maxmemory"),
            vec!["100mb"]
        );
        assert!(directive(&render(&none, None), "maxmemory").is_empty());
        assert!(directive(&render(&none, Some("1Mi")), "maxmemory").is_empty());
        assert!(directive(&render(&none, Some("lots")), "maxmemory").is_empty());
    }

    proptest::proptest! {
        /// The derived maxmemory never exceeds three quarters of the limit and is within 1 MiB
        /// of it.
        #[test]
        fn derived_maxmemory_leaves_a_quarter(mib in 2u128..1_000_000) {
            let value = derived_maxmemory(&format!("{mib}Mi")).unwrap();
            let derived: u128 = value.strip_suffix("mb").unwrap().parse().unwrap();
            proptest::prop_assert!(derived * 4 <= mib * 3);
            proptest::prop_assert!((derived + 1) * 4 > mib * 3);
        }
    }

    #[test]
    fn forced_settings_are_always_present() {
        let text = conf(&BTreeMap::new(), false);
        assert_eq!(directive(&text, "cluster-enabled"), vec!["yes"]);
        assert_eq!(directive(&text, "port"), vec!["6379"]);
        assert_eq!(directive(&text, "cluster-port"), vec!["16379"]);
        assert_eq!(directive(&text, "dir"), vec!["/data"]);
        assert_eq!(
            directive(&text, "cluster-config-file"),
            vec!["/data/nodes.conf"]
        );
        assert_eq!(
            directive(&text, "aclfile"),
            vec!["/etc/valkey-acl/users.acl"]
        );
        assert_eq!(
            directive(&text, "include"),
            vec!["/etc/valkey-acl/replication.conf"]
        );
        assert_eq!(
            directive(&text, "cluster-preferred-endpoint-type"),
            vec!["ip"]
        );
    }

    #[test]
    fn a_forced_key_that_slipped_in_loses_to_the_forced_value() {
        let text = conf(
            &settings(&[
                ("port", "7000"),
                ("cluster-enabled", "no"),
                ("tls-port", "1"),
            ]),
            false,
        );
        assert_eq!(directive(&text, "port"), vec!["6379"]);
        assert_eq!(directive(&text, "cluster-enabled"), vec!["yes"]);
        assert!(directive(&text, "tls-port").is_empty());
    }

    #[test]
    fn tls_closes_the_plain_port_and_encrypts_bus_and_replication() {
        let text = conf(&BTreeMap::new(), true);
        assert_eq!(directive(&text, "port"), vec!["0"]);
        assert_eq!(directive(&text, "tls-port"), vec!["6379"]);
        assert_eq!(directive(&text, "cluster-port"), vec!["16379"]);
        assert_eq!(directive(&text, "tls-cluster"), vec!["yes"]);
        assert_eq!(directive(&text, "tls-replication"), vec!["yes"]);
        assert_eq!(
            directive(&text, "tls-cert-file"),
            vec!["/etc/valkey-tls/tls.crt"]
        );
        assert_eq!(
            directive(&text, "tls-key-file"),
            vec!["/etc/valkey-tls/tls.key"]
        );
        assert_eq!(
            directive(&text, "tls-ca-cert-file"),
            vec!["/etc/valkey-tls/ca.crt"]
        );
    }

    #[test]
    fn tls_clients_present_no_certificate_and_are_sent_to_member_hostnames() {
        let text = conf(&BTreeMap::new(), true);
        assert_eq!(directive(&text, "tls-auth-clients"), vec!["no"]);
        assert_eq!(
            directive(&text, "cluster-preferred-endpoint-type"),
            vec!["hostname"]
        );
        let plain = conf(&BTreeMap::new(), false);
        assert_eq!(
            directive(&plain, "cluster-preferred-endpoint-type"),
            vec!["ip"]
        );
        assert!(directive(&plain, "tls-auth-clients").is_empty());
    }

    #[test]
    fn tls_members_reload_their_files_by_themselves_from_valkey_9_1() {
        let render = |version| {
            render_valkey_conf(&MemberConf {
                settings: &BTreeMap::new(),
                tls: true,
                version,
                memory_limit: None,
            })
        };
        assert_eq!(
            directive(&render("9.1.2"), "tls-auto-reload-interval"),
            vec!["10"]
        );
        assert_eq!(
            directive(&render("10.0.0"), "tls-auto-reload-interval"),
            vec!["10"]
        );
        for older in ["9.0.0", "8.1.1", "unknown"] {
            assert!(
                directive(&render(older), "tls-auto-reload-interval").is_empty(),
                "{older}"
            );
        }
        let plain = render_valkey_conf(&MemberConf {
            settings: &BTreeMap::new(),
            tls: false,
            version: "9.1.2",
            memory_limit: None,
        });
        assert!(directive(&plain, "tls-auto-reload-interval").is_empty());
    }

    #[test]
    fn values_cannot_inject_directives() {
        let text = conf(
            &settings(&[("maxmemory-policy", "noeviction\nport 1")]),
            false,
        );
        assert_eq!(directive(&text, "port"), vec!["6379"]);
        assert_eq!(
            directive(&text, "maxmemory-policy"),
            vec!["noeviction port 1"]
        );
    }

    #[test]
    fn empty_values_are_quoted() {
        let text = conf(&settings(&[("save", "")]), false);
        assert_eq!(directive(&text, "save"), vec!["\"\""]);
    }

    #[test]
    fn replication_auth_names_user_and_password() {
        assert_eq!(
            render_replication_auth("_r", "pw"),
            "masteruser _r\nmasterauth pw\n"
        );
    }
}
