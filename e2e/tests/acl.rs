//! ACLs on the local cluster (issue: ValkeyRole templates bound to users, applied live,
//! rotated safely). Real API server, real kubelet pods, real valkey-server 9.0.
//!
//! * key patterns and access modes are enforced by Valkey (read-only on `app:*`, readwrite);
//! * password rotation through several hashes, live, pod UIDs and restart counts unchanged;
//! * a config-level binding reaches every cluster of that config (and of configs inheriting
//!   from it); a child config that sets `acl` replaces its base's bindings (a user disappears);
//! * replication and a failover work with `default` disabled.
#![cfg(feature = "e2e")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fred::prelude::*;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

use valkey_e2e::harness::{TestNamespace, client, delete_cluster_scoped, random_suffix, wait_for};
use valkey_e2e::valkey::{member_pods, operator_driver};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyConfig, ValkeyRole};
use valkey_operator::driver::{ClusterDriver, FailoverMode, FredDriver, MemberAddr, Role};
use valkey_operator::resolve::acl::file_revision;

const API: &str = "valkey.gomomento.com/v1alpha1";

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Cluster-scoped menu objects this test creates, deleted when it ends (pass or fail).
struct Menu {
    client: Client,
    roles: Vec<String>,
    configs: Vec<String>,
}

impl Menu {
    async fn role(&mut self, name: &str, spec: Json) -> anyhow::Result<()> {
        let api: Api<ValkeyRole> = Api::all(self.client.clone());
        let obj = json!({"apiVersion": API, "kind": "ValkeyRole", "metadata": {"name": name}, "spec": spec});
        api.patch(
            name,
            &PatchParams::apply("e2e-acl").force(),
            &Patch::Apply(&obj),
        )
        .await?;
        self.roles.push(name.to_string());
        Ok(())
    }

    async fn config(&mut self, name: &str, spec: Json) -> anyhow::Result<()> {
        let api: Api<ValkeyConfig> = Api::all(self.client.clone());
        let obj = json!({"apiVersion": API, "kind": "ValkeyConfig", "metadata": {"name": name}, "spec": spec});
        api.patch(
            name,
            &PatchParams::apply("e2e-acl").force(),
            &Patch::Apply(&obj),
        )
        .await?;
        if !self.configs.contains(&name.to_string()) {
            self.configs.push(name.to_string());
        }
        Ok(())
    }

    async fn cleanup(&self) {
        for c in self.configs.iter().rev() {
            let _ = delete_cluster_scoped::<ValkeyConfig>(&self.client, c).await;
        }
        for r in &self.roles {
            let _ = delete_cluster_scoped::<ValkeyRole>(&self.client, r).await;
        }
    }
}

/// Commands a fred cluster client needs besides data commands.
fn cluster_client_commands() -> Json {
    json!([
        {"name": "cluster|slots", "access": "allow"},
        {"name": "cluster|info", "access": "allow"},
        {"name": "cluster|shards", "access": "allow"},
        {"name": "cluster|nodes", "access": "allow"},
    ])
}

fn binding(user: &str, passwords: &[&str], role: &str, keys: Json) -> Json {
    json!({
        "username": user,
        "passwordHashes": passwords.iter().map(|p| sha256_hex(p)).collect::<Vec<_>>(),
        "permissions": [{"roleRef": role, "keys": keys}],
    })
}

async fn apply_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    config: &str,
    replicas: i32,
    acl: Json,
) -> anyhow::Result<()> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let obj = json!({
        "apiVersion": API, "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configRef": config, "shards": 1, "replicasPerShard": replicas, "acl": acl},
    });
    api.patch(
        name,
        &PatchParams::apply("e2e-acl").force(),
        &Patch::Apply(&obj),
    )
    .await?;
    Ok(())
}

async fn wait_active(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    valkey_e2e::valkey::wait_state(
        client,
        ns,
        name,
        ClusterState::Active,
        Duration::from_secs(180),
    )
    .await
    .map(|_| ())
}

/// The ACL revision rendered into the cluster's Secret right now.
async fn secret_revision(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = secrets.get(&format!("{cluster}-acl")).await?;
    let file = String::from_utf8(secret.data.context("data")?["users.acl"].0.clone())?;
    file_revision(&file)
        .map(str::to_string)
        .context("the ACL file carries no revision marker")
}

