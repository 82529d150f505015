//! The whole cluster in the world, every node a fake's own core or the sidecar's:
//! mock-etcd, mock-master (watching etcd), mock-vllm under load, sidecars; links
//! between all of them.

use std::time::Duration;

use mock_master::InstanceState;
use mock_vllm::Dialect;
use sidecar::config::Config;
use sim::etcd_node::EtcdNode;
use sim::load::Load;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{EventLog, LinkFault, NodeId, World};

fn addr(i: u32) -> String {
    format!("10.0.0.{i}:8000")
}

fn cluster(seed: u64, n: u32) -> World {
    let mut world = World::new(seed, EventLog::keeping());
    let etcd = EtcdNode::new(mock_etcd::Config::default(), seed);
    world.add_server(NodeId::Etcd, Box::new(etcd));
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    for i in 0..n {
        master.route(&addr(i), NodeId::Vllm(i));
    }
    world.add_server(NodeId::Master, Box::new(master));
    for i in 0..n {
        let vllm = VllmNode::with_dialect(Dialect::Compact, u64::from(i), Duration::ZERO);
        let hour = Duration::from_secs(3600);
        let load = Load::new(NodeId::Vllm(i), &vllm, 5.0, hour, "hi", 16).unwrap();
        world.add_server(NodeId::Vllm(i), Box::new(vllm));
        world.add_load(Duration::ZERO, load);
        let a = addr(i);
        world.add_sidecar(&Config::from_flags(["--register-addr", a.as_str()]).unwrap());
    }
    world
}

fn state(w: &World, i: u32) -> Option<(InstanceState, String)> {
    let m = w.server_as::<MasterNode>(NodeId::Master)?;
    m.instances()
        .view(&addr(i), w.now())
        .map(|v| (v.state, v.incarnation))
}

fn count(log: &str, node: &str, what: &str) -> usize {
    let node = format!("\"node\":\"{node}\"");
    log.lines()
        .filter(|l| l.contains(&node) && l.contains(what))
        .count()
}

#[test]
fn every_sidecar_registers_and_heartbeats_through_the_fakes() {
    let mut world = cluster(1, 3);
    world.run_until(Duration::from_secs(60));
    let log = world.log().text();
    for i in 0..3 {
        let (s, inc) = state(&world, i).unwrap_or_else(|| panic!("instance {i} unknown: {log}"));
        assert_eq!(s, InstanceState::Active);
        assert!(inc.starts_with("vllm-"));
        let node = format!("sidecar/{i}");
        // 3 s heartbeats for ~58 s: all answered 200, never 409.
        assert!(count(&log, &node, "status: Some(200)") >= 15, "{log}");
        assert_eq!(count(&log, &node, "status: Some(409)"), 0);
        assert_eq!(count(&log, &node, "KeepaliveFailed"), 0);
    }
}

#[test]
fn a_partition_from_etcd_expires_the_lease_and_the_sidecar_comes_back() {
    let mut world = cluster(2, 2);
    world.run_until(Duration::from_secs(20));
    let (_, before) = state(&world, 1).expect("registered");
    // Requests from sidecar/1 to etcd vanish for 15 s (more than the 6 s TTL).
    let lost = LinkFault::Partition {
        direction: sim::Direction::ToTarget,
    };
    let (s1, etcd) = (NodeId::Sidecar(1), NodeId::Etcd);
    world.set_link(s1, etcd, lost);
    world.set_link_at(Duration::from_secs(35), s1, etcd, LinkFault::Heal);
    world.run_until(Duration::from_secs(30));
    let log = world.log().text();
    assert!(count(&log, "etcd", "lease_expired") >= 1, "{log}");
    // etcd deleted the key; the master probed vLLM (healthy): LEASE_LOST; the sidecar
    // gave its lease up too and stopped heartbeating: SUSPECT 3 s later.
    assert_eq!(count(&log, "master", "\"healthy\":true"), 1, "{log}");
    assert!(count(&log, "master", "\"to\":\"LEASE_LOST\"") >= 1, "{log}");
    assert!(count(&log, "sidecar/1", "LeaseLost") >= 1, "{log}");
    let (s, inc) = state(&world, 1).expect("still known");
    assert_eq!((s, inc.as_str()), (InstanceState::Suspect, before.as_str()));
    world.run_until(Duration::from_secs(60));
    let (s, after) = state(&world, 1).expect("registered again");
    assert_eq!(s, InstanceState::Active);
    assert_ne!(after, before, "a new registration has a new incarnation");
    // The other instance never noticed.
    assert_eq!(count(&world.log().text(), "sidecar/0", "LeaseLost"), 0);
}

