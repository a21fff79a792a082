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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { namespace, admin_addr } => run(namespace, admin_addr),
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

fn run(namespace: String, admin_addr: std::net::SocketAddr) -> ExitCode {
    valkey_operator::telemetry::init_logging();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async move {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: cannot build a Kubernetes client (in-cluster config or KUBECONFIG): {e}");
                return ExitCode::FAILURE;
            }
        };
        let settings = match valkey_operator::settings::Settings::load(client.clone(), &namespace).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: invalid operator settings: {e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(?settings, "starting valkey-operator");
        let metrics = std::sync::Arc::new(valkey_operator::telemetry::Metrics::new());
        let admin = tokio::spawn(valkey_operator::telemetry::serve_admin(admin_addr, metrics.clone()));
        let result = valkey_operator::controller::run::run(client, settings, metrics).await;
        admin.abort();
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}
