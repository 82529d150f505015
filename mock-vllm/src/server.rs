//! The running fake: its shared state, the handle ([`MockVllm`]) through which tests and
//! scenarios script it, and the accept loop.
//!
//! We run our own accept loop (hyper's HTTP/1 connection driver, which is what vLLM's
//! uvicorn speaks) instead of `axum::serve`, so that a crash can drop every connection,
//! idle keep-alive ones included, and reset them (SO_LINGER 0): a client must see the
//! crash exactly as it would see a dead vLLM, not get answers from a zombie connection.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use mock_kit::{Events, FaultRegistry, Shutdown};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::Config;
use crate::engine::Engine;
use crate::faults::Fault;
use crate::metrics::epoch_secs;
use crate::stats::{FinishReason, HttpStats};
use crate::waveform::Waveform;

/// What `/health` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Up,
    /// 503.
    Down,
    /// Never answers.
    Hang,
}

impl Health {
    fn code(self) -> u8 {
        match self {
            Health::Up => 0,
            Health::Down => 1,
            Health::Hang => 2,
        }
    }

    fn from_code(c: u8) -> Self {
        match c {
            1 => Health::Down,
            2 => Health::Hang,
            _ => Health::Up,
        }
    }
}

/// Engine state that a restart throws away.
pub(crate) struct Core {
    pub engines: Vec<Arc<Engine>>,
    pub http: Mutex<HttpStats>,
    pub started: Instant,
    /// Request sequence number: seeds each request's random choices.
    pub seq: AtomicU64,
}

impl Core {
    fn new(cfg: &Config) -> Arc<Self> {
        let now = epoch_secs();
        Arc::new(Core {
            engines: (0..cfg.data_parallel)
                .map(|i| Engine::new(i, cfg, now))
                .collect(),
            http: Mutex::new(HttpStats::new(now)),
            started: Instant::now(),
            seq: AtomicU64::new(0),
        })
    }

    /// The least loaded engine (vLLM's data-parallel balancing), round-robin on ties.
    pub fn pick_engine(&self) -> Option<&Arc<Engine>> {
        let n = self.engines.len().max(1);
        let turn = self.seq.load(Ordering::Relaxed) as usize % n;
        self.engines
            .iter()
            .min_by_key(|e| (e.load(), (e.index + n - turn) % n))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

struct Running {
    stop: Shutdown,
    crash: Arc<AtomicBool>,
    join: JoinHandle<()>,
}

/// State shared by the handle and every handler.
pub(crate) struct Shared {
    pub cfg: Config,
    pub events: Events,
    pub faults: FaultRegistry<Fault>,
    health: AtomicU8,
    core: RwLock<Arc<Core>>,
    pub overrides: Mutex<Vec<(String, Waveform, Instant)>>,
    /// The frozen page while `metrics_stale` is armed.
    pub stale: Mutex<Option<Bytes>>,
    /// Seeded randomness for faults (fractions, garbage positions).
    pub rng: Mutex<StdRng>,
    /// What the process families report as a fresh start: (start time, CPU seconds
    /// already spent before it). Moves on restart and counter reset.
    pub process_epoch: Mutex<(f64, f64)>,
    addr: SocketAddr,
    server: tokio::sync::Mutex<Option<Running>>,
    listening: AtomicBool,
    /// Stops background tasks (`/_mock/crash` restarts) when the handle stops.
    pub stopped: Shutdown,
}

impl Shared {
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
    pub fn starting(&self) -> bool {
        self.core().started.elapsed() < self.cfg.startup_delay
    }
}

/// Handle to a running fake vLLM. Cheap to clone; every clone controls the same server.
#[derive(Clone)]
pub struct MockVllm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockVllm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockVllm")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

/// Bind `config.listen` and serve. The address is known (port 0 resolved) on return.
pub async fn start(config: Config, events: Events) -> std::io::Result<MockVllm> {
    config
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = bind(config.listen)?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        core: RwLock::new(Core::new(&config)),
        rng: Mutex::new(StdRng::seed_from_u64(config.seed ^ 0x5eed_fa17)),
        cfg: config,
        events,
        faults: FaultRegistry::new(),
        health: AtomicU8::new(0),
        overrides: Mutex::new(Vec::new()),
        stale: Mutex::new(None),
        process_epoch: Mutex::new((epoch_secs(), 0.0)),
        addr,
        server: tokio::sync::Mutex::new(None),
        listening: AtomicBool::new(false),
        stopped: Shutdown::new(),
    });
    let handle = MockVllm { shared };
    handle.serve_on(listener).await;
    handle.shared.events.emit(
        "state",
        json!({"state": "started", "addr": addr.to_string()}),
    );
    Ok(handle)
}

impl MockVllm {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        MockVllm { shared }
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://host:port`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// Whether the server is accepting connections (false after `crash`/`stop`).
    pub fn is_listening(&self) -> bool {
        self.shared.listening.load(Ordering::Relaxed)
    }

