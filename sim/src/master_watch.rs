//! How the simulated master follows etcd: mock-master's own watch plan
//! ([`WatchPlan`]: list, then watch from the core's cursor; back off and re-open when a
//! stream dies; re-list on lost data or compaction), carried out as calls over the
//! master → etcd link, with mock-master's own request bodies and answer parsers.
//!
//! Why a part of its own: the master node serves heartbeats and probes; this is the
//! other half of mock-master's shell (its watcher task), the steps the async task takes
//! turned into calls, outcomes and timers.

use std::time::Duration;

use mock_kit::FakeEvent;
use mock_master::core::MasterCore;
use mock_master::etcd::{
    authenticate_request, parse_range, parse_token, range_prefix_request, watch_create_request,
};
use mock_master::follow::Verdict;
use mock_master::watch_message::parse_watch_line;
use mock_master::watch_plan::{Position, WatchPlan, RESTART, WATCH_IDLE};
use mock_master::MasterEvent;
use serde_json::{json, Value};

use crate::node::{Call, NodeId, Outcome, Reply, Request};

/// Tokens of the follower's calls (the master's probes use small numbers; its
/// election calls and LOADMETRICS writes have ranges of their own below this one, see
/// [`crate::master_node`]).
pub const TOKEN_BASE: u64 = 1 << 62;

/// Where the follower stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// Nothing under way; the next step at `at`.
    Idle {
        at: Duration,
    },
    /// Authenticating before the plan's next step (etcd auth on, no token).
    Authenticating {
        token: u64,
    },
    Listing {
        token: u64,
        apply: bool,
    },
    Opening {
        token: u64,
    },
    /// A stream is open; its last line came at `last`.
    Watching {
        last: Duration,
    },
}

/// The master's watcher, in virtual time.
#[derive(Debug)]
pub struct Follower {
    plan: WatchPlan,
    stage: Stage,
    next_token: u64,
    prefix: Vec<u8>,
    timeout: Duration,
    /// The master's etcd user and password, if etcd auth is on.
    credentials: Option<(String, String)>,
    /// The simple token it holds, and whether the current listing already renewed it.
    etcd_token: Option<String>,
    renewed: bool,
}

/// What the follower wants done: calls to make and notes for the log.
#[derive(Debug, Default)]
pub struct Effects {
    pub calls: Vec<Call>,
    pub notes: Vec<Value>,
}

impl Follower {
    /// A watcher for `<namespace>XLLM:`, its etcd calls bounded by `timeout`, starting
    /// (with a listing) at `now`; with `credentials`, it authenticates as mock-master's
    /// client does (before its first call, again when etcd refuses the token).
    pub fn new(
        namespace: &str,
        timeout: Duration,
        credentials: Option<(String, String)>,
        now: Duration,
    ) -> Follower {
        Follower {
            plan: WatchPlan::new(),
            stage: Stage::Idle { at: now },
            next_token: TOKEN_BASE,
            prefix: format!("{namespace}XLLM:").into_bytes(),
            timeout,
            credentials,
            etcd_token: None,
            renewed: false,
        }
    }

    /// The etcd simple token it holds (etcd auth on and authenticated), which the
    /// master's other etcd calls present too, as mock-master's one client does.
    pub fn etcd_token(&self) -> Option<&str> {
        self.etcd_token.as_deref()
    }

    /// When the follower next needs [`Follower::on_timer`].
    pub fn next_wakeup(&self) -> Option<Duration> {
        match self.stage {
            Stage::Idle { at } => Some(at),
            Stage::Watching { last } => Some(last + WATCH_IDLE),
            _ => None,
        }
    }

