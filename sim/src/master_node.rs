//! The fake master: mock-master's own virtual-time core ([`MasterCore`]: the gate
//! (token, faults), the heartbeat body rules, the instance table, the watch cursor,
//! the probe attempts and the ticker) as a node.
//!
//! The node only carries things: a heartbeat's token header and body bytes in, its
//! status out (held back by an armed latency fault); etcd's watch lines read by
//! mock-master's own parser ([`mock_master::watch_message::parse_watch_line`]) into the core;
//! the core's probe commands sent at their time as `GET /health` to the instance's vLLM
//! node, their outcome (200 or not) handed back.
//!
//! It follows etcd as mock-master's watcher task does, by mock-master's own plan
//! ([`crate::master_watch::Follower`]): a listing, then a watch over its link to etcd,
//! re-opened or re-listed when the stream dies. Routing is the core's pick.
//!
//! In replica mode (`Config::elect`) the node also carries out the core's election
//! (mock-master's `elect` shell: each `election::Op` a gateway call over the node's own
//! link to etcd, in mock-master's encoding, each answer read by its parsers into an
//! `election::Outcome`) and writes the LOADMETRICS rounds the core plans (mock-master's
//! `loadmetrics` shell: deletes and puts, what failed handed back for the next round).
//! The core decides who publishes: only the master's rounds have writes. With etcd
//! auth on, these calls present the token the follower holds; one etcd refuses for its
//! token fails (the election tries again after its retry delay) instead of
//! re-authenticating at once as mock-master's client does. A single
//! master (no election) plans its rounds without writing them, as before, so that the
//! event logs of single-master worlds stay what they were.

use std::collections::BTreeMap;
use std::time::Duration;

use mock_master::core::{Command, HeartbeatReply, MasterCore};
use mock_master::election::{self, Election, Op, Role};
use mock_master::etcd::{
    create_if_absent_request, delete_request, lease_grant_request, lease_keepalive_request,
    parse_grant, parse_keepalive, parse_put, parse_txn, put_request,
};
use mock_master::instances::Instances;
use mock_master::publish::Plan;
use mock_master::Config;
use mock_master::{HeartbeatEvent, MasterEvent};
use serde_json::Value;

use crate::master_watch::{event_note, read_watch_line, Effects, Follower, TOKEN_BASE};
use crate::node::{Call, NodeId, Outcome, Reply, Request, Server};

/// Tokens of the election's calls: this plus the election's call id. Election ids
/// count up from 1, so they stay below the follower's range
/// ([`crate::master_watch::TOKEN_BASE`], twice this).
pub const ELECTION_TOKENS: u64 = 1 << 61;

/// Tokens of LOADMETRICS writes, counted up from here: below the election's range and
/// far above the probes' ids, which the core counts up from 1.
pub const PUBLISH_TOKENS: u64 = 1 << 60;

/// One LOADMETRICS write of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Write {
    /// The plan's delete at this index.
    Delete(usize),
    /// The plan's put at this index.
    Put(usize),
}

/// A LOADMETRICS round whose writes are under way.
struct Round {
    plan: Plan,
    /// Writes not answered yet, by token.
    pending: BTreeMap<u64, Write>,
    /// The writes answered, in plan order (deletes first), and whether each succeeded.
    done: BTreeMap<Write, bool>,
}

/// A note for the log, kept as what it says until a log that writes asks for it (one
/// per heartbeat: a counting log never builds it).
enum Note {
    Value(serde_json::Value),
    Heartbeat { status: u16, name: Option<String> },
}

impl Note {
    fn into_value(self) -> serde_json::Value {
        match self {
            Note::Value(v) => v,
            Note::Heartbeat { status, name } => event_note(&MasterEvent::Heartbeat {
                beat: HeartbeatEvent {
                    status,
                    name: name.as_deref(),
                    fault: false,
                },
                request: None,
            }),
        }
    }
}

