//! The sweep: seeds → schedules → virtual-time runs → findings, shrunk and written.
//!
//! Why threads and sorting: every run is synchronous and independent (its own world,
//! its own seed), so `--jobs J` workers take seeds from one counter; results are
//! collected and sorted by seed, so a sweep's summary does not depend on `--jobs` or on
//! which worker ran what. A violation is shrunk by the worker that found it (it is part
//! of that seed's work) and written as a scenario file plus its report directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::coverage::Coverage;
use super::generate::{generate, Params};
use super::recovery_stats::RecoveryStats;
use super::schedule::{dur, Schedule};
use super::shrink::{shrink, Shrunk, Violation};
use super::summary::{ranges, Finding, RunError, Shard, Summary, SweepParams, Timing};
use crate::report::{Outcome, Status};
use crate::run::RunOptions;
use crate::spec::Scenario;
use crate::verdict::VerdictKind;

/// Runs one scenario in virtual time (`simrun::run_scenario_sim`, or a test double).
pub type Runner = dyn Fn(&Scenario, &str, &RunOptions) -> Outcome + Sync;

/// When a sweep stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// This many seeds of the sweep (this shard runs its share).
    Seeds(u64),
    /// Start no new seed after this long.
    Time(Duration),
}

/// Everything a sweep needs.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// What to draw: instances, length, fault kinds, dialect.
    pub params: Params,
    /// When to stop: a number of seeds or a wall time.
    pub budget: Budget,
    /// The sweep's first seed.
    pub seed_start: u64,
    /// Which share of the seeds this process runs.
    pub shard: Shard,
    /// The output directory: `summary.json`, `coverage.json` and `findings/`.
    pub out: PathBuf,
    /// Worker threads (at least one; the results do not depend on it).
    pub jobs: usize,
    /// Test-only: a bug planted in every simulated sidecar.
    pub planted_bug: Option<sim::planted::PlantedBug>,
    /// Runs the shrinker may spend on one finding.
    pub shrink_budget: usize,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

/// What one seed gave.
#[derive(Debug, Default)]
struct SeedResult {
    seed: u64,
    size: super::schedule::Size,
    coverage: Coverage,
    recovery: Vec<crate::recovery::RecoveryCheck>,
    /// The kinds its swarm mix had on (empty under the uniform draw).
    kinds_on: Vec<String>,
    finding: Option<Finding>,
    error: Option<String>,
}

impl SweepOptions {
    fn run_options(&self, report_dir: Option<PathBuf>) -> RunOptions {
        RunOptions {
            report_dir,
            planted_bug: self.planted_bug,
            // The period real and simulated runs use above 50 instances: the
            // invariants' graces are made for it, and sampling is most of a run's cost.
            sample_period: Some(std::time::Duration::from_millis(200)),
            ..RunOptions::default()
        }
    }
}

/// Render, parse and run a schedule.
fn run(
    s: &Schedule,
    runner: &Runner,
    opts: &RunOptions,
    file: &str,
    header: &[String],
) -> Result<(Outcome, String), String> {
    let description = format!(
        "explore seed {}: {} fault(s) on {} instance(s) over {}",
        s.seed,
        s.faults.len(),
        s.topo.instances,
        dur(s.duration_ms)
    );
    let text = s.to_toml(&description, header);
    let sc = Scenario::parse(file, &text).map_err(|e| format!("generated an invalid file: {e}"))?;
    Ok((runner(&sc, file, opts), text))
}

/// The failed invariants of a run.
pub fn violations(o: &Outcome) -> Vec<Violation> {
    o.verdicts
        .iter()
        .filter(|v| v.kind == VerdictKind::Invariant && !v.passed)
        .map(|v| Violation {
            invariant: v.name.clone(),
            detail: v.detail.clone(),
            t_ms: v.first_violation_ms.or(v.t_ms),
            event: v.first_violation_event,
        })
        .collect()
}

/// Why a run says nothing about the invariants (skipped, or its cluster did not start).
/// An action that could not be done (e.g. expiring the lease of an instance that has
/// none at that moment) is not one, nor a sidecar that exited: the run goes on and is
/// judged.
fn run_error(o: &Outcome) -> Option<String> {
    if o.status == Status::Skipped {
        let why = o.skip_reason.as_deref().unwrap_or_default();
        return Some(format!("skipped: {why}"));
    }
    use VerdictKind::{Action, Exit, Invariant};
    o.verdicts
        .iter()
        .find(|v| !v.passed && !matches!(v.kind, Invariant | Action | Exit))
        .map(|v| format!("{} {}: {}", v.kind, v.name, v.detail))
}

