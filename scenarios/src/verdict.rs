//! Judging a run: awaits (live, on the latest samples) and invariants and recovery times
//! (after the run, on every sample and every action).
//!
//! Invariants need to know when a fault excuses a missing registration. That knowledge
//! is in [`Episode`]s: intervals derived from the executed actions (a partition from its
//! start until healed, a crash until restart), each saying whom it disturbs and whether it
//! excuses a missing etcd key; each action's family says which it opens
//! ([`crate::actions`], written into an [`EpisodeBook`]). An invariant only fires outside
//! every excusing episode plus a grace period, so it stays strict where the system has
//! no excuse.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::actions::Action;
use crate::dur::Dur;
use crate::episode::EpisodeBook;
pub use crate::episode::{Episode, Scope};
use crate::observe::{InstanceObs, ObservedState, Sample};
use crate::sidecar::LOG_EVENT;
use crate::spec::{Condition, Scenario};
use crate::timeline::{Source, Timeline};
use mock_master::HeartbeatEvent;

/// An action as executed.
#[derive(Clone, Debug, Serialize)]
pub struct ActionRecord {
    /// The step's number, from 1.
    pub step: usize,
    /// When the action was applied, in ms since the start.
    pub t_ms: u64,
    /// The step's label: its `name`, or a description of the step.
    pub label: String,
    /// The action as written.
    pub action: Action,
    /// Why it could not be done, if it failed.
    pub error: Option<String>,
    /// For a real-etcd kill: the member index actually killed.
    pub detail: Option<String>,
    /// Simulation only: each targeted instance's sidecar phase when the action hit
    /// (`registered`, `re_registering`, ...), for the coverage of a fault search.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sidecar_states: std::collections::BTreeMap<String, String>,
}

impl ActionRecord {
    /// The runner's `action` event, emitted (both runners) just before the action is
    /// applied, so the timeline shows what follows as its consequence.
    pub fn announce(timeline: &Arc<Timeline>, step: usize, label: &str, action: &Action) {
        timeline.source(Source::Runner).emit(
            "action",
            serde_json::json!({"step": step, "label": label, "action": action}),
        );
    }

    /// Step `step`'s action as done at `t_ms` with `result` (both modes): its record,
    /// and the failed `action` verdict when it could not be done.
    pub fn done(
        step: usize,
        t_ms: u64,
        label: String,
        action: &Action,
        result: Result<Option<String>, String>,
        sidecar_states: std::collections::BTreeMap<String, String>,
    ) -> (ActionRecord, Option<Verdict>) {
        let (error, detail) = result.map_or_else(|e| (Some(e), None), |d| (None, d));
        let failed = error.as_ref().map(|e| {
            let name = format!("step {step}: {label}");
            Verdict::failed(VerdictKind::Action, name, Some(t_ms), e.clone())
        });
        let record = ActionRecord {
            step,
            t_ms,
            label,
            action: action.clone(),
            error,
            detail,
            sidecar_states,
        };
        (record, failed)
    }
}

/// A step's condition, judged (both runners): it first held at `met` (`None`: not by
/// `now`, within `within`); with a `hold` asked and met, `broke` says when it stopped
/// holding (`None`: it kept holding).
pub fn step_verdict(
    kind: VerdictKind,
    name: String,
    cond: &Condition,
    within: Duration,
    met: Option<u64>,
    now: u64,
    hold: Option<(Dur, Option<u64>)>,
) -> Verdict {
    let mut v = match met {
        Some(t) => Verdict {
            t_ms: Some(t),
            ..Verdict::passed(kind, name, format!("held at t={:.2}s", t as f64 / 1000.0))
        },
        None => {
            let detail = format!("not within {:?}: {}", within, describe(cond));
            Verdict::failed(kind, name, Some(now), detail)
        }
    };
    match hold {
        Some((hold, Some(broke))) if met.is_some() => {
            v.passed = false;
            v.first_violation_ms = Some(broke);
            v.detail = format!(
                "held, then stopped holding at t={:.2}s (needed {hold})",
                broke as f64 / 1000.0
            );
        }
        Some((hold, None)) if met.is_some() => {
            v.detail.push_str(&format!(", and kept holding for {hold}"))
        }
        _ => {}
    }
    v
}

