//! The fake master: mock-master's clock-free cores in a simulated shell. The instance
//! table ([`Instances`]: ACTIVE / LEASE_LOST / SUSPECT, 409 decisions, timeouts), the
//! heartbeat table ([`beat`]: body checks under protobuf's JSON rules, answers) and
//! the rules of following etcd ([`follow::change`]: what a key and its value mean).
//!
//! The shell does what mock-master's does: the token check first
//! ([`Token::admits`]), then [`beat::read_request`] on the body exactly as the sidecar
//! sent it, then the table's verdict; the table's timeouts are applied on the shell's
//! ticker period (the shortest timeout / 20, between 5 and 200 ms). The sidecar's etcd
//! value reaches the table as the bytes of a watch event, read by mock-master's own
//! `InstanceMeta::parse`.
//!
//! A delete the table wants checked becomes the shell's probe (`probe::Prober`, which
//! is async and not reachable from outside: its loop is mirrored): `GET /health` of the
//! instance's vLLM, `probe_attempts` tries `probe_interval` apart, each bounded by
//! `probe_timeout`; the first 200 makes the table's answer "healthy".
//!
//! Not here yet: the watch itself (it needs an etcd node), LOADMETRICS publishing and
//! routing.

use std::collections::BTreeMap;
use std::time::Duration;

use mock_master::auth::Token;
use mock_master::beat::{self, Answer};
use mock_master::etcd::{parse_watch_message, WatchEvent};
use mock_master::follow::{self, Change, Cursor, Verdict};
use mock_master::instances::{Instances, Notice, ProbeTicket};
use mock_master::{normalize_namespace, Config};
use rand::rngs::StdRng;
use serde_json::json;

use crate::node::{Call, Failure, NodeId, Outcome, Reply, Request, Server};

/// A simulated mock-master.
pub struct MasterNode {
    cfg: Config,
    namespace: String,
    token: Token,
    instances: Instances,
    next_tick: Duration,
    /// What the table reported, for the log.
    notes: Vec<serde_json::Value>,
    /// Where each instance name's vLLM is (the name is its `host:port`).
    routes: BTreeMap<String, NodeId>,
    /// Probes under way, by token: the ticket and the attempt (from 1).
    probes: BTreeMap<u64, (ProbeTicket, u32)>,
    /// Probe attempts waiting for their retry time: (time, token).
    retries: Vec<(Duration, u64)>,
    calls: Vec<Call>,
    next_token: u64,
    /// Where the watch stands (from an empty listing at revision 0).
    cursor: Cursor,
}

impl MasterNode {
    /// A master with `cfg` started at `now`.
    pub fn new(cfg: Config, now: Duration) -> MasterNode {
        MasterNode {
            namespace: normalize_namespace(&cfg.etcd_namespace),
            token: Token::new(cfg.token.clone()),
            instances: Instances::new(),
            next_tick: now + tick_period(&cfg),
            notes: Vec::new(),
            routes: BTreeMap::new(),
            probes: BTreeMap::new(),
            retries: Vec::new(),
            calls: Vec::new(),
            next_token: 0,
            cursor: Cursor::listed(0),
            cfg,
        }
    }

    /// Say that instance `name` (`host:port`) is served by the vLLM node `node`.
    pub fn route(&mut self, name: &str, node: NodeId) {
        self.routes.insert(name.to_string(), node);
    }

    /// The instance table, to inspect.
    pub fn instances(&self) -> &Instances {
        &self.instances
    }

    /// The watch request mock-master's client sends for the instances' prefix, from
    /// where its cursor stands.
    pub fn watch_request(&self) -> String {
        use base64::engine::general_purpose::STANDARD as B64;
        use base64::Engine;
        let prefix = format!("{}XLLM:", self.namespace);
        let mut end = prefix.clone().into_bytes();
        if let Some(last) = end.last_mut() {
            *last += 1; // "XLLM:" ends in ':', so no carry
        }
        serde_json::json!({
            "create_request": {
                "key": B64.encode(prefix.as_bytes()),
                "range_end": B64.encode(&end),
                "start_revision": self.cursor.next().to_string(),
                "prev_kv": true,
            }
        })
        .to_string()
    }

    /// One line of the watch stream, read by mock-master's own parser and cursor.
    pub fn on_watch_line(&mut self, now: Duration, line: &str) {
        let message = serde_json::from_str(line)
            .map_err(|e| e.to_string())
            .and_then(|v| parse_watch_message(&v).map_err(|e| e.to_string()));
        let resp = match message {
            Ok(r) => r,
            Err(e) => {
                self.notes.push(json!({ "watch_error": e }));
                return;
            }
        };
        match self.cursor.on_response(resp) {
            Verdict::Events(events) => {
                for ev in &events {
                    self.on_watch_event(now, ev);
                }
            }
            other => self.notes.push(json!({ "watch": format!("{other:?}") })),
        }
    }

