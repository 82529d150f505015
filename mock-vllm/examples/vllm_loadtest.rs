//! Bounded load test: how many simulated requests one mock-vllm process holds in flight,
//! and how many short requests per second it serves, over loopback.
//!
//! `cargo run --release -p mock-vllm --example vllm_loadtest [-- IN_FLIGHT SECONDS CONNS]`
//!
//! Client and server share this process (and its cores); the client is a minimal
//! keep-alive HTTP/1.1 writer/reader so most of the CPU goes to the server.

use std::time::{Duration, Instant};

use mock_vllm::{Config, MockVllm};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One keep-alive connection sending POSTs and reading Content-Length answers.
struct Conn {
    stream: BufReader<TcpStream>,
    addr: String,
}

impl Conn {
    async fn open(addr: &str) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn {
            stream: BufReader::new(s),
            addr: addr.to_string(),
        })
    }

    /// POST `body` to `path`; answers (status, body length).
    async fn post(&mut self, path: &str, body: &str) -> std::io::Result<(u16, usize)> {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(req.as_bytes()).await?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut len = 0usize;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(std::io::Error::other("closed"));
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0u8; len];
        self.stream.read_exact(&mut buf).await?;
        Ok((status, len))
    }
}

async fn in_flight(target: usize) {
    let server = mock_vllm::start(
        Config {
            max_num_seqs: target,
            max_waiting: target,
            kv_capacity_tokens: 100_000_000,
            inter_token_latency: Duration::from_millis(20),
            prefill_overhead: Duration::from_millis(20),
            ..Config::default()
        },
        mock_kit::Events::none("vllm:loadtest"),
    )
    .await
    .expect("start");
    let addr = server.addr().to_string();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(target);
    for _ in 0..target {
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(&addr).await?;
            // ~100 tokens at 20-30 ms each: two to three seconds per request.
            c.post(
                "/v1/completions",
                r#"{"prompt":"hello there","max_tokens":100,"ignore_eos":true}"#,
            )
            .await
        }));
    }
    let peak = watch_peak(&server, started, Duration::from_secs(60), target).await;
    let mut ok = 0;
    for t in tasks {
        if let Ok(Ok((200, _))) = t.await {
            ok += 1;
        }
    }
    println!(
        "in-flight: {target} concurrent 200-token requests: peak running+waiting {peak}, {ok} answered 200, all done in {:.2?}",
        started.elapsed()
    );
    server.stop().await;
}

/// `n` concurrent SSE streams of 50 tokens at 50 ms: n * 20 chunks per second.
async fn streaming(n: usize) {
    let server = mock_vllm::start(
        Config {
            max_num_seqs: n,
            max_waiting: n,
            kv_capacity_tokens: 100_000_000,
            inter_token_latency: Duration::from_millis(50),
            ..Config::default()
        },
        mock_kit::Events::none("vllm:loadtest"),
    )
    .await
    .expect("start");
    let addr = server.addr().to_string();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let s = TcpStream::connect(&addr).await?;
            let mut s = BufReader::new(s);
            let body = r#"{"prompt":"hi","max_tokens":50,"ignore_eos":true,"stream":true}"#;
            let req = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.get_mut().write_all(req.as_bytes()).await?;
            let mut all = Vec::new();
            s.read_to_end(&mut all).await?;
            let text = String::from_utf8_lossy(&all);
            Ok::<usize, std::io::Error>(text.matches("\"text\"").count())
        }));
    }
    let peak = watch_peak(&server, started, Duration::from_secs(60), n).await;
    let (mut ok, mut tokens) = (0, 0);
    for t in tasks {
        if let Ok(Ok(k)) = t.await {
            ok += usize::from(k == 50);
            tokens += k;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "streaming: {n} concurrent SSE streams x 50 tokens: peak {peak} in flight, {ok} complete, {tokens} chunks in {secs:.2} s = {:.0} chunks/s",
        tokens as f64 / secs
    );
    server.stop().await;
}

async fn watch_peak(server: &MockVllm, started: Instant, limit: Duration, target: usize) -> u64 {
    let mut peak = 0;
    while started.elapsed() < limit {
        let s = server.state();
        let now = s["engines"][0]["running"].as_u64().unwrap_or(0)
            + s["engines"][0]["waiting"].as_u64().unwrap_or(0);
        peak = peak.max(now);
        if peak > 0 && now == 0 || peak as usize >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak
}

async fn short_rps(seconds: u64, conns: usize, prefill: Duration) {
    let server = mock_vllm::start(
        Config {
            max_num_seqs: 1024,
            prefill_overhead: prefill,
            prefill_per_token: Duration::ZERO,
            inter_token_latency: Duration::ZERO,
            ..Config::default()
        },
        mock_kit::Events::none("vllm:loadtest"),
    )
    .await
    .expect("start");
    let addr = server.addr().to_string();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut errors = 0u64;
            let Ok(mut c) = Conn::open(&addr).await else {
                return (0, 1);
            };
            while Instant::now() < deadline && n < 10_000_000 {
                match c
                    .post("/v1/completions", r#"{"prompt":"hi","max_tokens":1}"#)
                    .await
                {
                    Ok((200, _)) => n += 1,
                    _ => errors += 1,
                }
            }
            (n, errors)
        }));
    }
    let (mut n, mut errors) = (0, 0);
    for t in tasks {
        if let Ok((a, b)) = t.await {
            n += a;
            errors += b;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "short requests (prefill {prefill:?}, max_tokens 1): {n} in {secs:.2} s over {conns} keep-alive connections = {:.0} req/s ({errors} errors)",
        n as f64 / secs
    );
    server.stop().await;
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let target = arg(1, 5000) as usize;
    let seconds = arg(2, 5).min(60);
    let conns = arg(3, 64) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        in_flight(target.min(20_000)).await;
        streaming(2000).await;
        short_rps(seconds, conns.min(4096), Duration::ZERO).await;
        short_rps(seconds, conns.min(4096) * 4, Duration::from_millis(2)).await;
    });
}
