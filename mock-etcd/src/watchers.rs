//! The watch registry: who watches what, and the answer lines they are sent.
//!
//! Why a module of its own: this is the rule of watching, free of HTTP (`watch` holds
//! the streams). Each watcher selects keys, filters and a start revision; the events of
//! one revision go to a watcher in one response whose header carries that revision.
//! Answers go to a [`WatchSink`] of the caller's choosing: the HTTP shell's bounded
//! [`crate::outbox::Outbox`] (a stream that does not read is marked overflowed with the first revision
//! it missed, and its watchers are dropped), or a [`LineSink`] that keeps the lines for
//! a caller without sockets (a simulator) to drain.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::codec::{is_false, is_zero, ser_i64, Header};
use crate::requests::CreateRequest;
use crate::store::{Event, EventKind, KeyRange, KeyValue, Store};

/// `WatchResponse` in etcd's field order.
#[derive(Serialize, Default)]
pub struct WatchResponse<'a> {
    pub header: Option<Header>,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub watch_id: i64,
    #[serde(skip_serializing_if = "is_false")]
    pub created: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub canceled: bool,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub compact_revision: i64,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub cancel_reason: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<WireEvent<'a>>,
}

/// An event as a watcher is sent it.
pub enum WireEvent<'a> {
    /// Written from the event.
    Fields(EventFields<'a>),
    /// Written already for another watcher of the revision: its text, copied as it is.
    Written(&'a RawValue),
}

impl Serialize for WireEvent<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            WireEvent::Fields(fields) => fields.serialize(s),
            WireEvent::Written(text) => text.serialize(s),
        }
    }
}

/// `Event` in etcd's field order.
#[derive(Serialize)]
pub struct EventFields<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub kv: &'a KeyValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<&'a KeyValue>,
}

#[derive(Serialize)]
struct Line<'a> {
    result: &'a WatchResponse<'a>,
}

/// One streamed line: `{"result":…}\n`.
pub fn line(resp: &WatchResponse<'_>) -> String {
    let mut s = serde_json::to_string(&Line { result: resp }).unwrap_or_default();
    s.push('\n');
    s
}

/// What a watcher selects.
#[derive(Clone, Debug)]
pub struct Spec {
    pub range: KeyRange,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    /// Events before this revision are not for this watcher (future start_revision).
    pub from_rev: i64,
}

impl Spec {
    pub fn wants(&self, ev: &Event) -> bool {
        ev.revision() >= self.from_rev
            && self.range.contains(&ev.kv.key)
            && !(self.no_put && ev.kind == EventKind::Put)
            && !(self.no_delete && ev.kind == EventKind::Delete)
    }

    pub fn wire<'a>(&self, ev: &'a Event) -> WireEvent<'a> {
        WireEvent::Fields(EventFields {
            kind: (ev.kind == EventKind::Delete).then_some("DELETE"),
            kv: &ev.kv,
            prev_kv: if self.prev_kv {
                ev.prev.as_deref()
            } else {
                None
            },
        })
    }
}

/// Where the answer lines of one watch stream go.
pub trait WatchSink: Send + Sync {
    /// Deliver one `{"result":…}` line of revision `rev`; false if the stream can take
    /// no more (the registry then drops the stream's watchers).
    fn send(&self, line: String, rev: i64) -> bool;
    /// The registry dropped watcher `id` because this sink refused a line.
    fn dropped(&self, _id: i64) {}
}

/// A sink that keeps every line, in order, until drained: no socket, no bound.
#[derive(Default)]
pub struct LineSink {
    lines: std::sync::Mutex<Vec<String>>,
}

impl LineSink {
    /// The lines sent since the last drain, oldest first.
    pub fn drain(&self) -> Vec<String> {
        std::mem::take(&mut *crate::locking::lock(&self.lines))
    }
}

impl WatchSink for LineSink {
    fn send(&self, line: String, _rev: i64) -> bool {
        crate::locking::lock(&self.lines).push(line);
        true
    }
}

pub struct Watcher {
    pub stream: u64,
    pub id: i64,
    pub spec: Spec,
    pub out: Arc<dyn WatchSink>,
}

/// Every live watcher, notified by [`crate::data::Data::commit`].
pub struct Registry {
    header: Header,
    pub watchers: Vec<Watcher>,
    next_stream: u64,
}

impl Registry {
    pub fn new(header: Header) -> Self {
        Registry {
            header,
            watchers: Vec::new(),
            next_stream: 1,
        }
    }

    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// The full header at `revision` (0: without one).
    pub fn header(&self, revision: i64) -> Header {
        Header {
            revision,
            ..self.header
        }
    }

    /// Send one response per watcher for the events of revision `rev`.
    pub fn notify(&mut self, rev: i64, events: &[Arc<Event>]) {
        if self.is_empty() {
            return;
        }
        let header = self.header(rev);
        let written = self.write_shared(events);
        let mut overflowed: Vec<u64> = Vec::new();
        for w in &self.watchers {
            let prev_kv = usize::from(w.spec.prev_kv);
            let evs: Vec<WireEvent<'_>> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| w.spec.wants(e))
                .map(|(k, e)| {
                    let text = written.get(k).and_then(|t| t[prev_kv].as_deref());
                    text.map_or_else(|| w.spec.wire(e), WireEvent::Written)
                })
                .collect();
            if evs.is_empty() {
                continue;
            }
            let resp = WatchResponse {
                header: Some(header),
                watch_id: w.id,
                events: evs,
                ..Default::default()
            };
            if !w.out.send(line(&resp), rev) {
                overflowed.push(w.stream);
            }
        }
        if !overflowed.is_empty() {
            for w in self
                .watchers
                .iter()
                .filter(|w| overflowed.contains(&w.stream))
            {
                w.out.dropped(w.id);
            }
            self.watchers.retain(|w| !overflowed.contains(&w.stream));
        }
    }

