//! The async vLLM client (`peers::vllm`): `/health` verdicts and timeouts, the model name,
//! and `/metrics` as a new user's proxy may serve it: gzip or deflate, redirected,
//! OpenMetrics, with a bare-LF head, many or odd headers, too long, never ending.

#[path = "support/raw_http.rs"]
mod raw_http;

use std::io::Write;
use std::time::Duration;

use raw_http::{answer, RawServer, Reply};
use sidecar::peers::http::{build_client, Redirects};
use sidecar::peers::vllm::{MetricsPage, ScrapeError, VllmClient};
use url::Url;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PAGE: &str = "# HELP vllm:num_requests_waiting Requests waiting.\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"m\"} 3.0\n";

fn vllm_at(base: &str, metrics: &str, timeout: Duration, max_bytes: usize) -> VllmClient {
    VllmClient::new(
        build_client(Redirects::Follow).unwrap(),
        &Url::parse(base).unwrap(),
        Url::parse(metrics).unwrap(),
        timeout,
        timeout,
        max_bytes,
    )
}

fn vllm(server: &MockServer) -> VllmClient {
    let base = server.uri();
    vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_secs(5),
        1 << 20,
    )
}

async fn serve(server: &MockServer, p: &str, response: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path(p))
        .respond_with(response)
        .mount(server)
        .await;
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    // HTTP's "deflate" is the zlib format.
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

// ---- /health ----

#[tokio::test]
async fn health_2xx_is_ok_and_an_error_status_says_which() {
    for status in [200, 204] {
        let server = MockServer::start().await;
        serve(&server, "/health", ResponseTemplate::new(status)).await;
        assert_eq!(vllm(&server).probe_health().await, Ok(()), "{status}");
    }
    for status in [500, 503, 404] {
        let server = MockServer::start().await;
        serve(&server, "/health", ResponseTemplate::new(status)).await;
        let err = vllm(&server).probe_health().await.unwrap_err();
        assert!(err.contains(&status.to_string()), "{err}");
    }
}

#[tokio::test]
async fn health_without_an_answer_or_too_slow_is_an_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_secs(2),
        1024,
    );
    let err = client.probe_health().await.unwrap_err();
    assert!(err.contains("connect"), "{err}");

    let slow = MockServer::start().await;
    serve(
        &slow,
        "/health",
        ResponseTemplate::new(200).set_delay(Duration::from_secs(30)),
    )
    .await;
    let base = slow.uri();
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_millis(300),
        1024,
    );
    let err = client.probe_health().await.unwrap_err();
    assert!(err.contains("no answer within 300ms"), "{err}");
}

#[tokio::test]
async fn a_path_in_the_vllm_url_is_kept_and_a_trailing_slash_is_fine() {
    let server = MockServer::start().await;
    serve(&server, "/v/health", ResponseTemplate::new(200)).await;
    let base = format!("{}/v/", server.uri());
    let client = vllm_at(
        &base,
        &format!("{base}metrics"),
        Duration::from_secs(2),
        1024,
    );
    assert_eq!(client.probe_health().await, Ok(()));
}

#[tokio::test]
async fn health_follows_a_redirect() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/health",
        ResponseTemplate::new(307).insert_header("location", "/ready"),
    )
    .await;
    serve(&server, "/ready", ResponseTemplate::new(200)).await;
    assert_eq!(vllm(&server).probe_health().await, Ok(()));
}

// ---- /v1/models ----

#[tokio::test]
async fn served_model_is_the_first_id_or_none() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/v1/models",
        ResponseTemplate::new(200).set_body_string(
            r#"{"object":"list","data":[{"id":"facebook/opt-125m","object":"model"},{"id":"b"}]}"#,
        ),
    )
    .await;
    assert_eq!(
        vllm(&server).served_model().await.as_deref(),
        Some("facebook/opt-125m")
    );
    for body in [
        r#"{"object":"list","data":[]}"#,
        "not json",
        r#"{"data":[{"x":1}]}"#,
    ] {
        let server = MockServer::start().await;
        serve(
            &server,
            "/v1/models",
            ResponseTemplate::new(200).set_body_string(body),
        )
        .await;
        assert_eq!(vllm(&server).served_model().await, None, "{body}");
    }
    let server = MockServer::start().await;
    serve(&server, "/v1/models", ResponseTemplate::new(500)).await;
    assert_eq!(vllm(&server).served_model().await, None);
}

