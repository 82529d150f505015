//! `scenarios`: run the fault scenario library against the mock cluster.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "scenarios",
    about = "Fault scenarios for vllm-sidecar against a mock xllm cluster."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenario files (or built-in names); all built-ins when none are given.
    Run(scenarios::cli::RunArgs),
    /// List the built-in scenarios.
    List,
    /// Start a cluster, print every endpoint, wait for Ctrl-C.
    Up(scenarios::cli::UpArgs),
    /// Run the library (real mode) against any sidecar (a profile or a command line)
    /// and write a conformance report.
    Conform(scenarios::conform::ConformArgs),
    /// Random fault schedules in virtual time; shrink and write each violation
    /// (`explore merge DIR...` merges the summaries of a sharded sweep).
    Explore(scenarios::cli::ExploreArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let msg = e.render().to_string();
            let line = msg
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments");
            eprintln!("scenarios: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "off,scenarios=warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("scenarios: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match cli.command {
        Command::Run(args) => rt.block_on(scenarios::cli::run(args)),
        Command::List => scenarios::cli::list(),
        Command::Up(args) => rt.block_on(scenarios::cli::up(args)),
        Command::Conform(args) => rt.block_on(scenarios::conform::conform(args)),
        Command::Explore(args) => {
            scenarios::cli::explore(args, &scenarios::simrun::run_scenario_sim)
        }
    };
    ExitCode::from(code)
}
