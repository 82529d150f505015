//! The etcd gateway client against wiremock: JSON tolerance, endpoint order, auth.
//!
//! The clients block; wiremock serves from a runtime on a thread of its own, so they are
//! called straight from the test's runtime thread.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use reqwest::Url;
use serde_json::json;
use sidecar::config::Secret;
use sidecar::etcd::{EtcdClient, EtcdError};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn client(servers: &[&MockServer], user: &str, password: &str) -> EtcdClient {
    let endpoints = servers
        .iter()
        .map(|s| Url::parse(&s.uri()).unwrap())
        .collect();
    EtcdClient::new(
        sidecar::http::client(),
        endpoints,
        Duration::from_secs(2),
        user,
        Secret::new(password),
    )
}

async fn answer(server: &MockServer, p: &str, status: u16, body: &str) {
    Mock::given(method("POST"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(status).set_body_string(body))
        .mount(server)
        .await;
}

#[tokio::test]
async fn lease_grant_keepalive_revoke_and_kv() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/grant",
        200,
        r#"{"header":{},"ID":"7587899241118086159","TTL":"6"}"#,
    )
    .await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"ID":"7587899241118086159","TTL":"4"}}"#,
    )
    .await;
    answer(&etcd, "/v3/lease/revoke", 200, r#"{"header":{}}"#).await;
    answer(&etcd, "/v3/kv/put", 200, r#"{"header":{}}"#).await;
    let c = client(&[&etcd], "", "");
    let lease = c.lease_grant(6).unwrap();
    assert_eq!(lease, 7587899241118086159);
    assert_eq!(c.lease_keepalive(lease).unwrap(), 4);
    c.put("XLLM:DEFAULT:h:1", "{\"a\":1}", lease).unwrap();
    c.lease_revoke(lease).unwrap();

    let requests = etcd.received_requests().await.unwrap();
    let put = requests
        .iter()
        .find(|r| r.url.path() == "/v3/kv/put")
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&put.body).unwrap();
    assert_eq!(body["key"], B64.encode("XLLM:DEFAULT:h:1"));
    assert_eq!(body["value"], B64.encode("{\"a\":1}"));
    assert_eq!(body["lease"], "7587899241118086159");
    let grant = requests
        .iter()
        .find(|r| r.url.path() == "/v3/lease/grant")
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&grant.body).unwrap();
    assert_eq!(body["TTL"], 6);
    assert!(requests
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));
}

#[tokio::test]
async fn keepalive_null_result_missing_ttl_and_null_ttl_read_as_zero() {
    for body in [
        r#"{"result":null}"#,
        r#"{"result":{"header":{},"ID":"5"}}"#,
        r#"{"result":{"ID":"5","TTL":null}}"#,
        r#"{}"#,
        r#"[1,2]"#,
        r#"null"#,
    ] {
        let etcd = MockServer::start().await;
        answer(&etcd, "/v3/lease/keepalive", 200, body).await;
        let c = client(&[&etcd], "", "");
        assert_eq!(c.lease_keepalive(5).unwrap(), 0, "body {body}");
    }
}

#[tokio::test]
async fn range_handles_missing_value_and_missing_kvs() {
    let etcd = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/kv/range"))
        .and(body_partial_json(json!({"key": B64.encode("empty")})))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"kvs":[{"key":"ZW1wdHk="}]}"#))
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/kv/range"))
        .and(body_partial_json(json!({"key": B64.encode("full")})))
        .respond_with(ResponseTemplate::new(200).set_body_string(format!(
            r#"{{"kvs":[{{"key":"x","value":"{}"}}]}}"#,
            B64.encode("payload")
        )))
        .mount(&etcd)
        .await;
    answer(&etcd, "/v3/kv/range", 200, r#"{"header":{}}"#).await;
    let c = client(&[&etcd], "", "");
    assert_eq!(c.get("empty").unwrap().as_deref(), Some(""));
    assert_eq!(c.get("full").unwrap().as_deref(), Some("payload"));
    assert_eq!(c.get("missing").unwrap(), None);
}

#[tokio::test]
async fn non_object_200_reads_as_empty_object() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/lease/grant", 200, "[]").await;
    let c = client(&[&etcd], "", "");
    // {} has no ID: a clear error, no panic.
    let err = c.lease_grant(6).unwrap_err();
    assert!(matches!(err, EtcdError::BadAnswer(_)), "{err}");
}

#[tokio::test]
async fn endpoints_are_tried_in_order_non_json_and_errors_move_on() {
    let broken = MockServer::start().await;
    answer(&broken, "/v3/lease/grant", 200, "<html>not json</html>").await;
    let failing = MockServer::start().await;
    answer(&failing, "/v3/lease/grant", 503, "unavailable").await;
    let good = MockServer::start().await;
    answer(&good, "/v3/lease/grant", 200, r#"{"ID":"42","TTL":"6"}"#).await;
    // A closed port first: connection refused also moves on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let endpoints = vec![
        Url::parse(&closed_url).unwrap(),
        Url::parse(&broken.uri()).unwrap(),
        Url::parse(&failing.uri()).unwrap(),
        Url::parse(&good.uri()).unwrap(),
    ];
    let c = EtcdClient::new(
        sidecar::http::client(),
        endpoints,
        Duration::from_secs(2),
        "",
        Secret::default(),
    );
    assert_eq!(c.lease_grant(6).unwrap(), 42);
    assert_eq!(broken.received_requests().await.unwrap().len(), 1);
    assert_eq!(failing.received_requests().await.unwrap().len(), 1);
    // The first endpoint that answers wins every call: the good one is asked once per call.
    assert_eq!(c.lease_grant(6).unwrap(), 42);
    assert_eq!(good.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn all_endpoints_failing_is_an_error_naming_the_path() {
    let a = MockServer::start().await;
    answer(
        &a,
        "/v3/lease/keepalive",
        500,
        r#"{"error":"boom","code":14}"#,
    )
    .await;
    let c = client(&[&a], "", "");
    let err = c.lease_keepalive(1).unwrap_err().to_string();
    assert!(err.contains("/v3/lease/keepalive"), "{err}");
    assert!(err.contains("boom"), "{err}");
}

#[tokio::test]
async fn revoke_of_unknown_lease_is_ok() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/revoke",
        404,
        r#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#,
    )
    .await;
    client(&[&etcd], "", "").lease_revoke(9).unwrap();
}

