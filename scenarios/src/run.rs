//! Running scenarios in real mode: start the cluster (processes, proxies), play the
//! scenario on it ([`engine::play`]), judge, report; and many scenarios in parallel.
//!
//! Same seed, same schedule: every random choice (proxy jitter, load arrivals, the fake
//! vLLM's token counts) is drawn from generators seeded by the scenario seed, and steps
//! fire at fixed offsets or on conditions. What cannot be fixed is the OS scheduler, so
//! verdicts use deadlines and grace periods, never exact instants.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::capability;
use crate::engine;
use crate::profile::{Profile, Program};
use crate::real_cluster::{ClusterOptions, EtcdChoice, EtcdKind, RealCluster};
use crate::report::{Outcome, Status};
use crate::spec::Scenario;
use crate::timeline::Timeline;

/// How the runner is invoked, as the commands that re-run a scenario print it.
pub const RERUN_COMMAND: &str = "cargo run -p scenarios --";

/// How to run scenarios (by default: each with its seed, on the fake etcd, no report, our
/// sidecar).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Run every scenario with this seed instead of its own (`--seed`).
    pub seed: Option<u64>,
    /// Which etcd to run against (`--etcd`, `--etcd-cluster`).
    pub etcd: EtcdChoice,
    /// Write each scenario's report directory under here (`None`: no report).
    pub report_dir: Option<PathBuf>,
    /// The vllm-sidecar binary (`None`: $VLLM_SIDECAR_BIN, next to this binary, or built).
    pub sidecar_bin: Option<PathBuf>,
    /// Which sidecar runs (real mode), and the capabilities it declares; `None`: our
    /// `vllm-sidecar` (at `sidecar_bin`), every capability.
    pub profile: Option<Arc<Profile>>,
    /// Test-only: a deliberately wrong sidecar configuration.
    pub sidecar_overrides: Vec<(String, String)>,
    /// Test-only, simulation only: a bug planted in every simulated sidecar (see
    /// `sim::planted`), to show that `explore` finds its class of bug.
    pub planted_bug: Option<sim::planted::PlantedBug>,
    /// Simulation only: sample the cluster this often instead of the usual period
    /// (50 ms, 200 ms above 50 instances). `explore` samples every 200 ms.
    pub sample_period: Option<Duration>,
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
        "{RERUN_COMMAND} run {file} --seed {seed} --etcd {}",
        opts.etcd
    );
    let mut outcome = engine::outcome(sc, file, seed, "", rerun);
    if sc.topology.instances > crate::spec::MAX_REAL_INSTANCES {
        return outcome.skip(format!(
            "{} instances: real mode runs at most {} (run it with --sim)",
            sc.topology.instances,
            crate::spec::MAX_REAL_INSTANCES
        ));
    }
    let ours = || Arc::new(Profile::ours(opts.sidecar_bin.clone()));
    let profile = opts.profile.clone().unwrap_or_else(ours);
    if let Some(why) = capability::missing(&sc.needs(), &profile.capabilities) {
        return outcome.skip_lacking(sc, &profile.capabilities, why);
    }
    let kind = match EtcdKind::resolve(sc.topology.etcd, &opts.etcd) {
        Ok(k) => k,
        Err(why) => return outcome.skip(why),
    };
    outcome.etcd = kind.as_str().to_string();
    let say = |m: String| {
        if let Some(p) = &progress {
            p.set_message(m);
        }
    };
    // Our binary is found (or built) once for the run, not at every spawn.
    let profile = match &profile.program {
        Program::OurBinary(None) if starts_sidecars(sc) => match crate::sidecar::locate_binary() {
            Ok(bin) => Arc::new(Profile::ours(Some(bin))),
            Err(e) => return outcome.setup_failed("find the sidecar binary", e),
        },
        _ => profile,
    };
    say("starting cluster".into());
    let timeline = Timeline::new();
    let copts = ClusterOptions {
        etcd: opts.etcd.clone(),
        profile: profile.clone(),
        sidecar_overrides: opts.sidecar_overrides.clone(),
    };
    let start = RealCluster::start(&sc.name, &sc.topology, seed, kind, copts, timeline.clone());
    let mut cluster = match start.await {
        Ok(c) => c,
        Err(e) => {
            let mut o = outcome.setup_failed("start the cluster", e);
            o.wall_ms = started.elapsed().as_millis() as u64;
            return o;
        }
    };
    // The scenario's time starts now that the cluster is up: a slow etcd start eats
    // no step's offset and no grace.
    outcome.setup_ms = timeline.start_clock();
    let period = if sc.topology.instances > 50 { 200 } else { 50 };
    let caps = &profile.capabilities;
    let played = engine::play(sc, &mut cluster, caps, period, &say).await;
    outcome.judge(sc, played, caps);
    say("stopping".into());
    cluster.shutdown().await;
    outcome.wall_ms = started.elapsed().as_millis() as u64;
    outcome.write_report(opts.report_dir.as_deref(), sc, &timeline);
    outcome
}

