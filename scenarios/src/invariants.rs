//! The invariants: properties of the whole run, judged on every sample and every fault
//! episode ([`crate::episode`]), the same way in both modes. In virtual time there is a
//! sample at every event that changes what is observed, so the first violating sample
//! is the violating event's; each judge looks at an observation when it changes, and
//! again at every sample only while its verdict can change with time alone (a missing
//! key's grace running out).
//!
//! Most invariants are judged as the run goes ([`Judges::catch_up`]), a few hundred
//! samples behind it, while those samples are fresh in memory; each judge keeps what it
//! needs of the past. A sample is judged with the episodes of the actions done by then:
//! an episode starts when its action runs and whatever ends it comes later, so an open
//! episode covers that sample as its final form does. The time to recover, which looks
//! ahead of a sample to a fault's bound, is judged after the run on the samples kept.
//!
//! Why each fires only outside the excusing episodes plus a grace: a fault may break a
//! property for a while (a partitioned sidecar cannot stay registered); what must never
//! happen is the property staying broken with no fault to explain it.

use crate::capability::{self, Capabilities};
use crate::episode::{overlaps, Episode, EpisodeBook, EpisodeKey};
use crate::observe::{Incarnation, InstanceObs, Masters, ObservedState, Sample};
use crate::spec::{Invariants, Scenario};
use crate::verdict::{ActionRecord, Verdict, VerdictKind};
use std::sync::Arc;

/// The instances of `s` whose observations are not the previous sample's (every one
/// where that is not known), with them: the passes that judge an observation alone,
/// whatever the time, judge each once.
fn changed_in(s: &Sample) -> impl Iterator<Item = (usize, &Arc<InstanceObs>)> + '_ {
    let (changed, all) = match &s.changed {
        Some(changed) => (changed.as_slice(), 0),
        None => (&[][..], s.instances.len()),
    };
    let each = changed.iter().map(|&i| i as usize).chain(0..all);
    each.filter_map(move |i| s.instances.get(i).map(|o| (i, o)))
}

/// Which instances of each sample an invariant judges: those whose observation changed
/// since the previous sample (all where that is not known), plus those it asked to see
/// at every sample ([`Judged::again`]: a state whose verdict time alone can change).
/// An unchanged observation judged once is judged the same again.
struct Judged {
    again: Vec<bool>,
    /// The instances `again` holds (and some it no longer does, dropped on the way).
    listed: Vec<usize>,
    todo: Vec<usize>,
}

impl Judged {
    fn new(instances: usize) -> Judged {
        Judged {
            again: vec![false; instances],
            listed: Vec::new(),
            todo: Vec::new(),
        }
    }

    /// The first violation `judge` finds among the instances of `s` to judge, in order:
    /// those whose observation changed, those asked for again, and `more`. `judge` sees
    /// each with its observation, and this to ask for it again.
    fn first(
        &mut self,
        s: &Sample,
        more: impl Iterator<Item = usize>,
        mut judge: impl FnMut(&mut Judged, usize, &InstanceObs) -> Option<String>,
    ) -> Option<String> {
        let mut todo = std::mem::take(&mut self.todo);
        todo.clear();
        todo.extend(changed_in(s).map(|(i, _)| i));
        let again = &self.again;
        self.listed
            .retain(|&i| again.get(i).copied().unwrap_or(false));
        todo.extend(self.listed.iter().copied().chain(more));
        todo.sort_unstable();
        todo.dedup();
        let why = todo
            .iter()
            .find_map(|&i| judge(self, i, s.instances.get(i)?));
        self.todo = todo;
        why
    }

    /// Whether instance `i` is judged at every sample from now on, changed or not.
    fn again(&mut self, i: usize, on: bool) {
        if let Some(a) = self.again.get_mut(i) {
            if on && !*a {
                self.listed.push(i);
            }
            *a = on;
        }
    }
}

/// An invariant judged one sample at a time, oldest first, with the episodes known by
/// that sample's time.
trait Judge: Send {
    /// The episodes changed (an action was recorded, or the run ended).
    fn on_episodes(&mut self, _eps: &[Episode]) {}

    /// Why sample `s` violates the invariant, if it does.
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String>;

    /// What a verdict that held says was judged.
    fn held(&self) -> String {
        "held".into()
    }

    /// The verdict of invariant `name` when no sample violated it: held, unless the
    /// judge found a violation it reports only then.
    fn verdict(&self, name: &str) -> Verdict {
        held(name, self.held())
    }
}

/// Where each switched-on invariant's verdict comes from, in [`Invariants::NAMES`] order.
enum Slot {
    /// Not judged: a capability it needs is lacking.
    Skipped(Verdict),
    /// Judged sample by sample; its first violation, once found.
    Streamed(&'static str, Box<dyn Judge>, Option<Verdict>),
    /// Judged after the run, on the samples kept (the time to recover).
    After,
}

/// Every invariant a scenario switches on, judged as the run goes: hand it the samples
/// and the actions so far ([`Judges::catch_up`]), then the whole run
/// ([`Judges::finish`]).
pub struct Judges<'a> {
    slots: Vec<Slot>,
    /// The episodes of the first `records` actions, written in `book`.
    book: EpisodeBook<'a>,
    eps: Vec<Episode>,
    records: usize,
}

