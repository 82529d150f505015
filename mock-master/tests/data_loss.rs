//! etcd losing its data and starting its revisions over: the master notices the lower
//! revision, re-lists and watches from the fresh revision, so a registration made after
//! the loss is seen promptly, and each instance whose key vanished is lost only once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mock_kit::events::RingSink;
use mock_master::{InstanceState, MockMaster};

const WAIT: Duration = Duration::from_secs(10);

async fn wait_state(m: &MockMaster, name: &str, state: InstanceState) -> bool {
    poll(WAIT, || async {
        m.instance(name).map(|v| v.state) == Some(state)
    })
    .await
}

fn lost(ring: &RingSink, name: &str) -> usize {
    transitions(ring, name)
        .iter()
        .filter(|(_, to)| to == "LEASE_LOST")
        .count()
}

fn resets(ring: &RingSink) -> usize {
    ring.snapshot()
        .iter()
        .filter(|e| e.kind == "etcd_revision_reset")
        .count()
}

async fn registrations_after_a_reset_are_seen(users: Vec<(String, String)>) {
    let cfg = mock_etcd::Config {
        users: users.clone(),
        ..Default::default()
    };
    let etcd = mock_etcd::start(cfg, mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    let ns = unique_ns("loss");
    let (a, b) = (Stub::start("m").await, Stub::start("m").await);
    let (events, ring): (_, Arc<RingSink>) = ring_events();
    let mut cfg = fast_config(&etcd.url(), &ns);
    if let Some((u, p)) = users.first() {
        cfg.etcd_username = u.clone();
        cfg.etcd_password = p.clone();
    }
    let m = mock_master::start(cfg, events).await.unwrap();
    // With auth on, the test's writes carry their own token.
    let authed = !users.is_empty();
    let put = |k: String, v: String| {
        let etcd = &etcd;
        async move {
            let gw = Gw::new(&etcd.url());
            if !authed {
                gw.put(&k, &v).await;
            } else {
                put_as_root(&etcd.url(), &k, &v).await;
            }
        }
    };
    put(key(&ns, "DEFAULT", &a.name), reg_value(&a.name, 0, "a")).await;
    assert!(wait_state(&m, &a.name, InstanceState::Active).await);
    // Push the revision the master has seen well above where a fresh store will be
    // when b registers (as its own LOADMETRICS writes under the watched prefix do).
    for i in 0..20 {
        put(format!("{ns}XLLM:LOADMETRICS:filler{i}"), "{}".into()).await;
    }
    let old_rev = etcd.state()["revision"].as_i64().unwrap();
    assert!(old_rev > 20, "{old_rev}");

    etcd.lose_data(true);
    put(key(&ns, "DEFAULT", &b.name), reg_value(&b.name, 0, "b")).await;
    assert!(
        etcd.state()["revision"].as_i64().unwrap() < old_rev,
        "the store did not start over"
    );
    assert!(
        wait_state(&m, &b.name, InstanceState::Active).await,
        "b, registered after the loss, was never seen"
    );
    // a's key is gone: the delete path (probe ok -> LEASE_LOST), once.
    assert!(wait_state(&m, &a.name, InstanceState::LeaseLost).await);
    assert_eq!(resets(&ring), 1);
    // a's sidecar registers again; then more traffic must not lose it again.
    put(key(&ns, "DEFAULT", &a.name), reg_value(&a.name, 0, "a")).await;
    assert!(wait_state(&m, &a.name, InstanceState::Active).await);
    let c = Stub::start("m").await;
    put(key(&ns, "DEFAULT", &c.name), reg_value(&c.name, 0, "c")).await;
    assert!(wait_state(&m, &c.name, InstanceState::Active).await);
    assert_eq!(lost(&ring, &a.name), 1, "{:?}", transitions(&ring, &a.name));
    assert_eq!(lost(&ring, &b.name), 0, "{:?}", transitions(&ring, &b.name));
    assert_eq!(resets(&ring), 1);
    m.stop().await;
    etcd.stop().await;
}

async fn put_as_root(url: &str, k: &str, v: &str) {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let auth: serde_json::Value = http
        .post(format!("{url}/v3/auth/authenticate"))
        .json(&serde_json::json!({"name": "root", "password": "pw"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let r = http
        .post(format!("{url}/v3/kv/put"))
        .header("Authorization", auth["token"].as_str().unwrap())
        .json(&serde_json::json!({"key": B64.encode(k), "value": B64.encode(v)}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "put: {}", r.status());
}

#[tokio::test]
async fn registrations_after_a_revision_reset_are_seen_mock_etcd() {
    registrations_after_a_reset_are_seen(Vec::new()).await;
}

#[tokio::test]
async fn registrations_after_a_revision_reset_are_seen_with_auth_mock_etcd() {
    registrations_after_a_reset_are_seen(vec![("root".into(), "pw".into())]).await;
}
