//! `kubectl valkey`: the kubectl plugin (kubectl finds `kubectl-valkey` on the PATH). Logic in
//! `valkey_operator::plugin`; see docs/plugin.md.

use std::process::ExitCode;

use clap::Parser;
use valkey_operator::plugin::{Cli, run};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
