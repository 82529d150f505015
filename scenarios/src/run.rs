//! Running one scenario: start its cluster, play its timeline, sample the cluster all
//! along, judge, report.
//!
//! Same seed, same schedule: every random choice (proxy jitter, load arrivals, the fake
//! vLLM's token counts) is drawn from generators seeded by the scenario seed, and steps
//! fire at fixed offsets or on conditions. What cannot be fixed is the OS scheduler, so
//! verdicts use deadlines and grace periods, never exact instants.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::cluster::{Cluster, ClusterOptions, EtcdChoice, EtcdKind};
use crate::observe::Sample;
use crate::report::Outcome;
use crate::spec::{Condition, Scenario};
use crate::timeline::Timeline;
use crate::verdict::{self, ActionRecord, Ctx, Verdict};

/// How to run scenarios.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub seed: Option<u64>,
    pub etcd: EtcdChoice,
    pub report_dir: Option<PathBuf>,
    pub sidecar_bin: Option<PathBuf>,
    /// Test-only: a deliberately wrong sidecar configuration.
    pub sidecar_overrides: Vec<(String, String)>,
    /// How the runner was invoked, to print the exact re-run command.
    pub command: String,
    /// Test-only, simulation only: a bug planted in every simulated sidecar (see
    /// `sim::planted`), to show that `explore` finds its class of bug.
    pub planted_bug: Option<sim::planted::PlantedBug>,
    /// Simulation only: sample the cluster this often instead of the usual period
    /// (50 ms, 200 ms above 50 instances). `explore` samples every 200 ms.
    pub sample_period: Option<Duration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seed: None,
            etcd: EtcdChoice::Fake,
            report_dir: None,
            sidecar_bin: None,
            sidecar_overrides: Vec::new(),
            command: "cargo run -p scenarios --".into(),
            planted_bug: None,
            sample_period: None,
        }
    }
}

