//! What the runner sees of the cluster, sampled every few tens of milliseconds (and in
//! virtual time also at every event that changes it).
//!
//! Awaits and invariants are judged on these samples (plus the timeline), never on the
//! sidecar's own word: the question is whether the master and etcd — what routing really
//! depends on — see the instance correctly.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A state of an instance as the master sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MasterState {
    /// Its key is in etcd: routable (`is = "active"` in a `state` await).
    Active,
    /// Its key is gone but its vLLM answers: still routable until heartbeats stop
    /// (`is = "lease_lost"`).
    LeaseLost,
    /// Its key is gone and its probe failed (or heartbeats stopped): not routed to,
    /// forgotten after a while (`is = "suspect"`).
    Suspect,
    /// Not known to the master at all.
    Absent,
    /// Active or LeaseLost: the master would route to it.
    Routable,
}

/// One instance at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InstanceObs {
    /// Incarnation in the etcd key; `None`: no key.
    pub etcd: Option<Incarnation>,
    /// State at the master; `None`: unknown to the master.
    pub state: Option<ObservedState>,
    /// Incarnation the master holds for it; `None`: unknown to the master.
    pub master_incarnation: Option<Incarnation>,
    /// Heartbeat answers by status, cumulative over the whole run (across incarnations
    /// and master restarts).
    pub heartbeats: Arc<BTreeMap<u16, u64>>,
    /// Last load metrics the master stored.
    pub waiting: Option<u64>,
    /// GPU KV cache usage the last heartbeat reported (0.0 to 1.0).
    pub gpu_cache: Option<f64>,
    /// Recent maximum time to first token the last heartbeat reported, in ms.
    pub ttft_ms: Option<i64>,
    /// Recent maximum time between tokens the last heartbeat reported, in ms.
    pub tbt_ms: Option<i64>,
    /// Whether the sidecar process (or simulated sidecar) is running.
    pub sidecar_running: bool,
    /// The sidecar's exit code once it exited (128 + the signal if one ended it);
    /// `None`: running or not started.
    pub sidecar_exit: Option<i32>,
}

impl InstanceObs {
    /// Heartbeats the master accepted (answered 200) over the run.
    pub fn accepted(&self) -> u64 {
        self.heartbeats.get(&200).copied().unwrap_or(0)
    }

    /// Heartbeats answered with `status` over the run.
    pub fn status_count(&self, status: u16) -> u64 {
        self.heartbeats.get(&status).copied().unwrap_or(0)
    }

    /// Whether its sidecar was started (running, or exited since).
    pub fn ran(&self) -> bool {
        self.sidecar_running || self.sidecar_exit.is_some()
    }

    /// Routable and agreeing with etcd: what "fully registered" means.
    pub fn fully_active(&self) -> bool {
        self.state == Some(ObservedState::Active)
            && self.etcd.is_some()
            && self.etcd == self.master_incarnation
    }
}

impl InstanceObs {
    /// One instance as etcd (`etcd`: the incarnation in its key) and the master (`view`)
    /// show it, with its heartbeat counts over the run and its sidecar's process state.
    pub fn from_views(
        etcd: Option<Incarnation>,
        view: Option<(mock_master::InstanceRef<'_>, Incarnation)>,
        heartbeats: Arc<BTreeMap<u16, u64>>,
        sidecar_running: bool,
        sidecar_exit: Option<i32>,
    ) -> InstanceObs {
        let (view, master_incarnation) = view.unzip();
        InstanceObs {
            etcd,
            state: view.map(|v| match v.state {
                mock_master::InstanceState::Active => ObservedState::Active,
                mock_master::InstanceState::LeaseLost => ObservedState::LeaseLost,
                mock_master::InstanceState::Suspect => ObservedState::Suspect,
            }),
            master_incarnation,
            heartbeats,
            waiting: view.and_then(|v| v.load.map(|l| l.waiting_requests_num)),
            gpu_cache: view.and_then(|v| v.load.map(|l| f64::from(l.gpu_cache_usage_perc))),
            ttft_ms: view.and_then(|v| v.latency.map(|l| l.recent_max_ttft)),
            tbt_ms: view.and_then(|v| v.latency.map(|l| l.recent_max_tbt)),
            sidecar_running,
            sidecar_exit,
        }
    }
}

/// The master's 401 answers over the run (`global`: its counts), if any instance's
/// sidecar ran: a 401 names no instance, so the count is the cluster's. It stands for
/// every instance whose sidecar ran ([`Observations::unnamed_401`]), so an invariant on
/// 401s fires for any of them and is excused only by a token mismatch.
pub fn unnamed_401(out: &[InstanceObs], global: &BTreeMap<u16, u64>) -> Option<u64> {
    let ran = out.iter().any(InstanceObs::ran);
    global.get(&401).copied().filter(|_| ran)
}

/// Heartbeat answers by status, summed over several counts (each replica's).
pub fn sum_counts<'a>(all: impl IntoIterator<Item = &'a BTreeMap<u16, u64>>) -> BTreeMap<u16, u64> {
    let mut sum = BTreeMap::new();
    for (status, n) in all.into_iter().flatten() {
        *sum.entry(*status).or_default() += n;
    }
    sum
}

