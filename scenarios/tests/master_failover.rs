//! Master replicas in real mode: three in-process fake masters elect one through the
//! fake etcd, the elected one is killed, and the real `vllm-sidecar` processes, which
//! follow the MASTER key, heartbeat to the new master (`library/master-failover.toml`);
//! a killed replica starts again on its address (`master-replica-restart-real.toml`).
//!
//! And the other half: the same scenario with sidecars that do not follow the master
//! fails, on the verdicts that name it. Skipped (with the reason) where the sidecar
//! binary cannot be found or built.

use scenarios::report::{Outcome, Status};
use scenarios::run::{run_scenario, RunOptions};
use scenarios::spec::Scenario;

const FILE: &str = "library/master-failover.toml";
const RESTART_FILE: &str = "tests/data/master-replica-restart-real.toml";

fn scenario(file: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).expect("the scenario file is readable");
    Scenario::parse(file, &text).expect("the scenario parses")
}

/// Run `sc` in real mode against the fake etcd; `None` where no sidecar binary exists.
async fn run(sc: &Scenario, file: &str) -> Option<Outcome> {
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
    Some(run_scenario(sc, file, &opts, None).await)
}

fn failures(o: &Outcome) -> Vec<String> {
    o.failures()
        .map(|v| format!("{} {}: {}", v.kind, v.name, v.detail))
        .collect()
}

/// `heartbeats_to_elected_master` held, and judged some samples (a run too short
/// for the follow window to pass would show nothing).
fn assert_judged(o: &Outcome) {
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
async fn a_killed_master_is_followed_to_the_new_one() {
    let sc = scenario(FILE);
    assert_eq!(sc.topology.master.replicas, 3);
    let Some(o) = run(&sc, FILE).await else {
        return;
    };
    assert_eq!(o.status, Status::Passed, "{:#?}", failures(&o));
    // `elected` resolved to a replica when the kill ran.
    let kill = o.actions.iter().find(|a| a.label.contains("master_kill"));
    let detail = kill.and_then(|a| a.detail.clone()).unwrap_or_default();
    assert!(
        detail.starts_with("replica "),
        "master_kill said {detail:?}"
    );
    assert_judged(&o);
}

/// A killed replica started again listens where it did (the sidecars' proxies lead
/// there), runs for master, and takes the heartbeats once it is the only one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_starts_again_on_its_address() {
    let sc = scenario(RESTART_FILE);
    let Some(o) = run(&sc, RESTART_FILE).await else {
        return;
    };
    assert_eq!(o.status, Status::Passed, "{:#?}", failures(&o));
    assert!(o.actions.iter().all(|a| a.error.is_none()));
    assert_judged(&o);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_that_do_not_follow_fail_it() {
    let mut sc = scenario(FILE);
    sc.topology.sidecar_args.clear();
    let Some(o) = run(&sc, FILE).await else {
        return;
    };
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