impl<'a> Judges<'a> {
    /// The judges of the invariants `sc` switches on; one that needs a capability `caps`
    /// lacks is skipped with that reason.
    pub fn new(sc: &'a Scenario, caps: &Capabilities) -> Judges<'a> {
        let inv = &sc.invariants;
        let on = [
            inv.registered_when_healthy,
            inv.single_incarnation,
            inv.no_stale_heartbeat_accepted,
            inv.no_401_when_tokens_match,
            inv.heartbeats_sane,
            inv.revoked_on_stop,
            inv.conflict_ends_incarnation,
            inv.heartbeats_to_elected_master,
            inv.recovers_within_bound,
        ];
        // One master elects nothing: there is no other replica to post to.
        let one_master = sc.topology.master.replicas < 2;
        let switched_on = |&(name, on): &(&str, bool)| {
            on && !(one_master && name == "heartbeats_to_elected_master")
        };
        let slot_of = |(name, _)| match capability::missing(&inv.needs(name), caps) {
            Some(why) => Slot::Skipped(Verdict::skipped(VerdictKind::Invariant, name.into(), why)),
            None => {
                judge_of(name, sc).map_or(Slot::After, |judge| Slot::Streamed(name, judge, None))
            }
        };
        let names = Invariants::NAMES.into_iter().zip(on).filter(switched_on);
        let book = EpisodeBook::new(&sc.topology);
        let mut judges = Judges {
            slots: names.map(slot_of).collect(),
            eps: book.so_far(),
            book,
            records: 0,
        };
        judges.episodes_changed();
        judges
    }

    /// Judge the first of `waiting` (the samples not judged yet, oldest first): those
    /// taken before `before_ms`, with the episodes of `records` (every action done so
    /// far: none is done before that time any more). Answers how many were judged.
    pub fn catch_up(
        &mut self,
        waiting: &[Sample],
        records: &[ActionRecord],
        before_ms: u64,
    ) -> usize {
        if let Some(new) = records.get(self.records..).filter(|r| !r.is_empty()) {
            for r in new {
                crate::verdict::record_episodes(&mut self.book, r);
            }
            self.records = records.len();
            self.eps = self.book.so_far();
            self.episodes_changed();
        }
        let due = waiting.partition_point(|s| s.t_ms < before_ms);
        self.judge(waiting.get(..due).unwrap_or(&[]));
        due
    }

    /// Judge the samples left (`waiting`) with the run's final episodes `eps`, and
    /// answer every verdict in order. Those judged after the run read `kept`, the
    /// samples the run kept; `recoveries` are the faults' times to recover.
    pub fn finish(
        mut self,
        sc: &Scenario,
        waiting: &[Sample],
        kept: &[Sample],
        eps: &[Episode],
        recoveries: &[crate::recovery::RecoveryCheck],
    ) -> Vec<Verdict> {
        self.eps = eps.to_vec();
        self.episodes_changed();
        self.judge(waiting);
        let verdict = |slot| match slot {
            Slot::Skipped(v) => v,
            Slot::Streamed(_, _, Some(failed)) => failed,
            Slot::Streamed(name, judge, None) => judge.verdict(name),
            Slot::After => crate::recovery::verdict(sc, kept, recoveries),
        };
        self.slots.into_iter().map(verdict).collect()
    }

    fn episodes_changed(&mut self) {
        for slot in &mut self.slots {
            if let Slot::Streamed(_, judge, None) = slot {
                judge.on_episodes(&self.eps);
            }
        }
    }

    /// Judge `samples`, the ones after those judged so far.
    fn judge(&mut self, samples: &[Sample]) {
        for slot in &mut self.slots {
            let Slot::Streamed(name, judge, failed @ None) = slot else {
                continue;
            };
            let violation = |s| Some(violated(name, s, judge.on_sample(s, &self.eps)?));
            *failed = samples.iter().find_map(violation);
        }
    }
}

/// The judge of invariant `name`, if it is judged sample by sample.
fn judge_of(name: &str, sc: &Scenario) -> Option<Box<dyn Judge>> {
    let names = sc.instance_names();
    let n = names.len();
    let incarnation_grace = sc.invariants.incarnation_grace.as_ms();
    Some(match name {
        "registered_when_healthy" => Box::new(Registered {
            grace: sc.registered_grace().as_millis() as u64,
            // A sidecar still in its start-up gate polls /health with a backoff capped
            // at the lease TTL (the reference's behaviour): after vLLM comes back, it
            // may take that long, plus a probe, to notice.
            gate_ms: sc.topology.lease_ttl.saturating_mul(1000)
                + sc.topology.health_timeout.as_ms(),
            checked: 0,
            seen: vec![Seen::default(); n],
            restarts: Vec::new(),
            next_restart: 0,
            judged: Judged::new(n),
            prev_t: 0,
            names,
        }),
        "single_incarnation" => Box::new(SingleIncarnation {
            grace: incarnation_grace,
            since: vec![None; n],
            judged: Judged::new(n),
            names,
        }),
        "no_stale_heartbeat_accepted" => Box::new(NoStaleHeartbeat {
            grace: incarnation_grace,
            first_seen: vec![Vec::new(); n],
            ttl_ms: sc.topology.lease_ttl.saturating_mul(1000),
            prev_accepted: vec![0; n],
            long_stops: AtStart::new(n, |e| e.outlives_lease, |o| &o.master_incarnation),
            late: None,
            names,
        }),
        "revoked_on_stop" => Box::new(RevokedOnStop {
            within: (sc.topology.lease_ttl.saturating_mul(1000) / 3).clamp(500, 2000),
            stops: AtStart::new(n, |e| e.expects_revoke, |o| &o.etcd),
            checked: 0,
            names,
        }),
        "no_401_when_tokens_match" => Box::new(No401 {
            grace: sc.topology.heartbeat_interval.as_ms() + 1000,
            prev: 0,
            prev_t: 0,
            n: 0,
        }),
        "heartbeats_sane" => Box::new(HeartbeatsSane { names }),
        "conflict_ends_incarnation" => Box::new(ConflictEndsIncarnation {
            since: vec![None; n],
            judged: Judged::new(n),
            names,
        }),
        "heartbeats_to_elected_master" => Box::new(ToElectedMaster {
            window: crate::actions::master::follow_window_ms(&sc.topology),
            since: None,
            judged: 0,
            prev: None,
        }),
        _ => return None,
    })
}

/// Judge every invariant the scenario switches on over the whole run, as [`Judges`]
/// does; one that needs a capability `caps` lacks is skipped with that reason.
#[cfg(test)]
fn check(
    sc: &Scenario,
    samples: &[Sample],
    eps: &[Episode],
    recoveries: &[crate::recovery::RecoveryCheck],
    caps: &Capabilities,
) -> Vec<Verdict> {
    Judges::new(sc, caps).finish(sc, samples, samples, eps, recoveries)
}

/// `name` held; `ok` says how much was judged.
fn held(name: &str, ok: String) -> Verdict {
    Verdict::passed(VerdictKind::Invariant, name.to_string(), ok)
}

/// `name` violated first at sample `s` (the event that made it, in virtual time), for
/// `why`.
fn violated(name: &str, s: &Sample, why: String) -> Verdict {
    let failed = Verdict::failed(VerdictKind::Invariant, name.to_string(), Some(s.t_ms), why);
    Verdict {
        first_violation_event: s.event,
        ..failed
    }
}

/// A sidecar running with vLLM healthy has its key, unless a fault excuses its absence
/// (or did within the grace).
struct Registered {
    grace: u64,
    gate_ms: u64,
    names: Vec<String>,
    checked: u64,
    seen: Vec<Seen>,
    /// Every stop and start of a sidecar by an action (from the episodes those actions
    /// open) as (time, instance), oldest first: a stop and a start between two samples
    /// is never seen not running. Episodes only ever start at or after the samples
    /// already judged, so the times known later extend those known before.
    restarts: Vec<(u64, usize)>,
    /// The first of `restarts` not yet due.
    next_restart: usize,
    /// An instance running without its key is judged at every sample (its grace runs
    /// out with time); any other, only when it changes.
    judged: Judged,
    /// The time of the sample judged before this one.
    prev_t: u64,
}

/// What [`Registered`] keeps of an instance.
#[derive(Clone, Default)]
struct Seen {
    /// The key the last sample showed.
    key: Option<Incarnation>,
    /// When its sidecar was last seen not running (0 before it ever was).
    last_down: u64,
    /// Its sidecar was not running when it was last judged: it was not at every sample
    /// since, the last of which is the one before the sample judging it next.
    down: bool,
    /// Whether it registered since it was last seen starting (out of its start-up gate).
    registered: bool,
    /// The key when its sidecar was last seen not running: a sidecar killed without
    /// revoking leaves its key until the lease runs out, which is no registration of
    /// the one started after it.
    left_behind: Option<Incarnation>,
    /// The latest stop or start due since it was last judged.
    restarted: Option<u64>,
    /// The episode (its index) that last excused a missing key.
    excused_by: Option<usize>,
}

impl Judge for Registered {
    fn on_episodes(&mut self, eps: &[Episode]) {
        let instances = 0..self.seen.len();
        self.restarts.clear();
        for e in eps {
            let scope = match e.key() {
                EpisodeKey::SidecarDown(scope) | EpisodeKey::SidecarStart(scope, _) => *scope,
                _ => continue,
            };
            let covered = instances.clone().filter(|&i| scope.covers(i));
            self.restarts.extend(covered.map(|i| (e.start_ms, i)));
        }
        self.restarts.sort_unstable();
    }

    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        let (grace, gate_ms) = (self.grace, self.gate_ms);
        let prev_t = std::mem::replace(&mut self.prev_t, s.t_ms);
        // The instances with a stop or start due by now are judged too.
        let from = self.next_restart;
        let due_now = |r: &&(u64, usize)| r.0 <= s.t_ms;
        while let Some(&(t, i)) = self.restarts.get(self.next_restart).filter(due_now) {
            if let Some(seen) = self.seen.get_mut(i) {
                seen.restarted = Some(t);
            }
            self.next_restart += 1;
        }
        let due = self.restarts.get(from..self.next_restart).unwrap_or(&[]);
        self.judged.first(s, due.iter().map(|&(_, i)| i), |judged, i, o| {
            let seen = self.seen.get_mut(i)?;
            judged.again(i, o.sidecar_running && o.etcd.is_none());
            if std::mem::take(&mut seen.down) {
                seen.last_down = seen.last_down.max(prev_t);
            }
            if let Some(t) = seen.restarted.take() {
                seen.last_down = seen.last_down.max(t);
                seen.registered = false;
                seen.left_behind = seen.key.clone();
            }
            seen.key.clone_from(&o.etcd);
            if !o.sidecar_running {
                seen.down = true;
                seen.last_down = s.t_ms;
                seen.registered = false;
                seen.left_behind = o.etcd.clone();
                return None;
            }
            seen.registered |= o.etcd.is_some() && o.etcd != seen.left_behind;
            let from = s.t_ms.saturating_sub(grace);
            if seen.last_down > from || s.t_ms < grace {
                return None;
            }
            self.checked += 1;
            // A key present holds whatever the faults; only a missing one needs an excuse
            // (looked for only then: most samples have their key).
            let gated = !seen.registered;
            let excuses = |e: &Episode| {
                let extra = e.extra_grace_ms + if gated && e.vllm_down { gate_ms } else { 0 };
                e.scope.covers(i)
                    && e.excuses_registration
                    && overlaps(e, from.saturating_sub(extra), s.t_ms)
            };
            // The episode that excused it last is asked first: it most often still does.
            let last = seen.excused_by.and_then(|k| eps.get(k));
            if o.etcd.is_some() || last.is_some_and(excuses) {
                return None;
            }
            seen.excused_by = eps.iter().position(excuses);
            if seen.excused_by.is_some() {
                return None;
            }
            let name = self.names.get(i).map_or("?", String::as_str);
            Some(format!("{name} had no etcd key at t={} ms although vLLM was healthy, its sidecar running and nothing disturbed registration for {grace} ms", s.t_ms))
        })
    }

