//! A typed client for etcd's v3 JSON gateway (`/v3/...` on the client port): the calls
//! registration needs (lease grant / keepalive / revoke, put, range, authenticate).
//!
//! Why the gateway and not gRPC: it is what the reference uses and what every etcd ≥ 3.4
//! serves, with no protobuf toolchain. Facts checked against a real etcd 3.4:
//! - int64 fields (`ID`, `TTL`, revisions) come back as JSON strings; proto3 JSON omits
//!   zero fields: a keepalive on a dead lease answers 200 `{"result":{"header":…,"ID":…}}`
//!   with no `TTL`; an empty value has no `value`;
//! - errors answer a non-200 status with `{"error","message","code"}`, `code` the gRPC
//!   code: revoking (or putting with) an unknown lease is 404 code 5 NotFound; a bad or
//!   expired token 401 code 16; no token where one is needed 400 code 3 "user name is
//!   empty"; a wrong password 400 code 3 "authentication failed…"; a member without a
//!   leader code 14 Unavailable;
//! - the token goes in the bare `Authorization` header (no `Bearer`).
//!
//! The steps of one call (endpoint order, failover, re-authentication) are
//! [`plan::Call`]'s, without a transport; [`EtcdClient`] carries them out over reqwest,
//! the simulator over its links. [`decode`] turns a finished call into the typed result.

pub mod plan;
pub mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use url::Url;

use super::http::{describe, display_url, read_capped, BodyError};
use crate::config::Secret;
pub use plan::Exchange;
use plan::{Call, CallError, Final, Session, Step};
pub use wire::EtcdRequest;
use wire::{RangeAnswer, PATHS};

/// No gateway answer the sidecar needs is anywhere near this.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Why an etcd call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// etcd says the lease does not exist (expired, revoked, or never granted).
    LeaseNotFound,
    /// etcd refused the credentials, or the token even after one re-authentication, or
    /// the user lacks permission.
    AuthRejected(String),
    /// No endpoint gave an answer: the message names the path and the last reason.
    Unavailable(String),
    /// etcd answered, but not what the call needs (no lease ID, a value that is not
    /// base64, a request etcd called invalid).
    BadAnswer(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::LeaseNotFound => f.write_str("etcd: lease not found"),
            EtcdError::AuthRejected(m) => write!(f, "etcd auth rejected: {m}"),
            EtcdError::Unavailable(m) => write!(f, "etcd unavailable: {m}"),
            EtcdError::BadAnswer(m) => write!(f, "unexpected etcd answer: {m}"),
        }
    }
}

impl std::error::Error for EtcdError {}

