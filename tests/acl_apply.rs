//! The ACL step against a real `valkey-server` (9.0 build): a member whose Secret volume still
//! holds the previous file is detected by its revision marker and retried, a member that has
//! the revision is left alone (no `ACL LOAD`), a file Valkey refuses is reported with Valkey's
//! reason while the member keeps the revision it had, and a member whose pod is not ready is
//! waited for. The file on disk plays the Secret volume.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use valkey_operator::controller::cluster::acl::{MemberAcl, apply_members};
use valkey_operator::driver::testing::{LocalServers, ValkeyBuild};
use valkey_operator::driver::{ClusterDriver, Credentials, DriverConfig, FredDriver, MemberAddr};
use valkey_operator::resolve::acl::{
    OperatorCredentials, REVISION_LEN, file_revision, render_acl_file, revision_user,
};

use valkey_operator::api::constants::OPERATOR_ACL_USERNAME;
use valkey_operator::api::{AclBinding, AclPermission, CategoryRule, RuleAccess, ValkeyRoleSpec};

fn file(credentials: &OperatorCredentials, hashes: &[&str]) -> String {
    let roles = BTreeMap::from([(
        "reader".to_string(),
        ValkeyRoleSpec {
            categories: vec![CategoryRule {
                name: "read".into(),
                access: RuleAccess::Allow,
            }],
            commands: vec![],
        },
    )]);
    let bindings = vec![AclBinding {
        username: "app".into(),
        password_hashes: hashes.iter().map(|h| h.to_string()).collect(),
        permissions: vec![AclPermission {
            role_ref: "reader".into(),
            keys: vec![],
            channels: vec![],
        }],
    }];
    render_acl_file(&bindings, &roles, credentials)
}

#[tokio::test]
async fn members_load_the_new_revision_only_once_their_volume_has_it() {
    let servers = LocalServers::start(ValkeyBuild::V9_0, 1)
        .await
        .unwrap_or_else(|e| panic!("cannot start valkey-server: {e}"));
    let server = &servers.servers[0];
    let acl_path = server.dir.join("users.acl");
    let credentials = OperatorCredentials {
        operator_password: servers.credentials.password.clone(),
        replication_password: "replication".into(),
        backup_password: "backup".into(),
        restore_password: "restore-secret".into(),
        metrics_password: "metrics-secret".into(),
    };
    // Hand over to the operator's user (the harness user stays in this first file: Valkey
    // 9.0.0 crashes when ACL LOAD deletes the caller's own user).
    let h1 = hex::encode(Sha256::digest(b"one"));
    let h2 = hex::encode(Sha256::digest(b"two"));
    let first = file(&credentials, &[&h1]);
    std::fs::write(
        &acl_path,
        format!(
            "{first}user {} on #{} ~* &* +@all\n",
            servers.credentials.username,
            hex::encode(Sha256::digest(servers.credentials.password.as_bytes()))
        ),
    )
    .unwrap();
    let bootstrap = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    bootstrap.acl_load(&server.addr).await.unwrap();
    let driver = FredDriver::new(DriverConfig::new(Credentials {
        username: OPERATOR_ACL_USERNAME.into(),
        password: servers.credentials.password.clone(),
    }));
    let members = vec![
        ("c-0-0".to_string(), Some(server.addr.clone())),
        ("c-0-1".to_string(), None::<MemberAddr>),
    ];
    // The handover file carries `first`'s marker (the harness user was appended below it):
    // the member already runs revision 1, so it is left alone (no ACL LOAD).
    let rev1 = file_revision(&first).unwrap().to_string();
    std::fs::write(&acl_path, &first).unwrap();
    let p = apply_members(&driver, "test", &members, &rev1).await;
    assert_eq!(p.members[0].1, MemberAcl::Loaded { reloaded: false });
    assert_eq!(p.members[1].1, MemberAcl::NotRunning);
    assert!(
        !p.applied(),
        "a member that is not running keeps the condition False"
    );
    let (_, reason, message) = p.condition();
    assert_eq!(reason, "Loading");
    assert!(
        message.starts_with(&format!("1 of 2 members loaded ACL revision {rev1}")),
        "{message}"
    );
    let running = &members[..1];
    assert!(
        apply_members(&driver, "test", running, &rev1)
            .await
            .applied()
    );

    // The Secret changed (rotation: a second hash) but the volume still holds the old file:
    // ACL LOAD reloads the old file, the marker says so, the member is Stale.
    let second = file(&credentials, &[&h1, &h2]);
    let rev2 = file_revision(&second).unwrap().to_string();
    assert_ne!(rev1, rev2);
    let p = apply_members(&driver, "test", running, &rev2).await;
    assert_eq!(
        p.members[0].1,
        MemberAcl::Stale {
            seen: Some(rev1.clone())
        }
    );
    let (ok, reason, message) = p.condition();
    assert!(!ok);
    assert_eq!(reason, "Loading");
    assert!(
        message.contains("waiting for the Secret volume to refresh on c-0-0"),
        "{message}"
    );

    // The volume catches up: the next round loads it.
    std::fs::write(&acl_path, &second).unwrap();
    let p = apply_members(&driver, "test", running, &rev2).await;
    assert_eq!(p.members[0].1, MemberAcl::Loaded { reloaded: true });

    // A file Valkey refuses: reported with Valkey's reason; the member keeps revision 2.
    let body = second
        .split_once('\n')
        .unwrap()
        .1
        .replace("+@read", "+@no-such-category");
    let rev3 = hex::encode(Sha256::digest(body.as_bytes()))[..REVISION_LEN].to_string();
    let broken = format!("user {} off\n{body}", revision_user(&rev3));
    std::fs::write(&acl_path, &broken).unwrap();
    let p = apply_members(&driver, "test", running, &rev3).await;
    let MemberAcl::Failed { error } = &p.members[0].1 else {
        panic!("expected a failure, got {:?}", p.members[0].1);
    };
    assert!(
        error.contains("ACL LOAD") && error.contains("no-such-category"),
        "{error}"
    );
    assert_eq!(p.condition().1, "LoadFailed");
    let users = driver.acl_users(&server.addr).await.unwrap();
    assert!(users.contains(&format!("_rev-{rev2}")), "{users:?}");
}
