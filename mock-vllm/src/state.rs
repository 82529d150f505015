//! The state of one fake vLLM, shared by its handle and every handler: configuration,
//! health, faults, gauge overrides and the engines (`Core`, replaced on restart), and
//! the operations on it that the handle and the control API both offer. It knows
//! nothing of sockets: the accept loop (and so crash and restart) lives in
//! [`crate::server`], reached through `Shared::crash_hook`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mock_kit::{Events, FaultRegistry, Shutdown};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use crate::clock::Now;
use crate::config::Config;
use crate::engine::Engine;
use crate::event::{Lifecycle, VllmEvent};
use crate::faults::Fault;
use crate::stats::{FinishReason, HttpStats};
use crate::waveform::Waveform;

use crate::health::Health;

/// Engine state that a restart throws away.
pub(crate) struct Core {
    pub engines: Vec<Arc<Engine>>,
    pub http: Mutex<HttpStats>,
    pub started: Instant,
    /// Request sequence number: seeds each request's random choices.
    pub seq: AtomicU64,
}

impl Core {
    pub fn new(cfg: &Config, now: Now) -> Arc<Self> {
        Arc::new(Core {
            engines: (0..cfg.data_parallel)
                .map(|i| Engine::new(i, cfg, now.epoch))
                .collect(),
            http: Mutex::new(HttpStats::new(now.epoch)),
            started: now.instant,
            seq: AtomicU64::new(0),
        })
    }

