//! The scheduling rule of one engine as a plain state machine: `max_num_seqs` running
//! slots, a KV cache that admits a request only if its tokens fit (or the engine is
//! idle), and a FIFO waiting queue bounded by `max_waiting`. No clock, no task, no lock:
//! the serving engine ([`crate::engine`]) wraps it with a mutex and wakes its waiters;
//! a simulation can drive it directly with waiters of its own (`W`).

use std::collections::VecDeque;

/// What [`Scheduler::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Runs now: a slot and its KV tokens are taken.
    Run,
    /// In line; [`Scheduler::release`] grants it later.
    Queued,
    /// The queue is full (429).
    Rejected,
}

/// One engine's slots, KV tokens and queue of waiters `W`.
#[derive(Debug)]
pub struct Scheduler<W> {
    max_num_seqs: usize,
    max_waiting: usize,
    kv_capacity: u64,
    running: usize,
    kv_used: u64,
    /// Waiters still in line (the queue may also hold gone ones, skipped lazily).
    waiting: usize,
    queue: VecDeque<(u64, W)>,
    /// Asleep (vLLM's paused scheduler): nothing new starts; arrivals wait in line.
    paused: bool,
}

impl<W> Scheduler<W> {
    pub fn new(max_num_seqs: usize, max_waiting: usize, kv_capacity: u64) -> Self {
        Scheduler {
            max_num_seqs,
            max_waiting,
            kv_capacity,
            running: 0,
            kv_used: 0,
            waiting: 0,
            queue: VecDeque::new(),
            paused: false,
        }
    }

    pub fn running(&self) -> usize {
        self.running
    }

    pub fn waiting(&self) -> usize {
        self.waiting
    }

    pub fn kv_used(&self) -> u64 {
        self.kv_used
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Stop starting requests (the engine sleeps); running ones go on, arrivals queue.
    pub fn pause(&mut self) {
        self.paused = true;
    }

    /// Start again: the head of the queue gets the free capacity, as on a release.
    pub fn resume(&mut self, gone: impl Fn(&W) -> bool, grant: impl FnMut(W)) {
        self.paused = false;
        self.grant_queued(gone, grant);
    }

    fn fits(&self, need: u64) -> bool {
        !self.paused
            && self.running < self.max_num_seqs
            && (self.running == 0 || self.kv_used + need <= self.kv_capacity)
    }

    /// A request holding `need` KV tokens arrives. FIFO: nobody overtakes a non-empty
    /// queue. `waiter` is made (and kept in line) only when it has to wait.
    pub fn admit(&mut self, need: u64, waiter: impl FnOnce() -> W) -> Decision {
        if self.waiting == 0 && self.fits(need) {
            self.running += 1;
            self.kv_used += need;
            return Decision::Run;
        }
        if self.waiting >= self.max_waiting {
            return Decision::Rejected;
        }
        self.queue.push_back((need, waiter()));
        self.waiting += 1;
        Decision::Queued
    }

    /// A running request holding `need` tokens is done: free its slot, then hand free
    /// capacity to the head of the queue, in order, while it fits. `gone` tells a
    /// waiter that left (skipped); `grant` receives each waiter that now runs.
    pub fn release(&mut self, need: u64, gone: impl Fn(&W) -> bool, grant: impl FnMut(W)) {
        self.running = self.running.saturating_sub(1);
        self.kv_used = self.kv_used.saturating_sub(need);
        self.grant_queued(gone, grant);
    }

    /// Hand free capacity to the head of the queue, in order, while it fits.
    fn grant_queued(&mut self, gone: impl Fn(&W) -> bool, mut grant: impl FnMut(W)) {
        while let Some((head_need, head)) = self.queue.front() {
            if gone(head) {
                self.queue.pop_front();
                continue;
            }
            if !self.fits(*head_need) {
                break;
            }
            let Some((need, w)) = self.queue.pop_front() else {
                break;
            };
            self.running += 1;
            self.kv_used += need;
            self.waiting = self.waiting.saturating_sub(1);
            grant(w);
        }
    }

    /// A waiter left the line (`gone` now says so of it). Its entry is skipped when it
    /// reaches the head; leftovers are swept if they pile up behind a stuck head.
    pub fn leave(&mut self, gone: impl Fn(&W) -> bool) {
        self.waiting = self.waiting.saturating_sub(1);
        if self.queue.len() > 2 * self.max_waiting.min(1 << 20) + 64 {
            self.queue.retain(|(_, w)| !gone(w));
        }
    }
}

/// vLLM's data-parallel balancing: the index of the least loaded engine (`loads` in
/// engine order), ties broken round-robin from engine `turn % n`.
pub fn least_loaded(loads: impl ExactSizeIterator<Item = usize>, turn: usize) -> Option<usize> {
    let n = loads.len().max(1);
    let turn = turn % n;
    loads
        .enumerate()
        .min_by_key(|(i, load)| (*load, (i + n - turn) % n))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn slots_kv_and_fifo() {
        // 2 slots, 100 KV tokens, 2 waiting places; waiters are plain ids.
        let mut s = Scheduler::new(2, 2, 100);
        let none = |_: &u32| false;
        assert_eq!(s.admit(80, || 0), Decision::Run);
        // Fits a slot but not the KV cache.
        assert_eq!(s.admit(30, || 1), Decision::Queued);
        // Would fit, but the queue is not empty: FIFO.
        assert_eq!(s.admit(10, || 2), Decision::Queued);
        assert_eq!(s.admit(10, || 3), Decision::Rejected);
        assert_eq!((s.running(), s.waiting(), s.kv_used()), (1, 2, 80));
        let mut granted = vec![];
        s.release(80, none, |w| granted.push(w));
        assert_eq!(granted, [1, 2]);
        assert_eq!((s.running(), s.waiting(), s.kv_used()), (2, 0, 40));
    }

    #[test]
    fn a_paused_engine_queues_everything_until_it_resumes() {
        let mut s = Scheduler::new(2, 10, 100);
        let none = |_: &u32| false;
        assert_eq!(s.admit(10, || 0), Decision::Run);
        s.pause();
        // Even an idle slot and free KV do not start anything.
        assert_eq!(s.admit(10, || 1), Decision::Queued);
        let mut granted = vec![];
        s.release(10, none, |w| granted.push(w));
        assert!(granted.is_empty());
        assert_eq!((s.running(), s.waiting()), (0, 1));
        s.resume(none, |w| granted.push(w));
        assert_eq!(granted, [1]);
        assert_eq!((s.running(), s.waiting(), s.is_paused()), (1, 0, false));
    }

    #[test]
    fn an_idle_engine_takes_anything_and_gone_waiters_are_skipped() {
        let mut s = Scheduler::new(1, 10, 100);
        assert_eq!(s.admit(500, || 0), Decision::Run);
        assert_eq!(s.admit(10, || 1), Decision::Queued);
        assert_eq!(s.admit(10, || 2), Decision::Queued);
        let gone: HashSet<u32> = [1].into();
        s.leave(|w| gone.contains(w));
        let mut granted = vec![];
        s.release(500, |w| gone.contains(w), |w| granted.push(w));
        assert_eq!(granted, [2]);
        assert_eq!((s.running(), s.waiting(), s.kv_used()), (1, 0, 10));
    }
}
