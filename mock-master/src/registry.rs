//! The master's core under a real clock: [`crate::core::MasterCore`] behind a lock,
//! given the time since the master started, with what it decides reported as events,
//! metrics and log lines, and what it wants done handed back to the calling task.
//! Shared by the watcher, the heartbeat handler, the timers, the publisher and the views.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mock_kit::Events;

use crate::config::Config;
use crate::core::{Command, HeartbeatReply, MasterCore, Note};
use crate::election::{Call, Outcome, Role};
use crate::etcd::{KeyValue, WatchEvent, WatchResponse};
use crate::follow::Verdict;
use crate::instances::Notice;
use crate::metrics::Metrics;
use crate::pbjson::{HeartbeatRequest, LoadMetrics};
use crate::publish::Plan;

pub use crate::instances::{
    instance_name, Beat, InstanceMeta, InstanceRef, InstanceState, InstanceView, ProbeTicket,
    DEREGISTERED, TYPE_PREFIXES,
};

/// The master's core. Cheap to share (`Arc` inside).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<MasterCore>>,
    /// The origin of the core's time.
    started: Instant,
    events: Events,
    metrics: Arc<Metrics>,
}

impl Registry {
    /// A core with the default configuration (tests).
    pub fn new(events: Events, metrics: Arc<Metrics>) -> Self {
        let started = Instant::now();
        let core = MasterCore::new(&Config::default(), Duration::ZERO);
        Self::over(core, started, events, metrics)
    }

    /// Drive `core`, whose time 0 is `started`.
    pub fn over(core: MasterCore, started: Instant, events: Events, metrics: Arc<Metrics>) -> Self {
        Registry {
            inner: Arc::new(Mutex::new(core)),
            started,
            events,
            metrics,
        }
    }

    /// The core's time now.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, MasterCore> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Run one input against the core (with the time now) and report what it noted,
    /// still under the lock so that events keep the order of the changes. Answers the
    /// input's result and the commands it raised.
    fn apply<R>(&self, f: impl FnOnce(&mut MasterCore, Duration) -> R) -> (R, Vec<Command>) {
        let mut g = self.lock();
        let out = f(&mut g, self.now());
        for n in g.take_notes() {
            self.report(n);
        }
        (out, g.take_commands())
    }

    /// The note as an event (its shape is the core's: [`Note::event`]), plus the
    /// metrics and log lines the real shell adds.
    fn report(&self, n: Note) {
        match &n {
            Note::Table(Notice::Transition {
                name,
                incarnation,
                from,
                to,
                reason,
            }) => {
                self.metrics.transition(from, to);
                tracing::info!(name, incarnation, from, to, reason, "instance state");
            }
            Note::BadRegistration { name, error } => {
                tracing::error!(name, error, "unparseable instance registration");
            }
            Note::Probe { healthy, .. } => self.metrics.probe(*healthy),
            Note::Role(ev) => {
                tracing::info!(service_name = %ev.service_name, master = ?ev.master, reason = %ev.reason, "{}", ev.kind());
            }
            Note::Table(Notice::StaleDelete { .. }) => {}
        }
        self.events.emit_event(&n.event());
    }

    /// One watch event; answers the probe attempts it asks for.
    pub fn on_watch_event(&self, event: &WatchEvent) -> Vec<Command> {
        self.apply(|c, now| c.on_watch_event(now, event)).1
    }

    /// One message of the watch stream (new events applied); answers what it meant
    /// and the probes to run.
    pub fn on_watch_response(&self, resp: WatchResponse) -> (Verdict, Vec<Command>) {
        self.apply(|c, now| c.on_watch_response(now, resp))
    }

    /// Where a (re-)opened watch starts.
    pub fn watch_from(&self) -> i64 {
        self.lock().watch_from()
    }

    /// A range read only for its revision.
    pub fn listed_at(&self, revision: i64) {
        self.lock().listed_at(revision)
    }

    /// A fresh listing at `revision`; answers how many instances it named and the
    /// probes to run.
    pub fn on_listing(&self, revision: i64, kvs: &[KeyValue]) -> (usize, Vec<Command>) {
        self.apply(|c, now| c.on_listing(now, revision, kvs))
    }

