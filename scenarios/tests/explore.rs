//! `scenarios explore` end to end in virtual time: planted bugs are found and shrunk to
//! a small replayable scenario, the correct sidecar survives a sweep, and one seed range
//! gives the same findings whatever the number of worker threads.
//!
//! The seed ranges are fixed (a seed is a schedule), small, with short runs on few
//! instances, so the whole file takes seconds in a debug build.

use std::path::PathBuf;

use scenarios::explore::generate::{generate, Params};
use scenarios::explore::summary::{Shard, Summary, Timing};
use scenarios::explore::swarm::Draw;
use scenarios::explore::sweep::{sweep, Budget, SweepOptions};
use scenarios::run::RunOptions;
use scenarios::simrun::run_scenario_sim;
use scenarios::spec::Scenario;
use sim::planted::PlantedBug;

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("explore-test-{name}-{}", std::process::id()))
}

/// All of a summary but its timing: what two runs of the same seeds must agree on.
fn findings_view(s: &Summary) -> Summary {
    Summary {
        timing: Timing::default(),
        ..s.clone()
    }
}

/// The seed ranges below were picked under the uniform draw; the swarm draw has tests
/// of its own.
fn options(
    name: &str,
    bug: Option<PlantedBug>,
    seeds: std::ops::Range<u64>,
    jobs: usize,
) -> SweepOptions {
    options_drawn(name, bug, seeds, jobs, Draw::Uniform)
}

