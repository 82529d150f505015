//! `scenarios explore` end to end in virtual time: planted bugs are found and shrunk to
//! a small replayable scenario, the correct sidecar survives a sweep, and one seed range
//! gives the same findings whatever the number of worker threads.
//!
//! The seed ranges are fixed (a seed is a schedule), small, with short runs on few
//! instances, so the whole file takes seconds in a debug build.

use std::path::PathBuf;

use scenarios::explore::generate::Params;
use scenarios::explore::summary::{Shard, Summary};
use scenarios::explore::sweep::{sweep, Budget, SweepOptions};
use scenarios::run::RunOptions;
use scenarios::simrun::run_scenario_sim;
use scenarios::spec::Scenario;
use sim::planted::PlantedBug;

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("explore-test-{name}-{}", std::process::id()))
}

fn options(
    name: &str,
    bug: Option<PlantedBug>,
    seeds: std::ops::Range<u64>,
    jobs: usize,
) -> SweepOptions {
    SweepOptions {
        params: Params {
            max_instances: 3,
            duration_ms: 60_000,
            ..Params::default()
        },
        budget: Budget::Seeds(seeds.end - seeds.start),
        seed_start: seeds.start,
        shard: Shard::WHOLE,
        out: out_dir(name),
        jobs,
        planted_bug: bug,
        shrink_budget: 200,
        progress: false,
    }
}

/// The sweep finds the bug, shrinks it to at most 3 faults and 3 instances, and the
/// shrunk file replays to the same invariant failing (and passes without the bug).
fn finds_and_shrinks(bug: PlantedBug, seeds: std::ops::Range<u64>, invariant: &str) -> Summary {
    let opts = options(bug.name(), Some(bug), seeds, 2);
    let s = sweep(&opts, &run_scenario_sim);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let f = s
        .findings
        .iter()
        .find(|f| f.invariant == invariant)
        .unwrap_or_else(|| panic!("{bug}: no `{invariant}` finding in {:?}", s.findings));
    assert!(f.shrunk.faults <= 3, "{f:?}");
    assert!(f.shrunk.instances <= 3, "{f:?}");
    assert!(f.shrunk.duration_ms <= f.original.duration_ms, "{f:?}");
    let path = opts.out.join(&f.file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("cargo run -p scenarios -- run --sim"),
        "{text}"
    );
    assert!(text.contains(&format!("invariant `{invariant}`")), "{text}");
    let sc = Scenario::parse(&f.file, &text).unwrap();
    let replay = |planted_bug| {
        let o = run_scenario_sim(
            &sc,
            &f.file,
            &RunOptions {
                planted_bug,
                ..RunOptions::default()
            },
        );
        let failed = o.failures().any(|v| v.name == invariant);
        failed
    };
    assert!(replay(Some(bug)), "{bug}: the shrunk file does not replay");
    assert!(
        !replay(None),
        "{bug}: the shrunk file fails without the bug"
    );
    let report = opts
        .out
        .join("findings")
        .join(&sc.name)
        .join("timeline.html");
    assert!(report.is_file(), "{}", report.display());
    std::fs::remove_dir_all(&opts.out).unwrap();
    s
}

#[test]
fn a_keepalive_coupled_to_the_heartbeat_path_is_found() {
    finds_and_shrinks(
        PlantedBug::NoKeepaliveWhileUnhealthy,
        12..15,
        "registered_when_healthy",
    );
}

#[test]
fn a_cache_usage_sent_as_a_percentage_is_found() {
    finds_and_shrinks(PlantedBug::CacheUsageAsPercent, 17..20, "heartbeats_sane");
}

#[test]
fn a_lease_loss_never_noticed_is_found() {
    finds_and_shrinks(
        PlantedBug::IgnoreLeaseNotFound,
        11..14,
        "registered_when_healthy",
    );
}

#[test]
fn the_correct_sidecar_survives_and_a_range_gives_the_same_findings() {
    let a = sweep(&options("clean-a", None, 100..106, 1), &run_scenario_sim);
    assert_eq!(a.schedules, 6);
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    assert!(a.errors.is_empty(), "{:?}", a.errors);
    assert!(!a.coverage.0.is_empty());
    // Two workers, another output directory: the same summary but for the timing.
    let b = sweep(&options("clean-b", None, 100..106, 2), &run_scenario_sim);
    assert_eq!(a.findings_view(), b.findings_view());
    // With findings too (the shrunk files' names and sizes are part of the view).
    let bug = Some(PlantedBug::NoKeepaliveWhileUnhealthy);
    let c = sweep(&options("bug-c", bug, 13..14, 1), &run_scenario_sim);
    let d = sweep(&options("bug-d", bug, 13..14, 2), &run_scenario_sim);
    assert!(!c.findings.is_empty());
    assert_eq!(c.findings_view(), d.findings_view());
    for name in ["clean-a", "clean-b", "bug-c", "bug-d"] {
        let _ = std::fs::remove_dir_all(out_dir(name));
    }
}