/// The etcd gateway client: cheap to clone (one `Arc`), safe to call from many tasks.
#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Each endpoint joined with each of [`PATHS`], in that order, once.
    urls: Vec<Vec<Result<Url, String>>>,
    timeout: Duration,
    /// The preferred endpoint and the token, shared by every call. Never held across an
    /// await.
    session: Mutex<Session>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let session = self.session();
        let shown: Vec<_> = (0..self.inner.urls.len())
            .map(|i| session.shown(i))
            .collect();
        f.debug_struct("EtcdClient")
            .field("endpoints", &shown)
            .field("timeout", &self.inner.timeout)
            .field("username", &session.username())
            .field("preferred", &session.preferred())
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// `username` empty means no auth. Nothing is sent until the first call.
    pub fn new(
        endpoints: Vec<Url>,
        username: String,
        password: Secret,
        timeout: Duration,
        http: reqwest::Client,
    ) -> EtcdClient {
        let shown: Vec<String> = endpoints.iter().map(display_url).collect();
        let urls = endpoints
            .iter()
            .zip(&shown)
            .map(|(base, shown)| {
                PATHS
                    .iter()
                    .map(|p| {
                        base.join(p)
                            .map_err(|e| format!("{shown}: cannot join {p}: {e}"))
                    })
                    .collect()
            })
            .collect();
        EtcdClient {
            inner: Arc::new(Inner {
                http,
                urls,
                timeout,
                session: Mutex::new(Session::new(shown, username, password, timeout)),
            }),
        }
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        // A panic while holding it leaves a session still worth using.
        self.inner
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// While other endpoints remain, an attempt waits at most `bound` (the driver gives
    /// the keepalive period: a dead member then costs less than the lease has left).
    pub fn with_failover_after(self, bound: Duration) -> EtcdClient {
        self.session().set_failover_after(bound);
        self
    }

    /// The index of the endpoint the next call tries first.
    pub fn preferred_endpoint(&self) -> usize {
        self.session().preferred()
    }

    /// Grant a lease of `ttl` seconds; answers its id. etcd may raise a very short TTL
    /// to its minimum.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        decode::lease_grant(self.call(&EtcdRequest::Grant { ttl }).await)
    }

    /// Refresh a lease once; answers the TTL left. `Err(LeaseNotFound)` when etcd says
    /// the lease is gone (no `TTL`, or TTL ≤ 0, or NotFound).
    pub async fn lease_keepalive(&self, lease: i64) -> Result<i64, EtcdError> {
        decode::lease_keepalive(self.call(&EtcdRequest::Keepalive { lease }).await)
    }

    /// Revoke a lease: its keys disappear at once. A lease etcd no longer knows is
    /// already gone, which is what revoking wants: that is `Ok`.
    pub async fn lease_revoke(&self, lease: i64) -> Result<(), EtcdError> {
        decode::lease_revoke(self.call(&EtcdRequest::Revoke { lease }).await)
    }

    /// Put `key` = `value`, attached to `lease` (0: no lease). `Err(LeaseNotFound)` when
    /// the lease is gone.
    pub async fn put(&self, key: &str, value: &str, lease: i64) -> Result<(), EtcdError> {
        let request = EtcdRequest::Put {
            key: key.to_string(),
            value: value.to_string(),
            lease,
        };
        decode::put(self.call(&request).await)
    }

    /// The value at `key`, `None` when absent (`Some("")` for an empty value, which etcd
    /// sends with no `value` field). Non-UTF-8 bytes are replaced.
    pub async fn get(&self, key: &str) -> Result<Option<String>, EtcdError> {
        let request = EtcdRequest::Range {
            key: key.to_string(),
        };
        decode::range(self.call(&request).await)
    }

    /// Carry out one call's steps, each exchange bounded by its step's timeout.
    async fn call(&self, request: &EtcdRequest) -> Result<Vec<u8>, CallError> {
        let mut call = Call::new(request);
        let mut step = call.start(&mut self.session());
        loop {
            let send = match step {
                Step::Done(result) => return result,
                Step::Send(send) => send,
            };
            if let Some(reason) = &send.reauthenticating {
                tracing::info!(%reason, path = request.path(), "etcd rejected the auth token, authenticating again");
            }
            if let Some(why) = &send.after_failure {
                tracing::debug!(path = send.path, reason = %why, "etcd endpoint failed");
            }
            let exchange = self.exchange(&send, call.body()).await;
            let exchange = exchange
                .as_ref()
                .map(|(status, body)| (*status, body.as_slice()));
            step = call.feed(
                &mut self.session(),
                send.endpoint,
                exchange.map_err(Clone::clone),
            );
        }
    }

    /// One exchange with one endpoint, bounded as a whole by the attempt's timeout.
    async fn exchange(&self, send: &plan::Send, body: &str) -> Result<(u16, Vec<u8>), String> {
        let url = PATHS
            .iter()
            .position(|p| *p == send.path)
            .and_then(|i| self.inner.urls.get(send.endpoint)?.get(i))
            .ok_or_else(|| format!("no URL for {}", send.path))?
            .clone()?;
        let mut request = self
            .inner
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(token) = &send.token {
            let mut value = reqwest::header::HeaderValue::from_str(token.expose())
                .map_err(|_| "the auth token is not a valid header value".to_string())?;
            value.set_sensitive(true);
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        let exchange = async {
            let mut response = request.send().await.map_err(|e| describe(&e))?;
            let status = response.status().as_u16();
            let bytes =
                read_capped(&mut response, MAX_ANSWER_BYTES)
                    .await
                    .map_err(|e| match e {
                        BodyError::TooLarge(cap) => format!("answer larger than {cap} bytes"),
                        BodyError::Read(e) => describe(&e),
                    })?;
            Ok::<_, String>((status, bytes))
        };
        match tokio::time::timeout(send.timeout, exchange).await {
            Err(_) => Err(format!("no answer within {:?}", send.timeout)),
            Ok(result) => result,
        }
    }
}

/// A finished call's typed result, for any transport (the production client, the
/// simulator's sidecar).
pub mod decode {
    use serde::de::DeserializeOwned;