    /// With several watchers, each of `events` written once for each `prev_kv` choice
    /// (indexed by it) of the watchers that want it, to be copied into every line: a
    /// revision's events usually go to every watcher of their prefix. With one, none.
    fn write_shared(&self, events: &[Arc<Event>]) -> Vec<[Option<Box<RawValue>>; 2]> {
        if self.watchers.len() < 2 {
            return Vec::new();
        }
        let mut written: Vec<[Option<Box<RawValue>>; 2]> =
            events.iter().map(|_| [None, None]).collect();
        for w in &self.watchers {
            let prev_kv = usize::from(w.spec.prev_kv);
            for (e, text) in events.iter().zip(written.iter_mut()) {
                let slot = &mut text[prev_kv];
                if slot.is_none() && w.spec.wants(e) {
                    *slot = serde_json::value::to_raw_value(&w.spec.wire(e)).ok();
                }
            }
        }
        written
    }

    /// Forget every watcher (the data they watched is gone).
    pub fn clear(&mut self) {
        self.watchers.clear();
    }

    pub fn drop_stream(&mut self, stream: u64) {
        self.watchers.retain(|w| w.stream != stream);
    }

    pub fn ids_of(&self, stream: u64) -> Vec<i64> {
        self.watchers
            .iter()
            .filter(|w| w.stream == stream)
            .map(|w| w.id)
            .collect()
    }

    /// Cancel watch `id` of a stream: `canceled` if it was live, nothing otherwise.
    pub fn cancel(&mut self, rev: i64, stream: u64, id: i64, out: &dyn WatchSink) {
        if self.remove(stream, id) {
            let resp = WatchResponse {
                header: Some(self.header(rev)),
                watch_id: id,
                canceled: true,
                ..Default::default()
            };
            out.send(line(&resp), rev);
        }
    }

    /// Answer a progress request: the current revision, `watch_id` -1.
    pub fn progress(&self, rev: i64, out: &dyn WatchSink) {
        let resp = WatchResponse {
            header: Some(self.header(rev)),
            watch_id: -1,
            ..Default::default()
        };
        out.send(line(&resp), rev);
    }

    pub fn remove(&mut self, stream: u64, id: i64) -> bool {
        let before = self.watchers.len();
        self.watchers
            .retain(|w| !(w.stream == stream && w.id == id));
        before != self.watchers.len()
    }

    pub fn new_stream(&mut self) -> u64 {
        let s = self.next_stream;
        self.next_stream += 1;
        s
    }
}

/// The stream a watch is created on: its number, its next automatic watch ID, its
/// outbox.
pub struct Stream<'a> {
    pub id: u64,
    pub next_id: &'a mut i64,
    pub out: &'a Arc<dyn WatchSink>,
}

/// Create a watch as etcd does: a duplicate explicit ID is refused (created+canceled,
/// `watch_id` -1); else `created`, then for a compacted `start_revision` a cancel with
/// `compact_revision`, for a past one the history in one response; then the watcher
/// is registered. Answers go to the stream's outbox.
pub fn create(store: &Store, registry: &mut Registry, s: Stream<'_>, c: CreateRequest) {
    let rev = store.rev;
    let header = registry.header(rev);
    let taken = registry.ids_of(s.id);
    let id = if c.watch_id != 0 {
        if taken.contains(&c.watch_id) {
            let resp = WatchResponse {
                header: Some(header),
                watch_id: -1,
                created: true,
                canceled: true,
                cancel_reason: "mvcc: duplicate watch ID provided on the WatchStream",
                ..Default::default()
            };
            s.out.send(line(&resp), rev);
            return;
        }
        c.watch_id
    } else {
        while taken.contains(s.next_id) {
            *s.next_id += 1;
        }
        let id = *s.next_id;
        *s.next_id += 1;
        id
    };
    let created = WatchResponse {
        header: Some(header),
        watch_id: id,
        created: true,
        ..Default::default()
    };
    if !s.out.send(line(&created), rev) {
        return;
    }
    let spec = Spec {
        range: KeyRange::new(c.key, c.range_end),
        prev_kv: c.prev_kv,
        no_put: c.filters.contains(&0),
        no_delete: c.filters.contains(&1),
        from_rev: c.start_revision,
    };
    if c.start_revision > 0 && c.start_revision < store.compact_rev {
        let resp = WatchResponse {
            header: Some(registry.header(0)),
            watch_id: id,
            canceled: true,
            compact_revision: store.compact_rev,
            ..Default::default()
        };
        s.out.send(line(&resp), rev);
        return;
    }
    if c.start_revision > 0 && c.start_revision <= rev {
        let evs: Vec<WireEvent<'_>> = store
            .history_from(c.start_revision)
            .filter(|e| spec.wants(e))
            .map(|e| spec.wire(e))
            .collect();
        if !evs.is_empty() {
            let resp = WatchResponse {
                header: Some(header),
                watch_id: id,
                events: evs,
                ..Default::default()
            };
            if !s.out.send(line(&resp), c.start_revision) {
                return;
            }
        }
    }
    registry.watchers.push(Watcher {
        stream: s.id,
        id,
        spec,
        out: s.out.clone(),
    });
}