#[tokio::test]
async fn served_version_is_the_release_or_none() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/version",
        ResponseTemplate::new(200).set_body_string(r#"{"version":"0.33.0"}"#),
    )
    .await;
    assert_eq!(
        vllm(&server).served_version().await.as_deref(),
        Some("0.33.0")
    );
    // An absent endpoint (404 from wiremock), an error, or another body: no version.
    let server = MockServer::start().await;
    assert_eq!(vllm(&server).served_version().await, None);
    for (status, body) in [(500, ""), (200, "not json"), (200, r#"{"v":"1"}"#)] {
        let server = MockServer::start().await;
        serve(
            &server,
            "/version",
            ResponseTemplate::new(status).set_body_string(body),
        )
        .await;
        assert_eq!(vllm(&server).served_version().await, None, "{body}");
    }
}

// ---- /metrics ----

#[tokio::test]
async fn a_plain_page_reads_with_its_format_and_size() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .set_body_string(PAGE),
    )
    .await;
    let page = vllm(&server).fetch_metrics().await.unwrap();
    assert_eq!(
        page,
        MetricsPage {
            text: PAGE.to_string(),
            openmetrics: false,
            bytes: PAGE.len()
        }
    );
    // The scrape asks for the text format first, as Prometheus does, with names as
    // they are (tests/negotiated_metrics.rs: what prometheus_client answers it).
    let requests = server.received_requests().await.unwrap();
    let accept = requests[0].headers.get("accept").unwrap().to_str().unwrap();
    assert!(
        accept.starts_with("text/plain;version=1.0.0;escaping=allow-utf-8"),
        "{accept}"
    );
}

#[tokio::test]
async fn openmetrics_is_told_by_content_type() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200).set_body_raw(
            format!("{PAGE}# EOF\n"),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    )
    .await;
    assert!(vllm(&server).fetch_metrics().await.unwrap().openmetrics);
}

#[tokio::test]
async fn gzip_and_deflate_pages_are_decoded() {
    for (encoding, body) in [
        ("gzip", gzip(PAGE.as_bytes())),
        ("deflate", deflate(PAGE.as_bytes())),
    ] {
        let server = MockServer::start().await;
        serve(
            &server,
            "/metrics",
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/plain; version=0.0.4")
                .insert_header("content-encoding", encoding)
                .set_body_bytes(body),
        )
        .await;
        let page = vllm(&server).fetch_metrics().await.unwrap();
        assert_eq!(page.text, PAGE, "{encoding}");
        assert_eq!(page.bytes, PAGE.len(), "{encoding}");
    }
}

#[tokio::test]
async fn the_cap_applies_to_the_decoded_page() {
    // 4 MiB of text gzips to a few KiB: the cap must stop the decoded bytes.
    let big = "vllm:num_requests_waiting{model_name=\"m\"} 1.0\n".repeat(90_000);
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200)
            .insert_header("content-encoding", "gzip")
            .set_body_bytes(gzip(big.as_bytes())),
    )
    .await;
    let base = server.uri();
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_secs(5),
        64 * 1024,
    );
    assert_eq!(
        client.fetch_metrics().await,
        Err(ScrapeError::TooLarge(64 * 1024))
    );
}

#[tokio::test]
async fn a_corrupt_gzip_body_is_a_decode_error() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200)
            .insert_header("content-encoding", "gzip")
            .set_body_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate".to_vec()),
    )
    .await;
    let err = vllm(&server).fetch_metrics().await.unwrap_err();
    assert!(matches!(err, ScrapeError::Decode(_)), "{err}");
    assert_eq!(err.reason(), "decode");
}