/// Run one scenario to its verdicts. `file` names it (a path, or `library/<name>.toml`).
pub async fn run_scenario(
    sc: &Scenario,
    file: &str,
    opts: &RunOptions,
    progress: Option<ProgressBar>,
) -> Outcome {
    let started = Instant::now();
    let seed = opts.seed.unwrap_or(sc.seed);
    let rerun = format!(
        "{} run {} --seed {seed} --etcd {}",
        opts.command, file, opts.etcd
    );
    let mut outcome = Outcome {
        name: sc.name.clone(),
        file: file.to_string(),
        seed,
        status: "passed".into(),
        skip_reason: None,
        wall_ms: 0,
        instances: sc.topology.instances,
        etcd: String::new(),
        verdicts: Vec::new(),
        recoveries: Vec::new(),
        actions: Vec::new(),
        rerun,
        samples: Vec::new(),
        episodes: Vec::new(),
    };
    if sc.topology.instances > crate::spec::MAX_REAL_INSTANCES {
        outcome.status = "skipped".into();
        outcome.skip_reason = Some(format!(
            "{} instances: real mode runs at most {} (run it with --sim)",
            sc.topology.instances,
            crate::spec::MAX_REAL_INSTANCES
        ));
        return outcome;
    }
    let kind = match EtcdKind::resolve(sc.topology.etcd, &opts.etcd) {
        Ok(k) => k,
        Err(why) => {
            outcome.status = "skipped".into();
            outcome.skip_reason = Some(why);
            return outcome;
        }
    };
    outcome.etcd = kind.as_str().to_string();
    let set_msg = |m: String| {
        if let Some(p) = &progress {
            p.set_message(m);
        }
    };
    set_msg("starting cluster".into());
    let timeline = Timeline::new();
    let copts = ClusterOptions {
        etcd: opts.etcd.clone(),
        sidecar_bin: opts.sidecar_bin.clone(),
        sidecar_overrides: opts.sidecar_overrides.clone(),
    };
    let cluster =
        match Cluster::start(&sc.name, &sc.topology, seed, kind, copts, timeline.clone()).await {
            Ok(c) => c,
            Err(e) => {
                outcome.status = "failed".into();
                outcome.verdicts.push(Verdict {
                    kind: "setup".into(),
                    name: "start the cluster".into(),
                    passed: false,
                    t_ms: None,
                    first_violation_ms: None,
                    detail: e,
                });
                outcome.wall_ms = started.elapsed().as_millis() as u64;
                return outcome;
            }
        };
    let addrs = cluster.addrs();
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = mock_kit::Shutdown::new();
    let period = Duration::from_millis(if sc.topology.instances > 50 { 200 } else { 50 });
    let observer = tokio::spawn(observe_loop(
        cluster.clone(),
        samples.clone(),
        period,
        stop.clone(),
    ));

    let mut records: Vec<ActionRecord> = Vec::new();
    let mut verdicts: Vec<Verdict> = Vec::new();
    let n_steps = sc.steps.len();
    for (i, step) in sc.steps.iter().enumerate() {
        let label = step.name.clone().unwrap_or_else(|| step_label(step));
        set_msg(format!("step {}/{n_steps}: {label}", i + 1));
        if let Some(at) = step.at {
            let now = timeline.now();
            if at.as_ms() > now {
                tokio::time::sleep(Duration::from_millis(at.as_ms() - now)).await;
            }
        }
        let cursor = timeline.len();
        let from = lock(&samples).len();
        let within = step.within.map(|d| d.0).unwrap_or(Duration::from_secs(10));
        let deadline = tokio::time::Instant::now() + within;
        if let Some(cond) = step.when.as_ref().or(step.expect.as_ref()) {
            let met = wait_for(
                cond, sc, &samples, &timeline, &cluster, &addrs, from, cursor, deadline,
            )
            .await;
            let is_await = step.expect.is_some();
            let broke = match (step.hold, met) {
                (Some(hold), Some(_)) => Some(
                    hold_for(
                        cond, sc, &samples, &timeline, &cluster, &addrs, from, cursor, hold.0,
                    )
                    .await,
                ),
                _ => None,
            };
            let v = verdict::step_verdict(
                if is_await { "await" } else { "when" },
                format!("step {}: {label}", i + 1),
                cond,
                within,
                met,
                timeline.now(),
                step.hold.zip(broke),
            );
            let failed_when = !is_await && !v.passed;
            verdicts.push(v);
            if failed_when {
                continue;
            }
        }
        if let Some(action) = &step.action {
            let t_ms = timeline.now();
            ActionRecord::announce(&timeline, i + 1, &label, action);
            let result = action.apply_real(&mut *cluster.lock().await).await;
            let (record, failed) =
                ActionRecord::done(i + 1, t_ms, label, action, result, Default::default());
            verdicts.extend(failed);
            records.push(record);
        }
    }
    // One more sample period so the last step's effects are observed.
    tokio::time::sleep(period * 2).await;
    stop.trigger();
    let _ = observer.await;
    let end_ms = timeline.now();
    let samples = std::mem::take(&mut *lock(&samples));
    let eps = verdict::episodes(sc, &records, end_ms);
    verdicts.extend(crate::invariants::check(sc, &samples, &eps));
    outcome.recoveries = verdict::recoveries(&samples, &eps);
    outcome.verdicts = verdicts;
    outcome.actions = records;
    outcome.samples = samples;
    outcome.episodes = eps;
    if outcome.verdicts.iter().any(|v| !v.passed) {
        outcome.status = "failed".into();
    }
    set_msg("stopping".into());
    match Arc::try_unwrap(cluster) {
        Ok(c) => c.into_inner().shutdown().await,
        Err(_) => tracing::warn!("cluster still shared at shutdown"),
    }
    outcome.wall_ms = started.elapsed().as_millis() as u64;
    if let Some(dir) = &opts.report_dir {
        let d = dir.join(&sc.name);
        if let Err(e) = crate::report::write_dir(&d, sc, &outcome, Some(&timeline)) {
            tracing::warn!(dir = %d.display(), error = %e, "cannot write the report");
        }
    }
    outcome
}

async fn observe_loop(
    cluster: Arc<tokio::sync::Mutex<Cluster>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    period: Duration,
    stop: mock_kit::Shutdown,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait() => return,
            _ = tick.tick() => {}
        }
        let s = cluster.lock().await.observe().await;
        lock(&samples).push(s);
    }
}

#[allow(clippy::too_many_arguments)]
async fn check(
    cond: &Condition,
    sc: &Scenario,
    samples: &Mutex<Vec<Sample>>,
    timeline: &Timeline,
    cluster: &tokio::sync::Mutex<Cluster>,
    addrs: &[String],
    from: usize,
    cursor: usize,
) -> Option<u64> {
    let routed = if matches!(cond, Condition::RoutedShare { .. }) {
        cluster.lock().await.routed()
    } else {
        Vec::new()
    };
    let g = lock(samples);
    let ctx = Ctx {
        sc,
        samples: &g,
        from,
        timeline,
        cursor,
        routed: &routed,
        addrs,
    };
    if g.len() > from && verdict::holds(cond, &ctx) {
        g.last().map(|s| s.t_ms)
    } else {
        None
    }
}

