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