#[tokio::test]
async fn error_statuses_too_large_and_not_utf8_pages() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(503).set_body_string("down"),
    )
    .await;
    let err = vllm(&server).fetch_metrics().await.unwrap_err();
    assert_eq!(err, ScrapeError::Status(503));
    assert_eq!(
        (err.reason(), err.to_string().contains("503")),
        ("status", true)
    );

    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200).set_body_bytes(vec![b'a'; 5000]),
    )
    .await;
    let base = server.uri();
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_secs(5),
        4096,
    );
    assert_eq!(
        client.fetch_metrics().await,
        Err(ScrapeError::TooLarge(4096))
    );

    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200).set_body_bytes(b"a 1\n\xff\xfe".to_vec()),
    )
    .await;
    let err = vllm(&server).fetch_metrics().await.unwrap_err();
    assert_eq!(
        (err.clone(), err.reason()),
        (ScrapeError::NotUtf8, "not_utf8")
    );
}

#[tokio::test]
async fn a_slow_page_is_a_timeout_and_a_closed_port_a_transport_error() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(200)
            .set_body_string(PAGE)
            .set_delay(Duration::from_secs(30)),
    )
    .await;
    let base = server.uri();
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_millis(300),
        1 << 20,
    );
    assert_eq!(client.fetch_metrics().await, Err(ScrapeError::Timeout));

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let client = vllm_at(
        &base,
        &format!("{base}/metrics"),
        Duration::from_secs(2),
        1 << 20,
    );
    let err = client.fetch_metrics().await.unwrap_err();
    assert!(
        matches!(&err, ScrapeError::Transport(m) if m.contains("connect")),
        "{err}"
    );
    assert_eq!(err.reason(), "transport");
}

#[tokio::test]
async fn a_page_that_never_ends_is_not_read_past_the_cap() {
    let server = RawServer::start(|_, _| Reply::Forever).await;
    let cap = 256 * 1024;
    // A generous timeout: only the cap can end this scrape early.
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_secs(30),
        cap,
    );
    let started = std::time::Instant::now();
    assert_eq!(
        client.fetch_metrics().await,
        Err(ScrapeError::TooLarge(cap))
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    // The connection is dropped, not drained: the server's next writes fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .client_closed
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the client kept reading"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_slow_drip_of_a_page_ends_at_the_scrape_timeout() {
    // Headers at once, then nothing: the whole exchange is under the timeout.
    let server = RawServer::start(|_, _| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nvllm:".to_vec())
    })
    .await;
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_millis(400),
        1 << 20,
    );
    assert_eq!(client.fetch_metrics().await, Err(ScrapeError::Timeout));
}

#[tokio::test]
async fn redirects_are_followed_and_a_loop_stops() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/metrics",
        ResponseTemplate::new(302).insert_header("location", "/real/metrics"),
    )
    .await;
    serve(
        &server,
        "/real/metrics",
        ResponseTemplate::new(200).set_body_string(PAGE),
    )
    .await;
    assert_eq!(vllm(&server).fetch_metrics().await.unwrap().text, PAGE);

    let looping = MockServer::start().await;
    serve(
        &looping,
        "/metrics",
        ResponseTemplate::new(302).insert_header("location", "/b"),
    )
    .await;
    serve(
        &looping,
        "/b",
        ResponseTemplate::new(302).insert_header("location", "/metrics"),
    )
    .await;
    let err = vllm(&looping).fetch_metrics().await.unwrap_err();
    assert!(
        matches!(&err, ScrapeError::Transport(m) if m.contains("redirect")),
        "{err}"
    );
    let hops = looping.received_requests().await.unwrap().len();
    assert!(hops <= 6, "{hops} requests");

    // A chain longer than the limit stops too.
    let chain = MockServer::start().await;
    for i in 0..10 {
        serve(
            &chain,
            &format!("/r{i}"),
            ResponseTemplate::new(301).insert_header("location", format!("/r{}", i + 1).as_str()),
        )
        .await;
    }
    let base = chain.uri();
    let client = vllm_at(
        &base,
        &format!("{base}/r0"),
        Duration::from_secs(5),
        1 << 20,
    );
    let err = client.fetch_metrics().await.unwrap_err();
    assert!(
        matches!(&err, ScrapeError::Transport(m) if m.contains("redirect")),
        "{err}"
    );
    assert_eq!(chain.received_requests().await.unwrap().len(), 6);
}

