//! The instance state machine of docs/contract.md §2, driven through etcd (a real etcd;
//! the same scenarios against `mock-etcd` at the bottom), plus watch resumption,
//! re-listing after compaction, LOADMETRICS publishing and restart.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mock_kit::events::RingSink;
use mock_master::{InstanceState, MockMaster};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);

/// A master whose LEASE_LOST and SUSPECT timeouts are far away (30 s): states stay
/// put while a test looks at them, however slow the machine.
async fn master(url: &str, ns: &str) -> (MockMaster, Arc<RingSink>) {
    master_with(url, ns, 30_000, 30_000).await
}

/// A master with short timeouts, for the tests of the timeouts themselves.
async fn master_with(
    url: &str,
    ns: &str,
    lease_lost_ms: u64,
    suspect_ms: u64,
) -> (MockMaster, Arc<RingSink>) {
    let (events, ring) = ring_events();
    let mut cfg = fast_config(url, ns);
    cfg.lease_lost_timeout = Duration::from_millis(lease_lost_ms);
    cfg.suspect_window = Duration::from_millis(suspect_ms);
    let m = mock_master::start(cfg, events).await.unwrap();
    (m, ring)
}

async fn wait_state(m: &MockMaster, name: &str, state: Option<InstanceState>) -> bool {
    poll(WAIT, || async {
        m.instance(name).map(|v| v.state) == state
    })
    .await
}

fn kinds(ring: &RingSink, kind: &str) -> Vec<Value> {
    ring.snapshot()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.detail)
        .collect()
}

const D: &str = "DEREGISTERED";
fn t(from: &str, to: &str) -> (String, String) {
    (from.to_string(), to.to_string())
}

// ---- scenarios, each taking the gateway URL ----

async fn put_register_refresh_replace(url: &str) {
    let gw = Gw::new(url);
    let ns_raw = unique_ns("put").trim_matches('/').to_string();
    let ns = format!("/{ns_raw}/");
    let stub = Stub::start("m").await;
    let name = stub.name.clone();
    // The namespace flag is normalized: "x" means keys under "/x/".
    let (m, ring) = master(url, &ns_raw).await;
    assert_eq!(m.namespace(), ns);
    gw.put(&key(&ns, "MIX", &name), &reg_value(&name, 3, "inc-1"))
        .await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    let v = m.instance(&name).unwrap();
    assert_eq!(
        (
            v.instance_type,
            v.backend_type.as_str(),
            v.incarnation.as_str()
        ),
        (3, "vllm", "inc-1")
    );
    assert_eq!(v.register_ts_ms, 1764400000000);

    // Same incarnation again: a refresh, no transition.
    gw.put(&key(&ns, "MIX", &name), &reg_value(&name, 3, "inc-1"))
        .await;
    // New incarnation: the old one is deregistered, the new one registered.
    gw.put(&key(&ns, "MIX", &name), &reg_value(&name, 3, "inc-2"))
        .await;
    assert!(
        poll(WAIT, || async {
            m.instance(&name).is_some_and(|v| v.incarnation == "inc-2")
        })
        .await
    );
    assert_eq!(
        transitions(&ring, &name),
        vec![t(D, "ACTIVE"), t("ACTIVE", D), t(D, "ACTIVE")]
    );
    assert_eq!(
        beat(&m.url(), None, hb(&name, "inc-1", 0, 0.0)).await.0,
        409
    );
    assert_eq!(
        beat(&m.url(), None, hb(&name, "inc-2", 0, 0.0)).await.0,
        200
    );
    // The replaced incarnation's heartbeat counts do not carry over.
    assert_eq!(m.instance(&name).unwrap().heartbeats.get(&200), Some(&1));
    assert_eq!(stub.health_calls.load(Ordering::SeqCst), 0);
    m.stop().await;
}

