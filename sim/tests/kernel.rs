//! The engine alone: determinism by seed, timeouts, and link faults as a sidecar core
//! sees them. The peer here is a fixture that answers every request with one fixed
//! reply; it models nothing (the fakes' cores are the peers in the other tests).

use std::time::Duration;

use sidecar::config::Config;
use sim::node::Server;
use sim::{EventLog, LinkFault, NodeId, Reply, Request, World};

/// Answers every request with `reply`, or never (`None`).
struct Fixed(Option<Reply>);

impl Server for Fixed {
    fn serve(&mut self, _: Duration, _: NodeId, _: &Request) -> Option<Reply> {
        self.0.clone()
    }
}

fn config() -> Config {
    Config::from_flags(["--lease-ttl", "6", "--keepalive-interval", "2"]).unwrap()
}

/// One sidecar whose vLLM answers 200 over a jittery link, and no etcd.
fn run(seed: u64) -> EventLog {
    let mut world = World::new(seed, EventLog::keeping());
    world.add_server(NodeId::Vllm(0), Box::new(Fixed(Some(Reply::Status(200)))));
    world.add_sidecar(&config());
    let jitter = LinkFault::Latency {
        ms: 5,
        jitter_ms: 50,
    };
    world.set_link(NodeId::Sidecar(0), NodeId::Vllm(0), jitter);
    world.run_until(Duration::from_secs(60));
    world.log().clone()
}

#[test]
fn same_seed_same_log_byte_for_byte_other_seed_other_log() {
    let a = run(7);
    let b = run(7);
    assert!(a.lines() > 50, "too little happened: {}", a.text());
    assert_eq!(a.bytes(), b.bytes());
    let c = run(8);
    assert_ne!(a.bytes(), c.bytes());
}

fn lines_of<'a>(log: &'a str, node: &str, kind: &str) -> Vec<&'a str> {
    let node = format!("\"node\":\"{node}\",\"kind\":\"{kind}\"");
    log.lines().filter(|l| l.contains(&node)).collect()
}

#[test]
fn a_missing_peer_refuses_and_a_hang_times_out_at_the_callers_timeout() {
    let mut world = World::new(1, EventLog::keeping());
    world.add_server(NodeId::Vllm(0), Box::new(Fixed(Some(Reply::Status(200)))));
    world.add_server(NodeId::Etcd, Box::new(Fixed(None)));
    world.add_sidecar(&Config::from_flags(["--etcd-timeout", "2.5"]).unwrap());
    world.run_until(Duration::from_secs(10));
    let log = world.log().text();
    // The grant goes to an etcd that never answers: the etcd timeout ends it.
    let sends = lines_of(&log, "sidecar/0", "send");
    let grant = sends
        .iter()
        .find(|l| l.contains("/v3/lease/grant"))
        .expect("a grant was sent");
    let t_send: u64 = field(grant, "t_us");
    let x: u64 = field(grant, "x");
    let outcome = lines_of(&log, "sidecar/0", "outcome")
        .into_iter()
        .find(|l| field::<u64>(l, "x") == x)
        .expect("the grant ended");
    assert!(outcome.contains("Timeout"), "{outcome}");
    assert_eq!(field::<u64>(outcome, "t_us") - t_send, 2_500_000);
    assert!(log.contains("RegistrationFailed"), "{log}");
    // No master: heartbeats are never sent (not registered), nothing crashes.
    assert!(world.sidecars()[0].exited().is_none());
}

fn field<T: std::str::FromStr>(line: &str, name: &str) -> T {
    let key = format!("\"{name}\":");
    let at = line.find(&key).expect("field present") + key.len();
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].parse().ok().expect("a number")
}

