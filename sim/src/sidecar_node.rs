//! One sidecar: the production decision core ([`sidecar::core::Core`]) in a simulated
//! shell that does what the production driver (`sidecar/src/driver/`) does, with values
//! instead of sockets.
//!
//! The driver's loop, step by step, and its counterpart here:
//!
//! - it drains `poll_command`: `Exit` stops, a `Note` is logged, anything else runs as
//!   its own task → [`SidecarNode::poll`] answers the same commands as [`Outgoing`]
//!   values; the world turns each into an exchange over a link;
//! - each task is one peer call bounded by the driver's timeout for it (`/health`: the
//!   health timeout; `/metrics`: the scrape timeout; heartbeat: the master client's
//!   timeout, which the driver sets to the health timeout); an etcd call is its client's
//!   plan, one exchange per endpoint tried, each with the plan's timeout
//!   ([`crate::etcd_client`]) → [`Outgoing::Send`] carries that timeout and the world
//!   enforces it;
//! - the outcome becomes the core's [`Answer`] by the peer clients' own classification
//!   of it → [`SidecarNode::complete`], via [`answer_of`];
//! - it sleeps until `next_wakeup` and hands in `Input::Timer` → the world schedules a
//!   wake-up event at that virtual time.
//!
//! A heartbeat carries the target the core chose ([`HeartbeatTarget`]);
//! [`heartbeat_node_in`] sends it to the master replica its URL's host names in the
//! world's table of master hosts ([`crate::World::set_master_hosts`]), to
//! [`NodeId::Master`] when the target is the configured URL or names a host not in the
//! table. `ReadMasterKey` is an etcd call like the others.
//!
//! `LogServedModel` only feeds a log line in the driver (a `/v1/models` GET whose
//! answer decides nothing): it is logged here, not sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sidecar::config::Config;
use sidecar::core::{
    Answer, Command, CommandId, Core, CoreConfig, HeartbeatTarget, Input, Note, Registration,
};
use sidecar::driver::answers;
use sidecar::peers::etcd::EtcdRequest;
use sidecar::peers::exchange::{self, Exchange};
use sidecar::peers::{master, vllm};
use sidecar::prom::Format;

use crate::distortion::{Distortion, Start, Verdict};
use crate::etcd_client::{EtcdClient, Progress};
use crate::node::{Body, Failure, NodeId, Outcome, Reply, Request};

/// Which command an exchange answers, and what the answer needs from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tag {
    pub id: CommandId,
    pub kind: Kind,
}

pub use crate::command_kind::{EtcdCall, Kind};

/// What the node wants done after a step.
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// Start an exchange with `to`, failing with [`Failure::Timeout`] after `timeout`.
    Send {
        to: NodeId,
        request: Request,
        timeout: Duration,
        tag: Tag,
    },
    /// Log this (the driver's log line and counters).
    Note(Note),
    /// An info line of a peer client (the etcd client's re-authentication).
    Log(String),
    /// The driver's `/v1/models` lookup for a log line.
    LogServedModel,
    /// The core exited with this code.
    Exit(i32),
}

/// One simulated sidecar.
#[derive(Debug)]
pub struct SidecarNode {
    pub index: u32,
    core: Core,
    /// The driver's timeouts and `/metrics` body cap.
    cx: Context,
    token: String,
    /// The sidecar's etcd client: its session and its calls under way.
    etcd: EtcdClient,
    /// Exchanges a finished one led to (an etcd call's next endpoint), not yet polled.
    pending: Vec<Outgoing>,
    /// Answers the shell gives at once (a distortion's, an etcd call that ended
    /// without an exchange), not yet handed to the core.
    immediate: Vec<(CommandId, Answer)>,
    /// The wake-up the world has scheduled for this node.
    pub(crate) wake_at: Option<Duration>,
    /// When the world last handed the core a `Timer`.
    pub(crate) last_timer: Option<Duration>,
    exit: Option<i32>,
    /// The seed the core was made with.
    pub(crate) seed: u64,
    /// A process ran in this slot (false for a sidecar added stopped, never started).
    pub(crate) ran: bool,
    /// When the core was last handed an input.
    now: Duration,
    /// How far behind the world's time the core is told the time (a distortion's clock
    /// that missed a stop); zero for an honest shell.
    clock_lag: Duration,
    /// Test-only: how this shell lies to its core and peers (see [`crate::distortion`]).
    distortion: Option<Box<dyn Distortion>>,
    /// Which master replica a heartbeat URL's host is (the world's table, shared).
    master_hosts: Arc<BTreeMap<String, NodeId>>,
}

