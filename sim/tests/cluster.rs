//! Sidecars with the fakes' cores as peers, in the world: vLLM (mock-vllm's engines and
//! pages) and the master (mock-master's tables). etcd has no clock-free core yet, so its
//! node is absent and every etcd call is refused, as with nothing listening.

use std::time::{Duration, Instant};

use mock_vllm::{Dialect, Health};
use sidecar::config::Config;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{EventLog, LinkFault, NodeId, World};

fn cluster(seed: u64, n: u32) -> World {
    let mut world = World::new(seed, EventLog::keeping());
    world.add_server(
        NodeId::Master,
        Box::new(MasterNode::new(
            mock_master::Config::default(),
            Duration::ZERO,
        )),
    );
    for i in 0..n {
        let vllm = mock_vllm::Config {
            dialect: Dialect::Compact,
            startup_delay: Duration::from_secs(5),
            ..mock_vllm::Config::default()
        };
        world.add_server(
            NodeId::Vllm(i),
            Box::new(VllmNode::new(vllm, Duration::ZERO)),
        );
        let addr = format!("10.0.0.{i}:8000");
        world.add_sidecar(&Config::from_flags(["--register-addr", addr.as_str()]).unwrap());
        let jitter = LinkFault::Latency {
            ms: 1,
            jitter_ms: 9,
        };
        world.set_link(NodeId::Sidecar(i), NodeId::Vllm(i), jitter);
    }
    world
}

fn notes<'a>(log: &'a str, node: &str, what: &str) -> Vec<&'a str> {
    let node = format!("\"node\":\"{node}\",\"kind\":\"note\"");
    log.lines()
        .filter(|l| l.contains(&node) && l.contains(what))
        .collect()
}

#[test]
fn startup_delay_then_health_then_registration_attempts_refused() {
    let mut world = cluster(11, 1);
    world.run_until(Duration::from_secs(30));
    let log = world.log().text();
    // mock-vllm answers 503 during its 5 s startup delay: the core waits with backoff.
    let waiting = notes(&log, "sidecar/0", "WaitingForHealth");
    assert!(waiting.len() >= 2, "{log}");
    assert!(waiting.iter().all(|l| l.contains("503")), "{waiting:?}");
    // Then healthy: the served-model lookup and a grant, refused (no etcd node).
    assert!(log.contains("\"kind\":\"log_served_model\""), "{log}");
    let failed = notes(&log, "sidecar/0", "RegistrationFailed");
    assert!(
        !failed.is_empty() && failed[0].contains("Connection refused"),
        "{failed:?}"
    );
}

#[test]
fn a_vllm_that_goes_down_is_seen_failing_and_recovering() {
    let mut world = cluster(12, 2);
    world.at(Duration::from_secs(20), |w| {
        w.note("vllm/1", "health", serde_json::json!("down"));
        if let Some(v) = w.server_as_mut::<VllmNode>(NodeId::Vllm(1)) {
            v.set_health(Health::Down);
        }
    });
    world.at(Duration::from_secs(30), |w| {
        if let Some(v) = w.server_as_mut::<VllmNode>(NodeId::Vllm(1)) {
            v.set_health(Health::Up);
        }
    });
    world.run_until(Duration::from_secs(40));
    let log = world.log().text();
    let failed = notes(&log, "sidecar/1", "HealthFailed");
    assert!(failed.len() >= 3, "{log}");
    assert!(
        notes(&log, "sidecar/1", "HealthRecovered").len() == 1,
        "{log}"
    );
    // The other instance never noticed.
    assert!(notes(&log, "sidecar/0", "HealthFailed").is_empty());
}

#[test]
fn the_cluster_replays_byte_for_byte_and_an_hour_is_fast() {
    let started = Instant::now();
    let mut a = cluster(5, 3);
    a.run_until(Duration::from_secs(3600));
    let took = started.elapsed();
    let mut b = cluster(5, 3);
    b.run_until(Duration::from_secs(3600));
    assert_eq!(a.log().bytes(), b.log().bytes());
    assert!(a.log().lines() > 1000);
    let mut c = cluster(6, 3);
    c.run_until(Duration::from_secs(3600));
    assert_ne!(a.log().digest(), c.log().digest());
    // Not an assert on speed: printed for the record.
    eprintln!(
        "3 instances x 1 simulated hour: {took:?} wall, {} events",
        a.events()
    );
}
