//! cert-manager in the suites: the issuer chain and Valkey certificate the docs show, forced
//! renewal (what `cmctl renew` does), and reading certificates (from Secrets and from what a
//! server presents) with the openssl command.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::harness::{apply_yaml, wait_for};

/// A CA Issuer `name` in `ns`: a self-signed Issuer signs an ECDSA CA certificate, whose Secret
/// backs the CA Issuer (cert-manager's documented way to run a private CA).
pub fn ca_issuer_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {{name: {name}-selfsigned, namespace: {ns}}}\n\
         spec: {{selfSigned: {{}}}}\n---\n\
         apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {{name: {name}-ca, namespace: {ns}}}\n\
         spec: {{isCA: true, commonName: {name}-ca, secretName: {name}-ca, duration: 87600h,\n\
         \x20 privateKey: {{algorithm: ECDSA, size: 256}}, issuerRef: {{name: {name}-selfsigned, kind: Issuer}}}}\n---\n\
         apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{ca: {{secretName: {name}-ca}}}}\n"
    )
}

/// The certificate of a TLS ValkeyCluster as docs/tls.md gives it: ECDSA P-256, valid for the
/// cluster's Service name and every member hostname under it, renewed with a new key.
pub fn valkey_certificate_yaml(ns: &str, cluster: &str, secret: &str, issuer: &str) -> String {
    format!(
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {{name: {secret}, namespace: {ns}}}\n\
         spec:\n  secretName: {secret}\n  duration: 2160h\n  renewBefore: 360h\n\
         \x20 privateKey: {{algorithm: ECDSA, size: 256, rotationPolicy: Always}}\n\
         \x20 dnsNames: [\"{cluster}.{ns}.svc.cluster.local\", \"*.{cluster}.{ns}.svc.cluster.local\"]\n\
         \x20 issuerRef: {{name: {issuer}, kind: Issuer}}\n"
    )
}

/// A CA Issuer `e2e-ca` in `ns` and, for each ValkeyCluster named, its certificate in Secret
/// `<cluster>-tls` (docs/tls.md's objects); returns once all are Ready.
pub async fn issue_for_clusters(
    client: &Client,
    ns: &str,
    clusters: &[&str],
) -> anyhow::Result<()> {
    let mut objects = ca_issuer_yaml(ns, "e2e-ca");
    for cluster in clusters {
        objects.push_str("---\n");
        objects.push_str(&valkey_certificate_yaml(
            ns,
            cluster,
            &format!("{cluster}-tls"),
            "e2e-ca",
        ));
    }
    apply_yaml(client, &objects).await?;
    for cluster in clusters {
        wait_ready(client, ns, &format!("{cluster}-tls")).await?;
    }
    Ok(())
}

fn certificates(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn condition(cert: &DynamicObject, type_: &str) -> Option<String> {
    cert.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Applies `yaml` (issuers and certificates) and waits until Certificate `name` is Ready.
pub async fn issue(client: &Client, ns: &str, yaml: &str, name: &str) -> anyhow::Result<()> {
    apply_yaml(client, yaml).await?;
    wait_ready(client, ns, name).await
}

pub async fn wait_ready(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let api = certificates(client, ns);
    wait_for(
        &format!("Certificate {ns}/{name} to be Ready"),
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            let c = api.get(name).await?;
            let ready = condition(&c, "Ready").as_deref() == Some("True")
                && condition(&c, "Issuing").is_none();
            ensure!(ready, "status: {}", c.data["status"]);
            Ok(Some(()))
        },
    )
    .await
}

/// Forces cert-manager to reissue Certificate `name` now, as `cmctl renew` does: an `Issuing`
/// condition with reason `ManuallyTriggered` on its status.
pub async fn force_renewal(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let api = certificates(client, ns);
    let cert = api.get(name).await?;
    let mut conditions = cert.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered (e2e)",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await?;
    Ok(())
}

/// `key` of Secret `name` (PEM).
pub async fn secret_pem(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
) -> anyhow::Result<Vec<u8>> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    Ok(secret
        .data
        .and_then(|d| d.get(key).cloned())
        .with_context(|| format!("Secret {ns}/{name} has no {key}"))?
        .0)
}

/// Runs `openssl args...` with `input` on stdin; its stdout.
fn openssl(args: &[&str], input: &[u8]) -> anyhow::Result<String> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running openssl")?;
    child.stdin.take().context("stdin")?.write_all(input)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The serial number of the (first) certificate in `pem`.
pub fn serial(pem: &[u8]) -> anyhow::Result<String> {
    let out = openssl(&["x509", "-noout", "-serial"], pem)?;
    Ok(out.trim().trim_start_matches("serial=").to_string())
}

/// `openssl x509 -text` of the (first) certificate in `pem`.
pub fn text(pem: &[u8]) -> anyhow::Result<String> {
    openssl(&["x509", "-noout", "-text"], pem)
}

/// Whether `cert` verifies against the CA bundle `ca` (both PEM).
pub fn verifies(cert: &[u8], ca: &[u8]) -> anyhow::Result<bool> {
    let dir = std::env::temp_dir().join(format!("vk-ca-{}", crate::harness::random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca)?;
    let ok = openssl(&["verify", "-CAfile", &ca_file.to_string_lossy()], cert).is_ok();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

/// The certificate (PEM) a TLS server at `addr` presents for server name `sni`.
pub fn presented(addr: SocketAddr, sni: &str) -> anyhow::Result<Vec<u8>> {
    let out = openssl(
        &[
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            sni,
        ],
        b"",
    )?;
    let begin = out
        .find("-----BEGIN CERTIFICATE-----")
        .with_context(|| format!("{addr} presented no certificate: {out}"))?;
    let end = out[begin..]
        .find("-----END CERTIFICATE-----")
        .context("unterminated certificate")?
        + begin
        + "-----END CERTIFICATE-----".len();
    Ok(out.as_bytes()[begin..end].to_vec())
}