    fn held(&self) -> String {
        format!(
            "held ({} observations judged, grace {} ms)",
            self.checked, self.grace
        )
    }
}

fn master_excused(eps: &[Episode], t: u64, grace: u64) -> bool {
    eps.iter()
        .any(|e| e.excuses_master && overlaps(e, t.saturating_sub(grace + 3000), t))
}

/// etcd and the master agree on an instance's incarnation, but for a grace.
struct SingleIncarnation {
    grace: u64,
    names: Vec<String>,
    /// Per instance: since when etcd and the master disagree.
    since: Vec<Option<u64>>,
    /// A split instance is judged at every sample (its grace runs out with time).
    judged: Judged,
}

impl Judge for SingleIncarnation {
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        let grace = self.grace;
        self.judged.first(s, std::iter::empty(), |judged, i, o| {
            let split = matches!((&o.etcd, &o.master_incarnation, o.state), (Some(e), Some(m), Some(st)) if e != m && st != ObservedState::Suspect);
            judged.again(i, split);
            let since = self.since.get_mut(i)?;
            if !split || master_excused(eps, s.t_ms, grace) {
                *since = None;
                return None;
            }
            let start = *since.get_or_insert(s.t_ms);
            let name = self.names.get(i).map_or("?", String::as_str);
            (s.t_ms - start > grace).then(|| {
                format!(
                    "{name}: etcd has incarnation {:?} but the master routes to {:?} since t={start} ms",
                    o.etcd, o.master_incarnation
                )
            })
        })
    }

    fn held(&self) -> String {
        format!("held (grace {} ms)", self.grace)
    }
}