#[tokio::test]
async fn authenticates_and_sends_the_bare_token() {
    let etcd = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/authenticate"))
        .and(body_partial_json(json!({"name": "root", "password": "pw"})))
        .respond_with(
            ResponseTemplate::new(200).set_body_string(r#"{"header":{},"token":"tok.1"}"#),
        )
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/kv/put"))
        .and(header("authorization", "tok.1"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .mount(&etcd)
        .await;
    let c = client(&[&etcd], "root", "pw");
    c.put("k", "v", 0).unwrap();
    c.put("k", "v", 0).unwrap();
    let auths = etcd
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path() == "/v3/auth/authenticate")
        .count();
    assert_eq!(auths, 1, "the token is reused");
}

#[tokio::test]
async fn reauthenticates_when_etcd_says_the_token_is_invalid() {
    let etcd = MockServer::start().await;
    // First token "old", then "new".
    Mock::given(method("POST"))
        .and(path("/v3/auth/authenticate"))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"token":"old"}"#))
        .up_to_n_times(1)
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/authenticate"))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"token":"new"}"#))
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/kv/put"))
        .and(header("authorization", "new"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/kv/put"))
        .respond_with(ResponseTemplate::new(401).set_body_string(
            r#"{"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16}"#,
        ))
        .mount(&etcd)
        .await;
    let c = client(&[&etcd], "root", "pw");
    c.put("k", "v", 0).unwrap();
    let paths: Vec<String> = etcd
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "/v3/auth/authenticate",
            "/v3/kv/put",
            "/v3/auth/authenticate",
            "/v3/kv/put"
        ]
    );
}

#[tokio::test]
async fn wrong_password_is_an_auth_error_without_the_password() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/auth/authenticate",
        400,
        r#"{"error":"etcdserver: authentication failed, invalid user ID or password","code":3}"#,
    )
    .await;
    let c = client(&[&etcd], "root", "s3cret-pw");
    let err = c.put("k", "v", 0).unwrap_err();
    assert!(matches!(err, EtcdError::Auth(_)), "{err}");
    assert!(!err.to_string().contains("s3cret-pw"));
    assert!(!format!("{err:?} {c:?}").contains("s3cret-pw"));
}

#[tokio::test]
async fn a_hanging_endpoint_times_out_and_the_next_answers() {
    let hanging = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string("{}")
                .set_delay(Duration::from_secs(30)),
        )
        .mount(&hanging)
        .await;
    let good = MockServer::start().await;
    answer(
        &good,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"TTL":"3"}}"#,
    )
    .await;
    let with = |endpoints: &[&MockServer]| {
        EtcdClient::new(
            sidecar::http::client(),
            endpoints
                .iter()
                .map(|s| Url::parse(&s.uri()).unwrap())
                .collect(),
            Duration::from_millis(300),
            "",
            Secret::default(),
        )
    };
    let started = std::time::Instant::now();
    assert_eq!(with(&[&hanging, &good]).lease_keepalive(1).unwrap(), 3);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Alone, the hanging endpoint is an error that says so.
    let err = with(&[&hanging])
        .lease_keepalive(1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out after 300ms"), "{err}");
    assert!(err.contains(&hanging.uri()), "{err}");
}

#[tokio::test]
async fn a_started_keepalive_answers_as_a_plain_one() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"ID":"7","TTL":"4"}}"#,
    )
    .await;
    let c = client(&[&etcd], "", "");
    let pending = c.start_keepalive(7);
    assert_eq!(c.finish_keepalive(pending), Ok(4));
    let sent = etcd.received_requests().await.unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&sent[0].body).unwrap(),
        json!({"ID": "7"})
    );
}

#[tokio::test]
async fn a_started_keepalive_the_first_endpoint_fails_goes_on_to_the_next() {
    let (first, second) = (MockServer::start().await, MockServer::start().await);
    answer(&first, "/v3/lease/keepalive", 500, "down").await;
    answer(
        &second,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"ID":"7","TTL":"5"}}"#,
    )
    .await;
    let c = client(&[&first, &second], "", "");
    let pending = c.start_keepalive(7);
    assert_eq!(c.finish_keepalive(pending), Ok(5));
    assert_eq!(second.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_started_keepalive_with_a_rejected_token_authenticates_again() {
    let etcd = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/authenticate"))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"token":"new"}"#))
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/lease/keepalive"))
        .and(header("authorization", "new"))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"result":{"TTL":"3"}}"#))
        .mount(&etcd)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/lease/keepalive"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_string(r#"{"error":"etcdserver: invalid auth token","code":16}"#),
        )
        .mount(&etcd)
        .await;
    let c = client(&[&etcd], "root", "pw");
    // No token yet: the started request goes without one and is refused.
    let pending = c.start_keepalive(7);
    assert_eq!(c.finish_keepalive(pending), Ok(3));
    // Now with the token.
    let pending = c.start_keepalive(7);
    assert_eq!(c.finish_keepalive(pending), Ok(3));
    let keepalives = etcd
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path() == "/v3/lease/keepalive")
        .count();
    assert_eq!(keepalives, 3);
}