    /// The least loaded engine (vLLM's data-parallel balancing), round-robin on ties.
    pub fn pick_engine(&self) -> Option<&Arc<Engine>> {
        let turn = self.seq.load(Ordering::Relaxed) as usize;
        let i = crate::sched::least_loaded(self.engines.iter().map(|e| e.load()), turn)?;
        self.engines.get(i)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// State shared by the handle and every handler.
pub(crate) struct Shared {
    pub cfg: Config,
    pub events: Events,
    pub faults: FaultRegistry<Fault>,
    pub health: AtomicU8,
    pub core: RwLock<Arc<Core>>,
    pub overrides: Mutex<Vec<(String, Waveform, Instant)>>,
    /// The frozen page while `metrics_stale` is armed.
    pub stale: Mutex<Option<Bytes>>,
    /// Seeded randomness for faults (fractions, garbage positions).
    pub rng: Mutex<StdRng>,
    /// What the process families report as a fresh start: (start time, CPU seconds
    /// already spent before it). Moves on restart and counter reset.
    pub process_epoch: Mutex<(f64, f64)>,
    pub addr: SocketAddr,
    /// Whether the accept loop runs (false after a crash or stop).
    pub listening: AtomicBool,
    /// Stops background tasks (`/_mock/crash` restarts) when the handle stops.
    pub stopped: Shutdown,
    /// Frozen: the process is stopped (`SIGSTOP`, a VM pause); requests wait.
    pub freeze: mock_kit::Freeze,
    /// How `/_mock/crash` reaches the server that owns the accept loop: crash soon,
    /// restart after the given time if any. Set once by [`crate::server::start`].
    pub crash_hook: OnceLock<CrashHook>,
}

/// See [`Shared::crash_hook`].
pub(crate) type CrashHook = Box<dyn Fn(Option<Duration>) + Send + Sync>;

impl Shared {
    pub fn new(cfg: Config, events: Events, addr: SocketAddr, now: Now) -> Self {
        Shared {
            core: RwLock::new(Core::new(&cfg, now)),
            rng: Mutex::new(StdRng::seed_from_u64(cfg.seed ^ 0x5eed_fa17)),
            cfg,
            events,
            faults: FaultRegistry::new(),
            health: AtomicU8::new(0),
            overrides: Mutex::new(Vec::new()),
            stale: Mutex::new(None),
            process_epoch: Mutex::new((now.epoch, 0.0)),
            addr,
            listening: AtomicBool::new(false),
            stopped: Shutdown::new(),
            freeze: mock_kit::Freeze::new(),
            crash_hook: OnceLock::new(),
        }
    }

    /// What a restarted process starts from: new engines, a new process epoch (CPU
    /// seconds counted from `cpu_base`), no frozen page.
    pub fn fresh_start(&self, now: Now, cpu_base: f64) {
        self.set_core(Core::new(&self.cfg, now));
        *lock(&self.process_epoch) = (now.epoch, cpu_base);
        lock(&self.stale).take();
    }

    pub fn core(&self) -> Arc<Core> {
        match self.core.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn set_core(&self, core: Arc<Core>) {
        match self.core.write() {
            Ok(mut g) => *g = core,
            Err(p) => *p.into_inner() = core,
        }
    }

    pub fn health(&self) -> Health {
        Health::from_code(self.health.load(Ordering::Relaxed))
    }

    /// Still inside the startup delay of the current (re)start.
    pub fn starting(&self, now: Now) -> bool {
        now.instant.saturating_duration_since(self.core().started) < self.cfg.startup_delay
    }

    /// Arm-once: the first armed fault `pick` accepts, counted and reported.
    pub fn fire<R>(&self, mut pick: impl FnMut(&Fault) -> Option<R>) -> Option<R> {
        let mut which = None;
        let r = self.faults.fire(|f| {
            let r = pick(f);
            if r.is_some() {
                which = Some(f.clone());
            }
            r
        });
        if let Some(f) = which {
            self.events.emit_event(&VllmEvent::Fault { fault: &f });
        }
        r
    }

    /// Ask the server to crash (and maybe restart); no-op before it started.
    pub fn request_crash(&self, restart_after: Option<Duration>) {
        if let Some(hook) = self.crash_hook.get() {
            hook(restart_after);
        }
    }

    pub fn set_health(&self, h: Health) {
        let old = self.health.swap(h.code(), Ordering::Relaxed);
        if old != h.code() {
            self.events.emit_event(&VllmEvent::Health { mode: h });
        }
    }

    /// As after a vLLM restart: every counter and histogram back to 0 (and new
    /// `_created` times); queues and running requests are untouched.
    pub fn counter_reset(&self, now: Now, cpu_base: f64) {
        let core = self.core();
        let now = now.epoch;
        for e in &core.engines {
            let mut s = e.stats();
            let buckets =
                crate::stats::Buckets::for_dialect(self.cfg.dialect, self.cfg.max_model_len);
            let asleep = s.asleep;
            *s = crate::stats::EngineStats::new(&buckets, now);
            s.asleep = asleep;
        }
        *lock(&core.http) = HttpStats::new(now);
        *lock(&self.process_epoch) = (now, cpu_base);
        self.events
            .emit_event(&VllmEvent::State(Lifecycle::CounterReset));
    }

    /// Report `wave` instead of the measured value for gauge family `name` (every label
    /// set), e.g. `vllm:num_requests_waiting`.
    pub fn override_gauge(&self, name: &str, wave: Waveform, now: Now) {
        let mut o = lock(&self.overrides);
        o.retain(|(n, _, _)| n != name);
        o.push((name.to_string(), wave, now.instant));
    }

    pub fn clear_overrides(&self) {
        lock(&self.overrides).clear();
    }

    /// Everything back to normal: health up, faults and overrides cleared, fresh counters.
    pub fn reset(&self, now: Now, cpu_base: f64) {
        self.set_health(Health::Up);
        self.faults.clear();
        self.clear_overrides();
        lock(&self.stale).take();
        self.counter_reset(now, cpu_base);
    }

    /// Per engine: queue, running, KV usage and counters; plus health and faults.
    pub fn state_json(&self, now: Now) -> serde_json::Value {
        let core = self.core();
        let engines: Vec<_> = core
            .engines
            .iter()
            .map(|e| {
                let (running, waiting, kv_used) = e.snapshot();
                let s = e.stats().clone();
                let mut success = serde_json::Map::new();
                for r in FinishReason::ALL {
                    success.insert(r.as_str().into(), json!(s.success[r as usize] as u64));
                }
                json!({
                    "engine": e.index,
                    "running": running,
                    "waiting": waiting,
                    "kv_used_tokens": kv_used,
                    "kv_capacity_tokens": e.kv_capacity(),
                    "kv_usage": kv_used as f64 / e.kv_capacity() as f64,
                    "counters": {
                        "prompt_tokens": s.prompt_tokens as u64,
                        "generation_tokens": s.generation_tokens as u64,
                        "request_success": success,
                        "requests_finished": s.h_e2e.count,
                        "rejected": s.rejected,
                        "prefix_cache_queries": s.prefix_queries as u64,
                        "prefix_cache_hits": s.prefix_hits as u64,
                    },
                })
            })
            .collect();
        let overrides: Vec<_> = lock(&self.overrides)
            .iter()
            .map(|(n, w, _)| json!({"name": n, "waveform": w}))
            .collect();
        json!({
            "model": self.cfg.model,
            "dialect": self.cfg.dialect.as_str(),
            "listening": self.listening.load(Ordering::Relaxed),
            "health": self.health(),
            "starting": self.starting(now),
            "uptime_ms": now.instant.saturating_duration_since(core.started).as_millis() as u64,
            "engines": engines,
            "faults": self.faults.list(),
            "overrides": overrides,
        })
    }
}
