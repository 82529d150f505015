//! A raw HTTP/1.1 server over tokio TCP, for answers no well-behaved server library
//! writes (bare-LF heads, a body that never ends, a connection closed before the answer)
//! and for counting exactly how many requests arrived.

#![allow(dead_code)] // each test binary uses a part

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does after reading request number `n` (0-based, over all
/// connections).
pub enum Reply {
    /// Write these bytes, keep the connection for the next request.
    Bytes(Vec<u8>),
    /// Write these bytes, then close.
    BytesThenClose(Vec<u8>),
    /// Close without a byte of answer.
    Close,
    /// An endless chunked 200 body, until the client goes away (bounded: 1 GiB, 60 s).
    Forever,
}

pub struct RawServer {
    pub addr: std::net::SocketAddr,
    requests: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    /// Body bytes written by a [`Reply::Forever`].
    pub streamed: Arc<AtomicUsize>,
    /// A [`Reply::Forever`] stopped because the client closed.
    pub client_closed: Arc<AtomicBool>,
}

impl RawServer {
    pub async fn start(
        handler: impl Fn(usize, &[u8]) -> Reply + Send + Sync + 'static,
    ) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = RawServer {
            addr: listener.local_addr().unwrap(),
            requests: Arc::default(),
            connections: Arc::default(),
            streamed: Arc::default(),
            client_closed: Arc::default(),
        };
        let handler = Arc::new(handler);
        let (requests, connections) = (server.requests.clone(), server.connections.clone());
        let (streamed, closed) = (server.streamed.clone(), server.client_closed.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let (handler, requests) = (handler.clone(), requests.clone());
                let (streamed, closed) = (streamed.clone(), closed.clone());
                tokio::spawn(async move {
                    serve(tcp, &*handler, &requests, &streamed, &closed).await;
                });
            }
        });
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests read in full so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut tcp: TcpStream,
    handler: &(dyn Fn(usize, &[u8]) -> Reply + Send + Sync),
    requests: &AtomicUsize,
    streamed: &AtomicUsize,
    closed: &AtomicBool,
) {
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut tcp, &mut buf).await else {
            return;
        };
        let n = requests.fetch_add(1, Ordering::SeqCst);
        match handler(n, &request) {
            Reply::Bytes(bytes) => {
                if tcp.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Reply::BytesThenClose(bytes) => {
                let _ = tcp.write_all(&bytes).await;
                return;
            }
            Reply::Close => return,
            Reply::Forever => {
                stream_forever(&mut tcp, streamed, closed).await;
                return;
            }
        }
    }
}

/// One request (head and `content-length` body) off the connection; `None` at its end.
async fn read_request(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body_len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let total = end + 4 + body_len;
            if buf.len() >= total {
                return Some(buf.drain(..total).collect());
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn stream_forever(tcp: &mut TcpStream, streamed: &AtomicUsize, closed: &AtomicBool) {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ntransfer-encoding: chunked\r\n\r\n";
    if tcp.write_all(head).await.is_err() {
        return;
    }
    let line = "vllm:num_requests_waiting{model_name=\"m\"} 1.0\n".repeat(300);
    let chunk = format!("{:x}\r\n{line}\r\n", line.len());
    let started = std::time::Instant::now();
    while streamed.load(Ordering::SeqCst) < (1 << 30) && started.elapsed() < Duration::from_secs(60)
    {
        if tcp.write_all(chunk.as_bytes()).await.is_err() {
            closed.store(true, Ordering::SeqCst);
            return;
        }
        streamed.fetch_add(line.len(), Ordering::SeqCst);
    }
}

/// A complete answer with a `content-length` body.
pub fn answer(status_line: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status_line}\r\n").into_bytes();
    for h in headers {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}