#[test]
fn reset_fails_at_once_refuse_refuses_blackhole_waits_partition_is_one_way() {
    let vllm = NodeId::Vllm(0);
    let s = NodeId::Sidecar(0);
    let outcome_of_first_probe_after = |fault: LinkFault| {
        let mut world = World::new(3, EventLog::keeping());
        world.add_server(vllm, Box::new(Fixed(Some(Reply::Status(200)))));
        world.set_link(s, vllm, fault);
        world.add_sidecar(&config());
        world.run_until(Duration::from_secs(5));
        let log = world.log().text();
        let first = lines_of(&log, "sidecar/0", "outcome")
            .first()
            .map(|l| l.to_string())
            .expect("the first probe ended");
        (first, log)
    };
    let (reset, _) = outcome_of_first_probe_after(LinkFault::Reset);
    assert!(
        reset.contains("Reset") && reset.contains("\"t_us\":0,"),
        "{reset}"
    );
    let (refused, _) = outcome_of_first_probe_after(LinkFault::Refuse);
    assert!(
        refused.contains("Refused") && refused.contains("\"t_us\":0,"),
        "{refused}"
    );
    // Blackhole and both partitions: the health timeout (3 s default).
    for fault in [
        LinkFault::Blackhole,
        LinkFault::Partition {
            direction: sim::Direction::ToTarget,
        },
        LinkFault::Partition {
            direction: sim::Direction::FromTarget,
        },
    ] {
        let (timeout, log) = outcome_of_first_probe_after(fault.clone());
        assert!(
            timeout.contains("Timeout") && timeout.contains("\"t_us\":3000000,"),
            "{fault:?}: {timeout}"
        );
        let served = lines_of(&log, "vllm/0", "serve").len();
        // The request reaches vLLM only when answers are the ones lost.
        let reaches = matches!(
            fault,
            LinkFault::Partition {
                direction: sim::Direction::FromTarget
            }
        );
        assert_eq!(served > 0, reaches, "{fault:?}: {log}");
    }
}

#[test]
fn healing_a_blackhole_closes_the_stuck_exchange_and_reset_kills_one_in_flight() {
    let vllm = NodeId::Vllm(0);
    let s = NodeId::Sidecar(0);
    let mut world = World::new(3, EventLog::keeping());
    world.add_server(vllm, Box::new(Fixed(Some(Reply::Status(200)))));
    world.set_link(s, vllm, LinkFault::Blackhole);
    world.set_link_at(Duration::from_millis(700), s, vllm, LinkFault::Heal);
    world.add_sidecar(&config());
    world.run_until(Duration::from_secs(1));
    let log = world.log().text();
    let first = lines_of(&log, "sidecar/0", "outcome")[0];
    assert!(
        first.contains("Closed") && first.contains("\"t_us\":700000,"),
        "{first}"
    );

    // A latency of 1 s, then a reset 100 ms into the exchange: it fails then.
    let mut world = World::new(3, EventLog::keeping());
    world.add_server(vllm, Box::new(Fixed(Some(Reply::Status(200)))));
    let slow = LinkFault::Latency {
        ms: 1000,
        jitter_ms: 0,
    };
    world.set_link(s, vllm, slow);
    world.set_link_at(Duration::from_millis(100), s, vllm, LinkFault::Reset);
    world.add_sidecar(&config());
    world.run_until(Duration::from_secs(2));
    let log = world.log().text();
    let first = lines_of(&log, "sidecar/0", "outcome")[0];
    assert!(
        first.contains("Reset") && first.contains("\"t_us\":100000,"),
        "{first}"
    );
    assert!(
        lines_of(&log, "vllm/0", "serve").is_empty(),
        "the request died with its connection"
    );
}

/// Holds every request `after` before acting on it (as a latency fault does) and
/// remembers when it acted.
struct Held {
    after: Duration,
    acted: Vec<Duration>,
}

impl Server for Held {
    fn serve(&mut self, _: Duration, _: NodeId, _: &Request) -> Option<Reply> {
        Some(Reply::Deferred { after: self.after })
    }

    fn serve_deferred(&mut self, now: Duration, _: NodeId, _: &Request) -> Option<Reply> {
        self.acted.push(now);
        Some(Reply::Status(503))
    }
}

