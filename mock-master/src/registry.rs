//! The master's view of every instance: contract §2's state machine.
//!
//! Inputs are etcd events (from `watch`), health-probe results (from `probe`),
//! heartbeats (from `heartbeat`) and the passing of time (`tick`). The registry only
//! decides; it never does I/O, so every rule can be driven and checked directly.
//!
//! ```text
//!   PUT (new name / new incarnation) ──▶ ACTIVE ◀── PUT (same incarnation)
//!   ACTIVE / LEASE_LOST / SUSPECT ── DELETE of the tracked incarnation ──▶ probe
//!   probe OK ──▶ LEASE_LOST          probe failed ──▶ SUSPECT
//!   LEASE_LOST ── no heartbeat for lease_lost_timeout ──▶ SUSPECT
//!   SUSPECT ── heartbeat ──▶ LEASE_LOST
//!   SUSPECT ── longer than suspect_window ──▶ deregistered (forgotten)
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mock_kit::Events;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::metrics::Metrics;
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

#[derive(Debug)]
struct Instance {
    meta: InstanceMeta,
    state: InstanceState,
    state_since: Instant,
    /// Last accepted heartbeat, or the moment LEASE_LOST was entered (the lease-lost
    /// timer runs from the later of the two).
    last_seen: Instant,
    last_heartbeat: Option<Instant>,
    load: Option<LoadMetrics>,
    latency: Option<LatencyMetrics>,
    heartbeats: BTreeMap<u16, u64>,
    generation: u64,
}

#[derive(Debug, Default)]
struct Inner {
    instances: HashMap<String, Instance>,
    /// Load metrics received since the last LOADMETRICS publish.
    updated: HashMap<String, LoadMetrics>,
    /// Instances deregistered since the last publish (their LOADMETRICS get deleted).
    removed: HashSet<String>,
}

/// The instance table. Cheap to share (`Arc` inside).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<Inner>>,
    generation: Arc<AtomicU64>,
    events: Events,
    metrics: Arc<Metrics>,
}

