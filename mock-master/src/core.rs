//! The whole master as one value: every rule of docs/contract.md §2 and §3 with the time
//! as an argument, no socket, no clock, no task. A simulator drives it directly; the
//! real-time shell drives it through [`crate::registry`]. Inputs are what the real master
//! receives (etcd watch events and listings as the gateway decodes them, heartbeats as
//! their header values and body bytes, health-probe outcomes, the passing of time);
//! outputs are answers and what the master wants done ([`Command`]s: probe this instance;
//! and [`publish::Plan`]s: write these LOADMETRICS keys), never done here.
//!
//! It composes the cores the real-time shell runs: [`Gate`] (faults, token),
//! [`beat::read_request`] (the body under protobuf's JSON rules), [`Instances`] (the
//! state machine), [`follow`] (which watch events are new, what a key and its value
//! mean), [`publish::plan`] and [`pick::pick`]; and it owns the two things the shell keeps in tasks: the probe's
//! attempts (one [`Command::Probe`] per attempt, `probe_interval` apart) and the
//! schedules of the timeout ticker and the LOADMETRICS rounds ([`MasterCore::next_wakeup`]).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::auth::{self, Token};
use crate::beat::{self, Answer};
use crate::config::{normalize_namespace, Config};
use crate::election::{self, Election, Outcome, Role};
use crate::etcd::{EventKind, KeyValue, WatchEvent, WatchResponse};
use crate::event::MasterEvent;
use crate::follow::{self, Change, Cursor, Verdict};
use crate::gate::Gate;
use crate::instances::{InstanceView, Instances, Notice, ProbeTicket};
use crate::pbjson::{HeartbeatRequest, LoadMetrics};
use crate::role_event::RoleEvent;
use crate::{pick, publish};

/// Something the master wants done; the caller does it and reports back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `GET <url>` once, at `at`, bounded by `timeout`; then
    /// [`MasterCore::on_probe_result`]`(now, id, ok)` with `ok` = answered 200. Every
    /// attempt of one probe carries the same `id`; probes of one name may overlap
    /// (a DELETE, a PUT, a DELETE again), each decided on its own.
    Probe {
        id: u64,
        name: String,
        url: String,
        attempt: u32,
        at: Duration,
        timeout: Duration,
    },
}

/// What happened, for the caller to log (the real shell's events, by the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A state change or a stale delete, from the instance table.
    Table(Notice),
    /// An instance key whose value could not be read (event `bad_registration`).
    BadRegistration { name: String, error: String },
    /// A probe's final verdict (event `probe`).
    Probe {
        name: String,
        incarnation: String,
        healthy: bool,
    },
    /// A role change of this replica (events `elected`, `standby`, `lost_mastership`).
    Role(RoleEvent),
}

impl Note {
    /// The event the real shell emits for it (a simulator logs the same, stamped with
    /// its own time).
    pub fn event(&self) -> MasterEvent<'_> {
        match self {
            Note::Table(Notice::Transition {
                name,
                incarnation,
                from,
                to,
                reason,
            }) => MasterEvent::State {
                name,
                incarnation,
                from,
                to,
                reason,
            },
            Note::Table(Notice::StaleDelete {
                name,
                deleted,
                tracked,
            }) => MasterEvent::StaleDelete {
                name,
                deleted,
                tracked,
            },
            Note::BadRegistration { name, error } => MasterEvent::BadRegistration { name, error },
            Note::Probe {
                name,
                incarnation,
                healthy,
            } => MasterEvent::Probe {
                name,
                incarnation,
                healthy: *healthy,
            },
            Note::Role(ev) => MasterEvent::Role(ev),
        }
    }
}

/// The answer to one heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub status: u16,
    /// The body, `Content-Type: application/json`.
    pub body: &'static str,
    /// How long an armed latency fault holds the answer back.
    pub delay: Option<Duration>,
    /// The instance named by the body, when [`MasterCore::on_heartbeat`] read it.
    pub name: Option<String>,
}