/// The master accepts no heartbeat of an incarnation etcd superseded, but for a grace.
///
/// Nor, after a sidecar was stopped for longer than its lease's TTL, a heartbeat of the
/// incarnation it held before the stop, for a TTL after the sidecar continues: the
/// sidecar's clock says that lease has run out, whatever its last keepalive answer said.
/// A heartbeat the master accepted while it still believed that incarnation is one of it
/// (a newer one would be refused until its key is seen).
struct NoStaleHeartbeat {
    grace: u64,
    ttl_ms: u64,
    names: Vec<String>,
    /// Per instance: incarnations in order of first sighting in etcd.
    first_seen: Vec<Vec<(Incarnation, u64)>>,
    prev_accepted: Vec<u64>,
    /// The stops that outlive a lease, with the incarnation the master held of each
    /// instance when they began.
    long_stops: AtStart,
    /// The first heartbeat after a long stop that was accepted for the incarnation from
    /// before it: reported if nothing else violates the invariant.
    late: Option<Verdict>,
}

impl Judge for NoStaleHeartbeat {
    fn on_episodes(&mut self, eps: &[Episode]) {
        self.long_stops.on_episodes(eps);
    }

    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        if self.late.is_none() {
            let why = self.after_long_stop(s, eps);
            self.late = why.map(|why| violated("no_stale_heartbeat_accepted", s, why));
        }
        // Unchanged: its incarnation is already seen and its accepted count did not grow,
        // so nothing below changes or fires.
        for (i, o) in changed_in(s) {
            let (Some(seen), Some(prev)) =
                (self.first_seen.get_mut(i), self.prev_accepted.get_mut(i))
            else {
                continue;
            };
            // Most samples show the incarnation last seen: no search then.
            if let Some(e) = &o.etcd {
                if seen.last().is_none_or(|(x, _)| x != e) && !seen.iter().any(|(x, _)| x == e) {
                    seen.push((e.clone(), s.t_ms));
                }
            }
            let grew = o.accepted() > *prev;
            *prev = o.accepted();
            let Some(m) = o.master_incarnation.as_ref().filter(|_| grew) else {
                continue;
            };
            // The incarnation etcd showed after the one heartbeated, if any.
            let next = seen
                .iter()
                .position(|(x, _)| x == m)
                .and_then(|k| seen.get(k + 1));
            if let Some((newer, t_newer)) = next {
                if s.t_ms > t_newer + self.grace && !master_excused(eps, s.t_ms, self.grace) {
                    let name = self.names.get(i).map_or("?", String::as_str);
                    return Some(format!("{name}: heartbeats of incarnation {m} still accepted at t={} ms, superseded by {newer} at t={t_newer} ms", s.t_ms));
                }
            }
        }
        None
    }

    fn verdict(&self, name: &str) -> Verdict {
        self.late.clone().unwrap_or_else(|| held(name, self.held()))
    }
}