/// Master states as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ObservedState {
    /// Its key is in etcd: routable (`ACTIVE` in reports).
    Active,
    /// Its key is gone but its vLLM answers: still routable (`LEASE_LOST`).
    LeaseLost,
    /// Its key is gone and its probe failed, or heartbeats stopped: not routed to
    /// (`SUSPECT`).
    Suspect,
}

impl ObservedState {
    /// Whether an observed state (`None`: unknown to the master) is what an await wants.
    pub fn matches(state: Option<ObservedState>, want: MasterState) -> bool {
        match (want, state) {
            (MasterState::Absent, s) => s.is_none(),
            (MasterState::Routable, Some(s)) => s != ObservedState::Suspect,
            (MasterState::Active, Some(ObservedState::Active)) => true,
            (MasterState::LeaseLost, Some(ObservedState::LeaseLost)) => true,
            (MasterState::Suspect, Some(ObservedState::Suspect)) => true,
            _ => false,
        }
    }
}

/// Every instance's observation at one moment, in topology order: a full set shared
/// with other samples plus the few instances that differ from it. A run keeps a sample at
/// every change, and a change touches one instance or two: each sample then holds those,
/// not a copy of the whole cluster, and two samples of one run compare by what differs.
#[derive(Clone, Debug)]
pub struct Observations {
    base: Arc<[Arc<InstanceObs>]>,
    /// The instances that differ from `base`, by index, ascending (shared too: a sample
    /// and its copies hold one list).
    diff: Arc<[(u32, Arc<InstanceObs>)]>,
    /// The master's 401s over the run ([`unnamed_401`]), counted for every instance
    /// whose sidecar ran: held once here, so that a new 401 changes no instance, and
    /// shown in those instances' heartbeats when serialized.
    pub unnamed_401: Option<u64>,
}

impl Observations {
    /// How many instances may differ from the shared set before a new one is made.
    const DIFF_MAX: usize = 8;

    /// How many instances.
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether there is no instance.
    pub fn is_empty(&self) -> bool {
        self.base.is_empty()
    }

    /// Instance `i`'s observation.
    pub fn get(&self, i: usize) -> Option<&Arc<InstanceObs>> {
        match self.diff.binary_search_by_key(&i, |(j, _)| *j as usize) {
            Ok(k) => self.diff.get(k).map(|(_, o)| o),
            Err(_) => self.base.get(i),
        }
    }

    /// Every instance's observation, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<InstanceObs>> + '_ {
        let mut diff = self.diff.iter().peekable();
        self.base.iter().enumerate().map(move |(i, o)| {
            match diff.next_if(|(j, _)| *j as usize == i) {
                Some((_, changed)) => changed,
                None => o,
            }
        })
    }

    /// These observations with `changes` (index, observation) made; an index past the
    /// end is left out, and so is an observation already held there (shared).
    pub fn with(&self, changes: impl IntoIterator<Item = (usize, Arc<InstanceObs>)>) -> Self {
        let changes = changes.into_iter();
        // Room for the changes, so that inserting them does not grow the list again.
        let mut diff = Vec::with_capacity(self.diff.len() + changes.size_hint().0);
        diff.extend_from_slice(&self.diff);
        let mut changed = false;
        for (i, o) in changes {
            let Some(held) = self.base.get(i) else {
                continue;
            };
            match diff.binary_search_by_key(&i, |(j, _)| *j as usize) {
                Ok(k) => {
                    if let Some((_, held)) = diff.get_mut(k).filter(|(_, h)| !Arc::ptr_eq(h, &o)) {
                        *held = o;
                        changed = true;
                    }
                }
                Err(k) if !Arc::ptr_eq(held, &o) => {
                    diff.insert(k, (i as u32, o));
                    changed = true;
                }
                Err(_) => {}
            }
        }
        let next = Observations {
            unnamed_401: self.unnamed_401,
            base: self.base.clone(),
            diff: match changed {
                true => diff.into(),
                false => self.diff.clone(),
            },
        };
        match next.diff.len() > Self::DIFF_MAX.min(next.len() / 2) {
            true => Observations {
                unnamed_401: self.unnamed_401,
                ..next.iter().cloned().collect()
            },
            false => next,
        }
    }

    /// The instances whose observations differ from `other`'s (compared as shared
    /// values), ascending; `None` when the two do not have the same instances.
    pub fn changed_since(&self, other: &Observations) -> Option<Vec<u32>> {
        if self.len() != other.len() {
            return None;
        }
        let differs = |i: usize| match (self.get(i), other.get(i)) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            _ => true,
        };
        if Arc::ptr_eq(&self.base, &other.base) {
            let mut maybe: Vec<u32> = self
                .diff
                .iter()
                .chain(other.diff.iter())
                .map(|(i, _)| *i)
                .collect();
            maybe.sort_unstable();
            maybe.dedup();
            maybe.retain(|&i| differs(i as usize));
            return Some(maybe);
        }
        Some(
            (0..self.len() as u32)
                .filter(|&i| differs(i as usize))
                .collect(),
        )
    }
}

