//! The client guides of docs/connect.md as running programs: Python (valkey-py), Go
//! (valkey-go), Java (Lettuce) and Node.js (iovalkey), extracted from the page and built by
//! `e2e/clients/prepare.sh` into the tool cache. Each program connects to a TLS cluster with
//! an ACL user through the client Service's name and prints every write it got acknowledged;
//! it runs in a mount namespace of its own whose `/etc/resolv.conf` is a pod's (the cluster
//! DNS, the namespace's search path), so it resolves the Service and the member hostnames as
//! an app in a pod does. Used by the e2e suite `clients` and by vk-bench's real-client
//! section.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kube::Client;

use crate::dns::CLUSTER_DNS;
use crate::harness::tool_cache;
use valkey_operator::controller::names;

/// A built program: its language and the command that runs it.
#[derive(Clone, Debug)]
pub struct Guide {
    pub language: String,
    pub command: Vec<String>,
}

/// Where e2e/clients/prepare.sh builds the programs: the tool cache, outside the checkout.
pub fn built_dir() -> PathBuf {
    tool_cache().join("client-guides")
}

/// Extracts and builds the four programs (once per call; an unchanged build is quick).
pub fn prepare() -> anyhow::Result<Vec<Guide>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = built_dir();
    let status = Command::new("bash")
        .arg(repo.join("e2e/clients/prepare.sh"))
        .arg(&out)
        .status()
        .context("running e2e/clients/prepare.sh")?;
    ensure!(status.success(), "e2e/clients/prepare.sh failed: {status}");
    let programs = std::fs::read_to_string(out.join("programs"))?;
    let guides: Vec<Guide> = programs
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().map(str::to_string);
            Some(Guide {
                language: words.next()?,
                command: words.collect(),
            })
        })
        .collect();
    ensure!(guides.len() == 4, "prepare.sh gave {guides:?}");
    Ok(guides)
}

/// A pod's resolver configuration in namespace `ns` (what the kubelet writes for
/// `dnsPolicy: ClusterFirst`).
pub fn pod_resolv_conf(ns: &str) -> String {
    format!(
        "search {ns}.svc.cluster.local svc.cluster.local cluster.local\n\
         nameserver {CLUSTER_DNS}\noptions ndots:5\n"
    )
}

/// What an app's Deployment gives it for TLS cluster `cluster` in `ns`: the Service's name,
/// the user `app` with `password`, `ca.crt` of the cluster's TLS Secret `secret` mounted as a
/// file, and a pod's resolver. Its files live under the tool cache until [`Self::remove`].
pub struct AppEnvironment {
    dir: PathBuf,
    resolv: PathBuf,
    vars: Vec<(&'static str, String)>,
}

impl AppEnvironment {
    pub async fn of(
        client: &Client,
        ns: &str,
        cluster: &str,
        secret: &str,
        password: &str,
    ) -> anyhow::Result<Self> {
        let dir = built_dir().join(format!("{ns}-{cluster}"));
        std::fs::create_dir_all(&dir)?;
        let ca = dir.join("ca.crt");
        std::fs::write(
            &ca,
            crate::certs::secret_pem(client, ns, secret, "ca.crt").await?,
        )?;
        let resolv = dir.join("resolv.conf");
        std::fs::write(&resolv, pod_resolv_conf(ns))?;
        Ok(AppEnvironment {
            dir,
            resolv,
            vars: vec![
                ("VALKEY_HOST", names::cluster_hostname(cluster, ns)),
                ("VALKEY_PORT", "6379".to_string()),
                ("VALKEY_USERNAME", "app".to_string()),
                ("VALKEY_PASSWORD", password.to_string()),
                ("VALKEY_CA_FILE", ca.display().to_string()),
            ],
        })
    }

    /// Starts every guide, each writing keys `guide:<language>:<n>`.
    pub fn start_all(&self, guides: &[Guide]) -> anyhow::Result<Vec<Program>> {
        guides.iter().map(|g| Program::start(g, self)).collect()
    }

