//! Routing of OpenAI requests by the load the heartbeats report (stub instances).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use mock_master::{InstanceState, MockMaster};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);

/// A master with the given stubs registered (incarnation = "inc-" + index).
async fn cluster(stubs: &[&Stub]) -> (MockMaster, Gw, String, TestEtcd) {
    cluster_with(stubs, Duration::from_secs(30)).await
}

async fn cluster_with(stubs: &[&Stub], lease_lost: Duration) -> (MockMaster, Gw, String, TestEtcd) {
    let etcd = any_etcd().await;
    let url = &etcd.url();
    let ns = unique_ns("route");
    let gw = Gw::new(url);
    for (i, s) in stubs.iter().enumerate() {
        gw.put(
            &key(&ns, "DEFAULT", &s.name),
            &reg_value(&s.name, 0, &format!("inc-{i}")),
        )
        .await;
    }
    let mut cfg = fast_config(url, &ns);
    cfg.lease_lost_timeout = lease_lost;
    cfg.suspect_window = Duration::from_secs(30);
    let m = mock_master::start(cfg, mock_kit::Events::none("master"))
        .await
        .unwrap();
    assert_eq!(m.instances().len(), stubs.len());
    (m, gw, ns, etcd)
}

/// Send `n` completions; answers who served each.
async fn send(m: &MockMaster, path: &str, n: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for _ in 0..n {
        let r = http
            .post(format!("{}{path}", m.url()))
            .json(&json!({"model": "m", "prompt": "hi", "max_tokens": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let routed = r.headers()["x-routed-to"].to_str().unwrap().to_string();
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["served_by"], json!(routed));
        assert_eq!(body["echo"]["prompt"], "hi", "request body not relayed");
        out.push(routed);
    }
    out
}

#[tokio::test]
async fn traffic_moves_away_from_a_loaded_instance() {
    let (a, b) = (Stub::start("m").await, Stub::start("m").await);
    let (m, _gw, _ns, _etcd) = cluster(&[&a, &b]).await;
    // No load reported yet: round robin over both.
    let served = send(&m, "/v1/completions", 10).await;
    assert_eq!(served.iter().filter(|s| **s == a.name).count(), 5);
    assert_eq!(served.iter().filter(|s| **s == b.name).count(), 5);

    // A reports a queue: everything goes to B.
    assert_eq!(
        beat(&m.url(), None, hb(&a.name, "inc-0", 5, 0.1)).await.0,
        200
    );
    assert!(send(&m, "/v1/completions", 10)
        .await
        .iter()
        .all(|s| *s == b.name));
    // B reports a longer one: everything goes back to A.
    assert_eq!(
        beat(&m.url(), None, hb(&b.name, "inc-1", 9, 0.1)).await.0,
        200
    );
    assert!(send(&m, "/v1/chat/completions", 10)
        .await
        .iter()
        .all(|s| *s == a.name));
    // Same queue: the lower KV-cache usage wins.
    assert_eq!(
        beat(&m.url(), None, hb(&b.name, "inc-1", 5, 0.05)).await.0,
        200
    );
    assert!(send(&m, "/v1/completions", 6)
        .await
        .iter()
        .all(|s| *s == b.name));
    assert_eq!(
        a.completions.load(Ordering::SeqCst) + b.completions.load(Ordering::SeqCst),
        36
    );
    m.stop().await;
}

#[tokio::test]
async fn lease_lost_is_routable_suspect_is_not() {
    let (a, b) = (Stub::start("m").await, Stub::start("m").await);
    let (m, gw, ns, _etcd) = cluster_with(&[&a, &b], Duration::from_millis(1500)).await;
    // A loses its lease but answers /health: LEASE_LOST, still routed to.
    gw.delete(&key(&ns, "DEFAULT", &a.name)).await;
    assert!(
        poll(WAIT, || async {
            m.instance(&a.name).unwrap().state == InstanceState::LeaseLost
        })
        .await
    );
    assert_eq!(
        beat(&m.url(), None, hb(&b.name, "inc-1", 3, 0.0)).await.0,
        200
    );
    assert_eq!(
        beat(&m.url(), None, hb(&a.name, "inc-0", 0, 0.0)).await.0,
        200
    );
    assert!(send(&m, "/v1/completions", 4)
        .await
        .iter()
        .all(|s| *s == a.name));
    // No heartbeat from A for the lease-lost timeout: SUSPECT, no longer routed to.
    assert!(
        poll(WAIT, || async {
            m.instance(&a.name).unwrap().state == InstanceState::Suspect
        })
        .await
    );
    assert!(send(&m, "/v1/completions", 4)
        .await
        .iter()
        .all(|s| *s == b.name));
    m.stop().await;
}

#[tokio::test]
async fn no_routable_instance_is_503() {
    let (m, _gw, _ns, _etcd) = cluster(&[]).await;
    let http = reqwest::Client::new();
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let r = http
            .post(format!("{}{path}", m.url()))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "service_unavailable");
    }
    let r = http
        .get(format!("{}/v1/models", m.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    m.stop().await;
}

#[tokio::test]
async fn streams_are_relayed() {
    let a = Stub::start("m").await;
    let (m, _gw, _ns, _etcd) = cluster(&[&a]).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", m.url()))
        .json(&json!({"model": "m", "messages": [], "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 4, "{text}");
    assert_eq!(events[3], "data: [DONE]");
    assert!(events[0].contains(&a.name));
    m.stop().await;
}

#[tokio::test]
async fn models_are_the_union_over_routable_instances() {
    let (a, b, c) = (
        Stub::start("m1").await,
        Stub::start("m2").await,
        Stub::start("m1").await,
    );
    let (m, _gw, _ns, _etcd) = cluster(&[&a, &b, &c]).await;
    let v: Value = reqwest::get(format!("{}/v1/models", m.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    let mut ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["m1", "m2"]);
    m.stop().await;
}

#[tokio::test]
async fn a_dead_upstream_is_502() {
    let a = Stub::start("m").await;
    a.stop();
    let (m, _gw, _ns, _etcd) = cluster(&[&a]).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/completions", m.url()))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
    m.stop().await;
}