impl From<Vec<Arc<InstanceObs>>> for Observations {
    fn from(all: Vec<Arc<InstanceObs>>) -> Self {
        Observations {
            base: all.into(),
            // Its own empty list, not the process-wide one (see `Default`).
            diff: Vec::new().into(),
            unnamed_401: None,
        }
    }
}

/// No instance. Not `Arc::default()`: an empty shared slice made so is one static for
/// the whole process, and its count would be written by every run's thread at every
/// copy of a sample.
impl Default for Observations {
    fn default() -> Self {
        Observations::from(Vec::new())
    }
}

impl FromIterator<Arc<InstanceObs>> for Observations {
    fn from_iter<I: IntoIterator<Item = Arc<InstanceObs>>>(all: I) -> Self {
        Observations::from(all.into_iter().collect::<Vec<_>>())
    }
}

impl std::ops::Index<usize> for Observations {
    type Output = Arc<InstanceObs>;

    /// Instance `i`'s observation; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &Arc<InstanceObs> {
        match self.get(i) {
            Some(o) => o,
            None => &self.base[i],
        }
    }
}

/// Tests replace an instance's observation in place.
#[cfg(test)]
impl std::ops::IndexMut<usize> for Observations {
    /// Instance `i`'s observation, to replace; panics past the end, as a slice does.
    fn index_mut(&mut self, i: usize) -> &mut Arc<InstanceObs> {
        let k = match self.diff.binary_search_by_key(&i, |(j, _)| *j as usize) {
            Ok(k) => k,
            Err(k) => {
                let mut diff = self.diff.to_vec();
                diff.insert(k, (i as u32, self.base[i].clone()));
                self.diff = diff.into();
                k
            }
        };
        &mut Arc::make_mut(&mut self.diff)[k].1
    }
}

impl Serialize for Observations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let unnamed = |o: &Arc<InstanceObs>| self.unnamed_401.filter(|_| o.ran());
        s.collect_seq(self.iter().map(|o| match unnamed(o) {
            Some(n) => {
                let mut o = InstanceObs::clone(o);
                Arc::make_mut(&mut o.heartbeats).insert(401, n);
                std::borrow::Cow::Owned(o)
            }
            None => std::borrow::Cow::Borrowed(&**o),
        }))
    }
}

/// The whole cluster at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Milliseconds since the scenario started.
    pub t_ms: u64,
    /// Instances in topology order (`i0`, `i1`, …), shared with the samples before it
    /// where unchanged.
    pub instances: Observations,
    /// How many requests the master has routed so far (the length of the routed list).
    #[serde(skip)]
    pub routed: usize,
    /// The master replicas (shared while unchanged).
    #[serde(skip)]
    pub masters: Arc<Masters>,
    /// The event that made this observation, by its number in the run, when the sample
    /// was taken because an event changed what is observed (virtual time); `None`: taken
    /// at a sample period (real time, or virtual time with nothing changed since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<u64>,
    /// The instances whose observations are not the previous sample's, in order
    /// (`None`: not known, so any may be).
    #[serde(skip)]
    pub changed: Option<Vec<u32>>,
}

