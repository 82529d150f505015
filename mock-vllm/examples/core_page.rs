//! What one `/metrics` page costs when a simulator renders it from a
//! [`mock_vllm::core::VllmCore`]: a core under steady load (one request every 50 ms of
//! virtual time), scraped every simulated second; the wall time of each scrape alone
//! (median and fastest tenth), per dialect. Run with `cargo run --release -p mock-vllm --example core_page`.

use std::time::{Duration, Instant};

use mock_vllm::core::{Answer, Submitted, VllmCore};
use mock_vllm::validate::Api;
use mock_vllm::{Config, Dialect};

fn main() {
    // An optional argument keeps one dialect (e.g. `compact`), for profiling.
    let only: Option<Dialect> = std::env::args().nth(1).and_then(|a| a.parse().ok());
    for (dialect, dp) in [
        (Dialect::Compact, 1),
        (Dialect::Compact, 2),
        (Dialect::V0_10, 1),
        (Dialect::V0_11, 1),
    ] {
        if only.is_some_and(|o| o != dialect) {
            continue;
        }
        measure(dialect, dp);
    }
    fleet_memory(10_000);
}

/// Resident memory of `n` compact cores that each served a few requests and one
/// scrape (their page buffers filled), from `/proc/self/status`.
fn fleet_memory(n: u64) {
    let before = rss_kib();
    let mut fleet = Vec::new();
    for i in 0..n {
        let cfg = Config {
            dialect: Dialect::Compact,
            seed: i,
            ..Config::default()
        };
        let Ok(mut core) = VllmCore::new(cfg, 1.7e9, Duration::ZERO) else {
            return;
        };
        let body = br#"{"model":"mock-model","prompt":"hello there","max_tokens":8}"#;
        if let Ok(req) = core.parse(Api::Completions, body) {
            for k in 0..4 {
                core.submit(Duration::from_millis(k * 10), req);
            }
        }
        let _ = core.metrics(Duration::from_secs(1));
        fleet.push(core);
    }
    let after = rss_kib();
    println!(
        "{n} compact cores: {} KiB resident, {:.1} KiB each",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / n as f64
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn measure(dialect: Dialect, data_parallel: usize) {
    let cfg = Config {
        dialect,
        data_parallel,
        ..Config::default()
    };
    let mut core = match VllmCore::new(cfg, 1.7e9, Duration::ZERO) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("config: {e}");
            return;
        }
    };
    let body = br#"{"model":"mock-model","prompt":"a steady little prompt of a few words","max_tokens":32}"#;
    let req = match core.parse(Api::Completions, body) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("request: {}", e.message);
            return;
        }
    };
    let (mut times, mut bytes, mut ended) = (Vec::new(), 0usize, 0);
    let step = Duration::from_millis(50);
    let whole = Instant::now();
    let mut now = Duration::ZERO;
    // 2,000 simulated seconds: 40,000 requests, 2,000 scrapes.
    for i in 0..40_000u32 {
        now += step;
        if matches!(core.submit(now, req), Submitted::Accepted(_)) {
            ended += core.advance(now).len();
        }
        if i % 20 == 0 {
            let t = Instant::now();
            if let Answer::Reply(r) = core.metrics(now) {
                bytes = r.body.len();
            }
            times.push(t.elapsed());
        }
    }
    let whole = whole.elapsed();
    // The machine is shared: one scrape is short enough to run unpreempted most of the
    // time, so the median and the fastest tenth say what a page costs; a mean says
    // how busy the other processes were.
    times.sort();
    let at = |q: usize| {
        times
            .get(times.len() * q / 100)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    println!(
        "{dialect} dp={data_parallel}: {} pages of {bytes} B: median {:.2} us, p10 {:.2} us per page; \
         {ended} requests (up to 32 tokens) ended, {:.2} us per request with its scrapes (mean, whole loop)",
        times.len(),
        at(50),
        at(10),
        whole.as_secs_f64() * 1e6 / f64::from(ended.max(1) as u32),
    );
}