async fn bad_values_and_other_keys_are_skipped(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("bad");
    let (m, ring) = master(url, &ns).await;
    gw.put(&key(&ns, "DEFAULT", "h:1"), "not json").await;
    gw.put(&key(&ns, "DEFAULT", "h:2"), r#"{"name":"h:2","type":0}"#)
        .await;
    gw.put(&format!("{ns}XLLM:OTHER:h:3"), &reg_value("h:3", 0, "i"))
        .await;
    gw.put(
        &format!("{ns}XLLM:LOADMETRICS:h:4"),
        r#"{"waiting_requests_num":1}"#,
    )
    .await;
    gw.put(&key(&ns, "DEFAULT", "h:5"), &reg_value("h:5", 0, "i"))
        .await;
    assert!(wait_state(&m, "h:5", Some(InstanceState::Active)).await);
    assert_eq!(m.instances().len(), 1);
    let bad: Vec<Value> = kinds(&ring, "bad_registration");
    assert_eq!(bad.len(), 2, "{bad:?}");
    m.stop().await;
}

async fn stale_delete_is_ignored(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("stale");
    let stub = Stub::start("m").await;
    let name = stub.name.clone();
    let (m, ring) = master(url, &ns).await;
    gw.put(&key(&ns, "DEFAULT", &name), &reg_value(&name, 0, "inc-1"))
        .await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    // The same instance re-registers under another prefix with a new incarnation; then
    // the old key goes: its DELETE names inc-1, which is no longer tracked.
    gw.put(&key(&ns, "PREFILL", &name), &reg_value(&name, 1, "inc-2"))
        .await;
    gw.delete(&key(&ns, "DEFAULT", &name)).await;
    assert!(poll(WAIT, || async { !kinds(&ring, "stale_delete").is_empty() }).await);
    let v = m.instance(&name).unwrap();
    assert_eq!(
        (v.state, v.incarnation.as_str(), v.instance_type),
        (InstanceState::Active, "inc-2", 1)
    );
    assert_eq!(
        stub.health_calls.load(Ordering::SeqCst),
        0,
        "a stale delete was probed"
    );
    assert_eq!(
        kinds(&ring, "stale_delete")[0],
        json!({"name": name, "deleted": "inc-1", "tracked": "inc-2"})
    );
    m.stop().await;
}

async fn delete_with_healthy_probe_lease_lost_and_back(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("ll");
    let stub = Stub::start("m").await;
    let name = stub.name.clone();
    let (m, ring) = master_with(url, &ns, 1000, 3000).await;
    let k = key(&ns, "DEFAULT", &name);
    gw.put(&k, &reg_value(&name, 0, "inc-1")).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    gw.delete(&k).await;
    assert!(wait_state(&m, &name, Some(InstanceState::LeaseLost)).await);
    assert_eq!(
        stub.health_calls.load(Ordering::SeqCst),
        1,
        "one good attempt is enough"
    );

    // Heartbeats every 100 ms keep it LEASE_LOST past the lease-lost timeout (1 s).
    for _ in 0..15 {
        assert_eq!(
            beat(&m.url(), None, hb(&name, "inc-1", 1, 0.1)).await.0,
            200
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(m.instance(&name).unwrap().state, InstanceState::LeaseLost);
    }
    // Silence: SUSPECT; a heartbeat: LEASE_LOST again; the key back: ACTIVE.
    assert!(wait_state(&m, &name, Some(InstanceState::Suspect)).await);
    assert_eq!(
        beat(&m.url(), None, hb(&name, "inc-1", 1, 0.1)).await.0,
        200
    );
    assert_eq!(m.instance(&name).unwrap().state, InstanceState::LeaseLost);
    gw.put(&k, &reg_value(&name, 0, "inc-1")).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    assert_eq!(
        transitions(&ring, &name),
        vec![
            t(D, "ACTIVE"),
            t("ACTIVE", "LEASE_LOST"),
            t("LEASE_LOST", "SUSPECT"),
            t("SUSPECT", "LEASE_LOST"),
            t("LEASE_LOST", "ACTIVE"),
        ]
    );
    m.stop().await;
}

async fn delete_with_failed_probe_suspect_then_deregistered(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("sus");
    let stub = Stub::start("m").await;
    stub.set_health(503);
    let name = stub.name.clone();
    let (m, ring) = master_with(url, &ns, 400, 800).await;
    let k = key(&ns, "DEFAULT", &name);
    gw.put(&k, &reg_value(&name, 0, "inc-1")).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    // A heartbeat, so that a LOADMETRICS entry exists to be deleted later.
    assert_eq!(
        beat(&m.url(), None, hb(&name, "inc-1", 3, 0.5)).await.0,
        200
    );
    let lm = format!("{ns}XLLM:LOADMETRICS:{name}");
    assert!(poll(WAIT, || async { gw.get(&lm).await.is_some() }).await);

    gw.delete(&k).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Suspect)).await);
    assert_eq!(
        stub.health_calls.load(Ordering::SeqCst),
        2,
        "two attempts, both failed"
    );
    // Not routable while SUSPECT.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/completions", m.url()))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    // The suspect window (800 ms) runs out: deregistered, heartbeats 409, entry deleted.
    assert!(wait_state(&m, &name, None).await);
    assert_eq!(
        beat(&m.url(), None, hb(&name, "inc-1", 0, 0.0)).await.0,
        409
    );
    assert!(poll(WAIT, || async { gw.get(&lm).await.is_none() }).await);
    assert_eq!(
        transitions(&ring, &name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "SUSPECT"), t("SUSPECT", D)]
    );
    m.stop().await;
}