impl HeartbeatReply {
    fn of(status: u16, body: &'static str, delay: Option<Duration>) -> Self {
        HeartbeatReply {
            status,
            body,
            delay,
            name: None,
        }
    }
}

/// The settings the rules read (from [`Config`]).
#[derive(Debug, Clone)]
struct Settings {
    namespace: String,
    max_body_bytes: usize,
    lease_lost_timeout: Duration,
    suspect_window: Duration,
    publish_interval: Duration,
    probe_attempts: u32,
    probe_timeout: Duration,
    probe_interval: Duration,
}

/// The master: instance table, gate, probes under way, schedules.
#[derive(Debug)]
pub struct MasterCore {
    settings: Settings,
    gate: Gate,
    table: Instances,
    /// Probes under way by id: the ticket and the attempt (from 1).
    probing: BTreeMap<u64, (ProbeTicket, u32)>,
    next_probe: u64,
    commands: Vec<Command>,
    notes: Vec<Note>,
    /// How far the watch has followed etcd.
    cursor: Cursor,
    /// Round-robin cursor for ties between equally loaded instances.
    rr: u64,
    next_tick: Duration,
    next_publish: Duration,
    /// Replica mode's election (`None`: the single master, always publishing).
    election: Option<Election>,
    /// The load other replicas see: `XLLM:LOADMETRICS:` as etcd holds it, by name.
    followed: BTreeMap<String, LoadMetrics>,
}

/// The shell's ticker period: often enough that timeouts fire within a few percent of
/// their durations (the real master checks once a second).
pub fn tick_period(lease_lost_timeout: Duration, suspect_window: Duration) -> Duration {
    let shortest = lease_lost_timeout.min(suspect_window);
    (shortest / 20).clamp(Duration::from_millis(5), Duration::from_millis(200))
}

/// The LOADMETRICS period the shell uses (at least 10 ms).
pub fn publish_period(publish_interval: Duration) -> Duration {
    publish_interval.max(Duration::from_millis(10))
}

impl MasterCore {
    /// A master configured by `config` (its namespace normalized), started at `now`.
    pub fn new(config: &Config, now: Duration) -> MasterCore {
        let gate = Gate {
            token: Token::new(config.token.clone()),
            faults: mock_kit::FaultRegistry::new(),
        };
        Self::with_gate(config, gate, now)
    }

    /// The same, sharing `gate` (token and faults) with whoever holds a clone of it.
    pub fn with_gate(config: &Config, gate: Gate, now: Duration) -> MasterCore {
        let settings = Settings {
            namespace: normalize_namespace(&config.etcd_namespace),
            max_body_bytes: config.max_body_bytes,
            lease_lost_timeout: config.lease_lost_timeout,
            suspect_window: config.suspect_window,
            publish_interval: publish_period(config.publish_interval),
            probe_attempts: config.probe_attempts.max(1),
            probe_timeout: config.probe_timeout,
            probe_interval: config.probe_interval,
        };
        MasterCore {
            next_tick: now + tick_period(settings.lease_lost_timeout, settings.suspect_window),
            next_publish: now + settings.publish_interval,
            settings,
            gate,
            table: Instances::new(),
            probing: BTreeMap::new(),
            next_probe: 1,
            commands: Vec::new(),
            notes: Vec::new(),
            cursor: Cursor::default(),
            rr: 0,
            election: config.elect.then(|| {
                Election::new(election::Settings {
                    namespace: normalize_namespace(&config.etcd_namespace),
                    service_name: config.service_name.clone(),
                    ttl: config.election_ttl,
                })
            }),
            followed: BTreeMap::new(),
        }
    }

    /// The token and the faults (arm faults with `faults.add_at(now, ..)`).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The instance table, to inspect.
    pub fn table(&self) -> &Instances {
        &self.table
    }

    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    /// Every tracked instance as seen at `now`, sorted by name.
    pub fn views(&self, now: Duration) -> Vec<InstanceView> {
        self.table.views(now)
    }

    pub fn view(&self, name: &str, now: Duration) -> Option<InstanceView> {
        self.table.view(name, now)
    }

