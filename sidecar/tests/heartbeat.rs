//! The heartbeat POST: body shape, token header, and how each answer reads.
//!
//! The clients block; wiremock serves from a runtime on a thread of its own, so they are
//! called straight from the test's runtime thread.

use std::time::Duration;

use reqwest::Url;
use serde_json::json;
use sidecar::config::Secret;
use sidecar::heartbeat::{Answer, HeartbeatBody, HeartbeatClient};
use sidecar::mapping::{HeartbeatMetrics, LatencyMetrics, LoadMetrics};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn metrics() -> HeartbeatMetrics {
    HeartbeatMetrics {
        load_metrics: LoadMetrics {
            waiting_requests_num: 2,
            gpu_cache_usage_perc: 0.25,
        },
        latency_metrics: LatencyMetrics {
            recent_max_ttft: 120,
            recent_max_tbt: 15,
        },
    }
}

async fn master(status: u16) -> MockServer {
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/internal/heartbeat"))
        .respond_with(ResponseTemplate::new(status).set_body_string("{\"error\":\"x\"}"))
        .mount(&s)
        .await;
    s
}

fn client(s: &MockServer, token: &str) -> HeartbeatClient {
    let url = Url::parse(&format!("{}/v1/internal/heartbeat", s.uri())).unwrap();
    HeartbeatClient::new(
        sidecar::http::client(),
        url,
        Secret::new(token),
        Duration::from_secs(2),
    )
}

#[test]
fn body_is_the_contracts_json() {
    let body = HeartbeatBody::new("127.0.0.1:18000", "vllm-0123456789ab", metrics());
    assert_eq!(
        serde_json::to_value(&body).unwrap(),
        json!({
            "name": "127.0.0.1:18000",
            "incarnation_id": "vllm-0123456789ab",
            "load_metrics": {"waiting_requests_num": 2, "gpu_cache_usage_perc": 0.25},
            "latency_metrics": {"recent_max_ttft": 120, "recent_max_tbt": 15},
        })
    );
}

#[tokio::test]
async fn posts_with_the_token_when_set() {
    let s = master(200).await;
    let body = HeartbeatBody::new("h:1", "i", metrics());
    assert_eq!(client(&s, "tok").send(&body).unwrap(), Answer::Ok);
    let r = &s.received_requests().await.unwrap()[0];
    assert_eq!(r.headers.get("x-internal-token").unwrap(), "tok");
    assert!(r
        .headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let sent: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(sent["load_metrics"]["waiting_requests_num"], 2);
}

#[tokio::test]
async fn posts_without_a_token_header_when_unset() {
    let s = master(200).await;
    client(&s, "")
        .send(&HeartbeatBody::new("h:1", "i", metrics()))
        .unwrap();
    assert!(!s.received_requests().await.unwrap()[0]
        .headers
        .contains_key("x-internal-token"));
}

#[tokio::test]
async fn answers_are_classified() {
    let body = HeartbeatBody::new("h:1", "i", metrics());
    assert_eq!(
        client(&master(409).await, "").send(&body).unwrap(),
        Answer::Conflict
    );
    assert_eq!(
        client(&master(401).await, "").send(&body).unwrap(),
        Answer::Unauthorized
    );
    match client(&master(400).await, "").send(&body).unwrap() {
        Answer::Other(400, text) => assert!(text.contains("error")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_answer_is_an_error_without_the_token() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = Url::parse(&format!(
        "http://{}/v1/internal/heartbeat",
        closed.local_addr().unwrap()
    ))
    .unwrap();
    drop(closed);
    let c = HeartbeatClient::new(
        sidecar::http::client(),
        url,
        Secret::new("tok-XYZ"),
        Duration::from_secs(1),
    );
    let err = c
        .send(&HeartbeatBody::new("h:1", "i", metrics()))
        .unwrap_err();
    assert!(!err.contains("tok-XYZ"));
    assert!(!format!("{c:?}").contains("tok-XYZ"));
}

#[tokio::test]
async fn a_master_slower_than_the_timeout_is_no_answer() {
    let s = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/internal/heartbeat"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(10)))
        .mount(&s)
        .await;
    let url = Url::parse(&format!("{}/v1/internal/heartbeat", s.uri())).unwrap();
    let c = HeartbeatClient::new(
        sidecar::http::client(),
        url,
        Secret::new("tok-XYZ"),
        Duration::from_millis(200),
    );
    let err = c
        .send(&HeartbeatBody::new("h:1", "i", metrics()))
        .unwrap_err();
    assert_eq!(err, "no answer within 200ms");
    // It was asked, once.
    assert_eq!(s.received_requests().await.unwrap().len(), 1);
}