#[tokio::test]
async fn a_bare_lf_answer_head_reads_at_once() {
    let body = PAGE.as_bytes().to_vec();
    let server = RawServer::start(move |_, _| {
        let mut out = format!(
            "HTTP/1.1 200 OK\ncontent-type: text/plain; version=0.0.4\ncontent-length: {}\n\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        Reply::Bytes(out)
    })
    .await;
    // The connection stays open after the answer: only the framing can end the read.
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_secs(5),
        1 << 20,
    );
    assert_eq!(client.fetch_metrics().await.unwrap().text, PAGE);
}

#[tokio::test]
async fn many_headers_odd_values_and_folded_lines_do_not_reject_the_answer() {
    let server = RawServer::start(|_, _| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..90 {
            head.extend_from_slice(format!("x-extra-{i}: {i}\r\n").as_bytes());
        }
        head.extend_from_slice(b"x-latin1: caf\xe9\r\n");
        head.extend_from_slice(b"x-folded: first\r\n  continued\r\n");
        head.extend_from_slice(b"content-type: application/openmetrics-text; version=1.0.0\r\n");
        head.extend_from_slice(format!("content-length: {}\r\n\r\n", PAGE.len()).as_bytes());
        head.extend_from_slice(PAGE.as_bytes());
        Reply::Bytes(head)
    })
    .await;
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_secs(5),
        1 << 20,
    );
    let page = client.fetch_metrics().await.unwrap();
    assert_eq!(page.text, PAGE);
    assert!(page.openmetrics);
}

#[tokio::test]
async fn a_non_utf8_content_type_reads_as_prometheus_text() {
    let server = RawServer::start(|_, _| {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/pl\xe9in\r\n".to_vec();
        out.extend_from_slice(format!("content-length: {}\r\n\r\n{PAGE}", PAGE.len()).as_bytes());
        Reply::Bytes(out)
    })
    .await;
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_secs(5),
        1 << 20,
    );
    let page = client.fetch_metrics().await.unwrap();
    assert!(!page.openmetrics);
    assert_eq!(page.text, PAGE);
}

#[tokio::test]
async fn connections_are_reused_between_scrapes() {
    let server =
        RawServer::start(|_, _| Reply::Bytes(answer("200 OK", &[], PAGE.as_bytes()))).await;
    let client = vllm_at(
        &server.url(""),
        &server.url("/metrics"),
        Duration::from_secs(5),
        1 << 20,
    );
    for _ in 0..3 {
        assert_eq!(client.fetch_metrics().await.unwrap().text, PAGE);
        assert_eq!(client.probe_health().await, Ok(()));
    }
    assert_eq!((server.requests(), server.connections()), (6, 1));
}

#[test]
fn every_call_can_run_as_its_own_task() {
    fn send<T: Send + 'static>(_: T) {}
    let client = vllm_at(
        "http://127.0.0.1:1",
        "http://127.0.0.1:1/metrics",
        Duration::from_secs(1),
        1,
    );
    send(async move {
        let _ = client.probe_health().await;
        let _ = client.fetch_metrics().await;
        let _ = client.served_model().await;
    });
}

#[test]
fn debug_output_hides_url_credentials() {
    let client = vllm_at(
        "http://user:hunter2@vllm.local:8000",
        "http://user:hunter2@vllm.local:8000/metrics",
        Duration::from_secs(1),
        1024,
    );
    let shown = format!("{client:?}");
    assert!(shown.contains("vllm.local:8000/metrics"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}