    /// What the master wants done since the last call, in order.
    pub fn take_commands(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.commands)
    }

    /// What happened since the last call, in order.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    fn note_all(&mut self, out: Vec<Notice>) {
        self.notes.extend(out.into_iter().map(Note::Table));
    }

    /// The earliest time [`MasterCore::tick`] or [`MasterCore::publish_round`] has
    /// something to do (probes are scheduled by their commands' `at`).
    pub fn next_wakeup(&self) -> Duration {
        let election = self.election.as_ref().and_then(Election::next_wakeup);
        let own = self.next_tick.min(self.next_publish);
        election.map_or(own, |e| e.min(own))
    }
}

/// Replica mode (docs/contract.md, "Election").
impl MasterCore {
    /// The election, in replica mode.
    pub fn election(&self) -> Option<&Election> {
        self.election.as_ref()
    }

    /// The role: always [`Role::Master`] without an election.
    pub fn role(&self) -> Role {
        self.election.as_ref().map_or(Role::Master, Election::role)
    }

    /// Whether this replica publishes LOADMETRICS and routes by its own heartbeats.
    pub fn is_master(&self) -> bool {
        self.role() == Role::Master
    }

    /// `XLLM:LOADMETRICS:` as this replica last read it from etcd, by instance name.
    pub fn followed_load(&self) -> &BTreeMap<String, LoadMetrics> {
        &self.followed
    }

    /// The etcd calls the election wants made, in order (none without an election).
    pub fn take_election_calls(&mut self) -> Vec<election::Call> {
        self.election
            .as_mut()
            .map(Election::take_calls)
            .unwrap_or_default()
    }

    /// How election call `id` ended.
    pub fn on_election_result(&mut self, now: Duration, id: u64, outcome: Outcome) {
        if let Some(e) = self.election.as_mut() {
            e.on_result(now, id, outcome);
        }
        self.collect_election();
    }

    /// The election's timers alone (the shell's election task runs them more often
    /// than the ticker): expired leases, keepalives and retries due at `now`.
    pub fn election_tick(&mut self, now: Duration) {
        if let Some(e) = self.election.as_mut() {
            e.tick(now);
        }
        self.collect_election();
    }

    fn collect_election(&mut self) {
        if let Some(e) = self.election.as_mut() {
            self.notes
                .extend(e.take_notes().into_iter().map(Note::Role));
        }
    }

    /// A `XLLM:LOADMETRICS:` change: what a standby routes by.
    fn follow_load(&mut self, event: &WatchEvent) {
        let Some(name) = publish::name_of(&self.settings.namespace, &event.kv.key) else {
            return;
        };
        match event.kind {
            EventKind::Delete => {
                self.followed.remove(name);
            }
            EventKind::Put => {
                // An unreadable value leaves the last one, as the real readers do.
                if let Some(m) = publish::parse_value(&event.kv.value) {
                    self.followed.insert(name.to_string(), m);
                }
            }
        }
    }
}

/// Inputs.
impl MasterCore {
    /// One event of the watch on `<ns>XLLM:` (value and `prev_kv` as the gateway
    /// decodes them). A DELETE the table wants checked becomes a [`Command::Probe`].
    pub fn on_watch_event(&mut self, now: Duration, event: &WatchEvent) {
        if let Some(e) = self.election.as_mut() {
            e.on_watch_event(now, event);
        }
        self.collect_election();
        self.follow_load(event);
        let mut out = Vec::new();
        match follow::change(&self.settings.namespace, event) {
            None => {}
            Some(Change::Put { name, meta }) => match meta {
                Ok(meta) => self.table.apply_put(name, meta, now, &mut out),
                Err(error) => self.notes.push(Note::BadRegistration {
                    name: name.to_string(),
                    error,
                }),
            },
            Some(Change::Delete { name, deleted }) => {
                if let Some(ticket) = self.table.apply_delete(name, deleted.as_deref(), &mut out) {
                    self.start_probe(now, ticket);
                }
            }
        }
        self.note_all(out);
    }

