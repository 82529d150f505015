//! Where the sidecar's values meet the fakes' cores, in their wire encoding: the etcd
//! value the sidecar puts is read by mock-master's own `InstanceMeta::parse` (through a
//! watch event), the `/metrics` page mock-vllm writes is parsed by the sidecar core's
//! real mapping, and the heartbeat body the core writes is read by mock-master's
//! protobuf-JSON rules and answered by its instance table.
//!
//! etcd is mock-etcd's core: the sidecar's calls go through its gateway decoding, and
//! the master learns the key from the watch lines it writes. Every peer answers at
//! once here (no links, no timeouts: the world tests those).

use std::time::Duration;

use mock_master::InstanceState;
use mock_vllm::Dialect;
use sidecar::config::Config;
use sim::etcd_node::EtcdNode;
use sim::master_node::MasterNode;
use sim::node::Outcome;
use sim::node::Server;
use sim::sidecar_node::{Outgoing, SidecarNode};
use sim::vllm_node::VllmNode;
use sim::{NodeId, Reply, Request};

fn run(dialect: Dialect, token: Option<&str>, sidecar_token: &str) -> (MasterNode, Vec<u16>) {
    run_with(dialect, token, sidecar_token, |_| {}).0
}

/// As `run`, with faults armed on the vLLM first; also answers the sidecar's notes.
fn run_with(
    dialect: Dialect,
    token: Option<&str>,
    sidecar_token: &str,
    arm: impl FnOnce(&mut VllmNode),
) -> ((MasterNode, Vec<u16>), Vec<String>) {
    let config = Config::from_flags([
        "--register-addr",
        "10.0.0.7:8000",
        "--etcd-namespace",
        "/prod",
        "--internal-token",
        sidecar_token,
    ])
    .unwrap();
    let mut vllm = VllmNode::with_dialect(dialect, 1, Duration::ZERO);
    arm(&mut vllm);
    let mut notes = Vec::new();
    let master_cfg = mock_master::Config {
        etcd_namespace: "/prod".into(),
        token: token.map(str::to_string),
        ..mock_master::Config::default()
    };
    let mut master = MasterNode::new(master_cfg, Duration::ZERO);
    let mut etcd = EtcdNode::new(mock_etcd::Config::default(), 1);
    etcd.watch(
        NodeId::Master,
        master.watch_request().as_bytes(),
        None,
        Duration::ZERO,
    )
    .unwrap();
    let mut sidecar = SidecarNode::new(0, &config, 9, Duration::ZERO);
    let mut statuses = Vec::new();
    let mut now = Duration::ZERO;
    // Ten simulated seconds, every command answered at once by its peer.
    while now < Duration::from_secs(10) {
        let mut outs = Vec::new();
        sidecar.poll(&mut outs);
        while !outs.is_empty() {
            let out = outs.remove(0);
            let Outgoing::Send { request, tag, .. } = out else {
                notes.push(format!("{out:?}"));
                continue;
            };
            let reply = match &request {
                Request::Health | Request::Metrics => vllm.serve(now, NodeId::Sidecar(0), &request),
                Request::Heartbeat { .. } => {
                    let r = master.serve(now, NodeId::Sidecar(0), &request);
                    if let Some(Reply::Status(s)) = r {
                        statuses.push(s);
                    }
                    r
                }
                Request::Etcd { .. } => {
                    let r = etcd.serve(now, NodeId::Sidecar(0), &request);
                    // The master's watch: etcd's lines, read by mock-master's parser.
                    for (_, line) in etcd.take_pushes() {
                        master.on_watch_line(now, &line);
                    }
                    r
                }
                other => panic!("a sidecar never sends {other:?}"),
            };
            let Some(reply) = reply else {
                continue; // a hang: this loop has no timeouts; the world tests them
            };
            sidecar.complete(now, &tag, Outcome::Reply(reply));
            sidecar.poll(&mut outs);
        }
        now = sidecar
            .next_wakeup()
            .expect("running")
            .max(now + Duration::from_millis(1));
        master.on_timer(now);
        sidecar.handle(now, sidecar::core::Input::Timer);
    }
    ((master, statuses), notes)
}

#[test]
fn the_sidecars_value_and_heartbeat_are_read_by_mock_masters_own_rules() {
    for dialect in [
        Dialect::Compact,
        Dialect::V0_10,
        Dialect::V0_11,
        Dialect::OpenMetrics,
    ] {
        let (master, statuses) = run(dialect, Some("s3cret"), "s3cret");
        assert!(statuses.len() >= 2, "{dialect:?}: heartbeats {statuses:?}");
        assert!(
            statuses.iter().all(|s| *s == 200),
            "{dialect:?}: {statuses:?}"
        );
        let views = master.instances().views(Duration::from_secs(10));
        assert_eq!(views.len(), 1, "{views:?}");
        let v = &views[0];
        assert_eq!(v.name, "10.0.0.7:8000");
        assert_eq!(v.state, InstanceState::Active);
        assert!(v.incarnation.starts_with("vllm-"), "{v:?}");
        // The load came from mock-vllm's page through the sidecar's mapping.
        let load = v.load.expect("load stored");
        assert_eq!(load.waiting_requests_num, 0, "{dialect:?}");
    }
}

#[test]
fn a_wrong_token_is_refused_by_the_masters_check() {
    let (_, statuses) = run(Dialect::Compact, Some("right"), "wrong");
    assert!(!statuses.is_empty());
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
}

#[test]
fn mock_vllms_metric_faults_reach_the_sidecars_mapping() {
    use mock_vllm::Fault;
    // A 500 page: a scrape error, no heartbeat that round.
    let ((_, clean), _) = run_with(Dialect::Compact, None, "", |_| {});
    let ((_, statuses), notes) = run_with(Dialect::Compact, None, "", |v| {
        v.add_fault(Fault::MetricsStatus { status: 500 }, Some(1));
    });
    assert_eq!(statuses.len() + 1, clean.len(), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ScrapeFailed") && n.contains("\"status\"")),
        "{notes:?}"
    );
    // Garbage lines: the lenient parser skips them and the heartbeat still goes.
    let ((_, statuses), _) = run_with(Dialect::Compact, None, "", |v| {
        v.add_fault(Fault::MetricsGarbage { lines: 5 }, None);
    });
    assert_eq!(statuses, clean);
    // NaN and infinite gauges: whatever the sidecar sends, the master reads it.
    let ((master, statuses), notes) = run_with(Dialect::V0_11, None, "", |v| {
        v.add_fault(Fault::MetricsNonfinite, None);
    });
    assert!(
        !statuses.is_empty() && statuses.iter().all(|s| *s == 200),
        "{statuses:?} {notes:?}"
    );
    let views = master.instances().views(Duration::from_secs(10));
    assert!(views[0].load.is_some());
}
