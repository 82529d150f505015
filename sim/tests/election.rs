//! Master replicas elected through the simulated etcd: three mock-master cores in
//! replica mode, each carrying out its election over its own link to the fake etcd,
//! two sidecars following the elected master (`--follow-master`), the master killed
//! and its successor taking over the MASTER key, the heartbeats and LOADMETRICS.

use std::collections::BTreeMap;
use std::time::Duration;

use mock_master::election::Role;
use sidecar::config::Config;
use sim::etcd_node::EtcdNode;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{EventLog, NodeId, World};

/// The election TTL of every replica (mock-master's default).
const TTL: Duration = Duration::from_secs(3);
/// The sidecars' heartbeat interval (their default).
const HEARTBEAT: Duration = Duration::from_secs(3);
const REPLICAS: usize = 3;
const SIDECARS: u32 = 2;
const MASTER_KEY: &[u8] = b"XLLM:SERVICE:MASTER";
const LOADMETRICS: &[u8] = b"XLLM:LOADMETRICS:";

fn addr(i: u32) -> String {
    format!("10.0.0.{i}:8000")
}

/// Replica `k`'s service name: `127.0.0.<k+1>:8889`.
fn service_name(k: usize) -> String {
    format!("127.0.0.{}:8889", k + 1)
}

/// A fresh replica-mode master process for slot `k`, started at `now`.
fn replica(k: usize, now: Duration) -> MasterNode {
    let cfg = mock_master::Config {
        elect: true,
        service_name: service_name(k),
        election_ttl: TTL,
        ..mock_master::Config::default()
    };
    let mut master = MasterNode::new(cfg, now);
    for i in 0..SIDECARS {
        master.route(&addr(i), NodeId::Vllm(i));
    }
    master
}

fn cluster(seed: u64) -> World {
    let mut world = World::new(seed, EventLog::keeping());
    let etcd = EtcdNode::new(mock_etcd::Config::default(), seed);
    world.add_server(NodeId::Etcd, Box::new(etcd));
    let hosts: BTreeMap<String, NodeId> = (0..REPLICAS)
        .map(|k| (format!("127.0.0.{}", k + 1), NodeId::master(k)))
        .collect();
    world.set_master_hosts(hosts);
    for k in 0..REPLICAS {
        world.add_server(NodeId::master(k), Box::new(replica(k, Duration::ZERO)));
    }
    for i in 0..SIDECARS {
        let vllm =
            VllmNode::with_dialect(mock_vllm::Dialect::Compact, u64::from(i), Duration::ZERO);
        world.add_server(NodeId::Vllm(i), Box::new(vllm));
        let a = addr(i);
        let flags = [
            "--register-addr",
            a.as_str(),
            "--follow-master",
            "--xllm-service-url",
            "http://127.0.0.1:8888",
        ];
        world.add_sidecar(&Config::from_flags(flags).expect("flags"));
    }
    world
}

fn node(w: &World, k: usize) -> Option<&MasterNode> {
    w.server_as::<MasterNode>(NodeId::master(k))
}

/// The live replicas that are master now.
fn masters(w: &World) -> Vec<usize> {
    (0..REPLICAS)
        .filter(|k| node(w, *k).is_some_and(MasterNode::is_master))
        .collect()
}

/// The one master now (panics with the log otherwise).
fn the_master(w: &World) -> usize {
    match masters(w).as_slice() {
        [k] => *k,
        other => panic!("masters {other:?} at {:?}: {}", w.now(), w.log().text()),
    }
}

