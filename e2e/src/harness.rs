//! Helpers for end-to-end tests against the running local cluster: a client from the admin
//! kubeconfig, throwaway namespaces, polling with deadlines, kubectl.

use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The local cluster's state dir: `$LC_DIR`, else `<repo>/.localcluster` where `<repo>` is the
/// checkout the current directory is in (found by `e2e/versions.env`; `cargo test` runs in the
/// package dir). Resolved at run time: several checkouts may share one target dir.
pub fn lc_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LC_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Ok(cwd) = std::env::current_dir()
        && let Some(repo) = cwd
            .ancestors()
            .find(|dir| dir.join("e2e").join("versions.env").is_file())
    {
        return repo.join(".localcluster");
    }
    // This crate is <repo>/e2e.
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate is one level below the repository")
        .join(".localcluster")
}

/// A file's contents without surrounding whitespace (pid files, one-line state).
pub fn read_trimmed(p: &std::path::Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(p)?.trim().to_string())
}

/// The admin kubeconfig: `$KUBECONFIG` if set, else `$LC_DIR/kubeconfig`.
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| lc_dir().join("kubeconfig"))
}

/// A client for the local cluster; fails with a hint when it is not up.
pub async fn client() -> anyhow::Result<Client> {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).with_context(|| {
        format!(
            "no kubeconfig at {} — is the local cluster up? run `make up`",
            path.display()
        )
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    client
        .apiserver_version()
        .await
        .context("the local cluster's API server does not answer — run `make up`")?;
    Ok(client)
}

/// Where `e2e/tools/install.sh` caches the tools it builds.
pub fn tool_cache() -> PathBuf {
    std::env::var_os("VALKEY_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache")
                })
                .join("valkey-operator")
        })
}

/// promtool of the version pinned in `e2e/versions.env` (`make tools` builds it).
pub fn promtool() -> anyhow::Result<PathBuf> {
    pinned_tool("PROMTOOL_VERSION", "promtool")
}

/// helm of the version pinned in `e2e/versions.env` (`make up` installs it).
pub fn helm() -> anyhow::Result<PathBuf> {
    pinned_tool("HELM_VERSION", "helm")
}

/// The checkout the local cluster was brought up from.
pub fn repo_root() -> anyhow::Result<PathBuf> {
    lc_dir().parent().map(PathBuf::from).context("no checkout")
}

/// `<tool cache>/<name>-v<version>/bin/<name>`, the version `e2e/versions.env` pins as `var`.
fn pinned_tool(var: &str, name: &str) -> anyhow::Result<PathBuf> {
    let versions = repo_root()?.join("e2e/versions.env");
    let text = std::fs::read_to_string(&versions)
        .with_context(|| format!("reading {}", versions.display()))?;
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{var}=")))
        .with_context(|| format!("{var} in e2e/versions.env"))?;
    let path = tool_cache().join(format!("{name}-v{}/bin/{name}", version.trim()));
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: run `make tools`",
        path.display()
    );
    Ok(path)
}

/// kubectl of the pinned version (falls back to the one on PATH).
pub fn kubectl() -> Command {
    let cache = tool_cache();
    let pinned = std::fs::read_dir(&cache)
        .ok()
        .and_then(|dir| {
            dir.flatten()
                .map(|e| e.path().join("bin/kubectl"))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| PathBuf::from("kubectl"));
    let mut cmd = Command::new(pinned);
    cmd.env("KUBECONFIG", kubeconfig_path());
    cmd
}

/// Runs kubectl with `args`, returning stdout, or an error with stderr.
pub fn kubectl_run(args: &[&str]) -> anyhow::Result<String> {
    let out = kubectl().args(args).output().context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What kubectl said.
pub struct Outcome {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs kubectl with `args`, feeding `input` on stdin.
pub fn kubectl_input(args: &[&str], input: &str) -> anyhow::Result<Outcome> {
    let mut child = kubectl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(Outcome {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

pub fn kubectl_outcome(args: &[&str]) -> anyhow::Result<Outcome> {
    let out = kubectl().args(args).output().context("running kubectl")?;
    Ok(Outcome {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A namespace that is deleted when the test ends (pass or fail).
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> anyhow::Result<Self> {
        let name = format!("{prefix}-{}", random_suffix(5));
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        api.create(&PostParams::default(), &ns).await?;
        Ok(TestNamespace { name })
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Async drop is not a thing: hand the deletion to kubectl, without waiting.
        let _ = kubectl()
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .output();
    }
}

/// Deletes a cluster-scoped object by name, ignoring "not found".
pub async fn delete_cluster_scoped<K>(client: &Client, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Lowercase alphanumeric suffix for unique names.
pub fn random_suffix(len: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Polls `probe` every `every` until it returns `Ok(Some(v))`, or fails after `timeout` with
/// the last observation (what was being waited for and what was seen instead).
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut probe: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing observed yet");
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `f` every 500 ms until it yields Some, or panics after `timeout` ("timed out after
/// .. waiting for `what`"): for tests that assert by panicking rather than returning errors.
pub async fn wait_until<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Server-side applies every object of a multi-document YAML text (any kind the API server
/// knows, namespaced or not), as `kubectl apply --server-side` would.
pub async fn apply_yaml(client: &Client, text: &str) -> anyhow::Result<()> {
    use serde::Deserialize as _;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_json::to_value(serde_yaml_ng::Value::deserialize(doc)?)?;
        if value.is_null() {
            continue;
        }
        let obj: kube::api::DynamicObject = serde_json::from_value(value.clone())?;
        let gvk =
            kube::api::GroupVersionKind::try_from(obj.types.as_ref().context("apiVersion/kind")?)?;
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> =
            match (caps.scope, obj.metadata.namespace.as_deref()) {
                (kube::discovery::Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(client.clone(), ns, &resource)
                }
                _ => Api::all_with(client.clone(), &resource),
            };
        let name = obj.metadata.name.clone().context("metadata.name")?;
        api.patch(
            &name,
            &kube::api::PatchParams::apply("e2e").force(),
            &kube::api::Patch::Apply(&value),
        )
        .await?;
    }
    Ok(())
}