/// What a verdict judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// A step's `await`: the condition must hold within the step's time.
    Await,
    /// A step's `when`: the action runs only if it held.
    When,
    /// An action that could not be done.
    Action,
    /// A property of the whole run.
    Invariant,
    /// The cluster could not be started.
    Setup,
    /// A sidecar exited when no stop or kill was asked for.
    Exit,
}

crate::capability::named!(VerdictKind {
    Await => "await",
    When => "when",
    Action => "action",
    Invariant => "invariant",
    Setup => "setup",
    Exit => "exit",
});

/// One judged item of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// What was judged.
    pub kind: VerdictKind,
    /// Its name: `step 2: <label>`, the invariant's name, or the setup that failed.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Await: when it was satisfied; invariant: when it was first violated.
    pub t_ms: Option<u64>,
    /// When it first failed, in ms since the start (`None`: it passed, or setup failed).
    pub first_violation_ms: Option<u64>,
    /// The event whose change of the cluster first broke it, by its number in the run
    /// (virtual time, an invariant judged on the samples every change makes); `None`:
    /// first seen at a sample period, or real time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_violation_event: Option<u64>,
    /// What was seen, for a person: when it held, or what broke and where.
    pub detail: String,
    /// Not judged, for this reason (a capability the sidecar's profile lacks); such a
    /// verdict counts as passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Verdict {
    /// A check that held (nothing failed, at no time in particular).
    pub fn passed(kind: VerdictKind, name: String, detail: String) -> Verdict {
        Verdict {
            kind,
            name,
            passed: true,
            t_ms: None,
            first_violation_ms: None,
            first_violation_event: None,
            detail,
            skipped: None,
        }
    }

    /// A check that failed, first at `t_ms`.
    pub fn failed(kind: VerdictKind, name: String, t_ms: Option<u64>, detail: String) -> Verdict {
        Verdict {
            passed: false,
            t_ms,
            first_violation_ms: t_ms,
            ..Verdict::passed(kind, name, detail)
        }
    }

    /// A check not made, for `why`.
    pub fn skipped(kind: VerdictKind, name: String, why: String) -> Verdict {
        Verdict {
            skipped: Some(why.clone()),
            ..Verdict::passed(kind, name, format!("skipped: {why}"))
        }
    }
}

/// A fault and how long the cluster took to become fully routable again after it ended.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    /// The fault's label (its action's description).
    pub fault: String,
    /// When the fault began, in ms since the start.
    pub start_ms: u64,
    /// When the fault ended (healed, restarted, expired); `None`: never during the run.
    pub end_ms: Option<u64>,
    /// The first sample at or after the fault's end in which every running sidecar's
    /// instance was fully active (or its vLLM down), in ms; `None`: not during the run.
    pub recovered_ms: Option<u64>,
    /// From the fault's end to recovery, in ms.
    pub time_to_recover_ms: Option<u64>,
}

/// Derive episodes from the executed actions (and the topology's start-up).
pub fn episodes(sc: &Scenario, records: &[ActionRecord], end_ms: u64) -> Vec<Episode> {
    let mut book = EpisodeBook::new(&sc.topology);
    for r in records {
        record_episodes(&mut book, r);
    }
    book.finish(end_ms)
}

/// Write the episodes action `r` opens and closes into `book` (none if it failed).
pub fn record_episodes(book: &mut EpisodeBook<'_>, r: &ActionRecord) {
    if r.error.is_none() {
        book.action(r.t_ms, &r.label, r.detail.as_deref());
        r.action.episodes(book);
    }
}

/// Everything an await's condition is judged on.
pub struct Ctx<'a> {
    /// The scenario being judged.
    pub sc: &'a Scenario,
    /// Every sample of the run so far, oldest first.
    pub samples: &'a [Sample],
    /// Index of the first sample taken after the step began.
    pub from: usize,
    /// The run's event timeline (log lines, heartbeat answers).
    pub timeline: &'a Timeline,
    /// Timeline cursor when the step began.
    pub cursor: usize,
    /// Routing decisions of the load generator (instance indices), oldest first.
    pub routed: &'a [usize],
    /// Each instance's registered address (the name the master knows it by).
    pub addrs: &'a [String],
}

