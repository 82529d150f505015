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
//! Not here yet: the watch itself (it needs an etcd node), the `/health` probe a delete
//! triggers, LOADMETRICS publishing and routing.

use std::time::Duration;

use mock_master::auth::Token;
use mock_master::beat::{self, Answer};
use mock_master::etcd::WatchEvent;
use mock_master::follow::{self, Change};
use mock_master::instances::{Instances, Notice};
use mock_master::{normalize_namespace, Config};
use rand::rngs::StdRng;
use serde_json::json;

use crate::node::{NodeId, Reply, Request, Server};

/// A simulated mock-master.
pub struct MasterNode {
    cfg: Config,
    namespace: String,
    token: Token,
    instances: Instances,
    next_tick: Duration,
    /// What the table reported, for the log.
    notes: Vec<serde_json::Value>,
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
            cfg,
        }
    }

    /// The instance table, to inspect.
    pub fn instances(&self) -> &Instances {
        &self.instances
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
                // The probe the delete asks for needs a master → vLLM exchange (not
                // yet): noted, not answered.
                if let Some(ticket) =
                    self.instances
                        .apply_delete(name, deleted.as_deref(), &mut out)
                {
                    self.notes
                        .push(json!({ "probe_wanted": { "name": ticket.name, "incarnation": ticket.incarnation } }));
                }
            }
            None => {}
        }
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
        Some(self.next_tick)
    }

    fn on_timer(&mut self, now: Duration) {
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
}
