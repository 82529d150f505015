//! The async etcd gateway client (`peers::etcd`) against wiremock answering as etcd 3.4
//! does (bodies copied from a real one): typed requests, every `EtcdError` variant,
//! endpoint order and memory, auth and re-auth, timeouts and the answer cap.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use sidecar::config::Secret;
use sidecar::peers::etcd::{EtcdClient, EtcdError};
use sidecar::peers::http::{build_client, Redirects};
use url::Url;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const LEASE_NOT_FOUND: &str = r#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
const INVALID_TOKEN: &str = r#"{"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16}"#;
const USER_EMPTY: &str = r#"{"error":"etcdserver: user name is empty","message":"etcdserver: user name is empty","code":3}"#;
const AUTH_FAILED: &str = r#"{"error":"etcdserver: authentication failed, invalid user ID or password","message":"etcdserver: authentication failed, invalid user ID or password","code":3}"#;
const NO_LEADER: &str =
    r#"{"error":"etcdserver: no leader","message":"etcdserver: no leader","code":14}"#;

fn url(server: &MockServer) -> Url {
    Url::parse(&server.uri()).unwrap()
}

fn client_with(endpoints: Vec<Url>, user: &str, password: &str, timeout: Duration) -> EtcdClient {
    EtcdClient::new(
        endpoints,
        user.to_string(),
        Secret::new(password),
        timeout,
        build_client(Redirects::Never).unwrap(),
    )
}

fn client(servers: &[&MockServer], user: &str, password: &str) -> EtcdClient {
    let endpoints = servers.iter().map(|s| url(s)).collect();
    client_with(endpoints, user, password, Duration::from_secs(2))
}

async fn answer(server: &MockServer, p: &str, status: u16, body: &str) {
    Mock::given(method("POST"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(status).set_body_string(body))
        .mount(server)
        .await;
}

async fn paths(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_string())
        .collect()
}

async fn body_of(server: &MockServer, p: &str) -> Value {
    let requests = server.received_requests().await.unwrap();
    let request = requests.iter().find(|r| r.url.path() == p).unwrap();
    serde_json::from_slice(&request.body).unwrap()
}

#[tokio::test]
async fn grant_keepalive_put_get_revoke_send_typed_bodies() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/grant",
        200,
        r#"{"header":{"cluster_id":"1","revision":"1"},"ID":"7587899241118086159","TTL":"6"}"#,
    )
    .await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"header":{},"ID":"7587899241118086159","TTL":"4"}}"#,
    )
    .await;
    answer(&etcd, "/v3/lease/revoke", 200, r#"{"header":{}}"#).await;
    answer(&etcd, "/v3/kv/put", 200, r#"{"header":{}}"#).await;
    answer(
        &etcd,
        "/v3/kv/range",
        200,
        &format!(
            r#"{{"header":{{}},"kvs":[{{"key":"eA==","value":"{}","lease":"7"}}],"count":"1"}}"#,
            B64.encode("{\"a\":1}")
        ),
    )
    .await;
    let c = client(&[&etcd], "", "");
    let lease = c.lease_grant(6).await.unwrap();
    assert_eq!(lease, 7587899241118086159);
    assert_eq!(c.lease_keepalive(lease).await, Ok(4));
    c.put("XLLM:DEFAULT:h:1", "{\"a\":1}", lease).await.unwrap();
    c.put("no-lease", "v", 0).await.unwrap();
    assert_eq!(c.get("x").await.unwrap().as_deref(), Some("{\"a\":1}"));
    c.lease_revoke(lease).await.unwrap();

    // int64 as strings, keys and values base64, as the gateway's protobuf JSON reads them.
    assert_eq!(body_of(&etcd, "/v3/lease/grant").await, json!({"TTL": "6"}));
    assert_eq!(
        body_of(&etcd, "/v3/lease/keepalive").await,
        json!({"ID": "7587899241118086159"})
    );
    assert_eq!(
        body_of(&etcd, "/v3/lease/revoke").await,
        json!({"ID": "7587899241118086159"})
    );
    assert_eq!(
        body_of(&etcd, "/v3/kv/put").await,
        json!({"key": B64.encode("XLLM:DEFAULT:h:1"), "value": B64.encode("{\"a\":1}"),
               "lease": "7587899241118086159"})
    );
    assert_eq!(
        body_of(&etcd, "/v3/kv/range").await,
        json!({"key": B64.encode("x")})
    );
    let requests = etcd.received_requests().await.unwrap();
    // A put without a lease sends no `lease` field (zero is absent in protobuf JSON).
    let plain_put = requests
        .iter()
        .filter(|r| r.url.path() == "/v3/kv/put")
        .nth(1)
        .unwrap();
    let plain: Value = serde_json::from_slice(&plain_put.body).unwrap();
    assert!(plain.get("lease").is_none(), "{plain}");
    assert!(requests
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));
    assert!(requests
        .iter()
        .all(|r| r.headers.get("content-type").unwrap() == "application/json"));
}

