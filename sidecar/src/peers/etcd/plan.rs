//! One etcd call as steps, without a transport: which endpoint to ask next, with which
//! body and token, and what each answer means.
//!
//! Why a plan and not just an async function: the production client carries the steps
//! out over reqwest, and the simulator's sidecar carries out the same steps over
//! simulated links, so endpoint failover and re-authentication run in virtual time with
//! the production rules, not a second model of them.
//!
//! The rules: each call starts at the endpoint that answered last ([`Session`]) and then
//! tries the others in order. A connection error, a timeout, a non-200 that is not one
//! of etcd's own final errors, or a 200 whose body is not a JSON object (by its braces)
//! moves on. Each
//! attempt waits at most the etcd timeout; while other endpoints remain to be tried, at
//! most the failover bound too (the keepalive period), so that a dead member costs a
//! keepalive less than the lease has left. With
//! credentials, a call first authenticates when it has no token, and when etcd rejects
//! the token it authenticates again once and repeats the call (etcd restarted, or the
//! simple token expired after its idle TTL).
//!
//! ```
//! use sidecar::config::Secret;
//! use sidecar::peers::etcd::plan::{Call, Session, Step};
//! use sidecar::peers::etcd::EtcdRequest;
//!
//! use std::time::Duration;
//!
//! let endpoints = vec!["http://a:2379".into(), "http://b:2379".into()];
//! let mut session = Session::new(endpoints, String::new(), Secret::default(),
//!     Duration::from_secs(3));
//! session.set_failover_after(Duration::from_secs(1));
//! let mut call = Call::new(&EtcdRequest::Keepalive { lease: 7 });
//! let Step::Send(first) = call.start(&mut session) else { panic!() };
//! assert_eq!((first.endpoint, first.path), (0, "/v3/lease/keepalive"));
//! assert_eq!(first.timeout, Duration::from_secs(1)); // another endpoint remains
//! // The first endpoint refuses: the second one is next.
//! let Step::Send(second) = call.feed(&mut session, first.endpoint, Err("refused".into()))
//!     else { panic!() };
//! assert_eq!((second.endpoint, second.timeout), (1, Duration::from_secs(3)));
//! let answer = br#"{"result":{"ID":"7","TTL":"6"}}"#;
//! let Step::Done(Ok(body)) = call.feed(&mut session, 1, Ok((200, answer))) else { panic!() };
//! assert_eq!(body, answer);
//! assert_eq!(session.preferred(), 1); // the next call starts there
//! ```

use std::sync::Arc;
use std::time::Duration;

use super::wire::{
    AuthenticateAnswer, AuthenticateRequest, ErrorBody, EtcdRequest, AUTHENTICATE,
    GRPC_FAILED_PRECONDITION, GRPC_INVALID_ARGUMENT, GRPC_NOT_FOUND, GRPC_PERMISSION_DENIED,
    GRPC_UNAUTHENTICATED,
};
use crate::config::Secret;
use crate::peers::http::excerpt;

/// One endpoint's exchange as a transport saw it: the answer's status and body, or why
/// there was none (`"no answer within 3s"`, `"connection refused"`).
pub type Exchange<'a> = Result<(u16, &'a [u8]), String>;

/// What lasts from one call to the next: the endpoints (as messages show them), the one
/// that answered last, the credentials and the current token.
#[derive(Clone)]
pub struct Session {
    shown: Vec<String>,
    preferred: usize,
    credentials: Option<(String, Secret)>,
    token: Option<Secret>,
    timeout: Duration,
    failover_after: Option<Duration>,
}

impl Session {
    /// `shown`: each endpoint as messages name it (no user info); `username` empty means
    /// no auth; `timeout`: the most one attempt waits (`--etcd-timeout`).
    pub fn new(
        shown: Vec<String>,
        username: String,
        password: Secret,
        timeout: Duration,
    ) -> Session {
        let credentials = (!username.is_empty()).then_some((username, password));
        Session {
            shown,
            preferred: 0,
            credentials,
            token: None,
            timeout,
            failover_after: None,
        }
    }

    /// While other endpoints remain to be tried, an attempt waits at most `bound` (the
    /// keepalive period); the last one waits the whole timeout.
    pub fn set_failover_after(&mut self, bound: Duration) {
        self.failover_after = Some(bound);
    }

    /// The index of the endpoint the next call tries first.
    pub fn preferred(&self) -> usize {
        self.preferred
    }

    /// Endpoint `index` as messages show it.
    pub fn shown(&self, index: usize) -> &str {
        self.shown.get(index).map_or("?", String::as_str)
    }

    pub fn username(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(user, _)| user.as_str())
    }

    fn endpoint_count(&self) -> usize {
        self.shown.len()
    }
}

