//! Every row of the heartbeat table (docs/contract.md §3), driven over HTTP against a
//! master that learned its instance from a real etcd.

mod common;

use std::time::Duration;

use common::*;
use mock_master::{Fault, MockMaster};
use serde_json::json;

const TOKEN: &str = "s3cret-token";

/// A master with `token`, and one registered instance `name` at incarnation `inc-1`.
async fn setup(token: Option<&str>) -> (MockMaster, String, TestEtcd) {
    let etcd = any_etcd().await;
    let url = &etcd.url();
    let ns = unique_ns("hb");
    let gw = Gw::new(url);
    let name = "127.0.0.1:18000".to_string();
    gw.put(&key(&ns, "DEFAULT", &name), &reg_value(&name, 0, "inc-1"))
        .await;
    let mut cfg = fast_config(url, &ns);
    cfg.token = token.map(str::to_string);
    cfg.max_body_bytes = 4096;
    let m = mock_master::start(cfg, mock_kit::Events::none("master"))
        .await
        .unwrap();
    assert!(
        m.instance(&name).is_some(),
        "initial range did not register the instance"
    );
    (m, name, etcd)
}

#[tokio::test]
async fn every_row_of_the_table_in_order() {
    let (m, name, _etcd) = setup(Some(TOKEN)).await;
    let u = m.url();

    // 401: missing or wrong token, even with a bad body (the token is checked first).
    let (s, b) = beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await;
    assert_eq!((s, b), (401, json!({"error": "invalid internal token"})));
    let (s, _) = beat(&u, Some("s3cret-tokeX"), hb(&name, "inc-1", 0, 0.0)).await;
    assert_eq!(s, 401);
    let (s, _) = beat(&u, Some("s3cret-token-longer"), json!("garbage")).await;
    assert_eq!(s, 401);

    // 400: not a HeartbeatRequest.
    for bad in [
        json!([1]),
        json!({"name": 5}),
        json!({"name": name, "load_metrics": {"waiting_requests_num": -1}}),
    ] {
        let (s, b) = beat(&u, Some(TOKEN), bad).await;
        assert_eq!((s, b), (400, json!({"error": "invalid heartbeat json"})));
    }
    // 400: name empty (also absent), checked before the incarnation.
    let (s, b) = beat(&u, Some(TOKEN), json!({"incarnation_id": "inc-1"})).await;
    assert_eq!((s, b), (400, json!({"error": "missing instance name"})));
    let (s, _) = beat(
        &u,
        Some(TOKEN),
        json!({"name": "", "incarnation_id": "nope"}),
    )
    .await;
    assert_eq!(s, 400);

    // 409: unknown name, stale incarnation, missing incarnation.
    let conflict = json!({"error": "instance not registered or stale incarnation"});
    let (s, b) = beat(&u, Some(TOKEN), hb("127.0.0.1:1", "inc-1", 0, 0.0)).await;
    assert_eq!((s, b), (409, conflict.clone()));
    let (s, b) = beat(&u, Some(TOKEN), hb(&name, "inc-0", 0, 0.0)).await;
    assert_eq!((s, b), (409, conflict.clone()));
    let (s, _) = beat(&u, Some(TOKEN), json!({"name": name})).await;
    assert_eq!(s, 409);
    assert!(
        m.instance(&name).unwrap().load.is_none(),
        "a refused heartbeat stored metrics"
    );

    // 200: recorded, metrics stored.
    let (s, b) = beat(&u, Some(TOKEN), hb(&name, "inc-1", 7, 0.25)).await;
    assert_eq!((s, b), (200, json!({"ok": true})));
    let v = m.instance(&name).unwrap();
    assert_eq!(v.load.unwrap().waiting_requests_num, 7);
    assert_eq!(v.load.unwrap().gpu_cache_usage_perc, 0.25);
    assert_eq!(v.latency.unwrap().recent_max_ttft, 12);
    assert!(v.ms_since_heartbeat.is_some());
    assert_eq!(v.heartbeats.get(&200), Some(&1));
    assert_eq!(v.heartbeats.get(&409), Some(&2));

    let counts = m.heartbeat_counts();
    assert_eq!(counts.get(&401), Some(&3));
    assert_eq!(counts.get(&400), Some(&5));
    assert_eq!(counts.get(&409), Some(&3));
    assert_eq!(counts.get(&200), Some(&1));

    // The Prometheus page counts by status too.
    let text = reqwest::get(format!("{u}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"mock_master_heartbeats_total{status="401"} 3"#),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "token leaked into /metrics");
    let state = reqwest::get(format!("{u}/_mock/state"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!state.contains(TOKEN), "token leaked into /_mock/state");
    m.stop().await;
}

/// POST a heartbeat with `X-Internal-Token` sent once per value.
async fn beat_tokens(master: &str, tokens: &[&str], body: serde_json::Value) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{master}/v1/internal/heartbeat"))
        .timeout(Duration::from_secs(5))
        .json(&body);
    for t in tokens {
        // `header` appends: each call is one more header line.
        req = req.header("X-Internal-Token", *t);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_repeated_token_header_is_refused_not_picked() {
    let (m, name, _etcd) = setup(Some(TOKEN)).await;
    let u = m.url();
    let body = hb(&name, "inc-1", 0, 0.0);
    let refused = r#"{"error":"invalid internal token"}"#.to_string();
    for tokens in [
        &[TOKEN, TOKEN][..],
        &[TOKEN, "wrong"],
        &["wrong", TOKEN],
        &[TOKEN, ""],
    ] {
        let answer = beat_tokens(&u, tokens, body.clone()).await;
        assert_eq!(answer, (401, refused.clone()), "tokens {tokens:?}");
    }
    assert_eq!(beat_tokens(&u, &[TOKEN], body.clone()).await.0, 200);
    assert_eq!(m.heartbeat_counts().get(&401), Some(&4));
    m.stop().await;

    // With no token configured the header is not looked at, repeated or not.
    let (m, name, _etcd) = setup(None).await;
    let body = hb(&name, "inc-1", 0, 0.0);
    assert_eq!(beat_tokens(&m.url(), &["a", "b"], body).await.0, 200);
    m.stop().await;
}

#[tokio::test]
async fn protobuf_json_spellings_are_accepted() {
    let (m, name, _etcd) = setup(None).await;
    let body = json!({"name": name, "incarnationId": "inc-1", "cacheEvent": {"stored_cache": []},
        "loadMetrics": {"waitingRequestsNum": "42", "gpuCacheUsagePerc": "0.5"},
        "latencyMetrics": {"recentMaxTtft": "100", "recentMaxTbt": 1e1}, "future_field": [1, {"x": null}]});
    // No token configured: any header, or none, is fine.
    let (s, _) = beat(&m.url(), Some("whatever"), body).await;
    assert_eq!(s, 200);
    let v = m.instance(&name).unwrap();
    assert_eq!(v.load.unwrap().waiting_requests_num, 42);
    assert_eq!(v.latency.unwrap().recent_max_tbt, 10);
    // Absent metrics are zero.
    let (s, _) = beat(
        &m.url(),
        None,
        json!({"name": name, "incarnation_id": "inc-1"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        m.instance(&name)
            .unwrap()
            .load
            .unwrap()
            .waiting_requests_num,
        0
    );
    m.stop().await;
}

#[tokio::test]
async fn oversized_and_non_json_bodies() {
    let (m, name, _etcd) = setup(None).await;
    let http = reqwest::Client::new();
    let big = format!(
        r#"{{"name":"{name}","incarnation_id":"inc-1","pad":"{}"}}"#,
        "x".repeat(5000)
    );
    let r = http
        .post(format!("{}/v1/internal/heartbeat", m.url()))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    // Chunked (no Content-Length) and too large: still 413.
    let chunks =
        futures_util::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
    let r = http
        .post(format!("{}/v1/internal/heartbeat", m.url()))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    for raw in ["", "{", "not json", "{\"name\":\"a\"} trailing", "\u{0}"] {
        let r = http
            .post(format!("{}/v1/internal/heartbeat", m.url()))
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "body {raw:?}");
    }
    assert_eq!(m.heartbeat_counts().get(&413), Some(&2));
    m.stop().await;
}

#[tokio::test]
async fn token_rotation_over_the_control_api() {
    let (m, name, _etcd) = setup(Some(TOKEN)).await;
    let u = m.url();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{u}/_mock/token"))
        .json(&json!({"token": "new"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        beat(&u, Some(TOKEN), hb(&name, "inc-1", 0, 0.0)).await.0,
        401
    );
    assert_eq!(
        beat(&u, Some("new"), hb(&name, "inc-1", 0, 0.0)).await.0,
        200
    );
    http.post(format!("{u}/_mock/token"))
        .json(&json!({"token": null}))
        .send()
        .await
        .unwrap();
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 200);
    // Reset restores the configured token.
    http.post(format!("{u}/_mock/reset")).send().await.unwrap();
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 401);
    // Only an explicit null turns the check off: `{}`, a typo or a wrong type is a
    // 400 that says why, and the token stays.
    for bad in [
        json!({}),
        json!({"tokn": null}),
        json!({"token": 5}),
        json!([]),
    ] {
        let r = http
            .post(format!("{u}/_mock/token"))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "body {bad}");
        let err: serde_json::Value = r.json().await.unwrap();
        let msg = err["error"].as_str().unwrap_or_default().to_string();
        assert!(msg.starts_with("bad token body: "), "{msg}");
        if bad == json!({}) {
            assert!(msg.contains("missing field `token`"), "{msg}");
        }
    }
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 401);
    assert_eq!(
        beat(&u, Some(TOKEN), hb(&name, "inc-1", 0, 0.0)).await.0,
        200
    );
    m.stop().await;
}

#[tokio::test]
async fn status_and_latency_faults() {
    let (m, name, _etcd) = setup(None).await;
    let u = m.url();
    let http = reqwest::Client::new();
    // Two 503s, then back to normal; added over the control API.
    let r = http
        .post(format!("{u}/_mock/faults"))
        .json(&json!({"kind": "heartbeat_status", "status": 503, "count": 2}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 503);
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 503);
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 200);
    // An injected 409 carries the real body, so a sidecar re-registers.
    m.faults()
        .add(Fault::HeartbeatStatus { status: 409 }, Some(1), None);
    let (s, b) = beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await;
    assert_eq!(
        (s, b),
        (
            409,
            json!({"error": "instance not registered or stale incarnation"})
        )
    );
    // Latency: the answer is late by at least the injected delay.
    m.faults().add(Fault::Latency { ms: 300 }, Some(1), None);
    let t = std::time::Instant::now();
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(m.faults().list().is_empty());
    // A fault bounded by time disarms by itself.
    m.faults().add(
        Fault::HeartbeatStatus { status: 500 },
        None,
        Some(Duration::from_millis(1000)),
    );
    assert_eq!(beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0, 500);
    assert!(
        poll(Duration::from_secs(2), || async {
            beat(&u, None, hb(&name, "inc-1", 0, 0.0)).await.0 == 200
        })
        .await
    );
    m.stop().await;
}

#[tokio::test]
async fn no_control_means_no_mock_routes() {
    let etcd = any_etcd().await;
    let url = &etcd.url();
    let mut cfg = fast_config(url, &unique_ns("nc"));
    cfg.control = false;
    let m = mock_master::start(cfg, mock_kit::Events::none("master"))
        .await
        .unwrap();
    let r = reqwest::get(format!("{}/_mock/state", m.url()))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let r = reqwest::get(format!("{}/v1/internal/instances", m.url()))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    m.stop().await;
}
