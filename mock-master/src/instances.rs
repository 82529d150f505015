//! The master's view of every instance, docs/contract.md §2's state machine, clock-free.
//!
//! Inputs are etcd events, health-probe results, heartbeats and the passing of time;
//! the time is always an argument (`now`: time since an origin the caller picks), never
//! read from a clock, and nothing here does I/O. What an input changed comes back as
//! [`Notice`]s (state transitions, stale deletes) for the caller to report, so the same
//! rules run under a real clock (`registry`) and in virtual time.
//!
//! ```text
//!   PUT (new name / new incarnation) ──▶ ACTIVE ◀── PUT (same incarnation)
//!   ACTIVE / LEASE_LOST / SUSPECT ── DELETE of the tracked incarnation ──▶ probe
//!   probe OK ──▶ LEASE_LOST          probe failed ──▶ SUSPECT
//!   LEASE_LOST ── no heartbeat for lease_lost_timeout ──▶ SUSPECT
//!   SUSPECT ── heartbeat ──▶ LEASE_LOST
//!   SUSPECT ── longer than suspect_window ──▶ deregistered (forgotten)
//! ```

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::pbjson::{LatencyMetrics, LoadMetrics};

/// The four instance key prefixes (after the namespace), by type number.
pub const TYPE_PREFIXES: [(&str, i64); 4] = [
    ("XLLM:DEFAULT:", 0),
    ("XLLM:PREFILL:", 1),
    ("XLLM:DECODE:", 2),
    ("XLLM:MIX:", 3),
];

/// The runtime state of a tracked instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InstanceState {
    Active,
    LeaseLost,
    Suspect,
}

impl InstanceState {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Active => "ACTIVE",
            InstanceState::LeaseLost => "LEASE_LOST",
            InstanceState::Suspect => "SUSPECT",
        }
    }

    /// ACTIVE and LEASE_LOST instances get traffic; SUSPECT ones do not.
    pub fn routable(self) -> bool {
        self != InstanceState::Suspect
    }
}

/// The pseudo-state before registration and after deregistration, in events.
pub const DEREGISTERED: &str = "DEREGISTERED";

/// The registration value (`InstanceMetaInfo`) the master reads from etcd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceMeta {
    /// `name` inside the value (the registry itself keys instances by the key suffix).
    pub name: String,
    pub rpc_address: String,
    #[serde(rename = "type")]
    pub instance_type: i64,
    pub backend_type: String,
    pub incarnation_id: String,
    pub register_ts_ms: u64,
}

impl InstanceMeta {
    /// Parse a registration value: `name`, `rpc_address` (strings) and `type` (integer)
    /// are required; `incarnation_id`, `register_ts_ms` and `backend_type` (default
    /// `"xllm"`) are read when present; anything else is tolerated.
    pub fn parse(value: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("not a JSON object")?;
        let string = |k: &str| obj.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let name = string("name").ok_or("name missing or not a string")?;
        let rpc_address = string("rpc_address").ok_or("rpc_address missing or not a string")?;
        let instance_type = obj
            .get("type")
            .and_then(|x| x.as_i64())
            .ok_or("type missing or not an integer")?;
        let register_ts_ms = match obj.get("register_ts_ms") {
            None | Some(serde_json::Value::Null) => 0,
            Some(x) => x
                .as_u64()
                .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
                .ok_or("register_ts_ms is not an unsigned integer")?,
        };
        Ok(InstanceMeta {
            name,
            rpc_address,
            instance_type,
            backend_type: string("backend_type").unwrap_or_else(|| "xllm".to_string()),
            incarnation_id: string("incarnation_id").unwrap_or_default(),
            register_ts_ms,
        })
    }
}

