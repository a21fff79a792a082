//! The cluster driver against real TLS-only `valkey-server` processes (the TLS-capable 9.1.2
//! build: `VALKEY_SERVER_9_1_TLS`, else `~/.cache/valkey-operator/valkey-9.1.2-tls`),
//! configured as the operator configures TLS members, with certificates shaped like
//! cert-manager's from a CA Issuer: ECDSA P-256, SANs `<cluster>.<ns>.svc.cluster.local` and
//! `*.<cluster>.<ns>.svc.cluster.local`.

mod driver_common;
use driver_common::{assert_keys_readable, write_keys};

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{ClientLike, Config, ServerConfig};
use fred::types::config::{HostMapping, Server, TlsConfig, TlsConnector, TlsHostMapping};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SerialNumber,
};
use valkey_operator::controller::cluster::tls::{MemberTls, TlsProgress, reload_members};
use valkey_operator::driver::migrate::{KeyMove, move_slot_by_keys};
use valkey_operator::driver::testing::{
    LocalServers, TlsMaterial, ValkeyBuild, form_cluster, wait_for,
};
use valkey_operator::driver::tls::TlsClient;
use valkey_operator::driver::{
    ClusterDriver, DriverConfig, FailoverMode, FredDriver, MemberAddr, MigrationOperation,
    MigrationState, Role, SlotMigrationRequest, SlotRange, TlsSettings,
};

const FORM_TIMEOUT: Duration = Duration::from_secs(120);
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// The cluster name certificates are issued for and verified against.
const CLUSTER_NAME: &str = "tls-test.drivers.svc.cluster.local";
const MEMBER_NAME: &str = "tls-test-0-0.tls-test.drivers.svc.cluster.local";

