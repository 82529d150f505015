//! Memory after a slow watcher: a watch stream whose client never reads, while 5,000
//! puts of 4 KiB are made, is bounded while it lasts (its backlog stays under
//! `watch_backlog_bytes` plus one answer) and, once it is cancelled and its client is
//! gone, the fake holds what the stored data needs and nothing for the watcher.
//! Measured with the fake's own accounting ([`mock_etcd::Retained`]): process RSS
//! does not shrink reliably after frees (the allocator keeps its arenas).

use std::time::{Duration, Instant};

use base64::Engine;
use mock_etcd::{Config, EtcdCore, MockEtcd};
use tokio::io::AsyncWriteExt;

const PUTS: usize = 5000;
const VALUE: usize = 4096;

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Wait (bounded) until `cond` holds.
async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn watchers(fake: &MockEtcd) -> u64 {
    fake.state()["watchers"].as_u64().unwrap_or(u64::MAX)
}

/// A watch of every key with `prev_kv`, on a raw connection that is never read.
async fn silent_watch(fake: &MockEtcd) -> tokio::net::TcpStream {
    let mut sock = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    let body = r#"{"create_request":{"key":"AA==","range_end":"AA==","prev_kv":true}}"#;
    let req = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    until("watch registered", Duration::from_secs(10), || {
        watchers(fake) == 1
    })
    .await;
    sock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_slow_watcher_leaves_only_the_stored_data() {
    let config = Config::default();
    let cap = config.watch_backlog_bytes;
    let fake = mock_etcd::start(config, mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    let sock = silent_watch(&fake).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let value = b64(&vec![b'v'; VALUE]);
    let mut peak_backlog = 0;
    for chunk in (0..PUTS).collect::<Vec<_>>().chunks(50) {
        let puts = chunk.iter().map(|i| {
            let body = format!(
                r#"{{"key":"{}","value":"{value}"}}"#,
                b64(format!("k/{i:05}").as_bytes())
            );
            http.post(format!("{}/v3/kv/put", fake.url()))
                .body(body)
                .send()
        });
        for r in futures_util::future::join_all(puts).await {
            assert_eq!(r.unwrap().status().as_u16(), 200);
        }
        peak_backlog = peak_backlog.max(fake.retained().watch_backlog);
    }
    // One answer here is a put's event with its value (no prev: every key is new).
    let one_answer = 2 * VALUE;
    assert!(
        peak_backlog <= cap + one_answer,
        "backlog {peak_backlog} over {cap} + {one_answer}"
    );
    until("slow watcher cancelled", Duration::from_secs(10), || {
        watchers(&fake) == 0
    })
    .await;
    drop(sock);
    until("backlog freed", Duration::from_secs(10), || {
        fake.retained().watch_backlog == 0
    })
    .await;
    let r = fake.retained();
    println!("peak backlog {peak_backlog} bytes; after the client left: {r:?}");
    let stored = PUTS * (VALUE + "k/00000".len());
    assert_eq!(r.live, stored, "{r:?}");
    assert_eq!(r.history, 0, "every version is current: {r:?}");
    fake.stop().await;
}

/// Overwriting one key keeps superseded versions in history, up to the byte cap;
/// past it the oldest revisions are compacted away.
#[test]
fn history_of_superseded_versions_is_bounded_by_bytes() {
    let cap = 256 * 1024;
    let config = Config {
        history_bytes_cap: cap,
        ..Config::default()
    };
    let mut core = EtcdCore::new(config, 1_764_590_000_000, 7);
    let value = b64(&vec![b'v'; VALUE]);
    let body = format!(r#"{{"key":"{}","value":"{value}"}}"#, b64(b"one"));
    for _ in 0..1000 {
        let a = core.handle_json("/v3/kv/put", None, body.as_bytes(), Duration::ZERO);
        assert_eq!(a.status, 200);
    }
    let data = core.data();
    assert!(data.history_bytes() <= cap, "{}", data.history_bytes());
    assert!(data.history_bytes() >= cap - 2 * (VALUE + 3));
    assert_eq!(data.data_bytes(), VALUE + 3);
    let old = r#"{"key":"b25l","revision":2}"#;
    let a = core.handle_json("/v3/kv/range", None, old.as_bytes(), Duration::ZERO);
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("compacted"));
}