    async fn serve_on(&self, listener: TcpListener) {
        let mut server = self.shared.server.lock().await;
        let stop = Shutdown::new();
        let crash = Arc::new(AtomicBool::new(false));
        let router = crate::routes::router(self.shared.clone());
        let join = tokio::spawn(accept_loop(listener, router, stop.clone(), crash.clone()));
        *server = Some(Running { stop, crash, join });
        self.shared.listening.store(true, Ordering::Relaxed);
    }

    async fn take_down(&self, reset: bool) -> bool {
        let mut server = self.shared.server.lock().await;
        let Some(run) = server.take() else {
            return false;
        };
        run.crash.store(reset, Ordering::Relaxed);
        run.stop.trigger();
        let _ = run.join.await;
        self.shared.listening.store(false, Ordering::Relaxed);
        true
    }

    /// Stop serving: close the listener and every connection. Idempotent.
    pub async fn stop(&self) {
        self.shared.stopped.trigger();
        if self.take_down(false).await {
            self.shared
                .events
                .emit("state", json!({"state": "stopped"}));
        }
    }

    /// Die like a killed process: stop listening and reset every open connection.
    pub async fn crash(&self) {
        if self.take_down(true).await {
            self.shared
                .events
                .emit("state", json!({"state": "crashed"}));
        }
    }

    /// Come back on the same address with fresh engine state (counters reset, queues
    /// empty, startup delay again). Crashes first if still running.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.take_down(true).await;
        self.shared.set_core(Core::new(&self.shared.cfg));
        *lock(&self.shared.process_epoch) = (epoch_secs(), crate::metrics::cpu_seconds());
        lock(&self.shared.stale).take();
        let mut last = None;
        for _ in 0..50 {
            match bind(self.shared.addr) {
                Ok(l) => {
                    self.serve_on(l).await;
                    self.shared
                        .events
                        .emit("state", json!({"state": "restarted"}));
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("bind failed")))
    }

    pub fn set_health(&self, h: Health) {
        let old = self.shared.health.swap(h.code(), Ordering::Relaxed);
        if old != h.code() {
            self.shared.events.emit("health", json!({"mode": h}));
        }
    }

    pub fn health(&self) -> Health {
        self.shared.health()
    }

    pub fn faults(&self) -> &FaultRegistry<Fault> {
        &self.shared.faults
    }

    /// As after a vLLM restart: every counter and histogram back to 0 (and new
    /// `_created` times); queues and running requests are untouched.
    pub fn counter_reset(&self) {
        let core = self.shared.core();
        let now = epoch_secs();
        for e in &core.engines {
            let mut s = e.stats();
            let buckets = crate::stats::Buckets::for_dialect(
                self.shared.cfg.dialect,
                self.shared.cfg.max_model_len,
            );
            *s = crate::stats::EngineStats::new(&buckets, now);
        }
        *lock(&core.http) = HttpStats::new(now);
        *lock(&self.shared.process_epoch) = (now, crate::metrics::cpu_seconds());
        self.shared
            .events
            .emit("state", json!({"state": "counter_reset"}));
    }

    /// Report `wave` instead of the measured value for gauge family `name` (every label
    /// set), e.g. `vllm:num_requests_waiting`.
    pub fn override_gauge(&self, name: &str, wave: Waveform) {
        let mut o = lock(&self.shared.overrides);
        o.retain(|(n, _, _)| n != name);
        o.push((name.to_string(), wave, Instant::now()));
    }

    pub fn clear_overrides(&self) {
        lock(&self.shared.overrides).clear();
    }

    /// Everything back to normal: health up, faults and overrides cleared, fresh counters.
    pub fn reset(&self) {
        self.set_health(Health::Up);
        self.shared.faults.clear();
        self.clear_overrides();
        lock(&self.shared.stale).take();
        self.counter_reset();
    }

    /// Per engine: queue, running, KV usage and counters; plus health and faults.
    pub fn state(&self) -> serde_json::Value {
        let core = self.shared.core();
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
        let overrides: Vec<_> = lock(&self.shared.overrides)
            .iter()
            .map(|(n, w, _)| json!({"name": n, "waveform": w}))
            .collect();
        json!({
            "model": self.shared.cfg.model,
            "dialect": self.shared.cfg.dialect.as_str(),
            "listening": self.is_listening(),
            "health": self.health(),
            "starting": self.shared.starting(),
            "uptime_ms": core.started.elapsed().as_millis() as u64,
            "engines": engines,
            "faults": self.shared.faults.list(),
            "overrides": overrides,
        })
    }
}

/// Bind with a deep accept backlog (thousands of clients connect at once in load tests)
/// and SO_REUSEADDR (restart on the same port right after a crash).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(8192)
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    stop: Shutdown,
    crash: Arc<AtomicBool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let io = TokioIo::new(Conn { inner: stream, crash: crash.clone() });
                    let svc = TowerToHyperService::new(router.clone());
                    conns.spawn(async move {
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(30))
                            .serve_connection(io, svc)
                            .await;
                    });
                }
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
    drop(listener);
    conns.shutdown().await;
}

/// A TCP connection that resets instead of closing once the server crashed.
struct Conn {
    inner: TcpStream,
    crash: Arc<AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.crash.load(Ordering::Relaxed) {
            #[allow(deprecated)]
            let _ = self.inner.set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
