//! Running one scenario in virtual time (`scenarios run --sim`): the same steps, awaits,
//! invariants, verdicts and report files as [`crate::run`], on a [`SimCluster`].
//!
//! Why a loop of its own rather than the real runner with a fake clock: here the runner
//! *is* the clock. It moves the world forward one sample period at a time, samples the
//! cluster at exact virtual instants and judges the same conditions on those samples,
//! so a run is a pure function of the scenario and its seed: `events.jsonl` is the same
//! bytes on every run and every machine.

use std::time::{Duration, Instant};

use crate::dur::Dur;
use crate::observe::Sample;
use crate::report::Outcome;
use crate::run::RunOptions;
use crate::sim_cluster::{self, SimCluster};
use crate::spec::{Condition, Scenario};
use crate::timeline::Timeline;
use crate::verdict::{self, ActionRecord, Ctx, Verdict};

/// The runner's state: the cluster, the samples so far and the next sample's time.
struct Clock {
    cluster: SimCluster,
    samples: Vec<Sample>,
    period_ms: u64,
    next_sample_ms: u64,
}

impl Clock {
    /// Run the world to `to_ms`, sampling at every period boundary on the way.
    fn advance_to(&mut self, to_ms: u64) {
        while self.next_sample_ms <= to_ms {
            self.cluster.advance_to(self.next_sample_ms);
            self.samples.push(self.cluster.observe());
            self.next_sample_ms += self.period_ms;
        }
        self.cluster.advance_to(to_ms);
    }

    /// Run to the next sample (a condition can only change on a sample).
    fn next_sample(&mut self) {
        let at = self.next_sample_ms;
        self.advance_to(at);
    }

    fn now(&self) -> u64 {
        self.cluster.now_ms()
    }

    /// Whether `cond` holds on the samples since `from` (answers the sample's time).
    fn check(&self, cond: &Condition, sc: &Scenario, from: usize, cursor: usize) -> Option<u64> {
        let addrs = self.cluster.addrs();
        let ctx = Ctx {
            sc,
            samples: &self.samples,
            from,
            timeline: &self.cluster.timeline,
            cursor,
            routed: self.cluster.routed(),
            addrs: &addrs,
        };
        if self.samples.len() > from && verdict::holds(cond, &ctx) {
            self.samples.last().map(|s| s.t_ms)
        } else {
            None
        }
    }
}

/// Why a scenario cannot run in virtual time, if it cannot: its topology, or the first
/// action the simulation cannot do.
pub fn unsupported(sc: &Scenario) -> Option<String> {
    sim_cluster::unsupported(&sc.topology).or_else(|| {
        sc.steps
            .iter()
            .filter_map(|s| s.action.as_ref())
            .find_map(crate::actions::Action::sim_unsupported)
    })
}