/// What `GET /v1/internal/instances` and [`crate::MockMaster::instances`] show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceView {
    pub name: String,
    /// The instance type number (0 DEFAULT, 1 PREFILL, 2 DECODE, 3 MIX).
    #[serde(rename = "type")]
    pub instance_type: i64,
    pub backend_type: String,
    pub rpc_address: String,
    pub incarnation: String,
    pub register_ts_ms: u64,
    pub state: InstanceState,
    /// Milliseconds since the state was entered.
    pub ms_in_state: u64,
    /// Milliseconds since the last accepted heartbeat; `None` before the first.
    pub ms_since_heartbeat: Option<u64>,
    pub load: Option<LoadMetrics>,
    pub latency: Option<LatencyMetrics>,
    /// Heartbeat answers for this name while this incarnation was tracked, by status.
    pub heartbeats: BTreeMap<u16, u64>,
}

/// What an observer reads of one instance, borrowed: the fields of [`InstanceView`] that
/// change, without copying them (a simulation samples every instance many times a second).
#[derive(Debug, Clone, Copy)]
pub struct InstanceRef<'a> {
    pub incarnation: &'a str,
    pub state: InstanceState,
    pub load: Option<LoadMetrics>,
    pub latency: Option<LatencyMetrics>,
    pub heartbeats: &'a BTreeMap<u16, u64>,
}

impl InstanceView {
    pub fn borrowed(&self) -> InstanceRef<'_> {
        InstanceRef {
            incarnation: &self.incarnation,
            state: self.state,
            load: self.load,
            latency: self.latency,
            heartbeats: &self.heartbeats,
        }
    }
}

/// A delete that needs a health probe before the registry can decide.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeTicket {
    pub name: String,
    pub incarnation: String,
    /// The instance's PUT generation when the probe started; a PUT since then makes the
    /// probe's answer moot.
    generation: u64,
}

/// Heartbeat outcome as the registry sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    Accepted,
    /// Unknown name, or not the tracked incarnation: 409.
    Rejected,
}

/// What an input changed, for the caller to report (events, metrics, logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `from` and `to` are state names, or [`DEREGISTERED`].
    Transition {
        name: String,
        incarnation: String,
        from: &'static str,
        to: &'static str,
        reason: &'static str,
    },
    /// A DELETE whose old value named another incarnation than the tracked one.
    StaleDelete {
        name: String,
        deleted: String,
        tracked: String,
    },
}

#[derive(Debug)]
struct Instance {
    meta: InstanceMeta,
    state: InstanceState,
    state_since: Duration,
    /// Last accepted heartbeat, or the moment LEASE_LOST was entered (the lease-lost
    /// timer runs from the later of the two).
    last_seen: Duration,
    last_heartbeat: Option<Duration>,
    load: Option<LoadMetrics>,
    latency: Option<LatencyMetrics>,
    heartbeats: BTreeMap<u16, u64>,
    generation: u64,
    /// Set from [`Instances::changes`] whenever the entry is changed.
    rev: u64,
}

/// The instance table and what LOADMETRICS still has to publish.
#[derive(Debug)]
pub struct Instances {
    /// By name; ordered, so that every walk (timeouts, views) is the same on every run.
    instances: BTreeMap<String, Instance>,
    /// Load metrics received since the last LOADMETRICS publish.
    updated: HashMap<String, LoadMetrics>,
    /// Instances deregistered since the last publish (their LOADMETRICS get deleted).
    removed: HashSet<String>,
    next_generation: u64,
    /// Changes made to entries so far: each change stamps its entry with the new count,
    /// so an observer tells an unchanged entry by its stamp ([`Instances::get_with_rev`]).
    changes: u64,
    /// Entries removed so far (a removal leaves no stamp behind to read).
    removals: u64,
    /// The names of the latest removals, each with its number in `removals`, oldest
    /// first; at most [`Instances::REMOVALS_KEPT`].
    removed_names: VecDeque<(u64, String)>,
    /// The name of the entry stamped last.
    last_changed: String,
}

impl Default for Instances {
    fn default() -> Self {
        Instances {
            instances: BTreeMap::new(),
            updated: HashMap::new(),
            removed: HashSet::new(),
            next_generation: 1,
            changes: 0,
            removals: 0,
            removed_names: VecDeque::new(),
            last_changed: String::new(),
        }
    }
}

