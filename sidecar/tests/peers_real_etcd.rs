//! The async etcd client (`peers::etcd`) against a real etcd 3.4 on loopback (see
//! `local-etcd`): the lease's whole life, `LeaseNotFound` as etcd itself says it, and
//! auth with re-authentication once etcd has expired the token. Skipped (with a
//! message) where `etcd` is not installed; CI installs it.

use std::time::Duration;

use serde_json::{json, Value};
use sidecar::config::Secret;
use sidecar::peers::etcd::{EtcdClient, EtcdError};
use sidecar::peers::http::{build_client, Redirects};
use url::Url;

/// One member; simple tokens expire after 1 s idle.
fn start() -> Option<local_etcd::Cluster> {
    if let Some(why) = local_etcd::unavailable() {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let options = local_etcd::Options {
        tag: "sidecar-peers-etcd".into(),
        args: vec!["--auth-token-ttl".into(), "1".into()],
        ..Default::default()
    };
    Some(local_etcd::Cluster::start(options).unwrap_or_else(|e| panic!("{e}")))
}

fn client(cluster: &local_etcd::Cluster, user: &str, password: &str) -> EtcdClient {
    EtcdClient::new(
        vec![Url::parse(&cluster.url()).unwrap()],
        user.to_string(),
        Secret::new(password),
        Duration::from_secs(3),
        build_client(Redirects::Never).unwrap(),
    )
}

/// A raw gateway call, written from etcd's API rather than through the client.
async fn raw(
    cluster: &local_etcd::Cluster,
    path: &str,
    body: Value,
    token: Option<&str>,
) -> (u16, Value) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut request = http
        .post(format!("{}{path}", cluster.url()))
        .timeout(Duration::from_secs(5))
        .json(&body);
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_lease_from_grant_to_revoke_and_lease_not_found_after() {
    let Some(cluster) = start() else {
        return;
    };
    let etcd = client(&cluster, "", "");
    let lease = etcd.lease_grant(5).await.unwrap();
    assert_ne!(lease, 0);
    etcd.put("/peers/XLLM:DEFAULT:h:1", "{\"v\":1}", lease)
        .await
        .unwrap();
    assert_eq!(
        etcd.get("/peers/XLLM:DEFAULT:h:1")
            .await
            .unwrap()
            .as_deref(),
        Some("{\"v\":1}")
    );
    etcd.put("/peers/empty", "", 0).await.unwrap();
    assert_eq!(etcd.get("/peers/empty").await.unwrap().as_deref(), Some(""));
    assert_eq!(etcd.get("/peers/absent").await.unwrap(), None);
    let ttl = etcd.lease_keepalive(lease).await.unwrap();
    assert!((1..=5).contains(&ttl), "TTL {ttl}");

    etcd.lease_revoke(lease).await.unwrap();
    // The key went with the lease; the lease is gone as etcd says it.
    assert_eq!(etcd.get("/peers/XLLM:DEFAULT:h:1").await.unwrap(), None);
    assert_eq!(
        etcd.lease_keepalive(lease).await,
        Err(EtcdError::LeaseNotFound)
    );
    assert_eq!(
        etcd.put("/peers/k", "v", lease).await,
        Err(EtcdError::LeaseNotFound)
    );
    // Revoking what is already gone is fine.
    assert_eq!(etcd.lease_revoke(lease).await, Ok(()));
    assert_eq!(etcd.lease_revoke(12345).await, Ok(()));
}

#[tokio::test]
async fn auth_wrong_password_and_reauthentication_after_the_token_expires() {
    let Some(cluster) = start() else {
        return;
    };
    // Auth on, as an operator turns it on: root user with the root role.
    for (path, body) in [
        ("/v3/auth/role/add", json!({"name": "root"})),
        (
            "/v3/auth/user/add",
            json!({"name": "root", "password": "rootpw"}),
        ),
        (
            "/v3/auth/user/grant",
            json!({"user": "root", "role": "root"}),
        ),
        ("/v3/auth/enable", json!({})),
    ] {
        let (status, answer) = raw(&cluster, path, body, None).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }

    let wrong = client(&cluster, "root", "not-it");
    let err = wrong.put("/peers/k", "v", 0).await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::AuthRejected(m) if m.contains("authentication failed")),
        "{err}"
    );
    assert!(!err.to_string().contains("not-it"));

    let etcd = client(&cluster, "root", "rootpw");
    etcd.put("/peers/k", "v1", 0).await.unwrap();
    assert_eq!(etcd.get("/peers/k").await.unwrap().as_deref(), Some("v1"));

    // A token left idle expires: wait (bounded) until etcd refuses one taken now.
    let (_, answer) = raw(
        &cluster,
        "/v3/auth/authenticate",
        json!({"name": "root", "password": "rootpw"}),
        None,
    )
    .await;
    let old = answer["token"].as_str().unwrap().to_string();
    // etcd drops a simple token idle past the TTL (checked once a second); each check
    // uses the token and so restarts its clock: the gaps grow until one is long enough.
    let mut expired = false;
    for idle in [2, 4, 8] {
        tokio::time::sleep(Duration::from_secs(idle)).await;
        let (status, answer) =
            raw(&cluster, "/v3/kv/range", json!({"key": "eA=="}), Some(&old)).await;
        if (status, &answer["code"]) == (401, &json!(16)) {
            expired = true;
            break;
        }
    }
    assert!(
        expired,
        "etcd never expired the token: re-authentication was not tested"
    );

    // The client's token idled as long: it authenticates again on its own.
    etcd.put("/peers/k", "v2", 0).await.unwrap();
    assert_eq!(etcd.get("/peers/k").await.unwrap().as_deref(), Some("v2"));
}

#[tokio::test]
async fn a_restarted_etcd_is_reached_again_on_a_new_connection() {
    let Some(mut cluster) = start() else {
        return;
    };
    let etcd = client(&cluster, "", "");
    let lease = etcd.lease_grant(30).await.unwrap();
    etcd.put("/peers/restart", "v", lease).await.unwrap();
    // The pooled connection dies with the process; the same port comes back. The restart
    // runs off the runtime, which stays free to see the connection close, as the
    // sidecar's runtime is while idle between calls.
    let _cluster = tokio::task::spawn_blocking(move || {
        cluster.restart(0).unwrap_or_else(|e| panic!("{e}"));
        cluster
    })
    .await
    .unwrap();
    // The first call after the restart: the dead connection is not used for it, and the
    // call is not lost (one endpoint only: no other member to move on to).
    let ttl = etcd.lease_keepalive(lease).await.unwrap();
    assert!((1..=30).contains(&ttl), "TTL {ttl}");
    assert_eq!(
        etcd.get("/peers/restart").await.unwrap().as_deref(),
        Some("v")
    );
}