impl NoStaleHeartbeat {
    /// Why sample `s` shows a heartbeat accepted after a long stop for the incarnation
    /// from before it, if it does (`prev_accepted` is still the sample before's).
    fn after_long_stop(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        self.long_stops.on_sample(s, eps);
        for (k, before) in &self.long_stops.taken {
            let (Some(e), Some(before)) = (eps.get(*k), before) else {
                continue;
            };
            let Some(end) = e.end_ms else {
                continue;
            };
            // From the instant it continues: what it does then is judged, whatever was
            // accepted while it was stopped (heartbeats it sent before the stop).
            if s.t_ms < end || s.t_ms > end + self.ttl_ms {
                continue;
            }
            for (i, old) in before
                .iter()
                .enumerate()
                .filter(|(i, _)| e.scope.covers(*i))
            {
                let (Some(old), Some(o)) = (old, s.instances.get(i)) else {
                    continue;
                };
                let grew = o.accepted() > self.prev_accepted.get(i).copied().unwrap_or(0);
                if grew && o.master_incarnation.as_ref() == Some(old) {
                    let name = self.names.get(i).map_or("?", String::as_str);
                    return Some(format!("{name}: a heartbeat of incarnation {old} was accepted at t≈{} ms, after the sidecar was stopped {} ms (longer than its lease's TTL) until t={end} ms", s.t_ms, end - e.start_ms));
                }
            }
        }
        None
    }
}

/// The episodes of one kind, each with what every instance showed of one field when it
/// began: as last seen before the first sample after its start.
struct AtStart {
    /// Which episodes are taken.
    kind: fn(&Episode) -> bool,
    /// Which field of an observation is kept.
    field: fn(&InstanceObs) -> &Option<Incarnation>,
    /// How many episodes were looked at (episodes are only ever added, in order).
    seen: usize,
    /// Each instance's field as last seen.
    last: Vec<Option<Incarnation>>,
    /// The episodes taken, by their place in the episodes, each with `last` as it was
    /// when the episode began, once a sample passed its start.
    taken: Vec<(usize, Option<Vec<Option<Incarnation>>>)>,
}

impl AtStart {
    fn new(
        instances: usize,
        kind: fn(&Episode) -> bool,
        field: fn(&InstanceObs) -> &Option<Incarnation>,
    ) -> AtStart {
        AtStart {
            kind,
            field,
            seen: 0,
            last: vec![None; instances],
            taken: Vec::new(),
        }
    }

    fn on_episodes(&mut self, eps: &[Episode]) {
        let new = eps.iter().enumerate().skip(self.seen);
        let kind = self.kind;
        let taken = new.filter(|(_, e)| kind(e)).map(|(k, _)| (k, None));
        self.taken.extend(taken);
        self.seen = eps.len();
    }

    /// Before sample `s` is judged: each episode begun by its time keeps the field as
    /// last seen; then the field is `s`'s.
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) {
        for (k, before) in &mut self.taken {
            if before.is_none() && eps.get(*k).is_some_and(|e| s.t_ms > e.start_ms) {
                *before = Some(self.last.clone());
            }
        }
        for (i, o) in changed_in(s) {
            if let Some(last) = self.last.get_mut(i) {
                last.clone_from((self.field)(o));
            }
        }
    }
}

/// No heartbeat is answered 401 while every sidecar's token matches the master's.
struct No401 {
    grace: u64,
    prev: u64,
    prev_t: u64,
    /// The highest instance count so far (each only grows: counts are over the run).
    n: u64,
}

impl Judge for No401 {
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        // The master answers 401 before it reads the body, so a 401 names no instance:
        // the count is cluster-wide, and excused only while some sidecar's token
        // mismatches.
        self.n = self.n.max(s.instances.unnamed_401.unwrap_or(0));
        if self.n > self.prev {
            let from = self.prev_t.saturating_sub(self.grace);
            let excused = eps
                .iter()
                .any(|e| e.token_mismatch && overlaps(e, from, s.t_ms));
            if !excused {
                return Some(format!("a heartbeat was answered 401 at t≈{} ms while every sidecar's token matched the master's", s.t_ms));
            }
        }
        self.prev = self.n;
        self.prev_t = s.t_ms;
        None
    }
}

/// What the master stored of each heartbeat is in range.
struct HeartbeatsSane {
    names: Vec<String>,
}

impl Judge for HeartbeatsSane {
    fn on_sample(&mut self, s: &Sample, _eps: &[Episode]) -> Option<String> {
        // Judged on the observation alone: an unchanged one passed already.
        let (i, o) = changed_in(s).find(|(_, o)| insane(o))?;
        let name = self.names.get(i).map_or("?", String::as_str);
        Some(format!(
            "{name}: master stored waiting={:?} gpu_cache={:?} ttft={:?} tbt={:?}",
            o.waiting, o.gpu_cache, o.ttft_ms, o.tbt_ms
        ))
    }
}

