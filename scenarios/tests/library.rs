//! The whole built-in library, end to end: every scenario against the embedded mock
//! cluster and the real `vllm-sidecar` binary, in parallel, each must pass.
//!
//! This is what `cargo run -p scenarios -- run` does; a failure prints each failed verdict
//! and the command that re-runs the scenario.
//!
//! And the other half of the claim: each scenario must fail when the behaviour it checks is
//! broken. `mutated_sidecars_fail_their_scenarios` runs a few library scenarios against a
//! deliberately wrong sidecar configuration and asserts they FAIL, on the verdict that names
//! the broken behaviour. (Both tests are in one file so they run concurrently.)

use scenarios::library;
use scenarios::report::{Outcome, Status};
use scenarios::run::{run_many, run_scenario, RunOptions};
use scenarios::verdict::VerdictKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_scenario_passes() {
    let list = library::builtin().expect("the built-in library parses");
    assert!(
        list.len() >= 16,
        "the library has {} scenarios, want at least 16",
        list.len()
    );
    let report = std::env::temp_dir().join(format!("scenarios-test-{}", std::process::id()));
    let opts = RunOptions {
        report_dir: Some(report.clone()),
        sidecar_bin: Some(scenarios::sidecar::locate_binary().expect("vllm-sidecar binary")),
        ..RunOptions::default()
    };
    let started = std::time::Instant::now();
    let outcomes = run_many(&list, &opts, 8, false).await;
    let wall = started.elapsed();
    let mut failed = Vec::new();
    for o in &outcomes {
        eprintln!(
            "{:8} {:30} {:>6.1}s {:>4} instances {}",
            o.status,
            o.name,
            o.wall_ms as f64 / 1000.0,
            o.instances,
            o.skip_reason.clone().unwrap_or_default()
        );
        if !o.passed() {
            let why: Vec<String> = o
                .failures()
                .map(|v| format!("    {} {}: {}", v.kind, v.name, v.detail))
                .collect();
            failed.push(format!(
                "{}:\n{}\n    re-run: {}",
                o.name,
                why.join("\n"),
                o.rerun
            ));
        }
    }
    let largest = outcomes
        .iter()
        .filter(|o| o.status == Status::Passed)
        .map(|o| o.instances)
        .max()
        .unwrap_or(0);
    eprintln!("library: {} scenarios in {:.1}s wall, largest passing held {largest} instances; reports in {}", outcomes.len(), wall.as_secs_f64(), report.display());
    assert_eq!(outcomes.len(), list.len());
    assert!(
        failed.is_empty(),
        "failed scenarios:\n{}",
        failed.join("\n")
    );
    let _ = std::fs::remove_dir_all(&report);
}

async fn run_mutated(name: &str, overrides: &[(&str, &str)]) -> Outcome {
    let l = library::load(&[name.to_string()])
        .expect("built-in")
        .remove(0);
    let opts = RunOptions {
        sidecar_bin: Some(scenarios::sidecar::locate_binary().expect("vllm-sidecar binary")),
        sidecar_overrides: overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..RunOptions::default()
    };
    run_scenario(&l.scenario, &l.file, &opts, None).await
}

fn failed_on(o: &Outcome, needle: &str) -> bool {
    o.failures()
        .any(|v| v.name.contains(needle) || v.detail.contains(needle))
}

fn show(o: &Outcome) -> String {
    o.failures()
        .map(|v| format!("{} {}: {}", v.kind, v.name, v.detail))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_sidecars_fail_their_scenarios() {
    let (threshold, ttl, token, keepalive) = tokio::join!(
        // A sidecar that never gives up on a dead vLLM: the key must not stay.
        run_mutated("vllm-dies", &[("--health-fail-threshold", "1000")]),
        // A lease far longer than the scenario's TTL: a SIGKILLed sidecar's key outlives it.
        run_mutated("sigkill", &[("--lease-ttl", "30")]),
        // The wrong internal token: heartbeats are refused.
        run_mutated("token-rotation", &[("--internal-token", "not-the-token")]),
        // Keepalive slower than the lease TTL: the sidecar must refuse to run at all.
        run_mutated("happy-path", &[("--keepalive-interval", "5")]),
    );
    assert_eq!(
        threshold.status,
        Status::Failed,
        "vllm-dies passed with --health-fail-threshold 1000"
    );
    assert!(
        failed_on(&threshold, "key revoked after 3 failed probes"),
        "{}",
        show(&threshold)
    );

    assert_eq!(
        ttl.status,
        Status::Failed,
        "sigkill passed with --lease-ttl 30"
    );
    assert!(failed_on(&ttl, "key gone within TTL"), "{}", show(&ttl));

    assert_eq!(
        token.status,
        Status::Failed,
        "token-rotation passed with a wrong token"
    );
    assert!(
        failed_on(&token, "heartbeat(s) accepted"),
        "{}",
        show(&token)
    );

    assert_eq!(
        keepalive.status,
        Status::Failed,
        "happy-path passed with keepalive > TTL"
    );
    // The sidecar refused its flags: the first failing verdict says it exited, with
    // its code and its own message, before the await that then timed out.
    let first = keepalive.failures().next().expect("a failure");
    assert_eq!(first.kind, VerdictKind::Exit, "{}", show(&keepalive));
    assert!(
        first.detail.contains("exited with code 2")
            && first
                .detail
                .contains("must be greater than --keepalive-interval"),
        "{}",
        show(&keepalive)
    );
    assert!(
        keepalive
            .failures()
            .any(|v| v.kind == VerdictKind::Await && v.detail.contains("ACTIVE")),
        "{}",
        show(&keepalive)
    );
}
