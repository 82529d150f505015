//! `mock-etcd --listen 127.0.0.1:2379 [--user NAME:PASSWORD ...] [--token-ttl SECS] [--no-control]`
//!
//! Prints `listening on ADDR` as its first stdout line, then serves until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

#[derive(clap::Parser, Debug)]
#[command(
    name = "mock-etcd",
    about = "A fake etcd 3.4 v3 JSON gateway with fault injection"
)]
struct Args {
    /// Address to bind (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:2379")]
    listen: SocketAddr,
    /// Enable auth with this user (repeatable): NAME:PASSWORD.
    #[arg(long = "user", value_parser = parse_user)]
    users: Vec<(String, String)>,
    /// Simple-token idle TTL in seconds (etcd --auth-token-ttl).
    #[arg(long, default_value_t = 300)]
    token_ttl: u64,
    /// Minimum lease TTL in seconds (etcd derives 2 from its election timeout).
    #[arg(long, default_value_t = 2)]
    min_lease_ttl: i64,
    /// Do not serve the /_mock/ control API.
    #[arg(long)]
    no_control: bool,
}

fn parse_user(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((n, p)) if !n.is_empty() => Ok((n.to_string(), p.to_string())),
        _ => Err(format!("expected NAME:PASSWORD, got {s:?}")),
    }
}

#[tokio::main]
async fn main() {
    let args: Args = mock_kit::cli::parse_or_exit("mock-etcd");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let config = mock_etcd::Config {
        listen: args.listen,
        users: args.users,
        token_ttl: Duration::from_secs(args.token_ttl),
        control: !args.no_control,
        min_lease_ttl: args.min_lease_ttl,
        ..Default::default()
    };
    let etcd = match mock_etcd::start(config, mock_kit::Events::none("etcd")).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mock-etcd: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    // Caught from here on: a stop sent as soon as the address is read is graceful.
    let stop = mock_kit::cli::stop_signal();
    println!("listening on {}", etcd.addr());
    stop.await;
    etcd.stop().await;
}