/// A simulated mock-master.
pub struct MasterNode {
    core: MasterCore,
    /// Where each instance name's vLLM is (the name is its `host:port`).
    routes: BTreeMap<String, NodeId>,
    /// Probe attempts the core asked for, due at their time: (at, id, timeout, name).
    probes: Vec<(Duration, u64, Duration, String)>,
    calls: Vec<Call>,
    notes: Vec<Note>,
    /// Heartbeat answers by status, over the node's life (as mock-master counts them).
    heartbeats: BTreeMap<u16, u64>,
    /// Where each routed completion went, in order.
    routed: Vec<NodeId>,
    /// Following etcd: listing, watching, recovering a dead stream.
    follower: Follower,
    /// Heartbeats an armed latency holds (due, from whom, the gate's refusal if any),
    /// acted on when due: the HTTP shell sleeps after the gate and before the body.
    held: Vec<(Duration, NodeId, Option<HeartbeatReply>)>,
    /// The bound of each etcd call (mock-master's `etcd_timeout`).
    etcd_timeout: Duration,
    /// Election calls under way, by token: what they asked, and the call's name (as
    /// mock-master's `elect` names it).
    elections: BTreeMap<u64, (Op, &'static str)>,
    /// The LOADMETRICS round under way (replica mode), if any.
    round: Option<Round>,
    /// The next LOADMETRICS write's token.
    next_write: u64,
}

impl MasterNode {
    fn note(&mut self, note: serde_json::Value) {
        self.notes.push(Note::Value(note));
    }

    /// A master with `cfg` started at `now`.
    pub fn new(cfg: Config, now: Duration) -> MasterNode {
        let core = MasterCore::new(&cfg, now);
        let credentials = (!cfg.etcd_username.is_empty())
            .then(|| (cfg.etcd_username.clone(), cfg.etcd_password.clone()));
        let follower = Follower::new(core.namespace(), cfg.etcd_timeout, credentials, now);
        MasterNode {
            follower,
            core,
            routes: BTreeMap::new(),
            probes: Vec::new(),
            calls: Vec::new(),
            notes: Vec::new(),
            heartbeats: BTreeMap::new(),
            routed: Vec::new(),
            held: Vec::new(),
            etcd_timeout: cfg.etcd_timeout,
            elections: BTreeMap::new(),
            round: None,
            next_write: PUBLISH_TOKENS,
        }
    }

    /// The replica's role ([`Role::Master`] always for a master without election).
    pub fn role(&self) -> Role {
        self.core.role()
    }

    /// Whether this replica is the master (publishes LOADMETRICS, weighs its own
    /// heartbeats); always for a master without election.
    pub fn is_master(&self) -> bool {
        self.core.is_master()
    }

    /// A heartbeat past its gate answered (the gate's refusal, else the body's verdict),
    /// counted and noted as mock-master's shell does.
    fn answer(&mut self, now: Duration, refused: Option<HeartbeatReply>, body: &str) -> Reply {
        let reply = refused.unwrap_or_else(|| self.core.on_heartbeat_admitted_text(now, body));
        *self.heartbeats.entry(reply.status).or_default() += 1;
        self.notes.push(Note::Heartbeat {
            status: reply.status,
            name: reply.name,
        });
        self.collect(now);
        Reply::Status(reply.status)
    }

    /// Route one completion as mock-master does (its core's pick over the routable
    /// instances); answers the vLLM node it goes to (`None`: the master answers 503).
    pub fn pick(&mut self) -> Option<NodeId> {
        let node = self
            .core
            .route()
            .and_then(|name| self.routes.get(&name).copied());
        self.routed.extend(node);
        node
    }

    /// Where every routed completion went so far, in order.
    pub fn routed(&self) -> &[NodeId] {
        &self.routed
    }

    /// Heartbeat answers by status so far, whatever the instance.
    pub fn heartbeat_counts(&self) -> &BTreeMap<u16, u64> {
        &self.heartbeats
    }

    /// The process restarts at `now`: every instance forgotten, pending probes and
    /// its watch dropped; it lists etcd again (applying the listing only if `relist`,
    /// as mock-master's restart does) and watches from there.
    pub fn restart(&mut self, now: Duration, relist: bool) {
        self.core.restart();
        self.probes.clear();
        // Calls of the last life: their answers find nothing to go to.
        self.elections.clear();
        self.round = None;
        self.follow(now, |f, _, fx| f.restart(now, relist, fx));
    }

    /// Let the follower act at `now` (`step`), then take its calls and notes and the
    /// core's commands.
    fn follow(
        &mut self,
        now: Duration,
        step: impl FnOnce(&mut Follower, &mut MasterCore, &mut Effects),
    ) {
        let mut fx = Effects::default();
        step(&mut self.follower, &mut self.core, &mut fx);
        self.calls.extend(fx.calls);
        self.notes.extend(fx.notes.into_iter().map(Note::Value));
        self.collect(now);
    }