impl SidecarNode {
    /// Sidecar `index` with `config`, its core seeded with `seed`, started at `now`.
    pub fn new(index: u32, config: &Config, seed: u64, now: Duration) -> SidecarNode {
        let token = config.internal_token.expose().to_string();
        SidecarNode::started(index, config, Start { seed, token }, now)
    }

    fn started(index: u32, config: &Config, start: Start, now: Duration) -> SidecarNode {
        let Start { seed, token } = start;
        let core_config = CoreConfig::from_config(config, 1_700_000_000_000);
        SidecarNode {
            index,
            core: Core::new(core_config, seed, now),
            cx: Context {
                health: config.health_timeout,
                scrape: config.scrape_timeout,
                heartbeat: config.health_timeout,
                metrics_max_bytes: config.metrics_max_bytes,
            },
            token,
            etcd: EtcdClient::new(config),
            pending: Vec::new(),
            immediate: Vec::new(),
            wake_at: None,
            last_timer: None,
            exit: None,
            seed,
            ran: true,
            now,
            clock_lag: Duration::ZERO,
            distortion: None,
            master_hosts: Arc::default(),
        }
    }

    /// Test-only: run this sidecar's shell with `distortion` (see [`crate::distortion`]).
    pub fn distort(&mut self, distortion: Box<dyn Distortion>) {
        self.distortion = Some(distortion);
    }

    /// This slot's process started again now with `config`, its core seeded with `seed`
    /// (a distortion the slot holds may change its start). Answers the seed used.
    pub fn restart(&mut self, config: &Config, seed: u64, now: Duration) -> u64 {
        let token = config.internal_token.expose().to_string();
        let mut start = Start { seed, token };
        let distortion = self.distortion.take().map(|d| {
            let core_config = CoreConfig::from_config(config, 0);
            let mut next = start.clone();
            let fresh = d.restart(&core_config, self.seed, &mut next);
            if self.ran {
                start = next; // only a process that ran has a last life to repeat
            }
            fresh
        });
        let master_hosts = std::mem::take(&mut self.master_hosts);
        *self = SidecarNode::started(self.index, config, start, now);
        self.distortion = distortion;
        self.master_hosts = master_hosts;
        self.seed
    }

    /// Send heartbeats by `hosts`: a target URL's host → the master replica there
    /// (see [`heartbeat_node_in`]).
    pub fn set_master_hosts(&mut self, hosts: Arc<BTreeMap<String, NodeId>>) {
        self.master_hosts = hosts;
    }

    pub fn id(&self) -> NodeId {
        NodeId::Sidecar(self.index)
    }

    pub fn core(&self) -> &Core {
        &self.core
    }

    pub fn registration(&self) -> &Registration {
        self.core.registration()
    }

    /// The exit code, once the core has exited.
    pub fn exited(&self) -> Option<i32> {
        self.exit
    }

    /// The process is gone: the core is never handed anything again.
    pub fn kill(&mut self) {
        self.exit.get_or_insert(137);
        self.wake_at = None;
        self.etcd.clear();
        self.pending.clear();
        self.immediate.clear();
    }

    /// When the core wants its next `Timer`.
    pub fn next_wakeup(&self) -> Option<Duration> {
        if self.exit.is_some() {
            return None;
        }
        self.core.next_wakeup().map(|t| t + self.clock_lag)
    }

    /// Hand the core an input at `now`.
    pub fn handle(&mut self, now: Duration, input: Input) {
        if self.exit.is_none() {
            self.now = now;
            self.core.handle(now.saturating_sub(self.clock_lag), input);
        }
    }

    /// The process continued after being stopped for `stopped` (its due timers fire
    /// now, with the time it continued at).
    pub fn resumed(&mut self, stopped: Duration) {
        if let Some(d) = self.distortion.as_mut() {
            self.clock_lag += d.resumed(stopped);
        }
    }

