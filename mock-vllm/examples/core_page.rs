//! What one `/metrics` page costs when a simulator renders it from a
//! [`mock_vllm::core::VllmCore`]: a core under steady load (one request every 50 ms of
//! virtual time), scraped every simulated second; the wall time of the scrapes alone,
//! per dialect. Run with `cargo run --release -p mock-vllm --example core_page`.

use std::time::{Duration, Instant};

use mock_vllm::core::{Answer, Submitted, VllmCore};
use mock_vllm::validate::Api;
use mock_vllm::{Config, Dialect};

fn main() {
    for (dialect, dp) in [
        (Dialect::Compact, 1),
        (Dialect::Compact, 2),
        (Dialect::V0_10, 1),
        (Dialect::V0_11, 1),
    ] {
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
    let (mut scrape_wall, mut scrapes, mut bytes, mut ended) = (Duration::ZERO, 0u32, 0usize, 0);
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
            scrape_wall += t.elapsed();
            scrapes += 1;
        }
    }
    let per = scrape_wall / scrapes;
    println!(
        "{dialect} dp={data_parallel}: {scrapes} pages of {bytes} B, {:.2} us per page ({ended} requests ended)",
        per.as_secs_f64() * 1e6
    );
}
