//! Real etcd on loopback: one member serves the gateway, a 3-member cluster survives a
//! killed leader. Skipped (with the reason) when the etcd binary is absent.

use std::time::Duration;

use mock_kit::Events;
use scenarios::etcd_view::Gateway;
use scenarios::real_etcd::{unavailable, RealEtcd};

#[tokio::test]
async fn three_members_survive_a_killed_leader() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut etcd = RealEtcd::start(3, Events::none("etcd")).await.unwrap();
    let leader = etcd.leader().await.expect("a leader");
    let killed = etcd.kill("leader").await.unwrap();
    assert_eq!(killed, leader);
    // A new leader among the survivors, polled with a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let new_leader = loop {
        if let Some(l) = etcd.leader().await {
            break l;
        }
        assert!(tokio::time::Instant::now() < deadline, "no new leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(new_leader, killed);
    let survivors: Vec<String> = etcd
        .client_addrs()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != killed)
        .map(|(_, a)| format!("http://{a}"))
        .collect();
    let kvs = Gateway::new(survivors).range_prefix("XLLM:").await.unwrap();
    assert!(kvs.is_empty());
    etcd.restart(&killed.to_string()).await.unwrap();
}

/// A real 3-member etcd takes longer to start than this scenario's registration grace.
/// The scenario's clock starts when the cluster is ready, so the start-up eats no grace
/// and no step's offset (the step at 1 s runs at 1 s, not at once after a 2 s set-up),
/// a correct sidecar passes, and the report says how long the set-up took and when the
/// instance first registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_etcd_start_eats_no_grace() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let text = r#"
name = "slow-etcd-start"
description = "a 3-member etcd starts slower than the registration grace"
[topology]
etcd = "cluster3"
[invariants]
registered_grace = "1s"
[[step]]
await = { all_active = true }
within = "10s"
[[step]]
at = "1s"
await = { registered = "i0" }
within = "1s"
"#;
    let sc = scenarios::spec::Scenario::parse("slow-etcd-start.toml", text).expect("parses");
    let opts = scenarios::run::RunOptions {
        sidecar_bin: Some(scenarios::sidecar::locate_binary().expect("vllm-sidecar binary")),
        ..Default::default()
    };
    let o = scenarios::run::run_scenario(&sc, "slow-etcd-start.toml", &opts, None).await;
    let failures: Vec<String> = o
        .failures()
        .map(|v| format!("{}: {}", v.name, v.detail))
        .collect();
    if o.setup_ms <= 1000 {
        eprintln!(
            "skipped: the cluster started in {} ms, within the grace: nothing to show",
            o.setup_ms
        );
        return;
    }
    assert_eq!(
        o.status,
        scenarios::report::Status::Passed,
        "set-up {} ms: {failures:?}",
        o.setup_ms
    );
    let first = o.startups.first().and_then(|s| s.registered_ms);
    assert!(
        first.is_some_and(|t| t < 1000),
        "first registered at {first:?} ms after t = 0"
    );
}
