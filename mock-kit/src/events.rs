//! What happened to a fake, reported to whoever listens.
//!
//! The fakes do not depend on `scenarios`: they emit [`Event`]s to an optional
//! [`EventSink`]; the scenario runner installs one that merges every source into a single
//! timeline. With no sink installed, emitting costs a branch.
//!
//! Timestamps come from the wall clock unless the emitter says otherwise: a clock hook
//! ([`Events::with_clock`]) replaces the wall clock for every [`Events::emit`], and
//! [`Events::emit_at`] stamps one event with a time the caller gives. A simulation in
//! virtual time uses either, so its timeline never depends on the machine's clock.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::fake_event::FakeEvent;

/// One thing that happened: a request served, a state change, a fault fired.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Wall-clock time, epoch milliseconds.
    pub at_ms: u64,
    /// Who saw it: `"etcd"`, `"master"`, `"vllm:127.0.0.1:18000"`, …
    pub source: String,
    /// Short machine-readable kind: `"request"`, `"state"`, `"fault"`, `"lease_expired"`, …
    pub kind: String,
    /// Anything else worth keeping, as JSON.
    pub detail: serde_json::Value,
}

impl Event {
    /// An event stamped `at_ms` (epoch milliseconds, or virtual milliseconds).
    pub fn at(
        at_ms: u64,
        source: impl Into<String>,
        kind: impl Into<String>,
        detail: serde_json::Value,
    ) -> Self {
        Event {
            at_ms,
            source: source.into(),
            kind: kind.into(),
            detail,
        }
    }

    pub fn now(
        source: impl Into<String>,
        kind: impl Into<String>,
        detail: serde_json::Value,
    ) -> Self {
        Event {
            at_ms: now_ms(),
            source: source.into(),
            kind: kind.into(),
            detail,
        }
    }
}

/// Epoch milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A receiver of events. Must not block: called from request handlers.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: Event);
}

/// Where [`Events::emit`] reads the time from: milliseconds, epoch or virtual.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The emitting side a fake holds: a source name, an optional sink and an optional
/// clock (the wall clock when none is set).
#[derive(Clone, Default)]
pub struct Events {
    source: String,
    sink: Option<Arc<dyn EventSink>>,
    clock: Option<Clock>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("source", &self.source)
            .field("sink", &self.sink.is_some())
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl Events {
    pub fn new(source: impl Into<String>, sink: Option<Arc<dyn EventSink>>) -> Self {
        Events {
            source: source.into(),
            sink,
            clock: None,
        }
    }

    /// The same emitter, stamping every [`Events::emit`] with `clock()` instead of the
    /// wall clock (clones made after this share the clock).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// A sink that drops everything.
    pub fn none(source: impl Into<String>) -> Self {
        Self::new(source, None)
    }

    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Report an event, stamped by the clock hook if one is set, else the wall clock.
    pub fn emit(&self, kind: &str, detail: serde_json::Value) {
        if let Some(sink) = &self.sink {
            let at_ms = self.clock.as_ref().map_or_else(now_ms, |c| c());
            sink.emit(Event::at(at_ms, self.source.clone(), kind, detail));
        }
    }

    /// Report an event stamped `at_ms`, whatever the clock (virtual time).
    pub fn emit_at(&self, at_ms: u64, kind: &str, detail: serde_json::Value) {
        if let Some(sink) = &self.sink {
            sink.emit(Event::at(at_ms, self.source.clone(), kind, detail));
        }
    }

    /// Report a typed event as [`Events::emit`] does; its detail is built only when a
    /// sink is installed.
    pub fn emit_event<E: FakeEvent + ?Sized>(&self, event: &E) {
        if self.enabled() {
            self.emit(event.kind(), event.detail());
        }
    }

    /// Report a typed event stamped `at_ms`, as [`Events::emit_at`] does; its detail is
    /// built only when a sink is installed.
    pub fn emit_event_at<E: FakeEvent + ?Sized>(&self, at_ms: u64, event: &E) {
        if self.enabled() {
            self.emit_at(at_ms, event.kind(), event.detail());
        }
    }
}

/// A bounded in-memory sink: keeps the last `capacity` events (tests, `/_mock/events`).
#[derive(Debug)]
pub struct RingSink {
    capacity: usize,
    events: Mutex<std::collections::VecDeque<Event>>,
}

impl RingSink {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(RingSink {
            capacity: capacity.max(1),
            events: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    pub fn snapshot(&self) -> Vec<Event> {
        match self.events.lock() {
            Ok(g) => g.iter().cloned().collect(),
            Err(p) => p.into_inner().iter().cloned().collect(),
        }
    }
}

impl EventSink for RingSink {
    fn emit(&self, event: Event) {
        let mut g = match self.events.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.len() == self.capacity {
            g.pop_front();
        }
        g.push_back(event);
    }
}

/// Forwards events into a tokio channel; drops them when the receiver lags (never blocks).
#[derive(Debug, Clone)]
pub struct ChannelSink(pub tokio::sync::mpsc::Sender<Event>);

impl EventSink for ChannelSink {
    fn emit(&self, event: Event) {
        let _ = self.0.try_send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest() {
        let ring = RingSink::new(2);
        let events = Events::new("t", Some(ring.clone() as Arc<dyn EventSink>));
        for i in 0..3 {
            events.emit("n", serde_json::json!(i));
        }
        let got: Vec<_> = ring.snapshot().into_iter().map(|e| e.detail).collect();
        assert_eq!(got, vec![serde_json::json!(1), serde_json::json!(2)]);
    }

    /// A typed event whose detail counts how often it was built.
    struct Counted<'a>(&'a std::sync::atomic::AtomicUsize);

    impl FakeEvent for Counted<'_> {
        fn kind(&self) -> &'static str {
            "counted"
        }
        fn detail(&self) -> serde_json::Value {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            serde_json::json!({ "n": n })
        }
    }

