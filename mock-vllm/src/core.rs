//! One fake vLLM in virtual time: [`VllmCore`] holds what a mock-vllm server holds (its
//! engines' slots, queues, KV cache and stats, health mode, faults, gauge overrides) and
//! applies the same rules ([`crate::sched::Scheduler`], [`crate::latency::Latency`],
//! [`crate::answer::output_length`], [`crate::metrics::page`],
//! [`crate::scrape_faults`]), but is told the time instead of sleeping. A simulator
//! drives thousands of them: it offers requests ([`VllmCore::submit`]), wakes the core
//! at [`VllmCore::next_event_time`] ([`VllmCore::advance`]) and scrapes pages that are
//! rendered into one reused buffer.
//!
//! Time is a [`Duration`] since the simulation's zero; `_created` stamps print
//! `epoch_at_zero` plus it. Randomness is seeded from `Config::seed` exactly as the
//! serving shell seeds it (one generator per request, one for faults), so a core is
//! deterministic. Every entry point first runs the events due at its `now`.
//!
//! What the serving shell does and this does not: HTTP (no `http_*` counts, no bodies),
//! streaming's 16-token flushes of inter-token latencies (a request's ITLs are recorded
//! when it finishes, as the non-streaming path does), `/proc` (the `process_*`
//! families show fixed readings).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use bytes::Bytes;
use mock_kit::FaultRegistry;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::config::Config;
use crate::faults::Fault;
use crate::health::Health;
use crate::latency::{Latency, PrefixMemory};
use crate::metrics::{EngineView, Runtime, Snapshot};
use crate::process::ProcessView;
use crate::sched::Scheduler;
use crate::stats::{Buckets, EngineStats, FinishReason, HttpStats};
use crate::validate::Req;
use crate::waveform::Waveform;

mod flights;
mod load;
mod scrape;

use flights::{Flights, Handle};
#[cfg(test)]
mod tests;

/// What a server that may be down answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<T> {
    /// Not listening (crashed): the connection is refused.
    Refused,
    /// Never answers (`hang` modes and faults).
    Hang,
    Reply(T),
}

/// How a `/metrics` body goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Whole,
    /// `metrics_truncate` with `abort`: the body, then the connection is reset.
    ResetAfterBody,
    /// `metrics_slow`: trickled at this rate.
    Trickle {
        bytes_per_sec: u64,
    },
}

/// One `/metrics` answer; `body` borrows the core's page buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsReply<'a> {
    pub status: u16,
    pub content_type: &'static str,
    pub body: &'a [u8],
    /// The body as text when the core wrote it (no fault rewrote its bytes): a caller
    /// that needs a string need not check it is UTF-8.
    pub text: Option<&'a str>,
    /// The body when faults rewrote it, shared (the same bytes as `body`): a caller
    /// that keeps the body need not copy it.
    pub rewritten: Option<Bytes>,
    pub delivery: Delivery,
}

/// A request's handle, unique for the life of a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// What [`VllmCore::submit`] answers at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Running or queued; its [`Outcome`] comes from [`VllmCore::advance`].
    Accepted(RequestId),
    /// Not listening (crashed).
    Refused,
    /// Answered at once with this status: 503 while starting, 429 when the queue is
    /// full, a `completion_fail` fault's status.
    Failed(u16),
}

/// How an accepted request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// 200 with this many output tokens.
    Finished {
        reason: FinishReason,
        output_tokens: u32,
    },
    /// `completion_drop`: the connection was reset after some tokens.
    Dropped,
    /// The server crashed while the request was queued or running.
    Reset,
}

/// An accepted request's end, at virtual time `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub id: RequestId,
    pub at: Duration,
    pub end: End,
}

/// One engine's scheduler, latency model and prefix memory (its stats live in the
/// page snapshot, see [`VllmCore`]).
struct Lane {
    sched: Scheduler<Handle>,
    latency: Latency,
    prefix: PrefixMemory,
}

/// An accepted request.
struct Flight {
    id: RequestId,
    engine: usize,
    req: Req,
    rng: StdRng,
    out_tokens: u32,
    reason: FinishReason,
    need: u64,
    arrival: Duration,
    scheduled: Duration,
    first: Duration,
    itls: Vec<f64>,
    drop_after: Option<u32>,
    hang: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    FirstToken,
    Done,
}