    /// Say that instance `name` (`host:port`) is served by the vLLM node `node`.
    pub fn route(&mut self, name: &str, node: NodeId) {
        self.routes.insert(name.to_string(), node);
    }

    /// The core, to inspect it or change it (restart, faults).
    pub fn core(&mut self) -> &mut MasterCore {
        &mut self.core
    }

    /// The instance table, to inspect.
    pub fn instances(&self) -> &Instances {
        self.core.table()
    }

    /// The watch request mock-master's client sends for the instances' prefix, from
    /// where the core's cursor stands.
    pub fn watch_request(&self) -> String {
        let prefix = format!("{}XLLM:", self.core.namespace());
        mock_master::etcd::watch_create_request(prefix.as_bytes(), self.core.watch_from())
            .to_string()
    }

    /// One line of the watch stream, read by mock-master's own parser into the core.
    pub fn on_watch_line(&mut self, now: Duration, line: &str) {
        self.follow(now, |_, core, fx| {
            read_watch_line(now, line, core, &mut fx.notes);
        });
    }

    /// One event of the watch (already decoded), straight into the core.
    pub fn on_watch_event(&mut self, now: Duration, ev: &mock_master::etcd::WatchEvent) {
        self.core.on_watch_event(now, ev);
        self.collect(now);
    }

    /// An etcd gateway call over the node's link to etcd, with the token the follower
    /// holds (one client, one session, as mock-master's).
    fn etcd_call(&mut self, path: &'static str, body: Value, token: u64) {
        self.calls.push(Call {
            to: NodeId::Etcd,
            request: Request::Etcd {
                path,
                body: body.to_string().into(),
                token: self.follower.etcd_token().map(str::to_string),
            },
            timeout: self.etcd_timeout,
            token,
        });
    }

    /// The election's calls as gateway calls, as mock-master's `elect::carry_out`
    /// makes them.
    fn send_election_calls(&mut self) {
        for election::Call { id, op } in self.core.take_election_calls() {
            // The path and body, and the call's name in `etcd_error` notes.
            let (path, body, name) = match &op {
                Op::Grant { ttl_secs, .. } => {
                    let body = lease_grant_request(*ttl_secs);
                    ("/v3/lease/grant", body, "lease_grant")
                }
                Op::PutService { key, value, lease } => {
                    let body = put_request(key.as_bytes(), value.as_bytes(), Some(*lease));
                    ("/v3/kv/put", body, "put_service")
                }
                Op::CreateMaster { key, value, lease } => {
                    let body = create_if_absent_request(key.as_bytes(), value.as_bytes(), *lease);
                    ("/v3/kv/txn", body, "txn_master")
                }
                Op::KeepAlive { lease, .. } => {
                    let body = lease_keepalive_request(*lease);
                    ("/v3/lease/keepalive", body, "lease_keepalive")
                }
            };
            let token = ELECTION_TOKENS.saturating_add(id);
            self.etcd_call(path, body, token);
            self.elections.insert(token, (op, name));
        }
    }

    /// An election call's outcome read as mock-master's client reads it, into the core.
    fn on_election_outcome(&mut self, now: Duration, token: u64, outcome: &Outcome) {
        let Some((op, name)) = self.elections.remove(&token) else {
            return; // a call of a life before a restart
        };
        let outcome = election_outcome(&op, outcome);
        if let election::Outcome::Failed { error } = &outcome {
            self.note(event_note(&MasterEvent::EtcdError { op: name, error }));
        }
        self.core
            .on_election_result(now, token - ELECTION_TOKENS, outcome);
    }