/// Locate (or build) our sidecar binary once, before any scenario starts, when our
/// sidecar runs (another profile's command is found when the profile is read).
pub fn prepare(
    mut opts: RunOptions,
    list: &[crate::library::Loaded],
) -> Result<RunOptions, String> {
    let ours = opts
        .profile
        .as_ref()
        .is_none_or(|p| p.program == Program::OurBinary(None));
    if ours && opts.sidecar_bin.is_none() && list.iter().any(|l| starts_sidecars(&l.scenario)) {
        opts.sidecar_bin = Some(crate::sidecar::locate_binary()?);
    }
    Ok(opts)
}

/// Whether a scenario may start a sidecar (at start, or by a step).
fn starts_sidecars(sc: &Scenario) -> bool {
    !sc.steps.is_empty() || sc.topology.start_sidecars
}

/// A finished scenario's progress line: status, name, wall seconds to `decimals`
/// places, and why it was skipped.
pub(crate) fn status_line(o: &Outcome, decimals: usize) -> String {
    format!(
        "{:7} {:30} {:>6.decimals$}s  {}",
        o.status.as_str().to_uppercase(),
        o.name,
        o.wall_ms as f64 / 1000.0,
        o.skip_reason.clone().unwrap_or_default()
    )
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
    let jobs = jobs.max(1);
    let sem = Arc::new(tokio::sync::Semaphore::new(jobs));
    let mut order: Vec<(usize, crate::library::Loaded)> =
        list.iter().cloned().enumerate().collect();
    order.sort_by_key(|(_, l)| std::cmp::Reverse(l.scenario.topology.instances));
    let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for (i, l) in order {
        let (sem, opts, multi) = (sem.clone(), opts.clone(), multi.clone());
        let (total, failed) = (total.clone(), failed.clone());
        let handle = tokio::spawn(async move {
            // A big scenario runs alone: it needs the whole machine.
            let heavy = l.scenario.topology.instances > HEAVY_INSTANCES;
            let permits = if heavy { jobs as u32 } else { 1 };
            let _permit = sem.acquire_many_owned(permits).await;
            let bar = multi.insert_before(&total, ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("  {spinner} {prefix:28} {elapsed:>4} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(l.scenario.name.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            let o = run_scenario(&l.scenario, &l.file, &opts, Some(bar.clone())).await;
            if o.status == Status::Failed {
                let f = failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                total.set_message(format!("({f} failed)"));
            }
            bar.finish_and_clear();
            let _ = multi.println(status_line(&o, 1));
            total.inc(1);
            o
        });
        handles.push((i, handle));
    }
    handles.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    for (_, h) in handles {
        match h.await {
            Ok(o) => out.push(o),
            Err(e) => tracing::error!(error = %e, "scenario task panicked"),
        }
    }
    total.finish_and_clear();
    out
}
