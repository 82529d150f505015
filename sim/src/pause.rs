//! Stopped processes: which nodes are paused (as by `SIGSTOP`, a VM pause or a CPU quota
//! spent) until when, and what reached each meanwhile.
//!
//! A paused node handles nothing. What would have reached it — a request (it waits as in
//! a stopped process's socket backlog), an answer or failure of its own call, its own
//! timer, a stream line — is held, in the order it was due, and handed to it when it
//! resumes, at the time it resumes: a due timer fires late, a request is served late,
//! an answer is read late. Meanwhile the rest of the world goes on: the caller of a held
//! request still meets its own timeout, a lease in etcd still runs out.
//!
//! A throttled node is paused over and over: it runs for `run` in every `period`, as a
//! process whose CPU quota is spent early in each period.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::node::NodeId;

/// A node paused until `until`, with what reached it meanwhile.
#[derive(Debug)]
struct Paused<E> {
    since: Duration,
    until: Duration,
    held: Vec<E>,
}

/// The paused nodes and their held events.
#[derive(Debug)]
pub struct Pauses<E> {
    paused: BTreeMap<NodeId, Paused<E>>,
}

impl<E> Default for Pauses<E> {
    fn default() -> Self {
        Pauses {
            paused: BTreeMap::new(),
        }
    }
}

impl<E> Pauses<E> {
    /// Pause `node` from `now` until `until` (a pause already under way lasts until the
    /// later of the two). Answers whether it was running.
    pub fn pause(&mut self, node: NodeId, now: Duration, until: Duration) -> bool {
        if let Some(p) = self.paused.get_mut(&node) {
            p.until = p.until.max(until);
            return false;
        }
        let paused = Paused {
            since: now,
            until,
            held: Vec::new(),
        };
        self.paused.insert(node, paused);
        true
    }

    /// Whether any node is paused.
    pub fn any(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Whether `node` is paused.
    pub fn is_paused(&self, node: NodeId) -> bool {
        !self.paused.is_empty() && self.paused.contains_key(&node)
    }

    /// Hold `event` for paused `node` (answers it back when the node is running).
    pub fn hold(&mut self, node: NodeId, event: E) -> Option<E> {
        match self.paused.get_mut(&node) {
            Some(p) => {
                p.held.push(event);
                None
            }
            None => Some(event),
        }
    }

    /// At `now`: if `node`'s pause is over, it runs again; answers how long it was
    /// stopped and what was held for it, oldest first (`None`: still paused, or it was
    /// not paused).
    pub fn resume_due(&mut self, node: NodeId, now: Duration) -> Option<(Duration, Vec<E>)> {
        if self.paused.get(&node)?.until > now {
            return None;
        }
        let p = self.paused.remove(&node)?;
        Some((now.saturating_sub(p.since), p.held))
    }

    /// The process behind `node` ended (killed, crashed, restarted): it is not paused
    /// any more, and what was held for it is dropped with it.
    /// Answers how many held events were dropped (`None`: it was not paused).
    pub fn forget(&mut self, node: NodeId) -> Option<usize> {
        self.paused.remove(&node).map(|p| p.held.len())
    }
}

/// The pauses that make up a throttle from `from` for `lasting`: in every `period` the
/// node runs for `run` and is paused for the rest. Each pair is (start, end); the last
/// pause ends by `from + lasting`. Empty when `run >= period` (nothing is withheld) or
/// `period` is zero.
pub fn throttle_pauses(
    from: Duration,
    lasting: Duration,
    run: Duration,
    period: Duration,
) -> Vec<(Duration, Duration)> {
    if period.is_zero() || run >= period {
        return Vec::new();
    }
    let end = from + lasting;
    let mut out = Vec::new();
    let mut cycle = from;
    while cycle + run < end {
        out.push((cycle + run, (cycle + period).min(end)));
        cycle += period;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn held_events_come_back_in_order_once_the_pause_is_over() {
        let mut p = Pauses::default();
        let node = NodeId::Sidecar(0);
        assert_eq!(p.hold(node, 1), Some(1), "a running node gets its event");
        assert!(p.pause(node, ms(0), ms(100)));
        assert_eq!(p.hold(node, 2), None);
        assert_eq!(p.hold(node, 3), None);
        assert_eq!(p.hold(NodeId::Master, 4), Some(4), "others run on");
        assert!(
            !p.pause(node, ms(50), ms(150)),
            "a second pause extends the first"
        );
        assert_eq!(p.resume_due(node, ms(100)), None, "extended to 150 ms");
        assert_eq!(p.resume_due(node, ms(150)), Some((ms(150), vec![2, 3])));
        assert!(!p.is_paused(node));
        assert_eq!(p.resume_due(node, ms(200)), None);
    }

    #[test]
    fn an_ended_process_drops_what_was_held() {
        let mut p = Pauses::default();
        let node = NodeId::Vllm(1);
        p.pause(node, ms(0), ms(100));
        p.hold(node, "request");
        assert_eq!(p.forget(node), Some(1));
        assert_eq!(p.forget(node), None);
        assert!(!p.is_paused(node));
        assert_eq!(p.resume_due(node, ms(100)), None);
    }

    #[test]
    fn a_throttle_withholds_the_rest_of_each_period() {
        let got = throttle_pauses(ms(1000), ms(1000), ms(100), ms(400));
        assert_eq!(
            got,
            vec![
                (ms(1100), ms(1400)),
                (ms(1500), ms(1800)),
                (ms(1900), ms(2000)),
            ]
        );
        assert!(throttle_pauses(ms(0), ms(1000), ms(400), ms(400)).is_empty());
        assert!(throttle_pauses(ms(0), ms(1000), ms(0), ms(0)).is_empty());
    }
}