    /// The commands the core issued, as the driver would run them, in order, appended
    /// to `out` (a caller's reused buffer).
    pub fn poll(&mut self, out: &mut Vec<Outgoing>) {
        out.append(&mut self.pending);
        loop {
            while let Some(command) = self.core.poll_command() {
                let command = match self.distortion.as_mut() {
                    None => command,
                    Some(d) => match d.command(command, self.core.registration()) {
                        Verdict::Run(command) => command,
                        Verdict::Answered(id, answer) => {
                            self.immediate.push((id, answer));
                            continue;
                        }
                    },
                };
                match self.outgoing(command) {
                    Some(Outgoing::Exit(code)) => {
                        self.exit = Some(code);
                        out.push(Outgoing::Exit(code));
                        return;
                    }
                    Some(o) => out.push(o),
                    None => {}
                }
                out.append(&mut self.pending);
            }
            if self.immediate.is_empty() {
                break;
            }
            for (id, answer) in std::mem::take(&mut self.immediate) {
                self.handle(self.now, Input::Answer(id, answer));
            }
        }
        out.extend(self.unasked());
    }

    /// The exchange a distortion sends unasked now, if any (it bypasses the
    /// distortion's own [`Distortion::command`]).
    fn unasked(&mut self) -> Option<Outgoing> {
        if self.exit.is_some() {
            return None;
        }
        let command = self
            .distortion
            .as_mut()?
            .unasked(self.now, self.core.registration())?;
        self.outgoing(command)
    }

    /// An exchange of `tag` ended with `outcome` at `now`: the core gets its answer.
    pub fn complete(&mut self, now: Duration, tag: &Tag, outcome: Outcome) {
        let answer = match tag.kind {
            Kind::Etcd(_) => match self.etcd.on_outcome(tag.id, outcome) {
                Some(Progress::Done(answer)) => Some(answer),
                Some(progress) => return self.etcd_progress(progress, tag.clone()),
                None => None, // no such call (the process was restarted meanwhile)
            },
            kind => answer_of(kind, outcome, &self.cx),
        };
        let answer = match self.distortion.as_mut() {
            Some(d) => answer.and_then(|answer| d.answer(tag.id, tag.kind, answer)),
            None => answer,
        };
        if let Some(answer) = answer {
            self.handle(now, Input::Answer(tag.id, answer));
        }
    }

    /// An etcd call's progress as what the driver does: the exchange (after the
    /// client's log line, if any) goes out with the next poll, an answer to the core.
    fn etcd_progress(&mut self, progress: Progress, tag: Tag) {
        match progress {
            Progress::Send {
                to,
                request,
                timeout,
                log,
            } => {
                self.pending.extend(log.map(Outgoing::Log));
                self.pending.push(Outgoing::Send {
                    to,
                    request,
                    timeout,
                    tag,
                });
            }
            Progress::Done(answer) => self.immediate.push((tag.id, answer)),
        }
    }

    /// The command as the driver runs it: an exchange, a line, the exit; `None` for an
    /// etcd command, whose call's steps go out through `pending`.
    fn outgoing(&mut self, command: Command) -> Option<Outgoing> {
        let vllm = NodeId::Vllm(self.index);
        let t = self.cx;
        let send = |to, request, timeout, id, kind| {
            let tag = Tag { id, kind };
            Some(Outgoing::Send {
                to,
                request,
                timeout,
                tag,
            })
        };
        let (id, call, request) = match command {
            Command::ProbeHealth { id } => {
                return send(vllm, Request::Health, t.health, id, Kind::Health)
            }
            Command::Scrape { id } => {
                return send(vllm, Request::Metrics, t.scrape, id, Kind::Scrape)
            }
            Command::PostHeartbeat { id, body, target } => {
                let to = heartbeat_node_in(&self.master_hosts, &target);
                let token = self.token.clone();
                let request = Request::Heartbeat { body, token };
                return send(to, request, t.heartbeat, id, Kind::Heartbeat);
            }
            Command::LogServedModel => return Some(Outgoing::LogServedModel),
            Command::Note(note) => return Some(Outgoing::Note(note)),
            Command::Exit { code } => return Some(Outgoing::Exit(code)),
            Command::GrantLease { id, ttl } => {
                (id, EtcdCall::Grant { ttl }, EtcdRequest::Grant { ttl })
            }
            Command::PutKey {
                id,
                key,
                value,
                lease,
            } => (id, EtcdCall::Put, EtcdRequest::Put { key, value, lease }),
            Command::Keepalive { id, lease } => {
                (id, EtcdCall::Keepalive, EtcdRequest::Keepalive { lease })
            }
            Command::Revoke { id, lease } => (id, EtcdCall::Revoke, EtcdRequest::Revoke { lease }),
            Command::ReadMasterKey { id, key } => {
                (id, EtcdCall::MasterRead, EtcdRequest::Range { key })
            }
        };
        let progress = self.etcd.start(id, call, &request);
        let kind = Kind::Etcd(call);
        self.etcd_progress(progress, Tag { id, kind });
        None
    }
}