/// etcd's own answer that settles the call: trying another member would hear the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    NotFound(String),
    /// A fresh token would fix it.
    TokenRejected(String),
    /// Credentials or permissions refused.
    Refused(String),
    /// The request itself was called invalid.
    Invalid(String),
}

impl Final {
    pub fn message(self) -> String {
        match self {
            Final::NotFound(m)
            | Final::TokenRejected(m)
            | Final::Refused(m)
            | Final::Invalid(m) => m,
        }
    }
}

/// Why a call failed, before the caller names it as an `EtcdError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    Final(Final),
    /// No endpoint answered: the message names the path and the last reason.
    Unavailable(String),
    BadAnswer(String),
}

/// One exchange to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub endpoint: usize,
    pub path: &'static str,
    /// How long to wait for its answer before it counts as failed.
    pub timeout: Duration,
    /// The `Authorization` header's value, if any.
    pub token: Option<Secret>,
    /// Set when this exchange authenticates again because etcd rejected the token: why.
    pub reauthenticating: Option<String>,
    /// Set when this exchange moves on from an endpoint that failed: why it failed.
    pub after_failure: Option<String>,
}

/// What a call needs next.
#[derive(Debug)]
pub enum Step {
    /// Make this exchange (its body is [`Call::body`]) and [`Call::feed`] the outcome.
    Send(Send),
    /// The call is over: the 200 answer's body (a JSON object), or why not.
    Done(Result<Vec<u8>, CallError>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Authenticating,
    Calling,
}

/// One call in progress.
pub struct Call {
    path: &'static str,
    /// Shared, so a transport that keeps the request (the simulator's) need not copy it.
    body: Arc<str>,
    auth_body: Arc<str>,
    stage: Stage,
    /// The endpoint this stage started at, and how many it has tried.
    first: usize,
    tried: usize,
    /// Why the last endpoint tried failed (`None`: none has yet).
    last_failure: Option<String>,
    reauthenticated: bool,
}

impl Call {
    pub fn new(request: &EtcdRequest) -> Call {
        Call::raw(request.path(), request.body())
    }

    /// A call of `path` with this JSON body.
    pub fn raw(path: &'static str, body: impl Into<Arc<str>>) -> Call {
        Call {
            path,
            body: body.into(),
            auth_body: Arc::from(""),
            stage: Stage::Calling,
            first: 0,
            tried: 0,
            last_failure: None,
            reauthenticated: false,
        }
    }

    /// The body of the exchange the last [`Step::Send`] asked for.
    pub fn body(&self) -> &Arc<str> {
        match self.stage {
            Stage::Authenticating => &self.auth_body,
            Stage::Calling => &self.body,
        }
    }

    /// The first step: authenticate first when credentials are set and no token is.
    pub fn start(&mut self, session: &mut Session) -> Step {
        if session.credentials.is_some() && session.token.is_none() {
            self.begin(Stage::Authenticating, session, None)
        } else {
            self.begin(Stage::Calling, session, None)
        }
    }

    /// The outcome of the exchange with `endpoint` that the last step asked for.
    pub fn feed(&mut self, session: &mut Session, endpoint: usize, exchange: Exchange<'_>) -> Step {
        let path = self.current_path();
        let shown = session.shown(endpoint);
        let judged = match exchange {
            Ok((status, body)) => judge(shown, path, status, body),
            Err(why) => Err(format!("{shown}: {why}")),
        };
        match judged {
            Ok(settled) => {
                session.preferred = endpoint;
                self.settled(session, settled)
            }
            Err(why) => {
                self.last_failure = Some(why);
                self.next(session, None)
            }
        }
    }

    fn current_path(&self) -> &'static str {
        match self.stage {
            Stage::Authenticating => AUTHENTICATE,
            Stage::Calling => self.path,
        }
    }

    fn begin(&mut self, stage: Stage, session: &Session, reauth: Option<String>) -> Step {
        self.stage = stage;
        self.first = session
            .preferred
            .min(session.endpoint_count().saturating_sub(1));
        self.tried = 0;
        if stage == Stage::Authenticating {
            if let Some((name, password)) = &session.credentials {
                let request = AuthenticateRequest {
                    name,
                    password: password.expose(),
                };
                self.auth_body = serde_json::to_string(&request).unwrap_or_default().into();
            }
        }
        self.next(session, reauth)
    }

