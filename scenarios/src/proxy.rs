//! The in-process TCP fault proxy every link of the cluster goes through.
//!
//! Why TCP and not HTTP: the faults that hurt a sidecar in production are below HTTP — a
//! peer that accepts and never answers, a connection reset mid-body, a refused port, a
//! one-way partition that leaves pooled keep-alive connections looking healthy. A proxy
//! that only forwards bytes reproduces all of them for any protocol, including the etcd
//! gateway's long-lived watch streams.
//!
//! A [`Proxy`] listens on its own loopback port and forwards every connection to one
//! target. Its [`LinkFault`] applies to new AND open connections (so a partition also
//! freezes the pooled connections a client already holds). Jitter comes from a seeded RNG
//! so one scenario seed gives one schedule.
//!
//! What each fault does over TCP: `latency` delays every chunk (plus a seeded random
//! jitter), `bandwidth` caps the bytes per second each way, `blackhole` accepts and
//! swallows every byte and never answers, `reset` resets open and new connections (RST,
//! not FIN), `refuse` closes the listening port, and a one-way `partition` drops the
//! bytes flowing one way while connections stay open.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use mock_kit::{Events, Shutdown};

use crate::lock;

/// What a link does wrong (`Heal`: nothing), and which way a one-way partition drops
/// bytes: the simulator's words for its links, so a scenario's fault reads the same in
/// both modes.
pub use sim::{Direction, LinkFault};

#[derive(Clone, Debug)]
struct LinkState {
    fault: LinkFault,
    /// Bumped by `Reset`: connections of an older generation die.
    generation: u64,
}

/// A running proxy: one listening port forwarding to one target. Clones share it.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    addr: SocketAddr,
    target: SocketAddr,
    state: watch::Sender<LinkState>,
    shutdown: Shutdown,
    events: Events,
    rng: Arc<Mutex<StdRng>>,
}