    /// The outcome of one probe attempt; answers the next attempt, if any.
    pub fn on_probe_result(&self, id: u64, ok: bool) -> Vec<Command> {
        self.apply(|c, now| c.on_probe_result(now, id, ok)).1
    }

    /// A heartbeat whose body was read (outside the lock): the table's verdict.
    pub fn heartbeat(&self, req: &HeartbeatRequest) -> HeartbeatReply {
        self.apply(|c, now| c.on_heartbeat_request(now, req)).0
    }

    /// Apply the timeouts as of now.
    pub fn tick(&self) {
        self.apply(|c, now| c.tick(now));
    }

    /// Forget every instance, as a master process that restarts does.
    pub fn forget_all(&self) {
        self.apply(|c, _| c.restart());
    }

    /// A LOADMETRICS round: what to write.
    pub fn publish_now(&self) -> Plan {
        self.lock().publish_now()
    }

    /// Put back the writes of `plan` that failed, by name.
    pub fn publish_failed(&self, plan: &Plan, failed_puts: &[String], failed_deletes: &[String]) {
        self.lock()
            .publish_failed(plan, failed_puts, failed_deletes)
    }

    /// Routable instances and the load routing weighs ([`MasterCore::routing_candidates`]),
    /// sorted by name.
    pub fn routable(&self) -> Vec<(String, Option<LoadMetrics>)> {
        self.lock().routing_candidates()
    }

    /// The election's timers as of now; answers the etcd calls it wants made.
    pub fn election_step(&self) -> Vec<Call> {
        let mut g = self.lock();
        g.election_tick(self.now());
        for n in g.take_notes() {
            self.report(n);
        }
        g.take_election_calls()
    }

    /// How election call `id` ended; answers the calls that follow from it.
    pub fn on_election_result(&self, id: u64, outcome: Outcome) -> Vec<Call> {
        let mut g = self.lock();
        g.on_election_result(self.now(), id, outcome);
        for n in g.take_notes() {
            self.report(n);
        }
        g.take_election_calls()
    }

    /// The role, this replica's service name and the master as seen (`None` without an
    /// election: the single master).
    pub fn role(&self) -> (Role, Option<(String, Option<String>)>) {
        let g = self.lock();
        let seen = g
            .election()
            .map(|e| (e.service_name().to_string(), e.holder().map(String::from)));
        (g.role(), seen)
    }

    /// `XLLM:LOADMETRICS:` as last read from etcd, by instance name.
    pub fn followed_load(&self) -> BTreeMap<String, LoadMetrics> {
        self.lock().followed_load().clone()
    }

    /// Number of instances per state.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.lock().table().counts()
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

    fn kv(inc: &str) -> KeyValue {
        KeyValue {
            key: b"XLLM:DEFAULT:a".to_vec(),
            value: format!(r#"{{"name":"a","rpc_address":"a","type":0,"incarnation_id":"{inc}"}}"#)
                .into_bytes(),
            mod_revision: 1,
        }
    }

    fn put(inc: &str) -> WatchEvent {
        WatchEvent {
            kind: crate::etcd::EventKind::Put,
            kv: kv(inc),
            prev_kv: None,
        }
    }

    fn delete(inc: &str) -> WatchEvent {
        WatchEvent {
            kind: crate::etcd::EventKind::Delete,
            kv: KeyValue {
                value: Vec::new(),
                ..kv(inc)
            },
            prev_kv: Some(kv(inc)),
        }
    }

    #[test]
    fn decisions_are_reported_as_events() {
        let ring = mock_kit::events::RingSink::new(100);
        let events = Events::new("t", Some(ring.clone() as Arc<dyn mock_kit::EventSink>));
        let r = Registry::new(events, Arc::new(Metrics::new()));
        assert!(r.on_watch_event(&put("i1")).is_empty());
        assert!(r.on_watch_event(&put("i2")).is_empty());
        assert!(r.on_watch_event(&delete("i1")).is_empty());
        let kinds: Vec<String> = ring.snapshot().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["state", "state", "state", "stale_delete"]);
        r.tick();
        assert_eq!(r.view("a").unwrap().state, InstanceState::Active);
    }
}
