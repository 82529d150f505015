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
        "{dialect} dp={data_parallel}: {} pages of {bytes} B: median {:.2} us, p10 {:.2} us per page ({ended} requests ended)",
        times.len(),
        at(50),
        at(10),
    );
}