impl Registry {
    pub fn new(events: Events, metrics: Arc<Metrics>) -> Self {
        Registry {
            inner: Arc::new(Mutex::new(Inner::default())),
            generation: Arc::new(AtomicU64::new(1)),
            events,
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn transition(&self, name: &str, incarnation: &str, from: &str, to: &str, reason: &str) {
        self.metrics.transition(from, to);
        self.events.emit(
            "state",
            json!({"name": name, "incarnation": incarnation, "from": from, "to": to, "reason": reason}),
        );
        tracing::info!(name, incarnation, from, to, reason, "instance state");
    }

    fn set_state(
        &self,
        name: &str,
        inst: &mut Instance,
        to: InstanceState,
        reason: &str,
        now: Instant,
    ) {
        if inst.state != to {
            self.transition(
                name,
                &inst.meta.incarnation_id,
                inst.state.as_str(),
                to.as_str(),
                reason,
            );
            inst.state = to;
            inst.state_since = now;
        }
    }

    fn register(&self, g: &mut Inner, name: &str, meta: InstanceMeta, now: Instant) {
        let incarnation = meta.incarnation_id.clone();
        g.instances.insert(
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
                generation: self.generation.fetch_add(1, Ordering::Relaxed),
            },
        );
        self.transition(name, &incarnation, DEREGISTERED, "ACTIVE", "put");
    }

    fn deregister(&self, g: &mut Inner, name: &str, reason: &str) {
        if let Some(old) = g.instances.remove(name) {
            g.updated.remove(name);
            g.removed.insert(name.to_string());
            self.transition(
                name,
                &old.meta.incarnation_id,
                old.state.as_str(),
                DEREGISTERED,
                reason,
            );
        }
    }

    /// A PUT of `name`'s key: register, refresh, or replace.
    pub fn apply_put(&self, name: &str, meta: InstanceMeta) {
        let now = Instant::now();
        let mut g = self.lock();
        match g.instances.get_mut(name) {
            None => self.register(&mut g, name, meta, now),
            Some(inst) if inst.meta.incarnation_id == meta.incarnation_id => {
                inst.meta = meta;
                inst.generation = self.generation.fetch_add(1, Ordering::Relaxed);
                inst.last_seen = now;
                self.set_state(name, inst, InstanceState::Active, "put", now);
            }
            Some(_) => {
                self.deregister(&mut g, name, "replaced");
                self.register(&mut g, name, meta, now);
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
    ) -> Option<ProbeTicket> {
        let g = self.lock();
        let inst = g.instances.get(name)?;
        if let Some(del) = deleted_incarnation.filter(|d| !d.is_empty()) {
            if del != inst.meta.incarnation_id {
                self.events.emit(
                    "stale_delete",
                    json!({"name": name, "deleted": del, "tracked": inst.meta.incarnation_id}),
                );
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
    pub fn apply_probe(&self, ticket: &ProbeTicket, healthy: bool) {
        let now = Instant::now();
        let mut g = self.lock();
        let Some(inst) = g.instances.get_mut(&ticket.name) else {
            return;
        };
        if inst.meta.incarnation_id != ticket.incarnation || inst.generation != ticket.generation {
            return;
        }
        if healthy {
            inst.last_seen = now;
            self.set_state(
                &ticket.name,
                inst,
                InstanceState::LeaseLost,
                "deleted, probe ok",
                now,
            );
        } else {
            self.set_state(
                &ticket.name,
                inst,
                InstanceState::Suspect,
                "deleted, probe failed",
                now,
            );
        }
    }

    /// A heartbeat that passed the token and body checks.
    pub fn heartbeat(
        &self,
        name: &str,
        incarnation: &str,
        load: LoadMetrics,
        latency: LatencyMetrics,
    ) -> Beat {
        let now = Instant::now();
        let mut g = self.lock();
        let Some(inst) = g.instances.get_mut(name) else {
            return Beat::Rejected;
        };
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
            self.set_state(name, inst, InstanceState::LeaseLost, "heartbeat", now);
        }
        match g.updated.get_mut(name) {
            Some(m) => *m = load,
            None => {
                g.updated.insert(name.to_string(), load);
            }
        }
        Beat::Accepted
    }

    /// Apply the timeouts: LEASE_LOST without heartbeat -> SUSPECT; SUSPECT too long ->
    /// deregistered.
    pub fn tick(&self, lease_lost_timeout: Duration, suspect_window: Duration) {
        let now = Instant::now();
        let mut g = self.lock();
        let mut expired = Vec::new();
        for (name, inst) in g.instances.iter_mut() {
            match inst.state {
                InstanceState::LeaseLost
                    if now.duration_since(inst.last_seen) >= lease_lost_timeout =>
                {
                    self.set_state(name, inst, InstanceState::Suspect, "no heartbeat", now);
                }
                InstanceState::Suspect
                    if now.duration_since(inst.state_since) >= suspect_window =>
                {
                    expired.push(name.clone());
                }
                _ => {}
            }
        }
        for name in expired {
            self.deregister(&mut g, &name, "suspect window expired");
        }
    }

    /// Forget every instance, as a master process that restarts does.
    pub fn forget_all(&self) {
        let mut g = self.lock();
        let names: Vec<String> = g.instances.keys().cloned().collect();
        for name in names {
            self.deregister(&mut g, &name, "master restart");
        }
        g.updated.clear();
        g.removed.clear();
    }

    /// Align with a fresh listing (after the watch lost its place): listed keys are
    /// applied as PUTs, tracked instances missing from it as deletes of unknown value.
    pub fn reconcile(&self, listing: Vec<(String, InstanceMeta)>) -> Vec<ProbeTicket> {
        let listed: HashSet<String> = listing.iter().map(|(n, _)| n.clone()).collect();
        for (name, meta) in listing {
            self.apply_put(&name, meta);
        }
        let missing: Vec<String> = self
            .lock()
            .instances
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        missing
            .iter()
            .filter_map(|n| self.apply_delete(n, None))
            .collect()
    }

    /// Load metrics to publish and names whose LOADMETRICS entry must go; both are
    /// cleared (the caller puts them back with [`Registry::restore_publish`] on failure).
    pub fn take_publish(&self) -> (HashMap<String, LoadMetrics>, HashSet<String>) {
        let mut g = self.lock();
        (
            std::mem::take(&mut g.updated),
            std::mem::take(&mut g.removed),
        )
    }

    /// Put back what a failed publish could not write (newer entries win).
    pub fn restore_publish(&self, updated: HashMap<String, LoadMetrics>, removed: HashSet<String>) {
        let mut g = self.lock();
        for (name, m) in updated {
            if g.instances.contains_key(&name) {
                g.updated.entry(name).or_insert(m);
            }
        }
        for name in removed {
            if !g.instances.contains_key(&name) {
                g.removed.insert(name);
            }
        }
    }

    /// Routable instances (ACTIVE or LEASE_LOST) and their latest load, sorted by name.
    pub fn routable(&self) -> Vec<(String, Option<LoadMetrics>)> {
        let g = self.lock();
        let mut out: Vec<_> = g
            .instances
            .iter()
            .filter(|(_, i)| i.state.routable())
            .map(|(n, i)| (n.clone(), i.load))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Number of instances per state.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let g = self.lock();
        let mut out = BTreeMap::new();
        for s in [
            InstanceState::Active,
            InstanceState::LeaseLost,
            InstanceState::Suspect,
        ] {
            out.insert(s.as_str(), 0);
        }
        for i in g.instances.values() {
            *out.entry(i.state.as_str()).or_default() += 1;
        }
        out
    }

    pub fn views(&self) -> Vec<InstanceView> {
        let now = Instant::now();
        let g = self.lock();
        let mut out: Vec<_> = g.instances.iter().map(|(n, i)| view(n, i, now)).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub fn view(&self, name: &str) -> Option<InstanceView> {
        let now = Instant::now();
        self.lock().instances.get(name).map(|i| view(name, i, now))
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn view(name: &str, i: &Instance, now: Instant) -> InstanceView {
    InstanceView {
        name: name.to_string(),
        instance_type: i.meta.instance_type,
        backend_type: i.meta.backend_type.clone(),
        rpc_address: i.meta.rpc_address.clone(),
        incarnation: i.meta.incarnation_id.clone(),
        register_ts_ms: i.meta.register_ts_ms,
        state: i.state,
        ms_in_state: ms(now.duration_since(i.state_since)),
        ms_since_heartbeat: i.last_heartbeat.map(|t| ms(now.duration_since(t))),
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

    fn reg() -> Registry {
        Registry::new(Events::none("t"), Arc::new(Metrics::new()))
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
        let r = reg();
        r.apply_put("a", meta("i1"));
        let t = r.apply_delete("a", Some("i1")).unwrap();
        r.apply_put("a", meta("i1"));
        r.apply_probe(&t, false);
        assert_eq!(r.view("a").unwrap().state, InstanceState::Active);
    }

    #[test]
    fn suspect_heartbeat_lease_lost_then_timeouts() {
        let r = reg();
        r.apply_put("a", meta("i1"));
        let t = r.apply_delete("a", None).unwrap();
        r.apply_probe(&t, false);
        assert_eq!(r.view("a").unwrap().state, InstanceState::Suspect);
        assert_eq!(
            r.heartbeat("a", "i1", LoadMetrics::default(), LatencyMetrics::default()),
            Beat::Accepted
        );
        assert_eq!(r.view("a").unwrap().state, InstanceState::LeaseLost);
        r.tick(Duration::ZERO, Duration::from_secs(60));
        assert_eq!(r.view("a").unwrap().state, InstanceState::Suspect);
        r.tick(Duration::ZERO, Duration::ZERO);
        assert!(r.view("a").is_none());
        let (_, removed) = r.take_publish();
        assert!(removed.contains("a"));
    }
}