    fn call(&mut self, fx: &mut Effects, request: Request) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        fx.calls.push(Call {
            to: NodeId::Etcd,
            request,
            timeout: self.timeout,
            token,
        });
        token
    }

    /// Time passed: take the next step if it is due, or give up on a silent stream.
    pub fn on_timer(&mut self, now: Duration, core: &MasterCore, fx: &mut Effects) {
        match self.stage {
            Stage::Idle { at } if at <= now => {
                self.renewed = false;
                self.step(core, fx)
            }
            Stage::Watching { last } if now >= last + WATCH_IDLE => {
                self.call(fx, Request::WatchClose);
                self.ended(now, "no message within the idle timeout".into());
            }
            _ => {}
        }
    }

    /// List or open a watch, as the plan says (authenticating first if it must).
    fn step(&mut self, core: &MasterCore, fx: &mut Effects) {
        if let (Some((user, password)), None) = (&self.credentials, &self.etcd_token) {
            let body = authenticate_request(user, password).to_string().into();
            let path = "/v3/auth/authenticate";
            let token = None;
            let call = self.call(fx, Request::Etcd { path, body, token });
            self.stage = Stage::Authenticating { token: call };
            return;
        }
        let token = self.etcd_token.clone();
        match self.plan.position() {
            Position::List { apply } => {
                let body = range_prefix_request(&self.prefix).to_string().into();
                let path = "/v3/kv/range";
                let call = self.call(fx, Request::Etcd { path, body, token });
                self.stage = Stage::Listing { token: call, apply };
            }
            Position::Watch => {
                let from = core.watch_from();
                if let Some(reason) = self.plan.opening() {
                    fx.notes.push(event_note(&MasterEvent::WatchReconnect {
                        from_revision: from,
                        reason: &reason,
                    }));
                }
                let body = watch_create_request(&self.prefix, from).to_string();
                let call = self.call(fx, Request::WatchOpen { body, token });
                self.stage = Stage::Opening { token: call };
            }
        }
    }

    /// One of the follower's calls ended.
    pub fn on_outcome(
        &mut self,
        now: Duration,
        token: u64,
        outcome: Outcome,
        core: &mut MasterCore,
        fx: &mut Effects,
    ) {
        match self.stage {
            Stage::Authenticating { token: t } if t == token => match authenticated(&outcome) {
                Ok(etcd_token) => {
                    self.etcd_token = Some(etcd_token);
                    self.step(core, fx);
                }
                Err(e) => {
                    fx.notes.push(event_note(&MasterEvent::EtcdError {
                        op: "authenticate",
                        error: &e,
                    }));
                    let wait = match self.plan.position() {
                        Position::List { .. } => self.plan.listed(false),
                        Position::Watch => Some(self.plan.open_failed(e)),
                    };
                    self.stage = Stage::Idle {
                        at: now + wait.unwrap_or(Duration::ZERO),
                    };
                }
            },
            // A refused token is renewed once and the listing repeated.
            Stage::Listing { token: t, .. }
                if t == token
                    && self.credentials.is_some()
                    && !self.renewed
                    && matches!(outcome, Outcome::Reply(Reply::Gateway { status: 401, .. })) =>
            {
                fx.notes
                    .push(event_note(&MasterEvent::EtcdAuthRefused { op: "range" }));
                self.renewed = true;
                self.etcd_token = None;
                self.step(core, fx);
            }
            Stage::Listing { token: t, apply } if t == token => {
                let listed = listing(&outcome).map(|r| {
                    if apply {
                        let found = core.on_listing(now, r.revision, &r.kvs);
                        fx.notes.push(event_note(&MasterEvent::Relist {
                            revision: r.revision,
                            instances: found,
                        }));
                    } else {
                        core.listed_at(r.revision);
                    }
                });
                if let Err(e) = &listed {
                    fx.notes.push(event_note(&MasterEvent::EtcdError {
                        op: "range",
                        error: e,
                    }));
                }
                let wait = self.plan.listed(listed.is_ok()).unwrap_or(Duration::ZERO);
                self.stage = Stage::Idle { at: now + wait };
            }
            Stage::Opening { token: t } if t == token => match outcome {
                Outcome::Reply(Reply::Status(200)) => self.stage = Stage::Watching { last: now },
                other => {
                    // As mock-master's client: a 401 drops the token, the next open
                    // authenticates again.
                    if let Outcome::Reply(Reply::Gateway { status: 401, .. }) = other {
                        self.etcd_token = None;
                    }
                    let wait = self.plan.open_failed(format!("{other:?}"));
                    self.stage = Stage::Idle { at: now + wait };
                }
            },
            _ => {} // a close, or a call from before a restart
        }
    }

    /// A line of the watch stream: through mock-master's parser into the core; a
    /// verdict that ends the stream closes it.
    pub fn on_line(&mut self, now: Duration, line: &str, core: &mut MasterCore, fx: &mut Effects) {
        // A stream's lines can come before the open's own answer is handled (both are
        // due at the same instant): the first line opens it, as an HTTP body follows
        // its head. Lines of a stream the master already dropped are ignored.
        if !matches!(self.stage, Stage::Watching { .. } | Stage::Opening { .. }) {
            return;
        }
        self.stage = Stage::Watching { last: now };
        let Some(verdict) = read_watch_line(now, line, core, &mut fx.notes) else {
            return;
        };
        if let Verdict::AuthRefused { .. } = verdict {
            self.etcd_token = None; // the next open authenticates again
        }
        if let Some(reason) = self.plan.on_message(&verdict) {
            self.call(fx, Request::WatchClose);
            self.ended(now, reason);
        }
    }

    /// The stream's connection died (reset, closed, etcd ended it).
    pub fn on_stream_end(&mut self, now: Duration, reason: &str) {
        if let Stage::Watching { .. } = self.stage {
            self.ended(now, reason.to_string());
        }
    }

    /// The master restarts: whatever was under way is dropped; list again (applying
    /// the listing only if `relist`).
    pub fn restart(&mut self, now: Duration, relist: bool, fx: &mut Effects) {
        if let Stage::Watching { .. } = self.stage {
            self.call(fx, Request::WatchClose);
        }
        self.plan.restart(relist);
        self.ended(now, RESTART.to_string());
    }

    fn ended(&mut self, now: Duration, reason: String) {
        let wait = self.plan.stream_ended(reason).unwrap_or(Duration::ZERO);
        self.stage = Stage::Idle { at: now + wait };
    }
}

