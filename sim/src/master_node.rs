//! The fake master: mock-master's own virtual-time core ([`MasterCore`]: the gate
//! (token, faults), the heartbeat body rules, the instance table, the watch cursor,
//! the probe attempts and the ticker) as a node.
//!
//! The node only carries things: a heartbeat's token header and body bytes in, its
//! status out (held back by an armed latency fault); etcd's watch lines read by
//! mock-master's own parser ([`parse_watch_message`]) into the core; the core's probe
//! commands sent at their time as `GET /health` to the instance's vLLM node, their
//! outcome (200 or not) handed back.
//!
//! It follows etcd as mock-master's watcher task does, by mock-master's own plan
//! ([`crate::master_watch::Follower`]): a listing, then a watch over its link to etcd,
//! re-opened or re-listed when the stream dies. Routing is the core's pick.
//!
//! Not here yet: the LOADMETRICS rounds are planned by the core but not written to etcd
//! (the plan is dropped).

use std::collections::BTreeMap;
use std::time::Duration;

use mock_master::core::{Command, HeartbeatReply, MasterCore};
use mock_master::etcd::parse_watch_message;
use mock_master::instances::Instances;
use mock_master::Config;
use mock_master::HeartbeatEvent;
use rand::rngs::StdRng;
use serde_json::json;

use crate::master_watch::{Effects, Follower};
use crate::node::{Call, NodeId, Outcome, Reply, Request, Server};

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
            Note::Heartbeat { status, name } => {
                let ev = HeartbeatEvent {
                    status,
                    name: name.as_deref(),
                    fault: false,
                };
                json!({ HeartbeatEvent::KIND: ev.detail() })
            }
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
        }
    }

    /// A heartbeat past its gate answered (the gate's refusal, else the body's verdict),
    /// counted and noted as mock-master's shell does.
    fn answer(&mut self, now: Duration, refused: Option<HeartbeatReply>, body: &str) -> Reply {
        let reply = match refused {
            Some(reply) => reply,
            None => self.core.on_heartbeat_admitted_text(now, body),
        };
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
        if let Some(n) = node {
            self.routed.push(n);
        }
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
        let mut fx = Effects::default();
        self.follower.restart(now, relist, &mut fx);
        self.take_effects(fx);
        self.collect(now);
    }

    fn take_effects(&mut self, fx: Effects) {
        self.calls.extend(fx.calls);
        self.notes.extend(fx.notes.into_iter().map(Note::Value));
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
        let message = serde_json::from_str(line)
            .map_err(|e| e.to_string())
            .and_then(|v| parse_watch_message(&v).map_err(|e| e.to_string()));
        match message {
            Ok(resp) => {
                let verdict = self.core.on_watch_response(now, resp);
                if !matches!(verdict, mock_master::follow::Verdict::Events(_)) {
                    self.note(json!({ "watch": format!("{verdict:?}") }));
                }
            }
            Err(e) => self.note(json!({ "watch_error": e })),
        }
        self.collect(now);
    }

    /// One event of the watch (already decoded), straight into the core.
    pub fn on_watch_event(&mut self, now: Duration, ev: &mock_master::etcd::WatchEvent) {
        self.core.on_watch_event(now, ev);
        self.collect(now);
    }

    /// Take the core's probe commands and notes.
    fn collect(&mut self, now: Duration) {
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
            let (kind, detail) = note.event();
            self.note(json!({ kind: detail }));
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
    fn serve(
        &mut self,
        now: Duration,
        from: NodeId,
        request: &Request,
        _: &mut StdRng,
    ) -> Option<Reply> {
        let Request::Heartbeat { body, token } = request else {
            return Some(Reply::Status(404));
        };
        let tokens: Vec<&[u8]> = if token.is_empty() {
            Vec::new()
        } else {
            vec![token.as_bytes()]
        };
        let (delay, refused) = self.core.heartbeat_gate(now, &tokens);
        if let Some(after) = delay {
            // Those past due were dropped with their callers (the world never served them).
            self.held.retain(|h| h.0 >= now);
            self.held.push((now + after, from, refused));
            return Some(Reply::Deferred { after });
        }
        Some(self.answer(now, refused, body))
    }

    fn serve_deferred(
        &mut self,
        now: Duration,
        from: NodeId,
        request: &Request,
        _: &mut StdRng,
    ) -> Option<Reply> {
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
        if now >= self.core.next_wakeup() {
            self.core.tick(now);
            // LOADMETRICS: not written to etcd yet, so the round's plan is not built
            // (the core's state changes as if it were).
            let _ = self.core.publish_round_unwritten(now);
        }
        let mut fx = Effects::default();
        self.follower.on_timer(now, &self.core, &mut fx);
        self.take_effects(fx);
        self.collect(now);
    }

    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        self.notes.drain(..).map(Note::into_value).collect()
    }

    fn drop_notes(&mut self) -> usize {
        let n = self.notes.len();
        self.notes.clear();
        n
    }

    fn on_push(&mut self, now: Duration, _from: NodeId, line: &str) {
        let mut fx = Effects::default();
        self.follower.on_line(now, line, &mut self.core, &mut fx);
        self.take_effects(fx);
        self.collect(now);
    }

    fn on_stream_end(&mut self, now: Duration, _from: NodeId, reason: &str) {
        self.follower.on_stream_end(now, reason);
    }

    fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    fn on_outcome(&mut self, now: Duration, token: u64, outcome: Outcome) {
        if Follower::owns(token) {
            let mut fx = Effects::default();
            self.follower
                .on_outcome(now, token, outcome, &mut self.core, &mut fx);
            self.take_effects(fx);
            self.collect(now);
            return;
        }
        let ok = outcome == Outcome::Reply(Reply::Status(200));
        self.core.on_probe_result(now, token, ok);
        self.collect(now);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}