    /// One event of the watch on the instances' prefix, at `now`.
    pub fn on_watch_event(&mut self, now: Duration, ev: &WatchEvent) {
        let mut out = Vec::new();
        match follow::change(&self.namespace, ev) {
            Some(Change::Put {
                name,
                meta: Ok(meta),
            }) => self.instances.apply_put(name, meta, now, &mut out),
            Some(Change::Put {
                name,
                meta: Err(why),
            }) => self
                .notes
                .push(json!({ "unreadable_value": { "name": name, "why": why } })),
            Some(Change::Delete { name, deleted }) => {
                if let Some(ticket) =
                    self.instances
                        .apply_delete(name, deleted.as_deref(), &mut out)
                {
                    self.notes.push(json!({ "probe": { "name": ticket.name, "incarnation": ticket.incarnation } }));
                    let token = self.next_token;
                    self.next_token += 1;
                    self.probes.insert(token, (ticket, 1));
                    self.attempt(now, token);
                }
            }
            None => {}
        }
        self.note_all(out);
    }

    /// Send attempt of probe `token`; a name with no vLLM node fails it at once.
    fn attempt(&mut self, now: Duration, token: u64) {
        let Some((ticket, _)) = self.probes.get(&token) else {
            return;
        };
        match self.routes.get(&ticket.name) {
            Some(node) => self.calls.push(Call {
                to: *node,
                request: Request::Health,
                timeout: self.cfg.probe_timeout,
                token,
            }),
            None => self.on_outcome(now, token, Outcome::Failed(Failure::Refused)),
        }
    }

    fn probe_done(&mut self, now: Duration, ticket: &ProbeTicket, healthy: bool) {
        self.notes
            .push(json!({ "probe_result": { "name": ticket.name, "healthy": healthy } }));
        let mut out = Vec::new();
        self.instances.apply_probe(ticket, healthy, now, &mut out);
        self.note_all(out);
    }

    fn heartbeat(&mut self, now: Duration, body: &str, token: &str) -> u16 {
        let presented = (!token.is_empty()).then_some(token.as_bytes());
        if !self.token.admits(presented) {
            return Answer::InvalidToken.status();
        }
        if body.len() > self.cfg.max_body_bytes {
            return Answer::TooLarge.status();
        }
        let req = match beat::read_request(body.as_bytes()) {
            Ok(r) => r,
            Err(a) => return a.status(),
        };
        let mut out = Vec::new();
        let verdict = self.instances.heartbeat(
            &req.name,
            &req.incarnation_id,
            req.load_metrics,
            req.latency_metrics,
            now,
            &mut out,
        );
        self.note_all(out);
        Answer::of(verdict).status()
    }

    fn note_all(&mut self, out: Vec<Notice>) {
        self.notes.extend(out.into_iter().map(|n| match n {
            Notice::Transition {
                name,
                incarnation,
                from,
                to,
                reason,
            } => json!({ "transition": { "name": name, "incarnation": incarnation, "from": from, "to": to, "reason": reason } }),
            Notice::StaleDelete {
                name,
                deleted,
                tracked,
            } => json!({ "stale_delete": { "name": name, "deleted": deleted, "tracked": tracked } }),
        }));
    }
}

/// The shell's ticker period: often enough that timeouts fire within a few percent.
fn tick_period(cfg: &Config) -> Duration {
    let shortest = cfg.lease_lost_timeout.min(cfg.suspect_window);
    (shortest / 20).clamp(Duration::from_millis(5), Duration::from_millis(200))
}

impl Server for MasterNode {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn serve(
        &mut self,
        now: Duration,
        _: NodeId,
        request: &Request,
        _: &mut StdRng,
    ) -> Option<Reply> {
        Some(match request {
            Request::Heartbeat { body, token } => Reply::Status(self.heartbeat(now, body, token)),
            _ => Reply::Status(404),
        })
    }

    fn next_wakeup(&self) -> Option<Duration> {
        let retry = self.retries.iter().map(|(t, _)| *t).min();
        Some(retry.map_or(self.next_tick, |r| r.min(self.next_tick)))
    }

    fn on_timer(&mut self, now: Duration) {
        let (due, later): (Vec<_>, Vec<_>) = self.retries.drain(..).partition(|(t, _)| *t <= now);
        self.retries = later;
        for (_, token) in due {
            self.attempt(now, token);
        }
        if now < self.next_tick {
            return;
        }
        let mut out = Vec::new();
        self.instances.tick(
            now,
            self.cfg.lease_lost_timeout,
            self.cfg.suspect_window,
            &mut out,
        );
        self.note_all(out);
        self.next_tick = now + tick_period(&self.cfg);
    }

    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        std::mem::take(&mut self.notes)
    }

    fn on_push(&mut self, now: Duration, _from: NodeId, line: &str) {
        self.on_watch_line(now, line);
    }

    fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    fn on_outcome(&mut self, now: Duration, token: u64, outcome: Outcome) {
        let Some((ticket, attempt)) = self.probes.remove(&token) else {
            return;
        };
        if outcome == Outcome::Reply(Reply::Status(200)) {
            self.probe_done(now, &ticket, true);
        } else if attempt < self.cfg.probe_attempts.max(1) {
            self.probes.insert(token, (ticket, attempt + 1));
            self.retries.push((now + self.cfg.probe_interval, token));
        } else {
            self.probe_done(now, &ticket, false);
        }
    }
}