/// Load or latency out of any range a heartbeat can carry.
fn insane(o: &InstanceObs) -> bool {
    o.gpu_cache
        .is_some_and(|g| !g.is_finite() || !(0.0..=1.0).contains(&g))
        || o.waiting.is_some_and(|w| w > 10_000_000)
        || o.ttft_ms.is_some_and(|x| !(0..=86_400_000).contains(&x))
        || o.tbt_ms.is_some_and(|x| !(0..=86_400_000).contains(&x))
}

/// After a graceful stop or a drain the key must go at once: a revoke takes one etcd round trip,
/// while a key left to expire keeps a dead instance routable for up to a lease TTL.
/// Judged a third of the TTL after the stop (clamped to 0.5–2 s), when a key the sidecar
/// did not revoke is still there (a keepalive is at most a third of the TTL old, with
/// the timers operators use); any other fault on the instance meanwhile excuses it.
struct RevokedOnStop {
    within: u64,
    names: Vec<String>,
    /// The stops and drains not judged yet, with each instance's key when they began.
    stops: AtStart,
    checked: u64,
}

impl Judge for RevokedOnStop {
    fn on_episodes(&mut self, eps: &[Episode]) {
        self.stops.on_episodes(eps);
    }

    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        self.stops.on_sample(s, eps);
        let within = self.within;
        let due = |k: usize| eps.get(k).is_some_and(|e| s.t_ms >= e.start_ms + within);
        let judged: Vec<_> = self.stops.taken.extract_if(.., |x| due(x.0)).collect();
        for (k, before) in judged {
            let Some(stop) = eps.get(k) else { continue };
            let t = stop.start_ms;
            let disturbed = |i: usize| {
                eps.iter().any(|e| {
                    e.is_fault && !e.expects_revoke && e.scope.covers(i) && overlaps(e, t, s.t_ms)
                })
            };
            let keys = before.unwrap_or_default();
            for (i, inc) in keys.iter().enumerate() {
                let Some(inc) = inc else { continue };
                if !stop.scope.covers(i) || disturbed(i) {
                    continue;
                }
                self.checked += 1;
                // The same incarnation (a sidecar started again since registers a new one).
                if s.instances.get(i).and_then(|o| o.etcd.as_ref()) == Some(inc) {
                    let name = self.names.get(i).map_or("?", String::as_str);
                    return Some(format!("{name}: key of incarnation {inc} still in etcd at t={} ms, {} ms after its sidecar was stopped or drained at t={t} ms (a sidecar revokes its lease on both)", s.t_ms, s.t_ms - t));
                }
            }
        }
        None
    }

    fn held(&self) -> String {
        format!(
            "held ({} stop(s) or drain(s) checked, within {} ms)",
            self.checked, self.within
        )
    }
}

/// With several replicas: once the follow window has passed since the elected replica
/// last changed, a heartbeat accepted by any other replica is one the master's routing
/// never sees (a standby answers 200 too).
struct ToElectedMaster {
    window: u64,
    /// The elected replica and since when.
    since: Option<(Option<usize>, u64)>,
    judged: u64,
    /// The previous sample's replicas.
    prev: Option<Arc<Masters>>,
}

impl Judge for ToElectedMaster {
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        let prev = self.prev.replace(s.masters.clone())?;
        let elected = s.masters.elected;
        let &mut (_, changed_at) = match &mut self.since {
            Some(since) if since.0 == elected => since,
            since => since.insert((elected, s.t_ms)),
        };
        let k = elected?;
        if Arc::ptr_eq(&prev, &s.masters)
            || s.t_ms < changed_at + self.window
            || master_excused(eps, s.t_ms, 0)
        {
            return None;
        }
        self.judged += 1;
        let stray = (0..s.masters.accepted.len())
            .find(|&j| j != k && s.masters.accepted_by(j) > prev.accepted_by(j))?;
        Some(format!("replica {stray} accepted a heartbeat at t≈{} ms while replica {k} has been the elected master since t={changed_at} ms (longer than the {} ms follow window): that load never reaches routing", s.t_ms, self.window))
    }

    fn held(&self) -> String {
        format!(
            "held ({} changes of the replicas' counts judged, follow window {} ms)",
            self.judged, self.window
        )
    }
}

/// Conflicts (409) per incarnation: a sidecar told its incarnation is unknown registers
/// a new one and posts that; it never keeps posting the old one. Counted from the
/// sample where etcd shows an incarnation (or no key) until etcd shows another; more
/// than [`MAX_CONFLICTS`] is a violation, unless the master restarted or was faulted
/// (it may then answer anything) since the count began.
struct ConflictEndsIncarnation {
    names: Vec<String>,
    /// Per instance: the incarnation in etcd, since when, and the 409 count then.
    since: Vec<Option<(Option<Incarnation>, u64, u64)>>,
    /// An instance whose count since then was over the limit at its last change is
    /// judged at every sample (an unchanged observation may fire once nothing excuses
    /// it).
    judged: Judged,
}

