//! The one play loop: a scenario's steps (wait, hold, judge, act), the samples taken on
//! the way, and the end phase, the same for both modes over any [`Cluster`]; and the
//! one path from a run to its [`Outcome`] (invariants, recoveries, status, report).
//!
//! Time moves only through [`Cluster::advance_to`]: real mode waits on the wall clock,
//! virtual time runs the world. The cluster is observed at every sample period on the
//! way, so a condition is judged on the samples, at exact instants in virtual time and
//! within a period in real time. Where the mode sees changes (virtual time), it is also
//! observed at every event that changes what is observed ([`Cluster::next_change`]):
//! the invariants see every state the cluster was in, while the steps keep the period's
//! pace (an await is judged at each period, so the steps run when they always did), and
//! the run keeps the state each instant left.

use std::path::Path;
use std::time::Duration;

use crate::capability::{self, Capabilities};
use crate::cluster::Cluster;
use crate::invariants::Judges;
use crate::observe::Sample;
use crate::report::{Outcome, Status};
use crate::spec::{Condition, Invariants, Scenario, Step};
use crate::timeline::Timeline;
use crate::topology::target_indices;
use crate::verdict::{self, ActionRecord, Ctx, Verdict, VerdictKind};

/// What playing a scenario produced, before it is judged as a whole.
pub struct Played<'a> {
    /// The verdict of every `when`, `expect` and failed action, in step order.
    pub verdicts: Vec<Verdict>,
    /// Every action as executed, in step order.
    pub records: Vec<ActionRecord>,
    /// The cluster at each instant something changed (the last sample of the instant),
    /// and at each sample period, oldest first.
    pub samples: Vec<Sample>,
    /// The invariants, judged on every sample but the last few (`waiting`).
    pub judges: Judges<'a>,
    /// The samples the invariants are still to judge, oldest first.
    pub waiting: Vec<Sample>,
    /// When the play ended (two sample periods after the last step), in ms since the start.
    pub end_ms: u64,
    /// The last output lines of each sidecar seen exited during the run.
    pub last_words: Vec<(usize, Vec<String>)>,
}

/// A cluster with the samples taken of it so far and the time of the next one, and the
/// invariants judged on them as the run goes.
///
/// In virtual time many events run at one instant (timers set alike fall due together),
/// and each may change what is observed: the invariants judge every one of those
/// samples, while the run keeps the last of each instant, the state it left. Where a
/// step begins or an action runs, the sample before is kept whatever its instant, so
/// what a step compares with and what an action found stay as they were.
struct Run<'s, 'c, C> {
    cluster: &'c mut C,
    samples: Vec<Sample>,
    /// The samples before this index are kept as they are.
    kept_before: usize,
    period_ms: u64,
    next_sample_ms: u64,
    addrs: Vec<String>,
    judges: Judges<'s>,
    /// Every sample taken since the oldest the invariants are still to judge.
    waiting: Vec<Sample>,
    /// Every action done so far, in order.
    records: Vec<ActionRecord>,
}

/// How many samples wait before the invariants judge them: few enough that they are
/// still in the processor's caches (a run in virtual time takes one at every change).
const JUDGE_EVERY: usize = 256;

impl<C: Cluster> Run<'_, '_, C> {
    /// Let the cluster run to `to_ms`, observing it at every sample time on the way,
    /// and at every change where the mode sees changes (virtual time).
    async fn advance_to(&mut self, to_ms: u64) {
        while self.next_sample_ms <= to_ms {
            self.changes_until(self.next_sample_ms).await;
            self.cluster.advance_to(self.next_sample_ms).await;
            let s = self.cluster.observe().await;
            self.push(s);
            if self.waiting.len() >= JUDGE_EVERY {
                // No action runs inside this loop: those before now are all recorded.
                let now = self.cluster.now_ms();
                let judged = self.judges.catch_up(&self.waiting, &self.records, now);
                self.waiting.drain(..judged);
            }
            // An observation in real time takes time: a late one delays the next.
            let now = self.cluster.now_ms();
            self.next_sample_ms += self.period_ms;
            if self.next_sample_ms <= now {
                self.next_sample_ms = now + self.period_ms;
            }
        }
        self.changes_until(to_ms).await;
        self.cluster.advance_to(to_ms).await;
    }

    /// Sample every change of the cluster's observation up to `to_ms`.
    async fn changes_until(&mut self, to_ms: u64) {
        while let Some(s) = self.cluster.next_change(to_ms).await {
            self.push(s);
        }
    }

    /// Hand sample `s` to the invariants, noting what changed since the last sample,
    /// and keep it (in place of the last kept one when that was of the same instant).
    fn push(&mut self, mut s: Sample) {
        // Virtual time tells what changed; real time is compared with the last sample.
        if s.changed.is_none() {
            s.mark_changes(self.waiting.last());
        }
        // Only the invariants read what changed.
        let mut kept = Sample {
            changed: None,
            instances: s.instances.clone(),
            masters: s.masters.clone(),
            ..s
        };
        self.waiting.push(s);
        let same_instant = self
            .samples
            .last()
            .is_some_and(|last| last.t_ms == kept.t_ms);
        if same_instant && self.samples.len() > self.kept_before {
            // A sample at a period shows the state the instant's last event made.
            let last_event = self.samples.pop().and_then(|last| last.event);
            kept.event = kept.event.or(last_event);
        }
        self.samples.push(kept);
    }