    /// One message of the watch stream: events not seen before are applied in order
    /// (and answered back); a lower revision, a compaction or a cancel is answered
    /// for the caller to re-list or re-open from [`MasterCore::watch_from`].
    pub fn on_watch_response(&mut self, now: Duration, resp: WatchResponse) -> Verdict {
        let verdict = self.cursor.on_response(resp);
        match &verdict {
            Verdict::Events(evs) => {
                for ev in evs {
                    self.on_watch_event(now, ev);
                }
            }
            Verdict::RevisionReset { .. } => {
                if let Some(e) = self.election.as_mut() {
                    e.on_revision_reset();
                }
            }
            _ => {}
        }
        verdict
    }

    /// The revision a (re-)opened watch starts from.
    pub fn watch_from(&self) -> i64 {
        self.cursor.next()
    }

    /// A range at `revision` read only to learn where to watch from (a restart
    /// without re-listing): nothing is applied.
    pub fn listed_at(&mut self, revision: i64) {
        self.cursor = Cursor::listed(revision);
    }

    /// A fresh range of `<ns>XLLM:` at `revision` (start, restart, lost watch): listed
    /// keys register or refresh, tracked instances missing from it take the delete
    /// path, and the watch goes on from `revision + 1`. Answers how many instance keys
    /// it read.
    pub fn on_listing(&mut self, now: Duration, revision: i64, kvs: &[KeyValue]) -> usize {
        self.listed_at(revision);
        if let Some(e) = self.election.as_mut() {
            e.on_listing(now, revision, kvs);
        }
        self.collect_election();
        let ns = &self.settings.namespace;
        self.followed = kvs
            .iter()
            .filter_map(|kv| {
                Some((
                    publish::name_of(ns, &kv.key)?,
                    publish::parse_value(&kv.value)?,
                ))
            })
            .map(|(n, m)| (n.to_string(), m))
            .collect();
        let (found, bad) = follow::listed_instances(&self.settings.namespace, kvs);
        let listed = found.len();
        for (name, error) in bad {
            self.notes.push(Note::BadRegistration { name, error });
        }
        let mut out = Vec::new();
        let tickets = self.table.reconcile(found, now, &mut out);
        self.note_all(out);
        for ticket in tickets {
            self.start_probe(now, ticket);
        }
        listed
    }

    /// Forget every instance, as a master process that restarts does (re-learn them
    /// with [`MasterCore::on_listing`]).
    pub fn restart(&mut self) {
        let mut out = Vec::new();
        self.table.forget_all(&mut out);
        self.probing.clear();
        self.followed.clear();
        self.note_all(out);
        if let Some(e) = self.election.as_mut() {
            e.restart();
        }
        self.collect_election();
    }

    fn start_probe(&mut self, now: Duration, ticket: ProbeTicket) {
        let id = self.next_probe;
        self.next_probe += 1;
        let name = ticket.name.clone();
        self.probing.insert(id, (ticket, 1));
        self.send_probe(id, name, 1, now);
    }

    fn send_probe(&mut self, id: u64, name: String, attempt: u32, at: Duration) {
        self.commands.push(Command::Probe {
            id,
            url: format!("http://{name}/health"),
            name,
            attempt,
            at,
            timeout: self.settings.probe_timeout,
        });
    }

    /// The outcome of one attempt of probe `id` (`ok`: answered 200 in time). A
    /// failure with attempts left asks for the next one `probe_interval` later; the
    /// verdict goes to the table (LEASE_LOST or SUSPECT; nothing if a PUT came since).
    /// Unknown ids (answered already, or forgotten in a restart) are ignored.
    pub fn on_probe_result(&mut self, now: Duration, id: u64, ok: bool) {
        let Some((ticket, attempt)) = self.probing.remove(&id) else {
            return;
        };
        if !ok && attempt < self.settings.probe_attempts {
            let name = ticket.name.clone();
            self.probing.insert(id, (ticket, attempt + 1));
            let at = now + self.settings.probe_interval;
            self.send_probe(id, name, attempt + 1, at);
            return;
        }
        self.notes.push(Note::Probe {
            name: ticket.name.clone(),
            incarnation: ticket.incarnation.clone(),
            healthy: ok,
        });
        let mut out = Vec::new();
        self.table.apply_probe(&ticket, ok, now, &mut out);
        self.note_all(out);
    }