/// A mock-vllm server's state and rules, time as an argument. See the module doc.
pub struct VllmCore {
    cfg: Config,
    epoch_at_zero: f64,
    mode: Health,
    listening: bool,
    started: Duration,
    lanes: Vec<Lane>,
    /// The page's input, kept between scrapes: engine stats are recorded in place, so a
    /// scrape copies nothing.
    snap: Snapshot,
    faults: FaultRegistry<Fault>,
    stale: Option<Bytes>,
    fault_rng: StdRng,
    seq: u64,
    flights: Flights,
    /// (due, order of scheduling, request, step): a min-heap.
    timers: BinaryHeap<Reverse<(Duration, u64, Handle, Step)>>,
    timer_seq: u64,
    overrides: Vec<(String, Waveform, Duration)>,
    done: Vec<Outcome>,
    page: String,
    /// The last compact page and its numbers, when kept ([`VllmCore::keep_last_page`]).
    page_memo: Option<Box<crate::metrics::PageMemo>>,
    /// The faulted page of the last scrape, when faults rewrote it.
    faulted: Bytes,
}

impl VllmCore {
    /// A server configured with `cfg` (validated) started at `now`; `_created` stamps
    /// and the process start print `epoch_at_zero + now`.
    pub fn new(cfg: Config, epoch_at_zero: f64, now: Duration) -> Result<Self, String> {
        cfg.validate()?;
        let mut core = VllmCore {
            fault_rng: StdRng::seed_from_u64(cfg.seed ^ 0x5eed_fa17),
            snap: empty_snapshot(&cfg),
            cfg,
            epoch_at_zero,
            mode: Health::Up,
            listening: true,
            started: now,
            lanes: Vec::new(),
            faults: FaultRegistry::new(),
            stale: None,
            seq: 0,
            flights: Flights::default(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            overrides: Vec::new(),
            done: Vec::new(),
            page: String::new(),
            page_memo: None,
            faulted: Bytes::new(),
        };
        core.fresh_start(now);
        Ok(core)
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn epoch(&self, now: Duration) -> f64 {
        self.epoch_at_zero + now.as_secs_f64()
    }

    /// New engines with zeroed stats created at `now`, empty queues, startup delay
    /// again, no frozen page (what a restarted vLLM process starts from).
    fn fresh_start(&mut self, now: Duration) {
        let created = self.epoch(now);
        let buckets = Buckets::shared(self.cfg.dialect, self.cfg.max_model_len);
        self.lanes = (0..self.cfg.data_parallel)
            .map(|_| Lane {
                sched: Scheduler::new(
                    self.cfg.max_num_seqs,
                    self.cfg.max_waiting,
                    self.cfg.kv_capacity_tokens,
                ),
                latency: Latency::new(&self.cfg),
                prefix: PrefixMemory::default(),
            })
            .collect();
        self.snap.engines = (0..self.cfg.data_parallel)
            .map(|index| EngineView {
                index,
                running: 0.0,
                waiting: 0.0,
                kv: 0.0,
                kv_capacity: self.cfg.kv_capacity_tokens,
                stats: EngineStats::new(&buckets, created),
            })
            .collect();
        self.snap.http = self
            .cfg
            .dialect
            .has_runtime_families()
            .then(|| HttpStats::new(created));
        self.snap.runtime = self.snap.runtime.take().map(|rt| Runtime {
            start: created,
            cpu_base: 0.0,
            ..rt
        });
        self.started = now;
        self.stale = None;
    }

    // ---- health, crash, restart -------------------------------------------------

    /// `GET /health`: refused when crashed, 503 while starting, then as the mode says.
    pub fn health(&mut self, now: Duration) -> Answer<u16> {
        self.run_until(now);
        if !self.listening {
            return Answer::Refused;
        }
        if self.starting(now) {
            return Answer::Reply(503);
        }
        match self.mode {
            Health::Up => Answer::Reply(200),
            Health::Down => Answer::Reply(503),
            Health::Hang => Answer::Hang,
        }
    }

    /// The `/_mock/health` mode (up, down, hang); kept across crashes and restarts.
    pub fn set_health(&mut self, mode: Health) {
        self.mode = mode;
    }

    pub fn health_mode(&self) -> Health {
        self.mode
    }

    /// Still inside the startup delay of the current (re)start.
    pub fn starting(&self, now: Duration) -> bool {
        now.saturating_sub(self.started) < self.cfg.startup_delay
    }

    pub fn is_listening(&self) -> bool {
        self.listening
    }

    /// Die like a killed process: stop listening; every queued or running request
    /// ends [`End::Reset`] at `now` (answered by the next [`VllmCore::advance`]).
    pub fn crash(&mut self, now: Duration) {
        self.run_until(now);
        self.listening = false;
        for id in self.flights.ids() {
            self.done.push(Outcome {
                id,
                at: now,
                end: End::Reset,
            });
        }
        self.flights.clear();
        self.timers.clear();
    }

    /// Come back with fresh engine state (counters from zero with new `_created`,
    /// queues empty, startup delay again); crashes first if still up. Health mode,
    /// faults and gauge overrides stay, as on the serving shell.
    pub fn restart(&mut self, now: Duration) {
        if self.listening {
            self.crash(now);
        }
        self.fresh_start(now);
        self.listening = true;
    }

    /// `POST /sleep?level=N` (see [`crate::sleep`]): every engine stops starting
    /// requests; arrivals queue until [`VllmCore::wake`].
    pub fn sleep(&mut self, now: Duration, level: u8) {
        self.run_until(now);
        for lane in &mut self.lanes {
            lane.sched.pause();
        }
        for e in &mut self.snap.engines {
            e.stats.asleep = Some(level);
        }
    }

    /// `POST /wake_up`: the queues start on the free capacity.
    pub fn wake(&mut self, now: Duration) {
        self.run_until(now);
        for e in &mut self.snap.engines {
            e.stats.asleep = None;
        }
        self.resume_lanes(now);
    }

    /// `GET /is_sleeping`.
    pub fn is_sleeping(&self) -> bool {
        self.snap.engines.iter().any(|e| e.stats.asleep.is_some())
    }

    /// As after a vLLM restart seen by a scraper: every counter and histogram back to
    /// 0 with new `_created`; queues and running requests are untouched.
    pub fn counter_reset(&mut self, now: Duration) {
        self.run_until(now);
        let created = self.epoch(now);
        let buckets = Buckets::shared(self.cfg.dialect, self.cfg.max_model_len);
        for e in &mut self.snap.engines {
            let asleep = e.stats.asleep;
            e.stats = EngineStats::new(&buckets, created);
            e.stats.asleep = asleep;
        }
        if let Some(http) = &mut self.snap.http {
            *http = HttpStats::new(created);
        }
        // The process families start over too (start time now, CPU counted from here).
        let cpu_now = self.cpu_seconds(now);
        if let Some(rt) = &mut self.snap.runtime {
            rt.start = created;
            rt.cpu_base = cpu_now;
        }
    }

    /// `/_mock/reset`: health up, faults and overrides cleared, no frozen page, fresh
    /// counters.
    pub fn reset(&mut self, now: Duration) {
        self.mode = Health::Up;
        self.faults.clear();
        self.overrides.clear();
        self.stale = None;
        self.counter_reset(now);
    }

    /// What the simulated process has burnt: 1% of a CPU since it (re)started.
    fn cpu_seconds(&self, now: Duration) -> f64 {
        now.saturating_sub(self.started).as_secs_f64() * 0.01
    }

    // ---- faults and overrides ---------------------------------------------------

    /// The armed faults (`metrics_*`, `completion_*`). Arm with a count or remove by
    /// id: a `duration` would be measured on the wall clock.
    pub fn faults(&self) -> &FaultRegistry<Fault> {
        &self.faults
    }

    /// Report `wave` (started at `now`) instead of the measured value for gauge family
    /// `name`.
    pub fn override_gauge(&mut self, name: &str, wave: Waveform, now: Duration) {
        self.overrides.retain(|(n, _, _)| n != name);
        self.overrides.push((name.to_string(), wave, now));
    }

    pub fn clear_overrides(&mut self) {
        self.overrides.clear();
    }
}

/// The page input before any engine exists: fixed process readings for the dialects
/// that print them (a simulated process has no `/proc`).
fn empty_snapshot(cfg: &Config) -> Snapshot {
    let extras = cfg.dialect.has_runtime_families();
    Snapshot {
        dialect: cfg.dialect,
        model: cfg.model.clone(),
        max_model_len: cfg.max_model_len,
        engines: Vec::new(),
        nonfinite: false,
        overrides: Vec::new(),
        runtime: extras.then_some(Runtime {
            process: ProcessView {
                vsize: 1.0e9,
                rss: 1.0e8,
                cpu_secs: 0.0,
                open_fds: 32.0,
                max_fds: 1_048_576.0,
            },
            start: 0.0,
            cpu_base: 0.0,
        }),
        http: None,
    }
}
