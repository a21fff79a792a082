//! `kubectl valkey` (binary `kubectl-valkey`): what the menu resolves to and what a change
//! would roll, before making it, and a cluster's status. It runs with the user's kubeconfig
//! and RBAC only: a product team sees only what it can read.
//!
//! The pure parts ([`resolve`], [`impact`], [`status`]) lay out what the operator's own
//! resolution and rendering produce; [`read`] is the only module that talks to the API server.
//! See docs/plugin.md.

pub mod backups;
pub mod impact;
pub mod read;
pub mod resolve;
pub mod status;

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::api::{ValkeyConfig, ValkeyImage};
use crate::resolve::{MenuMap, MenuRef};

/// Exit code when `impact` finds members that would be replaced.
pub const EXIT_WOULD_ROLL: i32 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-valkey",
    bin_name = "kubectl valkey",
    version,
    about = "See what the Valkey menu resolves to, what a change would roll, and how a cluster is doing"
)]
pub struct Cli {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text", global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
    /// The operator's `maxConcurrentRollouts` for `impact` (default: read from the operator's
    /// settings ConfigMap when you may read it, else no limit).
    #[arg(long, global = true)]
    pub max_concurrent_rollouts: Option<usize>,
    /// Namespace the operator runs in (its settings ConfigMap is there).
    #[arg(long, global = true, default_value = "valkey-operator-system")]
    pub operator_namespace: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Yaml,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The merged config (which level set each key), image, rendered valkey.conf and ACL users.
    #[command(subcommand)]
    Resolve(ResolveCommand),
    /// The clusters a menu change would roll (exit code 3 when any would, 0 when none).
    #[command(subcommand)]
    Impact(ImpactCommand),
    /// Shards, members, rollout or migration progress and the last Events of a cluster.
    Status {
        /// `<name>` (in `-n`'s namespace, else the kubeconfig's), or `<namespace>/<name>`.
        cluster: String,
        /// The cluster's namespace, as with kubectl (`status my-cluster -n my-app`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// A cluster's backups, newest first: phase, size, keys, age, where they are or why they failed.
    Backups {
        /// `<name>` (in `-n`'s namespace, else the kubeconfig's), or `<namespace>/<name>`.
        cluster: String,
        /// The cluster's namespace, as with kubectl (`backups my-cluster -n my-app`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ResolveCommand {
    /// A ValkeyConfig along its baseRef chain.
    Config { name: String },
    /// A ValkeyCluster: exactly what the operator renders for it.
    Cluster {
        /// `<name>` (in `-n`'s namespace, else the kubeconfig's), or `<namespace>/<name>`.
        cluster: String,
        /// The cluster's namespace, as with kubectl (`status my-cluster -n my-app`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ImpactCommand {
    /// Repointing a ValkeyImage.
    Image {
        name: String,
        /// The new tag.
        #[arg(long)]
        to_tag: Option<String>,
        /// The new Valkey version (defaults to the current one).
        #[arg(long)]
        to_version: Option<String>,
        /// The edited ValkeyImage manifest.
        #[arg(short = 'f', long)]
        filename: Option<PathBuf>,
        /// Only clusters in this namespace (default: every namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// Editing a ValkeyConfig (every config inheriting from it is affected too).
    Config {
        name: String,
        /// The edited ValkeyConfig manifest.
        #[arg(short = 'f', long)]
        filename: Option<PathBuf>,
        /// Only clusters in this namespace (default: every namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
}

fn emit<T: Serialize>(
    output: Output,
    value: &T,
    text: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Text => print!("{}", text(value)),
        Output::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

/// Runs one command; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let client = kube::Client::try_default()
        .await
        .context("cannot reach the Kubernetes API with your kubeconfig")?;
    let default_ns = client.default_namespace().to_string();
    match &cli.command {
        Command::Resolve(ResolveCommand::Config { name }) => {
            run_resolve_config(&client, cli.output, name).await
        }
        Command::Resolve(ResolveCommand::Cluster { cluster, namespace }) => {
            let (ns, name) = cluster_key(cluster, namespace.as_deref(), &default_ns)?;
            run_resolve_cluster(&client, cli.output, &ns, &name).await
        }
        Command::Impact(command) => run_impact(&client, &cli, command).await,
        Command::Status { cluster, namespace } => {
            let (ns, name) = cluster_key(cluster, namespace.as_deref(), &default_ns)?;
            run_status(&client, cli.output, &ns, &name).await
        }
        Command::Backups { cluster, namespace } => {
            let (ns, name) = cluster_key(cluster, namespace.as_deref(), &default_ns)?;
            let api =
                kube::Api::<crate::api::backup::ValkeyBackup>::namespaced(client.clone(), &ns);
            let listed = api
                .list(&Default::default())
                .await
                .with_context(|| format!("cannot list ValkeyBackups in {ns}"))?;
            let report = backups::report(&ns, &name, &listed.items, crate::time::now_seconds());
            emit(cli.output, &report, backups::text)?;
            Ok(0)
        }
    }
}

/// `resolve config`.
async fn run_resolve_config(
    client: &kube::Client,
    output: Output,
    name: &str,
) -> anyhow::Result<i32> {
    let menu = read::menu(client).await?;
    let report = resolve::config_report(&menu, name)
        .map_err(|e| anyhow::anyhow!("ValkeyConfig {name} does not resolve: {e}"))?;
    emit(output, &report, resolve::text)?;
    Ok(0)
}

/// `resolve cluster`.
async fn run_resolve_cluster(
    client: &kube::Client,
    output: Output,
    ns: &str,
    name: &str,
) -> anyhow::Result<i32> {
    let menu = read::menu(client).await?;
    let live = read::cluster(client, ns, name).await?;
    let acl_file = read::acl_file(client, ns, name).await;
    let report = resolve::cluster_report(&menu, &live.cluster, &live.members, acl_file.as_deref())
        .map_err(|e| {
            anyhow::anyhow!(
                "ValkeyCluster {ns}/{name} does not resolve (the operator reports it Blocked): {e}"
            )
        })?;
    emit(output, &report, resolve::text)?;
    Ok(0)
}

/// `impact image|config`: [`EXIT_WOULD_ROLL`] when a cluster would roll.
async fn run_impact(
    client: &kube::Client,
    cli: &Cli,
    command: &ImpactCommand,
) -> anyhow::Result<i32> {
    let (namespace, before) = (
        match command {
            ImpactCommand::Image { namespace, .. } | ImpactCommand::Config { namespace, .. } => {
                namespace.clone()
            }
        },
        read::menu(client).await?,
    );
    let clusters = read::clusters(client, namespace.as_deref()).await?;
    let states: Vec<impact::ClusterState<'_>> = clusters
        .iter()
        .map(|c| impact::ClusterState {
            cluster: &c.cluster,
            members: &c.members,
        })
        .collect();
    let Some((change, after)) = proposed(command, &before)? else {
        return readers_of(cli.output, command, &states, &before);
    };
    let limit = match cli.max_concurrent_rollouts {
        Some(n) => Some(n),
        None => read::max_concurrent_rollouts(client, &cli.operator_namespace).await,
    };
    let result = impact::impact(change, &states, &before, &after, limit);
    emit(cli.output, &result, impact::text)?;
    Ok(if result.rolls() { EXIT_WOULD_ROLL } else { 0 })
}

/// `impact` without a change: the clusters that any change to the object would roll.
fn readers_of(
    output: Output,
    command: &ImpactCommand,
    states: &[impact::ClusterState<'_>],
    before: &MenuMap,
) -> anyhow::Result<i32> {
    let (kind, menu_ref) = match command {
        ImpactCommand::Image { name, .. } => ("ValkeyImage", MenuRef::Image(name.clone())),
        ImpactCommand::Config { name, .. } => ("ValkeyConfig", MenuRef::Config(name.clone())),
    };
    let readers = impact::readers(states, before, &menu_ref);
    let name = match &menu_ref {
        MenuRef::Image(n) | MenuRef::Config(n) | MenuRef::Role(n) => n,
    };
    let value = serde_json::json!({
        "change": format!("any change to {kind} {name}"),
        "readers": readers,
    });
    emit(output, &value, |_| {
        let mut out = format!(
            "no change given (--to-tag, -f): clusters reading {kind} {name}, which any change to its image, resources or settings would roll:\n"
        );
        for r in &readers {
            out.push_str(&format!("  {r}\n"));
        }
        if readers.is_empty() {
            out.push_str("  (none)\n");
        }
        out
    })?;
    Ok(if readers.is_empty() {
        0
    } else {
        EXIT_WOULD_ROLL
    })
}

/// `status`.
async fn run_status(
    client: &kube::Client,
    output: Output,
    ns: &str,
    name: &str,
) -> anyhow::Result<i32> {
    let live = read::cluster(client, ns, name).await?;
    let menu = read::menu(client).await.ok();
    let desired_hash = menu.as_ref().and_then(|c| {
        resolve::cluster_report(c, &live.cluster, &live.members, None)
            .ok()
            .and_then(|r| r.spec_hash)
    });
    let pods = read::member_pods(client, ns, name).await?;
    let zones = read::zones(client, &pods).await;
    let events = read::events(client, ns, name).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let report = status::report(&status::Inputs {
        cluster: &live.cluster,
        members: &live.members,
        pods: &pods,
        zones: &zones,
        events: &events,
        desired_hash: desired_hash.as_deref(),
        now,
    });
    emit(output, &report, status::text)?;
    Ok(0)
}

/// (namespace, name) of the cluster `key` names: `<ns>/<name>`, or `<name>` in `namespace`
/// (`-n`) or else `default_ns` (the kubeconfig's). A `-n` that contradicts `<ns>/` is an error.
pub fn cluster_key(
    key: &str,
    namespace: Option<&str>,
    default_ns: &str,
) -> anyhow::Result<(String, String)> {
    match (key.split_once('/'), namespace) {
        (Some((ns, _)), Some(n)) if ns != n => anyhow::bail!(
            "{key} names namespace {ns} but -n says {n}: give the namespace once (kubectl valkey status <name> -n <namespace>)"
        ),
        (Some((ns, name)), _) => Ok((ns.to_string(), name.to_string())),
        (None, Some(n)) => Ok((n.to_string(), key.to_string())),
        (None, None) => Ok((default_ns.to_string(), key.to_string())),
    }
}

/// The menu with the proposed change, and its description; `None` when no change was given.
pub fn proposed(
    command: &ImpactCommand,
    before: &MenuMap,
) -> anyhow::Result<Option<(String, MenuMap)>> {
    let mut after = before.clone();
    match command {
        ImpactCommand::Image {
            name,
            to_tag,
            to_version,
            filename,
            ..
        } => {
            let Some(current) = before.images.get(name).cloned() else {
                bail!("ValkeyImage {name} does not exist (kubectl get valkeyimages)");
            };
            let mut edited = match filename {
                Some(path) => read_manifest::<ValkeyImage>(path)?.spec,
                None => current.clone(),
            };
            if to_tag.is_none() && to_version.is_none() && filename.is_none() {
                return Ok(None);
            }
            if let Some(tag) = to_tag {
                edited.tag = tag.clone();
            }
            if let Some(version) = to_version {
                edited.version = version.clone();
            }
            let change = format!(
                "ValkeyImage {name}: {} (Valkey {}) -> {} (Valkey {})",
                current.image_reference(),
                current.version,
                edited.image_reference(),
                edited.version
            );
            after.images.insert(name.clone(), edited);
            Ok(Some((change, after)))
        }
        ImpactCommand::Config { name, filename, .. } => {
            let Some(path) = filename else {
                return Ok(None);
            };
            let edited = read_manifest::<ValkeyConfig>(path)?;
            after.configs.insert(name.clone(), edited.spec);
            Ok(Some((
                format!("ValkeyConfig {name} as in {}", path.display()),
                after,
            )))
        }
    }
}

fn read_manifest<K: serde::de::DeserializeOwned>(path: &PathBuf) -> anyhow::Result<K> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not a valid manifest", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, n: Option<&str>) -> anyhow::Result<(String, String)> {
        cluster_key(k, n, "from-kubeconfig")
    }

    #[test]
    fn a_cluster_is_named_as_kubectl_names_objects() {
        let pair = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        assert_eq!(key("c", None).unwrap(), pair("from-kubeconfig", "c"));
        assert_eq!(key("c", Some("my-app")).unwrap(), pair("my-app", "c"));
        assert_eq!(key("my-app/c", None).unwrap(), pair("my-app", "c"));
        assert_eq!(
            key("my-app/c", Some("my-app")).unwrap(),
            pair("my-app", "c")
        );
        let err = key("other/c", Some("my-app")).unwrap_err().to_string();
        assert!(err.contains("-n says my-app"), "{err}");
    }

    #[test]
    fn status_and_resolve_take_dash_n() {
        let cli = Cli::try_parse_from(["kubectl-valkey", "status", "my-cluster", "-n", "my-app"])
            .unwrap();
        assert!(matches!(
            cli.command,
            Command::Status { ref cluster, namespace: Some(ref n) } if cluster == "my-cluster" && n == "my-app"
        ));
        let cli = Cli::try_parse_from([
            "kubectl-valkey",
            "resolve",
            "cluster",
            "-n",
            "my-app",
            "my-cluster",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Resolve(ResolveCommand::Cluster { namespace: Some(ref n), .. }) if n == "my-app"
        ));
    }
}