impl Sample {
    /// The cluster at `t_ms`: its instances, how many requests the master routed so far,
    /// and the master replicas; taken at a sample period, with nothing known yet of what
    /// changed since the previous sample.
    pub fn new(t_ms: u64, instances: Observations, routed: usize, masters: Arc<Masters>) -> Sample {
        Sample {
            t_ms,
            instances,
            routed,
            masters,
            event: None,
            changed: None,
        }
    }

    /// Note which instances differ from `prev`, the sample before this one (observations
    /// are shared while unchanged, so this compares pointers).
    pub fn mark_changes(&mut self, prev: Option<&Sample>) {
        self.changed = prev.and_then(|p| self.instances.changed_since(&p.instances));
    }
}

/// The master replicas at one moment, read from etcd and from each replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Masters {
    /// The replica the MASTER key names (`None`: no key, or one master that elects
    /// nothing).
    pub elected: Option<usize>,
    /// Heartbeats each replica accepted (answered 200) so far, in replica order; a
    /// replica killed or restarted keeps its count.
    pub accepted: Vec<u64>,
    /// The highest mod revision of a `LOADMETRICS` key in etcd (`None`: there is none).
    pub loadmetrics_revision: Option<i64>,
}

impl Masters {
    /// The replicas as given, shared with the last sample's (`last`) when they are the
    /// same (compared before anything is built: most samples see no change).
    pub fn share(
        last: &mut Arc<Masters>,
        elected: Option<usize>,
        accepted: impl Iterator<Item = u64> + Clone,
        loadmetrics_revision: Option<i64>,
    ) -> Arc<Masters> {
        let same = last.elected == elected
            && last.loadmetrics_revision == loadmetrics_revision
            && last.accepted.iter().copied().eq(accepted.clone());
        if !same {
            *last = Arc::new(Masters {
                elected,
                accepted: accepted.collect(),
                loadmetrics_revision,
            });
        }
        last.clone()
    }

    /// Heartbeats replica `k` accepted so far.
    pub fn accepted_by(&self, k: usize) -> u64 {
        self.accepted.get(k).copied().unwrap_or(0)
    }
}

/// An incarnation id as samples hold it: shared, so a sample copies it without
/// allocating and two samples holding the same one compare without reading it.
pub type Incarnation = Arc<str>;

/// The incarnations one instance was seen with lately, so that every sample of one
/// incarnation (etcd's and the master's alike) holds the same [`Incarnation`].
#[derive(Debug, Default)]
pub struct Incarnations {
    recent: Vec<Incarnation>,
}

impl Incarnations {
    /// Enough for the etcd key's and the master's incarnations while one replaces another.
    const KEPT: usize = 4;

    /// The shared id for `id`: the one already held if seen lately, else a new one.
    pub fn intern(&mut self, id: &str) -> Incarnation {
        if let Some(known) = self.recent.iter().find(|k| ***k == *id) {
            return known.clone();
        }
        let new: Incarnation = Arc::from(id);
        if self.recent.len() >= Self::KEPT {
            self.recent.remove(0);
        }
        self.recent.push(new.clone());
        new
    }
}

/// Turns per-incarnation counters (which reset when the master replaces or forgets an
/// instance) into counters cumulative over the run.
#[derive(Debug, Default, Clone)]
pub struct Cumulative {
    base: BTreeMap<u16, u64>,
    last: BTreeMap<u16, u64>,
    last_incarnation: Option<String>,
    /// `base` plus `last`: what the last update returned.
    total: Arc<BTreeMap<u16, u64>>,
}

impl Cumulative {
    /// The run-long counts, given this incarnation's current counts at the master.
    pub fn update(
        &mut self,
        incarnation: Option<&str>,
        counts: &BTreeMap<u16, u64>,
    ) -> Arc<BTreeMap<u16, u64>> {
        if !self.take(incarnation, counts) {
            // Most samples: nothing new since the last one.
            return self.total.clone();
        }
        let mut total = self.base.clone();
        for (s, n) in &self.last {
            *total.entry(*s).or_default() += n;
        }
        self.total = Arc::new(total);
        self.total.clone()
    }

    /// The run-long count of `status` (`None`: it never was an answer), as the counts
    /// [`Cumulative::update`] answers but without building them.
    pub fn total_of(&self, status: u16) -> Option<u64> {
        let (base, last) = (self.base.get(&status), self.last.get(&status));
        (base.is_some() || last.is_some()).then(|| base.unwrap_or(&0) + last.unwrap_or(&0))
    }

