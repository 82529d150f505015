//! The sidecar's own metrics (served on the admin endpoint's `/metrics`), so an operator
//! can alert on a sidecar that keeps losing its lease or its master.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Every counter and gauge; cheap to update from any task.
#[derive(Debug)]
pub struct Telemetry {
    registry: Registry,
    pub registrations: Counter,
    pub registration_failures: Counter,
    pub deregistrations: Counter,
    pub keepalives: Counter,
    pub keepalive_failures: Counter,
    pub leases_lost: Counter,
    pub health_probe_failures: Counter,
    pub heartbeats: Family<Labels, Counter>,
    pub scrape_errors: Counter,
    pub parse_errors: Counter,
    pub last_scrape_duration: Gauge<f64, AtomicU64>,
    pub lease_ttl_remaining: Gauge<i64>,
    pub registered: Gauge<i64>,
    /// Unix time of the last heartbeat the master answered 200.
    pub last_heartbeat_success: Gauge<f64, AtomicU64>,
    /// Time from sending a heartbeat to its answer (or failure).
    pub heartbeat_duration: Histogram,
    /// Time of a whole `/metrics` read (or failure).
    pub scrape_duration: Histogram,
    /// Changes of the heartbeat URL while following the elected master.
    pub master_switches: Counter,
}

/// Bucket bounds (seconds) for exchanges that take milliseconds when well and up to
/// their timeout (seconds) when not.
fn exchange_buckets() -> impl Iterator<Item = f64> {
    [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ]
    .into_iter()
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

impl Telemetry {
    pub fn new() -> Telemetry {
        let mut registry = Registry::with_prefix("vllm_sidecar");
        let t = Telemetry {
            registry: Registry::default(),
            registrations: Counter::default(),
            registration_failures: Counter::default(),
            deregistrations: Counter::default(),
            keepalives: Counter::default(),
            keepalive_failures: Counter::default(),
            leases_lost: Counter::default(),
            health_probe_failures: Counter::default(),
            heartbeats: Family::default(),
            scrape_errors: Counter::default(),
            parse_errors: Counter::default(),
            last_scrape_duration: Gauge::default(),
            lease_ttl_remaining: Gauge::default(),
            registered: Gauge::default(),
            last_heartbeat_success: Gauge::default(),
            heartbeat_duration: Histogram::new(exchange_buckets()),
            scrape_duration: Histogram::new(exchange_buckets()),
            master_switches: Counter::default(),
        };
        // name, help, metric: each registered under the `vllm_sidecar_` prefix.
        macro_rules! register {
            ($($name:literal, $help:literal, $metric:ident;)*) => {
                $(registry.register($name, $help, t.$metric.clone());)*
            };
        }
        register! {
            "registrations", "Successful registrations (lease grant + put)", registrations;
            "registration_failures", "Registration attempts that failed", registration_failures;
            "deregistrations", "Leases revoked (unhealthy vLLM or shutdown)", deregistrations;
            "keepalives", "Successful lease keepalives", keepalives;
            "keepalive_failures",
            "Lease keepalives that got no answer from any endpoint",
            keepalive_failures;
            "leases_lost", "Keepalives that found the lease gone (TTL 0)", leases_lost;
            "health_probe_failures", "Failed vLLM /health probes", health_probe_failures;
            "heartbeats",
            "Heartbeats by the master's answer (ok, conflict, unauthorized, other, error)",
            heartbeats;
            "scrape_errors",
            "vLLM /metrics scrapes with no usable page (transport, status, size, time, not a vLLM page)",
            scrape_errors;
            "parse_errors",
            "vLLM /metrics pages that were not text, plus lines skipped (counted on the first scrape and every 64th)",
            parse_errors;
            "last_scrape_duration_seconds",
            "Duration of the last successful /metrics scrape",
            last_scrape_duration;
            "lease_ttl_remaining_seconds",
            "TTL etcd reported at the last keepalive",
            lease_ttl_remaining;
            "registered", "1 while the instance key is in etcd", registered;
            "last_heartbeat_success_timestamp_seconds",
            "Unix time of the last heartbeat the master accepted (200)",
            last_heartbeat_success;
            "heartbeat_duration_seconds",
            "Heartbeat POSTs: time to the master's answer or the failure",
            heartbeat_duration;
            "scrape_duration_seconds",
            "vLLM /metrics reads: time to the whole page or the failure",
            scrape_duration;
            "master_switches",
            "Changes of the heartbeat URL while following the elected master (--follow-master)",
            master_switches;
        }
        Telemetry { registry, ..t }
    }

    pub fn heartbeat(&self, answer: &str) {
        self.heartbeats
            .get_or_create(&vec![("answer".to_string(), answer.to_string())])
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
