//! The master's own Prometheus metrics (`GET /metrics`), so a scenario can watch the
//! master the way an operator would: heartbeat answers, state transitions, watch
//! health, LOADMETRICS writes and routing.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// Every metric, registered once at start.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    heartbeats: Family<Labels, Counter>,
    /// Handles on the heartbeat counters of the usual statuses (no lookup per request).
    common: Vec<(u16, Counter)>,
    transitions: Family<Labels, Counter>,
    instances: Family<Labels, Gauge>,
    probes: Family<Labels, Counter>,
    watch_events: Family<Labels, Counter>,
    watch_reconnects: Counter,
    loadmetrics_writes: Family<Labels, Counter>,
    routed: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mock_master");
        let heartbeats = Family::<Labels, Counter>::default();
        registry.register(
            "heartbeats",
            "Heartbeat answers by HTTP status",
            heartbeats.clone(),
        );
        let transitions = Family::<Labels, Counter>::default();
        registry.register(
            "state_transitions",
            "Instance state transitions",
            transitions.clone(),
        );
        let instances = Family::<Labels, Gauge>::default();
        registry.register("instances", "Tracked instances by state", instances.clone());
        let probes = Family::<Labels, Counter>::default();
        registry.register(
            "health_probes",
            "Health probes after a DELETE, by result",
            probes.clone(),
        );
        let watch_events = Family::<Labels, Counter>::default();
        registry.register(
            "watch_events",
            "etcd watch events applied, by type",
            watch_events.clone(),
        );
        let watch_reconnects = Counter::default();
        registry.register(
            "watch_reconnects",
            "etcd watch streams re-opened",
            watch_reconnects.clone(),
        );
        let loadmetrics_writes = Family::<Labels, Counter>::default();
        registry.register(
            "loadmetrics_writes",
            "LOADMETRICS puts and deletes, by op and result",
            loadmetrics_writes.clone(),
        );
        let routed = Family::<Labels, Counter>::default();
        registry.register(
            "routed_requests",
            "OpenAI requests by route and outcome",
            routed.clone(),
        );
        let common = [200u16, 400, 401, 409, 413]
            .into_iter()
            .map(|s| {
                (
                    s,
                    heartbeats
                        .get_or_create(&vec![("status", s.to_string())])
                        .clone(),
                )
            })
            .collect();
        Metrics {
            registry,
            heartbeats,
            common,
            transitions,
            instances,
            probes,
            watch_events,
            watch_reconnects,
            loadmetrics_writes,
            routed,
        }
    }

    pub fn heartbeat(&self, status: u16) {
        match self.common.iter().find(|(s, _)| *s == status) {
            Some((_, c)) => {
                c.inc();
            }
            None => {
                self.heartbeats
                    .get_or_create(&vec![("status", status.to_string())])
                    .inc();
            }
        }
    }

    pub fn transition(&self, from: &str, to: &str) {
        self.transitions
            .get_or_create(&vec![("from", from.to_string()), ("to", to.to_string())])
            .inc();
    }

    pub fn probe(&self, healthy: bool) {
        let result = if healthy { "ok" } else { "failed" };
        self.probes
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    pub fn watch_event(&self, kind: &str) {
        self.watch_events
            .get_or_create(&vec![("type", kind.to_string())])
            .inc();
    }

    pub fn watch_reconnect(&self) {
        self.watch_reconnects.inc();
    }

    pub fn loadmetrics_write(&self, op: &str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.loadmetrics_writes
            .get_or_create(&vec![
                ("op", op.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    pub fn routed(&self, route: &str, outcome: &str) {
        self.routed
            .get_or_create(&vec![
                ("route", route.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc();
    }

    /// The exposition text, with the per-state gauges set from `counts` first.
    pub fn render(&self, counts: &std::collections::BTreeMap<&'static str, u64>) -> String {
        for (state, n) in counts {
            self.instances
                .get_or_create(&vec![("state", state.to_string())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
