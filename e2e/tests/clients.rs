//! The client guides of docs/connect.md (issue 33), run as the page shows them: the Python
//! (valkey-py), Go (valkey-go), Java (Lettuce, adaptive topology refresh) and Node.js
//! (iovalkey) programs are extracted from the page and built by `e2e/clients/prepare.sh`, then
//! run all at once against a 3 x 1 TLS cluster with cert-manager's certificate and an ACL user,
//! seeded with the client Service's name. Each runs in a mount namespace of its own whose
//! `/etc/resolv.conf` is a pod's (the cluster DNS, the namespace's search path), so each
//! resolves the Service and the member hostnames as an app in a pod does.
//!
//! Through `kubectl delete pod` of a primary (it hands over on SIGTERM) and a scale-out from 3
//! to 4 shards, every program keeps writing, and every write a program printed as acknowledged
//! reads back afterwards. The certificate names no IP address, so a program that dialled a
//! member by its pod IP instead of the hostname it announces would fail to verify it.
#![cfg(feature = "e2e")]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::json;

use valkey_e2e::certs;
use valkey_e2e::dns::CLUSTER_DNS;
use valkey_e2e::harness::{TestNamespace, client, kubectl_run, tool_cache};
use valkey_e2e::safety::{Shape, healed, members_with};
use valkey_e2e::workload::{self, Menu, PASSWORD};
use valkey_operator::api::NodeRole;
use valkey_operator::controller::names;

/// The image built with TLS (docs/local-cluster.md).
const TLS_TAG: &str = "9.1.2";
const CLUSTER: &str = "guides";
/// Writes each program acknowledges after each step before the next one starts.
const PROGRESS: usize = 20;

/// The four programs, built once per run into the tool cache (outside the checkout).
fn prepare() -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tool_cache().join("client-guides");
    let status = Command::new("bash")
        .arg(repo.join("e2e/clients/prepare.sh"))
        .arg(&out)
        .status()
        .context("running e2e/clients/prepare.sh")?;
    ensure!(status.success(), "e2e/clients/prepare.sh failed: {status}");
    let programs = std::fs::read_to_string(out.join("programs"))?;
    Ok(programs
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().map(str::to_string);
            Some((words.next()?, words.collect()))
        })
        .collect())
}

/// A pod's resolver configuration in namespace `ns` (what the kubelet writes for
/// `dnsPolicy: ClusterFirst`).
fn pod_resolv_conf(ns: &str) -> String {
    format!(
        "search {ns}.svc.cluster.local svc.cluster.local cluster.local\n\
         nameserver {CLUSTER_DNS}\noptions ndots:5\n"
    )
}

/// One running program: what it printed as acknowledged, and what it said on stderr.
struct Program {
    language: String,
    child: Child,
    acknowledged: Arc<Mutex<Vec<u64>>>,
    complaints: Arc<Mutex<Vec<String>>>,
}

impl Program {
    fn start(
        language: &str,
        command: &[String],
        resolv: &Path,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        // unshare execs the shell in a new mount namespace, which binds the pod's resolver
        // configuration over /etc/resolv.conf for this program alone and execs it.
        let mut child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(resolv)
            .args(command)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("VALKEY_KEY_PREFIX", format!("guide:{language}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {language} program"))?;
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let complaints = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().context("stdout")?;
        let acks = acknowledged.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(n) = line.trim().parse::<u64>() {
                    acks.lock().unwrap().push(n);
                }
            }
        });
        let stderr = child.stderr.take().context("stderr")?;
        let said = complaints.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                said.lock().unwrap().push(line);
            }
        });
        Ok(Program {
            language: language.to_string(),
            child,
            acknowledged,
            complaints,
        })
    }

    fn acknowledged(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// The program's last words on stderr, for an error message.
    fn last_words(&self) -> String {
        let said = self.complaints.lock().unwrap();
        said[said.len().saturating_sub(5)..].join("\n  ")
    }

    /// How many writes failed and were retried, and what the first failure said.
    fn failed_attempts(&self) -> (usize, String) {
        let said = self.complaints.lock().unwrap();
        let failed: Vec<&String> = said
            .iter()
            .filter(|l| l.contains("failed, retrying"))
            .collect();
        let first = failed
            .first()
            .map(|l| format!(" (first: {l})"))
            .unwrap_or_default();
        (failed.len(), first)
    }
}