/// Fault kind × the sidecar's phase when it hit, from the run's action records
/// (`sidecar_states`, one phase per targeted instance).
pub fn coverage_of(o: &Outcome) -> Coverage {
    let mut c = Coverage::default();
    for r in &o.actions {
        let kind = crate::actions::words::key(&r.action);
        if kind.is_empty() || kind == "load_off" {
            continue;
        }
        for phase in r.sidecar_states.values() {
            c.add(&kind, phase);
        }
    }
    c
}

fn explore_seed(seed: u64, opts: &SweepOptions, runner: &Runner) -> SeedResult {
    let schedule = generate(seed, &opts.params);
    let mut result = SeedResult {
        seed,
        size: schedule.size(),
        kinds_on: schedule
            .mix
            .iter()
            .flat_map(|m| m.kinds.iter().map(|k| k.kind.clone()))
            .collect(),
        ..SeedResult::default()
    };
    let file = format!("explore-{seed}.toml");
    let outcome = match run(&schedule, runner, &opts.run_options(None), &file, &[]) {
        Ok((o, _)) => o,
        Err(e) => {
            result.error = Some(e);
            return result;
        }
    };
    result.coverage = coverage_of(&outcome);
    result.recovery = outcome.recovery_checks.clone();
    let Some(first) = violations(&outcome).into_iter().next() else {
        result.error = run_error(&outcome);
        return result;
    };
    let judge = |cand: &Schedule| match run(cand, runner, &opts.run_options(None), &file, &[]) {
        Ok((o, _)) => violations(&o),
        Err(_) => Vec::new(),
    };
    let shrunk = shrink(&schedule, &first, &judge, opts.shrink_budget);
    match write_finding(opts, runner, &schedule, &first, &shrunk) {
        Ok(f) => result.finding = Some(f),
        Err(e) => result.error = Some(e),
    }
    result
}

/// Write the shrunk scenario (with comments) and its report directory.
fn write_finding(
    opts: &SweepOptions,
    runner: &Runner,
    original: &Schedule,
    first: &Violation,
    shrunk: &Shrunk,
) -> Result<Finding, String> {
    let dir = opts.out.join("findings");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let s = &shrunk.schedule;
    let v = &shrunk.violation;
    let rel = format!("findings/{}.toml", s.name());
    let path = opts.out.join(&rel);
    let mut header = header_lines(opts, original, first, shrunk, &path);
    // With a planted bug: is the finding the bug's? (Does it pass without it?)
    let fails_without_bug = match opts.planted_bug {
        Some(_) => {
            let clean = RunOptions {
                planted_bug: None,
                ..opts.run_options(None)
            };
            let (o, _) = run(s, runner, &clean, &rel, &[])?;
            let fails = violations(&o).iter().any(|x| x.invariant == v.invariant);
            if fails {
                header.push("It ALSO fails without the planted bug: not the bug's doing.".into());
            }
            Some(fails)
        }
        None => None,
    };
    let (_, text) = run(s, runner, &opts.run_options(Some(dir)), &rel, &header)?;
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(Finding {
        seed: original.seed,
        violation: v.clone(),
        original: original.size(),
        shrunk: s.size(),
        file: rel,
        shrink_runs: shrunk.runs,
        fails_without_bug,
        mix: original.mix.clone(),
    })
}

/// The comments at the top of a shrunk scenario: what was found, where it came from,
/// and how to replay it.
fn header_lines(
    opts: &SweepOptions,
    original: &Schedule,
    first: &Violation,
    shrunk: &Shrunk,
    path: &Path,
) -> Vec<String> {
    let v = &shrunk.violation;
    let at = v
        .t_ms
        .map(|t| format!(" at t={:.2}s", t as f64 / 1000.0))
        .unwrap_or_default();
    let planted = opts
        .planted_bug
        .map(|b| format!(" --planted-bug {b}"))
        .unwrap_or_default();
    let (seed, path) = (original.seed, path.display());
    let mut header = vec![
        format!(
            "Found by `scenarios explore`: invariant `{}` violated{at}.",
            v.invariant
        ),
        format!("  {}", v.detail),
        format!("Seed {seed}: {}", explore_command(opts, seed)),
        format!("Original schedule: {}.", original.size()),
        format!(
            "Shrunk ({} runs) to: {}; first seen as: {}",
            shrunk.runs,
            shrunk.schedule.size(),
            first.detail
        ),
        "Replay in virtual time (deterministic, same verdicts every run):".into(),
        format!("  cargo run -p scenarios -- run --sim {path}{planted}"),
        "Replay in real time (real processes; timings differ, may need a few seeds):".into(),
        format!("  cargo run -p scenarios -- run {path}"),
    ];
    if let Some(m) = &original.mix {
        header.push(format!("Drawn by the swarm draw: {}.", m.describe()));
    }
    if let Some(b) = opts.planted_bug {
        header.push(format!(
            "Test-only: found with the planted bug `{b}` (not a bug of the shipped sidecar)."
        ));
    }
    header
}

