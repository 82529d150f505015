//! `mock-vllm`: serve a fake vLLM until SIGINT/SIGTERM. Prints `listening on ADDR` first.

use std::net::SocketAddr;
use std::time::Duration;

use mock_vllm::{Config, Dialect};

#[derive(clap::Parser, Debug)]
#[command(name = "mock-vllm", about = "A CPU-only fake vLLM OpenAI server")]
struct Args {
    /// Address to bind (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:18000")]
    listen: SocketAddr,
    /// Served model name.
    #[arg(long, default_value = "mock-model")]
    model: String,
    #[arg(long, default_value_t = 256)]
    max_num_seqs: usize,
    /// Waiting-queue bound per engine (429 beyond).
    #[arg(long, default_value_t = 100_000)]
    max_waiting: usize,
    #[arg(long, default_value_t = 1_000_000)]
    kv_capacity_tokens: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 1)]
    data_parallel: usize,
    /// v0, v0.10, v0.11, v0.33, v0.34, openmetrics or compact.
    #[arg(long, default_value = "v0.34")]
    metrics_dialect: Dialect,
    #[arg(long, default_value_t = 0)]
    startup_delay_ms: u64,
    /// Turn the /_mock control API off.
    #[arg(long)]
    no_control: bool,
    #[arg(long, default_value_t = 8192)]
    max_model_len: u32,
    /// Prefill fixed cost.
    #[arg(long, default_value_t = 20.0)]
    prefill_overhead_ms: f64,
    /// Prefill cost per prompt token.
    #[arg(long, default_value_t = 0.05)]
    prefill_per_token_ms: f64,
    /// Inter-token latency with an empty batch.
    #[arg(long, default_value_t = 10.0)]
    itl_ms: f64,
    /// Jitter fraction in [0, 1).
    #[arg(long, default_value_t = 0.1)]
    jitter: f64,
    /// A full batch is 1+this times slower.
    #[arg(long, default_value_t = 0.5)]
    batch_slowdown: f64,
}

fn ms(name: &str, v: f64) -> Duration {
    match Duration::try_from_secs_f64(v / 1000.0) {
        Ok(d) => d,
        Err(_) => {
            eprintln!("mock-vllm: --{name} must be a finite number >= 0");
            std::process::exit(2);
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Args = mock_kit::cli::parse_or_exit("mock-vllm");
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = Config {
        listen: args.listen,
        model: args.model,
        max_num_seqs: args.max_num_seqs,
        max_waiting: args.max_waiting,
        kv_capacity_tokens: args.kv_capacity_tokens,
        seed: args.seed,
        data_parallel: args.data_parallel,
        dialect: args.metrics_dialect,
        startup_delay: Duration::from_millis(args.startup_delay_ms),
        control: !args.no_control,
        max_model_len: args.max_model_len,
        prefill_overhead: ms("prefill-overhead-ms", args.prefill_overhead_ms),
        prefill_per_token: ms("prefill-per-token-ms", args.prefill_per_token_ms),
        inter_token_latency: ms("itl-ms", args.itl_ms),
        jitter: args.jitter,
        batch_slowdown: args.batch_slowdown,
        ..Config::default()
    };
    if let Err(e) = config.validate() {
        eprintln!("mock-vllm: {e}");
        std::process::exit(2);
    }
    let events = mock_kit::Events::none(format!("vllm:{}", args.listen));
    let server = match mock_vllm::start(config, events).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mock-vllm: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    // Caught from here on: a stop sent as soon as the address is read is graceful.
    let stop = mock_kit::cli::stop_signal();
    println!("listening on {}", server.addr());
    stop.await;
    server.stop().await;
}
