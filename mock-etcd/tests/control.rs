//! The fault-injection and control API, over HTTP and as Rust methods.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use mock_etcd::{Config, Fault, MockEtcd};
use mock_kit::events::RingSink;
use mock_kit::{EventSink, Events};
use serde_json::{json, Value};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn start(config: Config) -> (MockEtcd, Arc<RingSink>) {
    let ring = RingSink::new(1000);
    let etcd = mock_etcd::start(
        config,
        Events::new("etcd", Some(ring.clone() as Arc<dyn EventSink>)),
    )
    .await
    .unwrap();
    (etcd, ring)
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    let r = http().post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn put(etcd: &MockEtcd, key: &str, value: &str, lease: i64) -> (u16, Value) {
    post(
        &format!("{}/v3/kv/put", etcd.url()),
        json!({"key": b64(key), "value": b64(value), "lease": lease}),
    )
    .await
}

async fn grant(etcd: &MockEtcd, ttl: i64) -> i64 {
    let (s, v) = post(
        &format!("{}/v3/lease/grant", etcd.url()),
        json!({ "TTL": ttl }),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v["ID"].as_str().unwrap().parse().unwrap()
}

/// Poll `cond` until it holds or the deadline passes.
async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn fail_fault_counts_down_and_matches_both_spellings() {
    let (etcd, ring) = start(Config::default()).await;
    let (s, v) = post(
        &format!("{}/_mock/faults", etcd.url()),
        json!({"kind": "fail", "path": "/v3beta/kv/put", "count": 2}),
    )
    .await;
    assert_eq!(s, 200);
    assert!(v["id"].as_u64().is_some());
    for _ in 0..2 {
        let (s, v) = put(&etcd, "k", "v", 0).await;
        assert_eq!(s, 503);
        assert_eq!(
            v,
            json!({"error": "etcdserver: request timed out", "message": "etcdserver: request timed out", "code": 14})
        );
    }
    assert_eq!(etcd.get("k"), None, "a failed put changes nothing");
    assert_eq!(put(&etcd, "k", "v", 0).await.0, 200);
    assert_eq!(etcd.get("k"), Some(("v".to_string(), 0)));
    let (s, listed) = (
        200,
        http()
            .get(format!("{}/_mock/faults", etcd.url()))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap(),
    );
    assert_eq!((s, listed["faults"].as_array().unwrap().len()), (200, 0));
    let fired: Vec<_> = ring
        .snapshot()
        .into_iter()
        .filter(|e| e.kind == "fault")
        .collect();
    assert_eq!(fired.len(), 2);
    let logged: Vec<_> = etcd
        .requests()
        .into_iter()
        .filter(|r| r.fault.is_some())
        .collect();
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[0].status, 503);
}

#[tokio::test]
async fn custom_fail_status_and_code_via_rust_api() {
    let (etcd, _) = start(Config::default()).await;
    etcd.faults().add(
        Fault::Fail {
            path: "/v3/lease/*".into(),
            status: 500,
            grpc_code: 13,
            message: "etcdserver: leader changed".into(),
        },
        Some(1),
        None,
    );
    let (s, v) = post(
        &format!("{}/v3beta/lease/keepalive", etcd.url()),
        json!({"ID": 1}),
    )
    .await;
    assert_eq!(
        (s, v["code"].clone(), v["error"].clone()),
        (500, json!(13), json!("etcdserver: leader changed"))
    );
    let (s, _) = post(
        &format!("{}/v3/lease/keepalive", etcd.url()),
        json!({"ID": 1}),
    )
    .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn latency_delays_only_its_path() {
    let (etcd, _) = start(Config::default()).await;
    etcd.faults().add(
        Fault::Latency {
            path: "/v3/kv/range".into(),
            ms: 300,
        },
        None,
        None,
    );
    let t = Instant::now();
    let (s, _) = post(
        &format!("{}/v3/kv/range", etcd.url()),
        json!({"key": b64("k")}),
    )
    .await;
    assert_eq!(s, 200);
    assert!(t.elapsed() >= Duration::from_millis(300), "latency applied");
    let last = etcd.requests().pop().unwrap();
    assert_eq!(last.fault.as_deref(), Some("latency"));
    assert!(last.elapsed_ms >= 300);
    assert_eq!(put(&etcd, "k", "v", 0).await.0, 200);
    assert_eq!(etcd.requests().pop().unwrap().fault, None);
}

#[tokio::test]
async fn hang_holds_requests_until_released() {
    let (etcd, _) = start(Config::default()).await;
    let (_, v) = post(
        &format!("{}/_mock/faults", etcd.url()),
        json!({"kind": "hang", "path": "/v3/lease/grant"}),
    )
    .await;
    let id = v["id"].as_u64().unwrap();
    let url = etcd.url();
    let pending =
        tokio::spawn(
            async move { post(&format!("{url}/v3/lease/grant"), json!({"TTL": 10})).await },
        );
    // The grant must not be answered while the fault holds it; the request log only
    // records a request once answered.
    eventually("the hung grant is waiting", Duration::from_secs(5), || {
        etcd.faults()
            .list()
            .iter()
            .any(|f| f.id == id && f.fired == 1)
    })
    .await;
    assert!(!pending.is_finished());
    assert!(etcd.requests().iter().all(|r| r.path != "/v3/lease/grant"));
    let (s, _) = post(&format!("{}/_mock/release", etcd.url()), json!({})).await;
    assert_eq!(s, 204);
    let (s, v) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["TTL"], json!("10"));
    // Disarm, then a grant goes straight through.
    let r = http()
        .delete(format!("{}/_mock/faults/{id}", etcd.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        post(
            &format!("{}/v3/lease/grant", etcd.url()),
            json!({"TTL": 10})
        )
        .await
        .0,
        200
    );
}

#[tokio::test]
async fn leases_expire_on_time_and_on_demand() {
    let (etcd, ring) = start(Config::default()).await;
    // A TTL of 1 is raised to the 2 s minimum, then expires on its own.
    let short = grant(&etcd, 1).await;
    assert_eq!(put(&etcd, "short", "x", short).await.0, 200);
    let long = grant(&etcd, 60).await;
    assert_eq!(put(&etcd, "long/a", "x", long).await.0, 200);
    assert_eq!(put(&etcd, "long/b", "x", long).await.0, 200);
    let state = etcd.state();
    let leases = state["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0]["id"], json!(short), "sorted by deadline");
    assert!(leases[1]["remaining_ms"].as_u64().unwrap() > 50_000);
    assert_eq!(leases[1]["keys"], json!(["long/a", "long/b"]));
    eventually("short lease expires", Duration::from_secs(5), || {
        etcd.get("short").is_none()
    })
    .await;
    assert!(ring.snapshot().iter().any(|e| e.kind == "lease_expired"
        && e.detail["id"] == json!(short)
        && e.detail["why"] == json!("ttl")));
    let rev = etcd.state()["revision"].as_i64().unwrap();
    let (s, v) = post(
        &format!("{}/_mock/leases/{long}/expire", etcd.url()),
        json!({}),
    )
    .await;
    assert_eq!((s, v["expired"].clone()), (200, json!(long)));
    assert_eq!(etcd.get("long/a"), None);
    assert_eq!(
        etcd.state()["revision"].as_i64().unwrap(),
        rev + 1,
        "both keys in one revision"
    );
    let (s, _) = post(
        &format!("{}/_mock/leases/{long}/expire", etcd.url()),
        json!({}),
    )
    .await;
    assert_eq!(s, 404);
    assert!(!etcd.expire_lease(long));
    let a = grant(&etcd, 60).await;
    let b = grant(&etcd, 60).await;
    put(&etcd, "a", "x", a).await;
    put(&etcd, "b", "x", b).await;
    let (s, _) = post(
        &format!("{}/_mock/leases/expire_all", etcd.url()),
        json!({}),
    )
    .await;
    assert_eq!(s, 204);
    assert_eq!(etcd.state()["leases"], json!([]));
    assert_eq!((etcd.get("a"), etcd.get("b")), (None, None));
    // A keepalive of an expired lease answers without TTL.
    let (_, v) = post(
        &format!("{}/v3/lease/keepalive", etcd.url()),
        json!({"ID": a}),
    )
    .await;
    assert_eq!(v["result"].get("TTL"), None);
}

#[tokio::test]
async fn lose_data_keeps_or_resets_the_revision() {
    let (etcd, ring) = start(Config::default()).await;
    let l = grant(&etcd, 60).await;
    put(&etcd, "a", "1", l).await;
    put(&etcd, "b", "2", 0).await;
    let (s, _) = post(
        &format!("{}/_mock/lose_data", etcd.url()),
        json!({"reset_revision": false}),
    )
    .await;
    assert_eq!(s, 200);
    let st = etcd.state();
    assert_eq!(
        (
            st["keys"].clone(),
            st["leases"].clone(),
            st["revision"].clone()
        ),
        (json!([]), json!([]), json!(3))
    );
    let (_, v) = post(
        &format!("{}/v3/lease/timetolive", etcd.url()),
        json!({"ID": l}),
    )
    .await;
    assert_eq!(v["TTL"], json!("-1"));
    put(&etcd, "c", "3", 0).await;
    assert_eq!(etcd.state()["revision"], json!(4));
    etcd.lose_data(true);
    assert_eq!(etcd.state()["revision"], json!(1));
    let (_, v) = put(&etcd, "d", "4", 0).await;
    assert_eq!(v["header"]["revision"], json!("2"));
    assert_eq!(
        ring.snapshot()
            .iter()
            .filter(|e| e.kind == "data_lost")
            .count(),
        2
    );
}

#[tokio::test]
async fn close_watches_ends_streams_and_reset_clears_everything() {
    let (etcd, ring) = start(Config::default()).await;
    let mut resp = http()
        .post(format!("{}/v3/watch", etcd.url()))
        .body(json!({"create_request": {"key": b64("k")}}).to_string())
        .send()
        .await
        .unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains(r#""created":true"#));
    assert_eq!(etcd.state()["watchers"], json!(1));
    let (s, _) = post(&format!("{}/_mock/watches/close", etcd.url()), json!({})).await;
    assert_eq!(s, 204);
    let end = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "stream ended: {end:?}");
    eventually("watcher dropped", Duration::from_secs(5), || {
        etcd.state()["watchers"] == json!(0)
    })
    .await;
    assert!(ring.snapshot().iter().any(|e| e.kind == "watches_closed"));
    // New watches work after a close.
    let mut resp = http()
        .post(format!("{}/v3/watch", etcd.url()))
        .body(json!({"create_request": {"key": b64("k")}}).to_string())
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap().unwrap();
    put(&etcd, "k", "v", 0).await;
    let ev = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&ev).contains(&b64("v")));
    etcd.faults()
        .add(Fault::Hang { path: "*".into() }, None, None);
    let (s, _) = post(&format!("{}/_mock/reset", etcd.url()), json!({})).await;
    assert_eq!(s, 204);
    assert!(etcd.faults().list().is_empty());
    assert_eq!(etcd.state()["keys"], json!([]));
    assert_eq!(etcd.requests().len(), 0);
    let end = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)));
}