fn set_state(
    name: &str,
    inst: &mut Instance,
    to: InstanceState,
    reason: &'static str,
    now: Duration,
    out: &mut Vec<Notice>,
) {
    if inst.state != to {
        out.push(Notice::Transition {
            name: name.to_string(),
            incarnation: inst.meta.incarnation_id.clone(),
            from: inst.state.as_str(),
            to: to.as_str(),
            reason,
        });
        inst.state = to;
        inst.state_since = now;
    }
}

impl Instances {
    /// How many of the latest removals [`Instances::removed_since`] can name.
    const REMOVALS_KEPT: usize = 64;

    pub fn new() -> Self {
        Self::default()
    }

    /// A new stamp for entry `name`, being changed (`last`: the name stamped last).
    fn bump(changes: &mut u64, last: &mut String, name: &str) -> u64 {
        last.clear();
        last.push_str(name);
        *changes += 1;
        *changes
    }

    fn generation(&mut self) -> u64 {
        let g = self.next_generation;
        self.next_generation += 1;
        g
    }

    fn register(&mut self, name: &str, meta: InstanceMeta, now: Duration, out: &mut Vec<Notice>) {
        let incarnation = meta.incarnation_id.clone();
        let generation = self.generation();
        let rev = Self::bump(&mut self.changes, &mut self.last_changed, name);
        self.instances.insert(
            name.to_string(),
            Instance {
                meta,
                state: InstanceState::Active,
                state_since: now,
                last_seen: now,
                last_heartbeat: None,
                load: None,
                latency: None,
                heartbeats: BTreeMap::new(),
                generation,
                rev,
            },
        );
        out.push(Notice::Transition {
            name: name.to_string(),
            incarnation,
            from: DEREGISTERED,
            to: "ACTIVE",
            reason: "put",
        });
    }

    fn deregister(&mut self, name: &str, reason: &'static str, out: &mut Vec<Notice>) {
        if let Some(old) = self.instances.remove(name) {
            self.removals += 1;
            if self.removed_names.len() == Self::REMOVALS_KEPT {
                self.removed_names.pop_front();
            }
            self.removed_names
                .push_back((self.removals, name.to_string()));
            self.updated.remove(name);
            self.removed.insert(name.to_string());
            out.push(Notice::Transition {
                name: name.to_string(),
                incarnation: old.meta.incarnation_id,
                from: old.state.as_str(),
                to: DEREGISTERED,
                reason,
            });
        }
    }

    /// A PUT of `name`'s key: register, refresh, or replace.
    pub fn apply_put(
        &mut self,
        name: &str,
        meta: InstanceMeta,
        now: Duration,
        out: &mut Vec<Notice>,
    ) {
        let generation = self.generation();
        match self.instances.get_mut(name) {
            None => self.register(name, meta, now, out),
            Some(inst) if inst.meta.incarnation_id == meta.incarnation_id => {
                inst.rev = Self::bump(&mut self.changes, &mut self.last_changed, name);
                inst.meta = meta;
                inst.generation = generation;
                inst.last_seen = now;
                set_state(name, inst, InstanceState::Active, "put", now, out);
            }
            Some(_) => {
                self.deregister(name, "replaced", out);
                self.register(name, meta, now, out);
            }
        }
    }

    /// A DELETE of `name`'s key whose old value named `deleted_incarnation` (None when
    /// unknown). Answers the probe to run, if any: a delete of an untracked name or of a
    /// replaced incarnation (a stale delete) is ignored.
    pub fn apply_delete(
        &self,
        name: &str,
        deleted_incarnation: Option<&str>,
        out: &mut Vec<Notice>,
    ) -> Option<ProbeTicket> {
        let inst = self.instances.get(name)?;
        if let Some(del) = deleted_incarnation.filter(|d| !d.is_empty()) {
            if del != inst.meta.incarnation_id {
                out.push(Notice::StaleDelete {
                    name: name.to_string(),
                    deleted: del.to_string(),
                    tracked: inst.meta.incarnation_id.clone(),
                });
                return None;
            }
        }
        Some(ProbeTicket {
            name: name.to_string(),
            incarnation: inst.meta.incarnation_id.clone(),
            generation: inst.generation,
        })
    }

