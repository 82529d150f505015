//! Watches of a vanished client are freed: connections that carry a chunked `/v3/watch`
//! stream with a few watchers and are then reset by the client (RST, as a crashed or
//! killed client leaves them) must not keep their watchers. Real etcd frees them within
//! 2 s; the fake notices the broken connection and drops them.

use std::time::{Duration, Instant};

use base64::Engine;
use mock_etcd::Config;
use mock_kit::Events;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONNECTIONS: usize = 32;
const WATCHES_PER_CONNECTION: usize = 3;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// Open a watch stream by hand: headers, then one chunk with the create requests;
/// `finish` also sends the last chunk (the client is done sending, the stream stays).
async fn open_watch(addr: std::net::SocketAddr, n: usize, finish: bool) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut msgs = String::new();
    for w in 0..WATCHES_PER_CONNECTION {
        let key = b64(&format!("gone/{n}/{w}"));
        msgs.push_str(&format!(r#"{{"create_request":{{"key":"{key}"}}}}"#));
    }
    let mut req = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{msgs}\r\n",
        msgs.len()
    );
    if finish {
        req.push_str("0\r\n\r\n");
    }
    sock.write_all(req.as_bytes()).await.unwrap();
    // Wait until every watch is created (one `"created":true` line each).
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while count(&seen, b"\"created\":true") < WATCHES_PER_CONNECTION {
        let left = deadline.saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(left, sock.read(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            other => panic!(
                "watch {n} not created: {other:?}, got {}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
    sock
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Wait (bounded) until `cond` holds; answers whether it did.
async fn wait_until(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_of_reset_connections_are_freed() {
    let etcd = mock_etcd::start(Config::default(), Events::none("etcd"))
        .await
        .unwrap();
    let watchers = || etcd.state()["watchers"].as_u64().unwrap_or(u64::MAX) as usize;
    // Half still sending (a chunked body left open), half done sending.
    let mut socks = Vec::new();
    for n in 0..CONNECTIONS {
        socks.push(open_watch(etcd.addr(), n, n % 2 == 1).await);
    }
    assert_eq!(watchers(), CONNECTIONS * WATCHES_PER_CONNECTION);
    // A healthy client keeps its watch while the others vanish.
    let keep = open_watch(etcd.addr(), CONNECTIONS, false).await;
    for s in socks {
        s.set_zero_linger().unwrap();
        drop(s); // close with SO_LINGER 0: an RST, no FIN
    }
    assert!(
        wait_until(Duration::from_secs(2), || watchers()
            == WATCHES_PER_CONNECTION)
        .await,
        "watchers left 2 s after the resets: {} (expected {WATCHES_PER_CONNECTION})",
        watchers()
    );
    drop(keep);
    etcd.stop().await;
}