/// The node a heartbeat for `target` goes to, given `hosts` (a heartbeat URL's host →
/// the master replica there): an elected target's URL host as `hosts` maps it; the
/// configured URL, or a host `hosts` does not name, goes to [`NodeId::Master`] (the
/// world names no other node for it; a scenario that wants such heartbeats refused maps
/// the host to a node it never starts). A lookup by `&str`: no allocation per heartbeat.
pub fn heartbeat_node_in(hosts: &BTreeMap<String, NodeId>, target: &HeartbeatTarget) -> NodeId {
    match target {
        HeartbeatTarget::Configured => NodeId::Master,
        HeartbeatTarget::Elected { url, .. } => url
            .host_str()
            .and_then(|host| hosts.get(host))
            .copied()
            .unwrap_or(NodeId::Master),
    }
}

/// What [`answer_of`] needs besides the outcome, from the sidecar's config: the
/// driver's per-call timeouts to vLLM and the master (named in its messages; an etcd
/// attempt's timeout is its call plan's: [`crate::etcd_client`]) and its `/metrics`
/// body cap (enforced by its reader).
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub health: Duration,
    pub scrape: Duration,
    pub heartbeat: Duration,
    pub metrics_max_bytes: usize,
}

/// The core's answer for a vLLM or master exchange of `kind` that ended with
/// `outcome`: the driver's own classification ([`vllm::classify_health`],
/// [`vllm::classify_scrape`], [`master::classify_heartbeat`]) and answer mapping
/// ([`answers`]) of the exchange as its reader would have seen it. `None` for an etcd
/// exchange: its call's answer comes from [`crate::etcd_client`], after every step of
/// the call.
pub fn answer_of(kind: Kind, outcome: Outcome, t: &Context) -> Option<Answer> {
    Some(match kind {
        Kind::Health => {
            let exchange = exchange_of(outcome, vllm::HEALTH_BODY_CAP);
            answers::health(vllm::classify_health(exchange, t.health))
        }
        Kind::Scrape => {
            let exchange = exchange_of(outcome, t.metrics_max_bytes);
            answers::scrape(vllm::classify_scrape(exchange))
        }
        Kind::Heartbeat => {
            let exchange = exchange_of(outcome, master::ANSWER_BODY_CAP);
            let result = master::classify_heartbeat(exchange, t.heartbeat);
            answers::heartbeat(result.map(|a| a.status))
        }
        Kind::Etcd(_) => return None,
    })
}

