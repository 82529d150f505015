//! Recovery as a bounded property: after every disturbance of an instance ends (a fault,
//! its start-up, a sidecar start, a token mismatch), the instance must be back within a
//! bound derived from its timers, or the run fails the `recovers_within_bound`
//! invariant.
//!
//! **Back** means, on one sample: ACTIVE on the master, a key in etcd whose incarnation
//! is the one the master routes to (one incarnation), and a heartbeat accepted since the
//! disturbance ended.
//!
//! **The bound** ([`Timers::bound_ms`]), from the end `P` of the disturbance:
//!
//! ```text
//! etcd_timeout                   an etcd call in flight at P meets its timeout
//! + lease_ttl                    the registration backoff's cap (also the start-up gate's)
//! + keepalive period             a keepalive notices a lease lost meanwhile (min(keepalive, TTL/3))
//! + keepalive interval + health_timeout   a /health probe sees vLLM healthy
//! + 5 × heartbeat_interval       the heartbeat backoff's cap (4 intervals), then a cycle
//! + 2 s                          the master's watch reconnect backoff cap (mock-master)
//! + 1 s                          sampling and round trips
//! + max(heartbeat, 30 s)         only if 409s were possible around P (the instance was
//!                                answered 409, or the master restarted, lagged etcd or
//!                                had its heartbeat endpoint faulted within 30 s before
//!                                P): the sidecar's conflict backoff before a new
//!                                incarnation's first heartbeat
//! ```
//!
//! **What is judged**: each instance a disturbance covers, unless another disturbance
//! of it is still open at `P` (its own end is judged instead). Its window runs from `P`
//! to `P + bound`, cut short by the next disturbance of it, the end of the run, or its
//! sidecar not running: a recovery inside the window is measured and passes; no
//! recovery in a full window fails; no recovery in a window cut short is not judged.
//! `explore` schedules end with a quiet period as long as the bound, so the last
//! disturbance of every instance gets a full window.

use serde::Serialize;

use crate::episode::{overlaps, Episode, EpisodeKey};
use crate::observe::{InstanceObs, Sample};
use crate::spec::Scenario;
use crate::topology::Topology;
use crate::verdict::{ActionRecord, Verdict, VerdictKind};

/// The invariant's name, as `[invariants]` switches it.
pub const INVARIANT: &str = "recovers_within_bound";

/// The cap of mock-master's watch reconnect backoff (`mock_master::watch_plan`).
const MASTER_WATCH_BACKOFF_MS: u64 = 2000;
/// Sampling and round trips.
const SLACK_MS: u64 = 1000;
/// The cap of the sidecar core's conflict backoff: the wait before a new incarnation's
/// first heartbeat after 409s is at most `max(heartbeat_interval, 30 s)`.
const CONFLICT_BACKOFF_CAP_MS: u64 = 30_000;

/// The sidecar timers the bound is made of, in ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// The lease TTL.
    pub lease_ttl_ms: u64,
    /// The keepalive interval (also the `/health` probe interval).
    pub keepalive_ms: u64,
    /// The heartbeat interval.
    pub heartbeat_ms: u64,
    /// The timeout of one probe, scrape or heartbeat.
    pub health_timeout_ms: u64,
    /// The timeout of one etcd request.
    pub etcd_timeout_ms: u64,
}

impl Timers {
    /// The timers of a topology's sidecars (instance overrides set no timers, so every
    /// instance of a topology has the same).
    pub fn of(t: &Topology) -> Timers {
        Timers {
            lease_ttl_ms: t.lease_ttl.saturating_mul(1000),
            keepalive_ms: t.keepalive_interval.as_ms(),
            heartbeat_ms: t.heartbeat_interval.as_ms(),
            health_timeout_ms: t.health_timeout.as_ms(),
            etcd_timeout_ms: t.etcd_timeout.as_ms(),
        }
    }

    /// The bound without 409s (the module doc gives the formula term by term).
    pub fn bound_ms(&self) -> u64 {
        let keepalive_period = self.keepalive_ms.min(self.lease_ttl_ms / 3);
        self.etcd_timeout_ms
            + self.lease_ttl_ms
            + keepalive_period
            + self.keepalive_ms
            + self.health_timeout_ms
            + 5 * self.heartbeat_ms
            + MASTER_WATCH_BACKOFF_MS
            + SLACK_MS
    }

