//! Sidecars with some of the fakes' cores as peers, in the world: vLLM (mock-vllm's
//! core) and the master (mock-master's tables). These tests leave etcd out on purpose:
//! every etcd call is refused, as with nothing listening (`tests/fleet.rs` has it all).

use std::time::{Duration, Instant};

use mock_vllm::{Dialect, Health};
use sidecar::config::Config;
use sim::master_node::MasterNode;
use sim::node::Server;
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
            Box::new(VllmNode::new(vllm, Duration::ZERO).unwrap()),
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

/// A watch event for instance `addr`, its key and value written by the sidecar's own
/// encoders (`instance_key`, `InstanceMeta::to_json`).
fn watch_event(
    kind: mock_master::etcd::EventKind,
    addr: &str,
    incarnation: &str,
) -> mock_master::etcd::WatchEvent {
    use sidecar::instance::{instance_key, InstanceMeta, InstanceType};
    let key = instance_key("", InstanceType::Default, addr).into_bytes();
    let value = InstanceMeta::new(addr, InstanceType::Default, "vllm", incarnation, 1)
        .to_json()
        .into_bytes();
    let kv = mock_master::etcd::KeyValue {
        key,
        value,
        mod_revision: 2,
    };
    match kind {
        mock_master::etcd::EventKind::Put => mock_master::etcd::WatchEvent {
            kind,
            kv,
            prev_kv: None,
        },
        mock_master::etcd::EventKind::Delete => mock_master::etcd::WatchEvent {
            kind,
            kv: mock_master::etcd::KeyValue {
                value: Vec::new(),
                ..kv.clone()
            },
            prev_kv: Some(kv),
        },
    }
}

#[test]
fn a_delete_makes_the_master_probe_vllm_over_its_link() {
    use mock_master::etcd::EventKind::{Delete, Put};
    let mut world = World::new(3, EventLog::keeping());
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    for i in 0..3 {
        master.route(&format!("10.0.0.{i}:8000"), NodeId::Vllm(i));
        world.add_server(
            NodeId::Vllm(i),
            Box::new(VllmNode::with_dialect(
                Dialect::Compact,
                u64::from(i),
                Duration::ZERO,
            )),
        );
    }
    world.add_server(NodeId::Master, Box::new(master));
    // vllm/1 is down; the master's link to vllm/2 is a blackhole.
    world
        .server_as_mut::<VllmNode>(NodeId::Vllm(1))
        .unwrap()
        .set_health(Health::Down);
    world.set_link(NodeId::Master, NodeId::Vllm(2), LinkFault::Blackhole);
    world.at(Duration::from_secs(1), |w| {
        let m = w.server_as_mut::<MasterNode>(NodeId::Master).unwrap();
        for i in 0..3 {
            m.on_watch_event(
                Duration::from_secs(1),
                &watch_event(Put, &format!("10.0.0.{i}:8000"), "inc"),
            );
        }
    });
    world.at(Duration::from_secs(2), |w| {
        let m = w.server_as_mut::<MasterNode>(NodeId::Master).unwrap();
        for i in 0..3 {
            m.on_watch_event(
                Duration::from_secs(2),
                &watch_event(Delete, &format!("10.0.0.{i}:8000"), "inc"),
            );
        }
    });
    world.run_until(Duration::from_millis(2500));
    let state = |w: &World, i: u32| {
        let m = w.server_as::<MasterNode>(NodeId::Master).unwrap();
        m.instances()
            .view(&format!("10.0.0.{i}:8000"), w.now())
            .map(|v| v.state)
    };
    use mock_master::InstanceState::{LeaseLost, Suspect};
    assert_eq!(state(&world, 0), Some(LeaseLost), "{}", world.log().text());
    // Two attempts 100 ms apart, each answered 503 at once.
    assert_eq!(state(&world, 1), Some(Suspect));
    // Blackholed: still waiting for the second attempt's 1 s timeout at 2.5 s.
    assert_ne!(state(&world, 2), Some(Suspect));
    world.run_until(Duration::from_millis(4200));
    assert_eq!(state(&world, 2), Some(Suspect), "{}", world.log().text());
    let probes = world
        .log()
        .text()
        .lines()
        .filter(|l| l.contains("\"node\":\"master\",\"kind\":\"send\""))
        .filter(|l| l.contains("\"request\":\"health\""))
        .count();
    assert_eq!(probes, 1 + 2 + 2);
}

#[test]
fn steady_load_runs_in_mock_vllms_core_and_shows_on_its_page() {
    use sim::load::Load;
    let mut world = World::new(4, EventLog::keeping());
    let vllm = VllmNode::with_dialect(Dialect::Compact, 1, Duration::ZERO);
    let load = Load::new(
        NodeId::Vllm(0),
        &vllm,
        50.0,
        Duration::from_secs(10),
        "hello world",
        16,
    )
    .unwrap();
    world.add_server(NodeId::Vllm(0), Box::new(vllm));
    world.add_load(Duration::ZERO, load);
    world.run_until(Duration::from_secs(12));
    let v = world.server_as_mut::<VllmNode>(NodeId::Vllm(0)).unwrap();
    let (finished, failed) = v.completions(Duration::from_secs(12));
    assert_eq!(failed, 0);
    // A Poisson process at 50/s for 10 s: 500 expected; far outside is a broken load.
    assert!((400..=600).contains(&finished), "{finished}");
    let page = v.serve(
        Duration::from_secs(12),
        NodeId::Sidecar(0),
        &sim::Request::Metrics,
    );
    let Some(sim::Reply::Page { body, .. }) = page else {
        panic!("a page")
    };
    let page = body.into_text().unwrap();
    let count = page
        .lines()
        .find(|l| l.starts_with("vllm:time_to_first_token_seconds_count"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .expect("a TTFT count");
    assert_eq!(count as u64, finished, "{page}");
}

#[test]
fn a_killed_sidecar_goes_silent_and_a_restarted_one_starts_over() {
    let mut world = cluster(21, 1);
    world.at(Duration::from_secs(10), |w| w.kill_sidecar(0));
    world.at(Duration::from_secs(20), |w| {
        let config = Config::from_flags(["--register-addr", "10.0.0.0:8000"]).unwrap();
        w.restart_sidecar(0, &config);
    });
    world.run_until(Duration::from_secs(30));
    let log = world.log().text();
    let t = |l: &str| -> u64 {
        let rest = &l[l.find("\"t_us\":").unwrap() + 7..];
        rest[..rest.find(',').unwrap()].parse().unwrap()
    };
    let sends: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("\"node\":\"sidecar/0\",\"kind\":\"send\""))
        .map(t)
        .collect();
    assert!(sends.iter().any(|&s| s < 10_000_000));
    assert!(
        !sends.iter().any(|&s| (10_000_000..20_000_000).contains(&s)),
        "{sends:?}"
    );
    assert!(sends.iter().any(|&s| s >= 20_000_000), "{sends:?}");
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"kind\":\"start\""))
        .collect();
    assert_eq!(starts.len(), 2);
    assert_ne!(
        starts[0].split("seed").nth(1),
        starts[1].split("seed").nth(1)
    );
    assert_eq!(world.sidecars()[0].exited(), None);
}
