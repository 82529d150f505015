//! Running scenarios in virtual time (`scenarios run --sim`): the one play loop
//! ([`engine::play`]) on a [`SimCluster`], whose clock only the loop moves, so a run is
//! a pure function of the scenario and its seed: `events.jsonl` is the same bytes on
//! every run and every machine.

use std::time::Instant;

use crate::capability;
use crate::engine;
use crate::report::Outcome;
use crate::run::{status_line, RunOptions, RERUN_COMMAND};
use crate::sim_cluster::{self, SimCluster};
use crate::spec::Scenario;
use crate::timeline::Timeline;

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
    let rerun = format!("{RERUN_COMMAND} run --sim {file} --seed {seed}");
    let mut outcome = engine::outcome(sc, file, seed, "simulated", rerun);
    if let Some(why) = unsupported(sc) {
        return outcome.skip(why);
    }
    let timeline = Timeline::virtual_time();
    let record_events = opts.report_dir.is_some() || sc.reads_events();
    let built = SimCluster::start(
        &sc.name,
        &sc.topology,
        seed,
        &opts.sidecar_overrides,
        timeline.clone(),
        record_events,
    );
    let mut cluster = match built {
        Ok(c) => c,
        Err(e) => return outcome.setup_failed("build the simulated cluster", e),
    };
    if let Some(bug) = opts.planted_bug {
        cluster.world.plant_bug(bug);
    }
    let period_ms = match opts.sample_period {
        Some(p) => (p.as_millis() as u64).max(1),
        None if sc.topology.instances > 50 => 200,
        None => 50,
    };
    // The simulation runs our sidecar's core, which has every capability.
    let caps = capability::all();
    let played = block_on(engine::play(sc, &mut cluster, &caps, period_ms, &|_| {}));
    outcome.judge(sc, played, &caps);
    outcome.wall_ms = started.elapsed().as_millis() as u64;
    outcome.write_report(opts.report_dir.as_deref(), sc, &timeline);
    outcome
}

/// Run a future that never waits on anything outside itself (the simulated cluster's
/// verbs are all immediate) to its end on this thread.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
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
                    eprintln!("{}", status_line(&o, 2));
                }
                crate::lock(&done).push((i, o));
            });
        }
    });
    let mut out = done.into_inner().unwrap_or_else(|p| p.into_inner());
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}