/// Waits until the Secret holds a revision other than `old` and every member reports it
/// loaded (`AclApplied` True naming it). Returns the revision and the time it took.
async fn wait_acl_applied(
    client: &Client,
    ns: &str,
    cluster: &str,
    old: Option<&str>,
) -> anyhow::Result<(String, Duration)> {
    let start = Instant::now();
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let revision = wait_for(
        "a new ACL revision in the Secret",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async move {
            let r = secret_revision(client, ns, cluster).await?;
            Ok((Some(r.as_str()) != old).then_some(r))
        },
    )
    .await?;
    let rev = revision.clone();
    wait_for(
        &format!("AclApplied True for revision {revision}"),
        Duration::from_secs(90),
        Duration::from_millis(200),
        || {
            let api = api.clone();
            let rev = rev.clone();
            async move {
                let c = api.get(cluster).await?;
                let cond = c
                    .status
                    .unwrap_or_default()
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "AclApplied")
                    .context("no AclApplied condition yet")?;
                if cond.status == "True" && cond.message.contains(&rev) {
                    Ok(Some(()))
                } else {
                    bail!(
                        "AclApplied {} {}: {}",
                        cond.status,
                        cond.reason,
                        cond.message
                    )
                }
            }
        },
    )
    .await?;
    Ok((revision, start.elapsed()))
}

/// Pod name → (uid, container restarts).
async fn pod_identities(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> anyhow::Result<BTreeMap<String, (String, i32)>> {
    Ok(member_pods(client, ns, cluster)
        .await?
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or_default();
            (p.name_any(), (p.uid().unwrap_or_default(), restarts))
        })
        .collect())
}

