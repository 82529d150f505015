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
//! - the outcome becomes the core's [`Answer`] with the error text the peer clients
//!   write → [`SidecarNode::complete`], via [`answer_of`];
//! - it sleeps until `next_wakeup` and hands in `Input::Timer` → the world schedules a
//!   wake-up event at that virtual time.
//!
//! `LogServedModel` only feeds a log line in the driver (a `/v1/models` GET whose
//! answer decides nothing): it is logged here, not sent.

use std::time::Duration;

use sidecar::config::Config;
use sidecar::core::{Answer, Command, CommandId, Core, CoreConfig, Input, Note, Registration};
use sidecar::peers::etcd::EtcdRequest;
use sidecar::peers::vllm::ScrapeError;
use sidecar::prom::Format;

use crate::etcd_client::{EtcdCall, EtcdClient, Progress};
use crate::node::{Failure, NodeId, Outcome, Reply, Request};
use crate::planted::{Distortion, PlantedBug, STRAY};

/// Which command an exchange answers, and what the answer needs from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tag {
    pub id: CommandId,
    pub kind: Kind,
}

pub use crate::command_kind::Kind;

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

/// The driver's per-call timeouts to vLLM and the master, from the sidecar's config
/// (an etcd attempt's timeout is its call plan's: [`crate::etcd_client`]).
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub health: Duration,
    pub scrape: Duration,
    pub heartbeat: Duration,
}

/// One simulated sidecar.
#[derive(Debug)]
pub struct SidecarNode {
    pub index: u32,
    core: Core,
    timeouts: Timeouts,
    token: String,
    metrics_max_bytes: usize,
    /// The sidecar's etcd client: its session and its calls under way.
    etcd: EtcdClient,
    /// Exchanges a finished one led to (an etcd call's next endpoint), not yet polled.
    pending: Vec<Outgoing>,
    /// Answers the shell gives at once (a planted bug's, an etcd call that ended
    /// without an exchange), not yet handed to the core.
    immediate: Vec<(CommandId, Answer)>,
    /// The wake-up the world has scheduled for this node.
    pub(crate) wake_at: Option<Duration>,
    /// When the world last handed the core a `Timer`.
    pub(crate) last_timer: Option<Duration>,
    exit: Option<i32>,
    /// The seed the core was made with (a restart with a planted bug may reuse it).
    pub(crate) seed: u64,
    /// A process ran in this slot (false for a sidecar added stopped, never started).
    pub(crate) ran: bool,
    /// When the core was last handed an input.
    now: Duration,
    /// Test-only: a planted bug (see [`crate::planted`]).
    distortion: Option<Distortion>,
}

impl SidecarNode {
    /// Sidecar `index` with `config`, its core seeded with `seed`, started at `now`.
    pub fn new(index: u32, config: &Config, seed: u64, now: Duration) -> SidecarNode {
        let core_config = CoreConfig::from_config(config, 1_700_000_000_000);
        SidecarNode {
            index,
            core: Core::new(core_config, seed, now),
            timeouts: Timeouts {
                health: config.health_timeout,
                scrape: config.scrape_timeout,
                heartbeat: config.health_timeout,
            },
            token: config.internal_token.expose().to_string(),
            metrics_max_bytes: config.metrics_max_bytes,
            etcd: EtcdClient::new(config),
            pending: Vec::new(),
            immediate: Vec::new(),
            wake_at: None,
            last_timer: None,
            exit: None,
            seed,
            ran: true,
            now,
            distortion: None,
        }
    }

    /// Test-only: run this sidecar with a planted bug; `restarted`: the process was
    /// started again (a bug may lose what a restart should keep).
    pub fn plant(&mut self, bug: PlantedBug, restarted: bool) {
        let cfg = self.core.config();
        self.distortion = Some(Distortion::new(bug, cfg.lease_ttl, cfg.heartbeat_interval));
        if restarted && bug == PlantedBug::TokenLostOnRestart {
            self.token.clear();
        }
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
        if self.exit.is_none() {
            self.exit = Some(137);
        }
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
        self.core.next_wakeup()
    }

    /// Hand the core an input at `now`.
    pub fn handle(&mut self, now: Duration, input: Input) {
        if self.exit.is_none() {
            self.now = now;
            self.core.handle(now, input);
        }
    }

    /// The commands the core issued, as the driver would run them, in order.
    pub fn poll(&mut self) -> Vec<Outgoing> {
        let mut out = Vec::new();
        self.poll_into(&mut out);
        out
    }