fn options_drawn(
    name: &str,
    bug: Option<PlantedBug>,
    seeds: std::ops::Range<u64>,
    jobs: usize,
    draw: Draw,
) -> SweepOptions {
    SweepOptions {
        params: Params {
            max_instances: 3,
            duration_ms: 60_000,
            draw,
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
        .find(|f| f.violation.invariant == invariant)
        .unwrap_or_else(|| panic!("{bug}: no `{invariant}` finding in {:?}", s.findings));
    assert!(f.shrunk.faults <= 3, "{f:?}");
    assert!(f.shrunk.instances <= 3, "{f:?}");
    assert!(f.shrunk.duration_ms <= f.original.duration_ms, "{f:?}");
    assert_eq!(f.fails_without_bug, Some(false), "{f:?}");
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
        9..12,
        "registered_when_healthy",
    );
}

#[test]
fn a_cache_usage_sent_as_a_percentage_is_found() {
    finds_and_shrinks(PlantedBug::CacheUsageAsPercent, 18..21, "heartbeats_sane");
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
fn a_lease_left_to_expire_on_shutdown_is_found() {
    finds_and_shrinks(PlantedBug::NoRevokeOnShutdown, 14..17, "revoked_on_stop");
}

/// Judged at every change, the first heartbeat of the lost incarnation accepted after
/// a pause past the lease is seen at once (before the 409s that follow it pile up).
#[test]
fn heartbeats_of_a_lost_incarnation_are_found() {
    finds_and_shrinks(
        PlantedBug::HeartbeatAfterLeaseLost,
        111..114,
        "no_stale_heartbeat_accepted",
    );
}

/// A recovery that is only slow (the key back at once, heartbeats a minute late) breaks
/// no other invariant: the recovery bound finds it, and its shrunk file replays.
#[test]
fn a_recovery_that_is_only_slow_is_found() {
    let s = finds_and_shrinks(
        PlantedBug::HeartbeatsHeldAfterReregister,
        12..13,
        "recovers_within_bound",
    );
    // Its recovery times are in the summary, the late one counted apart.
    assert!(
        s.recovery.0.values().any(|k| k.not_recovered > 0),
        "{:?}",
        s.recovery
    );
    assert!(s.recovery.0.contains_key("start_up"), "{:?}", s.recovery);
}

/// A swarm sweep is as deterministic as a uniform one; each finding says which kinds its
/// seed had on, in the summary and in its file.
#[test]
fn swarm_findings_name_their_mix_and_repeat_whatever_the_jobs() {
    let bug = Some(PlantedBug::IgnoreLeaseNotFound);
    let one = options_drawn("swarm-1", bug, 13..14, 1, Draw::Swarm);
    let a = sweep(&one, &run_scenario_sim);
    let b = sweep(
        &options_drawn("swarm-2", bug, 13..14, 2, Draw::Swarm),
        &run_scenario_sim,
    );
    assert_eq!(findings_view(&a), findings_view(&b));
    let f = a
        .findings
        .first()
        .expect("seed 13 is a finding under the swarm draw");
    let mix = f.mix.as_ref().expect("a swarm finding records its mix");
    assert_eq!(Some(mix), generate(13, &one.params).mix.as_ref());
    let text = std::fs::read_to_string(one.out.join(&f.file)).unwrap();
    assert!(
        text.contains("Drawn by the swarm draw: fault rate"),
        "{text}"
    );
    assert!(text.contains("--draw swarm"), "{text}");
    for name in ["swarm-1", "swarm-2"] {
        let _ = std::fs::remove_dir_all(out_dir(name));
    }
}

#[test]
fn a_clock_that_stops_while_paused_is_found() {
    finds_and_shrinks(
        PlantedBug::ClockStopsWhilePaused,
        38..41,
        "no_stale_heartbeat_accepted",
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
    assert_eq!(findings_view(&a), findings_view(&b));
    // With findings too (the shrunk files' names and sizes are part of the view).
    let bug = Some(PlantedBug::NoKeepaliveWhileUnhealthy);
    let c = sweep(&options("bug-c", bug, 10..11, 1), &run_scenario_sim);
    let d = sweep(&options("bug-d", bug, 10..11, 2), &run_scenario_sim);
    assert!(!c.findings.is_empty());
    assert_eq!(findings_view(&c), findings_view(&d));
    for name in ["clean-a", "clean-b", "bug-c", "bug-d"] {
        let _ = std::fs::remove_dir_all(out_dir(name));
    }
}

/// The command line: bad flags exit 2 with one line; shards of a sweep merge into the
/// whole; exit 1 when something was found, 0 when not.
#[test]
fn the_command_line_shards_merges_and_exits_as_documented() {
    let bin = env!("CARGO_BIN_EXE_scenarios");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    for bad in [
        vec!["explore", "--shard", "3/2"],
        vec!["explore", "--faults", "link,nope"],
        vec!["explore", "--seeds", "5", "--time", "1s"],
        vec!["explore", "--planted-bug", "nope"],
        vec!["explore", "--dialect", "v9"],
        vec!["explore", "--draw", "zipf"],
    ] {
        let out = run(&bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }
    let root = out_dir("cli");
    let common = [
        "--instances",
        "3",
        "--duration",
        "60s",
        "--seed-start",
        "9",
        "--seeds",
        "3",
        "--jobs",
        "1",
        "--planted-bug",
        "no_keepalive_while_unhealthy",
        "--draw",
        "uniform",
    ];
    for k in 0..2 {
        let out_k = root.join(format!("shard-{k}"));
        let shard = format!("{k}/2");
        let mut args = vec!["explore", "--shard", &shard, "--out"];
        let out_s = out_k.to_str().unwrap().to_string();
        args.push(&out_s);
        args.extend(common);
        let out = run(&args);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    }
    let merged = root.join("merged");
    let out = run(&[
        "explore",
        "merge",
        root.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Seed 10 of this range is a known finding (see the test above).
    assert_eq!(out.status.code(), Some(1), "{text}");
    let s: Summary =
        serde_json::from_str(&std::fs::read_to_string(merged.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s.seeds, vec![(9, 11)]);
    assert_eq!(s.schedules, 3);
    assert!(s.findings.iter().any(|f| f.seed == 10), "{text}");
    // The merged recovery times, printed per kind and kept in the JSON.
    assert!(
        text.contains("P99 ms") && text.contains("start_up"),
        "{text}"
    );
    assert!(s.recovery.0.values().map(|k| k.n()).sum::<u64>() > 0);
    // A clean range exits 0.
    let clean = root.join("clean");
    let out = run(&[
        "explore",
        "--instances",
        "3",
        "--duration",
        "60s",
        "--seed-start",
        "100",
        "--seeds",
        "2",
        "--out",
        clean.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let _ = std::fs::remove_dir_all(&root);
}
