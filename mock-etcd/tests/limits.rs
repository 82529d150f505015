//! Bad input and limits: malformed bodies, oversized requests, streamed request bodies,
//! and the bounded watch backlog (a slow watcher is cancelled, not buffered forever).

use std::time::{Duration, Instant};

use base64::Engine;
use mock_etcd::{Config, MockEtcd};
use mock_kit::Events;
use serde_json::{json, Value};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn start(config: Config) -> MockEtcd {
    mock_etcd::start(config, Events::none("etcd"))
        .await
        .unwrap()
}

async fn post_raw(url: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
    let r = http().post(url).body(body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn malformed_bodies_get_etcd_errors_and_change_nothing() {
    let etcd = start(Config::default()).await;
    let before = etcd.state();
    let cases: &[(&str, &str, u16, u32)] = &[
        ("/v3/kv/put", "{bad", 400, 3),
        ("/v3/kv/put", "{\"key\":", 400, 3),
        ("/v3/kv/put", "[1,2]", 400, 3),
        ("/v3/kv/put", "{\"key\":\"%%%\"}", 400, 3),
        ("/v3/kv/put", "{\"key\":\"Zm9v\",\"lease\":{}}", 400, 3),
        ("/v3/kv/put", "{\"key\":\"Zm9v\",\"lease\":1e400}", 400, 3),
        (
            "/v3/kv/txn",
            "{\"success\":[{\"request_put\":{\"key\":7}}]}",
            400,
            3,
        ),
        (
            "/v3/kv/txn",
            "{\"compare\":[{\"key\":\"Zm9v\",\"target\":\"NOPE\"}]}",
            400,
            3,
        ),
        ("/v3/kv/range", "\u{0}\u{1}binary", 400, 3),
        ("/v3/lease/grant", "{\"TTL\":\"ten\"}", 400, 3),
        ("/v3/lease/revoke", "{\"ID\":[]}", 400, 3),
        ("/v3/auth/authenticate", "{\"name\":1}", 400, 3),
        ("/v3/lease/keepalive", "{\"ID\":", 500, 2),
        ("/v3/watch", "{\"create_request\":{\"key\":1}}", 500, 2),
    ];
    for (path, body, status, code) in cases {
        let (s, text) = post_raw(&format!("{}{path}", etcd.url()), body.to_string()).await;
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} {body}: {e}: {text}"));
        assert_eq!(
            (s, v["code"].as_u64()),
            (*status, Some(*code as u64)),
            "{path} {body}: {text}"
        );
        assert_eq!(v["error"], v["message"]);
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    assert_eq!(etcd.state(), before, "nothing changed");
    // Go's wording for the common syntax errors.
    let (_, text) = post_raw(
        &format!("{}/v3/kv/put", etcd.url()),
        "{\"key\":\"Zm9v\" \"x\"}",
    )
    .await;
    assert!(
        text.contains("invalid character '\\\"' after object key"),
        "{text}"
    );
}

#[tokio::test]
async fn oversized_requests_are_refused_as_etcd_does() {
    let etcd = start(Config::default()).await;
    let value = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n]);
    let body = |n: usize| json!({"key": b64("big"), "value": value(n)}).to_string();
    let (s, text) = post_raw(&format!("{}/v3/kv/put", etcd.url()), body(1_600_000)).await;
    assert_eq!(s, 400);
    assert!(text.contains("etcdserver: request is too large"), "{text}");
    let (s, text) = post_raw(&format!("{}/v3/kv/put", etcd.url()), body(2_200_000)).await;
    assert_eq!(s, 429);
    assert!(
        text.contains("grpc: received message larger than max (2200010 vs. 2097152)"),
        "{text}"
    );
    // Far beyond any limit: refused while reading, without buffering it all.
    let (s, text) = post_raw(
        &format!("{}/v3/kv/put", etcd.url()),
        vec![b' '; 8 * 1024 * 1024],
    )
    .await;
    assert_eq!(s, 429, "{text}");
    assert_eq!(etcd.get("big"), None);
    let (s, _) = post_raw(&format!("{}/v3/kv/put", etcd.url()), body(1_000_000)).await;
    assert_eq!(s, 200);
    assert_eq!(etcd.get("big").unwrap().0.len(), 1_000_000);
}