    /// What 409s around the end add: the conflict backoff's cap.
    pub fn after_conflicts_ms(&self) -> u64 {
        self.heartbeat_ms.max(CONFLICT_BACKOFF_CAP_MS)
    }
}

/// One instance's recovery from one disturbance, judged against its bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecoveryCheck {
    /// The disturbance's label (its action's description).
    pub fault: String,
    /// Its action's kind (`link`, `vllm_crash`, …), or `start_up` / `token_mismatch`.
    pub kind: String,
    /// When it began, ms since the start.
    pub start_ms: u64,
    /// When it ended: what the bound counts from.
    pub end_ms: u64,
    /// The instance judged.
    pub instance: String,
    /// The bound it had, in ms.
    pub bound_ms: u64,
    /// The first sample at which it was back; `None`: not within the bound.
    pub recovered_ms: Option<u64>,
    /// From the end to back, in ms; `None`: not within the bound.
    pub time_to_recover_ms: Option<u64>,
}

/// An episode that disturbs an instance's registration or routing.
fn disturbs(e: &Episode) -> bool {
    e.is_fault || e.excuses_registration || e.vllm_down || e.token_mismatch || e.excuses_master
}

/// The kind of an episode: its opening action's (by time and label), else its key's.
fn kind_of(e: &Episode, records: &[ActionRecord]) -> String {
    let opened_by = records
        .iter()
        .find(|r| r.t_ms == e.start_ms && r.label == e.label);
    let kind = opened_by.map_or(String::new(), |r| crate::actions::words::key(&r.action));
    if !kind.is_empty() {
        return kind;
    }
    match e.key() {
        EpisodeKey::StartUp(_) => "start_up",
        EpisodeKey::TokenMismatch(_) => "token_mismatch",
        _ => "other",
    }
    .to_string()
}

fn obs(s: &Sample, i: usize) -> Option<&InstanceObs> {
    s.instances.get(i).map(|o| &**o)
}

/// The last sample at or before `t`'s observation of instance `i`.
fn at_or_before(samples: &[Sample], t: u64, i: usize) -> Option<&InstanceObs> {
    let k = samples.partition_point(|s| s.t_ms <= t);
    obs(samples.get(k.checked_sub(1)?)?, i)
}

/// What the checks of one run read.
struct Run<'a> {
    timers: Timers,
    samples: &'a [Sample],
    eps: &'a [Episode],
    run_end: u64,
}

impl Run<'_> {
    /// Instance `i`'s bound after a disturbance ending at `p`: the timers', plus the
    /// conflict backoff when 409s were possible around `p` — counted for the instance,
    /// or from a master that restarted, lagged etcd or had its heartbeat endpoint
    /// faulted (an injected answer names no instance).
    fn bound(&self, i: usize, p: u64) -> u64 {
        let base = self.timers.bound_ms();
        let after = self.timers.after_conflicts_ms();
        let around = p.saturating_sub(after);
        let conflicts =
            |t: u64| at_or_before(self.samples, t, i).map_or(0, |o| o.status_count(409));
        let master = |o: &Episode| o.disturbs_master() && overlaps(o, around, p + base);
        let conflicted = conflicts(p + base) > conflicts(around) || self.eps.iter().any(master);
        base + if conflicted { after } else { 0 }
    }

    /// Judge instance `i` after episode `k` ended at `p`: `None` when not judged, else
    /// when it was back (`Some(None)`: not within `bound`).
    fn judge(&self, k: usize, i: usize, p: u64, bound: u64) -> Option<Option<u64>> {
        let deadline = p + bound;
        let others = || {
            self.eps
                .iter()
                .enumerate()
                .filter(move |(j, o)| *j != k && disturbs(o) && o.scope.covers(i))
                .map(|(_, o)| o)
        };
        if others().any(|o| o.start_ms <= p && o.end_ms.is_none_or(|x| x > p)) {
            return None; // still disturbed: judged at the end of what disturbs it
        }
        // The window ends at the bound, or earlier at the run's end or at the next
        // disturbance (then only a recovery inside it is judged).
        let next = others()
            .map(|o| o.start_ms)
            .filter(|t| *t > p && *t <= deadline)
            .min();
        let stop = deadline.min(next.unwrap_or(u64::MAX)).min(self.run_end);
        let from = self.samples.partition_point(|s| s.t_ms < p);
        let to = self.samples.partition_point(|s| s.t_ms <= stop);
        let window = self.samples.get(from..to).unwrap_or(&[]);
        // Only while its sidecar runs (an exit is judged by its own verdict): the
        // window is cut at the first sample without it.
        let accepted = at_or_before(self.samples, p, i).map_or(0, InstanceObs::accepted);
        let mut cut = stop < deadline;
        let mut recovered = None;
        for s in window {
            let Some(o) = obs(s, i).filter(|o| o.sidecar_running) else {
                cut = true;
                break;
            };
            if o.fully_active() && o.accepted() > accepted {
                recovered = Some(s.t_ms);
                break;
            }
        }
        // Not back when a window cut short ended: not judged.
        (recovered.is_some() || !cut).then_some(recovered)
    }
}

