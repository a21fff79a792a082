//! TLS-only clusters on the local cluster (issue 16), with cert-manager issuing the certificate
//! from a CA Issuer and the TLS-capable valkey-server build (`valkey/valkey:9.1.2`):
//! - a 3 x 1 TLS cluster goes Active; plaintext on 6379 is refused; a hostname-verifying TLS
//!   cluster client writes and reads 10,000 keys following MOVED to the members' hostnames;
//! - a forced cert-manager renewal is served by every member (bound printed), with pod UIDs
//!   and restart counts unchanged;
//! - a missing Secret blocks the cluster naming it; creating it makes the cluster Active
//!   without editing it.
//!
//! Needs cluster DNS (CoreDNS) and cert-manager in the local cluster. The test process runs on
//! the host and its cluster client resolves the member hostnames with the host's resolver,
//! which must forward `cluster.local` to CoreDNS (checked first, see [`assert_host_resolves`]).
#![cfg(feature = "e2e")]

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fred::prelude::*;
use fred::types::config::{Server, TlsConfig, TlsConnector, TlsHostMapping};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use valkey_e2e::certs;
use valkey_e2e::harness::{TestNamespace, apply_yaml, client, wait_for};
use valkey_e2e::valkey::{member_pods, operator_driver, serving_addrs, wait_state};
use valkey_e2e::workload::{self, Menu, PASSWORD};
use valkey_operator::api::{ClusterState, ValkeyCluster};
use valkey_operator::controller::names;
use valkey_operator::driver::tls::TlsClient;
use valkey_operator::driver::{
    ClusterDriver, Credentials, DriverConfig, FredDriver, MemberAddr, TlsSettings,
};

/// The TLS-capable build in `.localcluster/images.yaml`.
const TLS_TAG: &str = "9.1.2";
const KEYS: usize = 10_000;

/// docs/tls.md's objects: a CA Issuer `e2e-ca` and the members' Certificate (ECDSA P-256, both
/// names) writing Secret `secret`.
fn cert_manager_objects(ns: &str, cluster: &str, secret: &str) -> String {
    format!(
        "{}---\n{}",
        certs::ca_issuer_yaml(ns, "e2e-ca"),
        certs::valkey_certificate_yaml(ns, cluster, secret, "e2e-ca")
    )
}

/// Applies the cert-manager objects and waits until the Certificate is Ready; its Secret.
async fn issue(client: &Client, ns: &str, cluster: &str, secret: &str) -> anyhow::Result<Secret> {
    certs::issue(
        client,
        ns,
        &cert_manager_objects(ns, cluster, secret),
        secret,
    )
    .await?;
    Ok(Api::<Secret>::namespaced(client.clone(), ns)
        .get(secret)
        .await?)
}

fn tls_cluster(ns: &str, name: &str, config: &str, secret: &str) -> serde_json::Value {
    let mut cluster = workload::cluster(ns, name, config, 3, 1);
    cluster["spec"]["tls"] = json!({"secretRef": secret});
    cluster
}

fn key_of(secret: &Secret, key: &str) -> anyhow::Result<Vec<u8>> {
    Ok(secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .with_context(|| format!("Secret has no {key}"))?
        .0
        .clone())
}

/// The leaf certificate (DER) of a Secret's `tls.crt`.
fn leaf_der(secret: &Secret) -> anyhow::Result<Vec<u8>> {
    let pem = key_of(secret, "tls.crt")?;
    let leaf = CertificateDer::pem_slice_iter(&pem)
        .next()
        .context("no certificate in tls.crt")??;
    Ok(leaf.as_ref().to_vec())
}

/// The host must resolve the cluster's names as a pod would: fred resolves with the system
/// resolver (its custom resolvers need its `dns` feature, hickory-resolver 0.24, which the
/// workspace does not have). Fails early, saying so, when it cannot: make the host's resolver
/// forward `cluster.local` to the cluster DNS (`valkey_e2e::dns::CLUSTER_DNS`), or enable
/// fred's `dns` feature for the suites and resolve through `valkey_e2e::dns`.
async fn assert_host_resolves(host: &str) -> anyhow::Result<()> {
    let found = tokio::net::lookup_host((host, 6379))
        .await
        .map(|f| f.count())
        .map_err(|e| e.to_string());
    if found.as_ref().is_ok_and(|n| *n > 0) {
        return Ok(());
    }
    bail!(
        "the test process cannot resolve {host} ({found:?}): the host's resolver must forward the cluster domain to CoreDNS for a hostname-verifying client to follow MOVED to member hostnames"
    )
}