#[test]
fn the_whole_cluster_replays_byte_for_byte() {
    let run = |seed| {
        let mut w = cluster(seed, 2);
        let jitter = LinkFault::Latency {
            ms: 20,
            jitter_ms: 200,
        };
        w.set_link_at(
            Duration::from_secs(5),
            NodeId::Sidecar(0),
            NodeId::Master,
            jitter,
        );
        w.run_until(Duration::from_secs(120));
        w.log().clone()
    };
    let (a, b, c) = (run(9), run(9), run(10));
    assert!(a.lines() > 1000);
    assert_eq!(a.bytes(), b.bytes());
    assert_ne!(a.bytes(), c.bytes());
}

#[test]
fn a_vllm_crash_deregisters_and_its_restart_registers_again() {
    let mut world = cluster(3, 2);
    world.at(Duration::from_secs(20), |w| {
        let now = w.now();
        if let Some(v) = w.server_as_mut::<VllmNode>(NodeId::Vllm(0)) {
            v.core().crash(now);
        }
    });
    world.run_until(Duration::from_secs(30));
    let log = world.log().text();
    // Three refused probes (2 s apart), then the sidecar revokes its lease: etcd deletes
    // the key, the master's probe is refused too: SUSPECT.
    assert!(count(&log, "sidecar/0", "HealthFailed") >= 3, "{log}");
    assert!(count(&log, "sidecar/0", "why: Unhealthy") >= 1, "{log}");
    assert!(count(&log, "master", "\"healthy\":false") >= 1, "{log}");
    assert_eq!(
        state(&world, 0).map(|s| s.0),
        Some(InstanceState::Suspect),
        "{log}"
    );
    // After the 15 s suspect window the master forgets it.
    world.run_until(Duration::from_secs(40));
    assert_eq!(state(&world, 0), None);
    world.at(Duration::from_secs(45), |w| {
        let now = w.now();
        if let Some(v) = w.server_as_mut::<VllmNode>(NodeId::Vllm(0)) {
            v.core().restart(now);
        }
    });
    world.run_until(Duration::from_secs(75));
    assert_eq!(state(&world, 0).map(|s| s.0), Some(InstanceState::Active));
    assert_eq!(state(&world, 1).map(|s| s.0), Some(InstanceState::Active));
}

#[test]
fn a_following_sidecar_reads_the_master_key_from_etcd_and_keeps_heartbeating() {
    let mut world = cluster(7, 2);
    let a = addr(1);
    let flags = ["--register-addr", a.as_str(), "--follow-master"];
    world.restart_sidecar(1, &Config::from_flags(flags).unwrap());
    world.at(Duration::from_secs(20), |w| {
        let now = w.now();
        let put = r#"{"key":"WExMTTpTRVJWSUNFOk1BU1RFUg==","value":"MTAuMS4wLjk6OTk5OQ=="}"#;
        if let Some(etcd) = w.server_as_mut::<EtcdNode>(NodeId::Etcd) {
            let answer = etcd
                .core()
                .handle_json("/v3/kv/put", None, put.as_bytes(), now);
            assert_eq!(answer.status, 200);
        }
    });
    world.run_until(Duration::from_secs(60));
    let log = world.log().text();
    // XLLM:SERVICE:MASTER = 10.1.0.9:9999, put just before the steady read at 20 s.
    let switched = count(&log, "sidecar/1", "HeartbeatTargetChanged");
    assert_eq!(switched, 1, "{log}");
    assert!(
        count(
            &log,
            "sidecar/1",
            "http://10.1.0.9:9998/v1/internal/heartbeat"
        ) >= 1
    );
    // Reads at 0, 10, ..., 60 s; the sidecar not following never reads.
    let range = r#""request":{"etcd":"/v3/kv/range"}"#;
    assert_eq!(count(&log, "sidecar/1", range), 7, "{log}");
    assert_eq!(count(&log, "sidecar/0", range), 0);
    // The world's one master takes every heartbeat, whatever the target.
    assert!(count(&log, "sidecar/1", "status: Some(200)") >= 15, "{log}");
}
