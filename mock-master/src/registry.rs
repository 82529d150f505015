//! The instance table under a real clock: [`crate::instances::Instances`] behind a
//! lock, given the time since the master started, with what it decides reported as
//! events, metrics and log lines. Shared by the watcher, the heartbeat handler, the
//! timers, the publisher and the views.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mock_kit::Events;
use serde_json::json;

use crate::instances::{Instances, Notice};
use crate::metrics::Metrics;
use crate::pbjson::{LatencyMetrics, LoadMetrics};

pub use crate::instances::{
    instance_name, Beat, InstanceMeta, InstanceState, InstanceView, ProbeTicket, DEREGISTERED,
    TYPE_PREFIXES,
};

/// The instance table. Cheap to share (`Arc` inside).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<Instances>>,
    /// The origin of the core's time.
    started: Instant,
    events: Events,
    metrics: Arc<Metrics>,
}

impl Registry {
    pub fn new(events: Events, metrics: Arc<Metrics>) -> Self {
        Registry {
            inner: Arc::new(Mutex::new(Instances::new())),
            started: Instant::now(),
            events,
            metrics,
        }
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, Instances> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Run one input against the table (with the time now) and report what it changed,
    /// still under the lock so that events keep the order of the changes.
    fn apply<R>(&self, f: impl FnOnce(&mut Instances, Duration, &mut Vec<Notice>) -> R) -> R {
        let mut notices = Vec::new();
        let mut g = self.lock();
        let out = f(&mut g, self.now(), &mut notices);
        for n in notices {
            self.report(n);
        }
        out
    }

    fn report(&self, n: Notice) {
        match n {
            Notice::Transition {
                name,
                incarnation,
                from,
                to,
                reason,
            } => {
                self.metrics.transition(from, to);
                self.events.emit(
                    "state",
                    json!({"name": name, "incarnation": incarnation, "from": from, "to": to, "reason": reason}),
                );
                tracing::info!(name, incarnation, from, to, reason, "instance state");
            }
            Notice::StaleDelete {
                name,
                deleted,
                tracked,
            } => {
                self.events.emit(
                    "stale_delete",
                    json!({"name": name, "deleted": deleted, "tracked": tracked}),
                );
            }
        }
    }

    /// A PUT of `name`'s key: register, refresh, or replace.
    pub fn apply_put(&self, name: &str, meta: InstanceMeta) {
        self.apply(|t, now, out| t.apply_put(name, meta, now, out))
    }

    /// A DELETE of `name`'s key; answers the probe to run, if any.
    pub fn apply_delete(
        &self,
        name: &str,
        deleted_incarnation: Option<&str>,
    ) -> Option<ProbeTicket> {
        self.apply(|t, _, out| t.apply_delete(name, deleted_incarnation, out))
    }

    /// The answer of the health probe a delete asked for.
    pub fn apply_probe(&self, ticket: &ProbeTicket, healthy: bool) {
        self.apply(|t, now, out| t.apply_probe(ticket, healthy, now, out))
    }

    /// A heartbeat that passed the token and body checks.
    pub fn heartbeat(
        &self,
        name: &str,
        incarnation: &str,
        load: LoadMetrics,
        latency: LatencyMetrics,
    ) -> Beat {
        self.apply(|t, now, out| t.heartbeat(name, incarnation, load, latency, now, out))
    }

    /// Apply the timeouts as of now.
    pub fn tick(&self, lease_lost_timeout: Duration, suspect_window: Duration) {
        self.apply(|t, now, out| t.tick(now, lease_lost_timeout, suspect_window, out))
    }

    /// Forget every instance, as a master process that restarts does.
    pub fn forget_all(&self) {
        self.apply(|t, _, out| t.forget_all(out))
    }

    /// Align with a fresh listing; answers the probes to run.
    pub fn reconcile(&self, listing: Vec<(String, InstanceMeta)>) -> Vec<ProbeTicket> {
        self.apply(|t, now, out| t.reconcile(listing, now, out))
    }

    /// Load metrics to publish and names whose LOADMETRICS entry must go (cleared).
    pub fn take_publish(&self) -> (HashMap<String, LoadMetrics>, HashSet<String>) {
        self.lock().take_publish()
    }

    /// Put back what a failed publish could not write (newer entries win).
    pub fn restore_publish(&self, updated: HashMap<String, LoadMetrics>, removed: HashSet<String>) {
        self.lock().restore_publish(updated, removed)
    }

    /// Routable instances and their latest load, sorted by name.
    pub fn routable(&self) -> Vec<(String, Option<LoadMetrics>)> {
        self.lock().routable()
    }

    /// Number of instances per state.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.lock().counts()
    }

    pub fn views(&self) -> Vec<InstanceView> {
        let now = self.now();
        self.lock().views(now)
    }

    pub fn view(&self, name: &str) -> Option<InstanceView> {
        let now = self.now();
        self.lock().view(name, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(inc: &str) -> InstanceMeta {
        InstanceMeta::parse(
            format!(r#"{{"name":"a","rpc_address":"a","type":0,"incarnation_id":"{inc}"}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn decisions_are_reported_as_events() {
        let ring = mock_kit::events::RingSink::new(100);
        let events = Events::new("t", Some(ring.clone() as Arc<dyn mock_kit::EventSink>));
        let r = Registry::new(events, Arc::new(Metrics::new()));
        r.apply_put("a", meta("i1"));
        r.apply_put("a", meta("i2"));
        assert_eq!(r.apply_delete("a", Some("i1")), None);
        let kinds: Vec<String> = ring.snapshot().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["state", "state", "state", "stale_delete"]);
        r.tick(Duration::ZERO, Duration::ZERO);
        assert_eq!(r.view("a").unwrap().state, InstanceState::Active);
    }
}
