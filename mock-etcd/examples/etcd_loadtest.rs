//! Load test: sustained puts and keepalives with 10,000 live leases, against mock-etcd
//! and against a real etcd 3.4 started on loopback, side by side in one run.
//!
//! `cargo run --release -p mock-etcd --example etcd_loadtest`
//!
//! Each target gets the same work: grant N leases (TTL 60 s) and put one key per lease
//! (setup, timed separately), then C concurrent clients alternate a put of a leased key
//! and a single-request keepalive (what a registration sidecar sends), for at most
//! `LOADTEST_SECS` seconds or `LOADTEST_MAX_OPS` operations. Every request must answer
//! 200; errors are counted and reported. Tunables (env): LOADTEST_LEASES (10000),
//! LOADTEST_CONCURRENCY (64), LOADTEST_SECS (5), LOADTEST_MAX_OPS (2000000).

#[path = "../tests/support/real_etcd.rs"]
mod real_etcd;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Outcome {
    setup: Duration,
    ops: u64,
    errors: u64,
    elapsed: Duration,
}

impl Outcome {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

async fn post(http: &reqwest::Client, url: &str, body: String) -> bool {
    match http.post(url).body(body).send().await {
        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}

async fn drive(base: &str, leases: u64, concurrency: u64, secs: u64, max_ops: u64) -> Outcome {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(concurrency as usize)
        .build()
        .expect("http client");
    // Setup: explicit lease IDs (1..=N) so both targets get the same keys and leases.
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(1));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (http, next, errors, base) =
            (http.clone(), next.clone(), errors.clone(), base.to_string());
        tasks.push(tokio::spawn(async move {
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id > leases {
                    break;
                }
                let ok = post(
                    &http,
                    &format!("{base}/v3/lease/grant"),
                    format!(r#"{{"ID":{id},"TTL":60}}"#),
                )
                .await
                    && post(
                        &http,
                        &format!("{base}/v3/kv/put"),
                        format!(
                            r#"{{"key":"{}","value":"{}","lease":{id}}}"#,
                            b64(&format!("XLLM:DEFAULT:10.0.{}.{}:8000", id / 256, id % 256)),
                            b64(r#"{"name":"x","type":0}"#)
                        ),
                    )
                    .await;
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let setup = started.elapsed();
    // Sustained phase: bounded in time and in count.
    let ops = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let (http, ops, errors, base) =
            (http.clone(), ops.clone(), errors.clone(), base.to_string());
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while Instant::now() < deadline && ops.load(Ordering::Relaxed) < max_ops {
                let id = i % leases + 1;
                let ok = if i % 2 == 0 {
                    post(
                        &http,
                        &format!("{base}/v3/lease/keepalive"),
                        format!(r#"{{"ID":{id}}}"#),
                    )
                    .await
                } else {
                    post(
                        &http,
                        &format!("{base}/v3/kv/put"),
                        format!(
                            r#"{{"key":"{}","value":"{}","lease":{id}}}"#,
                            b64(&format!("XLLM:DEFAULT:10.0.{}.{}:8000", id / 256, id % 256)),
                            b64(&format!(r#"{{"name":"x","type":0,"n":{i}}}"#))
                        ),
                    )
                    .await
                };
                if ok {
                    ops.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                i += concurrency;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Outcome {
        setup,
        ops: ops.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    }
}

fn report(name: &str, o: &Outcome, leases: u64) {
    println!(
        "{name:>10}: setup {leases} leases+keys in {:>6.2} s | sustained {:>8} ops in {:>5.2} s = {:>9.0} ops/s | errors {}",
        o.setup.as_secs_f64(),
        o.ops,
        o.elapsed.as_secs_f64(),
        o.rate(),
        o.errors
    );
}

fn main() {
    let leases = env("LOADTEST_LEASES", 10_000);
    let concurrency = env("LOADTEST_CONCURRENCY", 64).max(1);
    let secs = env("LOADTEST_SECS", 5).clamp(1, 120);
    let max_ops = env("LOADTEST_MAX_OPS", 2_000_000);
    println!("loadtest: {leases} live leases, {concurrency} clients, {secs} s or {max_ops} ops per target");

    // The fake runs on its own runtime, as it would in its own process.
    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = fake_rt
        .block_on(mock_etcd::start(
            mock_etcd::Config::default(),
            mock_kit::Events::none("etcd"),
        ))
        .expect("mock-etcd starts");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    client_rt.block_on(async {
        let real = real_etcd::RealEtcd::start(&["--quota-backend-bytes", "8589934592"]).await;
        let real_outcome = match &real {
            Some(r) => Some(drive(&r.url, leases, concurrency, secs, max_ops).await),
            None => {
                println!("real etcd: skipped (etcd not found; apt-get install etcd-server)");
                None
            }
        };
        drop(real);
        let fake_outcome = drive(&fake.url(), leases, concurrency, secs, max_ops).await;
        if let Some(r) = &real_outcome {
            report("real etcd", r, leases);
        }
        report("mock-etcd", &fake_outcome, leases);
        if let Some(r) = &real_outcome {
            println!(
                "ratio: mock-etcd / real etcd = {:.1}x (goal >= 5x)",
                fake_outcome.rate() / r.rate().max(1e-9)
            );
        }
    });
    fake_rt.block_on(fake.stop());
}