    /// Takes in this incarnation's current counts; answers whether they changed.
    pub fn take(&mut self, incarnation: Option<&str>, counts: &BTreeMap<u16, u64>) -> bool {
        let same_incarnation = incarnation == self.last_incarnation.as_deref();
        if same_incarnation && *counts == self.last {
            return false;
        }
        let reset = !same_incarnation
            || counts
                .iter()
                .any(|(s, n)| self.last.get(s).is_some_and(|l| n < l))
            || self.last.keys().any(|s| !counts.contains_key(s));
        if reset {
            for (s, n) in std::mem::take(&mut self.last) {
                *self.base.entry(s).or_default() += n;
            }
            self.last_incarnation = incarnation.map(str::to_string);
            self.last = counts.clone();
        } else {
            // No reset: `last` has no key `counts` lacks, so this makes it `counts`
            // without building a new map (most updates: one count grew by one).
            for (s, n) in counts {
                self.last.insert(*s, *n);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(waiting: u64) -> Arc<InstanceObs> {
        Arc::new(InstanceObs {
            waiting: Some(waiting),
            ..Default::default()
        })
    }

    #[test]
    fn observations_with_changes_read_as_the_whole_set() {
        let n = 20;
        let mut all: Vec<Arc<InstanceObs>> = (0..n).map(obs).collect();
        let mut o = Observations::from(all.clone());
        // Enough changes, some to one instance again, that a new shared set is made.
        for (k, i) in [3usize, 7, 3, 0, 19, 11, 12, 13, 14, 15, 16, 2, 3]
            .into_iter()
            .enumerate()
        {
            let before = o.clone();
            let new = obs(100 + k as u64);
            all[i] = new.clone();
            o = o.with([(i, new), (n as usize, obs(0))]);
            assert_eq!(o.len(), n as usize);
            let read: Vec<_> = o.iter().cloned().collect();
            assert!(read.iter().zip(&all).all(|(a, b)| Arc::ptr_eq(a, b)));
            assert!((0..n as usize).all(|j| o.get(j).is_some_and(|x| Arc::ptr_eq(x, &all[j]))));
            assert_eq!(o.get(n as usize), None);
            assert_eq!(o.changed_since(&before), Some(vec![i as u32]));
            assert_eq!(before.changed_since(&before), Some(vec![]));
        }
        assert!(o.diff.len() <= Observations::DIFF_MAX);
        o = o.with([(5, obs(5))]);
        assert_eq!(
            o.changed_since(&Observations::from(all.clone())),
            Some(vec![5])
        );
        assert_eq!(o.changed_since(&Observations::default()), None);
        assert_eq!(
            serde_json::to_value(&o).ok(),
            serde_json::to_value(o.iter().collect::<Vec<_>>()).ok()
        );
    }

    #[test]
    fn one_incarnation_is_one_shared_id() {
        let mut ids = Incarnations::default();
        let a = ids.intern("i0-a");
        assert!(Arc::ptr_eq(&a, &ids.intern("i0-a")));
        for other in ["b", "c", "d", "e"] {
            ids.intern(other);
        }
        // Forgotten after four others: a new copy, equal in value.
        let again = ids.intern("i0-a");
        assert!(!Arc::ptr_eq(&a, &again));
        assert_eq!(a, again);
    }

    #[test]
    fn cumulative_keeps_the_last_counts_it_was_given() {
        let mut c = Cumulative::default();
        let m = |x: &[(u16, u64)]| x.iter().copied().collect::<BTreeMap<u16, u64>>();
        for (inc, counts) in [
            (Some("a"), m(&[(200, 1)])),
            (Some("a"), m(&[(200, 2), (409, 1)])),
            (Some("a"), m(&[(200, 3), (409, 1)])),
            (Some("a"), m(&[(200, 3)])),
            (Some("b"), m(&[(503, 1)])),
            (None, m(&[])),
        ] {
            c.update(inc, &counts);
            assert_eq!(c.last, counts);
        }
    }

    #[test]
    fn cumulative_survives_resets() {
        let mut c = Cumulative::default();
        let m = |n: u64| BTreeMap::from([(200u16, n)]);
        let mut update = |inc, n: &BTreeMap<u16, u64>| (*c.update(inc, n)).clone();
        assert_eq!(update(Some("a"), &m(3)), m(3));
        assert_eq!(update(Some("a"), &m(5)), m(5));
        assert_eq!(update(Some("a"), &m(5)), m(5));
        assert_eq!(update(Some("b"), &m(1)), m(6));
        assert_eq!(update(None, &BTreeMap::new()), m(6));
        assert_eq!(update(Some("b"), &m(2)), m(8));
    }
}
