//! The event log: one JSON line per event, from which determinism is tested.
//!
//! Why lines of JSON with a fixed field order: "same seed, same run" is checked by
//! comparing the log byte for byte, so every line must be a pure function of the run.
//! Each line is a struct serialized by serde (fields in declaration order), its `detail`
//! built by the caller from values only (no addresses, clocks or hash-map walks).
//!
//! A log may keep its lines (tests, reports), only fold them into a digest (long runs,
//! where millions of lines would not fit in memory: two runs are still compared by
//! digest), or only count them (benchmarks of the cores: writing JSON is about half of
//! the engine's own time).

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// One line of the log.
#[derive(Serialize)]
struct Line<'a, D> {
    /// Virtual time in microseconds since the start.
    t_us: u64,
    node: &'a str,
    kind: &'a str,
    detail: &'a D,
}

/// One event as a value, for a reader that wants them one by one (the scenario
/// runner's timeline).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub at: Duration,
    pub node: String,
    pub kind: String,
    pub detail: Value,
}

/// Where lines go.
#[derive(Debug, Clone)]
pub struct EventLog {
    keep: bool,
    /// Write (and digest) lines at all.
    write: bool,
    bytes: Vec<u8>,
    lines: u64,
    /// FNV-1a over every byte written.
    digest: u64,
    /// Events kept as values until taken ([`EventLog::recording`]).
    records: Option<Vec<Record>>,
    /// The line being written (kept to keep its capacity).
    line: Vec<u8>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl EventLog {
    /// A log that keeps its lines.
    pub fn keeping() -> EventLog {
        EventLog {
            keep: true,
            write: true,
            bytes: Vec::new(),
            lines: 0,
            digest: FNV_OFFSET,
            records: None,
            line: Vec::new(),
        }
    }

    /// A log that digests its lines and keeps each event as a [`Record`] until
    /// [`EventLog::take_records`] (the text is not kept).
    pub fn recording() -> EventLog {
        EventLog {
            records: Some(Vec::new()),
            ..EventLog::digest_only()
        }
    }

    /// The events recorded since the last call (empty unless [`EventLog::recording`]).
    pub fn take_records(&mut self) -> Vec<Record> {
        self.records
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// A log that only counts lines and digests them.
    pub fn digest_only() -> EventLog {
        EventLog {
            keep: false,
            ..EventLog::keeping()
        }
    }

    /// A log that only counts events: no line is built, the digest stays constant.
    pub fn counting() -> EventLog {
        EventLog {
            keep: false,
            write: false,
            ..EventLog::keeping()
        }
    }

    /// Record one event at `at`; `detail` is only built when something is written, and
    /// written without building a [`Value`] (but for a recording log, which keeps
    /// values). A detail that is not a [`Value`] must write what its [`Value`] would:
    /// object keys in sorted order (a `Value` object sorts them), so that the line is
    /// byte for byte the same.
    pub fn record<D: Serialize>(
        &mut self,
        at: Duration,
        node: &str,
        kind: &str,
        detail: impl FnOnce() -> D,
    ) {
        if !self.write {
            self.lines += 1;
            return;
        }
        if self.records.is_none() {
            return self.write_line(at, node, kind, &detail());
        }
        let detail = serde_json::to_value(detail())
            .unwrap_or_else(|e| Value::String(format!("log_error: {e}")));
        self.write_line(at, node, kind, &detail);
        if let Some(records) = &mut self.records {
            records.push(Record {
                at,
                node: node.to_string(),
                kind: kind.to_string(),
                detail,
            });
        }
    }

    /// Write, digest, count and maybe keep one line.
    fn write_line<D: Serialize>(&mut self, at: Duration, node: &str, kind: &str, detail: &D) {
        let line = Line {
            t_us: u64::try_from(at.as_micros()).unwrap_or(u64::MAX),
            node,
            kind,
            detail,
        };
        let mut text = std::mem::take(&mut self.line);
        text.clear();
        if let Err(e) = serde_json::to_writer(&mut text, &line) {
            // A Value always serializes; keep the line count honest regardless.
            text.clear();
            text.extend_from_slice(format!("{{\"log_error\":{:?}}}", e.to_string()).as_bytes());
        }
        text.push(b'\n');
        for b in &text {
            self.digest = (self.digest ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
        }
        self.lines += 1;
        if self.keep {
            self.bytes.extend_from_slice(&text);
        }
        self.line = text;
    }

    /// Whether lines are written (and digested): `false` for a counting log, whose
    /// callers need not build what a line would say.
    pub fn writes(&self) -> bool {
        self.write
    }

    /// The lines kept so far (empty for a digest-only log).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The lines kept so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// A digest of every line written, kept or not.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_have_a_fixed_field_order() {
        let mut log = EventLog::keeping();
        log.record(Duration::from_millis(3), "sidecar/0", "wake", || json!({}));
        log.record(
            Duration::from_micros(7),
            "etcd",
            "put",
            || json!({"z": 1, "a": 2}),
        );
        assert_eq!(
            log.text(),
            "{\"t_us\":3000,\"node\":\"sidecar/0\",\"kind\":\"wake\",\"detail\":{}}\n\
             {\"t_us\":7,\"node\":\"etcd\",\"kind\":\"put\",\"detail\":{\"a\":2,\"z\":1}}\n"
        );
        assert_eq!(log.lines(), 2);
    }

    #[test]
    fn digest_only_matches_keeping() {
        let mut a = EventLog::keeping();
        let mut b = EventLog::digest_only();
        for log in [&mut a, &mut b] {
            log.record(Duration::from_secs(1), "n", "k", || json!({"x": 1}));
        }
        assert_eq!(a.digest(), b.digest());
        assert!(b.bytes().is_empty());
        assert_eq!(b.lines(), 1);
    }
}
