//! The built-in open-loop load generator.
//!
//! Open loop on purpose: arrivals follow a seeded Poisson schedule whatever the server
//! does, as real users do, so a slow instance builds a queue (`num_requests_waiting`)
//! instead of slowing the generator down. Bounded in requests, in-flight count and time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use mock_kit::{Events, Shutdown};

/// At most this many requests in flight per generator; arrivals beyond are dropped.
const MAX_IN_FLIGHT: usize = 512;

/// Where the master routed each request (instance index, in completion order).
#[derive(Debug, Default)]
pub struct Routed(Mutex<Vec<usize>>);

impl Routed {
    /// Record that the master routed a request to instance `i`.
    pub fn push(&self, i: usize) {
        crate::lock(&self.0).push(i)
    }
    /// Every instance index recorded so far, oldest first.
    pub fn snapshot(&self) -> Vec<usize> {
        crate::lock(&self.0).clone()
    }
    /// How many routed requests are recorded.
    pub fn len(&self) -> usize {
        crate::lock(&self.0).len()
    }
    /// Whether no routed request is recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The arrival offsets of one load phase: a Poisson process of rate `rps` (exponential
/// inter-arrival times) drawn from `seed`. Same seed, same schedule.
pub fn schedule(seed: u64, rps: f64, duration: Duration) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(seed);
    let cap = (rps * duration.as_secs_f64() * 3.0).ceil().min(1_000_000.0) as usize;
    let mut out = Vec::new();
    let mut at = 0.0f64;
    while out.len() < cap {
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        at += -u.ln() / rps.max(1e-9);
        if at > duration.as_secs_f64() {
            break;
        }
        out.push(Duration::from_secs_f64(at));
    }
    out
}

/// A running generator.
#[derive(Debug)]
pub struct LoadGen {
    stop: Shutdown,
}

impl LoadGen {
    /// Send `rps` completions per second to `base_url` for `duration`. With `route`, the
    /// target is the master and each answer's `x-routed-to` is recorded.
    pub fn start(
        base_url: String,
        route: Option<(Vec<String>, Arc<Routed>)>,
        rps: f64,
        duration: Duration,
        max_tokens: u32,
        seed: u64,
        events: Events,
    ) -> LoadGen {
        let stop = Shutdown::new();
        let s = stop.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::builder().timeout(Duration::from_secs(20));
            let Ok(http) = http.build() else {
                return;
            };
            let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
            let start = tokio::time::Instant::now();
            let (mut sent, mut dropped) = (0u64, 0u64);
            let plan = schedule(seed, rps, duration);
            events.emit("load_on", json!({"url": base_url, "rps": rps, "duration_ms": duration.as_millis() as u64, "planned": plan.len()}));
            for (n, offset) in plan.into_iter().enumerate() {
                tokio::select! {
                    _ = s.wait() => break,
                    _ = tokio::time::sleep_until(start + offset) => {}
                }
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    dropped += 1;
                    continue;
                };
                sent += 1;
                let req = http
                    .post(format!("{base_url}/v1/completions"))
                    .json(&json!({"model": "mock-model", "prompt": format!("request {n}"), "max_tokens": max_tokens}));
                let route = route.clone();
                tokio::spawn(async move {
                    if let Ok(r) = req.send().await {
                        let to = r.headers().get("x-routed-to").and_then(|v| v.to_str().ok());
                        if let (Some((names, routed)), Some(to)) = (route, to) {
                            if let Some(i) = names.iter().position(|n| n == to) {
                                routed.push(i);
                            }
                        }
                        let _ = r.bytes().await;
                    }
                    drop(permit);
                });
            }
            events.emit("load_off", json!({"sent": sent, "dropped": dropped}));
        });
        LoadGen { stop }
    }

    /// Send no further request (those in flight run their course).
    pub fn stop(&self) {
        self.stop.trigger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule() {
        let d = Duration::from_secs(4);
        let a = schedule(7, 50.0, d);
        assert_eq!(a, schedule(7, 50.0, d));
        assert_ne!(a, schedule(8, 50.0, d));
        // Roughly rps * duration arrivals, all inside the phase, in order.
        assert!((120..=280).contains(&a.len()), "{} arrivals", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]) && a.iter().all(|t| *t <= d));
    }
}