#[tokio::test]
async fn keepalive_without_ttl_is_lease_not_found() {
    // Real etcd answers a keepalive on a dead lease with 200 and a result without TTL.
    for body in [
        r#"{"result":{"header":{"cluster_id":"1","revision":"1"},"ID":"5"}}"#,
        r#"{"result":{"ID":"5","TTL":null}}"#,
        r#"{"result":{"ID":"5","TTL":"0"}}"#,
        r#"{"result":null}"#,
        r#"{}"#,
    ] {
        let etcd = MockServer::start().await;
        answer(&etcd, "/v3/lease/keepalive", 200, body).await;
        let got = client(&[&etcd], "", "").lease_keepalive(5).await;
        assert_eq!(got, Err(EtcdError::LeaseNotFound), "body {body}");
    }
}

#[tokio::test]
async fn a_keepalive_error_inside_the_stream_is_classified_by_its_code() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"error":{"grpc_code":5,"http_code":404,"message":"etcdserver: requested lease not found","http_status":"Not Found"}}"#,
    )
    .await;
    assert_eq!(
        client(&[&etcd], "", "").lease_keepalive(5).await,
        Err(EtcdError::LeaseNotFound)
    );
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}}"#,
    )
    .await;
    // Not "lease gone": the lease may well be alive.
    let err = client(&[&etcd], "", "")
        .lease_keepalive(5)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EtcdError::Unavailable(m) if m.contains("no leader")),
        "{err}"
    );
}