fn master_key(w: &World) -> Option<String> {
    let etcd = w.server_as::<EtcdNode>(NodeId::Etcd)?;
    etcd.value(MASTER_KEY)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn heartbeats_ok(w: &World, k: usize) -> u64 {
    node(w, k)
        .and_then(|m| m.heartbeat_counts().get(&200).copied())
        .unwrap_or(0)
}

/// The LOADMETRICS keys' highest mod revision, and how many there are.
fn loadmetrics(w: &World) -> (i64, usize) {
    let Some(etcd) = w.server_as::<EtcdNode>(NodeId::Etcd) else {
        return (0, 0);
    };
    let (_, kvs) = etcd.list_prefix(LOADMETRICS).expect("listing");
    let top = kvs.iter().map(|kv| kv.mod_revision).max().unwrap_or(0);
    (top, kvs.len())
}

fn count(log: &str, node: &str, what: &str) -> usize {
    let node = format!("\"node\":\"{node}\"");
    log.lines()
        .filter(|l| l.contains(&node) && l.contains(what))
        .count()
}

/// Run in small steps until `done` holds (answers when), or until `limit`.
fn run_until_holds(w: &mut World, limit: Duration, done: impl Fn(&World) -> bool) -> Duration {
    let step = Duration::from_millis(10);
    while w.now() < limit {
        if done(w) {
            return w.now();
        }
        let next = w.now() + step;
        w.run_until(next);
    }
    panic!("not by {limit:?}: {}", w.log().text());
}

#[test]
fn replica_ids_and_heartbeat_routing_by_host() {
    assert_eq!(NodeId::master(0), NodeId::Master);
    assert_eq!(NodeId::master(2), NodeId::MasterReplica(2));
    assert_eq!(NodeId::master(2).to_string(), "master@2");
    assert!(NodeId::master(1).is_master() && !NodeId::Etcd.is_master());
    use sidecar::core::{HeartbeatTarget, MasterName};
    use sim::sidecar_node::heartbeat_node_in;
    let hosts: BTreeMap<String, NodeId> = [("127.0.0.2".to_string(), NodeId::master(1))].into();
    let elected = |host: &str| HeartbeatTarget::Elected {
        master: MasterName::parse(&format!("{host}:8889")).expect("name"),
        url: format!("http://{host}:8888/v1/internal/heartbeat")
            .parse()
            .expect("url"),
    };
    let to = |t: &HeartbeatTarget| heartbeat_node_in(&hosts, t);
    assert_eq!(to(&elected("127.0.0.2")), NodeId::MasterReplica(1));
    assert_eq!(to(&elected("127.0.0.9")), NodeId::Master);
    assert_eq!(to(&HeartbeatTarget::Configured), NodeId::Master);
}

#[test]
fn one_master_is_elected_and_takes_the_heartbeats() {
    let mut w = cluster(1);
    w.run_until(Duration::from_secs(1));
    let m = the_master(&w);
    assert_eq!(master_key(&w), Some(service_name(m)));
    for k in (0..REPLICAS).filter(|k| *k != m) {
        assert_eq!(node(&w, k).map(MasterNode::role), Some(Role::Standby));
    }
    // By 20 s both sidecars read the key (steady reads at 0 and 10 s) and post to it.
    w.run_until(Duration::from_secs(20));
    let before: Vec<u64> = (0..REPLICAS).map(|k| heartbeats_ok(&w, k)).collect();
    w.run_until(Duration::from_secs(30));
    let log = w.log().text();
    for (k, before) in before.iter().enumerate() {
        let got = heartbeats_ok(&w, k) - before;
        match k == m {
            // Two sidecars, a 3 s interval, 10 s.
            true => assert!(got >= 6, "{k}: {got}: {log}"),
            false => assert_eq!(got, 0, "{k}: {log}"),
        }
    }
    assert_eq!(the_master(&w), m);
    // Only the master writes LOADMETRICS; both instances are there.
    let name = NodeId::master(m).to_string();
    assert!(count(&log, &name, "loadmetrics_publish") >= 1, "{log}");
    for k in (0..REPLICAS).filter(|k| *k != m) {
        let other = NodeId::master(k).to_string();
        assert_eq!(count(&log, &other, "loadmetrics_publish"), 0, "{log}");
    }
    assert_eq!(loadmetrics(&w).1, SIDECARS as usize, "{log}");
}

#[test]
fn killing_the_master_elects_another_that_takes_heartbeats_and_publishes() {
    let mut w = cluster(2);
    w.run_until(Duration::from_secs(25));
    let old = the_master(&w);
    let killed_at = w.now();
    let readers = |w: &World| w.server(NodeId::Etcd).map(|e| e.stream_readers());
    assert!(readers(&w).is_some_and(|r| r.contains(&NodeId::master(old))));
    w.kill_server(NodeId::master(old));
    assert!(node(&w, old).is_none());
    // Its watch is gone with it: etcd forgot the stream.
    assert!(readers(&w).is_some_and(|r| !r.contains(&NodeId::master(old))));
    let (rev_at_kill, _) = loadmetrics(&w);

    // A standby wins once the old MASTER lease expires: within the TTL.
    let margin = Duration::from_millis(500);
    let elected_at = run_until_holds(&mut w, killed_at + TTL + margin, |w| masters(w).len() == 1);
    let new = the_master(&w);
    assert_ne!(new, old);
    assert!(elected_at - killed_at <= TTL + margin);
    assert_eq!(master_key(&w), Some(service_name(new)));

    // The sidecars' heartbeats reach it: the key expires (TTL), a failing sidecar reads
    // again within a heartbeat interval, the read's round trip, the post.
    let base = heartbeats_ok(&w, new);
    let limit = killed_at + TTL + HEARTBEAT + Duration::from_secs(1);
    run_until_holds(&mut w, limit, |w| heartbeats_ok(w, new) >= base + 2);
    let log = w.log().text();
    for i in 0..SIDECARS {
        let sidecar = format!("sidecar/{i}");
        assert!(
            count(&log, &sidecar, "HeartbeatTargetChanged") >= 2,
            "{log}"
        );
    }

    // Its LOADMETRICS rounds write the keys again (their revisions grow).
    w.run_until(w.now() + Duration::from_secs(10));
    let (rev, keys) = loadmetrics(&w);
    assert!(rev > rev_at_kill, "{rev} <= {rev_at_kill}");
    assert_eq!(keys, SIDECARS as usize);
    let log = w.log().text();
    let name = NodeId::master(new).to_string();
    let published_after = log
        .lines()
        .filter(|l| l.contains(&format!("\"node\":\"{name}\"")))
        .filter(|l| l.contains("loadmetrics_publish"))
        .count();
    assert!(published_after >= 1, "{log}");
    assert_eq!(the_master(&w), new);

    // Started again, the killed replica registers and stands by.
    let now = w.now();
    w.start_server(NodeId::master(old), Box::new(replica(old, now)));
    w.run_until(now + Duration::from_secs(5));
    assert_eq!(node(&w, old).map(MasterNode::role), Some(Role::Standby));
    assert_eq!(the_master(&w), new);
    assert!(readers(&w).is_some_and(|r| r.contains(&NodeId::master(old))));
    let etcd = w.server_as::<EtcdNode>(NodeId::Etcd).expect("etcd");
    let own = format!("XLLM:SERVICE:{}", service_name(old));
    assert!(etcd.value(own.as_bytes()).is_some());
}

#[test]
fn a_run_with_a_kill_replays_byte_for_byte() {
    let run = |seed| {
        let mut w = cluster(seed);
        w.at(Duration::from_secs(15), |w| {
            let m = the_master(w);
            w.kill_server(NodeId::master(m));
        });
        w.at(Duration::from_secs(30), |w| {
            let now = w.now();
            let dead = (0..REPLICAS).find(|k| node(w, *k).is_none()).expect("dead");
            w.start_server(NodeId::master(dead), Box::new(replica(dead, now)));
        });
        w.run_until(Duration::from_secs(45));
        w.log().clone()
    };
    let (a, b, c) = (run(5), run(5), run(6));
    assert!(a.lines() > 500);
    assert_eq!(a.bytes(), b.bytes());
    assert_ne!(a.bytes(), c.bytes());
}

/// A killed vLLM refuses its sidecar's probes until a fresh process is started in its
/// slot; the sidecar then registers it again.
#[test]
fn a_killed_server_refuses_until_started_again() {
    let mut w = cluster(3);
    w.run_until(Duration::from_secs(10));
    w.kill_server(NodeId::Vllm(0));
    w.run_until(Duration::from_secs(20));
    let log = w.log().text();
    assert_eq!(count(&log, "vllm/0", "\"killed\""), 1, "{log}");
    assert!(count(&log, "sidecar/0", "HealthFailed") >= 3, "{log}");
    assert_eq!(count(&log, "sidecar/1", "HealthFailed"), 0, "{log}");
    let m = the_master(&w);
    let now = w.now();
    let fresh = VllmNode::with_dialect(mock_vllm::Dialect::Compact, 9, now);
    w.start_server(NodeId::Vllm(0), Box::new(fresh));
    w.run_until(Duration::from_secs(45));
    let view = node(&w, m).and_then(|n| n.instances().view(&addr(0), w.now()));
    let state = view.map(|v| v.state);
    assert_eq!(
        state,
        Some(mock_master::InstanceState::Active),
        "{}",
        w.log().text()
    );
}