#[tokio::test]
async fn keepalive_answers_each_request_as_it_arrives() {
    let etcd = start(Config::default()).await;
    let (_, g) = post_raw(&format!("{}/v3/lease/grant", etcd.url()), r#"{"TTL":30}"#).await;
    let id = serde_json::from_str::<Value>(&g).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    tx.send(Ok(format!(r#"{{"ID":"{id}"}}"#).into_bytes()))
        .await
        .unwrap();
    let mut resp = http()
        .post(format!("{}/v3/lease/keepalive", etcd.url()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut got = Vec::new();
    for i in 0..3 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("answer {i} did not arrive before the next request"))
            .unwrap()
            .unwrap();
        got.push(String::from_utf8(chunk.to_vec()).unwrap());
        // Half a message, then the rest: answers wait for whole objects.
        tx.send(Ok(b"{\"ID\":".to_vec())).await.unwrap();
        tx.send(Ok(format!("\"{id}\"}}\n").into_bytes()))
            .await
            .unwrap();
    }
    drop(tx);
    let rest = tokio::time::timeout(Duration::from_secs(5), resp.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rest.lines().count(),
        1,
        "one answer for the last request, then the end"
    );
    for line in &got {
        let v: Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(v["result"]["TTL"], json!("30"));
        assert_eq!(v["result"]["ID"], json!(id));
    }
}

#[tokio::test]
async fn slow_watcher_is_cancelled_not_buffered() {
    let etcd = start(Config {
        watch_backlog: 8,
        ..Config::default()
    })
    .await;
    let (w, w0) = (b64("w/"), b64("w0"));
    let mut resp = http()
        .post(format!("{}/v3/watch", etcd.url()))
        .body(json!({"create_request": {"key": w, "range_end": w0}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(etcd.state()["watchers"], json!(1));
    // Write far more than socket buffers hold while the watcher reads nothing.
    let value = base64::engine::general_purpose::STANDARD.encode(vec![b'v'; 256 * 1024]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut puts = 0;
    while etcd.state()["watchers"] != json!(0) {
        assert!(
            puts < 400 && Instant::now() < deadline,
            "watcher never cancelled after {puts} puts"
        );
        let (s, _) = post_raw(
            &format!("{}/v3/kv/put", etcd.url()),
            json!({"key": b64(&format!("w/{}", puts % 4)), "value": value}).to_string(),
        )
        .await;
        assert_eq!(s, 200);
        puts += 1;
    }
    // Now read: the backlog, then a cancel with the first missed revision, then the end.
    let mut text = Vec::new();
    while let Some(c) = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        text.extend_from_slice(&c);
    }
    let lines: Vec<Value> = String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = &lines.last().unwrap()["result"];
    assert_eq!(last["canceled"], json!(true));
    let missed: i64 = last["compact_revision"].as_str().unwrap().parse().unwrap();
    let delivered: Vec<i64> = lines
        .iter()
        .filter(|l| l["result"].get("events").is_some())
        .map(|l| {
            l["result"]["header"]["revision"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    // Socket buffers hold some lines beyond the backlog, but not every event: the
    // missed ones were dropped, not queued.
    assert!(
        delivered.len() < puts,
        "{} of {puts} delivered",
        delivered.len()
    );
    assert!(
        delivered.iter().all(|r| *r < missed),
        "{delivered:?} vs {missed}"
    );
    // The client can resume from the first missed revision: history still has it.
    let mut again = http()
        .post(format!("{}/v3/watch", etcd.url()))
        .body(json!({"create_request": {"key": b64("w/"), "range_end": b64("w0"), "start_revision": missed}}).to_string())
        .send()
        .await
        .unwrap();
    let mut buf = Vec::new();
    while buf.iter().filter(|b| **b == b'\n').count() < 2 {
        let c = tokio::time::timeout(Duration::from_secs(10), again.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&c);
    }
    let replay = String::from_utf8_lossy(&buf).to_string();
    let ev_line: Value = serde_json::from_str(replay.lines().nth(1).unwrap()).unwrap();
    let first_rev = &ev_line["result"]["events"][0]["kv"]["mod_revision"];
    assert_eq!(first_rev, &json!(missed.to_string()));
}
