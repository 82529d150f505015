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
    /// Random fault schedules in virtual time; shrink and write each violation
    /// (`explore merge DIR...` merges the summaries of a sharded sweep).
    Explore(scenarios::cli::ExploreArgs),
}

/// Placeholder until the virtual-time runner lands: every schedule is skipped.
fn not_yet_simulated(
    sc: &scenarios::spec::Scenario,
    file: &str,
    opts: &scenarios::run::RunOptions,
) -> scenarios::report::Outcome {
    scenarios::report::Outcome {
        name: sc.name.clone(),
        file: file.to_string(),
        seed: opts.seed.unwrap_or(sc.seed),
        status: "skipped".into(),
        skip_reason: Some("the virtual-time runner is not built in yet".into()),
        wall_ms: 0,
        instances: sc.topology.instances,
        etcd: String::new(),
        verdicts: Vec::new(),
        recoveries: Vec::new(),
        actions: Vec::new(),
        rerun: String::new(),
        samples: Vec::new(),
        episodes: Vec::new(),
    }
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
        Command::Explore(args) => scenarios::cli::explore(args, &not_yet_simulated),
    };
    ExitCode::from(code)
}