async fn probe_of_a_dead_address_fails(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("dead");
    let stub = Stub::start("m").await;
    let name = stub.name.clone();
    stub.stop(); // nothing answers there any more
    let (m, _ring) = master(url, &ns).await;
    let k = key(&ns, "DECODE", &name);
    gw.put(&k, &reg_value(&name, 2, "inc-1")).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    gw.delete(&k).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Suspect)).await);
    m.stop().await;
}

async fn lease_revoke_is_a_delete(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("lease");
    let stub = Stub::start("m").await;
    let name = stub.name.clone();
    let (m, _ring) = master(url, &ns).await;
    let lease = gw.grant(30).await;
    gw.put_leased(
        &key(&ns, "DEFAULT", &name),
        &reg_value(&name, 0, "inc-1"),
        lease,
    )
    .await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    gw.revoke(lease).await;
    assert!(wait_state(&m, &name, Some(InstanceState::LeaseLost)).await);
    m.stop().await;
}

async fn paused_watch_resumes_without_loss_or_repeats(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("pause");
    let (a, b, c) = (
        Stub::start("m").await,
        Stub::start("m").await,
        Stub::start("m").await,
    );
    let (m, ring) = master(url, &ns).await;
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a-1"))
        .await;
    assert!(wait_state(&m, &a.name, Some(InstanceState::Active)).await);

    m.pause_watch();
    // Let the watcher drop its stream before etcd moves on.
    assert!(poll(WAIT, || async { m.watch_paused() }).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.put(&key(&ns, "DEFAULT", &b.name), &reg_value(&b.name, 0, "b-1"))
        .await;
    gw.put(&key(&ns, "DEFAULT", &c.name), &reg_value(&c.name, 0, "c-1"))
        .await;
    gw.delete(&key(&ns, "DEFAULT", &b.name)).await;
    gw.put(&key(&ns, "DEFAULT", &a.name), &reg_value(&a.name, 0, "a-2"))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        m.instance(&c.name).is_none(),
        "events arrived while the watch was paused"
    );
    assert_eq!(m.instance(&a.name).unwrap().incarnation, "a-1");

    m.resume_watch();
    assert!(
        poll(WAIT, || async {
            m.instance(&a.name).is_some_and(|v| v.incarnation == "a-2")
        })
        .await
    );
    assert!(wait_state(&m, &c.name, Some(InstanceState::Active)).await);
    assert!(wait_state(&m, &b.name, Some(InstanceState::LeaseLost)).await);
    // Re-open twice more from the last revision: nothing is applied again.
    for _ in 0..2 {
        m.pause_watch();
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.resume_watch();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.put(&key(&ns, "DEFAULT", "late:1"), &reg_value("late:1", 0, "l"))
        .await;
    assert!(wait_state(&m, "late:1", Some(InstanceState::Active)).await);
    assert_eq!(
        transitions(&ring, &a.name),
        vec![t(D, "ACTIVE"), t("ACTIVE", D), t(D, "ACTIVE")]
    );
    assert_eq!(transitions(&ring, &c.name), vec![t(D, "ACTIVE")]);
    assert_eq!(
        transitions(&ring, &b.name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "LEASE_LOST")]
    );
    assert!(kinds(&ring, "watch_reconnect").len() >= 3);
    m.stop().await;
}