    use super::wire::{Ignored, KeepaliveAnswer, LeaseGrantAnswer, StreamError, GRANT, KEEPALIVE};
    use super::*;

    /// The answer's body as `A`; a JSON object that is not one is a bad answer.
    pub fn typed<A: DeserializeOwned>(
        path: &str,
        done: Result<Vec<u8>, CallError>,
    ) -> Result<A, CallError> {
        serde_json::from_slice(&done?)
            .map_err(|e| CallError::BadAnswer(format!("{path}: unexpected answer: {e}")))
    }

    /// [`EtcdClient::lease_grant`]'s result.
    pub fn lease_grant(done: Result<Vec<u8>, CallError>) -> Result<i64, EtcdError> {
        let answer: LeaseGrantAnswer =
            typed(GRANT, done).map_err(|e| lease_error(e, "lease grant"))?;
        if answer.id == 0 {
            let why = if answer.error.is_empty() {
                "lease grant returned no ID".to_string()
            } else {
                format!("lease grant returned no ID: {}", answer.error)
            };
            return Err(EtcdError::BadAnswer(why));
        }
        Ok(answer.id)
    }

    /// [`EtcdClient::lease_keepalive`]'s result.
    pub fn lease_keepalive(done: Result<Vec<u8>, CallError>) -> Result<i64, EtcdError> {
        let answer: KeepaliveAnswer =
            typed(KEEPALIVE, done).map_err(|e| lease_error(e, "lease keepalive"))?;
        if let Some(error) = answer.error {
            return Err(stream_error(error));
        }
        match answer.result {
            Some(result) if result.ttl > 0 => Ok(result.ttl),
            _ => Err(EtcdError::LeaseNotFound),
        }
    }

    /// [`EtcdClient::lease_revoke`]'s result.
    pub fn lease_revoke(done: Result<Vec<u8>, CallError>) -> Result<(), EtcdError> {
        match typed::<Ignored>(wire::REVOKE, done).map_err(|e| lease_error(e, "lease revoke")) {
            Ok(_) | Err(EtcdError::LeaseNotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// [`EtcdClient::get`]'s result: the first key's value, `None` when there is none.
    pub fn range(done: Result<Vec<u8>, CallError>) -> Result<Option<String>, EtcdError> {
        let answer: RangeAnswer = typed(wire::RANGE, done).map_err(|e| plain_error(e, "range"))?;
        let Some(first) = answer.kvs.first() else {
            return Ok(None);
        };
        let raw = B64
            .decode(&first.value)
            .map_err(|e| EtcdError::BadAnswer(format!("value is not base64: {e}")))?;
        Ok(Some(String::from_utf8_lossy(&raw).into_owned()))
    }

    /// [`EtcdClient::put`]'s result.
    pub fn put(done: Result<Vec<u8>, CallError>) -> Result<(), EtcdError> {
        typed::<Ignored>(wire::PUT, done)
            .map(|_| ())
            .map_err(|e| lease_error(e, "put"))
    }

    /// A keepalive's in-stream error, classified like a unary one.
    fn stream_error(error: StreamError) -> EtcdError {
        match plan::classify(error.grpc_code, error.message.clone()) {
            Some(Final::NotFound(_)) => EtcdError::LeaseNotFound,
            Some(Final::TokenRejected(m) | Final::Refused(m)) => EtcdError::AuthRejected(m),
            Some(Final::Invalid(m)) => EtcdError::BadAnswer(m),
            None => EtcdError::Unavailable(format!(
                "lease keepalive: code {}: {}",
                error.grpc_code, error.message
            )),
        }
    }
}

/// A lease call's failure: NotFound is the lease.
fn lease_error(error: CallError, what: &str) -> EtcdError {
    match error {
        CallError::Final(Final::NotFound(_)) => EtcdError::LeaseNotFound,
        other => plain_error(other, what),
    }
}

fn plain_error(error: CallError, what: &str) -> EtcdError {
    match error {
        CallError::Final(Final::TokenRejected(m) | Final::Refused(m)) => EtcdError::AuthRejected(m),
        CallError::Final(Final::NotFound(m) | Final::Invalid(m)) => {
            EtcdError::BadAnswer(format!("{what}: {m}"))
        }
        CallError::Unavailable(m) => EtcdError::Unavailable(m),
        CallError::BadAnswer(m) => EtcdError::BadAnswer(m),
    }
}
