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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// A pending event's place in the order: time in nanoseconds (saturated; the slot keeps
/// the exact time), sequence number, slot of the event.
type Key = (u64, u64, u32);

/// Events by (time, sequence), earliest first.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<Key>>,
    /// The events by slot, with their exact time; `None`: a free slot.
    slots: Vec<Option<(Duration, E)>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }
}

impl<E> Queue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `at`, after every event already scheduled for `at`.
    pub fn push(&mut self, at: Duration, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                if let Some(s) = self.slots.get_mut(slot as usize) {
                    *s = Some((at, event));
                }
                slot
            }
            None => {
                self.slots.push(Some((at, event)));
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        self.heap.push(Reverse((nanos, seq, slot)));
    }

    /// The earliest event, with its time and sequence number.
    pub fn pop(&mut self) -> Option<(Duration, u64, E)> {
        loop {
            let Reverse((_, seq, slot)) = self.heap.pop()?;
            let Some((at, event)) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
                continue; // unreachable: every key has its event
            };
            self.free.push(slot);
            return Some((at, seq, event));
        }
    }

    /// When the earliest event is due.
    pub fn peek_time(&self) -> Option<Duration> {
        let Reverse((_, _, slot)) = self.heap.peek()?;
        self.slots
            .get(*slot as usize)
            .and_then(|s| s.as_ref())
            .map(|(at, _)| *at)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_scheduling_order() {
        let mut q = Queue::new();
        let ms = Duration::from_millis;
        q.push(ms(5), "b");
        q.push(ms(1), "a");
        q.push(ms(5), "c");
        q.push(ms(5), "d");
        assert_eq!(q.peek_time(), Some(ms(1)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, _, e)| e).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert!(q.is_empty());
    }

    /// Against a sorted list, with pushes while draining: into the current bucket,
    /// before it, and later.
    #[test]
    fn pops_in_time_then_sequence_order_with_pushes_between_pops() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut q = Queue::new();
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
        while let Some(at) = q.peek_time() {
            let (t, s, e) = q.pop().unwrap();
            assert_eq!((t, s), (at, e));
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
        assert!(q.is_empty());
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
}