impl Proxy {
    /// Listen on `listen` (port 0: any free port) and forward to `target`.
    pub async fn start(
        name: &str,
        listen: SocketAddr,
        target: SocketAddr,
        seed: u64,
        events: Events,
    ) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(LinkState {
            fault: LinkFault::Heal,
            generation: 0,
        });
        let proxy = Proxy {
            inner: Arc::new(Inner {
                name: name.to_string(),
                addr,
                target,
                state,
                shutdown: Shutdown::new(),
                events,
                rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
            }),
        };
        proxy.spawn_acceptor(listener);
        Ok(proxy)
    }

    /// The address clients dial.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The address clients dial, as an `http://` URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The fault the link has now (`Heal`: none).
    pub fn fault(&self) -> LinkFault {
        self.inner.state.borrow().fault.clone()
    }

    /// Apply a fault to the link (replacing the previous one); `Heal` clears it.
    pub async fn set(&self, fault: LinkFault) -> std::io::Result<()> {
        let was_refusing = matches!(self.inner.state.borrow().fault, LinkFault::Refuse);
        self.inner.events.emit(
            "link",
            serde_json::json!({"link": self.inner.name, "fault": fault, "addr": self.inner.addr.to_string()}),
        );
        self.inner.state.send_modify(|s| {
            if matches!(fault, LinkFault::Reset | LinkFault::Refuse) {
                s.generation += 1;
            }
            s.fault = fault.clone();
        });
        if was_refusing && !matches!(fault, LinkFault::Refuse) {
            // The acceptor dropped the listener; bind the same port again.
            let mut tries = 0;
            let listener = loop {
                match TcpListener::bind(self.inner.addr).await {
                    Ok(l) => break l,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        tracing::debug!(link = %self.inner.name, error = %e, "rebind after refuse");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            self.spawn_acceptor(listener);
        }
        Ok(())
    }

    /// Stop accepting and forwarding.
    pub fn stop(&self) {
        self.inner.shutdown.trigger();
    }

    /// Heal, unless the link's fault was changed to something else meanwhile.
    pub async fn heal_if(&self, fault: &LinkFault) {
        if self.fault() == *fault {
            let _ = self.set(LinkFault::Heal).await;
        }
    }

    fn spawn_acceptor(&self, listener: TcpListener) {
        let mut state = self.inner.state.subscribe();
        let shutdown = self.inner.shutdown.clone();
        let to = self.inner.target;
        let rng = self.inner.rng.clone();
        let link = self.inner.state.clone();
        tokio::spawn(async move {
            loop {
                if matches!(state.borrow().fault, LinkFault::Refuse) {
                    return; // dropping the listener refuses connects until healed
                }
                tokio::select! {
                    _ = shutdown.wait() => return,
                    changed = state.changed() => if changed.is_err() { return },
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        let conn_rng = StdRng::seed_from_u64(lock(&rng).gen());
                        tokio::spawn(serve_conn(client, to, link.subscribe(), shutdown.clone(), conn_rng));
                    }
                }
            }
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

async fn serve_conn(
    client: TcpStream,
    target: SocketAddr,
    state: watch::Receiver<LinkState>,
    shutdown: Shutdown,
    rng: StdRng,
) {
    let LinkState { fault, generation } = state.borrow().clone();
    if matches!(fault, LinkFault::Reset | LinkFault::Refuse) {
        let _ = client.set_zero_linger();
        return;
    }
    let _ = client.set_nodelay(true);
    if matches!(fault, LinkFault::Blackhole) {
        // Hold the connection, read and drop, until healed or reset.
        return blackhole(client, state, shutdown, generation).await;
    }
    let connect = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(target));
    let Ok(Ok(upstream)) = connect.await else {
        // Target down: the client sees a reset, like a dead backend behind a LB.
        let _ = client.set_zero_linger();
        return;
    };
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    let rng = Arc::new(Mutex::new(rng));
    let conn_stop = shutdown.child();
    let spawn_pump = |from, to, dir| {
        let (state, stop, rng) = (state.clone(), conn_stop.clone(), rng.clone());
        tokio::spawn(pump(from, to, dir, state, stop, rng, generation))
    };
    let up = spawn_pump(cr, uw, Direction::ToTarget);
    let down = spawn_pump(ur, cw, Direction::FromTarget);
    let _ = up.await;
    conn_stop.trigger();
    let _ = down.await;
}

async fn blackhole(
    mut client: TcpStream,
    mut state: watch::Receiver<LinkState>,
    shutdown: Shutdown,
    generation: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            changed = state.changed() => {
                if changed.is_err() { return }
                let s = state.borrow().clone();
                if s.generation != generation {
                    let _ = client.set_zero_linger();
                    return;
                }
                if !matches!(s.fault, LinkFault::Blackhole) {
                    // Healed: the client's request is lost; close so it retries.
                    return;
                }
            }
            n = client.read(&mut buf) => match n { Ok(0) | Err(_) => return, Ok(_) => {} },
        }
    }
}

/// Copy one direction, applying the link's fault to every chunk.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dir: Direction,
    mut state: watch::Receiver<LinkState>,
    stop: Shutdown,
    rng: Arc<Mutex<StdRng>>,
    generation: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // `None`: the link's state changed (a reset ends the connection just below).
        let read = tokio::select! {
            _ = stop.wait() => break,
            changed = state.changed() => match changed { Ok(()) => None, Err(_) => break },
            n = from.read(&mut buf) => match n { Ok(0) | Err(_) => break, Ok(n) => Some(n) },
        };
        let now = state.borrow().clone();
        if now.generation != generation {
            reset(from, to);
            return;
        }
        let Some(n) = read else { continue };
        let chunk = buf.get(..n).unwrap_or(&[]);
        match now.fault {
            LinkFault::Heal | LinkFault::Reset | LinkFault::Refuse => {}
            LinkFault::Blackhole => continue,
            LinkFault::Partition { direction } if direction == dir => continue,
            LinkFault::Partition { .. } => {}
            LinkFault::Latency { ms, jitter_ms } => {
                let extra = (jitter_ms > 0).then(|| lock(&rng).gen_range(0..=jitter_ms));
                tokio::time::sleep(Duration::from_millis(ms + extra.unwrap_or(0))).await;
            }
            LinkFault::Bandwidth { bytes_per_sec } => {
                let secs = n as f64 / bytes_per_sec.max(1) as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs.min(60.0))).await;
            }
        }
        if to.write_all(chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

fn reset(from: OwnedReadHalf, to: OwnedWriteHalf) {
    if let Ok(stream) = from.reunite(to) {
        let _ = stream.set_zero_linger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    async fn roundtrip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_millis(500), s.read_exact(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timeout"))??;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn forwards_and_applies_faults() {
        let target = echo_server().await;
        let p = Proxy::start("t", loopback(), target, 1, Events::none("t"))
            .await
            .unwrap();
        assert_eq!(roundtrip(p.addr()).await.unwrap(), b"ping");

        p.set(LinkFault::Blackhole).await.unwrap();
        let e = roundtrip(p.addr()).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

        p.set(LinkFault::Refuse).await.unwrap();
        // The acceptor notices the change asynchronously; poll until connects are refused.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            match TcpStream::connect(p.addr()).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                _ if tokio::time::Instant::now() > deadline => panic!("never refused"),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }

        p.set(LinkFault::Heal).await.unwrap();
        assert_eq!(roundtrip(p.addr()).await.unwrap(), b"ping");

        p.set(LinkFault::Partition {
            direction: Direction::FromTarget,
        })
        .await
        .unwrap();
        assert!(roundtrip(p.addr()).await.is_err());
        p.set(LinkFault::Heal).await.unwrap();
        assert_eq!(roundtrip(p.addr()).await.unwrap(), b"ping");
    }

    /// Two proxies on one port of two loopback hosts, each to its own target, as a
    /// sidecar's links to two master replicas are.
    #[tokio::test]
    async fn one_port_is_shared_across_loopback_hosts() {
        let (a, b) = (echo_server().await, echo_server().await);
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let p0 = Proxy::start("a", any, a, 1, Events::none("t"))
            .await
            .unwrap();
        let port = p0.addr().port();
        let p1 = Proxy::start(
            "b",
            SocketAddr::from(([127, 0, 0, 2], port)),
            b,
            2,
            Events::none("t"),
        )
        .await
        .unwrap();
        assert_eq!(p1.addr(), SocketAddr::from(([127, 0, 0, 2], port)));
        assert_eq!(roundtrip(p0.addr()).await.unwrap(), b"ping");
        assert_eq!(roundtrip(p1.addr()).await.unwrap(), b"ping");
        // The same address twice is refused.
        let again = Proxy::start("c", p1.addr(), b, 3, Events::none("t")).await;
        assert!(again.is_err());
    }

    #[tokio::test]
    async fn latency_delays_each_way() {
        let target = echo_server().await;
        let p = Proxy::start("t", loopback(), target, 1, Events::none("t"))
            .await
            .unwrap();
        p.set(LinkFault::Latency {
            ms: 100,
            jitter_ms: 0,
        })
        .await
        .unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let started = std::time::Instant::now();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        // A lower bound only: delayed once on the way in and once on the way out.
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn reset_kills_open_connections() {
        let target = echo_server().await;
        let p = Proxy::start("t", loopback(), target, 1, Events::none("t"))
            .await
            .unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        p.set(LinkFault::Reset).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .unwrap();
        assert!(
            matches!(r, Ok(0) | Err(_)),
            "connection survived a reset: {r:?}"
        );
    }
}