/// When etcd acted on the sidecar's requests, holding each `after_ms`, in 20 s.
fn acted_with_delay(after_ms: u64) -> (Vec<Duration>, String) {
    let mut world = World::new(1, EventLog::keeping());
    world.add_server(NodeId::Vllm(0), Box::new(Fixed(Some(Reply::Status(200)))));
    let held = Held {
        after: Duration::from_millis(after_ms),
        acted: Vec::new(),
    };
    world.add_server(NodeId::Etcd, Box::new(held));
    world.add_sidecar(&Config::from_flags(["--etcd-timeout", "2.5"]).unwrap());
    world.run_until(Duration::from_secs(20));
    let node = world.server_as::<Held>(NodeId::Etcd).expect("etcd");
    (node.acted.clone(), world.log().text())
}

#[test]
fn a_deferred_request_is_acted_on_after_its_delay_unless_its_caller_gave_up() {
    // Held 1 s, under the 2.5 s etcd timeout: each grant is acted on 1 s after it was
    // sent, and its answer comes back.
    let (acted, log) = acted_with_delay(1000);
    let sends: Vec<u64> = lines_of(&log, "sidecar/0", "send")
        .iter()
        .filter(|l| l.contains("/v3/lease/grant"))
        .map(|l| field(l, "t_us"))
        .collect();
    assert!(!sends.is_empty(), "no grant sent: {log}");
    let acted_us: Vec<u64> = acted.iter().map(|t| t.as_micros() as u64).collect();
    assert!(
        acted_us.len() + 1 >= sends.len(),
        "{acted_us:?} of {sends:?}"
    );
    for (sent, acted) in sends.iter().zip(&acted_us) {
        // The hold, plus the link's delivery time (well under a millisecond here).
        let held = acted - sent;
        assert!((1_000_000..1_001_000).contains(&held), "{sent} → {acted}");
    }
    // Held 3 s: every caller gave up (2.5 s) first, so nothing was ever acted on.
    let (acted, log) = acted_with_delay(3000);
    assert!(log.contains("/v3/lease/grant"), "no grant sent: {log}");
    assert_eq!(acted, Vec::<Duration>::new());
}

/// A paused node handles nothing: what reaches it waits, and happens when it resumes,
/// at the time it resumes (a request is served late, a due timer fires late).
#[test]
fn a_paused_node_handles_nothing_and_catches_up_when_it_resumes() {
    let ms = Duration::from_millis;
    let mut world = World::new(3, EventLog::keeping());
    world.add_server(NodeId::Vllm(0), Box::new(Fixed(Some(Reply::Status(200)))));
    world.add_sidecar(&config()); // probes /health every 2 s
    world.pause_at(ms(4_100), NodeId::Vllm(0), ms(2_000));
    world.pause_at(ms(10_100), NodeId::Sidecar(0), ms(3_000));
    world.run_until(Duration::from_secs(20));
    let log = world.log().text();
    let times = |node: &str, kind: &str| -> Vec<u64> {
        lines_of(&log, node, kind)
            .iter()
            .map(|l| field(l, "t_us"))
            .collect()
    };
    let serves = times("vllm/0", "serve");
    assert!(
        !serves.iter().any(|t| (4_100_000..6_100_000).contains(t)),
        "served while paused: {serves:?}"
    );
    assert!(
        serves.contains(&6_100_000),
        "the probe that waited: {serves:?}"
    );
    let sends = times("sidecar/0", "send");
    assert!(
        !sends.iter().any(|t| (10_100_000..13_100_000).contains(t)),
        "sent while paused: {sends:?}"
    );
    assert!(
        sends.contains(&13_100_000),
        "the probe that fell due: {sends:?}"
    );
    assert!(
        sends.iter().any(|t| *t > 13_100_000),
        "runs on after: {sends:?}"
    );
    assert_eq!(lines_of(&log, "vllm/0", "resumed").len(), 1);
    assert_eq!(lines_of(&log, "sidecar/0", "resumed").len(), 1);
}
