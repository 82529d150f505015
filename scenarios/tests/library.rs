//! The whole built-in library, end to end: every scenario against the embedded mock
//! cluster and the real `vllm-sidecar` binary, in parallel, each must pass.
//!
//! This is what `cargo run -p scenarios -- run` does; a failure prints each failed verdict
//! and the command that re-runs the scenario.

use scenarios::library;
use scenarios::run::{run_many, RunOptions};

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
        .filter(|o| o.status == "passed")
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
