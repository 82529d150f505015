//! vLLM `/health` probe answers, against wiremock.
//!
//! The clients block; wiremock serves from a runtime on a thread of its own, so they are
//! called straight from the test's runtime thread.

use std::time::Duration;

use reqwest::Url;
use sidecar::health::HealthProbe;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn probe(uri: &str, timeout: Duration) -> HealthProbe {
    HealthProbe::new(sidecar::http::client(), &Url::parse(uri).unwrap(), timeout)
}

async fn health_answering(response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/health"))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn any_2xx_is_healthy() {
    for status in [200, 204] {
        let s = health_answering(ResponseTemplate::new(status)).await;
        assert!(
            probe(&s.uri(), Duration::from_secs(2)).is_healthy(),
            "{status}"
        );
    }
}

#[tokio::test]
async fn error_statuses_are_unhealthy() {
    for status in [404, 500, 503] {
        let s = health_answering(ResponseTemplate::new(status)).await;
        assert!(
            !probe(&s.uri(), Duration::from_secs(2)).is_healthy(),
            "{status}"
        );
    }
}

#[tokio::test]
async fn no_answer_is_unhealthy() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    assert!(!probe(&url, Duration::from_secs(2)).is_healthy());
}

#[tokio::test]
async fn a_slow_answer_past_the_timeout_is_unhealthy() {
    let s = health_answering(ResponseTemplate::new(200).set_delay(Duration::from_secs(10))).await;
    assert!(!probe(&s.uri(), Duration::from_millis(200)).is_healthy());
}

#[tokio::test]
async fn a_slow_model_list_past_the_timeout_is_none() {
    let s = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"{"data":[{"id":"model-a"}]}"#)
                .set_delay(Duration::from_secs(10)),
        )
        .mount(&s)
        .await;
    assert_eq!(
        probe(&s.uri(), Duration::from_millis(200)).served_model(),
        None
    );
}

#[tokio::test]
async fn trailing_slash_in_the_vllm_url_is_fine() {
    let s = health_answering(ResponseTemplate::new(200)).await;
    assert!(probe(&format!("{}/", s.uri()), Duration::from_secs(2)).is_healthy());
}

#[tokio::test]
async fn served_model_is_the_first_id_or_none() {
    let s = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            r#"{"object":"list","data":[{"id":"model-a","object":"model"},{"id":"b"}]}"#,
        ))
        .mount(&s)
        .await;
    assert_eq!(
        probe(&s.uri(), Duration::from_secs(2))
            .served_model()
            .as_deref(),
        Some("model-a")
    );
    for body in [r#"{"data":[]}"#, "not json", "[]", r#"{"data":[{"x":1}]}"#] {
        let s = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v1/models"))
            .respond_with(ResponseTemplate::new(200).set_body_string(body))
            .mount(&s)
            .await;
        assert_eq!(
            probe(&s.uri(), Duration::from_secs(2)).served_model(),
            None,
            "{body}"
        );
    }
}