async fn member_addrs(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<Vec<MemberAddr>> {
    member_pods(client, ns, cluster)
        .await?
        .iter()
        .map(|p| {
            let ip = p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .context("pod ip")?;
            Ok(MemberAddr::new(ip, 6379))
        })
        .collect()
}

/// A cluster-aware client authenticated as `user`.
async fn cluster_client(
    addrs: &[MemberAddr],
    user: &str,
    password: &str,
) -> anyhow::Result<fred::clients::Client> {
    let config = Config {
        server: ServerConfig::Clustered {
            hosts: addrs
                .iter()
                .map(|a| Server::new(a.host.clone(), a.port))
                .collect(),
            policy: Default::default(),
        },
        username: Some(user.into()),
        password: Some(password.into()),
        ..Default::default()
    };
    let client = Builder::from_config(config).build()?;
    client.init().await?;
    Ok(client)
}

/// Whether a fresh connection to `addr` authenticates as `user` with `password`.
async fn authenticates(addr: &MemberAddr, user: &str, password: &str) -> anyhow::Result<bool> {
    let config = Config {
        server: ServerConfig::new_centralized(addr.host.clone(), addr.port),
        username: Some(user.into()),
        password: Some(password.into()),
        ..Default::default()
    };
    let client = Builder::from_config(config).build()?;
    let outcome = match tokio::time::timeout(Duration::from_secs(10), client.init()).await {
        Ok(Ok(_)) => {
            let _ = client.quit().await;
            true
        }
        Ok(Err(e)) if format!("{e:?}").contains("WRONGPASS") => false,
        Ok(Err(e)) => bail!("AUTH {user} on {addr}: unexpected error {e:?}"),
        Err(_) => bail!("AUTH {user} on {addr}: no answer within 10s"),
    };
    Ok(outcome)
}

async fn users_of(driver: &FredDriver, addr: &MemberAddr) -> anyhow::Result<Vec<String>> {
    Ok(driver.acl_users(addr).await?)
}

fn is_noperm<T: std::fmt::Debug>(r: &Result<T, fred::error::Error>) -> bool {
    matches!(r, Err(e) if e.details().contains("NOPERM") || format!("{e:?}").contains("NOPERM"))
}

struct Fixture {
    client: Client,
    menu: Menu,
    base: String,
    child: String,
    ro: String,
    rw: String,
}

async fn fixture() -> anyhow::Result<Fixture> {
    let client = client().await?;
    let s = random_suffix(4);
    let mut menu = Menu {
        client: client.clone(),
        roles: vec![],
        configs: vec![],
    };
    let (ro, rw) = (format!("e2e-acl-{s}-ro"), format!("e2e-acl-{s}-rw"));
    menu.role(
        &ro,
        json!({"categories": [{"name": "read", "access": "allow"}, {"name": "connection", "access": "allow"}],
               "commands": cluster_client_commands()}),
    )
    .await?;
    menu.role(
        &rw,
        json!({"categories": [{"name": "read", "access": "allow"}, {"name": "write", "access": "allow"},
                              {"name": "connection", "access": "allow"}],
               "commands": cluster_client_commands()}),
    )
    .await?;
    // The image comes from the shipped samples (make up applies them).
    let (base, child) = (format!("e2e-acl-{s}-base"), format!("e2e-acl-{s}-child"));
    menu.config(
        &base,
        json!({"imageRef": "valkey-9-0", "resources": {"cpu": "100m", "memory": "256Mi"},
               "acl": [binding("platform-metrics", &["platform-pw"], &ro, json!([{"pattern": "*", "access": "read"}]))]}),
    )
    .await?;
    menu.config(&child, json!({"baseRef": base})).await?;
    Ok(Fixture {
        client,
        menu,
        base,
        child,
        ro,
        rw,
    })
}

#[tokio::test]
async fn bindings_are_enforced_and_passwords_rotate_live_without_restarts() -> anyhow::Result<()> {
    let f = fixture().await?;
    let result = rotation_case(&f).await;
    f.menu.cleanup().await;
    result
}

async fn rotation_case(f: &Fixture) -> anyhow::Result<()> {
    let client = &f.client;
    let ns = TestNamespace::create(client, "e2e-acl").await?;
    let ns = ns.name.as_str();
    let acl = |writer_passwords: &[&str]| {
        json!([
            binding(
                "reader",
                &["reader-pw"],
                &f.ro,
                json!([{"pattern": "app:*", "access": "read"}])
            ),
            binding(
                "writer",
                writer_passwords,
                &f.rw,
                json!([{"pattern": "app:*", "access": "readwrite"}])
            ),
        ])
    };
    apply_cluster(client, ns, "shop", &f.base, 1, acl(&["old-pw"])).await?;
    wait_active(client, ns, "shop").await?;
    let (rev0, _) = wait_acl_applied(client, ns, "shop", None).await?;
    let pods_before = pod_identities(client, ns, "shop").await?;
    assert_eq!(pods_before.len(), 2);
    let addrs = member_addrs(client, ns, "shop").await?;

    let (writer, reader) = key_patterns_and_access_modes_are_enforced(&addrs).await?;

    // Rotation, step 1: add a second hash. Both passwords authenticate, on every member.
    apply_cluster(client, ns, "shop", &f.base, 1, acl(&["old-pw", "new-pw"])).await?;
    let (rev1, took1) = wait_acl_applied(client, ns, "shop", Some(&rev0)).await?;
    println!("second hash: revision {rev1} loaded on every member {took1:?} after the apply");
    both_writer_passwords_authenticate(&addrs).await?;
    // Step 2: remove the first hash. Only the second authenticates; the connection
    // authenticated with the old password keeps working (Valkey keeps it: the user remains).
    apply_cluster(client, ns, "shop", &f.base, 1, acl(&["new-pw"])).await?;
    let (rev2, took2) = wait_acl_applied(client, ns, "shop", Some(&rev1)).await?;
    println!(
        "first hash removed: revision {rev2} loaded on every member {took2:?} after the apply"
    );
    only_the_new_writer_password_authenticates(&addrs).await?;
    writer
        .set::<(), _, _>("app:y", "still connected", None, None, false)
        .await?;

    // Removing a user takes effect live too: its new connections are refused.
    apply_cluster(
        client,
        ns,
        "shop",
        &f.base,
        1,
        json!([binding(
            "writer",
            &["new-pw"],
            &f.rw,
            json!([{"pattern": "app:*", "access": "readwrite"}])
        )]),
    )
    .await?;
    let (_, took3) = wait_acl_applied(client, ns, "shop", Some(&rev2)).await?;
    println!("user removed: loaded on every member {took3:?} after the apply");
    for addr in &addrs {
        assert!(
            !authenticates(addr, "reader", "reader-pw").await?,
            "{addr}: removed user"
        );
    }

    each_revision_was_announced(client, ns, &rev1, &rev2).await?;

    let pods_after = pod_identities(client, ns, "shop").await?;
    assert_eq!(
        pods_before, pods_after,
        "pod UIDs and restart counts unchanged"
    );
    let _ = writer.quit().await;
    let _ = reader.quit().await;
    Ok(())
}

/// Readwrite on app:* can SET; read-only can GET app:x, gets NOPERM on SET and elsewhere.
/// Returns the writer's and the reader's clients.
async fn key_patterns_and_access_modes_are_enforced(
    addrs: &[MemberAddr],
) -> anyhow::Result<(fred::clients::Client, fred::clients::Client)> {
    let writer = cluster_client(addrs, "writer", "old-pw").await?;
    writer
        .set::<(), _, _>("app:x", "42", None, None, false)
        .await?;
    assert!(
        is_noperm(
            &writer
                .set::<(), _, _>("other:x", "1", None, None, false)
                .await
        ),
        "writer outside app:*"
    );
    let reader = cluster_client(addrs, "reader", "reader-pw").await?;
    assert_eq!(
        reader.get::<Option<String>, _>("app:x").await?,
        Some("42".into())
    );
    assert!(
        is_noperm(
            &reader
                .set::<(), _, _>("app:x", "1", None, None, false)
                .await
        ),
        "reader SET app:x"
    );
    assert!(
        is_noperm(&reader.get::<Option<String>, _>("other:x").await),
        "reader GET other:x"
    );
    Ok((writer, reader))
}

/// During the rotation both of the writer's passwords authenticate, on every member.
async fn both_writer_passwords_authenticate(addrs: &[MemberAddr]) -> anyhow::Result<()> {
    for addr in addrs {
        assert!(
            authenticates(addr, "writer", "old-pw").await?,
            "{addr}: old password during rotation"
        );
        assert!(
            authenticates(addr, "writer", "new-pw").await?,
            "{addr}: new password during rotation"
        );
    }
    Ok(())
}

/// After the rotation only the writer's new password authenticates, on every member.
async fn only_the_new_writer_password_authenticates(addrs: &[MemberAddr]) -> anyhow::Result<()> {
    for addr in addrs {
        assert!(
            !authenticates(addr, "writer", "old-pw").await?,
            "{addr}: old password after rotation"
        );
        assert!(
            authenticates(addr, "writer", "new-pw").await?,
            "{addr}: new password after rotation"
        );
    }
    Ok(())
}

/// Each revision was announced by an Event.
async fn each_revision_was_announced(
    client: &Client,
    ns: &str,
    rev1: &str,
    rev2: &str,
) -> anyhow::Result<()> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let notes: Vec<String> = events
        .list(&ListParams::default().fields("reason=AclApplied"))
        .await?
        .items
        .into_iter()
        .filter_map(|e| e.message)
        .collect();
    for rev in [rev1, rev2] {
        assert!(
            notes.iter().any(|n| n.contains(rev)),
            "AclApplied event for {rev}: {notes:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn config_bindings_reach_every_cluster_and_a_child_acl_replaces_them() -> anyhow::Result<()> {
    let mut f = fixture().await?;
    let result = config_case(&mut f).await;
    f.menu.cleanup().await;
    result
}

async fn config_case(f: &mut Fixture) -> anyhow::Result<()> {
    let client = f.client.clone();
    let ns = TestNamespace::create(&client, "e2e-aclcfg").await?;
    let ns = ns.name.as_str();
    // One cluster on the base config, one on the child (which inherits the base's bindings).
    apply_cluster(&client, ns, "direct", &f.base, 0, json!([])).await?;
    apply_cluster(&client, ns, "inherits", &f.child, 0, json!([])).await?;
    wait_active(&client, ns, "direct").await?;
    wait_active(&client, ns, "inherits").await?;
    let (_, _) = wait_acl_applied(&client, ns, "direct", None).await?;
    let (rev, _) = wait_acl_applied(&client, ns, "inherits", None).await?;
    for cluster in ["direct", "inherits"] {
        let addrs = member_addrs(&client, ns, cluster).await?;
        let driver = operator_driver(&client, ns, cluster).await?;
        assert!(
            users_of(&driver, &addrs[0])
                .await?
                .contains(&"platform-metrics".to_string()),
            "{cluster}"
        );
        assert!(
            authenticates(&addrs[0], "platform-metrics", "platform-pw").await?,
            "{cluster}"
        );
    }
    let pods_before = pod_identities(&client, ns, "inherits").await?;

    // The child sets its own `acl`: the base's binding disappears from the child's cluster,
    // live, and stays on the base's cluster.
    let child_acl = json!([binding(
        "team-user",
        &["team-pw"],
        &f.rw,
        json!([{"pattern": "team:*", "access": "readwrite"}])
    )]);
    let child = f.child.clone();
    f.menu
        .config(&child, json!({"baseRef": f.base, "acl": child_acl}))
        .await?;
    let (_, took) = wait_acl_applied(&client, ns, "inherits", Some(&rev)).await?;
    println!("child config acl: loaded on the child's cluster {took:?} after the apply");
    let addr = &member_addrs(&client, ns, "inherits").await?[0];
    let users = users_of(&operator_driver(&client, ns, "inherits").await?, addr).await?;
    assert!(
        !users.contains(&"platform-metrics".to_string()),
        "base binding replaced: {users:?}"
    );
    assert!(users.contains(&"team-user".to_string()), "{users:?}");
    assert!(!authenticates(addr, "platform-metrics", "platform-pw").await?);
    assert!(authenticates(addr, "team-user", "team-pw").await?);
    let direct = &member_addrs(&client, ns, "direct").await?[0];
    assert!(
        authenticates(direct, "platform-metrics", "platform-pw").await?,
        "base cluster keeps it"
    );
    assert!(
        !authenticates(direct, "team-user", "team-pw").await?,
        "the child's binding stays on the child"
    );
    assert_eq!(
        pods_before,
        pod_identities(&client, ns, "inherits").await?,
        "no restart"
    );
    let _ = &f.ro;
    Ok(())
}

#[tokio::test]
async fn replication_and_failover_work_with_default_disabled() -> anyhow::Result<()> {
    let f = fixture().await?;
    let result = failover_case(&f).await;
    f.menu.cleanup().await;
    result
}

async fn failover_case(f: &Fixture) -> anyhow::Result<()> {
    let client = &f.client;
    let ns = TestNamespace::create(client, "e2e-aclfo").await?;
    let ns = ns.name.as_str();
    apply_cluster(
        client,
        ns,
        "fo",
        &f.base,
        1,
        json!([binding(
            "writer",
            &["pw"],
            &f.rw,
            json!([{"pattern": "*", "access": "readwrite"}])
        )]),
    )
    .await?;
    wait_active(client, ns, "fo").await?;
    wait_acl_applied(client, ns, "fo", None).await?;
    let addrs = member_addrs(client, ns, "fo").await?;
    let driver = operator_driver(client, ns, "fo").await?;

    // `default` is disabled: no unauthenticated access, no login as default.
    for addr in &addrs {
        let plain = Builder::from_config(Config {
            server: ServerConfig::new_centralized(addr.host.clone(), addr.port),
            ..Default::default()
        })
        .build()?;
        // fred may already be refused while connecting; otherwise the first command is.
        let refused = match plain.init().await {
            Err(e) => format!("{e:?}"),
            Ok(_) => format!("{:?}", plain.ping::<String>(None).await),
        };
        assert!(refused.contains("NOAUTH"), "{addr}: {refused}");
        let _ = plain.quit().await;
    }

    let writer = cluster_client(&addrs, "writer", "pw").await?;
    for i in 0..100 {
        writer
            .set::<(), _, _>(format!("k:{i}"), i, None, None, false)
            .await?;
    }
    let _ = writer.quit().await;
    let mut primary = None;
    let mut replica = None;
    for a in &addrs {
        let repl = driver.replication_info(a).await?;
        if repl.role == Role::Replica {
            let link = repl.primary_link.context("replica link")?;
            assert!(
                link.link_up,
                "{a}: replica authenticated to its primary as _valkey-replication"
            );
            replica = Some(a.clone());
        } else {
            primary = Some(a.clone());
        }
    }
    let (primary, replica) = (primary.context("primary")?, replica.context("replica")?);

    let start = Instant::now();
    driver.failover(&replica, FailoverMode::Default).await?;
    let d = &driver;
    let (p, r) = (&primary, &replica);
    wait_for(
        "the replica to take over and the old primary to follow it",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async move {
            let new = d.replication_info(r).await?;
            let old = d.replication_info(p).await?;
            let following = old.role == Role::Replica
                && old
                    .primary_link
                    .as_ref()
                    .is_some_and(|l| l.link_up && !l.sync_in_progress);
            if new.role == Role::Primary && following {
                Ok(Some(()))
            } else {
                bail!(
                    "new primary role {:?}, old primary role {:?} link {:?}",
                    new.role,
                    old.role,
                    old.primary_link
                )
            }
        },
    )
    .await?;
    println!(
        "failover with default disabled: {:?} to a synced replica",
        start.elapsed()
    );
    let writer = cluster_client(&addrs, "writer", "pw").await?;
    for i in 0..100 {
        assert_eq!(
            writer.get::<Option<i64>, _>(format!("k:{i}")).await?,
            Some(i),
            "key k:{i} after failover"
        );
    }
    writer
        .set::<(), _, _>("after", "failover", None, None, false)
        .await?;
    let _ = writer.quit().await;
    wait_active(client, ns, "fo").await?;
    Ok(())
}
