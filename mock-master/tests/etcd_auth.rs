//! etcd auth: the master authenticates, sends its token on every call, and renews it when
//! etcd refuses it (idle expiry, etcd forgetting its tokens), on unary calls and on the
//! watch. Against mock-etcd with users, and against a real etcd with auth enabled.

mod common;

use std::process::Command;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::*;
use mock_master::{InstanceState, MockMaster};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

/// Gateway calls as an authenticated user, independent of the crate's client.
struct AuthGw {
    url: String,
    http: reqwest::Client,
}

impl AuthGw {
    fn new(url: &str) -> Self {
        AuthGw {
            url: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        }
    }

    async fn token(&self) -> String {
        let r = self
            .http
            .post(format!("{}/v3/auth/authenticate", self.url))
            .json(&json!({"name": "root", "password": "pw"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "authenticate: {}", r.status());
        let v: Value = r.json().await.unwrap();
        v["token"].as_str().unwrap().to_string()
    }

    /// Put with a fresh token (the test's own, never the master's).
    async fn put(&self, key: &str, value: &str) {
        let token = self.token().await;
        let r = self
            .http
            .post(format!("{}/v3/kv/put", self.url))
            .header("Authorization", token)
            .json(&json!({"key": B64.encode(key), "value": B64.encode(value)}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "put: {}", r.status());
    }
}

async fn authed_master(
    url: &str,
    ns: &str,
    password: &str,
) -> (MockMaster, std::sync::Arc<mock_kit::events::RingSink>) {
    let (events, ring) = ring_events();
    let mut cfg = fast_config(url, ns);
    cfg.etcd_username = "root".into();
    cfg.etcd_password = password.into();
    (mock_master::start(cfg, events).await.unwrap(), ring)
}

async fn wait_active(m: &MockMaster, name: &str) -> bool {
    poll(WAIT, || async {
        m.instance(name).map(|v| v.state) == Some(InstanceState::Active)
    })
    .await
}

async fn mock_etcd_with_users(ttl: Duration) -> mock_etcd::MockEtcd {
    let cfg = mock_etcd::Config {
        users: vec![("root".into(), "pw".into())],
        token_ttl: ttl,
        ..Default::default()
    };
    mock_etcd::start(cfg, mock_kit::Events::none("etcd"))
        .await
        .unwrap()
}

fn refused(etcd: &mock_etcd::MockEtcd, path: &str) -> usize {
    etcd.requests()
        .iter()
        .filter(|r| r.path == path && r.status == 401)
        .count()
}

#[tokio::test]
async fn token_expiry_is_survived_on_range_and_watch_mock_etcd() {
    let ttl = Duration::from_millis(300);
    let etcd = mock_etcd_with_users(ttl).await;
    let gw = AuthGw::new(&etcd.url());
    let ns = unique_ns("auth");
    let (a, b, c) = (
        Stub::start("m").await,
        Stub::start("m").await,
        Stub::start("m").await,
    );
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a"))
        .await;

    let (m, ring) = authed_master(&etcd.url(), &ns, "pw").await;
    // The first listing (an authenticated range) found a; the watch sees b.
    assert_eq!(
        m.instance(&a.name).map(|v| v.state),
        Some(InstanceState::Active)
    );
    gw.put(&key(&ns, "DEFAULT", &b.name), &reg_value(&b.name, 0, "b"))
        .await;
    assert!(wait_active(&m, &b.name).await);
    assert!(etcd
        .requests()
        .iter()
        .any(|r| r.path == "/v3/auth/authenticate" && r.status == 200));

    // Let the master's token expire (idle TTL), then make it range: the first try is
    // refused (401), it re-authenticates and the retry lists both instances.
    tokio::time::sleep(ttl * 3).await;
    let before = refused(&etcd, "/v3/kv/range");
    m.restart().await;
    assert_eq!(refused(&etcd, "/v3/kv/range"), before + 1);
    for s in [&a, &b] {
        assert_eq!(
            m.instance(&s.name).map(|v| v.state),
            Some(InstanceState::Active),
            "{} after the re-authenticated relist",
            s.name
        );
    }

    // Expire the token again and break the watch: the re-opened watch is refused for its
    // token, the master renews it and sees c.
    tokio::time::sleep(ttl * 3).await;
    etcd.close_watches();
    assert!(
        poll(WAIT, || async {
            ring.snapshot()
                .iter()
                .any(|e| e.kind == "etcd_auth_refused")
        })
        .await,
        "the watch was never refused: the test did not test the expiry"
    );
    gw.put(&key(&ns, "DEFAULT", &c.name), &reg_value(&c.name, 0, "c"))
        .await;
    assert!(wait_active(&m, &c.name).await, "c not seen after re-auth");
    m.stop().await;
    etcd.stop().await;
}

#[tokio::test]
async fn tokens_forgotten_by_etcd_are_renewed_mock_etcd() {
    // lose_data(false) forgets every token (as an etcd restart does) but keeps revisions.
    let etcd = mock_etcd_with_users(Duration::from_secs(300)).await;
    let gw = AuthGw::new(&etcd.url());
    let ns = unique_ns("forget");
    let (a, b) = (Stub::start("m").await, Stub::start("m").await);
    let (m, _ring) = authed_master(&etcd.url(), &ns, "pw").await;
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a"))
        .await;
    assert!(wait_active(&m, &a.name).await);
    etcd.lose_data(false);
    gw.put(&key(&ns, "DEFAULT", &b.name), &reg_value(&b.name, 0, "b"))
        .await;
    assert!(
        wait_active(&m, &b.name).await,
        "b not seen after etcd forgot tokens"
    );
    m.stop().await;
    etcd.stop().await;
}

#[tokio::test]
async fn a_wrong_password_lists_nothing_and_says_why_mock_etcd() {
    let etcd = mock_etcd_with_users(Duration::from_secs(300)).await;
    let gw = AuthGw::new(&etcd.url());
    let ns = unique_ns("badpw");
    let a = Stub::start("m").await;
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a"))
        .await;
    let (m, ring) = authed_master(&etcd.url(), &ns, "wrong").await;
    assert!(m.instance(&a.name).is_none());
    let errors: Vec<String> = ring
        .snapshot()
        .into_iter()
        .filter(|e| e.kind == "etcd_error")
        .map(|e| e.detail["error"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("authenticating as root")),
        "{errors:?}"
    );
    assert!(errors.iter().all(|e| !e.contains("wrong")), "{errors:?}");
    m.stop().await;
    etcd.stop().await;
}

fn etcdctl(url: &str, args: &[&str]) {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(url)
        .args(args)
        .output()
        .expect("etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn token_expiry_is_survived_real_etcd() {
    let Some(etcd) = start_etcd_with("--auth-token-ttl 1").await else {
        return;
    };
    etcdctl(&etcd.url, &["user", "add", "root:pw"]);
    etcdctl(&etcd.url, &["auth", "enable"]);
    let gw = AuthGw::new(&etcd.url);
    let ns = unique_ns("realauth");
    let (a, b, c) = (
        Stub::start("m").await,
        Stub::start("m").await,
        Stub::start("m").await,
    );
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a"))
        .await;
    // Through a proxy whose connections can be cut: a broken watch without touching etcd.
    let proxy = CutProxy::start(&etcd.url).await;
    let (m, ring) = authed_master(&proxy.url, &ns, "pw").await;
    assert_eq!(
        m.instance(&a.name).map(|v| v.state),
        Some(InstanceState::Active)
    );
    gw.put(&key(&ns, "DEFAULT", &b.name), &reg_value(&b.name, 0, "b"))
        .await;
    assert!(wait_active(&m, &b.name).await);
    // etcd drops idle simple tokens after the TTL (checked once a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    m.restart().await;
    for s in [&a, &b] {
        assert_eq!(
            m.instance(&s.name).map(|v| v.state),
            Some(InstanceState::Active),
            "{} after the relist with an expired token",
            s.name
        );
    }
    // Expired again, then the watch breaks: real etcd refuses the re-opened watch for
    // its token (created+canceled); the master re-authenticates and sees c.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.cut(false);
    assert!(
        poll(WAIT, || async {
            ring.snapshot()
                .iter()
                .any(|e| e.kind == "etcd_auth_refused")
        })
        .await,
        "real etcd never refused the watch: the expiry was not tested"
    );
    gw.put(&key(&ns, "DEFAULT", &c.name), &reg_value(&c.name, 0, "c"))
        .await;
    assert!(wait_active(&m, &c.name).await, "c not seen after re-auth");
    m.stop().await;
}