#[tokio::test]
async fn not_found_is_lease_not_found_for_keepalive_and_put_and_ok_for_revoke() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/lease/keepalive", 404, LEASE_NOT_FOUND).await;
    answer(&etcd, "/v3/lease/revoke", 404, LEASE_NOT_FOUND).await;
    answer(&etcd, "/v3/kv/put", 404, LEASE_NOT_FOUND).await;
    let other = MockServer::start().await;
    answer(
        &other,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"TTL":"6"}}"#,
    )
    .await;
    let c = client(&[&etcd, &other], "", "");
    assert_eq!(c.lease_keepalive(9).await, Err(EtcdError::LeaseNotFound));
    assert_eq!(c.put("k", "v", 9).await, Err(EtcdError::LeaseNotFound));
    assert_eq!(c.lease_revoke(9).await, Ok(()));
    // etcd's own answer settles the call: the other member is not asked.
    assert!(other.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn range_reads_empty_and_missing_values_and_refuses_bad_base64() {
    let etcd = MockServer::start().await;
    let range = |key: &str, answer: String| {
        Mock::given(method("POST"))
            .and(path("/v3/kv/range"))
            .and(body_partial_json(json!({"key": B64.encode(key)})))
            .respond_with(ResponseTemplate::new(200).set_body_string(answer))
    };
    range(
        "empty",
        r#"{"kvs":[{"key":"ZW1wdHk="}],"count":"1"}"#.into(),
    )
    .mount(&etcd)
    .await;
    range("bad", r#"{"kvs":[{"key":"YmFk","value":"!!"}]}"#.into())
        .mount(&etcd)
        .await;
    range(
        "full",
        format!(
            r#"{{"kvs":[{{"key":"x","value":"{}"}}]}}"#,
            B64.encode("payload")
        ),
    )
    .mount(&etcd)
    .await;
    answer(&etcd, "/v3/kv/range", 200, r#"{"header":{}}"#).await;
    let c = client(&[&etcd], "", "");
    assert_eq!(c.get("empty").await.unwrap().as_deref(), Some(""));
    assert_eq!(c.get("full").await.unwrap().as_deref(), Some("payload"));
    assert_eq!(c.get("missing").await.unwrap(), None);
    let err = c.get("bad").await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::BadAnswer(m) if m.contains("base64")),
        "{err}"
    );
}

#[tokio::test]
async fn grant_answers_without_a_usable_id_are_bad_answers() {
    for body in [
        r#"{"header":{}}"#,
        r#"{"ID":"x"}"#,
        r#"{"ID":"0","error":"too many"}"#,
    ] {
        let etcd = MockServer::start().await;
        answer(&etcd, "/v3/lease/grant", 200, body).await;
        let err = client(&[&etcd], "", "").lease_grant(6).await.unwrap_err();
        assert!(matches!(err, EtcdError::BadAnswer(_)), "{body}: {err}");
    }
}

#[tokio::test]
async fn a_request_etcd_calls_invalid_is_a_bad_answer_and_not_sent_elsewhere() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/grant",
        400,
        r#"{"error":"invalid character 'x' looking for beginning of value","message":"invalid character 'x' looking for beginning of value","code":3}"#,
    )
    .await;
    let other = MockServer::start().await;
    let err = client(&[&etcd, &other], "", "")
        .lease_grant(6)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EtcdError::BadAnswer(m) if m.contains("invalid character")),
        "{err}"
    );
    assert!(other.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn failures_move_on_through_the_endpoints_in_order() {
    let not_object = MockServer::start().await;
    answer(&not_object, "/v3/lease/grant", 200, "[1,2]").await;
    let html = MockServer::start().await;
    answer(&html, "/v3/lease/grant", 200, "<html>proxy error</html>").await;
    let failing = MockServer::start().await;
    answer(&failing, "/v3/lease/grant", 503, "unavailable").await;
    let leaderless = MockServer::start().await;
    answer(&leaderless, "/v3/lease/grant", 503, NO_LEADER).await;
    let good = MockServer::start().await;
    answer(&good, "/v3/lease/grant", 200, r#"{"ID":"42","TTL":"6"}"#).await;
    // A closed port first: connection refused also moves on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = Url::parse(&format!("http://{}", closed.local_addr().unwrap())).unwrap();
    drop(closed);
    let servers = [&not_object, &html, &failing, &leaderless, &good];
    let mut endpoints = vec![closed_url];
    endpoints.extend(servers.iter().map(|s| url(s)));
    let c = client_with(endpoints, "", "", Duration::from_secs(2));
    assert_eq!(c.preferred_endpoint(), 0);
    assert_eq!(c.lease_grant(6).await, Ok(42));
    for server in &servers {
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
    // The endpoint that answered is remembered: the next calls go straight to it.
    assert_eq!(c.preferred_endpoint(), 5);
    assert_eq!(c.lease_grant(6).await, Ok(42));
    assert_eq!(c.lease_grant(6).await, Ok(42));
    for server in &servers[..4] {
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
    assert_eq!(good.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_silent_member_costs_at_most_the_failover_bound_while_others_remain() {
    let keepalive = r#"{"result":{"TTL":"5"}}"#;
    let (slow, good) = (MockServer::start().await, MockServer::start().await);
    Mock::given(method("POST"))
        .and(path("/v3/lease/keepalive"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string(r#"{"result":{"TTL":"4"}}"#)
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&slow)
        .await;
    answer(&good, "/v3/lease/keepalive", 200, keepalive).await;
    let endpoints = vec![url(&slow), url(&good)];
    // Within the 3 s etcd timeout the slow member would answer (TTL 4): without a
    // bound it is the answer; with a 300 ms bound the second member's is.
    let unbounded = client_with(endpoints.clone(), "", "", Duration::from_secs(3));
    assert_eq!(unbounded.lease_keepalive(1).await, Ok(4));
    assert_eq!(unbounded.preferred_endpoint(), 0);
    let bounded = client_with(endpoints, "", "", Duration::from_secs(3))
        .with_failover_after(Duration::from_millis(300));
    assert_eq!(bounded.lease_keepalive(1).await, Ok(5));
    assert_eq!(bounded.preferred_endpoint(), 1);
    // The last endpoint left waits the whole timeout: alone, the slow member answers.
    let alone = client_with(vec![url(&slow)], "", "", Duration::from_secs(3))
        .with_failover_after(Duration::from_millis(300));
    assert_eq!(alone.lease_keepalive(1).await, Ok(4));
}

#[tokio::test]
async fn the_remembered_endpoint_failing_moves_on_to_the_others_in_order() {
    let (a, b) = (MockServer::start().await, MockServer::start().await);
    answer(&a, "/v3/lease/keepalive", 503, NO_LEADER).await;
    Mock::given(method("POST"))
        .and(path("/v3/lease/keepalive"))
        .respond_with(ResponseTemplate::new(200).set_body_string(r#"{"result":{"TTL":"5"}}"#))
        .up_to_n_times(1)
        .mount(&b)
        .await;
    answer(&b, "/v3/lease/keepalive", 503, NO_LEADER).await;
    let c = client(&[&a, &b], "", "");
    assert_eq!(c.lease_keepalive(1).await, Ok(5));
    assert_eq!(c.preferred_endpoint(), 1);
    // b now fails: a is tried next, and fails too; the error names the last reason.
    let err = c.lease_keepalive(1).await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::Unavailable(m)
        if m.contains("/v3/lease/keepalive") && m.contains("no leader")),
        "{err}"
    );
    assert_eq!(paths(&a).await.len(), 2);
    assert_eq!(paths(&b).await.len(), 2);
}

#[tokio::test]
async fn a_dead_first_endpoint_costs_one_timeout_once_not_per_call() {
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
    let c = client_with(
        vec![url(&hanging), url(&good)],
        "",
        "",
        Duration::from_millis(300),
    );
    for _ in 0..5 {
        assert_eq!(c.lease_keepalive(1).await, Ok(3));
    }
    // One request ever reached the hanging endpoint: the first call's.
    assert_eq!(hanging.received_requests().await.unwrap().len(), 1);
    assert_eq!(good.received_requests().await.unwrap().len(), 5);

    // Alone, the hanging endpoint is an error that says what and where.
    let alone = client_with(vec![url(&hanging)], "", "", Duration::from_millis(300));
    let err = alone.lease_keepalive(1).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, EtcdError::Unavailable(_)), "{text}");
    assert!(text.contains("no answer within 300ms"), "{text}");
    assert!(
        text.contains(hanging.address().to_string().as_str()),
        "{text}"
    );
}

#[tokio::test]
async fn an_answer_past_the_cap_is_not_taken() {
    let etcd = MockServer::start().await;
    let huge = format!(r#"{{"ID":"1","pad":"{}"}}"#, "x".repeat(2 * 1024 * 1024));
    answer(&etcd, "/v3/lease/grant", 200, &huge).await;
    let err = client(&[&etcd], "", "").lease_grant(6).await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::Unavailable(m) if m.contains("larger than")),
        "{err}"
    );
}

#[tokio::test]
async fn authenticates_lazily_once_and_sends_the_bare_token() {
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
    assert!(
        paths(&etcd).await.is_empty(),
        "nothing sent before the first call"
    );
    c.put("k", "v", 0).await.unwrap();
    c.put("k", "v", 0).await.unwrap();
    assert_eq!(
        paths(&etcd).await,
        ["/v3/auth/authenticate", "/v3/kv/put", "/v3/kv/put"]
    );
}

/// etcd rejects the first token (`rejection`), accepts the second.
async fn reauth_case(rejection_status: u16, rejection: &str) {
    let etcd = MockServer::start().await;
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
    answer(&etcd, "/v3/kv/put", rejection_status, rejection).await;
    client(&[&etcd], "root", "pw")
        .put("k", "v", 0)
        .await
        .unwrap();
    assert_eq!(
        paths(&etcd).await,
        [
            "/v3/auth/authenticate",
            "/v3/kv/put",
            "/v3/auth/authenticate",
            "/v3/kv/put"
        ]
    );
}

#[tokio::test]
async fn reauthenticates_when_the_token_is_invalid() {
    // etcd restarted or the simple token expired.
    reauth_case(401, INVALID_TOKEN).await;
}

#[tokio::test]
async fn reauthenticates_when_etcd_says_user_name_is_empty() {
    reauth_case(400, USER_EMPTY).await;
}

#[tokio::test]
async fn a_token_rejected_again_after_reauth_is_auth_rejected_without_looping() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/auth/authenticate", 200, r#"{"token":"t"}"#).await;
    answer(&etcd, "/v3/kv/put", 401, INVALID_TOKEN).await;
    let err = client(&[&etcd], "root", "pw")
        .put("k", "v", 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EtcdError::AuthRejected(m) if m.contains("invalid auth token")),
        "{err}"
    );
    assert_eq!(paths(&etcd).await.len(), 4);
}

#[tokio::test]
async fn wrong_password_is_auth_rejected_and_never_shows_the_password() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/auth/authenticate", 400, AUTH_FAILED).await;
    let c = client(&[&etcd], "root", "s3cret-pw");
    let err = c.put("k", "v", 0).await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::AuthRejected(m) if m.contains("authentication failed")),
        "{err}"
    );
    assert!(!format!("{err} {err:?} {c:?}").contains("s3cret-pw"));
    // The put itself was never sent.
    assert_eq!(paths(&etcd).await, ["/v3/auth/authenticate"]);
}