    #[test]
    fn typed_events_are_built_only_for_a_sink() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let built = AtomicUsize::new(0);
        Events::none("quiet").emit_event(&Counted(&built));
        Events::none("quiet").emit_event_at(5, &Counted(&built));
        assert_eq!(built.load(Ordering::Relaxed), 0);
        let ring = RingSink::new(10);
        let events =
            Events::new("t", Some(ring.clone() as Arc<dyn EventSink>)).with_clock(Arc::new(|| 11));
        events.emit_event(&Counted(&built));
        events.emit_event_at(5, &Counted(&built));
        let got: Vec<(u64, String, String, serde_json::Value)> = ring
            .snapshot()
            .into_iter()
            .map(|e| (e.at_ms, e.source, e.kind, e.detail))
            .collect();
        assert_eq!(
            got,
            [
                (
                    11,
                    "t".into(),
                    "counted".into(),
                    serde_json::json!({"n": 0})
                ),
                (5, "t".into(), "counted".into(), serde_json::json!({"n": 1})),
            ]
        );
    }

    #[test]
    fn virtual_timestamps_from_the_hook_or_the_caller() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let ring = RingSink::new(10);
        let t = Arc::new(AtomicU64::new(7));
        let t2 = t.clone();
        let events = Events::new("sim", Some(ring.clone() as Arc<dyn EventSink>))
            .with_clock(Arc::new(move || t2.load(Ordering::Relaxed)));
        events.emit("a", serde_json::json!(null));
        t.store(42, Ordering::Relaxed);
        events.clone().emit("b", serde_json::json!(null));
        events.emit_at(3, "c", serde_json::json!(null));
        let got: Vec<(u64, String)> = ring
            .snapshot()
            .into_iter()
            .map(|e| (e.at_ms, e.kind))
            .collect();
        assert_eq!(got, [(7, "a".into()), (42, "b".into()), (3, "c".into())]);
        // Without a hook, the wall clock (after 2020-01-01).
        let plain = Events::new("w", Some(ring.clone() as Arc<dyn EventSink>));
        plain.emit("d", serde_json::json!(null));
        assert!(ring
            .snapshot()
            .last()
            .is_some_and(|e| e.at_ms > 1_577_836_800_000));
    }
}