/// Waits until every program has acknowledged `more` writes beyond what it had, failing with
/// the program's stderr if one stops (exits, or writes nothing for long).
async fn every_program_writes(
    programs: &mut [Program],
    more: usize,
    step: &str,
) -> anyhow::Result<()> {
    let from: Vec<usize> = programs.iter().map(Program::acknowledged).collect();
    let started = Instant::now();
    loop {
        let mut behind = Vec::new();
        for (p, from) in programs.iter_mut().zip(&from) {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "the {} program exited ({status}) {step}:\n  {}",
                    p.language,
                    p.last_words()
                );
            }
            if p.acknowledged() < from + more {
                behind.push(p);
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(180) {
            let who: Vec<String> = behind
                .iter()
                .map(|p| {
                    format!(
                        "{} ({} acknowledged):\n  {}",
                        p.language,
                        p.acknowledged(),
                        p.last_words()
                    )
                })
                .collect();
            bail!(
                "no {more} acknowledged writes {step} within 180 s from {}",
                who.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_client_guides_write_through_a_primary_hand_over_and_a_scale_out()
-> anyhow::Result<()> {
    let programs = prepare()?;
    ensure!(programs.len() == 4, "prepare.sh gave {programs:?}");
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-clients").await?;
    let ns = ns.name.as_str();
    certs::issue_for_clusters(&client, ns, &[CLUSTER]).await?;
    let menu = Menu::publish(&client, "e2e-clients", TLS_TAG).await?;
    let mut spec = workload::cluster(ns, CLUSTER, &menu.config, 3, 1);
    spec["spec"]["tls"] = json!({"secretRef": format!("{CLUSTER}-tls")});
    workload::apply(&client, ns, spec.clone()).await?;
    settled(&client, ns, 3, &[]).await?;

    // What an app's Deployment gives it: the Service name, the user, the mounted ca.crt, and a
    // pod's resolver.
    let files: PathBuf = tool_cache().join("client-guides").join(ns);
    std::fs::create_dir_all(&files)?;
    let ca = files.join("ca.crt");
    std::fs::write(
        &ca,
        certs::secret_pem(&client, ns, &format!("{CLUSTER}-tls"), "ca.crt").await?,
    )?;
    let resolv = files.join("resolv.conf");
    std::fs::write(&resolv, pod_resolv_conf(ns))?;
    let env = [
        ("VALKEY_HOST", names::cluster_hostname(CLUSTER, ns)),
        ("VALKEY_PORT", "6379".to_string()),
        ("VALKEY_USERNAME", "app".to_string()),
        ("VALKEY_PASSWORD", PASSWORD.to_string()),
        ("VALKEY_CA_FILE", ca.display().to_string()),
    ];
    let mut running = programs
        .iter()
        .map(|(language, command)| Program::start(language, command, &resolv, &env))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let outcome = exercise(&client, ns, &mut spec, &mut running).await;
    for p in &mut running {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    outcome?;

    for p in &running {
        let acknowledged = p.acknowledged.lock().unwrap().clone();
        let missing = workload::missing_of(
            &client,
            ns,
            CLUSTER,
            &format!("guide:{}", p.language),
            &acknowledged,
        )
        .await?;
        let (failed, first) = p.failed_attempts();
        println!(
            "{}: {} acknowledged writes, {missing} missing, {failed} failed attempts retried{first}",
            p.language,
            acknowledged.len(),
        );
        ensure!(
            missing == 0,
            "the {} program: {missing} acknowledged writes do not read back",
            p.language
        );
    }
    menu.remove(&client).await?;
    std::fs::remove_dir_all(&files)?;
    Ok(())
}

/// The steps the programs write through: a primary's pod deleted with its default grace period,
/// then a scale-out to 4 shards.
async fn exercise(
    client: &kube::Client,
    ns: &str,
    spec: &mut serde_json::Value,
    running: &mut [Program],
) -> anyhow::Result<()> {
    every_program_writes(running, PROGRESS, "after starting").await?;

    let primaries = members_with(client, ns, CLUSTER, NodeRole::Primary).await?;
    let victim = primaries.first().context("no primary")?;
    kubectl_run(&["delete", "pod", "-n", ns, &victim.pod])?;
    println!(
        "deleted primary pod {} with its default grace period",
        victim.pod
    );
    every_program_writes(running, PROGRESS, "after the primary's pod was deleted").await?;
    settled(client, ns, 3, &[victim.name.as_str()]).await?;
    every_program_writes(running, PROGRESS, "after the lost member was replaced").await?;

    spec["spec"]["shards"] = json!(4);
    workload::apply(client, ns, spec.clone()).await?;
    settled(client, ns, 4, &[]).await?;
    println!("scaled out to 4 shards");
    every_program_writes(running, PROGRESS, "after the scale-out").await
}

async fn settled(
    client: &kube::Client,
    ns: &str,
    shards: usize,
    gone: &[&str],
) -> anyhow::Result<()> {
    let shape = Shape {
        primaries: shards,
        members: shards * 2,
    };
    healed(client, ns, CLUSTER, shape, gone, Instant::now()).await?;
    Ok(())
}
