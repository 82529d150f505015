//! The watcher's next step, decided without I/O: list or watch, how long to back off,
//! and what a stream's message or its end means for the stream.
//!
//! Why apart from [`crate::watch`]: the async task owns sockets, timers and the probes;
//! these rules are the master's behaviour when etcd misbehaves (a lost stream, lost
//! data, a compaction), and a simulator must run the very same rules in virtual time.

use std::time::Duration;

use crate::follow::Verdict;

/// How long a watch stream may stay silent before it is re-opened.
pub const WATCH_IDLE: Duration = Duration::from_secs(120);
pub const BACKOFF_START: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What the watcher does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// List first (`apply` false: only to learn the revision).
    List { apply: bool },
    /// Watch from the core's cursor.
    Watch,
}

/// Why a stream ended on purpose (not a failure: no backoff before the next step).
pub const PAUSED: &str = "paused";
pub const RESTART: &str = "master restart";

/// The watcher's position, backoff and memory of the last stream.
#[derive(Debug, Clone)]
pub struct WatchPlan {
    pos: Position,
    backoff: Duration,
    opened_before: bool,
    /// Why the last stream ended (said when the next one opens).
    reason: String,
}

impl Default for WatchPlan {
    fn default() -> Self {
        WatchPlan::new()
    }
}

impl WatchPlan {
    /// At start: list and apply, then watch.
    pub fn new() -> WatchPlan {
        WatchPlan {
            pos: Position::List { apply: true },
            backoff: BACKOFF_START,
            opened_before: false,
            reason: String::from("start"),
        }
    }

    pub fn position(&self) -> Position {
        self.pos
    }

    /// A listing ended. Success goes on to watch; a failure answers how long to wait
    /// before listing again.
    pub fn listed(&mut self, ok: bool) -> Option<Duration> {
        if ok {
            self.pos = Position::Watch;
            self.backoff = BACKOFF_START;
            None
        } else {
            Some(self.next_backoff())
        }
    }

    /// A watch is about to open: answers why the previous stream ended when this is a
    /// re-open (the `watch_reconnect` event), `None` for the first one.
    pub fn opening(&mut self) -> Option<String> {
        let again = self.opened_before.then(|| self.reason.clone());
        self.opened_before = true;
        again
    }

    /// Opening the watch failed: answers how long to wait before trying again.
    pub fn open_failed(&mut self, why: String) -> Duration {
        self.reason = format!("open failed: {why}");
        self.next_backoff()
    }

    /// A message of the stream, judged by the core: answers why the stream must end,
    /// if it must (and where to go next: a re-list, or a re-open from the cursor).
    pub fn on_message(&mut self, verdict: &Verdict) -> Option<String> {
        self.backoff = BACKOFF_START;
        match verdict {
            Verdict::Events(_) => None,
            Verdict::RevisionReset { seen, revision } => {
                self.pos = Position::List { apply: true };
                Some(format!("revision reset from {seen} to {revision}"))
            }
            Verdict::AuthRefused { reason } => Some(format!("canceled: {reason}")),
            Verdict::Compacted {
                compact_revision, ..
            } => {
                self.pos = Position::List { apply: true };
                Some(format!("compacted at {compact_revision}"))
            }
            Verdict::Canceled { reason } => Some(format!("canceled: {reason}")),
        }
    }

    /// The stream ended for `reason`: answers how long to wait before the next step
    /// (`None`: at once, after an interruption on purpose or to re-list).
    pub fn stream_ended(&mut self, reason: String) -> Option<Duration> {
        let on_purpose = reason == PAUSED || reason == RESTART;
        self.reason = reason;
        (!on_purpose && self.pos == Position::Watch).then(|| self.next_backoff())
    }

    /// The master restarts: list again, applying the listing only if `relist`.
    pub fn restart(&mut self, relist: bool) {
        self.pos = Position::List { apply: relist };
    }

    /// One backoff step: answers the current one and doubles it, up to the maximum.
    fn next_backoff(&mut self) -> Duration {
        let d = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_stream_backs_off_and_reopens_from_the_cursor() {
        let mut p = WatchPlan::new();
        assert_eq!(p.position(), Position::List { apply: true });
        assert_eq!(p.listed(false), Some(BACKOFF_START));
        assert_eq!(p.listed(false), Some(BACKOFF_START * 2));
        assert_eq!(p.listed(true), None);
        assert_eq!(p.position(), Position::Watch);
        assert_eq!(p.opening(), None);
        assert_eq!(p.stream_ended("reset".into()), Some(BACKOFF_START));
        assert_eq!(p.opening().as_deref(), Some("reset"));
        assert_eq!(p.open_failed("refused".into()), BACKOFF_START * 2);
        for _ in 0..10 {
            p.open_failed("refused".into());
        }
        assert_eq!(p.open_failed("refused".into()), BACKOFF_MAX);
    }

    #[test]
    fn lost_data_and_compaction_relist_at_once() {
        let mut p = WatchPlan::new();
        p.listed(true);
        let why = p.on_message(&Verdict::RevisionReset {
            seen: 9,
            revision: 2,
        });
        assert_eq!(why.as_deref(), Some("revision reset from 9 to 2"));
        assert_eq!(p.position(), Position::List { apply: true });
        assert_eq!(p.stream_ended(why.unwrap_or_default()), None);
        p.listed(true);
        assert!(p.on_message(&Verdict::Events(Vec::new())).is_none());
        p.restart(false);
        assert_eq!(p.position(), Position::List { apply: false });
        assert_eq!(p.stream_ended(RESTART.into()), None);
    }
}