    /// The answer of the health probe a delete asked for.
    pub fn apply_probe(
        &mut self,
        ticket: &ProbeTicket,
        healthy: bool,
        now: Duration,
        out: &mut Vec<Notice>,
    ) {
        let Some(inst) = self.instances.get_mut(&ticket.name) else {
            return;
        };
        if inst.meta.incarnation_id != ticket.incarnation || inst.generation != ticket.generation {
            return;
        }
        inst.rev = Self::bump(&mut self.changes, &mut self.last_changed, &ticket.name);
        if healthy {
            inst.last_seen = now;
            set_state(
                &ticket.name,
                inst,
                InstanceState::LeaseLost,
                "deleted, probe ok",
                now,
                out,
            );
        } else {
            set_state(
                &ticket.name,
                inst,
                InstanceState::Suspect,
                "deleted, probe failed",
                now,
                out,
            );
        }
    }

    /// A heartbeat that passed the token and body checks: accepted (200) or 409.
    pub fn heartbeat(
        &mut self,
        name: &str,
        incarnation: &str,
        load: LoadMetrics,
        latency: LatencyMetrics,
        now: Duration,
        out: &mut Vec<Notice>,
    ) -> Beat {
        let Some(inst) = self.instances.get_mut(name) else {
            return Beat::Rejected;
        };
        inst.rev = Self::bump(&mut self.changes, &mut self.last_changed, name);
        if inst.meta.incarnation_id != incarnation {
            *inst.heartbeats.entry(409).or_default() += 1;
            return Beat::Rejected;
        }
        *inst.heartbeats.entry(200).or_default() += 1;
        inst.last_seen = now;
        inst.last_heartbeat = Some(now);
        inst.load = Some(load);
        inst.latency = Some(latency);
        if inst.state == InstanceState::Suspect {
            set_state(name, inst, InstanceState::LeaseLost, "heartbeat", now, out);
        }
        match self.updated.get_mut(name) {
            Some(m) => *m = load,
            None => {
                self.updated.insert(name.to_string(), load);
            }
        }
        Beat::Accepted
    }

    /// Apply the timeouts at `now`: LEASE_LOST without heartbeat -> SUSPECT; SUSPECT
    /// too long -> deregistered.
    pub fn tick(
        &mut self,
        now: Duration,
        lease_lost_timeout: Duration,
        suspect_window: Duration,
        out: &mut Vec<Notice>,
    ) {
        let mut expired = Vec::new();
        for (name, inst) in self.instances.iter_mut() {
            match inst.state {
                InstanceState::LeaseLost
                    if now.saturating_sub(inst.last_seen) >= lease_lost_timeout =>
                {
                    inst.rev = Self::bump(&mut self.changes, &mut self.last_changed, name);
                    set_state(name, inst, InstanceState::Suspect, "no heartbeat", now, out);
                }
                InstanceState::Suspect
                    if now.saturating_sub(inst.state_since) >= suspect_window =>
                {
                    expired.push(name.clone());
                }
                _ => {}
            }
        }
        for name in expired {
            self.deregister(&name, "suspect window expired", out);
        }
    }

    /// Forget every instance, as a master process that restarts does.
    pub fn forget_all(&mut self, out: &mut Vec<Notice>) {
        let names: Vec<String> = self.instances.keys().cloned().collect();
        for name in names {
            self.deregister(&name, "master restart", out);
        }
        self.updated.clear();
        self.removed.clear();
    }

    /// Align with a fresh listing (after the watch lost its place): listed keys are
    /// applied as PUTs, tracked instances missing from it as deletes of unknown value.
    pub fn reconcile(
        &mut self,
        listing: Vec<(String, InstanceMeta)>,
        now: Duration,
        out: &mut Vec<Notice>,
    ) -> Vec<ProbeTicket> {
        let listed: HashSet<String> = listing.iter().map(|(n, _)| n.clone()).collect();
        for (name, meta) in listing {
            self.apply_put(&name, meta, now, out);
        }
        let missing: Vec<String> = self
            .instances
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        missing
            .iter()
            .filter_map(|n| self.apply_delete(n, None, out))
            .collect()
    }