/// The command that explores exactly this seed again.
fn explore_command(opts: &SweepOptions, seed: u64) -> String {
    let p = &opts.params;
    let mut cmd = format!(
        "cargo run --release -p scenarios -- explore --seed-start {seed} --seeds 1 --instances {} --duration {}",
        p.max_instances,
        dur(p.duration_ms)
    );
    cmd.extend(p.dialect.as_ref().map(|d| format!(" --dialect {d}")));
    cmd.push_str(&format!(" --draw {}", p.draw));
    if p.faults != super::generate::Params::default().faults {
        cmd.push_str(&format!(" --faults {}", p.faults.join(",")));
    }
    cmd.extend(opts.planted_bug.map(|b| format!(" --planted-bug {b}")));
    cmd
}

/// A bar of `seeds` seeds (`None`: as many as the time allows).
fn progress_bar(opts: &SweepOptions, seeds: Option<u64>) -> ProgressBar {
    let target = if opts.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(seeds, target);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} seeds {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("0 violations");
    bar
}

/// Run a sweep; answers its summary (also written to `out/summary.json`).
pub fn sweep(opts: &SweepOptions, runner: &Runner) -> Summary {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let found = AtomicUsize::new(0);
    let first_finding_ms = AtomicU64::new(u64::MAX);
    let results: Mutex<Vec<SeedResult>> = Mutex::new(Vec::new());
    let seeds = match opts.budget {
        Budget::Seeds(n) => Some(opts.shard.len_of(n)),
        Budget::Time(_) => None,
    };
    let bar = progress_bar(opts, seeds);
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1) {
            scope.spawn(|| loop {
                if matches!(opts.budget, Budget::Time(t) if started.elapsed() >= t) {
                    return;
                }
                let j = next.fetch_add(1, Ordering::Relaxed);
                if seeds.is_some_and(|n| j >= n) {
                    return;
                }
                let r = explore_seed(opts.shard.seed(opts.seed_start, j), opts, runner);
                if let Some(f) = &r.finding {
                    if f.fails_without_bug != Some(true) {
                        let t = started.elapsed().as_millis() as u64;
                        first_finding_ms.fetch_min(t, Ordering::Relaxed);
                    }
                    let n = found.fetch_add(1, Ordering::Relaxed) + 1;
                    bar.set_message(format!("{n} violation(s)"));
                }
                bar.inc(1);
                crate::lock(&results).push(r);
            });
        }
    });
    bar.finish_and_clear();
    let mut results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    results.sort_by_key(|r| r.seed);
    let mut s = summarize(opts, results, started.elapsed());
    let first = first_finding_ms.load(Ordering::Relaxed);
    s.timing.first_finding_ms = (first != u64::MAX).then_some(first);
    s
}

fn summarize(opts: &SweepOptions, results: Vec<SeedResult>, wall: Duration) -> Summary {
    let mut coverage = Coverage::default();
    let mut recovery = RecoveryStats::default();
    let mut kinds_on = std::collections::BTreeMap::new();
    let mut findings = Vec::new();
    let mut errors = Vec::new();
    let (mut simulated_ms, mut instance_ms) = (0u64, 0u64);
    for r in &results {
        coverage.merge(&r.coverage);
        recovery.add(r.seed, &r.recovery);
        for k in &r.kinds_on {
            *kinds_on.entry(k.clone()).or_default() += 1;
        }
        simulated_ms += r.size.duration_ms;
        instance_ms += r.size.duration_ms * r.size.instances as u64;
        findings.extend(r.finding.clone());
        errors.extend(r.error.iter().map(|e| RunError {
            seed: r.seed,
            error: e.clone(),
        }));
    }
    let n = results.len() as u64;
    let minutes = wall.as_secs_f64() / 60.0;
    Summary {
        params: SweepParams {
            draws: opts.params.clone(),
            planted_bug: opts.planted_bug.map(|b| b.to_string()),
            seed_start: opts.seed_start,
        },
        shards: vec![opts.shard],
        seeds: ranges(results.iter().map(|r| r.seed).collect()),
        schedules: n,
        simulated_ms,
        instance_ms,
        findings,
        errors,
        coverage,
        recovery,
        kinds_on,
        timing: Timing {
            wall_ms: wall.as_millis() as u64,
            jobs: opts.jobs.max(1),
            schedules_per_minute: if minutes > 0.0 {
                n as f64 / minutes
            } else {
                0.0
            },
            first_finding_ms: None,
        },
    }
}

/// Write `summary.json` and `coverage.json` into `dir`.
pub fn write_summary(dir: &Path, s: &Summary) -> Result<(), String> {
    fn write(dir: &Path, name: &str, v: &impl serde::Serialize) -> Result<(), String> {
        let p = dir.join(name);
        let text = serde_json::to_string_pretty(v).unwrap_or_default();
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    write(dir, "summary.json", s)?;
    write(dir, "coverage.json", &s.coverage)
}