#[tokio::test]
async fn requests_log_is_bounded_and_control_can_be_off() {
    let (etcd, _) = start(Config {
        journal_cap: 5,
        ..Config::default()
    })
    .await;
    for i in 0..8 {
        put(&etcd, &format!("k{i}"), "v", 0).await;
    }
    let v: Value = http()
        .get(format!("{}/_mock/requests", etcd.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reqs = v["requests"].as_array().unwrap();
    assert_eq!(reqs.len(), 5);
    assert_eq!(reqs[0]["path"], json!("/v3/kv/put"));
    assert_eq!(reqs[0]["status"], json!(200));
    let state: Value = http()
        .get(format!("{}/_mock/state", etcd.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["keys"][0]["key"], json!("k0"));
    assert_eq!(state["keys"][0]["value"], json!("v"));
    assert_eq!(state["revision"], json!(9));
    let (off, _) = start(Config {
        control: false,
        ..Config::default()
    })
    .await;
    let r = http()
        .get(format!("{}/_mock/state", off.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(r.text().await.unwrap(), "404 page not found\n");
    off.stop().await;
    etcd.stop().await;
    assert!(
        http()
            .get(format!("{}/health", etcd.url()))
            .send()
            .await
            .is_err(),
        "stopped"
    );
}

#[tokio::test]
async fn stop_ends_open_streams() {
    let (etcd, _) = start(Config::default()).await;
    let mut resp = http()
        .post(format!("{}/v3/watch", etcd.url()))
        .body(json!({"create_request": {"key": b64("k")}}).to_string())
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(5), etcd.stop())
        .await
        .expect("stop returns");
    let end = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap();
    assert!(!matches!(end, Ok(Some(_))));
}