    /// `POST /v1/internal/heartbeat` with `tokens` the `X-Internal-Token` values in
    /// order (none: the header is absent) and `body` as sent: the table of
    /// docs/contract.md §3, after the armed faults, with this mock's 413 past
    /// `max_body_bytes`.
    pub fn on_heartbeat(&mut self, now: Duration, tokens: &[&[u8]], body: &[u8]) -> HeartbeatReply {
        self.on_heartbeat_read(now, tokens, body.len(), || beat::read_request(body))
    }

    /// The gate and the size cap, then the body `read` decodes.
    fn on_heartbeat_read(
        &mut self,
        now: Duration,
        tokens: &[&[u8]],
        len: usize,
        read: impl FnOnce() -> Result<HeartbeatRequest, Answer>,
    ) -> HeartbeatReply {
        let (delay, refused) = self.heartbeat_gate(now, tokens);
        let mut reply = match refused {
            Some(reply) => reply,
            None => self.on_heartbeat_admitted(now, len, read),
        };
        reply.delay = delay;
        reply
    }

    /// The gate alone, as the HTTP shell runs it when a heartbeat arrives (it then holds
    /// the request for the armed latency before going on): that latency, and the answer
    /// when a fault or the token refuses the heartbeat.
    pub fn heartbeat_gate(
        &self,
        now: Duration,
        tokens: &[&[u8]],
    ) -> (Option<Duration>, Option<HeartbeatReply>) {
        let presented = auth::join(tokens.iter().copied());
        let (delay, refusal) = self.gate.check(now, presented.as_deref());
        (
            delay,
            refusal.map(|r| HeartbeatReply::of(r.status, r.body, None)),
        )
    }

    /// A heartbeat past [`MasterCore::heartbeat_gate`] whose body is text already (a
    /// simulator's): the size cap, the body checks and the table's verdict.
    pub fn on_heartbeat_admitted_text(&mut self, now: Duration, body: &str) -> HeartbeatReply {
        self.on_heartbeat_admitted(now, body.len(), || beat::read_request_str(body))
    }

    fn on_heartbeat_admitted(
        &mut self,
        now: Duration,
        len: usize,
        read: impl FnOnce() -> Result<HeartbeatRequest, Answer>,
    ) -> HeartbeatReply {
        if len > self.settings.max_body_bytes {
            let a = Answer::TooLarge;
            return HeartbeatReply::of(a.status(), a.body(), None);
        }
        self.on_heartbeat_read_body(now, read())
    }

    /// The part of [`MasterCore::on_heartbeat`] after the gate and the size cap: the
    /// body checks (400s) and the table's verdict (409 or 200, metrics stored).
    fn on_heartbeat_read_body(
        &mut self,
        now: Duration,
        read: Result<HeartbeatRequest, Answer>,
    ) -> HeartbeatReply {
        match read {
            Ok(req) => {
                let mut reply = self.on_heartbeat_request(now, &req);
                reply.name = Some(req.name);
                reply
            }
            Err(a) => HeartbeatReply::of(a.status(), a.body(), None),
        }
    }

    /// The table's verdict on a heartbeat whose body passed [`beat::read_request`]
    /// (the real shell decodes outside its lock and calls this).
    pub fn on_heartbeat_request(
        &mut self,
        now: Duration,
        req: &HeartbeatRequest,
    ) -> HeartbeatReply {
        let mut out = Vec::new();
        let verdict = self.table.heartbeat(
            &req.name,
            &req.incarnation_id,
            req.load_metrics,
            req.latency_metrics,
            now,
            &mut out,
        );
        self.note_all(out);
        let a = Answer::of(verdict);
        HeartbeatReply::of(a.status(), a.body(), None)
    }
}