impl Judge for ConflictEndsIncarnation {
    fn on_sample(&mut self, s: &Sample, eps: &[Episode]) -> Option<String> {
        const MAX_CONFLICTS: u64 = 3;
        self.judged.first(s, std::iter::empty(), |judged, i, o| {
            let slot = self.since.get_mut(i)?;
            let count = o.status_count(409);
            let &mut (_, from, base) = match slot {
                Some(since) if since.0 == o.etcd => since,
                slot => slot.insert((o.etcd.clone(), s.t_ms, count)),
            };
            let master_disturbed =
                || eps.iter().any(|e| e.disturbs_master() && overlaps(e, from, s.t_ms));
            let is_over = count - base > MAX_CONFLICTS;
            judged.again(i, is_over);
            if !is_over || master_disturbed() {
                return None;
            }
            let name = self.names.get(i).map_or("?", String::as_str);
            let inc = o.etcd.as_deref().unwrap_or("no key");
            Some(format!("{name}: the master answered 409 {} times since t={from} ms while etcd kept {inc} (a sidecar answered 409 registers a new incarnation instead of posting the old one again)", count - base))
        })
    }
}

/// Judge `samples` with `judge` of invariant `name`, as [`Judges`] does.
#[cfg(test)]
fn judge_run(name: &str, sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    let Some(mut judge) = judge_of(name, sc) else {
        return held(name, "not judged sample by sample".into());
    };
    judge.on_episodes(eps);
    for s in samples {
        if let Some(why) = judge.on_sample(s, eps) {
            return violated(name, s, why);
        }
    }
    judge.verdict(name)
}

#[cfg(test)]
fn revoked_on_stop(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    judge_run("revoked_on_stop", sc, samples, eps)
}

#[cfg(test)]
fn registered_when_healthy(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    judge_run("registered_when_healthy", sc, samples, eps)
}