/// A simulated exchange's outcome as the driver's reqwest reader ends it: a body past
/// `cap` is over it (never copied), a failure is the transport's message for it. Replies
/// the world resolves before delivering them read as what they stand for.
fn exchange_of(outcome: Outcome, cap: usize) -> Exchange {
    let reply = match outcome {
        Outcome::Failed(Failure::Timeout) => return Exchange::TimedOut,
        Outcome::Failed(f) => return Exchange::Failed(f.describe()),
        Outcome::Reply(reply) => reply,
    };
    match reply {
        Reply::Status(status) => Exchange::Answer {
            status,
            format: None,
            body: exchange::Body::Bytes(Vec::new()),
        },
        Reply::Page {
            status,
            content_type,
            body,
        } => Exchange::Answer {
            status,
            format: Some(Format::from_content_type(&content_type)),
            body: if body.len() > cap {
                exchange::Body::OverCap(cap)
            } else {
                match body {
                    Body::Text(text) => exchange::Body::Text(text),
                    Body::Bytes(bytes) => exchange::Body::Bytes(Vec::from(bytes)),
                }
            },
        },
        Reply::Gateway { status, body } => Exchange::Answer {
            status,
            format: None,
            body: exchange::Body::capped(body, cap),
        },
        Reply::Slow { reply, .. } => exchange_of(Outcome::Reply(*reply), cap),
        Reply::Reset => Exchange::Failed(Failure::Reset.describe()),
        Reply::Refused => Exchange::Failed(Failure::Refused.describe()),
        // The server never acted on it: its caller waits out its timeout.
        Reply::Deferred { .. } => Exchange::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> Context {
        Context {
            health: Duration::from_secs(3),
            scrape: Duration::from_secs(3),
            heartbeat: Duration::from_secs(3),
            metrics_max_bytes: 10,
        }
    }

    #[test]
    fn timeouts_read_as_the_clients_write_them() {
        let t = Outcome::Failed(Failure::Timeout);
        assert_eq!(
            answer_of(Kind::Health, t.clone(), &cx()),
            Some(Answer::HealthFailed("/health: no answer within 3s".into()))
        );
        assert_eq!(
            answer_of(Kind::Scrape, t.clone(), &cx()),
            Some(Answer::ScrapeFailed {
                reason: "timeout".into(),
                detail: "/metrics not read within the scrape timeout".into()
            })
        );
        assert_eq!(
            answer_of(Kind::Heartbeat, t.clone(), &cx()),
            Some(Answer::HeartbeatFailed(
                "heartbeat: no answer within 3s".into()
            ))
        );
        assert_eq!(answer_of(Kind::Etcd(EtcdCall::Keepalive), t, &cx()), None);
    }

    #[test]
    fn failures_read_as_each_client_words_them() {
        let refused = Outcome::Failed(Failure::Refused);
        let why = Failure::Refused.describe();
        assert_eq!(
            answer_of(Kind::Health, refused.clone(), &cx()),
            Some(Answer::HealthFailed(why.clone()))
        );
        assert_eq!(
            answer_of(Kind::Heartbeat, refused.clone(), &cx()),
            Some(Answer::HeartbeatFailed(format!(
                "heartbeat POST failed: {why}"
            )))
        );
        assert_eq!(
            answer_of(Kind::Scrape, refused, &cx()),
            Some(Answer::ScrapeFailed {
                reason: "transport".into(),
                detail: format!("GET /metrics failed: {why}")
            })
        );
        let status = |s| Outcome::Reply(Reply::Status(s));
        assert_eq!(
            answer_of(Kind::Health, status(503), &cx()),
            Some(Answer::HealthFailed("/health answered HTTP 503".into()))
        );
        assert_eq!(
            answer_of(Kind::Heartbeat, status(409), &cx()),
            Some(Answer::HeartbeatStatus(409))
        );
    }

    /// A trickled page is read as the page it is, once it has all come.
    #[test]
    fn a_slow_page_is_its_page_and_its_content_type_names_the_format() {
        let page = Reply::Page {
            status: 200,
            content_type: mock_vllm::metrics::OPENMETRICS_CONTENT_TYPE.into(),
            body: Body::Text("a 1\n".into()),
        };
        let slow = Outcome::Reply(Reply::Slow {
            after: Duration::from_secs(1),
            reply: Box::new(page),
        });
        assert_eq!(
            answer_of(Kind::Scrape, slow, &cx()),
            Some(Answer::ScrapePage {
                text: "a 1\n".into(),
                openmetrics: true
            })
        );
    }

    #[test]
    fn pages_past_the_cap_and_bad_statuses_are_scrape_errors() {
        let page = |status, text: &str| {
            Outcome::Reply(Reply::Page {
                status,
                content_type: "text/plain; version=0.0.4; charset=utf-8".into(),
                body: text.as_bytes().to_vec().into(),
            })
        };
        let Some(Answer::ScrapeFailed { reason, .. }) =
            answer_of(Kind::Scrape, page(200, "x".repeat(11).as_str()), &cx())
        else {
            panic!()
        };
        assert_eq!(reason, "too_large");
        let Some(Answer::ScrapeFailed { reason, .. }) =
            answer_of(Kind::Scrape, page(503, ""), &cx())
        else {
            panic!()
        };
        assert_eq!(reason, "status");
        assert!(matches!(
            answer_of(Kind::Scrape, page(200, "a 1\n"), &cx()),
            Some(Answer::ScrapePage { .. })
        ));
    }
}
