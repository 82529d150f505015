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

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::actions::Action;
use crate::dur::Dur;
use crate::episode::EpisodeBook;
pub use crate::episode::{Episode, Scope};
use crate::observe::{InstanceObs, ObservedState, Sample};
use crate::spec::{Condition, Scenario};
use crate::timeline::Timeline;

/// An action as executed.
#[derive(Clone, Debug, Serialize)]
pub struct ActionRecord {
    pub step: usize,
    pub t_ms: u64,
    pub label: String,
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

/// A step's condition, judged (both runners): it first held at `met` (`None`: not by
/// `now`, within `within`); with a `hold` asked and met, `broke` says when it stopped
/// holding (`None`: it kept holding).
pub fn step_verdict(
    kind: &str,
    name: String,
    cond: &Condition,
    within: Duration,
    met: Option<u64>,
    now: u64,
    hold: Option<(Dur, Option<u64>)>,
) -> Verdict {
    let mut v = Verdict {
        kind: kind.into(),
        name,
        passed: met.is_some(),
        t_ms: Some(met.unwrap_or(now)),
        first_violation_ms: None,
        detail: match met {
            Some(t) => format!("held at t={:.2}s", t as f64 / 1000.0),
            None => format!("not within {:?}: {}", within, describe(cond)),
        },
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
    if !v.passed {
        v.first_violation_ms = v.first_violation_ms.or(v.t_ms);
    }
    v
}

impl ActionRecord {
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
        let (error, detail) = match result {
            Ok(d) => (None, d),
            Err(e) => (Some(e), None),
        };
        let failed = error.as_ref().map(|e| Verdict {
            kind: "action".into(),
            name: format!("step {step}: {label}"),
            passed: false,
            t_ms: Some(t_ms),
            first_violation_ms: Some(t_ms),
            detail: e.clone(),
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

/// One judged item of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// `await`, `when`, `action` or `invariant`.
    pub kind: String,
    pub name: String,
    pub passed: bool,
    /// Await: when it was satisfied; invariant: when it was first violated.
    pub t_ms: Option<u64>,
    pub first_violation_ms: Option<u64>,
    pub detail: String,
}

/// A fault and how long the cluster took to become fully routable again after it ended.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    pub fault: String,
    pub start_ms: u64,
    /// When the fault ended (healed, restarted, expired); `None`: never during the run.
    pub end_ms: Option<u64>,
    pub recovered_ms: Option<u64>,
    pub time_to_recover_ms: Option<u64>,
}

/// Derive episodes from the executed actions (and the topology's start-up).
pub fn episodes(sc: &Scenario, records: &[ActionRecord], end_ms: u64) -> Vec<Episode> {
    let mut book = EpisodeBook::new(&sc.topology);
    for r in records.iter().filter(|r| r.error.is_none()) {
        book.action(r.t_ms, &r.label, r.detail.as_deref());
        r.action.episodes(&mut book);
    }
    book.finish(end_ms)
}

fn overlaps(e: &Episode, from: u64, to: u64) -> bool {
    e.start_ms <= to && e.end_ms.is_none_or(|end| end >= from)
}

/// Everything an await's condition is judged on.
pub struct Ctx<'a> {
    pub sc: &'a Scenario,
    pub samples: &'a [Sample],
    /// Index of the first sample taken after the step began.
    pub from: usize,
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
        self.samples.last().and_then(|s| s.instances.get(i))
    }

    fn baseline(&self, i: usize) -> Option<&InstanceObs> {
        self.samples
            .get(self.from.saturating_sub(1))
            .and_then(|s| s.instances.get(i))
    }
}

/// Whether the condition holds now.
pub fn holds(c: &Condition, ctx: &Ctx<'_>) -> bool {
    let Some(i) = condition_instance(c).and_then(|n| ctx.idx(n)).or(match c {
        Condition::AllActive(_) => Some(usize::MAX),
        _ => None,
    }) else {
        return false;
    };
    match c {
        Condition::AllActive(_) => ctx
            .samples
            .last()
            .is_some_and(|s| s.instances.iter().all(InstanceObs::fully_active)),
        Condition::State { is, .. } => ctx
            .latest(i)
            .is_some_and(|o| ObservedState::matches(o.state, *is)),
        Condition::Registered(_) => ctx.latest(i).is_some_and(|o| o.etcd.is_some()),
        Condition::Unregistered(_) => ctx.latest(i).is_some_and(|o| o.etcd.is_none()),
        Condition::Incarnations {
            at_least, at_most, ..
        } => {
            let mut seen: Vec<&str> = Vec::new();
            for s in ctx.samples {
                if let Some(inc) = s.instances.get(i).and_then(|o| o.etcd.as_deref()) {
                    if !seen.contains(&inc) {
                        seen.push(inc);
                    }
                }
            }
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
            ctx.timeline.any_since(ctx.cursor, |e| {
                e.source == "master"
                    && e.kind == "heartbeat"
                    && e.detail.get("status").and_then(|s| s.as_u64()) == Some(u64::from(*status))
                    && match e.detail.get("name").and_then(|n| n.as_str()) {
                        Some(n) => n == addr,
                        None => true,
                    }
            })
        }
        Condition::Exited { code, .. } => ctx.latest(i).is_some_and(|o| {
            o.sidecar_exit.is_some() && (code.is_none() || o.sidecar_exit == *code)
        }),
        Condition::Log { instance, contains } => {
            let source = format!("sidecar:{instance}");
            let needle = contains.to_lowercase();
            ctx.timeline.any_since(ctx.cursor, |e| {
                e.source == source
                    && e.kind == "log"
                    && e.detail.to_string().to_lowercase().contains(&needle)
            })
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

fn condition_instance(c: &Condition) -> Option<&str> {
    match c {
        Condition::State { instance, .. }
        | Condition::Registered(instance)
        | Condition::Unregistered(instance)
        | Condition::Incarnations { instance, .. }
        | Condition::Heartbeat { instance, .. }
        | Condition::HeartbeatStatus { instance, .. }
        | Condition::Exited { instance, .. }
        | Condition::Log { instance, .. }
        | Condition::RoutedShare { instance, .. } => Some(instance),
        Condition::AllActive(_) => None,
    }
}

/// A short human description of a condition.
pub fn describe(c: &Condition) -> String {
    match c {
        Condition::State { instance, is } => format!("{instance} {is:?} at master"),
        Condition::Registered(i) => format!("{i} registered in etcd"),
        Condition::Unregistered(i) => format!("{i} key gone from etcd"),
        Condition::AllActive(_) => "all instances ACTIVE and registered".into(),
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
            let mut s = format!(
                "{instance}: {} heartbeat(s) accepted",
                at_least.unwrap_or(1)
            );
            if let Some(m) = min_waiting {
                s.push_str(&format!(" with waiting >= {m}"));
            }
            if let Some(m) = max_waiting {
                s.push_str(&format!(" with waiting <= {m}"));
            }
            s
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

/// Judge every invariant over the whole run.
pub fn invariants(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Vec<Verdict> {
    let inv = &sc.invariants;
    let mut out = Vec::new();
    if inv.registered_when_healthy {
        out.push(registered_when_healthy(sc, samples, eps));
    }
    if inv.single_incarnation {
        out.push(single_incarnation(sc, samples, eps));
    }
    if inv.no_stale_heartbeat_accepted {
        out.push(no_stale_heartbeat(sc, samples, eps));
    }
    if inv.no_401_when_tokens_match {
        out.push(no_401(sc, samples, eps));
    }
    if inv.heartbeats_sane {
        out.push(heartbeats_sane(sc, samples));
    }
    out
}

fn verdict(name: &str, violation: Option<(u64, String)>, ok: String) -> Verdict {
    Verdict {
        kind: "invariant".into(),
        name: name.into(),
        passed: violation.is_none(),
        t_ms: violation.as_ref().map(|v| v.0),
        first_violation_ms: violation.as_ref().map(|v| v.0),
        detail: violation.map(|v| v.1).unwrap_or(ok),
    }
}

fn registered_when_healthy(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    let grace = sc.registered_grace().as_millis() as u64;
    let names = sc.instance_names();
    let mut checked = 0u64;
    // Last time each instance's sidecar was seen not running.
    let mut last_down: Vec<Option<u64>> = vec![Some(0); names.len()];
    for s in samples {
        for (i, o) in s.instances.iter().enumerate() {
            if !o.sidecar_running {
                if let Some(d) = last_down.get_mut(i) {
                    *d = Some(s.t_ms);
                }
                continue;
            }
            let from = s.t_ms.saturating_sub(grace);
            if last_down
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|d| d > from)
                || s.t_ms < grace
            {
                continue;
            }
            if eps.iter().any(|e| {
                let from = from.saturating_sub(e.extra_grace_ms);
                e.scope.covers(i) && e.excuses_registration && overlaps(e, from, s.t_ms)
            }) {
                continue;
            }
            checked += 1;
            if o.etcd.is_none() {
                return verdict(
                    "registered_when_healthy",
                    Some((
                        s.t_ms,
                        format!("{} had no etcd key at t={} ms although vLLM was healthy, its sidecar running and nothing disturbed registration for {} ms", names[i], s.t_ms, grace),
                    )),
                    String::new(),
                );
            }
        }
    }
    verdict(
        "registered_when_healthy",
        None,
        format!("held ({checked} instance-samples checked, grace {grace} ms)"),
    )
}

/// Whether the master is excused from lagging etcd at `t` (its link cut or just restarted).
fn master_excused(eps: &[Episode], t: u64, grace: u64) -> bool {
    eps.iter()
        .any(|e| e.excuses_master && overlaps(e, t.saturating_sub(grace + 3000), t))
}

fn single_incarnation(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    let grace = sc.invariants.incarnation_grace.as_ms();
    let names = sc.instance_names();
    let mut since: HashMap<usize, u64> = HashMap::new();
    for s in samples {
        for (i, o) in s.instances.iter().enumerate() {
            let split = matches!((&o.etcd, &o.master_incarnation, o.state), (Some(e), Some(m), Some(st)) if e != m && st != ObservedState::Suspect);
            if split && !master_excused(eps, s.t_ms, grace) {
                let start = *since.entry(i).or_insert(s.t_ms);
                if s.t_ms - start > grace {
                    return verdict(
                        "single_incarnation",
                        Some((
                            s.t_ms,
                            format!(
                                "{}: etcd has incarnation {:?} but the master routes to {:?} since t={} ms",
                                names[i], o.etcd, o.master_incarnation, start
                            ),
                        )),
                        String::new(),
                    );
                }
            } else {
                since.remove(&i);
            }
        }
    }
    verdict(
        "single_incarnation",
        None,
        format!("held (grace {grace} ms)"),
    )
}

fn no_stale_heartbeat(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    let grace = sc.invariants.incarnation_grace.as_ms();
    let names = sc.instance_names();
    // Per instance: incarnations in order of first sighting in etcd.
    let mut first_seen: Vec<Vec<(String, u64)>> = vec![Vec::new(); names.len()];
    let mut prev_accepted = vec![0u64; names.len()];
    for s in samples {
        for (i, o) in s.instances.iter().enumerate() {
            let Some(seen) = first_seen.get_mut(i) else {
                continue;
            };
            if let Some(e) = &o.etcd {
                if !seen.iter().any(|(x, _)| x == e) {
                    seen.push((e.clone(), s.t_ms));
                }
            }
            let accepted = o.accepted();
            let grew = accepted > prev_accepted.get(i).copied().unwrap_or(0);
            if let Some(p) = prev_accepted.get_mut(i) {
                *p = accepted;
            }
            let Some(m) = &o.master_incarnation else {
                continue;
            };
            let Some(pos) = seen.iter().position(|(x, _)| x == m) else {
                continue;
            };
            if let Some((newer, t_newer)) = seen.get(pos + 1) {
                if grew && s.t_ms > t_newer + grace && !master_excused(eps, s.t_ms, grace) {
                    return verdict(
                        "no_stale_heartbeat_accepted",
                        Some((s.t_ms, format!("{}: heartbeats of incarnation {m} still accepted at t={} ms, superseded by {newer} at t={t_newer} ms", names[i], s.t_ms))),
                        String::new(),
                    );
                }
            }
        }
    }
    verdict("no_stale_heartbeat_accepted", None, "held".into())
}

fn no_401(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    // The master answers 401 before it reads the body, so a 401 names no instance: the
    // count is cluster-wide, and excused only while some sidecar's token mismatches.
    let grace = sc.topology.heartbeat_interval.as_ms() + 1000;
    let mut prev = 0u64;
    let mut prev_t = 0u64;
    for s in samples {
        let n = s
            .instances
            .iter()
            .map(|o| o.status_count(401))
            .max()
            .unwrap_or(0);
        if n > prev {
            let excused = eps
                .iter()
                .any(|e| e.token_mismatch && overlaps(e, prev_t.saturating_sub(grace), s.t_ms));
            if !excused {
                return verdict(
                    "no_401_when_tokens_match",
                    Some((s.t_ms, format!("a heartbeat was answered 401 at t≈{} ms while every sidecar's token matched the master's", s.t_ms))),
                    String::new(),
                );
            }
        }
        prev = n;
        prev_t = s.t_ms;
    }
    verdict("no_401_when_tokens_match", None, "held".into())
}

fn heartbeats_sane(sc: &Scenario, samples: &[Sample]) -> Verdict {
    let names = sc.instance_names();
    for s in samples {
        for (i, o) in s.instances.iter().enumerate() {
            let bad = o
                .gpu_cache
                .is_some_and(|g| !g.is_finite() || !(0.0..=1.0).contains(&g))
                || o.waiting.is_some_and(|w| w > 10_000_000)
                || o.ttft_ms.is_some_and(|x| !(0..=86_400_000).contains(&x))
                || o.tbt_ms.is_some_and(|x| !(0..=86_400_000).contains(&x));
            if bad {
                return verdict(
                    "heartbeats_sane",
                    Some((
                        s.t_ms,
                        format!(
                            "{}: master stored waiting={:?} gpu_cache={:?} ttft={:?} tbt={:?}",
                            names[i], o.waiting, o.gpu_cache, o.ttft_ms, o.tbt_ms
                        ),
                    )),
                    String::new(),
                );
            }
        }
    }
    verdict("heartbeats_sane", None, "held".into())
}

/// Time to recover from each fault: from its end until every instance that should be
/// routable (sidecar running, vLLM not down) is ACTIVE and registered.
pub fn recoveries(samples: &[Sample], eps: &[Episode]) -> Vec<Recovery> {
    let mut out = Vec::new();
    for e in eps.iter().filter(|e| e.is_fault) {
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
        out.push(Recovery {
            fault: e.label.clone(),
            start_ms: e.start_ms,
            end_ms: end,
            recovered_ms: recovered,
            time_to_recover_ms: match (end, recovered) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::vllm::{Health, VllmAction};
    use crate::spec::Scenario;

    fn scenario() -> Scenario {
        Scenario::parse("t.toml", "name = \"t\"\ndescription = \"d\"\n[topology]\nlease_ttl = 1\nkeepalive_interval = \"250ms\"\n").unwrap()
    }

    /// One instance, sampled every 100 ms for 8 s; `registered(t)` says whether its key exists.
    fn samples(registered: impl Fn(u64) -> bool) -> Vec<Sample> {
        (0..80)
            .map(|k| {
                let t = k * 100;
                Sample {
                    t_ms: t,
                    instances: vec![InstanceObs {
                        etcd: registered(t).then(|| "i0-a".to_string()),
                        sidecar_running: true,
                        ..Default::default()
                    }],
                    routed: 0,
                }
            })
            .collect()
    }

    fn record(t_ms: u64, action: Action) -> ActionRecord {
        ActionRecord {
            sidecar_states: Default::default(),
            step: 1,
            t_ms,
            label: "x".into(),
            action,
            error: None,
            detail: None,
        }
    }

    #[test]
    fn a_key_missing_without_excuse_is_a_violation() {
        let sc = scenario(); // grace = 2 × 250 ms + 2 s = 2.5 s
        let s = samples(|t| !(3000..3300).contains(&t));
        let eps = episodes(&sc, &[], 4000);
        let v = registered_when_healthy(&sc, &s, &eps);
        assert!(!v.passed);
        assert_eq!(v.first_violation_ms, Some(3000));
    }

    #[test]
    fn a_key_missing_while_vllm_was_down_is_excused_until_the_grace_ends() {
        let sc = scenario();
        let down = record(
            2900,
            Action::Vllm(VllmAction::Health {
                instance: "i0".into(),
                health: Health::Down,
            }),
        );
        let up = record(
            3100,
            Action::Vllm(VllmAction::Health {
                instance: "i0".into(),
                health: Health::Up,
            }),
        );
        let s = samples(|t| !(3000..3300).contains(&t));
        let eps = episodes(&sc, &[down.clone(), up.clone()], 4000);
        assert!(registered_when_healthy(&sc, &s, &eps).passed);
        // Still missing 2.5 s after vLLM came back: no excuse left.
        let late = samples(|t| t < 2900);
        let eps = episodes(&sc, &[down, up], 4000);
        let v = registered_when_healthy(&sc, &late, &eps);
        assert!(!v.passed);
        assert!(
            v.first_violation_ms.is_some_and(|t| t >= 3100 + 2500),
            "{v:?}"
        );
    }

    #[test]
    fn recovery_time_runs_from_the_end_of_the_fault() {
        let mut s = samples(|t| !(1000..2000).contains(&t));
        for o in s.iter_mut() {
            let active = o.instances[0].etcd.is_some();
            o.instances[0].state = active.then_some(ObservedState::Active);
            o.instances[0].master_incarnation = o.instances[0].etcd.clone();
        }
        let crash = record(1000, Action::Vllm(VllmAction::Crash("i0".into())));
        let restart = record(1500, Action::Vllm(VllmAction::Restart("i0".into())));
        let r = recoveries(&s, &episodes(&scenario(), &[crash, restart], 4000));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].end_ms, Some(1500));
        assert_eq!(r[0].time_to_recover_ms, Some(500));
    }
}