#[cfg(test)]
fn conflict_ends_incarnation(sc: &Scenario, samples: &[Sample], eps: &[Episode]) -> Verdict {
    judge_run("conflict_ends_incarnation", sc, samples, eps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::sidecar::SidecarAction;
    use crate::actions::vllm::{Health, VllmAction};
    use crate::actions::Action;
    use crate::observe::InstanceObs;
    use crate::verdict::{episodes, recoveries, ActionRecord};
    use std::sync::Arc;

    fn scenario() -> Scenario {
        Scenario::parse("t.toml", "name = \"t\"\ndescription = \"d\"\n[topology]\nlease_ttl = 1\nkeepalive_interval = \"250ms\"\n").unwrap()
    }

    /// One instance, sampled every 100 ms for 8 s; `registered(t)` says whether its key exists.
    fn samples(registered: impl Fn(u64) -> bool) -> Vec<Sample> {
        (0..80)
            .map(|k| {
                let t = k * 100;
                Sample::new(
                    t,
                    vec![Arc::new(InstanceObs {
                        etcd: registered(t).then(|| "i0-a".into()),
                        sidecar_running: true,
                        ..Default::default()
                    })]
                    .into(),
                    0,
                    Default::default(),
                )
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

    /// A sidecar stopped and started again between two samples is never seen not
    /// running; the actions still say it restarted, so it is back in its start-up gate
    /// (here: after vLLM was down, the gate's backoff excuses the key until 6 s).
    #[test]
    fn a_restart_between_two_samples_still_puts_the_sidecar_in_its_gate() {
        let sc = scenario(); // grace 2.5 s; gate: TTL 1 s + health timeout 1 s
        let health = |t, health| {
            let instance = "i0".to_string();
            record(t, Action::Vllm(VllmAction::Health { instance, health }))
        };
        let stop = record(1210, Action::Sidecar(SidecarAction::Stop("i0".into())));
        let start = record(
            1250,
            Action::Sidecar(SidecarAction::Start {
                instance: "i0".into(),
                token: None,
            }),
        );
        let key = |t: u64| !(2000..5500).contains(&t);
        let with_restart = [
            health(1000, Health::Down),
            stop,
            start,
            health(1500, Health::Up),
        ];
        let eps = episodes(&sc, &with_restart, 8000);
        let v = registered_when_healthy(&sc, &samples(key), &eps);
        assert!(v.passed, "{v:?}");
        // Without the restart, the sidecar was never in its gate: the key is owed 2.5 s
        // after vLLM came back.
        let without = [health(1000, Health::Down), health(1500, Health::Up)];
        let eps = episodes(&sc, &without, 8000);
        let v = registered_when_healthy(&sc, &samples(key), &eps);
        assert_eq!(v.first_violation_ms, Some(4100), "{v:?}");
    }

    #[test]
    fn recovery_time_runs_from_the_end_of_the_fault() {
        let mut s = samples(|t| !(1000..2000).contains(&t));
        for o in s.iter_mut() {
            let o = Arc::make_mut(&mut o.instances[0]);
            let active = o.etcd.is_some();
            o.state = active.then_some(ObservedState::Active);
            o.master_incarnation = o.etcd.clone();
        }
        let crash = record(1000, Action::Vllm(VllmAction::Crash("i0".into())));
        let restart = record(1500, Action::Vllm(VllmAction::Restart("i0".into())));
        let r = recoveries(&s, &episodes(&scenario(), &[crash, restart], 4000));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].end_ms, Some(1500));
        assert_eq!(r[0].time_to_recover_ms, Some(500));
    }

    fn stop(t_ms: u64) -> ActionRecord {
        record(t_ms, Action::Sidecar(SidecarAction::Stop("i0".into())))
    }

    #[test]
    fn a_key_left_to_expire_after_a_stop_is_a_violation() {
        let sc = scenario(); // lease TTL 1 s: judged 500 ms after the stop
        let eps = episodes(&sc, &[stop(3000)], 8000);
        let expired = samples(|t| t < 4000);
        let v = revoked_on_stop(&sc, &expired, &eps);
        assert!(!v.passed, "{v:?}");
        assert_eq!(v.first_violation_ms, Some(3500));
        let revoked = samples(|t| t < 3100);
        assert!(revoked_on_stop(&sc, &revoked, &eps).passed);
    }

    #[test]
    fn a_kill_expects_no_revoke_and_a_restart_is_a_new_incarnation() {
        let sc = scenario();
        let expired = samples(|t| t < 4000);
        let kill = record(3000, Action::Sidecar(SidecarAction::Kill("i0".into())));
        assert!(revoked_on_stop(&sc, &expired, &episodes(&sc, &[kill], 8000)).passed);
        let mut restarted = samples(|_| true);
        for s in restarted.iter_mut().filter(|s| s.t_ms >= 3200) {
            Arc::make_mut(&mut s.instances[0]).etcd = Some("i0-b".into());
        }
        assert!(revoked_on_stop(&sc, &restarted, &episodes(&sc, &[stop(3000)], 8000)).passed);
    }

    /// Samples with a 409 answered every 500 ms; `incarnation(t)` is etcd's.
    fn conflicts(incarnation: impl Fn(u64) -> String) -> Vec<Sample> {
        let mut s = samples(|_| true);
        for x in s.iter_mut() {
            let o = Arc::make_mut(&mut x.instances[0]);
            o.etcd = Some(incarnation(x.t_ms).into());
            Arc::make_mut(&mut o.heartbeats).insert(409, x.t_ms / 500);
        }
        s
    }

    #[test]
    fn conflicts_on_one_incarnation_are_a_violation() {
        let sc = scenario();
        let v = conflict_ends_incarnation(&sc, &conflicts(|_| "i0-a".into()), &[]);
        assert!(!v.passed, "{v:?}");
        assert_eq!(v.first_violation_ms, Some(2000));
        // Each conflict answered by a new incarnation: what a correct sidecar does.
        let renewed = conflicts(|t| format!("i0-{}", t / 500));
        assert!(conflict_ends_incarnation(&sc, &renewed, &[]).passed);
    }

    /// Samples sharing an unchanged observation (as a run's do) are judged exactly as
    /// the same samples holding a fresh copy of each: the passes that skip an
    /// observation seen in the previous sample miss nothing.
    #[test]
    fn shared_observations_are_judged_as_fresh_copies_are() {
        use crate::observe::ObservedState;
        use std::collections::BTreeMap;
        let sc = Scenario::parse("t.toml", "name = \"t\"\ndescription = \"d\"\n[topology]\ninstances = 3\nlease_ttl = 1\nkeepalive_interval = \"250ms\"\n").unwrap();
        assert_eq!(sc.instance_names().len(), 3);
        let eps = episodes(&sc, &[], 40_000);
        let mut failed = 0;
        for seed in 1..60u64 {
            let mut x = seed;
            let mut next = |n: u64| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) % n
            };
            let mut last: Vec<Option<Arc<InstanceObs>>> = vec![None; 3];
            let mut shared = Vec::new();
            for k in 0..400u64 {
                let mut instances = Vec::new();
                for slot in last.iter_mut() {
                    let mut o = slot.as_deref().cloned().unwrap_or_default();
                    // Mostly unchanged; now and then one field moves.
                    match next(40) {
                        0 => o.etcd = Some(format!("i-{}", next(4)).into()),
                        1 => o.etcd = None,
                        2 => o.master_incarnation = Some(format!("i-{}", next(4)).into()),
                        3 => {
                            o.state = [
                                None,
                                Some(ObservedState::Active),
                                Some(ObservedState::Suspect),
                            ][next(3) as usize]
                        }
                        4 | 5 => {
                            let mut h: BTreeMap<u16, u64> = (*o.heartbeats).clone();
                            *h.entry([200, 401, 409][next(3) as usize]).or_default() += 1;
                            o.heartbeats = Arc::new(h);
                        }
                        6 => o.sidecar_running = !o.sidecar_running,
                        7 => o.gpu_cache = Some(if next(30) == 0 { 2.0 } else { 0.5 }),
                        _ => {}
                    }
                    let o = match slot {
                        Some(l) if **l == o => l.clone(),
                        _ => Arc::new(o),
                    };
                    *slot = Some(o.clone());
                    instances.push(o);
                }
                let mut sample = Sample::new(k * 100, instances.into(), 0, Default::default());
                sample.mark_changes(shared.last());
                shared.push(sample);
            }
            let fresh: Vec<Sample> = shared
                .iter()
                .map(|s| {
                    Sample::new(
                        s.t_ms,
                        s.instances
                            .iter()
                            .map(|o| Arc::new((**o).clone()))
                            .collect(),
                        0,
                        Default::default(),
                    )
                })
                .collect();
            // A pass counts what it judged (fewer observations when they are shared),
            // so the verdicts are compared by outcome, and a failure by what it says.
            let outcome = |samples: &[Sample]| {
                check(&sc, samples, &eps, &[], &crate::capability::all())
                    .into_iter()
                    .map(|v| {
                        (
                            v.name,
                            v.passed,
                            v.first_violation_ms,
                            (!v.passed).then_some(v.detail),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            let judged = outcome(&shared);
            failed += judged.iter().filter(|v| !v.1).count();
            assert_eq!(judged, outcome(&fresh));
        }
        // The samples break some invariants: what is compared includes violations.
        assert!(failed > 0);
    }
}
