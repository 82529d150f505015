//! The load model of one engine: `max_num_seqs` running slots, a FIFO waiting queue,
//! and a KV cache that only admits a request whose tokens fit (that rule is
//! [`crate::sched::Scheduler`]; this module adds the waiting, the latencies and the
//! stats).
//!
//! No task ticks per token: a request holds a [`Slot`] while it runs and its own task
//! sleeps until its next token is due (the timeline comes from [`Engine::prefill_time`]
//! and [`Engine::inter_token_time`], i.e. [`crate::latency::Latency`] at the current
//! batch size). Releasing a
//! slot (drop) hands it to the head of the queue under the same lock, so the counts seen
//! by `/metrics` are always exact, including for clients that hang up while waiting.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;

use crate::config::Config;
use crate::latency::{Latency, PrefixMemory};
use crate::sched::{Decision, Scheduler};
use crate::stats::{Buckets, EngineStats};

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const CANCELLED: u8 = 2;

struct Waiter {
    need: u64,
    state: AtomicU8,
    notify: Notify,
}

/// One engine (one `engine="i"` label set).
pub struct Engine {
    pub index: usize,
    kv_capacity: u64,
    latency: Latency,
    sched: Mutex<Scheduler<Arc<Waiter>>>,
    running_now: AtomicUsize,
    waiting_now: AtomicUsize,
    stats: Mutex<EngineStats>,
    prefix_seen: Mutex<PrefixMemory>,
}

/// The answer to a request for a running slot.
pub enum Admit {
    Running(Slot),
    Queued(Ticket),
    /// The waiting queue is full (429).
    Rejected,
}

/// A running slot; dropping it frees the slot and its KV tokens.
pub struct Slot {
    engine: Arc<Engine>,
    need: u64,
}

/// A place in the waiting queue; dropping it leaves the queue.
pub struct Ticket {
    engine: Arc<Engine>,
    waiter: Arc<Waiter>,
    converted: bool,
}

/// A waiter whose client left (its queue entry is skipped).
fn gone(w: &Arc<Waiter>) -> bool {
    w.state.load(Ordering::Acquire) == CANCELLED
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Engine {
    pub fn new(index: usize, cfg: &Config, created: f64) -> Arc<Self> {
        let buckets = Buckets::for_dialect(cfg.dialect, cfg.max_model_len);
        Arc::new(Engine {
            index,
            kv_capacity: cfg.kv_capacity_tokens,
            latency: Latency::new(cfg),
            sched: Mutex::new(Scheduler::new(
                cfg.max_num_seqs,
                cfg.max_waiting,
                cfg.kv_capacity_tokens,
            )),
            running_now: AtomicUsize::new(0),
            waiting_now: AtomicUsize::new(0),
            stats: Mutex::new(EngineStats::new(&buckets, created)),
            prefix_seen: Mutex::new(PrefixMemory::default()),
        })
    }

    /// Ask for a running slot for a request holding `need` KV tokens (the rule is
    /// [`Scheduler::admit`]).
    pub fn admit(self: &Arc<Self>, need: u64) -> Admit {
        let mut s = lock(&self.sched);
        let mut queued = None;
        let decision = s.admit(need, || {
            let w = Arc::new(Waiter {
                need,
                state: AtomicU8::new(WAITING),
                notify: Notify::new(),
            });
            queued = Some(w.clone());
            w
        });
        self.publish(&s);
        match (decision, queued) {
            (Decision::Run, _) => Admit::Running(Slot {
                engine: self.clone(),
                need,
            }),
            (Decision::Queued, Some(waiter)) => Admit::Queued(Ticket {
                engine: self.clone(),
                waiter,
                converted: false,
            }),
            _ => {
                drop(s);
                lock(&self.stats).rejected += 1;
                Admit::Rejected
            }
        }
    }

    fn publish(&self, s: &Scheduler<Arc<Waiter>>) {
        self.running_now.store(s.running(), Ordering::Relaxed);
        self.waiting_now.store(s.waiting(), Ordering::Relaxed);
    }

    /// Free one slot and wake the waiters the queue hands it to.
    fn release_locked(&self, s: &mut Scheduler<Arc<Waiter>>, need: u64) {
        s.release(need, gone, |w| {
            w.state.store(GRANTED, Ordering::Release);
            w.notify.notify_one();
        });
        self.publish(s);
    }

    /// Sleep at `level`: nothing new starts until [`Engine::wake`]; running requests
    /// finish (vLLM's `mode=wait`), arrivals queue.
    pub fn sleep(&self, level: u8) {
        let mut s = lock(&self.sched);
        s.pause();
        self.stats().asleep = Some(level);
        self.publish(&s);
    }

    /// Wake: the queue starts on the free capacity.
    pub fn wake(&self) {
        let mut s = lock(&self.sched);
        s.resume(gone, |w| {
            w.state.store(GRANTED, Ordering::Release);
            w.notify.notify_one();
        });
        self.stats().asleep = None;
        self.publish(&s);
    }

    pub fn running(&self) -> usize {
        self.running_now.load(Ordering::Relaxed)
    }

    pub fn waiting(&self) -> usize {
        self.waiting_now.load(Ordering::Relaxed)
    }

    /// Load for data-parallel balancing.
    pub fn load(&self) -> usize {
        self.running() + self.waiting()
    }

    /// (running, waiting, kv tokens held) read together.
    pub fn snapshot(&self) -> (usize, usize, u64) {
        let s = lock(&self.sched);
        (s.running(), s.waiting(), s.kv_used())
    }

    pub fn kv_capacity(&self) -> u64 {
        self.kv_capacity
    }

    pub fn kv_usage(&self) -> f64 {
        let (_, _, used) = self.snapshot();
        (used as f64 / self.kv_capacity as f64).min(1.0)
    }

    pub fn stats(&self) -> MutexGuard<'_, EngineStats> {
        lock(&self.stats)
    }

    /// Whether a prompt with this hash was seen before ([`PrefixMemory`]).
    pub fn prefix_lookup(&self, prompt_hash: u64) -> bool {
        lock(&self.prefix_seen).lookup(prompt_hash)
    }

    /// Time from being scheduled to the first token, at the current batch size.
    pub fn prefill_time(&self, prompt_tokens: u32, rng: &mut impl Rng) -> Duration {
        self.latency
            .prefill_time(self.running(), prompt_tokens, rng)
    }

    /// Time from one output token to the next, at the current batch size.
    pub fn inter_token_time(&self, rng: &mut impl Rng) -> Duration {
        self.latency.inter_token_time(self.running(), rng)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = lock(&self.engine.sched);
        self.engine.release_locked(&mut s, self.need);
    }
}