    /// Load metrics to publish and names whose LOADMETRICS entry must go; both are
    /// cleared (the caller puts them back with [`Instances::restore_publish`] on failure).
    pub fn take_publish(&mut self) -> (HashMap<String, LoadMetrics>, HashSet<String>) {
        (
            std::mem::take(&mut self.updated),
            std::mem::take(&mut self.removed),
        )
    }

    /// [`Instances::take_publish`] for a round nobody writes: the same state after it
    /// (nothing pending), the maps kept for their capacity.
    pub fn drop_publish(&mut self) {
        self.updated.clear();
        self.removed.clear();
    }

    /// Put back what a failed publish could not write (newer entries win).
    pub fn restore_publish(
        &mut self,
        updated: HashMap<String, LoadMetrics>,
        removed: HashSet<String>,
    ) {
        for (name, m) in updated {
            if self.instances.contains_key(&name) {
                self.updated.entry(name).or_insert(m);
            }
        }
        for name in removed {
            if !self.instances.contains_key(&name) {
                self.removed.insert(name);
            }
        }
    }

    /// Routable instances (ACTIVE or LEASE_LOST) and their latest load, sorted by name.
    pub fn routable(&self) -> Vec<(String, Option<LoadMetrics>)> {
        self.instances
            .iter()
            .filter(|(_, i)| i.state.routable())
            .map(|(n, i)| (n.clone(), i.load))
            .collect()
    }

    /// Number of instances per state.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for s in [
            InstanceState::Active,
            InstanceState::LeaseLost,
            InstanceState::Suspect,
        ] {
            out.insert(s.as_str(), 0);
        }
        for i in self.instances.values() {
            *out.entry(i.state.as_str()).or_default() += 1;
        }
        out
    }

    /// Every instance as seen at `now`, sorted by name.
    pub fn views(&self, now: Duration) -> Vec<InstanceView> {
        self.instances
            .iter()
            .map(|(n, i)| view(n, i, now))
            .collect()
    }

    pub fn view(&self, name: &str, now: Duration) -> Option<InstanceView> {
        self.instances.get(name).map(|i| view(name, i, now))
    }

    /// Instance `name` as [`InstanceRef`] (no copy).
    pub fn get(&self, name: &str) -> Option<InstanceRef<'_>> {
        self.instances.get(name).map(|i| InstanceRef {
            incarnation: &i.meta.incarnation_id,
            state: i.state,
            load: i.load,
            latency: i.latency,
            heartbeats: &i.heartbeats,
        })
    }

    /// [`Instances::get`] with the entry's stamp: equal stamps of one name, read from
    /// this table, mean nothing [`InstanceRef`] shows changed in between (every change
    /// to an entry takes a new stamp; a new entry too).
    pub fn get_with_rev(&self, name: &str) -> Option<(InstanceRef<'_>, u64)> {
        let i = self.instances.get(name)?;
        let r = InstanceRef {
            incarnation: &i.meta.incarnation_id,
            state: i.state,
            load: i.load,
            latency: i.latency,
            heartbeats: &i.heartbeats,
        };
        Some((r, i.rev))
    }

    /// Stamps taken so far, and entries removed so far: both unchanged, nothing any
    /// entry shows changed, and none came or went.
    pub fn changes(&self) -> (u64, u64) {
        (self.changes, self.removals)
    }

    /// The name of the entry stamped last (empty before any was): after one stamp, the
    /// one entry [`Instances::changed_since`] the stamp before would name, without a walk.
    pub fn last_changed(&self) -> &str {
        &self.last_changed
    }

    /// The names of the entries removed after the first `removals` removals, oldest
    /// first (a name twice if removed twice); `None` when some of them are no longer
    /// kept.
    pub fn removed_since(&self, removals: u64) -> Option<impl Iterator<Item = &str> + '_> {
        let kept_from = self
            .removed_names
            .front()
            .map_or(self.removals, |(n, _)| n.saturating_sub(1));
        (removals >= kept_from && removals <= self.removals).then(|| {
            self.removed_names
                .iter()
                .filter(move |(n, _)| *n > removals)
                .map(|(_, name)| name.as_str())
        })
    }

    /// The names of the entries changed since stamp `rev` (taken after it), in name
    /// order. An entry removed since is not among them ([`Instances::changes`] counts it).
    pub fn changed_since(&self, rev: u64) -> impl Iterator<Item = &str> + '_ {
        self.instances
            .iter()
            .filter(move |(_, i)| i.rev > rev)
            .map(|(name, _)| name.as_str())
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn view(name: &str, i: &Instance, now: Duration) -> InstanceView {
    InstanceView {
        name: name.to_string(),
        instance_type: i.meta.instance_type,
        backend_type: i.meta.backend_type.clone(),
        rpc_address: i.meta.rpc_address.clone(),
        incarnation: i.meta.incarnation_id.clone(),
        register_ts_ms: i.meta.register_ts_ms,
        state: i.state,
        ms_in_state: ms(now.saturating_sub(i.state_since)),
        ms_since_heartbeat: i.last_heartbeat.map(|t| ms(now.saturating_sub(t))),
        load: i.load,
        latency: i.latency,
        heartbeats: i.heartbeats.clone(),
    }
}

