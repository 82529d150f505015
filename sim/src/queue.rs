//! The one event queue: events ordered by (virtual time, sequence number).
//!
//! Why a sequence number: two events due at the same instant must come out in the order
//! they were scheduled, on every run. A heap alone breaks ties by whatever the payload
//! compares as (or not at all); the sequence number makes the order total and
//! independent of the payload.
//!
//! Why the events sit in a slab beside the heap: an event is a hundred bytes (a request
//! or an answer rides in it) and a heap moves its entries at every level of every push
//! and pop; the heap holds only (time, sequence, slot), 24 bytes, and each event is
//! moved twice, in and out.
//!
//! Why lanes: most events are due a fixed delay after the instant they are scheduled at
//! (a link's delay, a caller's timeout, "now"), and time never goes back, so the events
//! of one delay are due in the order they were scheduled: a FIFO. Those wait in a lane
//! per delay ([`Queue::push_after`]); only the others (timers, arrivals) go through the
//! heap. A pop takes the least (time, sequence) of the heap's top and the lanes' fronts:
//! the same total order as one heap, for far fewer sift steps over a far smaller heap
//! (nearly every exchange's timeout waits here for nothing, its exchange long over).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// A pending event's place in the order: time in nanoseconds (saturated; the slot keeps
/// the exact time), sequence number, slot of the event.
type Key = (u64, u64, u32);

/// Lanes kept at most; an event of another delay goes through the heap.
const LANES: usize = 8;

/// Events due `delay` after they were scheduled, in scheduling order (so in due order).
#[derive(Debug)]
struct Lane<E> {
    delay: Duration,
    /// (time in nanoseconds, sequence, exact time, event).
    items: VecDeque<(u64, u64, Duration, E)>,
}

/// Events by (time, sequence), earliest first.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<Key>>,
    /// The events by slot, with their exact time; `None`: a free slot.
    slots: Vec<Option<(Duration, E)>>,
    free: Vec<u32>,
    lanes: Vec<Lane<E>>,
    next_seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            lanes: Vec::new(),
            next_seq: 0,
        }
    }
}

/// Where the earliest event waits.
#[derive(Clone, Copy)]
enum Source {
    Heap,
    Lane(usize),
}

fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