/// Time.
impl MasterCore {
    /// Apply the timeouts at `now` (LEASE_LOST without heartbeat for
    /// `lease_lost_timeout`: SUSPECT; SUSPECT for `suspect_window`: forgotten) and
    /// schedule the next tick one ticker period later.
    pub fn tick(&mut self, now: Duration) {
        let mut out = Vec::new();
        let s = &self.settings;
        self.table
            .tick(now, s.lease_lost_timeout, s.suspect_window, &mut out);
        self.next_tick = now + tick_period(s.lease_lost_timeout, s.suspect_window);
        self.note_all(out);
        if let Some(e) = self.election.as_mut() {
            e.tick(now);
        }
        self.collect_election();
    }

    /// The LOADMETRICS round due at `now`, if one is (every `publish_interval` from
    /// the start): the keys to delete and to put. `None` before it is due; an empty
    /// plan when nothing changed, and always while not master (what heartbeats brought
    /// stays pending, as in xllm-service, for the first round after an election). What
    /// the caller could not write goes back with [`MasterCore::publish_failed`].
    pub fn publish_round(&mut self, now: Duration) -> Option<publish::Plan> {
        if now < self.next_publish {
            return None;
        }
        self.next_publish = now + self.settings.publish_interval;
        Some(self.publish_now())
    }

    /// [`MasterCore::publish_round`] for a caller that never writes LOADMETRICS (a
    /// simulator): the same change to the core (the round's schedule; what was pending
    /// handed over, so no longer pending) without building the plan, which is a
    /// function of what was pending alone. Answers whether a round was due.
    pub fn publish_round_unwritten(&mut self, now: Duration) -> bool {
        if now < self.next_publish {
            return false;
        }
        self.next_publish = now + self.settings.publish_interval;
        if self.is_master() {
            self.table.drop_publish();
        }
        true
    }

    /// A LOADMETRICS round now, off schedule ([`crate::MockMaster::publish_now`]);
    /// empty while not master.
    pub fn publish_now(&mut self) -> publish::Plan {
        if !self.is_master() {
            return publish::Plan::default();
        }
        let (updated, removed) = self.table.take_publish();
        publish::plan(&self.settings.namespace, updated, removed)
    }

    /// Put back the writes of `plan` that failed (puts and deletes, by name), for the
    /// next round (an entry newer than the failed one wins).
    pub fn publish_failed(
        &mut self,
        plan: &publish::Plan,
        failed_puts: &[String],
        failed_deletes: &[String],
    ) {
        let puts: HashSet<&String> = failed_puts.iter().collect();
        let deletes: HashSet<&String> = failed_deletes.iter().collect();
        let updated = plan
            .puts
            .iter()
            .filter(|(n, ..)| puts.contains(n))
            .map(|(n, _, _, m)| (n.clone(), *m))
            .collect();
        let removed = plan
            .deletes
            .iter()
            .filter(|(n, _)| deletes.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        self.table.restore_publish(updated, removed);
    }

    /// The routable instances, sorted by name, each with the load routing weighs: the
    /// master's own heartbeats on the master, the published numbers elsewhere.
    pub fn routing_candidates(&self) -> Vec<(String, Option<LoadMetrics>)> {
        let mut candidates = self.table.routable();
        if !self.is_master() {
            for (name, load) in &mut candidates {
                *load = self.followed.get(name).copied();
            }
        }
        candidates
    }

    /// Where a completion request goes: the routable instance with the fewest waiting
    /// requests, then the lowest KV usage, then round robin; `None`: 503. The master
    /// weighs its own heartbeats; any other replica the master's published numbers
    /// (an instance the master has published nothing for counts as idle).
    pub fn route(&mut self) -> Option<String> {
        let candidates = self.routing_candidates();
        let cursor = self.rr;
        self.rr = self.rr.wrapping_add(1);
        let i = pick::pick(&candidates, cursor)?;
        candidates.into_iter().nth(i).map(|(name, _)| name)
    }
}
