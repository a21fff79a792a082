//! `valkey-operator`: one binary, several subcommands.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kubernetes operator for governed, sharded Valkey clusters.
#[derive(Parser)]
#[command(name = "valkey-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers and the admin server (/metrics, /healthz, /readyz).
    Run {
        /// Namespace of the operator's settings ConfigMap (valkey-operator-config).
        #[arg(long, env = "POD_NAMESPACE", default_value = "valkey-operator-system")]
        namespace: String,
        /// Address of the admin server.
        #[arg(long, env = "ADMIN_ADDR", default_value = "0.0.0.0:8080")]
        admin_addr: std::net::SocketAddr,
        #[command(flatten)]
        webhook: WebhookArgs,
        #[command(flatten)]
        leader: LeaderArgs,
    },
    /// Backup Jobs' work (the operator creates them; see docs/backup.md).
    Backup {
        #[command(subcommand)]
        action: BackupAction,
    },
    /// Check that the admission webhook answers through its Service over verified HTTPS, as
    /// the API server reaches it (the chart's `helm test`).
    CheckWebhook {
        /// The webhook's health URL through its Service.
        #[arg(long)]
        url: String,
        /// PEM file of the CA the webhook configuration trusts (its caBundle).
        #[arg(long)]
        ca_file: String,
    },
    /// Print the CustomResourceDefinitions of the valkey.gomomento.com API group as
    /// multi-document YAML (what `crds/` is generated from).
    Crd {
        /// Instead of printing, write one file per CRD (`<plural>.<group>.yaml`) into this
        /// directory.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum BackupAction {
    /// Copy the shards the plan in BACKUP_PLAN names into the object store, then write the
    /// manifest; the outcome goes to the termination message (BACKUP_OUTCOME_FILE).
    Run,
    /// Replay the backup RESTORE_PLAN names into the cluster's primaries; the outcome goes to
    /// the termination message (BACKUP_OUTCOME_FILE).
    Restore,
}

/// Leader election: one replica runs the controllers, every replica serves the webhooks.
#[derive(clap::Args)]
struct LeaderArgs {
    /// Compete for the leader Lease before starting the controllers. Turn off only when
    /// exactly one replica can ever run (a local `cargo run` against a cluster without the
    /// operator's Role for leases).
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Name of the Lease, in --namespace.
    #[arg(long, env = "LEADER_ELECTION_LEASE", default_value = valkey_operator::controller::leader::LEASE_NAME)]
    leader_election_lease: String,
    /// This replica's identity in the Lease. Default: the pod name (POD_NAME), else the host
    /// name and process id.
    #[arg(long, env = "POD_NAME")]
    leader_election_identity: Option<String>,
}

/// The admission webhook server (HTTPS), started on every replica.
#[derive(clap::Args)]
struct WebhookArgs {
    /// Address of the webhook server (HTTPS).
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    webhook_addr: std::net::SocketAddr,
    /// Serving certificate (PEM chain); reloaded when it changes on disk.
    #[arg(
        long,
        env = "WEBHOOK_CERT_FILE",
        default_value = "/tmp/k8s-webhook-server/serving-certs/tls.crt"
    )]
    webhook_cert: std::path::PathBuf,
    /// Serving key (PEM); reloaded when it changes on disk.
    #[arg(
        long,
        env = "WEBHOOK_KEY_FILE",
        default_value = "/tmp/k8s-webhook-server/serving-certs/tls.key"
    )]
    webhook_key: std::path::PathBuf,
    /// The only user allowed to create, update and delete ValkeyNodes. Default: the
    /// `valkey-operator` service account of --namespace.
    #[arg(long, env = "OPERATOR_USERNAME")]
    operator_username: Option<String>,
    /// Seconds between checks of the certificate files for changes.
    #[arg(long, env = "WEBHOOK_CERT_RELOAD_SECONDS", default_value_t = 10)]
    webhook_cert_reload_seconds: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            namespace,
            admin_addr,
            webhook,
            leader,
        } => run(namespace, admin_addr, webhook, leader),
        Command::Backup { action } => backup_run(action),
        Command::CheckWebhook { url, ca_file } => check_webhook(&url, &ca_file),
        Command::Crd { out_dir: None } => {
            print!("{}", valkey_operator::api::crd::all_yaml());
            ExitCode::SUCCESS
        }
        Command::Crd { out_dir: Some(dir) } => {
            for crd in valkey_operator::api::crd::all() {
                let path = dir.join(valkey_operator::api::crd::file_name(&crd));
                if let Err(err) = std::fs::write(&path, valkey_operator::api::crd::to_yaml(&crd)) {
                    eprintln!("error: cannot write {}: {err}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
    }
}

fn check_webhook(url: &str, ca_file: &str) -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let checked = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(valkey_operator::webhook::check::check(url, ca_file))
                .map_err(|e| e.to_string())
        });
    match checked {
        Ok(answer) => {
            println!("the webhook answers at {url}: {}", answer.trim());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn backup_run(action: BackupAction) -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let completed = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(async {
            let copy = async {
                match action {
                    BackupAction::Run => valkey_operator::backup::job::run().await,
                    BackupAction::Restore => valkey_operator::backup::restore_job::run().await,
                }
            };
            tokio::select! {
                completed = copy => Some(completed),
                // A drain, an eviction or a deletion: stop at once (as a container's pid 1 the
                // signal is otherwise ignored until the grace period's SIGKILL). An unfinished
                // multipart upload is no object; the Job's replacement pod starts over.
                () = valkey_operator::controller::leader::shutdown_signal() => None,
            }
        }),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            Some(false)
        }
    };
    match completed {
        Some(true) => ExitCode::SUCCESS,
        Some(false) => ExitCode::FAILURE,
        None => {
            eprintln!("stopped by SIGTERM before the copy ended");
            ExitCode::from(143)
        }
    }
}