/// A cluster client over TLS as an app would use one: seeded with the client Service's name,
/// trusting the Secret's CA, verifying every member by the hostname it announces.
async fn tls_cluster_client(
    ns: &str,
    cluster: &str,
    secret: &Secret,
) -> anyhow::Result<fred::clients::Client> {
    assert_host_resolves(&names::cluster_hostname(cluster, ns)).await?;
    let tls = TlsClient::new(&TlsSettings {
        ca_pem: String::from_utf8(key_of(secret, "ca.crt")?)?,
        server_name: None,
    })
    .map_err(anyhow::Error::msg)?;
    let config = Config {
        server: ServerConfig::Clustered {
            hosts: vec![Server::new(names::cluster_hostname(cluster, ns), 6379)],
            policy: Default::default(),
        },
        username: Some("app".into()),
        password: Some(PASSWORD.into()),
        tls: Some(TlsConfig {
            connector: TlsConnector::from((*tls.config).clone()),
            // Members are announced by hostname: nothing to map.
            hostnames: TlsHostMapping::None,
        }),
        ..Default::default()
    };
    let valkey = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(3);
            c.max_redirections = 10;
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(3))
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build()?;
    valkey.init().await?;
    Ok(valkey)
}

async fn member_addrs(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<Vec<MemberAddr>> {
    Ok(serving_addrs(&member_pods(client, ns, cluster).await?))
}

/// (pod name, uid, restart count) of every member.
async fn pod_identities(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> anyhow::Result<Vec<(String, String, i32)>> {
    let mut ids: Vec<_> = member_pods(client, ns, cluster)
        .await?
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|c| c.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            (p.name_any(), p.uid().unwrap_or_default(), restarts)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_verified_clients_only_and_renews_without_restarts()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-tls").await?;
    let ns = ns.name.as_str();
    let (cluster, secret_name) = ("cache", "cache-cert");
    let secret = issue(&client, ns, cluster, secret_name).await?;
    let menu = Menu::publish(&client, "e2e-tls", TLS_TAG).await?;

    let started = Instant::now();
    workload::apply(
        &client,
        ns,
        tls_cluster(ns, cluster, &menu.config, secret_name),
    )
    .await?;
    let active = wait_state(
        &client,
        ns,
        cluster,
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    println!("time to Active (TLS, 3 x 1): {:?}", started.elapsed());
    assert_eq!(active.status.as_ref().and_then(|s| s.tls), Some(true));

    // The members mount the operator's copy, which holds the issued certificate.
    let copy = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&names::tls_secret(cluster))
        .await?;
    assert_eq!(leaf_der(&copy)?, leaf_der(&secret)?);

    // Plaintext on 6379 is refused; TLS verifying the cluster's name works on every member.
    let members = member_addrs(&client, ns, cluster).await?;
    assert_eq!(members.len(), 6);
    let plain = FredDriver::new(DriverConfig::new(Credentials {
        username: "app".into(),
        password: PASSWORD.into(),
    }));
    for m in &members {
        let err = plain.ping(m).await.expect_err("plaintext must be refused");
        println!("plaintext to {m}: {err}");
    }
    // The operator's way: its copy's CA, members verified as the cluster's name.
    let driver = operator_driver(&client, ns, cluster).await?;
    for m in &members {
        driver.ping(m).await?;
        assert_eq!(
            driver.served_certificate(m).await?,
            Some(leaf_der(&secret)?),
            "{m} serves the issued certificate"
        );
        let nodes = driver.cluster_nodes(m).await?;
        let me = nodes.iter().find(|n| n.flags.myself).context("myself")?;
        assert!(
            me.hostname
                .as_deref()
                .is_some_and(|h| h.ends_with(&format!(".{}", names::cluster_hostname(cluster, ns)))),
            "{m} announces a hostname under the wildcard: {me:?}"
        );
    }

    // Every announced hostname resolves through the cluster DNS to its member's pod IP (the
    // client Service is the pods' subdomain).
    for pod in member_pods(&client, ns, cluster).await? {
        let hostname = names::member_hostname(&pod.name_any(), cluster, ns);
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("pod IP")?;
        let answer = valkey_e2e::dns::resolve_ipv4(&hostname).await?;
        assert_eq!(
            answer.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            vec![ip],
            "{hostname}"
        );
    }

    // A hostname-verifying TLS cluster client writes and reads 10,000 keys (MOVED included).
    let valkey = tls_cluster_client(ns, cluster, &secret).await?;
    let writing = Instant::now();
    for i in 0..KEYS {
        valkey
            .set::<(), _, _>(format!("tls:{i}"), i.to_string(), None, None, false)
            .await
            .with_context(|| format!("SET tls:{i}"))?;
    }
    println!(
        "TLS writer: {KEYS} sequential SETs in {:?} ({:.0}/s)",
        writing.elapsed(),
        KEYS as f64 / writing.elapsed().as_secs_f64()
    );
    for i in 0..KEYS {
        let got: Option<String> = valkey.get(format!("tls:{i}")).await?;
        assert_eq!(got.as_deref(), Some(i.to_string().as_str()), "tls:{i}");
    }

    // cert-manager renews (forced): every member serves the new certificate, no pod restarts.
    let before = pod_identities(&client, ns, cluster).await?;
    let old_leaf = leaf_der(&secret)?;
    certs::force_renewal(&client, ns, secret_name).await?;
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let renewed = wait_for(
        "cert-manager to write the renewed certificate",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || {
            let api = api.clone();
            let old_leaf = old_leaf.clone();
            async move {
                let s = api.get(secret_name).await?;
                Ok((leaf_der(&s)? != old_leaf).then_some(s))
            }
        },
    )
    .await?;
    let updated = Instant::now();
    let new_leaf = leaf_der(&renewed)?;
    wait_for(
        "every member to serve the renewed certificate",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || {
            let (driver, members, new_leaf) = (&driver, &members, &new_leaf);
            async move {
                for m in members {
                    if driver.served_certificate(m).await?.as_ref() != Some(new_leaf) {
                        bail!("{m} still serves the previous certificate");
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await?;
    println!(
        "Secret update -> every member serving the new certificate: {:?}",
        updated.elapsed()
    );
    assert_eq!(
        pod_identities(&client, ns, cluster).await?,
        before,
        "no pod replaced or restarted"
    );
    for i in (0..KEYS).step_by(97) {
        let got: Option<String> = valkey.get(format!("tls:{i}")).await?;
        assert_eq!(got.as_deref(), Some(i.to_string().as_str()));
    }
    let _ = valkey.quit().await;
    menu.remove(&client).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tls_secret_blocks_the_cluster_until_it_is_created() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-tls-missing").await?;
    let ns = ns.name.as_str();
    let (cluster, secret_name) = ("later", "later-cert");
    let menu = Menu::publish(&client, "e2e-tls-missing", TLS_TAG).await?;
    workload::apply(
        &client,
        ns,
        tls_cluster(ns, cluster, &menu.config, secret_name),
    )
    .await?;
    let blocked = wait_state(
        &client,
        ns,
        cluster,
        ClusterState::Blocked,
        Duration::from_secs(60),
    )
    .await?;
    let message = blocked
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("{ns}/{secret_name}")),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        member_pods(&client, ns, cluster).await?.is_empty(),
        "no member starts without its certificate"
    );

    // Creating the Secret (through cert-manager) is enough: the cluster is not edited.
    let generation = blocked.metadata.generation;
    apply_yaml(&client, &cert_manager_objects(ns, cluster, secret_name)).await?;
    certs::wait_ready(&client, ns, secret_name).await?;
    let active = wait_state(
        &client,
        ns,
        cluster,
        ClusterState::Active,
        Duration::from_secs(300),
    )
    .await?;
    assert_eq!(
        active.metadata.generation, generation,
        "the ValkeyCluster was not edited"
    );
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let conditions = api
        .get(cluster)
        .await?
        .status
        .unwrap_or_default()
        .conditions;
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "TlsCertificateValid" && c.status == "True"),
        "{conditions:?}"
    );
    menu.remove(&client).await?;
    Ok(())
}