impl Ctx<'_> {
    fn idx(&self, name: &str) -> Option<usize> {
        self.sc.instance_names().iter().position(|n| n == name)
    }

    fn latest(&self, i: usize) -> Option<&InstanceObs> {
        self.samples.last()?.instances.get(i).map(|o| &**o)
    }

    /// The last sample before the step began.
    fn base(&self) -> Option<&Sample> {
        self.samples.get(self.from.saturating_sub(1))
    }

    fn baseline(&self, i: usize) -> Option<&InstanceObs> {
        self.base()?.instances.get(i).map(|o| &**o)
    }
}

/// Whether the condition holds now.
pub fn holds(c: &Condition, ctx: &Ctx<'_>) -> bool {
    // The instance's index (none named: the cluster as a whole); an unknown one never holds.
    let i = match c.instance().map(|n| ctx.idx(n)) {
        Some(Some(i)) => i,
        Some(None) => return false,
        None => usize::MAX,
    };
    match c {
        Condition::AllActive(_) => ctx
            .samples
            .last()
            .is_some_and(|s| s.instances.iter().all(|o| o.fully_active())),
        Condition::State { is, .. } => ctx
            .latest(i)
            .is_some_and(|o| ObservedState::matches(o.state, *is)),
        Condition::Registered(_) => ctx.latest(i).is_some_and(|o| o.etcd.is_some()),
        Condition::Unregistered(_) => ctx.latest(i).is_some_and(|o| o.etcd.is_none()),
        Condition::Incarnations {
            at_least, at_most, ..
        } => {
            let seen: std::collections::BTreeSet<&str> = ctx
                .samples
                .iter()
                .filter_map(|s| s.instances.get(i)?.etcd.as_deref())
                .collect();
            at_least.is_none_or(|n| seen.len() >= n) && at_most.is_none_or(|n| seen.len() <= n)
        }
        Condition::Heartbeat {
            at_least,
            min_waiting,
            max_waiting,
            ..
        } => {
            let base = ctx.baseline(i).map(InstanceObs::accepted).unwrap_or(0);
            let enough = ctx
                .latest(i)
                .is_some_and(|o| o.accepted() >= base + at_least.unwrap_or(1));
            if min_waiting.is_none() && max_waiting.is_none() {
                return enough;
            }
            ctx.samples.iter().skip(ctx.from).any(|s| {
                s.instances.get(i).is_some_and(|o| {
                    o.accepted() > base
                        && o.waiting.is_some_and(|w| {
                            min_waiting.is_none_or(|m| w >= m) && max_waiting.is_none_or(|m| w <= m)
                        })
                })
            }) && enough
        }
        Condition::HeartbeatStatus { status, .. } => {
            // The master's heartbeat events name the instance when it read the body; an
            // answer given before that (401, an injected fault) names none and counts for all.
            let addr = ctx.addrs.get(i).map(String::as_str).unwrap_or("");
            let master = Source::Master.to_string();
            ctx.timeline.any_since(ctx.cursor, |e| {
                e.source == master
                    && HeartbeatEvent::read(&e.kind, &e.detail)
                        .is_some_and(|h| h.status == *status && h.name.is_none_or(|n| n == addr))
            })
        }
        Condition::Exited { code, .. } => ctx.latest(i).is_some_and(|o| {
            o.sidecar_exit.is_some() && (code.is_none() || o.sidecar_exit == *code)
        }),
        Condition::Log { instance, contains } => {
            let needle = contains.to_lowercase();
            let sidecar = Source::Sidecar(instance).to_string();
            ctx.timeline.any_since(ctx.cursor, |e| {
                e.source == sidecar
                    && e.kind == LOG_EVENT
                    && e.detail.to_string().to_lowercase().contains(&needle)
            })
        }
        Condition::NewMaster(_) => {
            let before = ctx.base().and_then(|s| s.masters.elected);
            let now = ctx.samples.last().and_then(|s| s.masters.elected);
            now.is_some() && now != before
        }
        Condition::MasterHeartbeats { at_least } => ctx.samples.last().is_some_and(|s| {
            s.masters.elected.is_some_and(|k| {
                let base = ctx.base().map_or(0, |b| b.masters.accepted_by(k));
                s.masters.accepted_by(k) >= base + at_least
            })
        }),
        Condition::LoadmetricsWritten(_) => {
            // None (no write seen yet) is below every revision.
            let revision = |s: &Sample| s.masters.loadmetrics_revision;
            ctx.samples.last().and_then(revision) > ctx.base().and_then(revision)
        }
        Condition::RoutedShare { at_most, last, .. } => {
            if ctx.routed.len() < *last {
                return false;
            }
            let window = ctx.routed.get(ctx.routed.len() - last..).unwrap_or(&[]);
            let hits = window.iter().filter(|r| **r == i).count();
            (hits as f64) <= at_most * (*last as f64)
        }
    }
}