/// A CA, as a cert-manager CA Issuer holds it.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A member certificate with the two SANs, serial `serial`: (material, leaf DER).
    fn issue(&self, serial: u64, ca_bundle: &str) -> (TlsMaterial, Vec<u8>) {
        self.issue_with(serial, ca_bundle, |_| {})
    }

    /// Like [`Ca::issue`], valid only during 2020: expired now.
    fn issue_expired(&self, serial: u64, ca_bundle: &str) -> (TlsMaterial, Vec<u8>) {
        self.issue_with(serial, ca_bundle, |params| {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn issue_with(
        &self,
        serial: u64,
        ca_bundle: &str,
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> (TlsMaterial, Vec<u8>) {
        let mut params =
            CertificateParams::new(vec![CLUSTER_NAME.to_string(), format!("*.{CLUSTER_NAME}")])
                .unwrap();
        adjust(&mut params);
        params
            .distinguished_name
            .push(DnType::CommonName, CLUSTER_NAME);
        params.serial_number = Some(SerialNumber::from(serial.to_be_bytes().to_vec()));
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            TlsMaterial {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
                ca_pem: ca_bundle.to_string(),
            },
            cert.der().to_vec(),
        )
    }
}

fn tls_settings(ca_pem: &str, server_name: &str) -> TlsSettings {
    TlsSettings {
        ca_pem: ca_pem.to_string(),
        server_name: Some(server_name.to_string()),
        verify_as_of: None,
    }
}

fn tls_driver(servers: &LocalServers, ca_pem: &str) -> FredDriver {
    let mut config = DriverConfig::new(servers.credentials.clone());
    config.tls = Some(tls_settings(ca_pem, CLUSTER_NAME));
    FredDriver::new(config)
}

async fn start_tls(count: usize, tls: &TlsMaterial, extra: &str) -> LocalServers {
    LocalServers::start_tls(ValkeyBuild::V9_1Tls, count, tls, extra)
        .await
        .unwrap_or_else(|e| panic!("cannot start {count} TLS valkey-servers: {e}"))
}

/// Maps every member IP to a member hostname under the certificate's wildcard, as DNS names
/// of pods under the client Service would be: the cluster client verifies those.
#[derive(Debug)]
struct MemberNames;

impl HostMapping for MemberNames {
    fn map(&self, _ip: &IpAddr, _default_host: &str) -> Option<String> {
        Some(MEMBER_NAME.to_string())
    }
}

/// A cluster client over TLS that verifies every member's certificate (hostnames under the
/// wildcard) against `ca_pem`.
async fn tls_data_client(servers: &LocalServers, ca_pem: &str) -> fred::clients::Client {
    let seed = &servers.servers[0].addr;
    let tls = TlsClient::new(&tls_settings(ca_pem, MEMBER_NAME)).unwrap();
    let config = Config {
        username: Some(servers.credentials.username.clone()),
        password: Some(servers.credentials.password.clone()),
        server: ServerConfig::Clustered {
            hosts: vec![Server::new_with_tls(
                seed.host.clone(),
                seed.port,
                Some(MEMBER_NAME.to_string()),
            )],
            policy: Default::default(),
        },
        tls: Some(TlsConfig {
            connector: TlsConnector::from((*tls.config).clone()),
            hostnames: TlsHostMapping::Custom(Arc::new(MemberNames)),
        }),
        ..Config::default()
    };
    let client = fred::clients::Client::new(config, None, None, None);
    client.init().await.expect("TLS cluster client connects");
    client
}

async fn keys_in(driver: &FredDriver, member: &MemberAddr, range: &SlotRange) -> u64 {
    let mut total = 0;
    for slot in range.clone() {
        total += driver.count_keys_in_slot(member, slot).await.unwrap();
    }
    total
}

/// Waits until every member agrees that `target` serves all of `range`.
async fn wait_owned(
    driver: &FredDriver,
    members: &[MemberAddr],
    range: &SlotRange,
    target: &valkey_operator::driver::NodeId,
) {
    wait_for("new owner agreed everywhere", STEP_TIMEOUT, || async {
        for m in members {
            let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
            let owner = nodes
                .iter()
                .find(|n| n.slots.iter().any(|r| r.contains(range.start())))
                .map(|n| n.id.clone());
            if owner.as_ref() != Some(target) {
                return Err(format!(
                    "{m} says {:?} serves slot {}",
                    owner,
                    range.start()
                ));
            }
        }
        Ok(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until every member reports `cluster_state:ok` and sees no member failing.
async fn wait_healthy(driver: &FredDriver, members: &[MemberAddr]) {
    wait_for("cluster ok, no member failing", STEP_TIMEOUT, || async {
        for m in members {
            let info = driver.cluster_info(m).await.map_err(|e| e.to_string())?;
            if !info.state_ok {
                return Err(format!("{m}: {info:?}"));
            }
            let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
            if let Some(bad) = nodes.iter().find(|n| n.flags.fail || n.flags.pfail) {
                return Err(format!("{m} sees {bad:?} failing"));
            }
        }
        Ok(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_forms_refuses_plaintext_serves_verified_clients_and_fails_over() {
    let ca = Ca::new("valkey test CA");
    let (material, leaf) = ca.issue(1, &ca.pem());
    let servers = start_tls(6, &material, "").await;
    let members = servers.addrs();
    let driver = tls_driver(&servers, &ca.pem());
    let formation = form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("TLS formation failed: {e}"));
    wait_healthy(&driver, &members).await;
    for m in &members {
        let info = driver.cluster_info(m).await.unwrap();
        assert_eq!(info.known_nodes, 6, "{m}");
        assert_eq!(
            driver.served_certificate(m).await.unwrap().as_deref(),
            Some(leaf.as_slice()),
            "{m} serves the issued certificate"
        );
    }

    // Members announce hostnames under the wildcard, as the operator configures them, and
    // redirect clients there.
    for (i, m) in members.iter().enumerate() {
        let settings = [
            (
                "cluster-announce-hostname".to_string(),
                format!("tls-test-{i}.{CLUSTER_NAME}"),
            ),
            (
                "cluster-preferred-endpoint-type".to_string(),
                "hostname".to_string(),
            ),
        ];
        driver.config_set(m, &settings).await.unwrap();
    }
    wait_for(
        "every member to know every hostname",
        STEP_TIMEOUT,
        || async {
            for m in &members {
                let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
                if let Some(n) = nodes.iter().find(|n| {
                    !n.hostname
                        .as_deref()
                        .is_some_and(|h| h.ends_with(&format!(".{CLUSTER_NAME}")))
                }) {
                    return Err(format!("{m} knows {n:?} without its hostname"));
                }
            }
            Ok(())
        },
    )
    .await
    .unwrap();
    // Slot 0 is on the first primary: asking another member is a MOVED to a hostname.
    let (first, _) = &formation.primaries[0];
    let other = members.iter().find(|m| *m != first).unwrap();
    let moved = driver
        .command(
            other,
            "GET",
            vec![
                fred::types::Value::from("GET"),
                // "{06S}" hashes to slot 0.
                fred::types::Value::from("{06S}key"),
            ],
        )
        .await;
    match moved {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("MOVED 0 tls-test-") && text.contains(CLUSTER_NAME),
                "{text}"
            );
        }
        Ok(reply) => panic!("expected a MOVED to a hostname, got {reply:?}"),
    }
    // Back to IPs for the rest of this test (nothing here resolves those names).
    for m in &members {
        let settings = [
            ("cluster-announce-hostname".to_string(), String::new()),
            (
                "cluster-preferred-endpoint-type".to_string(),
                "ip".to_string(),
            ),
        ];
        driver.config_set(m, &settings).await.unwrap();
    }
    wait_for("hostnames to be gone everywhere", STEP_TIMEOUT, || async {
        for m in &members {
            let nodes = driver.cluster_nodes(m).await.map_err(|e| e.to_string())?;
            if let Some(n) = nodes.iter().find(|n| n.hostname.is_some()) {
                return Err(format!("{m} still knows {n:?} with a hostname"));
            }
        }
        Ok(())
    })
    .await
    .unwrap();

    // Plaintext is refused on the client port: the port only speaks TLS.
    let plain = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let refused = plain.ping(&members[0]).await.unwrap_err();
    assert!(refused.is_transient(), "{refused}");
    assert!(
        plain
            .served_certificate(&members[0])
            .await
            .unwrap()
            .is_none()
    );

    // Verification is real: another CA or a name the certificate does not cover fail.
    let other_ca = Ca::new("someone else's CA");
    let mut wrong_ca = DriverConfig::new(servers.credentials.clone());
    wrong_ca.tls = Some(tls_settings(&other_ca.pem(), CLUSTER_NAME));
    let err = FredDriver::new(wrong_ca)
        .ping(&members[0])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
    let mut wrong_name = DriverConfig::new(servers.credentials.clone());
    wrong_name.tls = Some(tls_settings(&ca.pem(), "other.drivers.svc.cluster.local"));
    let err = FredDriver::new(wrong_name)
        .ping(&members[0])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");

    // Data path: a hostname-verifying cluster client follows MOVED between TLS members.
    let client = tls_data_client(&servers, &ca.pem()).await;
    write_keys(&client, 5_000).await;
    assert_keys_readable(&client, 5_000).await;

    // Failover over TLS: a replica takes over its primary, replication stays TLS.
    let (replica, replica_id, _) = formation.replicas[0].clone();
    driver
        .failover(&replica, FailoverMode::Default)
        .await
        .unwrap();
    wait_for("the replica to become primary", STEP_TIMEOUT, || async {
        let r = driver
            .replication_info(&replica)
            .await
            .map_err(|e| e.to_string())?;
        let online = r
            .connected_replicas
            .iter()
            .filter(|c| c.is_online())
            .count();
        if r.role == Role::Primary && online == 1 {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    })
    .await
    .unwrap();
    let nodes = driver.cluster_nodes(&members[0]).await.unwrap();
    assert!(
        nodes.iter().any(|n| n.id == replica_id && n.flags.primary),
        "{nodes:?}"
    );
    assert_keys_readable(&client, 5_000).await;
    let _ = client.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_and_key_by_key_migrations_move_keys_between_tls_members() {
    let ca = Ca::new("valkey test CA");
    let (material, _) = ca.issue(1, &ca.pem());
    let servers = start_tls(3, &material, "").await;
    let members = servers.addrs();
    let driver = tls_driver(&servers, &ca.pem());
    let formation = form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("TLS formation failed: {e}"));
    let client = tls_data_client(&servers, &ca.pem()).await;
    write_keys(&client, 3_000).await;
    let (source, source_id) = formation.primaries[0].clone();
    let (target, target_id) = formation.primaries[1].clone();
    let (other, other_id) = formation.primaries[2].clone();

    // Atomic slot migration: the members stream the slots to each other over TLS.
    let atomic: SlotRange = 0..=99;
    let before = keys_in(&driver, &source, &atomic).await;
    assert!(before > 0);
    let request = [SlotMigrationRequest {
        ranges: vec![atomic.clone()],
        target: target_id.clone(),
    }];
    driver.migrate_slots(&source, &request).await.unwrap();
    let job = wait_for("the export job to finish", STEP_TIMEOUT, || async {
        let jobs = driver
            .slot_migrations(&source)
            .await
            .map_err(|e| e.to_string())?;
        let job = jobs
            .into_iter()
            .find(|j| j.operation == MigrationOperation::Export)
            .ok_or("no export job listed yet")?;
        if job.state.is_finished() {
            Ok(job)
        } else {
            Err(format!("job state {:?}", job.state))
        }
    })
    .await
    .unwrap();
    assert_eq!(job.state, MigrationState::Success, "{job:?}");
    wait_owned(&driver, &members, &atomic, &target_id).await;
    assert_eq!(keys_in(&driver, &target, &atomic).await, before);

    // Key by key: SETSLOT and MIGRATE, the source opening a TLS connection to the target.
    let by_keys: SlotRange = 100..=199;
    let before = keys_in(&driver, &source, &by_keys).await;
    assert!(before > 0);
    let mv = KeyMove {
        source: &source,
        source_id: &source_id,
        target: &other,
        target_id: &other_id,
        others: &members,
    };
    let mut moved = 0;
    for slot in by_keys.clone() {
        moved += move_slot_by_keys(&driver, mv, slot)
            .await
            .unwrap_or_else(|e| panic!("moving slot {slot} key by key: {e}"));
    }
    assert_eq!(moved, before);
    wait_owned(&driver, &members, &by_keys, &other_id).await;
    assert_eq!(keys_in(&driver, &other, &by_keys).await, before);
    assert_eq!(keys_in(&driver, &source, &by_keys).await, 0);
    assert_keys_readable(&client, 3_000).await;
    let _ = client.quit().await;
}

/// The `CONFIG SET` the operator issues to make a member read its TLS files again, with a
/// test server's paths (the operator's are `/etc/valkey-tls/...`).
fn files(dir: &std::path::Path) -> Vec<(String, String)> {
    ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"]
        .iter()
        .zip(["tls.crt", "tls.key", "ca.crt"])
        .map(|(k, f)| (k.to_string(), dir.join(f).display().to_string()))
        .collect()
}

async fn reload_files(driver: &FredDriver, member: &MemberAddr, dir: &std::path::Path) {
    driver.config_set(member, &files(dir)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_reload_step_serves_a_renewed_certificate_without_a_restart() {
    let ca = Ca::new("valkey test CA");
    let (first, first_leaf) = ca.issue(1, &ca.pem());
    let mut servers = start_tls(3, &first, "").await;
    let members = servers.addrs();
    let driver = tls_driver(&servers, &ca.pem());
    form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("TLS formation failed: {e}"));
    let pids: Vec<_> = servers.servers.iter().map(|s| s.pid()).collect();
    let mut run_ids = Vec::new();
    for m in &members {
        run_ids.push(driver.server_info(m).await.unwrap().run_id);
    }

    // The operator's reload step: before the volume is refreshed, CONFIG SET re-reads the old
    // files and every member is reported stale.
    let (renewed, renewed_leaf) = ca.issue(2, &ca.pem());
    assert_ne!(first_leaf, renewed_leaf);
    let named: Vec<(String, Option<MemberAddr>)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("m{i}"), Some(m.clone())))
        .collect();
    let reload = |named: Vec<(String, Option<MemberAddr>)>| {
        let (driver, servers, leaf) = (&driver, &servers, renewed_leaf.clone());
        async move {
            let mut outcomes = Vec::new();
            // Each test server has its own directory: one member at a time.
            for (i, one) in named.into_iter().enumerate() {
                let progress = reload_members(
                    driver,
                    "test",
                    &[one],
                    &leaf,
                    &files(&servers.servers[i].dir),
                )
                .await;
                outcomes.extend(progress.members);
            }
            TlsProgress {
                members: outcomes,
                expiry: None,
            }
        }
    };
    let stale = reload(named.clone()).await;
    assert!(
        stale.members.iter().all(|(_, m)| *m == MemberTls::Stale),
        "{stale:?}"
    );
    assert_eq!(
        driver.served_certificate(&members[0]).await.unwrap(),
        Some(first_leaf),
        "nothing reloads by itself without tls-auto-reload-interval"
    );

    // The files change (as a Secret volume does): the next round reloads every member.
    for s in &servers.servers {
        s.write_tls(&renewed).unwrap();
    }
    let reloaded = reload(named.clone()).await;
    assert!(
        reloaded
            .members
            .iter()
            .all(|(_, m)| *m == MemberTls::Serving { reloaded: true }),
        "{reloaded:?}"
    );
    let settled = reload(named).await;
    assert!(
        settled
            .members
            .iter()
            .all(|(_, m)| *m == MemberTls::Serving { reloaded: false }),
        "{settled:?}"
    );
    for m in &members {
        assert_eq!(
            driver.served_certificate(m).await.unwrap(),
            Some(renewed_leaf.clone())
        );
    }
    wait_healthy(&driver, &members).await;
    for (i, m) in members.iter().enumerate() {
        assert_eq!(
            driver.server_info(m).await.unwrap().run_id,
            run_ids[i],
            "{m}: same process"
        );
        assert!(servers.servers[i].is_running());
        assert_eq!(servers.servers[i].pid(), pids[i]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_auto_reload_serves_a_renewed_certificate_within_its_interval() {
    let ca = Ca::new("valkey test CA");
    let (first, _) = ca.issue(1, &ca.pem());
    let servers = start_tls(1, &first, "tls-auto-reload-interval 1").await;
    let member = servers.addrs()[0].clone();
    let driver = tls_driver(&servers, &ca.pem());
    let run_id = driver.server_info(&member).await.unwrap().run_id;
    let (renewed, renewed_leaf) = ca.issue(2, &ca.pem());
    servers.servers[0].write_tls(&renewed).unwrap();
    let started = std::time::Instant::now();
    wait_for(
        "the renewed certificate to be served",
        Duration::from_secs(15),
        || async {
            match driver.served_certificate(&member).await {
                Ok(Some(leaf)) if leaf == renewed_leaf => Ok(()),
                other => Err(format!("{:?}", other.map(|l| l.map(|l| l.len())))),
            }
        },
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(driver.server_info(&member).await.unwrap().run_id, run_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_rotation_with_a_two_ca_bundle_keeps_every_connection_verifying() {
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let (first, _) = old_ca.issue(1, &old_ca.pem());
    let servers = start_tls(3, &first, "").await;
    let members = servers.addrs();
    let driver = tls_driver(&servers, &old_ca.pem());
    form_cluster(&driver, &members, 3, FORM_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("TLS formation failed: {e}"));

    // Step 1: every member trusts both CAs, still serving a leaf of the old one.
    let bundle = format!("{}{}", old_ca.pem(), new_ca.pem());
    let (step1, _) = old_ca.issue(2, &bundle);
    for (s, m) in servers.servers.iter().zip(&members) {
        s.write_tls(&step1).unwrap();
        reload_files(&driver, m, &s.dir).await;
    }
    // The operator's driver now trusts the bundle too.
    let driver = tls_driver(&servers, &bundle);
    wait_healthy(&driver, &members).await;

    // Step 2: members move to leaves of the new CA one by one; mixed leaves verify everywhere.
    let (step2, new_leaf) = new_ca.issue(3, &bundle);
    for (s, m) in servers.servers.iter().zip(&members) {
        s.write_tls(&step2).unwrap();
        reload_files(&driver, m, &s.dir).await;
        assert_eq!(
            driver.served_certificate(m).await.unwrap(),
            Some(new_leaf.clone())
        );
        // New connections between members (bus) verify the new leaf with the bundle.
        for other in &members {
            driver.disconnect(other).await;
        }
        wait_healthy(&driver, &members).await;
    }
    // A client trusting only the new CA verifies every member now.
    let mut config = DriverConfig::new(servers.credentials.clone());
    config.tls = Some(tls_settings(&new_ca.pem(), CLUSTER_NAME));
    let new_only = FredDriver::new(config);
    for m in &members {
        new_only.ping(m).await.unwrap();
    }
    let client = tls_data_client(&servers, &new_ca.pem()).await;
    write_keys(&client, 1_000).await;
    assert_keys_readable(&client, 1_000).await;
    let _ = client.quit().await;
}

/// A cluster Blocked on an expired certificate keeps its failure handling: the operator's
/// driver, told to verify as of the certificate's expiry, still verifies the chain and the
/// name of a member serving it; verifying as of now refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_verifies_only_as_of_its_expiry() {
    let ca = Ca::new("valkey test CA");
    let (expired, leaf) = ca.issue_expired(1, &ca.pem());
    let servers = start_tls(1, &expired, "").await;
    let member = servers.addrs()[0].clone();

    let now = tls_driver(&servers, &ca.pem());
    let refused = now.server_info(&member).await;
    assert!(
        refused.is_err(),
        "an expired certificate verified as of now"
    );

    // 2020-12-31 00:00 UTC: inside the certificate's validity.
    let mut settings = tls_settings(&ca.pem(), CLUSTER_NAME);
    settings.verify_as_of = Some(1_609_372_800);
    let mut config = DriverConfig::new(servers.credentials.clone());
    config.tls = Some(settings.clone());
    let as_of_expiry = FredDriver::new(config);
    as_of_expiry.server_info(&member).await.unwrap();
    assert_eq!(
        as_of_expiry.served_certificate(&member).await.unwrap(),
        Some(leaf)
    );

    // Still verified: another CA's bundle is refused, even as of the expiry.
    let other = Ca::new("another CA");
    let mut settings = tls_settings(&other.pem(), CLUSTER_NAME);
    settings.verify_as_of = Some(1_609_372_800);
    let mut config = DriverConfig::new(servers.credentials.clone());
    config.tls = Some(settings);
    assert!(FredDriver::new(config).server_info(&member).await.is_err());
}

/// A backup Job's copy of a TLS member (`backup::job::handshake`, then the snapshot): the
/// cluster's CA bundle and name verified; another CA's bundle is refused before any byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_takes_a_tls_members_snapshot_only_from_a_verified_member() {
    use valkey_operator::backup::MemberTls;
    use valkey_operator::backup::job::handshake;
    let ca = Ca::new("valkey test CA");
    let (material, _) = ca.issue(1, &ca.pem());
    let servers = start_tls(1, &material, "").await;
    let member = &servers.addrs()[0];
    let connect = || tokio::net::TcpStream::connect((member.host.clone(), member.port));
    let tls = MemberTls {
        ca_pem: ca.pem(),
        server_name: CLUSTER_NAME.into(),
    };
    let conn = handshake(&tls, connect().await.unwrap()).await.unwrap();
    let mut copy = Vec::new();
    let fetched = valkey_operator::backup::sync::fetch_rdb(
        conn,
        &servers.credentials.username,
        &servers.credentials.password,
        &mut copy,
    )
    .await
    .unwrap_or_else(|e| panic!("snapshot over TLS: {e}"));
    assert_eq!(fetched.bytes, copy.len() as u64);
    assert!(copy.starts_with(b"REDIS") || copy.starts_with(b"VALKEY"));
    let other = Ca::new("another CA");
    let refused = handshake(
        &MemberTls {
            ca_pem: other.pem(),
            server_name: CLUSTER_NAME.into(),
        },
        connect().await.unwrap(),
    )
    .await;
    assert!(refused.is_err(), "a member verified against another CA");
}