/// Poll until the condition holds (answers the time) or the deadline passes.
#[allow(clippy::too_many_arguments)]
async fn wait_for(
    cond: &Condition,
    sc: &Scenario,
    samples: &Mutex<Vec<Sample>>,
    timeline: &Timeline,
    cluster: &tokio::sync::Mutex<Cluster>,
    addrs: &[String],
    from: usize,
    cursor: usize,
    deadline: tokio::time::Instant,
) -> Option<u64> {
    loop {
        if let Some(t) = check(cond, sc, samples, timeline, cluster, addrs, from, cursor).await {
            return Some(t);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Check the condition keeps holding for `hold`; answers when it broke, if it did.
#[allow(clippy::too_many_arguments)]
async fn hold_for(
    cond: &Condition,
    sc: &Scenario,
    samples: &Mutex<Vec<Sample>>,
    timeline: &Timeline,
    cluster: &tokio::sync::Mutex<Cluster>,
    addrs: &[String],
    from: usize,
    cursor: usize,
    hold: Duration,
) -> Option<u64> {
    let end = tokio::time::Instant::now() + hold;
    let mut seen = lock(samples).len();
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let n = lock(samples).len();
        if n == seen {
            continue;
        }
        seen = n;
        if check(cond, sc, samples, timeline, cluster, addrs, from, cursor)
            .await
            .is_none()
        {
            return Some(timeline.now());
        }
    }
    None
}

pub(crate) fn step_label(step: &crate::spec::Step) -> String {
    if let Some(c) = &step.expect {
        return format!("await {}", verdict::describe(c));
    }
    match &step.action {
        Some(a) => a.describe(),
        None => "step".into(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Scenarios with more instances than this run alone.
pub const HEAVY_INSTANCES: usize = 50;

/// Run many scenarios, at most `jobs` at once (each on its own ports), biggest first so
/// the longest one does not start last. Outcomes come back in input order.
pub async fn run_many(
    list: &[crate::library::Loaded],
    opts: &RunOptions,
    jobs: usize,
    show_progress: bool,
) -> Vec<Outcome> {
    use indicatif::{MultiProgress, ProgressDrawTarget, ProgressStyle};
    let multi = MultiProgress::with_draw_target(if show_progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let total = multi.add(ProgressBar::new(list.len() as u64));
    total.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} scenarios {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let sem = Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by_key(|i| {
        std::cmp::Reverse(
            list.get(*i)
                .map(|l| l.scenario.topology.instances)
                .unwrap_or(0),
        )
    });
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for i in order {
        let Some(l) = list.get(i).cloned() else {
            continue;
        };
        let (sem, opts, multi, total, failed) = (
            sem.clone(),
            opts.clone(),
            multi.clone(),
            total.clone(),
            failed.clone(),
        );
        handles.push((
            i,
            tokio::spawn(async move {
                // A big scenario runs alone: it needs the whole machine.
                let heavy = l.scenario.topology.instances > HEAVY_INSTANCES;
                let _permit = if heavy {
                    sem.acquire_many_owned(jobs.max(1) as u32).await
                } else {
                    sem.acquire_many_owned(1).await
                };
                let bar = multi.insert_before(&total, ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix:28} {elapsed:>4} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(l.scenario.name.clone());
                bar.enable_steady_tick(Duration::from_millis(200));
                let o = run_scenario(&l.scenario, &l.file, &opts, Some(bar.clone())).await;
                if o.status == "failed" {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                bar.finish_and_clear();
                let _ = multi.println(format!(
                    "{:7} {:30} {:>6.1}s  {}",
                    o.status.to_uppercase(),
                    o.name,
                    o.wall_ms as f64 / 1000.0,
                    o.skip_reason.clone().unwrap_or_default()
                ));
                total.inc(1);
                let f = failed.load(std::sync::atomic::Ordering::Relaxed);
                if f > 0 {
                    total.set_message(format!("({f} failed)"));
                }
                o
            }),
        ));
    }
    let mut out: Vec<(usize, Outcome)> = Vec::new();
    for (i, h) in handles {
        match h.await {
            Ok(o) => out.push((i, o)),
            Err(e) => tracing::error!(error = %e, "scenario task panicked"),
        }
    }
    total.finish_and_clear();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}
