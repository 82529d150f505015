//! Every route is capped: a body past `max_body_bytes` is refused with 413 without
//! being read to its end (the client below never sends the rest), and the master
//! keeps serving. Raw TCP, so the test controls exactly what is on the wire.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CAP: usize = 4096;

/// Every route with a method that may carry a body.
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/internal/heartbeat"),
    ("GET", "/v1/internal/instances"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/_mock/state"),
    ("POST", "/_mock/restart"),
    ("POST", "/_mock/token"),
    ("POST", "/_mock/watch/pause"),
    ("POST", "/_mock/watch/resume"),
    ("POST", "/_mock/reset"),
    ("GET", "/_mock/faults"),
    ("POST", "/_mock/faults"),
    ("DELETE", "/_mock/faults"),
    ("DELETE", "/_mock/faults/1"),
];

/// The routes that read a body: a chunked body (no declared length) is cut at the cap.
const READERS: &[&str] = &[
    "/v1/internal/heartbeat",
    "/v1/completions",
    "/v1/chat/completions",
    "/_mock/restart",
    "/_mock/token",
    "/_mock/faults",
];

/// Send `head` and then `body`, never the rest; read one answer (5 s at most).
async fn raw(addr: std::net::SocketAddr, head: String, body: &[u8]) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before taking it all: a failed write is fine.
    let _ = s.write_all(body).await;
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(answer) = parse_answer(&got) {
                return answer;
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return parse_answer(&got).unwrap_or((0, Value::Null)),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap_or_else(|_| panic!("no answer; got {:?}", String::from_utf8_lossy(&got)))
}

/// A complete answer with a Content-Length body: (status, JSON body or Null).
fn parse_answer(got: &[u8]) -> Option<(u16, Value)> {
    let text = std::str::from_utf8(got).ok()?;
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let body = rest.as_bytes().get(..len)?;
    Some((status, serde_json::from_slice(body).unwrap_or(Value::Null)))
}

fn is_refusal(path: &str, body: &Value) -> bool {
    if path.starts_with("/v1/") && !path.starts_with("/v1/internal/") {
        body["error"]["type"] == json!("invalid_request")
            && body["error"]["message"] == json!("request body too large")
    } else if path == "/v1/internal/heartbeat" {
        body == &json!({"error": "heartbeat body too large"})
    } else {
        body == &json!({"error": "request body too large"})
    }
}

#[tokio::test]
async fn every_route_refuses_an_oversized_body_unread_and_keeps_serving() {
    let etcd = any_etcd().await;
    let mut cfg = fast_config(&etcd.url(), &unique_ns("cap"));
    cfg.max_body_bytes = CAP;
    let m = mock_master::start(cfg, mock_kit::Events::none("master"))
        .await
        .unwrap();
    let addr = m.addr();

    // Declared 100 MB, 1 KB sent: refused from the header alone.
    for (method, path) in ROUTES {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
             content-length: 104857600\r\n\r\n"
        );
        let (status, body) = raw(addr, head, &[b' '; 1024]).await;
        assert_eq!(status, 413, "{method} {path}: {body}");
        assert!(is_refusal(path, &body), "{method} {path}: {body}");
    }

    // Chunked, twice the cap sent and never finished: cut at the cap.
    let chunk = format!("400\r\n{}\r\n", " ".repeat(0x400));
    let body = chunk.repeat(2 * CAP / 0x400);
    for path in READERS {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
        let (status, answer) = raw(addr, head, body.as_bytes()).await;
        assert_eq!(status, 413, "POST {path}: {answer}");
        assert!(is_refusal(path, &answer), "POST {path}: {answer}");
    }

    // Nothing was acted on, and the master still answers.
    let state: Value = reqwest::get(format!("{}/_mock/state", m.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["token_set"], json!(false));
    assert_eq!(state["watch_paused"], json!(false));
    assert_eq!(state["faults"], json!([]));
    let (s, _) = beat(&m.url(), None, json!({"name": "127.0.0.1:1"})).await;
    assert_eq!(s, 409);
    m.stop().await;
}

#[tokio::test]
async fn a_body_at_the_cap_is_still_read() {
    let etcd = any_etcd().await;
    let mut cfg = fast_config(&etcd.url(), &unique_ns("cap-ok"));
    cfg.max_body_bytes = CAP;
    let m = mock_master::start(cfg, mock_kit::Events::none("master"))
        .await
        .unwrap();
    let prefix = r#"{"token":"t","pad":""#;
    let pad = "x".repeat(CAP - prefix.len() - 2);
    let body = format!("{prefix}{pad}\"}}");
    assert_eq!(body.len(), CAP);
    let r = reqwest::Client::new()
        .post(format!("{}/_mock/token", m.url()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(m.state_json()["token_set"], json!(true));
    m.stop().await;
}
