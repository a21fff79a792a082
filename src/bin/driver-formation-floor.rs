//! Formation floor: how long forming a 3-primary x 1-replica Valkey cluster takes with
//! driver calls alone, from 6 fresh local `valkey-server`s to `cluster_state:ok` on every
//! member with every replica's link up. `make bench` sets the operator's time-to-Active
//! next to this figure.
//!
//! Usage: `driver-formation-floor [--build 9.0|9.1] [--runs N] [--shards S]`
//! Prints one `formation_floor_seconds=<s>` line per run, then the median as
//! `formation_floor_median_seconds=<s>`. Binaries are found as the driver tests find them
//! (`VALKEY_SERVER_9_0` / `VALKEY_SERVER_9_1` or the e2e tool cache).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use valkey_operator::driver::testing::{HarnessError, LocalServers, ValkeyBuild, form_cluster};
use valkey_operator::driver::{DriverConfig, FredDriver};

struct Args {
    build: ValkeyBuild,
    runs: usize,
    shards: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        build: ValkeyBuild::V9_0,
        runs: 1,
        shards: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--build" => {
                args.build = match value()?.as_str() {
                    "9.0" => ValkeyBuild::V9_0,
                    "9.1" => ValkeyBuild::V9_1,
                    other => return Err(format!("unknown build {other:?} (9.0 or 9.1)")),
                }
            }
            "--runs" => {
                args.runs = value()?
                    .parse()
                    .map_err(|_| "--runs takes a number".to_owned())?
            }
            "--shards" => {
                args.shards = value()?
                    .parse()
                    .map_err(|_| "--shards takes a number".to_owned())?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: driver-formation-floor [--build 9.0|9.1] [--runs N] \
                            [--shards S]"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.runs == 0 || args.shards == 0 {
        return Err("--runs and --shards must be at least 1".to_owned());
    }
    Ok(args)
}

async fn one_run(args: &Args) -> Result<(Duration, Duration, String), HarnessError> {
    let members = args.shards * 2;
    let started = Instant::now();
    let servers = LocalServers::start(args.build, members).await?;
    let start_time = started.elapsed();
    let driver = FredDriver::new(DriverConfig::new(servers.credentials.clone()));
    let formed = Instant::now();
    let formation = form_cluster(
        &driver,
        &servers.addrs(),
        args.shards,
        Duration::from_secs(300),
    )
    .await?;
    let phases = formation
        .phases
        .iter()
        .map(|(name, d)| format!("{name}={:.3}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ");
    Ok((start_time, formed.elapsed(), phases))
    // `servers` dropped here: every process killed, every directory removed.
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut figures = Vec::with_capacity(args.runs);
    for run in 1..=args.runs {
        match one_run(&args).await {
            Ok((start, form, phases)) => {
                println!(
                    "run={run} build={:?} shards={} replicas_per_shard=1 \
                     servers_start_seconds={:.3} formation_floor_seconds={:.3} phases: {phases}",
                    args.build,
                    args.shards,
                    start.as_secs_f64(),
                    form.as_secs_f64()
                );
                figures.push(form.as_secs_f64());
            }
            Err(e) => {
                eprintln!("run {run} failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    figures.sort_by(f64::total_cmp);
    println!(
        "formation_floor_median_seconds={:.3}",
        figures[figures.len() / 2]
    );
    ExitCode::SUCCESS
}
