//! One timeline for a whole run: every fake's events, every proxy fault, every sidecar
//! log line, every runner action and observation, in arrival order.
//!
//! Why one list: a failure is explained by the order of things across processes ("the
//! lease expired 40 ms before the keepalive was sent"), which no per-component log shows.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mock_kit::{Event, EventSink, Events};

/// Upper bound on stored events, so a runaway log cannot exhaust memory.
const MAX_EVENTS: usize = 400_000;

/// Who reported an event: each fake, each instance's vLLM and sidecar, the links, the
/// load generator, the observer and the runner. Its text is the `source` of a timeline
/// event (`sidecar:i0`), in both modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// The fake etcd (`etcd`).
    Etcd,
    /// The fake master (`master`).
    Master,
    /// An instance's fake vLLM, by instance name.
    Vllm(&'a str),
    /// An instance's sidecar, by instance name.
    Sidecar(&'a str),
    /// The fault proxies and simulated links (`link`).
    Link,
    /// The load generator (`load`).
    Load,
    /// The observer that samples the cluster, e.g. when it cannot read etcd (`observer`).
    Observer,
    /// The runner: each action as it is applied (`runner`).
    Runner,
}

impl std::fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Etcd => f.write_str("etcd"),
            Source::Master => f.write_str("master"),
            Source::Vllm(name) => write!(f, "vllm:{name}"),
            Source::Sidecar(name) => write!(f, "sidecar:{name}"),
            Source::Link => f.write_str("link"),
            Source::Load => f.write_str("load"),
            Source::Observer => f.write_str("observer"),
            Source::Runner => f.write_str("runner"),
        }
    }
}

/// The shared sink of a run.
#[derive(Debug)]
pub struct Timeline {
    /// Epoch ms at which the scenario's time starts (t = 0 in reports): when its
    /// cluster was ready ([`Timeline::start_clock`]); events before are negative.
    t0_ms: AtomicU64,
    /// Epoch ms at which the timeline was made (the cluster's start began).
    made_ms: u64,
    /// Virtual time in ms (simulation): `None` means the wall clock.
    virtual_now: Option<AtomicU64>,
    events: Mutex<Vec<Event>>,
}

impl Timeline {
    /// A timeline on the wall clock, t0 now.
    pub fn new() -> Arc<Timeline> {
        Timeline::made_at(mock_kit::events::now_ms(), None)
    }

    /// A timeline in virtual time (the simulator's): t0 is 0, events carry virtual
    /// milliseconds, and [`Timeline::now`] is what [`Timeline::set_now`] last said.
    pub fn virtual_time() -> Arc<Timeline> {
        Timeline::made_at(0, Some(AtomicU64::new(0)))
    }

    fn made_at(now: u64, virtual_now: Option<AtomicU64>) -> Arc<Timeline> {
        Arc::new(Timeline {
            t0_ms: AtomicU64::new(now),
            made_ms: now,
            virtual_now,
            events: Mutex::new(Vec::new()),
        })
    }

    /// Epoch ms of t = 0 (0 in virtual time).
    pub fn t0_ms(&self) -> u64 {
        self.t0_ms.load(Ordering::Relaxed)
    }

    /// Make now t = 0: the cluster is ready, and every time a scenario names (a step's
    /// `at`, a grace, an episode) counts from here, not from the start of its set-up.
    /// Answers how long the set-up took (ms). No effect in virtual time.
    pub fn start_clock(&self) -> u64 {
        if self.virtual_now.is_some() {
            return 0;
        }
        let now = mock_kit::events::now_ms();
        self.t0_ms.store(now, Ordering::Relaxed);
        now.saturating_sub(self.made_ms)
    }

    /// Advance a virtual timeline's clock (no effect on a wall-clock one).
    pub fn set_now(&self, ms: u64) {
        if let Some(v) = &self.virtual_now {
            v.store(ms, Ordering::Relaxed);
        }
    }

    /// An emitter for one source.
    pub fn source(self: &Arc<Self>, source: Source<'_>) -> Events {
        let events = Events::new(source.to_string(), Some(self.clone() as Arc<dyn EventSink>));
        if self.virtual_now.is_none() {
            return events;
        }
        let me = self.clone();
        events.with_clock(Arc::new(move || me.now()))
    }

    /// Milliseconds since t0.
    pub fn now(&self) -> u64 {
        match &self.virtual_now {
            Some(v) => v.load(Ordering::Relaxed),
            None => mock_kit::events::now_ms().saturating_sub(self.t0_ms()),
        }
    }

    /// Number of events so far (a cursor for [`Timeline::any_since`]).
    pub fn len(&self) -> usize {
        crate::lock(&self.events).len()
    }

    /// Whether no event was stored yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether any event from `from` onwards satisfies `f`.
    pub fn any_since(&self, from: usize, mut f: impl FnMut(&Event) -> bool) -> bool {
        crate::lock(&self.events).iter().skip(from).any(&mut f)
    }

    /// Every event stored so far, sorted by time.
    pub fn snapshot(&self) -> Vec<Event> {
        let mut v = crate::lock(&self.events).clone();
        v.sort_by_key(|e| e.at_ms);
        v
    }

    /// Write `events.jsonl`: one event per line, `t_ms` relative to t0 added.
    pub fn write_jsonl(&self, w: &mut impl Write) -> std::io::Result<()> {
        for e in self.snapshot() {
            let line = serde_json::json!({
                "t_ms": e.at_ms as i64 - self.t0_ms() as i64,
                "at_ms": e.at_ms,
                "source": e.source,
                "kind": e.kind,
                "detail": e.detail,
            });
            writeln!(w, "{line}")?;
        }
        Ok(())
    }
}

impl EventSink for Timeline {
    fn emit(&self, event: Event) {
        // Past the cap, events are not stored.
        let mut g = crate::lock(&self.events);
        if g.len() < MAX_EVENTS {
            g.push(event);
        }
    }
}
