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