fn run(
    namespace: String,
    admin_addr: std::net::SocketAddr,
    webhook: WebhookArgs,
    leader: LeaderArgs,
) -> ExitCode {
    let traces = valkey_operator::telemetry::init_logging();
    // One rustls crypto provider for the whole process (kube's client and the webhook server).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Kept until the end: background tasks run on while the spans are flushed, as before.
    let runtime = tokio::runtime::Runtime::new();
    let code = match &runtime {
        Ok(runtime) => runtime.block_on(operate(namespace, admin_addr, webhook, leader)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    };
    // Flush the last batch of spans (blocking; outside the runtime).
    if let Some(provider) = traces
        && let Err(e) = provider.shutdown()
    {
        eprintln!("warning: flushing traces: {e}");
    }
    code
}

/// The operator: the admin server and the webhook server on every replica, the controllers
/// on the leader (or on this replica alone without leader election), until they stop.
async fn operate(
    namespace: String,
    admin_addr: std::net::SocketAddr,
    webhook: WebhookArgs,
    leader: LeaderArgs,
) -> ExitCode {
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: cannot build a Kubernetes client (in-cluster config or KUBECONFIG): {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    // An API server that does not answer yet (it restarts with the operator) is waited for; a
    // ConfigMap that says something wrong fails at once.
    let patience = std::time::Duration::from_secs(120);
    let settings = match valkey_operator::settings::Settings::load_patiently(
        client.clone(),
        &namespace,
        patience,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: invalid operator settings: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(?settings, "starting valkey-operator");
    let metrics = std::sync::Arc::new(valkey_operator::telemetry::Metrics::new());
    let admin = spawn_admin(admin_addr, metrics.clone());
    let webhook_server = spawn_webhook(
        webhook,
        &namespace,
        client.clone(),
        metrics.clone(),
        (settings.version_floor, settings.watch_namespaces.clone()),
    );
    let election = election(leader, &namespace);
    let controllers = valkey_operator::controller::run::run(
        client.clone(),
        namespace.clone(),
        settings,
        metrics.clone(),
        election.clone(),
    );
    let result = match election {
        Some(election) => {
            valkey_operator::controller::leader::run_while_leading(
                client,
                election,
                metrics,
                controllers,
            )
            .await
        }
        None => controllers.await,
    };
    admin.abort();
    webhook_server.abort();
    exit_code(result)
}

/// The admin server (/metrics, /healthz, /readyz), for the life of the process.
fn spawn_admin(
    admin_addr: std::net::SocketAddr,
    metrics: std::sync::Arc<valkey_operator::telemetry::Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = valkey_operator::telemetry::serve_admin(admin_addr, metrics).await {
            // Without /healthz the kubelet restarts the process: say why first.
            tracing::error!(error = %e, %admin_addr, "admin server (/metrics, /healthz, /readyz) stopped");
        }
    })
}

/// The webhook server (HTTPS), on every replica, reading the menu from watch caches.
fn spawn_webhook(
    webhook: WebhookArgs,
    namespace: &str,
    client: kube::Client,
    metrics: std::sync::Arc<valkey_operator::telemetry::Metrics>,
    (version_floor, watch_namespaces): (
        valkey_operator::settings::VersionFloor,
        valkey_operator::scope::WatchScope,
    ),
) -> tokio::task::JoinHandle<()> {
    let webhook_settings = valkey_operator::webhook::WebhookSettings {
        addr: webhook.webhook_addr,
        cert: webhook.webhook_cert,
        key: webhook.webhook_key,
        operator_username: webhook
            .operator_username
            .unwrap_or_else(|| format!("system:serviceaccount:{namespace}:valkey-operator")),
        reload_interval: std::time::Duration::from_secs(webhook.webhook_cert_reload_seconds.max(1)),
    };
    let webhook_state = std::sync::Arc::new(valkey_operator::webhook::WebhookState {
        node_policy: valkey_operator::webhook::admission::node::NodePolicy::new(
            webhook_settings.operator_username.clone(),
        ),
        menu: std::sync::Arc::new(valkey_operator::webhook::admission::WatchedMenu::start(
            client,
            std::time::Duration::from_secs(3),
            watch_namespaces.clone(),
        )),
        metrics,
        version_floor,
        watch_namespaces,
    });
    tokio::spawn(async move {
        if let Err(e) = valkey_operator::webhook::serve(webhook_settings, webhook_state).await {
            tracing::error!(error = %e, "webhook server stopped");
        }
    })
}

/// The leader election to take part in, unless turned off.
fn election(
    leader: LeaderArgs,
    namespace: &str,
) -> Option<valkey_operator::controller::leader::Election> {
    leader.leader_election.then(|| {
        let identity = leader.leader_election_identity.unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "valkey-operator".into());
            format!("{host}-{}", std::process::id())
        });
        valkey_operator::controller::leader::Election {
            namespace: namespace.to_owned(),
            lease: leader.leader_election_lease,
            identity,
        }
    })
}

/// How the controllers ended, as the process's exit code (logged and printed).
fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => {
            tracing::info!(
                "exiting (code 0): the controllers stopped after SIGTERM or SIGINT, a normal shutdown"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "exiting (code 1)");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
