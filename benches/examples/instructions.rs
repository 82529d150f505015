//! A fixed amount of work for `valgrind --tool=callgrind`: instruction counts are
//! deterministic where wall-clock MB/s on a shared machine is not.
//!
//! `instructions MODE FILE N`: MODE is `lenient`, `strict`, `avg` or `p99`
//! (`observe_text`), run N times. Instructions per byte is
//! `(Ir(N) - Ir(0)) / (N * file size)`: see `benches/instructions.sh`.
//!
//! Run natively it also prints the throughput over the time the thread was actually on
//! a CPU (`/proc/thread-self/schedstat`), which a busy shared machine does not skew
//! the way it skews wall-clock time.

use std::hint::black_box;

use sidecar::mapping::{LatencyStat, Mapper, MapperConfig};
use sidecar::prom::{self, Format, Mode};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(file), Some(n)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: instructions lenient|strict|avg|p99 FILE N");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let n: usize = n.parse().unwrap_or_else(|e| panic!("N: {e}"));
    let mut out = 0u64;
    let cpu0 = on_cpu_ns();
    let wall0 = std::time::Instant::now();
    match mode.as_str() {
        "lenient" | "strict" => {
            let m = if mode == "strict" {
                Mode::Strict
            } else {
                Mode::Lenient
            };
            for _ in 0..n {
                let p = prom::parse(black_box(&text), Format::Prometheus, m);
                out += p.map(|p| p.samples.len() as u64).unwrap_or(0);
            }
        }
        "avg" | "p99" => {
            let stat = if mode == "avg" {
                LatencyStat::Avg
            } else {
                LatencyStat::P99
            };
            let mut m = Mapper::new(MapperConfig {
                latency_stat: stat,
                model: None,
            });
            for _ in 0..n {
                let h = m.observe_text(black_box(&text), Format::Prometheus);
                out +=
                    h.load_metrics.waiting_requests_num + h.latency_metrics.recent_max_ttft as u64;
            }
        }
        other => panic!("unknown mode {other}"),
    }
    let cpu = on_cpu_ns().saturating_sub(cpu0).max(1);
    let wall = wall0.elapsed().as_nanos().max(1) as u64;
    let bytes = (text.len() * n) as f64;
    eprintln!(
        "{mode}: {:.0} MB/s on-CPU, {:.0} MB/s wall ({out})",
        bytes / cpu as f64 * 1e3,
        bytes / wall as f64 * 1e3
    );
}

/// Nanoseconds this thread has spent running on a CPU (0 where unavailable).
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
