//! Each scenario must fail when the behaviour it checks is broken. These run a few library
//! scenarios against a deliberately wrong sidecar configuration and assert they FAIL,
//! and on the verdict that names the broken behaviour.

use scenarios::library;
use scenarios::report::Outcome;
use scenarios::run::{run_scenario, RunOptions};

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
        threshold.status, "failed",
        "vllm-dies passed with --health-fail-threshold 1000"
    );
    assert!(
        failed_on(&threshold, "key revoked after 3 failed probes"),
        "{}",
        show(&threshold)
    );

    assert_eq!(ttl.status, "failed", "sigkill passed with --lease-ttl 30");
    assert!(failed_on(&ttl, "key gone within TTL"), "{}", show(&ttl));

    assert_eq!(
        token.status, "failed",
        "token-rotation passed with a wrong token"
    );
    assert!(
        failed_on(&token, "heartbeat(s) accepted"),
        "{}",
        show(&token)
    );

    assert_eq!(
        keepalive.status, "failed",
        "happy-path passed with keepalive > TTL"
    );
    assert!(
        keepalive
            .failures()
            .any(|v| v.kind == "await" && v.detail.contains("ACTIVE")),
        "{}",
        show(&keepalive)
    );
}