/// The instance name a key names: the part after `<ns>` and one of the four type
/// prefixes. `None` for anything else under `<ns>XLLM:` (LOADMETRICS entries, …).
pub fn instance_name<'k>(namespace: &str, key: &'k [u8]) -> Option<&'k str> {
    let rest = key.strip_prefix(namespace.as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    TYPE_PREFIXES
        .iter()
        .find_map(|(p, _)| rest.strip_prefix(p))
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(inc: &str) -> InstanceMeta {
        InstanceMeta::parse(
            format!(r#"{{"name":"a","rpc_address":"a","type":0,"backend_type":"vllm","incarnation_id":"{inc}"}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn moves(out: &[Notice]) -> Vec<(&'static str, &'static str)> {
        out.iter()
            .filter_map(|n| match n {
                Notice::Transition { from, to, .. } => Some((*from, *to)),
                Notice::StaleDelete { .. } => None,
            })
            .collect()
    }

    #[test]
    fn meta_requires_name_rpc_address_type() {
        assert!(InstanceMeta::parse(br#"{"rpc_address":"a","type":0}"#).is_err());
        assert!(InstanceMeta::parse(br#"{"name":"a","type":0}"#).is_err());
        assert!(InstanceMeta::parse(br#"{"name":"a","rpc_address":"a"}"#).is_err());
        assert!(InstanceMeta::parse(br#"{"name":"a","rpc_address":"a","type":"0"}"#).is_err());
        let m = InstanceMeta::parse(br#"{"name":"a","rpc_address":"a","type":2,"x":1}"#).unwrap();
        assert_eq!(m.backend_type, "xllm");
        assert_eq!(m.incarnation_id, "");
    }

    #[test]
    fn names_only_under_the_four_prefixes() {
        assert_eq!(instance_name("/ns/", b"/ns/XLLM:DEFAULT:h:1"), Some("h:1"));
        assert_eq!(instance_name("/ns/", b"/ns/XLLM:MIX:h:1"), Some("h:1"));
        assert_eq!(instance_name("/ns/", b"/ns/XLLM:LOADMETRICS:h:1"), None);
        assert_eq!(instance_name("", b"XLLM:DEFAULT:"), None);
        assert_eq!(instance_name("/ns/", b"XLLM:DEFAULT:h:1"), None);
    }

    #[test]
    fn probe_answer_after_a_put_is_ignored() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        r.apply_put("a", meta("i1"), s(0), &mut out);
        let t = r.apply_delete("a", Some("i1"), &mut out).unwrap();
        r.apply_put("a", meta("i1"), s(1), &mut out);
        r.apply_probe(&t, false, s(2), &mut out);
        assert_eq!(r.view("a", s(2)).unwrap().state, InstanceState::Active);
    }

    #[test]
    fn stale_delete_and_replacement() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        r.apply_put("a", meta("i1"), s(0), &mut out);
        r.apply_put("a", meta("i2"), s(1), &mut out);
        assert_eq!(r.apply_delete("a", Some("i1"), &mut out), None);
        assert_eq!(
            moves(&out),
            [
                (DEREGISTERED, "ACTIVE"),
                ("ACTIVE", DEREGISTERED),
                (DEREGISTERED, "ACTIVE")
            ]
        );
        assert!(matches!(out.last(), Some(Notice::StaleDelete { deleted, .. }) if deleted == "i1"));
    }

    /// After one stamp, the entry stamped last is the one entry changed since.
    #[test]
    fn last_changed_is_the_one_entry_changed_since() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        r.apply_put("a", meta("i1"), s(0), &mut out);
        r.apply_put("b", meta("i1"), s(0), &mut out);
        for name in ["a", "b", "a"] {
            let before = r.changes().0;
            r.apply_put(name, meta("i1"), s(1), &mut out);
            assert_eq!(r.changes().0, before + 1);
            let since: Vec<&str> = r.changed_since(before).collect();
            assert_eq!(since, [r.last_changed()]);
            assert_eq!(r.last_changed(), name);
        }
    }

    /// Removals are named from any count still kept, and refused from one that is not.
    #[test]
    fn removals_are_named_while_kept() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        fn names(r: &Instances, from: u64) -> Option<Vec<String>> {
            Some(r.removed_since(from)?.map(str::to_string).collect())
        }
        assert_eq!(names(&r, 0), Some(vec![]));
        r.apply_put("a", meta("i1"), s(0), &mut out);
        r.apply_put("b", meta("i1"), s(0), &mut out);
        r.apply_put("a", meta("i2"), s(1), &mut out);
        r.apply_put("b", meta("i2"), s(1), &mut out);
        assert_eq!(r.changes().1, 2);
        assert_eq!(names(&r, 0), Some(vec!["a".into(), "b".into()]));
        assert_eq!(names(&r, 1), Some(vec!["b".into()]));
        assert_eq!(names(&r, 2), Some(vec![]));
        assert_eq!(names(&r, 3), None, "a count not reached yet");
        for k in 3..=Instances::REMOVALS_KEPT as u64 + 2 {
            r.apply_put("a", meta(&format!("i{k}")), s(k), &mut out);
        }
        let removals = r.changes().1;
        assert_eq!(removals, Instances::REMOVALS_KEPT as u64 + 2);
        assert_eq!(names(&r, 1), None, "the second removal is no longer kept");
        assert_eq!(
            names(&r, 2).map(|n| n.len()),
            Some(Instances::REMOVALS_KEPT)
        );
        assert_eq!(names(&r, removals - 1), Some(vec!["a".into()]));
    }

    /// The timeouts fire exactly at their boundaries, in virtual time.
    #[test]
    fn timeouts_in_virtual_time() {
        let (lease_lost, suspect) = (s(3), s(15));
        let (mut r, mut out) = (Instances::new(), Vec::new());
        r.apply_put("a", meta("i1"), s(100), &mut out);
        let t = r.apply_delete("a", None, &mut out).unwrap();
        r.apply_probe(&t, true, s(101), &mut out);
        assert_eq!(r.view("a", s(101)).unwrap().state, InstanceState::LeaseLost);
        r.tick(
            s(104) - Duration::from_millis(1),
            lease_lost,
            suspect,
            &mut out,
        );
        assert_eq!(r.view("a", s(104)).unwrap().state, InstanceState::LeaseLost);
        r.tick(s(104), lease_lost, suspect, &mut out);
        assert_eq!(r.view("a", s(104)).unwrap().state, InstanceState::Suspect);
        assert_eq!(r.view("a", s(110)).unwrap().ms_in_state, 6000);
        // A heartbeat brings it back to LEASE_LOST and restarts the lease-lost timer.
        let beat = r.heartbeat(
            "a",
            "i1",
            LoadMetrics::default(),
            LatencyMetrics::default(),
            s(105),
            &mut out,
        );
        assert_eq!(beat, Beat::Accepted);
        r.tick(s(107), lease_lost, suspect, &mut out);
        assert_eq!(r.view("a", s(107)).unwrap().state, InstanceState::LeaseLost);
        r.tick(s(108), lease_lost, suspect, &mut out);
        r.tick(
            s(123) - Duration::from_millis(1),
            lease_lost,
            suspect,
            &mut out,
        );
        assert!(r.view("a", s(123)).is_some());
        r.tick(s(123), lease_lost, suspect, &mut out);
        assert!(r.view("a", s(123)).is_none());
        assert_eq!(
            moves(&out),
            [
                (DEREGISTERED, "ACTIVE"),
                ("ACTIVE", "LEASE_LOST"),
                ("LEASE_LOST", "SUSPECT"),
                ("SUSPECT", "LEASE_LOST"),
                ("LEASE_LOST", "SUSPECT"),
                ("SUSPECT", DEREGISTERED),
            ]
        );
        let (_, removed) = r.take_publish();
        assert!(removed.contains("a"));
    }

    #[test]
    fn heartbeats_decide_200_or_409() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        let hb = |r: &mut Instances, name: &str, inc: &str, out: &mut Vec<Notice>| {
            r.heartbeat(
                name,
                inc,
                LoadMetrics::default(),
                LatencyMetrics::default(),
                s(1),
                out,
            )
        };
        assert_eq!(hb(&mut r, "a", "i1", &mut out), Beat::Rejected);
        r.apply_put("a", meta("i1"), s(0), &mut out);
        assert_eq!(hb(&mut r, "a", "i0", &mut out), Beat::Rejected);
        assert_eq!(hb(&mut r, "a", "i1", &mut out), Beat::Accepted);
        let v = r.view("a", s(3)).unwrap();
        assert_eq!(v.heartbeats, BTreeMap::from([(200, 1), (409, 1)]));
        assert_eq!(v.ms_since_heartbeat, Some(2000));
    }

    #[test]
    fn every_change_to_an_entry_takes_a_new_stamp() {
        let (mut r, mut out) = (Instances::new(), Vec::new());
        let (lease_lost, suspect) = (s(3), s(15));
        let rev = |r: &Instances| r.get_with_rev("a").map(|(_, rev)| rev);
        let mut seen = vec![rev(&r)];
        let mut changed = |r: &Instances, what: &str| {
            let now = rev(r);
            assert!(!seen.contains(&now), "{what}: {now:?} seen before");
            seen.push(now);
        };
        r.apply_put("a", meta("i1"), s(0), &mut out);
        changed(&r, "registered");
        let same = rev(&r);
        r.tick(s(1), lease_lost, suspect, &mut out);
        assert_eq!(rev(&r), same, "a tick that changes nothing");
        r.heartbeat(
            "a",
            "i0",
            LoadMetrics::default(),
            LatencyMetrics::default(),
            s(1),
            &mut out,
        );
        changed(&r, "a 409 counted");
        r.heartbeat(
            "a",
            "i1",
            LoadMetrics::default(),
            LatencyMetrics::default(),
            s(1),
            &mut out,
        );
        changed(&r, "a 200 counted");
        r.apply_put("a", meta("i1"), s(2), &mut out);
        changed(&r, "the same incarnation put again");
        let t = r.apply_delete("a", None, &mut out).unwrap();
        r.apply_probe(&t, true, s(3), &mut out);
        changed(&r, "lease lost");
        r.tick(s(6), lease_lost, suspect, &mut out);
        changed(&r, "suspect");
        r.apply_put("a", meta("i2"), s(7), &mut out);
        changed(&r, "replaced");
        r.forget_all(&mut out);
        assert_eq!(rev(&r), None, "forgotten");
        r.apply_put("a", meta("i2"), s(8), &mut out);
        changed(&r, "registered again");
    }
}
