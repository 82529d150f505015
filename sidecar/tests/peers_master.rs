//! The async heartbeat client (`peers::master`): the POST as the master's contract reads
//! it (§3), the token only when set and never in a message, each status passed back, the
//! answer read capped, and a POST never sent twice.

#[path = "support/raw_http.rs"]
mod raw_http;

use std::time::Duration;

use raw_http::{answer, RawServer, Reply};
use sidecar::config::Secret;
use sidecar::peers::http::{build_client, Redirects};
use sidecar::peers::master::{MasterAnswer, MasterClient};
use url::Url;
use wiremock::matchers::{body_string, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const BODY: &str = r#"{"name":"127.0.0.1:18000","incarnation_id":"vllm-0123456789ab","load_metrics":{"waiting_requests_num":2,"gpu_cache_usage_perc":0.25},"latency_metrics":{"recent_max_ttft":120,"recent_max_tbt":15}}"#;

fn client_for(url: &str, token: &str, timeout: Duration) -> MasterClient {
    MasterClient::new(
        build_client(Redirects::Never).unwrap(),
        Url::parse(url).unwrap(),
        Secret::new(token),
        timeout,
    )
}

fn client(server: &MockServer, token: &str) -> MasterClient {
    let url = format!("{}/v1/internal/heartbeat", server.uri());
    client_for(&url, token, Duration::from_secs(2))
}

async fn master(status: u16, body: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/internal/heartbeat"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(body, "application/json"))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn the_body_goes_as_given_with_the_token_header() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/internal/heartbeat"))
        .and(header("x-internal-token", "s3cret"))
        .and(header("content-type", "application/json"))
        .and(body_string(BODY))
        .respond_with(ResponseTemplate::new(200).set_body_raw(r#"{"ok":true}"#, "application/json"))
        .mount(&server)
        .await;
    let answer = client(&server, "s3cret")
        .post_heartbeat_answer(BODY.to_string())
        .await;
    assert_eq!(
        answer,
        Ok(MasterAnswer {
            status: 200,
            excerpt: r#"{"ok":true}"#.into()
        })
    );
}

#[tokio::test]
async fn no_token_no_header() {
    let server = master(200, r#"{"ok":true}"#).await;
    assert_eq!(
        client(&server, "").post_heartbeat(BODY.into()).await,
        Ok(200)
    );
    let requests = server.received_requests().await.unwrap();
    assert!(!requests[0].headers.contains_key("x-internal-token"));
}

#[tokio::test]
async fn each_status_of_the_contract_is_passed_back() {
    for (status, body) in [
        (401, r#"{"error":"invalid internal token"}"#),
        (400, r#"{"error":"invalid heartbeat json"}"#),
        (
            409,
            r#"{"error":"instance not registered or stale incarnation"}"#,
        ),
        (503, "overloaded"),
    ] {
        let server = master(status, body).await;
        let c = client(&server, "t");
        assert_eq!(c.post_heartbeat(BODY.into()).await, Ok(status));
        let answer = c.post_heartbeat_answer(BODY.into()).await.unwrap();
        assert_eq!(answer.excerpt, body);
    }
}

#[tokio::test]
async fn redirects_are_not_followed_for_the_post() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(307).insert_header("location", "/elsewhere"))
        .mount(&server)
        .await;
    assert_eq!(
        client(&server, "").post_heartbeat(BODY.into()).await,
        Ok(307)
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn no_answer_in_time_is_an_error_without_the_token() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let url = format!("{}/v1/internal/heartbeat", server.uri());
    let c = client_for(&url, "tok-9f8e7d", Duration::from_millis(300));
    let err = c.post_heartbeat(BODY.into()).await.unwrap_err();
    assert!(err.contains("no answer within 300ms"), "{err}");
    assert!(!format!("{err} {c:?}").contains("tok-9f8e7d"));

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/v1/internal/heartbeat",
        closed.local_addr().unwrap()
    );
    drop(closed);
    let err = client_for(&url, "tok-9f8e7d", Duration::from_secs(2))
        .post_heartbeat(BODY.into())
        .await
        .unwrap_err();
    assert!(err.contains("connect"), "{err}");
    assert!(!err.contains("tok-9f8e7d"), "{err}");
}

#[tokio::test]
async fn a_huge_answer_is_not_read_but_its_status_counts() {
    let server = RawServer::start(|_, _| Reply::Forever).await;
    let c = client_for(
        &server.url("/v1/internal/heartbeat"),
        "",
        Duration::from_secs(20),
    );
    let answer = c.post_heartbeat_answer(BODY.into()).await.unwrap();
    assert_eq!((answer.status, answer.excerpt.as_str()), (200, ""));
}

#[tokio::test]
async fn a_post_whose_connection_closes_before_the_answer_is_not_resent() {
    // A fresh connection: the request is read, the connection closed without a byte.
    let server = RawServer::start(|_, _| Reply::Close).await;
    let c = client_for(
        &server.url("/v1/internal/heartbeat"),
        "",
        Duration::from_secs(5),
    );
    assert!(c.post_heartbeat(BODY.into()).await.is_err());
    assert_eq!(server.requests(), 1);

    // A reused connection: the first POST answered, the second read and dropped.
    let server = RawServer::start(|n, _| {
        if n == 0 {
            Reply::Bytes(answer("200 OK", &[], br#"{"ok":true}"#))
        } else {
            Reply::Close
        }
    })
    .await;
    let c = client_for(
        &server.url("/v1/internal/heartbeat"),
        "",
        Duration::from_secs(5),
    );
    assert_eq!(c.post_heartbeat(BODY.into()).await, Ok(200));
    assert!(c.post_heartbeat(BODY.into()).await.is_err());
    assert_eq!((server.requests(), server.connections()), (2, 1));
}

#[test]
fn every_call_can_run_as_its_own_task() {
    fn send<T: Send + 'static>(_: T) {}
    let c = client_for(
        "http://127.0.0.1:1/v1/internal/heartbeat",
        "t",
        Duration::from_secs(1),
    );
    send(async move {
        let _ = c.post_heartbeat(String::new()).await;
        let _ = c.post_heartbeat_answer(String::new()).await;
    });
}