    pub fn remove(self) -> anyhow::Result<()> {
        Ok(std::fs::remove_dir_all(&self.dir)?)
    }
}

/// "python (valkey-py)": the language and the client library its guide uses.
pub fn client_name(language: &str) -> String {
    let library = match language {
        "python" => "valkey-py",
        "go" => "valkey-go",
        "java" => "Lettuce",
        "node" => "iovalkey",
        other => other,
    };
    format!("{language} ({library})")
}

/// The key prefix a guide's program writes under.
pub fn key_prefix(language: &str) -> String {
    format!("guide:{language}")
}

/// One running program: the writes it printed as acknowledged (with when each line came),
/// and what it said on stderr.
pub struct Program {
    pub language: String,
    child: Child,
    acknowledged: Arc<Mutex<Vec<(u64, Instant)>>>,
    complaints: Arc<Mutex<Vec<(String, Instant)>>>,
    started: Instant,
}

impl Program {
    fn start(guide: &Guide, app: &AppEnvironment) -> anyhow::Result<Self> {
        // unshare execs the shell in a new mount namespace, which binds the pod's resolver
        // configuration over /etc/resolv.conf for this program alone and execs it.
        let mut child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(&app.resolv)
            .args(&guide.command)
            .envs(app.vars.iter().map(|(k, v)| (*k, v.as_str())))
            .env("VALKEY_KEY_PREFIX", key_prefix(&guide.language))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {} program", guide.language))?;
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let complaints = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().context("stdout")?;
        let acks = acknowledged.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(n) = line.trim().parse::<u64>() {
                    acks.lock().unwrap().push((n, Instant::now()));
                }
            }
        });
        let stderr = child.stderr.take().context("stderr")?;
        let said = complaints.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                said.lock().unwrap().push((line, Instant::now()));
            }
        });
        Ok(Program {
            language: guide.language.clone(),
            child,
            acknowledged,
            complaints,
            started: Instant::now(),
        })
    }

    pub fn acknowledged_count(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// The writes acknowledged so far.
    pub fn acknowledged(&self) -> Vec<u64> {
        let acks = self.acknowledged.lock().unwrap();
        acks.iter().map(|(n, _)| *n).collect()
    }

    /// The longest time between two acknowledgements that ends within `from..to`.
    pub fn longest_pause_within(&self, from: Instant, to: Instant) -> Duration {
        let acks = self.acknowledged.lock().unwrap();
        acks.windows(2)
            .filter(|w| (from..=to).contains(&w[1].1))
            .map(|w| w[1].1 - w[0].1)
            .max()
            .unwrap_or_default()
    }

    /// The program's last words on stderr, for an error message.
    pub fn last_words(&self) -> String {
        let said = self.complaints.lock().unwrap();
        let last: Vec<&str> = said[said.len().saturating_sub(5)..]
            .iter()
            .map(|(l, _)| l.as_str())
            .collect();
        last.join("\n  ")
    }

    /// How many writes failed (and were retried) within `from..to`, and what the first of
    /// them said.
    pub fn failed_attempts_within(&self, from: Instant, to: Instant) -> (usize, Option<String>) {
        let said = self.complaints.lock().unwrap();
        let failed: Vec<&String> = said
            .iter()
            .filter(|(l, at)| l.contains("failed, retrying") && (from..=to).contains(at))
            .map(|(l, _)| l)
            .collect();
        (failed.len(), failed.first().map(|l| l.to_string()))
    }

    /// How many writes failed and were retried in all, and what the first failure said.
    pub fn failed_attempts(&self) -> (usize, Option<String>) {
        self.failed_attempts_within(self.started, Instant::now())
    }

    /// Stops the program (it writes until killed).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until every program has acknowledged `more` writes beyond what it had, failing with
/// the program's stderr if one exits or gets nothing acknowledged for 180 s.
pub async fn every_program_writes(
    programs: &mut [Program],
    more: usize,
    step: &str,
) -> anyhow::Result<()> {
    let from: Vec<usize> = programs.iter().map(Program::acknowledged_count).collect();
    let started = Instant::now();
    loop {
        let mut behind = Vec::new();
        for (p, from) in programs.iter_mut().zip(&from) {
            if let Some(status) = p.exited()? {
                bail!(
                    "the {} program exited ({status}) {step}:\n  {}",
                    p.language,
                    p.last_words()
                );
            }
            if p.acknowledged_count() < from + more {
                behind.push(&*p);
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
                        "{} ({} acknowledged in {:?}):\n  {}",
                        p.language,
                        p.acknowledged_count(),
                        p.started.elapsed(),
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
