//! Is an etcd member serving? One `GET /health` over plain TCP, bounded in time and size.
//!
//! etcd 3.4 answers `{"health":"true"}` only once the member has a leader and can
//! serve a read, which is when a client can use it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Largest answer read; `/health` answers a few dozen bytes.
const LIMIT: u64 = 16 * 1024;

/// True when the member at `addr` says it is healthy within `timeout` per step.
pub fn healthy(addr: SocketAddr, timeout: Duration) -> bool {
    fetch(addr, timeout).is_some_and(|answer| is_healthy(&answer))
}

fn fetch(addr: SocketAddr, timeout: Duration) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    // HTTP/1.0: the server closes after answering, so the answer ends at EOF.
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.take(LIMIT).read_to_end(&mut answer).ok()?;
    String::from_utf8(answer).ok()
}

fn is_healthy(answer: &str) -> bool {
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    let status_ok = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        == Some("200");
    let body = body.split_whitespace().collect::<String>();
    status_ok && body.contains(r#""health":"true""#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_200_that_says_true_is_healthy() {
        let ok = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{\"health\":\"true\"}";
        assert!(is_healthy(ok));
        let spaced = "HTTP/1.0 200 OK\r\n\r\n{\"health\": \"true\", \"reason\": \"\"}";
        assert!(is_healthy(spaced));
        assert!(!is_healthy(
            "HTTP/1.0 503 Service Unavailable\r\n\r\n{\"health\":\"false\"}"
        ));
        assert!(!is_healthy("HTTP/1.0 200 OK\r\n\r\n{\"health\":\"false\"}"));
        assert!(!is_healthy("HTTP/1.0 200 OK\r\n"));
        assert!(!is_healthy(""));
    }

    #[test]
    fn nothing_listening_is_not_healthy() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The listener is gone: the port refuses.
        assert!(!healthy(addr, Duration::from_millis(200)));
    }
}
