//! `vllm-sidecar`: parse the flags, then run the sidecar (or the `parse` / `preview`
//! tools). A flag or configuration error is one line on stderr and exit code 2.

use clap::{Parser, Subcommand};

use sidecar::config::{Config, RunArgs};
use sidecar::tools::{ParseArgs, PreviewArgs};

#[derive(Parser)]
#[command(
    name = "vllm-sidecar",
    version,
    about = "Registers a vLLM server with xllm-service (etcd lease) and reports its load.",
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Parse a Prometheus/OpenMetrics page and print what the sidecar would read.
    Parse(ParseArgs),
    /// Scrape a live /metrics and print the heartbeats it would send.
    Preview(PreviewArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            std::process::exit(0);
        }
        Err(e) => usage_error(&e.render().to_string()),
    };
    let code = match cli.command {
        Some(Command::Parse(args)) => sidecar::tools::run_parse(args),
        Some(Command::Preview(args)) => sidecar::tools::run_preview(args),
        None => run(cli.run),
    };
    std::process::exit(code);
}

fn run(args: RunArgs) -> i32 {
    let config = match Config::from_args(args) {
        Ok(config) => config,
        Err(e) => usage_error(&e.to_string()),
    };
    sidecar::logging::init(&config.log_level, config.log_format);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => fail(&format!("cannot start the runtime: {e}")),
    };
    let code = rt.block_on(async {
        let (trigger, shutdown) = sidecar::shutdown::channel();
        tokio::spawn(sidecar::shutdown::on_signals(trigger));
        match sidecar::run(config, shutdown).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                say(&format!("cannot start: {e}"));
                1
            }
        }
    });
    // Exchanges still in flight (a hung etcd after --shutdown-timeout) are abandoned.
    rt.shutdown_background();
    code
}

/// The sidecar waits on a few sockets at a time and computes little: one thread is
/// plenty, and keeps memory small.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Exit 2 with the first line of the message (clap's usage text is dropped).
fn usage_error(message: &str) -> ! {
    let line = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid arguments");
    let line = line.strip_prefix("error: ").unwrap_or(line);
    say(line);
    std::process::exit(2);
}

fn fail(message: &str) -> ! {
    say(message);
    std::process::exit(1);
}

/// One line on stderr. Unlike `eprintln!`, a closed stderr (EPIPE) is not a panic: the
/// exit code must stay the one that says what happened.
fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "vllm-sidecar: {message}");
}