#[tokio::test]
async fn permission_denied_is_auth_rejected() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/auth/authenticate", 200, r#"{"token":"t"}"#).await;
    answer(
        &etcd,
        "/v3/kv/put",
        403,
        r#"{"error":"etcdserver: permission denied","message":"etcdserver: permission denied","code":7}"#,
    )
    .await;
    let err = client(&[&etcd], "user", "pw")
        .put("k", "v", 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EtcdError::AuthRejected(m) if m.contains("permission denied")),
        "{err}"
    );
}

#[tokio::test]
async fn authenticate_without_token_is_auth_rejected() {
    let etcd = MockServer::start().await;
    answer(&etcd, "/v3/auth/authenticate", 200, r#"{"header":{}}"#).await;
    let err = client(&[&etcd], "root", "pw")
        .lease_grant(5)
        .await
        .unwrap_err();
    assert!(matches!(err, EtcdError::AuthRejected(_)), "{err}");
}

#[tokio::test]
async fn the_client_is_shared_across_tasks() {
    let etcd = MockServer::start().await;
    answer(
        &etcd,
        "/v3/lease/keepalive",
        200,
        r#"{"result":{"TTL":"6"}}"#,
    )
    .await;
    let c = client(&[&etcd], "", "");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.lease_keepalive(3).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(6));
    }
    assert_eq!(paths(&etcd).await.len(), 8);
}

#[test]
fn every_call_can_run_as_its_own_task() {
    // The driver spawns each command on a multi-task runtime: the futures must be Send.
    fn send<T: Send + 'static>(_: T) {}
    let c = client_with(Vec::new(), "u", "p", Duration::from_secs(1));
    let each = c.clone();
    send(async move {
        let _ = each.lease_grant(1).await;
        let _ = each.lease_keepalive(1).await;
        let _ = each.lease_revoke(1).await;
        let _ = each.put("k", "v", 1).await;
        let _ = each.get("k").await;
    });
    assert_eq!(c.preferred_endpoint(), 0);
}