impl Ticket {
    /// Wait until the queue hands us a slot. Cancel-safe: dropping the future (client
    /// gone) leaves the queue or passes a just-granted slot on.
    pub async fn wait(mut self) -> Slot {
        loop {
            if self.waiter.state.load(Ordering::Acquire) == GRANTED {
                self.converted = true;
                return Slot {
                    engine: self.engine.clone(),
                    need: self.waiter.need,
                };
            }
            self.waiter.notify.notified().await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.converted {
            return;
        }
        let mut s = lock(&self.engine.sched);
        match self.waiter.state.load(Ordering::Acquire) {
            WAITING => {
                self.waiter.state.store(CANCELLED, Ordering::Release);
                s.leave(gone);
                self.engine.publish(&s);
            }
            GRANTED => self.engine.release_locked(&mut s, self.waiter.need),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(max: usize, waiting: usize) -> Arc<Engine> {
        let cfg = Config {
            max_num_seqs: max,
            max_waiting: waiting,
            kv_capacity_tokens: 100,
            ..Config::default()
        };
        Engine::new(0, &cfg, 0.0)
    }

    #[tokio::test]
    async fn queue_fifo_and_limits() {
        let e = engine(1, 1);
        let Admit::Running(a) = e.admit(10) else {
            panic!("first runs")
        };
        let Admit::Queued(t) = e.admit(10) else {
            panic!("second waits")
        };
        assert!(matches!(e.admit(10), Admit::Rejected));
        assert_eq!((e.running(), e.waiting()), (1, 1));
        drop(a);
        assert_eq!((e.running(), e.waiting()), (1, 0));
        let b = t.wait().await;
        drop(b);
        assert_eq!(e.snapshot(), (0, 0, 0));
    }

    #[tokio::test]
    async fn cancelled_waiter_leaves_no_trace() {
        let e = engine(1, 10);
        let Admit::Running(a) = e.admit(10) else {
            panic!()
        };
        let Admit::Queued(t1) = e.admit(10) else {
            panic!()
        };
        let Admit::Queued(t2) = e.admit(10) else {
            panic!()
        };
        drop(t1);
        assert_eq!(e.waiting(), 1);
        drop(a);
        // t2 was granted while t1's entry was skipped.
        assert_eq!((e.running(), e.waiting()), (1, 0));
        // Granted but never used: dropping the ticket frees the slot.
        drop(t2);
        assert_eq!(e.snapshot(), (0, 0, 0));
    }

    #[tokio::test]
    async fn kv_capacity_gates_admission() {
        let e = engine(10, 10);
        let Admit::Running(_a) = e.admit(80) else {
            panic!()
        };
        assert!(matches!(e.admit(30), Admit::Queued(_)));
        assert!((e.kv_usage() - 0.8).abs() < 1e-9);
    }
}