    /// [`SidecarNode::poll`] appended to `out` (a caller's reused buffer).
    pub fn poll_into(&mut self, out: &mut Vec<Outgoing>) {
        out.append(&mut self.pending);
        loop {
            while let Some(command) = self.core.poll_command() {
                let mut command = command;
                if let Some(d) = self.distortion.as_mut() {
                    if let Some(answer) = d.intercept(&command, self.core.registration()) {
                        if let Some(id) = command_id(&command) {
                            self.immediate.push((id, answer));
                        }
                        continue;
                    }
                    command = d.rewrite(command);
                }
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
            let now = self.now;
            for (id, answer) in std::mem::take(&mut self.immediate) {
                self.handle(now, Input::Answer(id, answer));
            }
        }
        out.extend(self.zombie_beat());
    }

    /// A planted stale heartbeat loop's post, when one is due.
    fn zombie_beat(&mut self) -> Option<Outgoing> {
        if self.exit.is_some() {
            return None;
        }
        let body = self
            .distortion
            .as_mut()?
            .zombie_beat(self.now, self.core.registration())?;
        Some(Outgoing::Send {
            to: NodeId::Master,
            request: Request::Heartbeat {
                body,
                token: self.token.clone(),
            },
            timeout: self.timeouts.heartbeat,
            tag: Tag {
                id: STRAY,
                kind: Kind::Heartbeat,
            },
        })
    }

    /// An exchange of `tag` ended with `outcome` at `now`: the core gets its answer.
    pub fn complete(&mut self, now: Duration, tag: &Tag, outcome: Outcome) {
        if tag.id == STRAY {
            return; // a planted stale heartbeat's answer: nobody waits for it
        }
        let answer = match EtcdCall::of(tag.kind) {
            Some(_) => match self.etcd.on_outcome(tag.id, outcome) {
                Some(Progress::Done(answer)) => answer,
                Some(progress) => {
                    self.etcd_progress(progress, tag.clone());
                    return;
                }
                None => return, // no such call (the process was restarted meanwhile)
            },
            None => match answer_of(tag.kind, outcome, &self.context()) {
                Some(answer) => answer,
                None => return,
            },
        };
        let answer = match self.distortion.as_mut() {
            Some(d) => d.distort(tag.kind, answer),
            None => answer,
        };
        self.handle(now, Input::Answer(tag.id, answer));
    }

    fn context(&self) -> Context {
        Context {
            timeouts: self.timeouts,
            metrics_max_bytes: self.metrics_max_bytes,
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

    /// Start an etcd command's call (its steps go out through `pending`).
    fn etcd_start(&mut self, id: CommandId, kind: Kind, request: EtcdRequest) -> Option<Outgoing> {
        if let Some(call) = EtcdCall::of(kind) {
            let progress = self.etcd.start(id, call, &request);
            self.etcd_progress(progress, Tag { id, kind });
        }
        None
    }

    fn outgoing(&mut self, command: Command) -> Option<Outgoing> {
        let vllm = NodeId::Vllm(self.index);
        let t = self.timeouts;
        let send = |to, request, timeout, id, kind| Outgoing::Send {
            to,
            request,
            timeout,
            tag: Tag { id, kind },
        };
        Some(match command {
            Command::ProbeHealth { id } => send(vllm, Request::Health, t.health, id, Kind::Health),
            Command::GrantLease { id, ttl } => {
                return self.etcd_start(id, Kind::Grant { ttl }, EtcdRequest::Grant { ttl })
            }
            Command::PutKey {
                id,
                key,
                value,
                lease,
            } => return self.etcd_start(id, Kind::Put, EtcdRequest::Put { key, value, lease }),
            Command::Keepalive { id, lease } => {
                return self.etcd_start(id, Kind::Keepalive, EtcdRequest::Keepalive { lease })
            }
            Command::Revoke { id, lease } => {
                return self.etcd_start(id, Kind::Revoke, EtcdRequest::Revoke { lease })
            }
            Command::Scrape { id } => send(vllm, Request::Metrics, t.scrape, id, Kind::Scrape),
            Command::PostHeartbeat { id, body } => send(
                NodeId::Master,
                Request::Heartbeat {
                    body,
                    token: self.token.clone(),
                },
                t.heartbeat,
                id,
                Kind::Heartbeat,
            ),
            Command::LogServedModel => Outgoing::LogServedModel,
            Command::Note(note) => Outgoing::Note(note),
            Command::Exit { code } => Outgoing::Exit(code),
        })
    }
}

/// The id of a command that expects an answer.
fn command_id(command: &Command) -> Option<CommandId> {
    match command {
        Command::ProbeHealth { id }
        | Command::GrantLease { id, .. }
        | Command::PutKey { id, .. }
        | Command::Keepalive { id, .. }
        | Command::Scrape { id }
        | Command::PostHeartbeat { id, .. }
        | Command::Revoke { id, .. } => Some(*id),
        Command::LogServedModel | Command::Note(_) | Command::Exit { .. } => None,
    }
}

/// What [`answer_of`] needs to write the peer clients' messages.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub timeouts: Timeouts,
    pub metrics_max_bytes: usize,
}

/// The core's answer for a vLLM or master exchange of `kind` that ended with
/// `outcome`: what the driver's `exec.rs` makes of the peer client's result. `None` for
/// an etcd exchange: its call's answer comes from [`crate::etcd_client`], after every
/// step of the call.
pub fn answer_of(kind: Kind, outcome: Outcome, cx: &Context) -> Option<Answer> {
    Some(match kind {
        Kind::Health => health_answer(outcome, cx),
        Kind::Scrape => scrape_answer(outcome, cx),
        Kind::Heartbeat => heartbeat_answer(outcome, cx),
        Kind::Grant { .. } | Kind::Put | Kind::Keepalive | Kind::Revoke => return None,
    })
}

fn health_answer(outcome: Outcome, cx: &Context) -> Answer {
    match outcome {
        Outcome::Reply(Reply::Status(s)) if (200..300).contains(&s) => Answer::HealthOk,
        Outcome::Reply(Reply::Status(s)) => {
            Answer::HealthFailed(format!("/health answered HTTP {s}"))
        }
        Outcome::Reply(other) => {
            Answer::HealthFailed(format!("/health: unexpected answer {other:?}"))
        }
        Outcome::Failed(Failure::Timeout) => Answer::HealthFailed(format!(
            "/health: no answer within {:?}",
            cx.timeouts.health
        )),
        Outcome::Failed(f) => Answer::HealthFailed(f.describe().to_string()),
    }
}

/// What the sidecar's `Format::from_content_type` says of `content_type`: kept for the
/// two types a simulated vLLM answers every scrape with (it lowercases a copy of the
/// type and searches it, on every scrape), asked again for any other.
fn is_openmetrics(content_type: &str) -> bool {
    use mock_vllm::metrics::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
    let asked = |c: &str| Format::from_content_type(c) == Format::OpenMetrics;
    static KNOWN: std::sync::OnceLock<[(&str, bool); 2]> = std::sync::OnceLock::new();
    let known =
        KNOWN.get_or_init(|| [TEXT_CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE].map(|c| (c, asked(c))));
    match known.iter().find(|(c, _)| *c == content_type) {
        Some((_, openmetrics)) => *openmetrics,
        None => asked(content_type),
    }
}

fn scrape_answer(outcome: Outcome, cx: &Context) -> Answer {
    let failed = |e: ScrapeError| Answer::ScrapeFailed {
        reason: e.reason().to_string(),
        detail: e.to_string(),
    };
    match outcome {
        Outcome::Reply(Reply::Page {
            status,
            content_type,
            body,
        }) => {
            let openmetrics = is_openmetrics(&content_type);
            if !(200..300).contains(&status) {
                failed(ScrapeError::Status(status))
            } else if body.len() > cx.metrics_max_bytes {
                failed(ScrapeError::TooLarge(cx.metrics_max_bytes))
            } else {
                match body.into_text() {
                    Ok(text) => Answer::ScrapePage { text, openmetrics },
                    Err(_) => failed(ScrapeError::NotUtf8),
                }
            }
        }
        Outcome::Reply(Reply::Status(s)) => failed(ScrapeError::Status(s)),
        Outcome::Reply(other) => failed(ScrapeError::Transport(format!(
            "unexpected answer {other:?}"
        ))),
        Outcome::Failed(Failure::Timeout) => failed(ScrapeError::Timeout),
        Outcome::Failed(f) => failed(ScrapeError::Transport(f.describe().to_string())),
    }
}

fn heartbeat_answer(outcome: Outcome, cx: &Context) -> Answer {
    match outcome {
        Outcome::Reply(Reply::Status(s)) => Answer::HeartbeatStatus(s),
        Outcome::Reply(other) => {
            Answer::HeartbeatFailed(format!("heartbeat: unexpected answer {other:?}"))
        }
        Outcome::Failed(Failure::Timeout) => Answer::HeartbeatFailed(format!(
            "heartbeat: no answer within {:?}",
            cx.timeouts.heartbeat
        )),
        Outcome::Failed(f) => {
            Answer::HeartbeatFailed(format!("heartbeat POST failed: {}", f.describe()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> Context {
        Context {
            timeouts: Timeouts {
                health: Duration::from_secs(3),
                scrape: Duration::from_secs(3),
                heartbeat: Duration::from_secs(3),
            },
            metrics_max_bytes: 10,
        }
    }

    /// The kept answers are the sidecar's, for the kept types and any other.
    #[test]
    fn openmetrics_is_what_the_sidecar_says_of_the_content_type() {
        use mock_vllm::metrics::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
        for c in [
            TEXT_CONTENT_TYPE,
            OPENMETRICS_CONTENT_TYPE,
            "APPLICATION/OPENMETRICS-TEXT; version=1.0.0",
            "text/plain; charset=utf-8",
            "",
        ] {
            let asked = Format::from_content_type(c) == Format::OpenMetrics;
            assert_eq!(is_openmetrics(c), asked, "{c}");
        }
        assert!(is_openmetrics(OPENMETRICS_CONTENT_TYPE));
        assert!(!is_openmetrics(TEXT_CONTENT_TYPE));
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
        assert_eq!(answer_of(Kind::Keepalive, t, &cx()), None);
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