async fn loadmetrics_are_published_and_not_taken_for_instances(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("lm");
    let (m, ring) = master(url, &ns).await;
    let name = "10.0.0.1:8000";
    gw.put(&key(&ns, "DEFAULT", name), &reg_value(name, 0, "i"))
        .await;
    assert!(wait_state(&m, name, Some(InstanceState::Active)).await);
    let lm = format!("{ns}XLLM:LOADMETRICS:{name}");
    assert_eq!(gw.get(&lm).await, None, "published before any heartbeat");
    assert_eq!(beat(&m.url(), None, hb(name, "i", 5, 0.5)).await.0, 200);
    assert!(poll(WAIT, || async { gw.get(&lm).await.is_some() }).await);
    let v: Value = serde_json::from_str(&gw.get(&lm).await.unwrap()).unwrap();
    assert_eq!(
        v,
        json!({"waiting_requests_num": 5, "gpu_cache_usage_perc": 0.5})
    );
    assert_eq!(beat(&m.url(), None, hb(name, "i", 6, 0.25)).await.0, 200);
    assert!(
        poll(WAIT, || async {
            gw.get(&lm)
                .await
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                == Some(json!({"waiting_requests_num": 6, "gpu_cache_usage_perc": 0.25}))
        })
        .await
    );
    // The watcher saw its own LOADMETRICS puts and ignored them.
    assert_eq!(m.instances().len(), 1);
    assert_eq!(transitions(&ring, name), vec![t(D, "ACTIVE")]);
    assert!(kinds(&ring, "bad_registration").is_empty());
    m.stop().await;
}

