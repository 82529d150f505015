//! `mock-master`: run the fake xllm-service master until SIGINT/SIGTERM. Prints
//! `listening on ADDR` first.

use std::net::SocketAddr;
use std::time::Duration;

#[derive(clap::Parser)]
#[command(
    name = "mock-master",
    about = "A fake xllm-service master (heartbeats, instance states, routing)"
)]
struct Args {
    /// Address to serve on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:9998")]
    listen: SocketAddr,
    /// etcd v3 gateway endpoints, comma-separated.
    #[arg(long, default_value = "127.0.0.1:2379", value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    #[arg(long, default_value = "")]
    etcd_namespace: String,
    /// Token heartbeats must carry in X-Internal-Token (empty: none).
    #[arg(long, env = "XLLM_INTERNAL_API_TOKEN", hide_env_values = true)]
    internal_api_token: Option<String>,
    #[arg(long, default_value_t = 2)]
    probe_attempts: u32,
    #[arg(long, default_value_t = 1000)]
    probe_timeout_ms: u64,
    #[arg(long, default_value_t = 100)]
    probe_interval_ms: u64,
    #[arg(long, default_value_t = 3000)]
    lease_lost_timeout_ms: u64,
    #[arg(long, default_value_t = 15000)]
    suspect_window_ms: u64,
    #[arg(long, default_value_t = 3000)]
    publish_interval_ms: u64,
    /// Serve no /_mock/ control API.
    #[arg(long)]
    no_control: bool,
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
    /// etcd user to authenticate as (empty: etcd auth off).
    #[arg(long, env = "ETCD_USERNAME", default_value = "")]
    etcd_username: String,
    /// Password of --etcd-username.
    #[arg(
        long,
        env = "ETCD_PASSWORD",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    etcd_password: String,
    /// Replica mode: register a service key and run for master through etcd; only the
    /// elected replica publishes LOADMETRICS (off: the single master, always publishing).
    #[arg(long)]
    elect: bool,
    /// This replica's `<ip>:<rpc port>` in etcd (xllm-service's RPC port, not --listen's).
    #[arg(
        long,
        default_value = mock_master::config::DEFAULT_SERVICE_NAME,
        value_parser = mock_master::config::check_service_name
    )]
    service_name: String,
    /// TTL of the service and MASTER leases, in seconds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=3600))]
    election_ttl_secs: u64,
}

#[tokio::main]
async fn main() {
    let args: Args = mock_kit::cli::parse_or_exit("mock-master");
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = mock_master::Config {
        listen: args.listen,
        etcd_endpoints: args.etcd_endpoints,
        etcd_namespace: args.etcd_namespace,
        token: args.internal_api_token,
        probe_attempts: args.probe_attempts,
        probe_timeout: Duration::from_millis(args.probe_timeout_ms),
        probe_interval: Duration::from_millis(args.probe_interval_ms),
        lease_lost_timeout: Duration::from_millis(args.lease_lost_timeout_ms),
        suspect_window: Duration::from_millis(args.suspect_window_ms),
        publish_interval: Duration::from_millis(args.publish_interval_ms),
        control: !args.no_control,
        max_body_bytes: args.max_body_bytes,
        etcd_username: args.etcd_username,
        etcd_password: args.etcd_password,
        elect: args.elect,
        service_name: args.service_name,
        election_ttl: Duration::from_secs(args.election_ttl_secs),
        ..Default::default()
    };
    let master = match mock_master::start(config, mock_kit::Events::none("master")).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mock-master: {e}");
            std::process::exit(1);
        }
    };
    // Caught from here on: a stop sent as soon as the address is read is graceful.
    let stop = mock_kit::cli::stop_signal();
    println!("listening on {}", master.addr());
    stop.await;
    master.stop().await;
}