    /// Keep the samples taken so far as they are.
    fn keep_all(&mut self) {
        self.kept_before = self.samples.len();
    }

    /// Run to the next sample (a condition can only change on a sample).
    async fn next_sample(&mut self) {
        let at = self.next_sample_ms;
        self.advance_to(at).await;
    }

    fn now(&self) -> u64 {
        self.cluster.now_ms()
    }

    /// Whether `cond` holds on the samples since `from` (answers the sample's time).
    fn check(&self, cond: &Condition, sc: &Scenario, from: usize, cursor: usize) -> Option<u64> {
        let routed = match cond {
            Condition::RoutedShare { .. } => self.cluster.routed(),
            _ => std::borrow::Cow::Borrowed(&[][..]),
        };
        let ctx = Ctx {
            sc,
            samples: &self.samples,
            from,
            timeline: self.cluster.timeline(),
            cursor,
            routed: &routed,
            addrs: &self.addrs,
        };
        let holds = self.samples.len() > from && verdict::holds(cond, &ctx);
        self.samples.last().filter(|_| holds).map(|s| s.t_ms)
    }

    /// Wait (sample by sample) until `cond` holds or `within` passes; then, if the step
    /// asks, check it keeps holding for its `hold`. Answers the step's verdict.
    async fn judge(
        &mut self,
        sc: &Scenario,
        step: &Step,
        cond: &Condition,
        name: String,
    ) -> Verdict {
        let kind = match step.expect {
            Some(_) => VerdictKind::Await,
            None => VerdictKind::When,
        };
        let cursor = self.cluster.timeline().len();
        self.keep_all();
        let from = self.samples.len();
        let within = step.within.map(|d| d.0).unwrap_or(Duration::from_secs(10));
        let deadline = self.now() + within.as_millis() as u64;
        let met = loop {
            if let Some(t) = self.check(cond, sc, from, cursor) {
                break Some(t);
            }
            if self.now() >= deadline {
                break None;
            }
            self.next_sample().await;
        };
        let broke = match (step.hold, met) {
            (Some(hold), Some(_)) => {
                let end = self.now() + hold.as_ms();
                let mut broke = None;
                while self.now() < end {
                    self.next_sample().await;
                    if self.check(cond, sc, from, cursor).is_none() {
                        broke = Some(self.now());
                        break;
                    }
                }
                Some((hold, broke))
            }
            _ => None,
        };
        verdict::step_verdict(kind, name, cond, within, met, self.now(), broke)
    }

    /// Do a step's action now: its record, and its failed verdict if it could not be done.
    async fn act(
        &mut self,
        i: usize,
        label: String,
        action: &crate::actions::Action,
    ) -> (ActionRecord, Option<Verdict>) {
        let t_ms = self.now();
        ActionRecord::announce(self.cluster.timeline(), i, &label, action);
        let n = self.cluster.topology().instances;
        let targets = match action.instance() {
            None | Some("all") => (0..n).collect(),
            Some(t) => target_indices(n, t),
        };
        let phases = self.cluster.sidecar_phases(&targets);
        self.keep_all();
        let result = action.apply(&mut *self.cluster).await;
        if let Some(s) = self.cluster.change_now().await {
            self.push(s);
        }
        ActionRecord::done(i, t_ms, label, action, result, phases)
    }
}

/// Play every step of `sc` on `cluster`, observing it every `period_ms`; `progress` is
/// told which step runs.
pub async fn play<'a, C: Cluster>(
    sc: &'a Scenario,
    cluster: &mut C,
    caps: &Capabilities,
    period_ms: u64,
    progress: &(dyn Fn(String) + Sync),
) -> Played<'a> {
    let addrs = cluster.addrs();
    let mut run = Run {
        cluster,
        samples: Vec::new(),
        kept_before: 0,
        period_ms: period_ms.max(1),
        next_sample_ms: 0,
        addrs,
        judges: Judges::new(sc, caps),
        waiting: Vec::new(),
        records: Vec::new(),
    };
    let mut verdicts = Vec::new();
    let n_steps = sc.steps.len();
    for (i, step) in sc.steps.iter().enumerate() {
        let label = step.name.clone().unwrap_or_else(|| step_label(step));
        progress(format!("step {}/{n_steps}: {label}", i + 1));
        if let Some(at) = step.at {
            let to = at.as_ms().max(run.now());
            run.advance_to(to).await;
        }
        let name = format!("step {}: {label}", i + 1);
        if let Some(why) = capability::missing(&step.needs(), caps) {
            let kind = match (&step.expect, &step.when) {
                (Some(_), _) => VerdictKind::Await,
                (None, Some(_)) => VerdictKind::When,
                (None, None) => VerdictKind::Action,
            };
            verdicts.push(Verdict::skipped(kind, name, why));
            continue;
        }
        if let Some(cond) = step.when.as_ref().or(step.expect.as_ref()) {
            let v = run.judge(sc, step, cond, name).await;
            let skip_action = v.kind == VerdictKind::When && !v.passed;
            verdicts.push(v);
            if skip_action {
                continue;
            }
        }
        if let Some(action) = &step.action {
            let (record, failed) = run.act(i + 1, label, action).await;
            verdicts.extend(failed);
            run.records.push(record);
        }
    }
    // Two more sample periods, so the last step's effects are observed.
    let end = run.now() + 2 * run.period_ms;
    run.advance_to(end).await;
    let last_words = (0..run.cluster.topology().instances)
        .filter(|i| {
            run.samples.iter().any(|s| {
                s.instances
                    .get(*i)
                    .is_some_and(|o| o.sidecar_exit.is_some())
            })
        })
        .map(|i| (i, run.cluster.sidecar_output(i)))
        .collect();
    let end_ms = run.now();
    Played {
        verdicts,
        records: run.records,
        end_ms,
        samples: run.samples,
        judges: run.judges,
        waiting: run.waiting,
        last_words,
    }
}