/// Every recovery judged in a run (see the module doc for which), in episode order.
pub fn checks(
    sc: &Scenario,
    samples: &[Sample],
    eps: &[Episode],
    records: &[ActionRecord],
) -> Vec<RecoveryCheck> {
    let run = Run {
        timers: Timers::of(&sc.topology),
        samples,
        eps,
        run_end: samples.last().map_or(0, |s| s.t_ms),
    };
    let names = sc.instance_names();
    let mut out = Vec::new();
    for (k, e) in eps.iter().enumerate().filter(|(_, e)| disturbs(e)) {
        let Some(p) = e.end_ms else { continue };
        let kind = kind_of(e, records);
        for (i, name) in names.iter().enumerate().filter(|(i, _)| e.scope.covers(*i)) {
            let bound = run.bound(i, p);
            let Some(recovered) = run.judge(k, i, p, bound) else {
                continue;
            };
            out.push(RecoveryCheck {
                fault: e.label.clone(),
                kind: kind.clone(),
                start_ms: e.start_ms,
                end_ms: p,
                instance: name.clone(),
                bound_ms: bound,
                recovered_ms: recovered,
                time_to_recover_ms: recovered.map(|r| r - p),
            });
        }
    }
    out
}

/// The invariant: fails on the check whose bound ran out first without the instance back.
pub fn verdict(sc: &Scenario, samples: &[Sample], checks: &[RecoveryCheck]) -> Verdict {
    let failed = checks
        .iter()
        .filter(|c| c.recovered_ms.is_none())
        .min_by_key(|c| c.end_ms + c.bound_ms);
    let Some(c) = failed else {
        let worst = checks.iter().filter_map(|c| c.time_to_recover_ms).max();
        let bound = Timers::of(&sc.topology).bound_ms();
        let detail = format!(
            "held ({} recoveries judged, slowest {} ms, bound {bound} ms without 409s)",
            checks.len(),
            worst.map_or("-".into(), |w| w.to_string())
        );
        return Verdict::passed(VerdictKind::Invariant, INVARIANT.into(), detail);
    };
    let deadline = c.end_ms + c.bound_ms;
    let i = sc.instance_names().iter().position(|n| *n == c.instance);
    let seen = i
        .and_then(|i| at_or_before(samples, deadline, i).map(|o| (i, o)))
        .map(|(i, o)| {
            let before = at_or_before(samples, c.end_ms, i).map_or(0, InstanceObs::accepted);
            format!(
                "master {:?} routing {:?}, etcd {:?}, {} heartbeat(s) accepted since",
                o.state,
                o.master_incarnation,
                o.etcd,
                o.accepted().saturating_sub(before)
            )
        })
        .unwrap_or_default();
    let detail = format!(
        "{}: not back (ACTIVE, one incarnation, heartbeating) within {} ms of the end of `{}` at t={} ms; at t={deadline} ms: {seen}",
        c.instance, c.bound_ms, c.fault, c.end_ms
    );
    Verdict::failed(
        VerdictKind::Invariant,
        INVARIANT.into(),
        Some(deadline),
        detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::vllm::VllmAction;
    use crate::actions::Action;
    use crate::observe::ObservedState;
    use crate::verdict::episodes;
    use std::sync::Arc;

    fn scenario() -> Scenario {
        Scenario::parse(
            "t.toml",
            "name = \"t\"\ndescription = \"d\"\n[topology]\netcd = \"fake\"\n",
        )
        .unwrap()
    }

    /// One instance sampled every 100 ms for 40 s: back (fully active, a heartbeat
    /// accepted every 500 ms) whenever `up(t)`.
    fn samples(up: impl Fn(u64) -> bool) -> Vec<Sample> {
        let mut beats = 0;
        (0..400)
            .map(|k| {
                let t = k * 100;
                let on = up(t);
                if on && t % 500 == 0 {
                    beats += 1;
                }
                let mut o = InstanceObs {
                    sidecar_running: true,
                    ..Default::default()
                };
                if on {
                    o.etcd = Some("i0-a".into());
                    o.master_incarnation = o.etcd.clone();
                    o.state = Some(ObservedState::Active);
                }
                Arc::make_mut(&mut o.heartbeats).insert(200, beats);
                Sample::new(t, vec![Arc::new(o)].into(), 0, Default::default())
            })
            .collect()
    }

    fn crash(at: u64, restart: u64) -> Vec<ActionRecord> {
        let rec = |t_ms, label: &str, action| ActionRecord {
            sidecar_states: Default::default(),
            step: 1,
            t_ms,
            label: label.into(),
            action,
            error: None,
            detail: None,
        };
        vec![
            rec(at, "crash", Action::Vllm(VllmAction::Crash("i0".into()))),
            rec(
                restart,
                "restart",
                Action::Vllm(VllmAction::Restart("i0".into())),
            ),
        ]
    }

    #[test]
    fn the_bound_adds_up_the_timers() {
        // Defaults: etcd 1.5 s + TTL 3 s + keepalive 0.5 s + probe 0.5 s + health 1 s
        // + 5 × 0.5 s + 2 s + 1 s.
        let t = Timers::of(&scenario().topology);
        assert_eq!(t.bound_ms(), 12_000);
        assert_eq!(t.after_conflicts_ms(), 30_000);
    }

    #[test]
    fn a_recovery_within_the_bound_passes_and_a_slow_one_fails() {
        let sc = scenario();
        let recs = crash(5000, 6000);
        let eps = episodes(&sc, &recs, 40_000);
        let quick = samples(|t| !(5000..7000).contains(&t));
        let c = checks(&sc, &quick, &eps, &recs);
        let crash_check = c.iter().find(|c| c.kind == "vllm_crash").unwrap();
        assert_eq!(crash_check.end_ms, 6000);
        // Back at 7 s, first heartbeat since the end at 7 s.
        assert_eq!(crash_check.time_to_recover_ms, Some(1000));
        assert!(verdict(&sc, &quick, &c).passed);
        // The start-up's window is cut by the crash at 5 s, but it was back before:
        // judged, at its first heartbeat after t = 0.
        let up = c.iter().find(|c| c.kind == "start_up").unwrap();
        assert_eq!(up.time_to_recover_ms, Some(500));
        // Not back before the crash: a cut window is not judged.
        let late = samples(|t| t >= 7000);
        let c = checks(&sc, &late, &eps, &recs);
        assert!(c.iter().all(|c| c.kind != "start_up"), "{c:?}");
        let slow = samples(|t| !(5000..20_000).contains(&t));
        let c = checks(&sc, &slow, &eps, &recs);
        let v = verdict(&sc, &slow, &c);
        assert!(!v.passed);
        assert_eq!(v.first_violation_ms, Some(18_000));
        assert!(v.detail.starts_with("i0: not back"), "{}", v.detail);
    }

    #[test]
    fn keyed_and_active_but_silent_is_not_back() {
        let sc = scenario();
        let recs = crash(5000, 6000);
        let eps = episodes(&sc, &recs, 40_000);
        let mut s = samples(|t| !(5000..6000).contains(&t));
        // No heartbeat accepted after 5 s.
        for x in s.iter_mut().filter(|x| x.t_ms >= 5000) {
            Arc::make_mut(&mut Arc::make_mut(&mut x.instances[0]).heartbeats).insert(200, 10);
        }
        let v = verdict(&sc, &s, &checks(&sc, &s, &eps, &recs));
        assert!(!v.passed, "{v:?}");
    }

    #[test]
    fn a_run_ending_before_the_bound_or_another_fault_defers_the_check() {
        let sc = scenario();
        let recs = crash(5000, 30_000);
        let eps = episodes(&sc, &recs, 40_000);
        let never = samples(|t| t < 5000);
        // The crash ends at 30 s; the run ends at 39.9 s, before 30 s + 12 s.
        let c = checks(&sc, &never, &eps, &recs);
        assert!(c.iter().all(|c| c.kind != "vllm_crash"), "{c:?}");
    }
}