    /// The LOADMETRICS round due at `now`, written as mock-master's `loadmetrics` shell
    /// writes it (deletes, then puts; here all sent at once, each its own call). While
    /// the last round's writes are under way, the new round's changes go back to the
    /// core for the next round (the shell's ticker waits for a round to end).
    fn publish(&mut self, now: Duration) {
        let Some(plan) = self.core.publish_round(now).filter(|p| !p.is_empty()) else {
            return;
        };
        if self.round.is_some() {
            let puts: Vec<String> = plan.puts.iter().map(|p| p.0.clone()).collect();
            let deletes: Vec<String> = plan.deletes.iter().map(|d| d.0.clone()).collect();
            self.core.publish_failed(&plan, &puts, &deletes);
            return;
        }
        let mut pending = BTreeMap::new();
        for (i, (_, key)) in plan.deletes.iter().enumerate() {
            let token = self.write_token();
            self.etcd_call("/v3/kv/deleterange", delete_request(key.as_bytes()), token);
            pending.insert(token, Write::Delete(i));
        }
        for (i, (_, key, value, _)) in plan.puts.iter().enumerate() {
            let token = self.write_token();
            let body = put_request(key.as_bytes(), value.as_bytes(), None);
            self.etcd_call("/v3/kv/put", body, token);
            pending.insert(token, Write::Put(i));
        }
        self.round = Some(Round {
            plan,
            pending,
            done: BTreeMap::new(),
        });
        self.end_round_if_done();
    }

    fn write_token(&mut self) -> u64 {
        let token = self.next_write;
        self.next_write += 1;
        token
    }

    /// A LOADMETRICS write ended: ok when etcd answered 200 with a JSON object, as
    /// mock-master's client counts a call done.
    fn on_write_outcome(&mut self, token: u64, outcome: &Outcome) {
        let Some(round) = self.round.as_mut() else {
            return;
        };
        let Some(write) = round.pending.remove(&token) else {
            return;
        };
        round.done.insert(write, gateway_answered(outcome));
        self.end_round_if_done();
    }

    /// Every write of the round answered: the shell's `loadmetrics_publish` event, and
    /// what failed back to the core for the next round.
    fn end_round_if_done(&mut self) {
        let Some(round) = self.round.take_if(|r| r.pending.is_empty()) else {
            return;
        };
        let plan = &round.plan;
        // The names of the deletes and of the puts that ended `ok`, in plan order.
        let names = |ok: bool| {
            let (mut deletes, mut puts) = (Vec::new(), Vec::new());
            for (write, _) in round.done.iter().filter(|(_, r)| **r == ok) {
                match *write {
                    Write::Delete(i) => deletes.extend(plan.deletes.get(i).map(|d| d.0.clone())),
                    Write::Put(i) => puts.extend(plan.puts.get(i).map(|p| p.0.clone())),
                }
            }
            (deletes, puts)
        };
        let (deleted, put) = names(true);
        let (failed_deletes, failed_puts) = names(false);
        let failed = failed_puts.len() + failed_deletes.len();
        self.note(event_note(&MasterEvent::LoadmetricsPublish {
            put: &put,
            deleted: &deleted,
            skipped: &plan.skipped,
            failed,
        }));
        if failed > 0 {
            self.core
                .publish_failed(&round.plan, &failed_puts, &failed_deletes);
        }
    }

    /// Take the core's probe commands and notes.
    fn collect(&mut self, now: Duration) {
        self.send_election_calls();
        for Command::Probe {
            id,
            name,
            at,
            timeout,
            ..
        } in self.core.take_commands()
        {
            self.probes.push((at, id, timeout, name));
        }
        for note in self.core.take_notes() {
            self.note(event_note(&note.event()));
        }
        self.send_due_probes(now);
    }

    /// Probe attempts due by `now` become calls; a name with no vLLM node fails at once.
    fn send_due_probes(&mut self, now: Duration) {
        let (due, later): (Vec<_>, Vec<_>) = self.probes.drain(..).partition(|p| p.0 <= now);
        self.probes = later;
        for (_, id, timeout, name) in due {
            match self.routes.get(&name) {
                Some(node) => self.calls.push(Call {
                    to: *node,
                    request: Request::Health,
                    timeout,
                    token: id,
                }),
                None => {
                    self.core.on_probe_result(now, id, false);
                    self.collect(now);
                }
            }
        }
    }
}

impl Server for MasterNode {
    fn serve(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        let Request::Heartbeat { body, token } = request else {
            return Some(Reply::Status(404));
        };
        // No token header when the sidecar has no token.
        let token = (!token.is_empty()).then_some(token.as_bytes());
        let (delay, refused) = self.core.heartbeat_gate(now, token.as_slice());
        if let Some(after) = delay {
            // Those past due were dropped with their callers (the world never served them).
            self.held.retain(|h| h.0 >= now);
            self.held.push((now + after, from, refused));
            return Some(Reply::Deferred { after });
        }
        Some(self.answer(now, refused, body))
    }