/// A step's label when it has no name: its await or its action.
pub fn step_label(step: &Step) -> String {
    if let Some(c) = &step.expect {
        return format!("await {}", verdict::describe(c));
    }
    match &step.action {
        Some(a) => a.describe(),
        None => "step".into(),
    }
}

/// An outcome before the run: passed until a verdict fails.
pub fn outcome(sc: &Scenario, file: &str, seed: u64, etcd: &str, rerun: String) -> Outcome {
    Outcome {
        name: sc.name.clone(),
        file: file.to_string(),
        seed,
        status: Status::Passed,
        skip_reason: None,
        wall_ms: 0,
        setup_ms: 0,
        startups: Vec::new(),
        lacking: Capabilities::new(),
        instances: sc.topology.instances,
        etcd: etcd.to_string(),
        verdicts: Vec::new(),
        recoveries: Vec::new(),
        recovery_checks: Vec::new(),
        actions: Vec::new(),
        rerun,
        samples: Vec::new(),
        episodes: Vec::new(),
    }
}

impl Outcome {
    /// Not run: the scenario needs capabilities `caps` lacks (`why` names them).
    pub fn skip_lacking(mut self, sc: &Scenario, caps: &Capabilities, why: String) -> Outcome {
        self.lacking = sc.needs().difference(caps).copied().collect();
        self.skip(why)
    }

    /// Not run, for `why`.
    pub fn skip(mut self, why: String) -> Outcome {
        self.status = Status::Skipped;
        self.skip_reason = Some(why);
        self
    }

    /// The cluster could not be set up (`what` failed with `error`).
    pub fn setup_failed(mut self, what: &str, error: String) -> Outcome {
        self.status = Status::Failed;
        let failed = Verdict::failed(VerdictKind::Setup, what.to_string(), None, error);
        self.verdicts.push(failed);
        self
    }

    /// Judge what was played: the step verdicts, then the invariants over every sample
    /// and episode, and each fault's time to recover; what needs a capability `caps`
    /// lacks was skipped, and `lacking` says which.
    pub fn judge(&mut self, sc: &Scenario, played: Played, caps: &Capabilities) {
        let eps = verdict::episodes(sc, &played.records, played.end_ms);
        self.verdicts = crate::exits::unexpected(sc, &played.samples, &eps, &played.last_words);
        self.verdicts.extend(played.verdicts);
        self.recovery_checks = crate::recovery::checks(sc, &played.samples, &eps, &played.records);
        let recoveries = &self.recovery_checks;
        let (waiting, kept) = (&played.waiting, &played.samples);
        let invariants = played.judges.finish(sc, waiting, kept, &eps, recoveries);
        self.verdicts.extend(invariants);
        let step_needs = sc.steps.iter().flat_map(|s| s.needs());
        let inv_needs = Invariants::NAMES
            .iter()
            .flat_map(|n| sc.invariants.needs(n));
        self.lacking = step_needs
            .chain(inv_needs)
            .filter(|c| !caps.contains(c))
            .collect();
        self.recoveries = verdict::recoveries(&played.samples, &eps);
        self.startups = crate::report::Startup::from_samples(&sc.instance_names(), &played.samples);
        self.actions = played.records;
        self.samples = played.samples;
        self.episodes = eps;
        if self.verdicts.iter().any(|v| !v.passed) {
            self.status = Status::Failed;
        }
    }

    /// Write the report directory under `dir`, if one was asked for.
    pub fn write_report(&self, dir: Option<&Path>, sc: &Scenario, timeline: &Timeline) {
        let Some(dir) = dir else { return };
        let d = dir.join(&sc.name);
        if let Err(e) = crate::report::write_dir(&d, sc, self, Some(timeline)) {
            tracing::warn!(dir = %d.display(), error = %e, "cannot write the report");
        }
    }
}