/// `"NaN"` / `"Infinity"` usage: 200 (protobuf's JSON accepts them), shown by name in
/// the views, and never published: the last finite LOADMETRICS value stays.
async fn non_finite_usage_is_accepted_and_never_published_as_null(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("nan");
    let (m, ring) = master(url, &ns).await;
    let name = "10.0.0.2:8000";
    gw.put(&key(&ns, "DEFAULT", name), &reg_value(name, 0, "i"))
        .await;
    assert!(wait_state(&m, name, Some(InstanceState::Active)).await);
    let lm = format!("{ns}XLLM:LOADMETRICS:{name}");
    let first = json!({"waiting_requests_num": 5, "gpu_cache_usage_perc": 0.5});
    assert_eq!(beat(&m.url(), None, hb(name, "i", 5, 0.5)).await.0, 200);
    assert!(
        poll(WAIT, || async {
            gw.get(&lm)
                .await
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                == Some(first.clone())
        })
        .await
    );
    for (usage, waiting) in [("NaN", 7), ("Infinity", 8), ("-Infinity", 9)] {
        let body = json!({"name": name, "incarnation_id": "i",
            "load_metrics": {"waiting_requests_num": waiting, "gpu_cache_usage_perc": usage}});
        assert_eq!(beat(&m.url(), None, body).await, (200, json!({"ok": true})));
        let view: Value = reqwest::get(format!("{}/v1/internal/instances", m.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            view["instances"][0]["load"],
            json!({"waiting_requests_num": waiting, "gpu_cache_usage_perc": usage})
        );
        assert!(
            poll(WAIT, || async {
                kinds(&ring, "loadmetrics_publish")
                    .iter()
                    .filter(|d| d["skipped"] == json!([name]))
                    .count()
                    >= usize::try_from(waiting - 6).unwrap()
            })
            .await,
            "no round skipped {usage}"
        );
        assert_eq!(
            gw.get(&lm)
                .await
                .map(|s| serde_json::from_str::<Value>(&s).unwrap()),
            Some(first.clone()),
            "a non-finite usage overwrote LOADMETRICS"
        );
    }
    // A finite usage is published again.
    assert_eq!(beat(&m.url(), None, hb(name, "i", 2, 0.25)).await.0, 200);
    let last = json!({"waiting_requests_num": 2, "gpu_cache_usage_perc": 0.25});
    assert!(
        poll(WAIT, || async {
            gw.get(&lm)
                .await
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                == Some(last.clone())
        })
        .await
    );
    let events = serde_json::to_string(&kinds(&ring, "heartbeat")).unwrap();
    assert!(
        events.contains(r#""gpu_cache_usage_perc":"NaN""#),
        "{events}"
    );
    assert!(!events.contains("null"), "{events}");
    m.stop().await;
}

async fn restart_relearns_from_a_fresh_range(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("rs");
    let (m, ring) = master(url, &ns).await;
    let name = "10.0.0.2:8000";
    gw.put(&key(&ns, "DEFAULT", name), &reg_value(name, 0, "i-1"))
        .await;
    assert!(wait_state(&m, name, Some(InstanceState::Active)).await);
    assert_eq!(beat(&m.url(), None, hb(name, "i-1", 0, 0.0)).await.0, 200);

    // Restart with a range: the key is still there, so the instance is back at once.
    m.restart().await;
    let v = m.instance(name).expect("re-learned from the range");
    assert_eq!(
        (v.state, v.incarnation.as_str(), v.ms_since_heartbeat),
        (InstanceState::Active, "i-1", None)
    );
    assert_eq!(beat(&m.url(), None, hb(name, "i-1", 0, 0.0)).await.0, 200);

    // Restart over the control API, without a range: 409 until the instance registers
    // again (what a sidecar does on a 409).
    let r = reqwest::Client::new()
        .post(format!("{}/_mock/restart", m.url()))
        .json(&json!({"relist": false}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert!(m.instances().is_empty());
    assert_eq!(beat(&m.url(), None, hb(name, "i-1", 0, 0.0)).await.0, 409);
    gw.put(&key(&ns, "DEFAULT", name), &reg_value(name, 0, "i-2"))
        .await;
    assert!(wait_state(&m, name, Some(InstanceState::Active)).await);
    assert_eq!(beat(&m.url(), None, hb(name, "i-2", 0, 0.0)).await.0, 200);
    assert_eq!(
        transitions(&ring, name),
        vec![
            t(D, "ACTIVE"),
            t("ACTIVE", D),
            t(D, "ACTIVE"),
            t("ACTIVE", D),
            t(D, "ACTIVE")
        ]
    );
    m.stop().await;
}

async fn instances_endpoint_and_state(url: &str) {
    let gw = Gw::new(url);
    let ns = unique_ns("view");
    let (m, _ring) = master(url, &ns).await;
    gw.put(&key(&ns, "PREFILL", "p:1"), &reg_value("p:1", 1, "i"))
        .await;
    assert!(wait_state(&m, "p:1", Some(InstanceState::Active)).await);
    assert_eq!(beat(&m.url(), None, hb("p:1", "i", 2, 0.75)).await.0, 200);
    let v: Value = reqwest::get(format!("{}/v1/internal/instances", m.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let i = &v["instances"][0];
    assert_eq!(i["name"], "p:1");
    assert_eq!(i["type"], 1);
    assert_eq!(i["backend_type"], "vllm");
    assert_eq!(i["incarnation"], "i");
    assert_eq!(i["state"], "ACTIVE");
    assert_eq!(
        i["load"],
        json!({"waiting_requests_num": 2, "gpu_cache_usage_perc": 0.75})
    );
    assert_eq!(
        i["latency"],
        json!({"recent_max_ttft": 12, "recent_max_tbt": 3})
    );
    assert_eq!(i["heartbeats"], json!({"200": 1}));
    assert!(i["ms_since_heartbeat"].as_u64().is_some());
    let text = reqwest::get(format!("{}/metrics", m.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"mock_master_instances{state="ACTIVE"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mock_master_state_transitions_total{from="DEREGISTERED",to="ACTIVE"} 1"#)
    );
    m.stop().await;
}

// ---- against a real etcd ----

macro_rules! real {
    ($($name:ident),* $(,)?) => {
        mod real_etcd {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(url) = shared_etcd().await else { return };
                    super::$name(url).await;
                }
            )*
        }
    };
}

real!(
    put_register_refresh_replace,
    bad_values_and_other_keys_are_skipped,
    stale_delete_is_ignored,
    delete_with_healthy_probe_lease_lost_and_back,
    delete_with_failed_probe_suspect_then_deregistered,
    probe_of_a_dead_address_fails,
    lease_revoke_is_a_delete,
    paused_watch_resumes_without_loss_or_repeats,
    loadmetrics_are_published_and_not_taken_for_instances,
    non_finite_usage_is_accepted_and_never_published_as_null,
    restart_relearns_from_a_fresh_range,
    instances_endpoint_and_state,
);

/// A compacted start revision makes the watcher re-list and reconcile (own etcd, since
/// compaction affects every watcher).
#[tokio::test]
async fn compaction_forces_a_relist_real_etcd() {
    let Some(etcd) = start_etcd().await else {
        return;
    };
    let gw = Gw::new(&etcd.url);
    let ns = unique_ns("compact");
    let gone = Stub::start("m").await;
    gone.set_health(503);
    let (m, ring) = master(&etcd.url, &ns).await;
    gw.put(
        &key(&ns, "DEFAULT", &gone.name),
        &reg_value(&gone.name, 0, "g"),
    )
    .await;
    assert!(wait_state(&m, &gone.name, Some(InstanceState::Active)).await);
    m.pause_watch();
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.delete(&key(&ns, "DEFAULT", &gone.name)).await;
    gw.put(&key(&ns, "DEFAULT", "new:1"), &reg_value("new:1", 0, "n"))
        .await;
    for i in 0..5 {
        gw.put(&format!("{ns}unrelated/{i}"), "x").await;
    }
    gw.compact(gw.revision().await).await;
    m.resume_watch();
    assert!(wait_state(&m, "new:1", Some(InstanceState::Active)).await);
    assert!(wait_state(&m, &gone.name, Some(InstanceState::Suspect)).await);
    assert_eq!(kinds(&ring, "watch_compacted").len(), 1);
    // And the watch goes on from the listing.
    gw.put(
        &key(&ns, "DEFAULT", "after:1"),
        &reg_value("after:1", 0, "a"),
    )
    .await;
    assert!(wait_state(&m, "after:1", Some(InstanceState::Active)).await);
    assert_eq!(transitions(&ring, "new:1"), vec![t(D, "ACTIVE")]);
    m.stop().await;
}

/// The connection to etcd breaks (and stays refused for a while): the watch re-opens
/// from the revision after the last event it applied and catches up, exactly once.
#[tokio::test]
async fn watch_survives_a_broken_connection_real_etcd() {
    let Some(url) = shared_etcd().await else {
        return;
    };
    let gw = Gw::new(url);
    let proxy = CutProxy::start(url).await;
    let ns = unique_ns("broken");
    let x = Stub::start("m").await;
    let (m, ring) = master(&proxy.url, &ns).await;
    gw.put(&key(&ns, "DEFAULT", &x.name), &reg_value(&x.name, 0, "x"))
        .await;
    assert!(wait_state(&m, &x.name, Some(InstanceState::Active)).await);
    proxy.cut(true);
    gw.put(&key(&ns, "DEFAULT", "y:1"), &reg_value("y:1", 0, "y"))
        .await;
    gw.delete(&key(&ns, "DEFAULT", &x.name)).await;
    gw.put(&key(&ns, "DEFAULT", "z:1"), &reg_value("z:1", 0, "z"))
        .await;
    // Refused for a while: the watcher keeps retrying with backoff.
    assert!(
        poll(WAIT, || async {
            kinds(&ring, "watch_reconnect").len() >= 2
        })
        .await
    );
    assert!(m.instance("y:1").is_none());
    proxy.unblock();
    assert!(wait_state(&m, "z:1", Some(InstanceState::Active)).await);
    assert!(wait_state(&m, "y:1", Some(InstanceState::Active)).await);
    assert!(wait_state(&m, &x.name, Some(InstanceState::LeaseLost)).await);
    assert_eq!(
        transitions(&ring, &x.name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "LEASE_LOST")]
    );
    assert_eq!(transitions(&ring, "y:1"), vec![t(D, "ACTIVE")]);
    // Cut once more without blocking: an immediate re-open, nothing repeated.
    proxy.cut(false);
    gw.put(&key(&ns, "DEFAULT", "w:1"), &reg_value("w:1", 0, "w"))
        .await;
    assert!(wait_state(&m, "w:1", Some(InstanceState::Active)).await);
    // A replayed PUT of x would have made it ACTIVE again.
    assert_eq!(m.instance(&x.name).unwrap().state, InstanceState::LeaseLost);
    assert_eq!(
        transitions(&ring, &x.name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "LEASE_LOST")]
    );
    assert_eq!(transitions(&ring, "z:1"), vec![t(D, "ACTIVE")]);
    m.stop().await;
}

// ---- the same scenarios against mock-etcd ----

async fn mock_etcd() -> mock_etcd::MockEtcd {
    mock_etcd::start(mock_etcd::Config::default(), mock_kit::Events::none("etcd"))
        .await
        .unwrap()
}

macro_rules! mocked {
    ($($name:ident),* $(,)?) => {
        mod mock_etcd_gateway {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let etcd = mock_etcd().await;
                    super::$name(&etcd.url()).await;
                    etcd.stop().await;
                }
            )*
        }
    };
}

mocked!(
    put_register_refresh_replace,
    bad_values_and_other_keys_are_skipped,
    stale_delete_is_ignored,
    delete_with_healthy_probe_lease_lost_and_back,
    delete_with_failed_probe_suspect_then_deregistered,
    probe_of_a_dead_address_fails,
    lease_revoke_is_a_delete,
    paused_watch_resumes_without_loss_or_repeats,
    loadmetrics_are_published_and_not_taken_for_instances,
    non_finite_usage_is_accepted_and_never_published_as_null,
    restart_relearns_from_a_fresh_range,
    instances_endpoint_and_state,
);

/// mock-etcd closes every watch stream: the master re-opens from the next revision and
/// neither loses nor repeats an event.
#[tokio::test]
async fn closed_watches_are_resumed_mock_etcd() {
    let etcd = mock_etcd().await;
    let gw = Gw::new(&etcd.url());
    let ns = unique_ns("close");
    let x = Stub::start("m").await;
    let (m, ring) = master(&etcd.url(), &ns).await;
    gw.put(&key(&ns, "DEFAULT", &x.name), &reg_value(&x.name, 0, "x"))
        .await;
    assert!(wait_state(&m, &x.name, Some(InstanceState::Active)).await);
    for round in 0..3 {
        etcd.close_watches();
        let n = format!("n{round}:1");
        gw.put(&key(&ns, "DEFAULT", &n), &reg_value(&n, 0, "n"))
            .await;
        assert!(wait_state(&m, &n, Some(InstanceState::Active)).await);
    }
    gw.delete(&key(&ns, "DEFAULT", &x.name)).await;
    assert!(wait_state(&m, &x.name, Some(InstanceState::LeaseLost)).await);
    etcd.close_watches();
    gw.put(&key(&ns, "DEFAULT", "last:1"), &reg_value("last:1", 0, "l"))
        .await;
    assert!(wait_state(&m, "last:1", Some(InstanceState::Active)).await);
    assert_eq!(m.instance(&x.name).unwrap().state, InstanceState::LeaseLost);
    assert_eq!(
        transitions(&ring, &x.name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "LEASE_LOST")]
    );
    for round in 0..3 {
        assert_eq!(
            transitions(&ring, &format!("n{round}:1")),
            vec![t(D, "ACTIVE")]
        );
    }
    assert!(kinds(&ring, "watch_reconnect").len() >= 4);
    m.stop().await;
    etcd.stop().await;
}