impl<E> Queue<E> {
    /// Schedule `event` at `at`, after every event already scheduled for `at`.
    pub fn push(&mut self, at: Duration, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        });
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = Some((at, event));
        }
        self.heap.push(Reverse((nanos(at), seq, slot)));
    }

    /// Schedule `event` at `now + delay`, after every event already scheduled for that
    /// time: [`Queue::push`], in the lane of `delay` when there is one (or room for
    /// one) and `now` has not gone back since that lane's last event.
    pub fn push_after(&mut self, now: Duration, delay: Duration, event: E) {
        let at = now.saturating_add(delay);
        let fits = |l: &Lane<E>| l.items.back().is_none_or(|b| b.2 <= at);
        let lane = match self.lanes.iter().position(|l| l.delay == delay) {
            Some(i) => Some(i).filter(|&i| self.lanes.get(i).is_some_and(fits)),
            // A lane left empty takes the new delay, so that rare delays do not keep
            // lanes forever.
            None => match self.lanes.iter().position(|l| l.items.is_empty()) {
                Some(i) => {
                    if let Some(l) = self.lanes.get_mut(i) {
                        l.delay = delay;
                    }
                    Some(i)
                }
                None if self.lanes.len() < LANES => {
                    self.lanes.push(Lane {
                        delay,
                        items: VecDeque::new(),
                    });
                    Some(self.lanes.len() - 1)
                }
                None => None,
            },
        };
        match lane.and_then(|i| self.lanes.get_mut(i)) {
            Some(l) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                l.items.push_back((nanos(at), seq, at, event));
            }
            None => self.push(at, event),
        }
    }

    /// Where the earliest event is, and its (time, sequence).
    fn earliest(&self) -> Option<(Source, (u64, u64))> {
        let mut best = self
            .heap
            .peek()
            .map(|Reverse((t, seq, _))| (Source::Heap, (*t, *seq)));
        for (i, l) in self.lanes.iter().enumerate() {
            if let Some((t, seq, _, _)) = l.items.front() {
                if best.is_none_or(|(_, k)| (*t, *seq) < k) {
                    best = Some((Source::Lane(i), (*t, *seq)));
                }
            }
        }
        best
    }

    /// The earliest event, which waits in `source`.
    fn pop_from(&mut self, source: Source) -> Option<(Duration, u64, E)> {
        if let Source::Lane(i) = source {
            let (_, seq, at, event) = self.lanes.get_mut(i)?.items.pop_front()?;
            return Some((at, seq, event));
        }
        let Reverse((_, seq, slot)) = self.heap.pop()?;
        // Every key has its event.
        let (at, event) = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some((at, seq, event))
    }

    /// The earliest event if it is due at or before `until`.
    pub fn pop_due(&mut self, until: Duration) -> Option<(Duration, u64, E)> {
        let (source, (t, _)) = self.earliest()?;
        // Nanoseconds saturate: compare exact times when they might.
        if t > nanos(until) || (t == u64::MAX && self.time_in(source)? > until) {
            return None;
        }
        // The earliest was just found: pop it without looking again.
        self.pop_from(source)
    }

    /// When the earliest event, which waits in `source`, is due.
    fn time_in(&self, source: Source) -> Option<Duration> {
        match source {
            Source::Lane(i) => self.lanes.get(i)?.items.front().map(|x| x.2),
            Source::Heap => {
                let Reverse((_, _, slot)) = self.heap.peek()?;
                self.slots.get(*slot as usize)?.as_ref().map(|(at, _)| *at)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_scheduling_order() {
        let mut q = Queue::default();
        let ms = Duration::from_millis;
        q.push(ms(5), "b");
        q.push(ms(1), "a");
        q.push(ms(5), "c");
        q.push(ms(5), "d");
        assert!(q.pop_due(ms(0)).is_none());
        let order: Vec<_> = std::iter::from_fn(|| q.pop_due(Duration::MAX)).collect();
        let at = [ms(1), ms(5), ms(5), ms(5)];
        assert_eq!(
            order,
            [
                (at[0], 1, "a"),
                (at[1], 0, "b"),
                (at[2], 2, "c"),
                (at[3], 3, "d")
            ]
        );
    }

    /// Against a sorted list, with pushes while draining: into the current bucket,
    /// before it, and later.
    #[test]
    fn pops_in_time_then_sequence_order_with_pushes_between_pops() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut q = Queue::default();
        let mut expected: Vec<(Duration, u64)> = Vec::new();
        let mut seq = 0;
        let mut push = |q: &mut Queue<u64>, at: Duration, expected: &mut Vec<_>| {
            q.push(at, seq);
            expected.push((at, seq));
            seq += 1;
        };
        for _ in 0..500 {
            let at = Duration::from_micros(rng.gen_range(0..20_000));
            push(&mut q, at, &mut expected);
        }
        let mut popped = Vec::new();
        let mut now = Duration::ZERO;
        while let Some((t, s, e)) = q.pop_due(Duration::MAX) {
            assert_eq!(s, e);
            popped.push((t, s));
            now = t;
            if popped.len() < 2000 {
                // Now, a little later (often the same bucket), and (rarely) earlier.
                let at = match rng.gen_range(0..10) {
                    0 => now,
                    1 => now.saturating_sub(Duration::from_micros(300)),
                    _ => now + Duration::from_micros(rng.gen_range(0..5_000)),
                };
                push(&mut q, at, &mut expected);
            }
        }
        assert!(now > Duration::ZERO);
        // Each pop is the least of what was queued at the time: with pushes into the
        // past, that is not a sorted list overall, so compare pop by pop.
        let mut queued: Vec<(Duration, u64)> = Vec::new();
        let mut next = 0;
        let mut pushed = expected.iter();
        for _ in 0..500 {
            queued.push(*pushed.next().unwrap());
        }
        for p in &popped {
            queued.sort();
            assert_eq!(queued.first(), Some(p));
            queued.remove(0);
            if next < 1999 {
                if let Some(x) = pushed.next() {
                    queued.push(*x);
                }
                next += 1;
            }
        }
    }

    /// Lanes and heap together, against a sorted list: events scheduled at a fixed
    /// delay after "now" (more delays than lanes, some of them rare) and at any time.
    #[test]
    fn lanes_and_heap_pop_in_one_time_then_sequence_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut q = Queue::default();
        let mut queued: Vec<(Duration, u64)> = Vec::new();
        let us = Duration::from_micros;
        let delays: Vec<Duration> = (0..12).map(|k| us(k * 700)).collect();
        let mut now = Duration::ZERO;
        let mut seq = 0u64;
        let mut popped = 0;
        while popped < 5000 {
            for _ in 0..rng.gen_range(0..3) {
                if rng.gen_bool(0.3) {
                    let at = now + us(rng.gen_range(0..9_000));
                    q.push(at, seq);
                    queued.push((at, seq));
                } else {
                    // Mostly the first four delays: the rest fight for lanes.
                    let k = if rng.gen_bool(0.8) {
                        rng.gen_range(0..4)
                    } else {
                        rng.gen_range(0..12)
                    };
                    q.push_after(now, delays[k], seq);
                    queued.push((now + delays[k], seq));
                }
                seq += 1;
            }
            queued.sort();
            let Some(first) = queued.first().copied() else {
                assert!(q.pop_due(Duration::MAX).is_none());
                q.push(now + us(1), seq);
                queued.push((now + us(1), seq));
                seq += 1;
                continue;
            };
            assert!(q.pop_due(first.0 - us(1).min(first.0)).is_none() || first.0.is_zero());
            let (t, _, e) = q.pop_due(first.0).unwrap();
            assert_eq!((t, e), first);
            queued.remove(0);
            now = t;
            popped += 1;
        }
        // Nothing lost: what is left is what was queued.
        let left = std::iter::from_fn(|| q.pop_due(Duration::MAX)).count();
        assert_eq!(left, queued.len());
    }
}
