//! The one event queue: events ordered by (virtual time, sequence number).
//!
//! Why a sequence number: two events due at the same instant must come out in the order
//! they were scheduled, on every run. A heap alone breaks ties by whatever the payload
//! compares as (or not at all); the sequence number makes the order total and
//! independent of the payload.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

/// A pending event: due `at`, the `seq`-th one scheduled.
#[derive(Debug)]
struct Entry<E> {
    at: Duration,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Events by (time, sequence), earliest first.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    next_seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            heap: BinaryHeap::new(),
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
        self.heap.push(Reverse(Entry { at, seq, event }));
    }

    /// The earliest event, with its time and sequence number.
    pub fn pop(&mut self) -> Option<(Duration, u64, E)> {
        self.heap
            .pop()
            .map(|Reverse(Entry { at, seq, event })| (at, seq, event))
    }

    /// When the earliest event is due.
    pub fn peek_time(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse(e)| e.at)
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
}
