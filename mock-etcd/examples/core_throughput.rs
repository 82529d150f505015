//! How fast the core answers the sidecar's calls through its wire form, without HTTP:
//! what a fleet simulation pays per etcd call.
//!
//! `cargo run --release -p mock-etcd --example core_throughput [LEASES] [ROUNDS]`
//! grants LEASES leases (default 10,000) and puts one key on each, then sends ROUNDS
//! (default 20) keepalives to every lease through `EtcdCore::handle_json`, advancing
//! virtual time 2 s per round and expiring what is due; prints calls per second.

use std::time::{Duration, Instant};

use mock_etcd::{Config, EtcdCore};

fn arg(i: usize, default: usize) -> usize {
    match std::env::args().nth(i) {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("core_throughput: not a count: {s}");
            std::process::exit(2)
        }),
    }
}

fn main() {
    let leases = arg(1, 10_000);
    let rounds = arg(2, 20);
    let mut core = EtcdCore::new(Config::default(), 1_764_590_000_000, 1);
    let mut now = Duration::ZERO;
    let started = Instant::now();
    let mut ids = Vec::with_capacity(leases);
    for i in 0..leases {
        let a = core.handle_json("/v3/lease/grant", None, br#"{"TTL":6,"ID":0}"#, now);
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
        let id = v["ID"].as_str().unwrap_or("0").to_string();
        let body = format!(
            r#"{{"key":"{}","value":"eyJhZGRyIjoiMTAuMC4wLjE6ODAwMCJ9","lease":"{id}"}}"#,
            b64(&format!("/xllm/instances/{i}"))
        );
        core.handle_json("/v3/kv/put", None, body.as_bytes(), now);
        ids.push(format!(r#"{{"ID":"{id}"}}"#));
    }
    let setup = started.elapsed();
    let started = Instant::now();
    let mut calls = 0u64;
    for _ in 0..rounds {
        now += Duration::from_secs(2);
        for body in &ids {
            core.handle_json("/v3/lease/keepalive", None, body.as_bytes(), now);
            calls += 1;
        }
        core.expire_due(now);
    }
    let ka = started.elapsed();
    println!(
        "{leases} grants+puts: {:.0} calls/s; {calls} keepalives: {:.0} calls/s; revision {}",
        (2 * leases) as f64 / setup.as_secs_f64(),
        calls as f64 / ka.as_secs_f64(),
        core.revision()
    );
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}