    /// The next endpoint of this stage, or the end when each has been tried.
    fn next(&mut self, session: &Session, reauthenticating: Option<String>) -> Step {
        let count = session.endpoint_count();
        if self.tried >= count {
            let why = format!(
                "all endpoints failed for {}, last: {}",
                self.current_path(),
                self.last_failure
                    .as_deref()
                    .unwrap_or("no endpoint configured")
            );
            return Step::Done(Err(CallError::Unavailable(why)));
        }
        let endpoint = match self.tried {
            0 => self.first,
            k => (0..count)
                .filter(|&i| i != self.first)
                .nth(k - 1)
                .unwrap_or(0),
        };
        let after_failure = self.last_failure.take();
        self.tried += 1;
        let timeout = match session.failover_after {
            Some(bound) if self.tried < count => session.timeout.min(bound),
            _ => session.timeout,
        };
        let token = match self.stage {
            Stage::Authenticating => None,
            Stage::Calling => session.token.clone(),
        };
        Step::Send(Send {
            endpoint,
            path: self.current_path(),
            timeout,
            token,
            reauthenticating,
            after_failure,
        })
    }

    /// An endpoint settled this stage.
    fn settled(&mut self, session: &mut Session, result: Result<Vec<u8>, CallError>) -> Step {
        match (self.stage, result) {
            (Stage::Authenticating, Ok(body)) => {
                match serde_json::from_slice::<AuthenticateAnswer>(&body) {
                    Ok(answer) if !answer.token.is_empty() => {
                        session.token = Some(Secret::new(answer.token));
                        self.begin(Stage::Calling, session, None)
                    }
                    Ok(_) => refused("authenticate returned no token".into()),
                    Err(e) => Step::Done(Err(CallError::BadAnswer(format!(
                        "{AUTHENTICATE}: unexpected answer: {e}"
                    )))),
                }
            }
            // Whatever etcd itself says against authenticating is a refusal.
            (Stage::Authenticating, Err(CallError::Final(f))) => refused(f.message()),
            (Stage::Calling, Err(CallError::Final(Final::TokenRejected(reason))))
                if session.credentials.is_some() && !self.reauthenticated =>
            {
                self.reauthenticated = true;
                session.token = None;
                self.begin(Stage::Authenticating, session, Some(reason))
            }
            (_, result) => Step::Done(result),
        }
    }
}

fn refused(message: String) -> Step {
    Step::Done(Err(CallError::Final(Final::Refused(message))))
}

/// What an endpoint's answer means: settled (a JSON object on 200, or etcd's final
/// error), or why the next endpoint should be tried.
fn judge(
    shown: &str,
    path: &str,
    status: u16,
    bytes: &[u8],
) -> Result<Result<Vec<u8>, CallError>, String> {
    if status == 200 {
        // Only an object (serde would also read a struct from a JSON array), told by its
        // braces: decoding it is the caller's (`decode::typed`), and an object that does
        // not decode is a bad answer there, not a reason to ask another member.
        let trimmed = bytes.trim_ascii();
        if trimmed.starts_with(b"{") && trimmed.ends_with(b"}") {
            return Ok(Ok(bytes.to_vec()));
        }
        return Err(format!(
            "{shown}: {path} answered 200 without a JSON object: {}",
            excerpt(bytes, 120)
        ));
    }
    let why = format!("{shown}: {path} -> HTTP {status}");
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(error) if error.code != 0 => match classify(error.code, error.text()) {
            Some(f) => Ok(Err(CallError::Final(f))),
            None => Err(format!("{why}: {}", error.text())),
        },
        _ => Err(format!("{why}: {}", excerpt(bytes, 120))),
    }
}

/// The etcd errors that settle a call; `None` for those another member may not share
/// (no leader, timeouts, overload).
pub fn classify(code: i64, message: String) -> Option<Final> {
    match code {
        GRPC_NOT_FOUND => Some(Final::NotFound(message)),
        GRPC_UNAUTHENTICATED => Some(Final::TokenRejected(message)),
        // InvalidArgument covers both "no token" and "bad request": etcd gives no other
        // way to tell them apart than its fixed error strings.
        GRPC_INVALID_ARGUMENT if is_token_message(&message) => Some(Final::TokenRejected(message)),
        GRPC_INVALID_ARGUMENT if message.contains("authentication failed") => {
            Some(Final::Refused(message))
        }
        GRPC_INVALID_ARGUMENT => Some(Final::Invalid(message)),
        GRPC_PERMISSION_DENIED | GRPC_FAILED_PRECONDITION => Some(Final::Refused(message)),
        _ => None,
    }
}

/// etcd's messages (ErrUserEmpty, ErrInvalidAuthToken, ErrAuthOldRevision) that a new
/// token fixes.
fn is_token_message(message: &str) -> bool {
    message.contains("user name is empty")
        || message.contains("invalid auth token")
        || message.contains("revision of auth store is old")
}