#[tokio::test]
async fn compaction_forces_a_relist_mock_etcd() {
    let etcd = mock_etcd().await;
    let gw = Gw::new(&etcd.url());
    let ns = unique_ns("compact");
    let gone = Stub::start("m").await;
    gone.set_health(503);
    let (m, ring) = master(&etcd.url(), &ns).await;
    gw.put(
        &key(&ns, "DEFAULT", &gone.name),
        &reg_value(&gone.name, 0, "g"),
    )
    .await;
    assert!(wait_state(&m, &gone.name, Some(InstanceState::Active)).await);
    m.pause_watch();
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.delete(&key(&ns, "DEFAULT", &gone.name)).await;
    gw.put(&key(&ns, "DEFAULT", "new:1"), &reg_value("new:1", 0, "n"))
        .await;
    gw.compact(gw.revision().await).await;
    m.resume_watch();
    assert!(wait_state(&m, "new:1", Some(InstanceState::Active)).await);
    assert!(wait_state(&m, &gone.name, Some(InstanceState::Suspect)).await);
    assert_eq!(kinds(&ring, "watch_compacted").len(), 1);
    m.stop().await;
    etcd.stop().await;
}

/// The core decides the probe's attempts and the shell carries them out: a first
/// attempt answered 503 is followed, `probe_interval` later, by a second one, and its
/// 200 makes the instance LEASE_LOST (one `probe` event, healthy).
#[tokio::test]
async fn second_probe_attempt_decides_mock_etcd() {
    let etcd = mock_etcd().await;
    let gw = Gw::new(&etcd.url());
    let ns = unique_ns("retry");
    let stub = Stub::start("m").await;
    stub.set_health(503);
    let name = stub.name.clone();
    let (events, ring) = ring_events();
    let mut cfg = fast_config(&etcd.url(), &ns);
    // Long enough to turn the stub healthy between the two attempts.
    cfg.probe_interval = Duration::from_millis(1500);
    cfg.lease_lost_timeout = Duration::from_secs(30);
    cfg.suspect_window = Duration::from_secs(30);
    let m = mock_master::start(cfg, events).await.unwrap();
    let k = key(&ns, "DEFAULT", &name);
    gw.put(&k, &reg_value(&name, 0, "inc-1")).await;
    assert!(wait_state(&m, &name, Some(InstanceState::Active)).await);
    gw.delete(&k).await;
    let first = poll(WAIT, || async {
        stub.health_calls.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(first, "first attempt");
    stub.set_health(200);
    assert!(wait_state(&m, &name, Some(InstanceState::LeaseLost)).await);
    assert_eq!(stub.health_calls.load(Ordering::SeqCst), 2);
    let probes = kinds(&ring, "probe");
    assert_eq!(probes.len(), 1);
    assert_eq!(
        probes.first().and_then(|p| p.get("healthy")),
        Some(&json!(true))
    );
    assert_eq!(
        transitions(&ring, &name),
        vec![t(D, "ACTIVE"), t("ACTIVE", "LEASE_LOST")]
    );
    m.stop().await;
    etcd.stop().await;
}