/// A short human description of a condition.
pub fn describe(c: &Condition) -> String {
    match c {
        Condition::State { instance, is } => format!("{instance} {is:?} at master"),
        Condition::Registered(i) => format!("{i} registered in etcd"),
        Condition::Unregistered(i) => format!("{i} key gone from etcd"),
        Condition::AllActive(_) => "all instances ACTIVE and registered".into(),
        Condition::NewMaster(_) => "another master replica elected".into(),
        Condition::MasterHeartbeats { at_least } => {
            format!("the elected master accepted >= {at_least} heartbeats")
        }
        Condition::LoadmetricsWritten(_) => "LOADMETRICS written to etcd".into(),
        Condition::Incarnations {
            instance,
            at_least,
            at_most,
        } => match (at_least, at_most) {
            (Some(a), Some(b)) => format!("{instance} seen with {a}..={b} incarnations"),
            (Some(a), None) => format!("{instance} seen with >= {a} incarnations"),
            (None, b) => format!("{instance} seen with <= {} incarnations", b.unwrap_or(0)),
        },
        Condition::Heartbeat {
            instance,
            at_least,
            min_waiting,
            max_waiting,
        } => {
            let n = at_least.unwrap_or(1);
            let min = min_waiting.map_or(String::new(), |m| format!(" with waiting >= {m}"));
            let max = max_waiting.map_or(String::new(), |m| format!(" with waiting <= {m}"));
            format!("{instance}: {n} heartbeat(s) accepted{min}{max}")
        }
        Condition::HeartbeatStatus { instance, status } => {
            format!("{instance}: a heartbeat answered {status}")
        }
        Condition::Exited { instance, code } => match code {
            Some(c) => format!("{instance} sidecar exited with {c}"),
            None => format!("{instance} sidecar exited"),
        },
        Condition::Log { instance, contains } => format!("{instance} logged \"{contains}\""),
        Condition::RoutedShare {
            instance,
            at_most,
            last,
        } => {
            format!(
                "{instance} got <= {:.0}% of the last {last} routed requests",
                at_most * 100.0
            )
        }
    }
}

/// Time to recover from each fault: from its end until every instance that should be
/// routable (sidecar running, vLLM not down) is ACTIVE and registered.
pub fn recoveries(samples: &[Sample], eps: &[Episode]) -> Vec<Recovery> {
    let recovery = |e: &Episode| {
        let end = e.end_ms;
        let recovered = end.and_then(|end| {
            samples
                .iter()
                .filter(|s| s.t_ms >= end)
                .find(|s| {
                    s.instances.iter().enumerate().all(|(i, o)| {
                        // Down at t (an episode that ended at t no longer counts).
                        let down = eps.iter().any(|x| {
                            x.scope.covers(i)
                                && x.vllm_down
                                && x.start_ms <= s.t_ms
                                && x.end_ms.is_none_or(|e| e > s.t_ms)
                        });
                        !o.sidecar_running || down || o.fully_active()
                    })
                })
                .map(|s| s.t_ms)
        });
        Recovery {
            fault: e.label.clone(),
            start_ms: e.start_ms,
            end_ms: end,
            recovered_ms: recovered,
            time_to_recover_ms: end.zip(recovered).map(|(a, b)| b.saturating_sub(a)),
        }
    };
    eps.iter().filter(|e| e.is_fault).map(recovery).collect()
}