/// Run one scenario in virtual time to its verdicts.
pub fn run_scenario_sim(sc: &Scenario, file: &str, opts: &RunOptions) -> Outcome {
    let started = Instant::now();
    let seed = opts.seed.unwrap_or(sc.seed);
    let mut outcome = Outcome {
        name: sc.name.clone(),
        file: file.to_string(),
        seed,
        status: "passed".into(),
        skip_reason: None,
        wall_ms: 0,
        instances: sc.topology.instances,
        etcd: "simulated".into(),
        verdicts: Vec::new(),
        recoveries: Vec::new(),
        actions: Vec::new(),
        rerun: format!("{} run --sim {} --seed {seed}", opts.command, file),
        samples: Vec::new(),
        episodes: Vec::new(),
    };
    if let Some(why) = unsupported(sc) {
        outcome.status = "skipped".into();
        outcome.skip_reason = Some(why);
        return outcome;
    }
    let timeline = Timeline::virtual_time();
    let cluster = match SimCluster::start(
        &sc.name,
        &sc.topology,
        seed,
        &opts.sidecar_overrides,
        timeline.clone(),
        opts.report_dir.is_some() || sc.reads_events(),
    ) {
        Ok(mut c) => {
            if let Some(bug) = opts.planted_bug {
                c.world.plant_bug(bug); // test-only (explore's planted bugs)
            }
            c
        }
        Err(e) => {
            outcome.status = "failed".into();
            outcome.verdicts.push(Verdict {
                kind: "setup".into(),
                name: "build the simulated cluster".into(),
                passed: false,
                t_ms: None,
                first_violation_ms: None,
                detail: e,
            });
            return outcome;
        }
    };
    let period_ms = match opts.sample_period {
        Some(p) => (p.as_millis() as u64).max(1),
        None if sc.topology.instances > 50 => 200,
        None => 50,
    };
    let mut clock = Clock {
        cluster,
        samples: Vec::new(),
        period_ms,
        next_sample_ms: 0,
    };
    let (verdicts, records) = play(sc, &mut clock, &timeline);
    clock.advance_to(clock.now() + 2 * period_ms);
    let end_ms = clock.now();
    let eps = verdict::episodes(sc, &records, end_ms);
    outcome.verdicts = verdicts;
    outcome
        .verdicts
        .extend(crate::invariants::check(sc, &clock.samples, &eps));
    outcome.recoveries = verdict::recoveries(&clock.samples, &eps);
    outcome.actions = records;
    outcome.samples = std::mem::take(&mut clock.samples);
    outcome.episodes = eps;
    if outcome.verdicts.iter().any(|v| !v.passed) {
        outcome.status = "failed".into();
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

/// Play the steps: wait, check, act. Answers the step verdicts and the actions done.
fn play(
    sc: &Scenario,
    clock: &mut Clock,
    timeline: &std::sync::Arc<Timeline>,
) -> (Vec<Verdict>, Vec<ActionRecord>) {
    let mut records = Vec::new();
    let mut verdicts = Vec::new();
    for (i, step) in sc.steps.iter().enumerate() {
        let label = step
            .name
            .clone()
            .unwrap_or_else(|| crate::run::step_label(step));
        if let Some(at) = step.at {
            clock.advance_to(at.as_ms().max(clock.now()));
        }
        let cursor = timeline.len();
        let from = clock.samples.len();
        let within = step.within.map(|d| d.0).unwrap_or(Duration::from_secs(10));
        if let Some(cond) = step.when.as_ref().or(step.expect.as_ref()) {
            let is_await = step.expect.is_some();
            let (met, broke) = wait_and_hold(sc, clock, cond, step.hold, within, from, cursor);
            let v = verdict::step_verdict(
                if is_await { "await" } else { "when" },
                format!("step {}: {label}", i + 1),
                cond,
                within,
                met,
                clock.now(),
                step.hold.zip(broke),
            );
            let failed_when = !is_await && !v.passed;
            verdicts.push(v);
            if failed_when {
                continue;
            }
        }
        if let Some(action) = &step.action {
            let t_ms = clock.now();
            ActionRecord::announce(timeline, i + 1, &label, action);
            let sidecar_states = phases(&clock.cluster, action);
            let result = action.apply_sim(&mut clock.cluster);
            let (record, failed) =
                ActionRecord::done(i + 1, t_ms, label, action, result, sidecar_states);
            verdicts.extend(failed);
            records.push(record);
        }
    }
    (verdicts, records)
}

/// Wait (sample by sample) until `cond` holds or `within` passes; then, if asked, check
/// it keeps holding for `hold`. Answers when it first held, and (for a hold) when it
/// broke: what [`verdict::step_verdict`] judges.
fn wait_and_hold(
    sc: &Scenario,
    clock: &mut Clock,
    cond: &Condition,
    hold: Option<Dur>,
    within: Duration,
    from: usize,
    cursor: usize,
) -> (Option<u64>, Option<Option<u64>>) {
    let deadline = clock.now() + within.as_millis() as u64;
    let met = loop {
        if let Some(t) = clock.check(cond, sc, from, cursor) {
            break Some(t);
        }
        if clock.now() >= deadline {
            break None;
        }
        clock.next_sample();
    };
    let broke = match (hold, met) {
        (Some(hold), Some(_)) => {
            let end = clock.now() + hold.as_ms();
            let mut broke = None;
            while clock.now() < end {
                clock.next_sample();
                if clock.check(cond, sc, from, cursor).is_none() {
                    broke = Some(clock.now());
                    break;
                }
            }
            Some(broke)
        }
        _ => None,
    };
    (met, broke)
}

/// The sidecar phase of each instance an action targets (all for cluster-wide ones).
fn phases(
    cluster: &SimCluster,
    action: &crate::actions::Action,
) -> std::collections::BTreeMap<String, String> {
    let names = cluster.topology.instance_names();
    let target = action.instance();
    names
        .iter()
        .enumerate()
        .filter(|(_, n)| target.is_none_or(|t| t == "all" || t == n.as_str()))
        .map(|(i, n)| (n.clone(), cluster.phase(i).to_string()))
        .collect()
}

/// Run many scenarios in virtual time on `jobs` threads (each run is independent and
/// synchronous). Outcomes come back in input order, whatever `jobs` is.
pub fn run_many_sim(
    list: &[crate::library::Loaded],
    opts: &RunOptions,
    jobs: usize,
    show_progress: bool,
) -> Vec<Outcome> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, list.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(l) = list.get(i) else {
                    return;
                };
                let o = run_scenario_sim(&l.scenario, &l.file, opts);
                if show_progress {
                    eprintln!(
                        "{:7} {:30} {:>6.2}s  {}",
                        o.status.to_uppercase(),
                        o.name,
                        o.wall_ms as f64 / 1000.0,
                        o.skip_reason.clone().unwrap_or_default()
                    );
                }
                match done.lock() {
                    Ok(mut g) => g.push((i, o)),
                    Err(p) => p.into_inner().push((i, o)),
                }
            });
        }
    });
    let mut out = done.into_inner().unwrap_or_else(|p| p.into_inner());
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}
