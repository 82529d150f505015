//! Master replicas in real mode: three in-process fake masters elect one through the
//! fake etcd, the elected one is killed, and the real `vllm-sidecar` processes, which
//! follow the MASTER key, heartbeat to the new master (`tests/data/master-failover-real.toml`).
//!
//! And the other half: the same scenario with sidecars that do not follow the master
//! fails, on the verdicts that name it. Skipped (with the reason) where the sidecar
//! binary cannot be found or built.

use scenarios::report::{Outcome, Status};
use scenarios::run::{run_scenario, RunOptions};
use scenarios::spec::Scenario;

const FILE: &str = "tests/data/master-failover-real.toml";

fn scenario() -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE);
    let text = std::fs::read_to_string(&path).expect("the scenario file is readable");
    Scenario::parse(FILE, &text).expect("the scenario parses")
}

/// Run `sc` in real mode against the fake etcd; `None` where no sidecar binary exists.
async fn run(sc: &Scenario) -> Option<Outcome> {
    let bin = match scenarios::sidecar::locate_binary() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: no vllm-sidecar binary: {why}");
            return None;
        }
    };
    let opts = RunOptions {
        sidecar_bin: Some(bin),
        ..RunOptions::default()
    };
    Some(run_scenario(sc, FILE, &opts, None).await)
}

fn failures(o: &Outcome) -> Vec<String> {
    o.failures()
        .map(|v| format!("{} {}: {}", v.kind, v.name, v.detail))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_followed_to_the_new_one() {
    let sc = scenario();
    assert_eq!(sc.topology.master.replicas, 3);
    let Some(o) = run(&sc).await else { return };
    assert_eq!(o.status, Status::Passed, "{:#?}", failures(&o));
    // `elected` resolved to a replica when the kill ran.
    let kill = o.actions.iter().find(|a| a.label.contains("master_kill"));
    let detail = kill.and_then(|a| a.detail.clone()).unwrap_or_default();
    assert!(
        detail.starts_with("replica "),
        "master_kill said {detail:?}"
    );
    let judged = o
        .verdicts
        .iter()
        .find(|v| v.name == "heartbeats_to_elected_master")
        .map(|v| v.detail.clone())
        .unwrap_or_default();
    assert!(
        judged.starts_with("held (") && !judged.starts_with("held (0 "),
        "the invariant judged nothing: {judged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_that_do_not_follow_fail_it() {
    let mut sc = scenario();
    sc.topology.sidecar_args.clear();
    let Some(o) = run(&sc).await else { return };
    assert_eq!(
        o.status,
        Status::Failed,
        "passed without following the master"
    );
    // Heartbeats stay with replica 0's address: either replica 0 is never elected, or
    // it is the one killed; either way the elected master misses them.
    let names = failures(&o);
    assert!(
        names.iter().any(|f| f.contains("elected master accepted")),
        "{names:#?}"
    );
}