/// One line of a watch stream, read by mock-master's own parser into `core`: its
/// verdict (`None`: not a watch message), noted unless it is events.
pub(crate) fn read_watch_line(
    now: Duration,
    line: &str,
    core: &mut MasterCore,
    notes: &mut Vec<Value>,
) -> Option<Verdict> {
    match parse_watch_line(line) {
        Ok(resp) => {
            let verdict = core.on_watch_response(now, resp);
            if !matches!(verdict, Verdict::Events(_)) {
                notes.push(json!({ "watch": format!("{verdict:?}") }));
            }
            Some(verdict)
        }
        Err(e) => {
            notes.push(json!({ "watch_error": e }));
            None
        }
    }
}

/// An authenticate call's outcome as its token, or why there is none.
fn authenticated(outcome: &Outcome) -> Result<String, String> {
    parse_token(&answer_json(outcome)?).ok_or_else(|| "authenticate answered no token".to_string())
}

/// A range call's outcome as a listing, or why it is none.
fn listing(outcome: &Outcome) -> Result<mock_master::etcd::RangeResult, String> {
    parse_range(&answer_json(outcome)?).map_err(|e| e.to_string())
}

/// A call's 200 answer as JSON, or why there is none.
fn answer_json(outcome: &Outcome) -> Result<Value, String> {
    match outcome {
        Outcome::Reply(Reply::Gateway { status: 200, body }) => {
            serde_json::from_slice(body).map_err(|e| e.to_string())
        }
        Outcome::Reply(Reply::Gateway { status, body }) => {
            Err(format!("HTTP {status}: {}", String::from_utf8_lossy(body)))
        }
        other => Err(format!("{other:?}")),
    }
}

/// A master event as a node's note, `{kind: detail}`: the kind and detail the real
/// shell emits.
pub(crate) fn event_note(event: &MasterEvent<'_>) -> serde_json::Value {
    let kind = event.kind();
    json!({ kind: event.detail() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(status: u16, body: &str) -> Outcome {
        Outcome::Reply(Reply::Gateway {
            status,
            body: body.as_bytes().to_vec(),
        })
    }

    /// The one call the follower made: its path, the token it sent, its call token.
    fn sent(fx: &mut Effects) -> (String, Option<String>, u64) {
        let call = fx.calls.pop().expect("a call");
        assert!(fx.calls.is_empty(), "{:?}", fx.calls);
        match call.request {
            Request::Etcd { path, token, .. } => (path.to_string(), token, call.token),
            Request::WatchOpen { token, .. } => ("/v3/watch".into(), token, call.token),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_credentials_it_authenticates_first_and_renews_a_refused_token_once() {
        let cfg = mock_master::Config::default();
        let mut core = MasterCore::new(&cfg, Duration::ZERO);
        let credentials = Some(("root".to_string(), "pw".to_string()));
        let mut f = Follower::new("/", Duration::from_secs(2), credentials, Duration::ZERO);
        let mut fx = Effects::default();
        let now = Duration::ZERO;
        f.on_timer(now, &core, &mut fx);
        let (path, token, call) = sent(&mut fx);
        assert_eq!((path.as_str(), token), ("/v3/auth/authenticate", None));
        f.on_outcome(
            now,
            call,
            gateway(200, r#"{"token":"t1"}"#),
            &mut core,
            &mut fx,
        );
        let (path, token, call) = sent(&mut fx);
        assert_eq!(
            (path.as_str(), token.as_deref()),
            ("/v3/kv/range", Some("t1"))
        );
        // The token expired: 401, a new token, the listing again.
        let refused = r#"{"error":"etcdserver: invalid auth token","code":16}"#;
        f.on_outcome(now, call, gateway(401, refused), &mut core, &mut fx);
        let (path, _, call) = sent(&mut fx);
        assert_eq!(path, "/v3/auth/authenticate");
        fx.notes.clear();
        f.on_outcome(
            now,
            call,
            gateway(200, r#"{"token":"t2"}"#),
            &mut core,
            &mut fx,
        );
        let (path, token, call) = sent(&mut fx);
        assert_eq!(
            (path.as_str(), token.as_deref()),
            ("/v3/kv/range", Some("t2"))
        );
        // Refused again within the same listing: not renewed twice; it backs off.
        f.on_outcome(now, call, gateway(401, refused), &mut core, &mut fx);
        assert!(fx.calls.is_empty(), "{:?}", fx.calls);
        assert!(f.next_wakeup().is_some_and(|at| at > now));
    }
}