    fn serve_deferred(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        let Request::Heartbeat { body, .. } = request else {
            return Some(Reply::Status(404));
        };
        let held = self.held.iter().position(|h| h.0 == now && h.1 == from);
        let refused = held.and_then(|at| self.held.swap_remove(at).2);
        Some(self.answer(now, refused, body))
    }

    fn next_wakeup(&self) -> Option<Duration> {
        let probe = self.probes.iter().map(|p| p.0).min();
        let follow = self.follower.next_wakeup();
        let core = self.core.next_wakeup();
        [probe, follow].into_iter().flatten().chain([core]).min()
    }

    fn on_timer(&mut self, now: Duration) {
        // The election's timers alone first (mock-master's election task), so that a
        // keepalive due does not run the instance ticker off its schedule.
        let election = self.core.election().and_then(Election::next_wakeup);
        if election.is_some_and(|at| at <= now) {
            self.core.election_tick(now);
        }
        if now >= self.core.next_wakeup() {
            self.core.tick(now);
            if self.core.election().is_some() {
                self.publish(now);
            } else {
                // A single master: the round's plan is not built nor written (the
                // core's state changes as if it were), as in worlds before replicas.
                let _ = self.core.publish_round_unwritten(now);
            }
        }
        self.follow(now, |f, core, fx| f.on_timer(now, core, fx));
    }

    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        self.notes.drain(..).map(Note::into_value).collect()
    }

    fn drop_notes(&mut self) -> usize {
        self.notes.drain(..).len()
    }

    fn on_push(&mut self, now: Duration, _from: NodeId, line: &str) {
        self.follow(now, |f, core, fx| f.on_line(now, line, core, fx));
    }

    fn on_stream_end(&mut self, now: Duration, _from: NodeId, reason: &str) {
        self.follower.on_stream_end(now, reason);
    }

    fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    fn on_outcome(&mut self, now: Duration, token: u64, outcome: Outcome) {
        if token >= TOKEN_BASE {
            return self.follow(now, |f, core, fx| {
                f.on_outcome(now, token, outcome, core, fx)
            });
        }
        if token >= ELECTION_TOKENS {
            self.on_election_outcome(now, token, &outcome);
        } else if token >= PUBLISH_TOKENS {
            self.on_write_outcome(token, &outcome);
        } else {
            let ok = outcome == Outcome::Reply(Reply::Status(200));
            self.core.on_probe_result(now, token, ok);
        }
        self.collect(now);
    }
}

/// An etcd call's outcome as mock-master's client takes it: a 200 whose body is a JSON
/// object, else why not (the words of its errors).
fn gateway_object(outcome: &Outcome) -> Result<Value, String> {
    match outcome {
        Outcome::Reply(Reply::Gateway { status: 200, body }) => {
            match serde_json::from_slice::<Value>(body) {
                Ok(v @ Value::Object(_)) => Ok(v),
                _ => Err("answer is not a JSON object".to_string()),
            }
        }
        Outcome::Reply(Reply::Gateway { status, body }) => Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(body).trim()
        )),
        Outcome::Failed(f) => Err(f.describe()),
        Outcome::Reply(other) => Err(format!("{other:?}")),
    }
}

/// Whether an etcd call's outcome is an answer to mock-master's client (what
/// [`gateway_object`] answers `Ok` for), read without building the object.
fn gateway_answered(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Reply(Reply::Gateway { status: 200, body })
        if mock_master::watch_message::is_object(body))
}

/// An election call's outcome as `elect::carry_out` reads it.
fn election_outcome(op: &Op, outcome: &Outcome) -> election::Outcome {
    use election::Outcome::{Alive, Granted, Lost, Put, Won};
    let read = || -> Result<election::Outcome, String> {
        let v = gateway_object(outcome)?;
        Ok(match op {
            Op::Grant { .. } => Granted {
                lease: parse_grant(&v).map_err(|e| e.0)?,
            },
            Op::PutService { .. } => Put {
                revision: parse_put(&v),
            },
            Op::CreateMaster { .. } => match parse_txn(&v).map_err(|e| e.0)? {
                t if t.succeeded => Won {
                    revision: t.revision,
                },
                t => Lost {
                    holder: t.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
                    revision: t.revision,
                },
            },
            Op::KeepAlive { .. } => Alive {
                ttl_secs: parse_keepalive(&v).map_err(|e| e.0)?,
            },
        })
    };
    read().unwrap_or_else(|error| election::Outcome::Failed { error })
}
