//! The running fake: the handle ([`MockVllm`]) through which tests and scenarios script
//! it, and the accept loop. The state it serves lives in [`crate::state`].
//!
//! We run our own accept loop (hyper's HTTP/1 connection driver, which is what vLLM's
//! uvicorn speaks) instead of `axum::serve`, so that a crash can drop every connection,
//! idle keep-alive ones included, and reset them (SO_LINGER 0): a client must see the
//! crash exactly as it would see a dead vLLM, not get answers from a zombie connection.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use mock_kit::{Events, FaultRegistry, Shutdown};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::clock::Now;
use crate::config::Config;
use crate::event::{Lifecycle, VllmEvent};
use crate::faults::Fault;
use crate::health::Health;
use crate::process::cpu_seconds;
use crate::state::Shared;
use crate::waveform::Waveform;

struct Running {
    stop: Shutdown,
    crash: Arc<AtomicBool>,
    join: JoinHandle<()>,
}

/// The accept loop of the current (re)start, if any.
type Serving = tokio::sync::Mutex<Option<Running>>;

/// Handle to a running fake vLLM. Cheap to clone; every clone controls the same server.
#[derive(Clone)]
pub struct MockVllm {
    shared: Arc<Shared>,
    serving: Arc<Serving>,
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
    let handle = MockVllm {
        shared: Arc::new(Shared::new(config, events, addr, Now::read())),
        serving: Arc::new(tokio::sync::Mutex::new(None)),
    };
    let (shared, serving) = (
        Arc::downgrade(&handle.shared),
        Arc::downgrade(&handle.serving),
    );
    let _ = handle
        .shared
        .crash_hook
        .set(Box::new(move |after| crash_soon(&shared, &serving, after)));
    handle.serve_on(listener).await;
    handle
        .shared
        .events
        .emit_event(&VllmEvent::State(Lifecycle::Started { addr }));
    Ok(handle)
}

/// `/_mock/crash`: crash 20 ms from now (so its answer gets out), restart
/// `restart_after` later if given; both dropped if the handle stops first.
fn crash_soon(shared: &Weak<Shared>, serving: &Weak<Serving>, restart_after: Option<Duration>) {
    let (Some(shared), Some(serving)) = (shared.upgrade(), serving.upgrade()) else {
        return;
    };
    let stopped = shared.stopped.clone();
    let h = MockVllm { shared, serving };
    tokio::spawn(async move {
        tokio::select! {
            _ = stopped.wait() => {}
            _ = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                h.crash().await;
                if let Some(d) = restart_after {
                    tokio::time::sleep(d).await;
                    if let Err(e) = h.restart().await {
                        tracing::error!(error = %e, "mock-vllm: restart after crash failed");
                    }
                }
            } => {}
        }
    });
}

impl MockVllm {
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
        let mut serving = self.serving.lock().await;
        let stop = Shutdown::new();
        let crash = Arc::new(AtomicBool::new(false));
        let router = crate::routes::router(self.shared.clone());
        let join = tokio::spawn(accept_loop(listener, router, stop.clone(), crash.clone()));
        *serving = Some(Running { stop, crash, join });
        self.shared.listening.store(true, Ordering::Relaxed);
    }

    async fn take_down(&self, reset: bool) -> bool {
        let mut serving = self.serving.lock().await;
        let Some(run) = serving.take() else {
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
                .emit_event(&VllmEvent::State(Lifecycle::Stopped));
        }
    }

    /// Die like a killed process: stop listening and reset every open connection.
    pub async fn crash(&self) {
        if self.take_down(true).await {
            self.shared
                .events
                .emit_event(&VllmEvent::State(Lifecycle::Crashed));
        }
    }

    /// Come back on the same address with fresh engine state (counters reset, queues
    /// empty, startup delay again). Crashes first if still running.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.take_down(true).await;
        // A new process: whatever stopped the old one does not stop it.
        self.shared.freeze.set(false);
        self.shared.fresh_start(Now::read(), cpu_seconds());
        let mut last = None;
        for _ in 0..50 {
            match bind(self.shared.addr) {
                Ok(l) => {
                    self.serve_on(l).await;
                    self.shared
                        .events
                        .emit_event(&VllmEvent::State(Lifecycle::Restarted));
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

    /// What stops and continues the fake as a process is by `SIGSTOP` and `SIGCONT`:
    /// requests wait while it is frozen (see [`mock_kit::freeze`]).
    pub fn freeze(&self) -> &mock_kit::Freeze {
        &self.shared.freeze
    }

    pub fn set_health(&self, h: Health) {
        self.shared.set_health(h);
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
        self.shared.counter_reset(Now::read(), cpu_seconds());
    }

    /// `POST /sleep?level=N` (see [`crate::sleep`]): every engine stops starting requests.
    pub fn sleep(&self, level: u8) {
        for e in &self.shared.core().engines {
            e.sleep(level);
        }
    }

    /// `POST /wake_up`.
    pub fn wake(&self) {
        for e in &self.shared.core().engines {
            e.wake();
        }
    }

    /// Report `wave` instead of the measured value for gauge family `name` (every label
    /// set), e.g. `vllm:num_requests_waiting`.
    pub fn override_gauge(&self, name: &str, wave: Waveform) {
        self.shared.override_gauge(name, wave, Now::read());
    }

    pub fn clear_overrides(&self) {
        self.shared.clear_overrides();
    }

    /// Everything back to normal: health up, faults and overrides cleared, fresh counters.
    pub fn reset(&self) {
        self.shared.reset(Now::read(), cpu_seconds());
    }

    /// Per engine: queue, running, KV usage and counters; plus health and faults.
    pub fn state(&self) -> serde_json::Value {
        self.shared.state_json(Now::read())
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
