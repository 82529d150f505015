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
//! Endpoints: each call starts at the endpoint that answered last and then tries the
//! others in order. A connection error, a timeout, a non-200 that is not one of etcd's
//! own final errors, or a 200 whose body is not a JSON object moves on. When etcd rejects
//! the token, the client authenticates again once and repeats the call (etcd restarted,
//! or the simple token expired after its idle TTL).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use url::Url;

use super::http::{describe, display_url, excerpt, read_capped, BodyError};
use crate::config::Secret;

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
    endpoints: Vec<Endpoint>,
    timeout: Duration,
    credentials: Option<Credentials>,
    /// The current auth token; replaced on re-authentication. Never held across an await.
    token: Mutex<Option<Secret>>,
    /// The endpoint tried first: the one that answered last.
    preferred: AtomicUsize,
}

/// One endpoint, its call URLs joined once.
struct Endpoint {
    /// For messages: the URL without user name and password.
    shown: String,
    /// The endpoint joined with each of [`PATHS`], in that order.
    urls: Vec<Result<Url, String>>,
}

impl Endpoint {
    fn url(&self, path: &str) -> Result<&Url, String> {
        match PATHS.iter().position(|p| *p == path) {
            Some(i) => self.urls[i].as_ref().map_err(Clone::clone),
            None => Err(format!("{}: no URL for {path}", self.shown)),
        }
    }
}

struct Credentials {
    username: String,
    password: Secret,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        f.debug_struct("EtcdClient")
            .field(
                "endpoints",
                &inner.endpoints.iter().map(|e| &e.shown).collect::<Vec<_>>(),
            )
            .field("timeout", &inner.timeout)
            .field("username", &inner.credentials.as_ref().map(|c| &c.username))
            .field("preferred", &self.preferred_endpoint())
            .finish_non_exhaustive()
    }
}

// ---- the gateway's messages, as its JSON writes them ----

#[derive(Serialize)]
struct LeaseGrantRequest {
    #[serde(rename = "TTL", serialize_with = "int64_out")]
    ttl: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LeaseGrantAnswer {
    #[serde(rename = "ID", deserialize_with = "int64_in")]
    id: i64,
    error: String,
}

/// The request of keepalive and of revoke.
#[derive(Serialize)]
struct LeaseIdRequest {
    #[serde(rename = "ID", serialize_with = "int64_out")]
    id: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct KeepaliveAnswer {
    result: Option<KeepaliveResult>,
    /// A streaming call's error comes inside a 200 answer.
    error: Option<StreamError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct KeepaliveResult {
    #[serde(rename = "TTL", deserialize_with = "int64_in")]
    ttl: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamError {
    grpc_code: i64,
    message: String,
}

#[derive(Serialize)]
struct PutRequest {
    key: String,
    value: String,
    #[serde(serialize_with = "int64_out", skip_serializing_if = "is_zero")]
    lease: i64,
}

#[derive(Serialize)]
struct RangeRequest {
    key: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RangeAnswer {
    kvs: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct KeyValue {
    value: String,
}

#[derive(Serialize)]
struct AuthenticateRequest<'a> {
    name: &'a str,
    password: &'a str,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AuthenticateAnswer {
    token: String,
}

/// Any answer whose content the call does not need (put, revoke).
#[derive(Deserialize, Default)]
struct Ignored {}

/// etcd's error body of a unary call.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    #[serde(deserialize_with = "int64_in")]
    code: i64,
    message: String,
    error: String,
}

const GRPC_INVALID_ARGUMENT: i64 = 3;
const GRPC_NOT_FOUND: i64 = 5;
const GRPC_PERMISSION_DENIED: i64 = 7;
const GRPC_FAILED_PRECONDITION: i64 = 9;
const GRPC_UNAUTHENTICATED: i64 = 16;

/// etcd's own answer that settles the call: trying another member would hear the same.
#[derive(Debug)]
enum Final {
    NotFound(String),
    /// A fresh token would fix it.
    TokenRejected(String),
    /// Credentials or permissions refused.
    Refused(String),
    /// The request itself was called invalid.
    Invalid(String),
}

/// One call's failure, before the auth retry decides the [`EtcdError`].
enum CallError {
    Final(Final),
    Unavailable(String),
    BadAnswer(String),
}

/// What one endpoint's answer means.
enum Attempt<A> {
    /// The call's answer, or a JSON object that is not it.
    Answer(Result<A, CallError>),
    Final(Final),
    Next(String),
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
        let credentials = (!username.is_empty()).then_some(Credentials { username, password });
        let endpoints = endpoints
            .iter()
            .map(|base| {
                let shown = display_url(base);
                let urls = PATHS
                    .iter()
                    .map(|p| {
                        base.join(p)
                            .map_err(|e| format!("{shown}: cannot join {p}: {e}"))
                    })
                    .collect();
                Endpoint { shown, urls }
            })
            .collect();
        EtcdClient {
            inner: Arc::new(Inner {
                http,
                endpoints,
                timeout,
                credentials,
                token: Mutex::new(None),
                preferred: AtomicUsize::new(0),
            }),
        }
    }

    /// The index of the endpoint the next call tries first.
    pub fn preferred_endpoint(&self) -> usize {
        self.inner.preferred.load(Ordering::Relaxed)
    }

    /// Grant a lease of `ttl` seconds; answers its id. etcd may raise a very short TTL
    /// to its minimum.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        grant_result(self.call(GRANT, &LeaseGrantRequest { ttl }).await)
    }

    /// Refresh a lease once; answers the TTL left. `Err(LeaseNotFound)` when etcd says
    /// the lease is gone (no `TTL`, or TTL ≤ 0, or NotFound).
    pub async fn lease_keepalive(&self, lease: i64) -> Result<i64, EtcdError> {
        keepalive_result(self.call(KEEPALIVE, &LeaseIdRequest { id: lease }).await)
    }

    /// Revoke a lease: its keys disappear at once. A lease etcd no longer knows is
    /// already gone, which is what revoking wants: that is `Ok`.
    pub async fn lease_revoke(&self, lease: i64) -> Result<(), EtcdError> {
        revoke_result(self.call(REVOKE, &LeaseIdRequest { id: lease }).await)
    }

    /// Put `key` = `value`, attached to `lease` (0: no lease). `Err(LeaseNotFound)` when
    /// the lease is gone.
    pub async fn put(&self, key: &str, value: &str, lease: i64) -> Result<(), EtcdError> {
        let request = PutRequest {
            key: B64.encode(key),
            value: B64.encode(value),
            lease,
        };
        put_result(self.call(PUT, &request).await)
    }

    /// The value at `key`, `None` when absent (`Some("")` for an empty value, which etcd
    /// sends with no `value` field). Non-UTF-8 bytes are replaced.
    pub async fn get(&self, key: &str) -> Result<Option<String>, EtcdError> {
        let request = RangeRequest {
            key: B64.encode(key),
        };
        let answer: RangeAnswer = self
            .call(RANGE, &request)
            .await
            .map_err(|e| plain_error(e, "range"))?;
        let Some(first) = answer.kvs.first() else {
            return Ok(None);
        };
        let raw = B64
            .decode(&first.value)
            .map_err(|e| EtcdError::BadAnswer(format!("value is not base64: {e}")))?;
        Ok(Some(String::from_utf8_lossy(&raw).into_owned()))
    }

    /// Authenticate now (normally done lazily by the first call that needs it). Without
    /// a user name this does nothing.
    pub async fn authenticate(&self) -> Result<(), EtcdError> {
        let Some(credentials) = &self.inner.credentials else {
            return Ok(());
        };
        let request = AuthenticateRequest {
            name: &credentials.username,
            password: credentials.password.expose(),
        };
        let answer: AuthenticateAnswer =
            match self.call_endpoints(AUTHENTICATE, &request, None).await {
                Ok(answer) => answer,
                // Whatever etcd itself says against authenticating is a refusal.
                Err(CallError::Final(f)) => return Err(EtcdError::AuthRejected(f.message())),
                Err(e) => return Err(plain_error(e, "authenticate")),
            };
        if answer.token.is_empty() {
            return Err(EtcdError::AuthRejected(
                "authenticate returned no token".into(),
            ));
        }
        if let Ok(mut slot) = self.inner.token.lock() {
            *slot = Some(Secret::new(answer.token));
        }
        Ok(())
    }

    fn current_token(&self) -> Option<Secret> {
        self.inner.token.lock().ok().and_then(|t| t.clone())
    }

    /// One call: authenticate first if needed, and once more if etcd rejects the token.
    async fn call<Q: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        request: &Q,
    ) -> Result<A, CallError> {
        if self.inner.credentials.is_none() {
            return self.call_endpoints(path, request, None).await;
        }
        if self.current_token().is_none() {
            self.authenticate().await.map_err(auth_failed)?;
        }
        let token = self.current_token();
        match self.call_endpoints(path, request, token.as_ref()).await {
            Err(CallError::Final(Final::TokenRejected(reason))) => {
                tracing::info!(%reason, path, "etcd rejected the auth token, authenticating again");
                self.authenticate().await.map_err(auth_failed)?;
                let token = self.current_token();
                self.call_endpoints(path, request, token.as_ref()).await
            }
            other => other,
        }
    }

    /// The call on each endpoint in turn, the preferred one first.
    async fn call_endpoints<Q: Serialize, A: DeserializeOwned>(
        &self,
        path: &str,
        request: &Q,
        token: Option<&Secret>,
    ) -> Result<A, CallError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| CallError::BadAnswer(format!("encoding the {path} request: {e}")))?;
        let mut last = String::from("no endpoint configured");
        for index in self.endpoint_order() {
            let Some(endpoint) = self.inner.endpoints.get(index) else {
                continue;
            };
            let attempt = match endpoint.url(path) {
                Ok(url) => self.attempt(&endpoint.shown, url, path, &body, token).await,
                Err(why) => Attempt::Next(why),
            };
            match settle(attempt) {
                Ok(settled) => {
                    self.inner.preferred.store(index, Ordering::Relaxed);
                    return settled;
                }
                Err(why) => {
                    tracing::debug!(endpoint = %endpoint.shown, path, reason = %why, "etcd endpoint failed");
                    last = why;
                }
            }
        }
        Err(all_failed(path, &last))
    }

    /// Endpoint indices: the preferred one, then the others in order.
    fn endpoint_order(&self) -> impl Iterator<Item = usize> {
        let count = self.inner.endpoints.len();
        let first = self.preferred_endpoint().min(count.saturating_sub(1));
        std::iter::once(first)
            .chain((0..count).filter(move |&i| i != first))
            .take(count)
    }

    /// One exchange with one endpoint, bounded by the etcd timeout as a whole.
    async fn attempt<A: DeserializeOwned>(
        &self,
        shown: &str,
        url: &Url,
        path: &str,
        body: &[u8],
        token: Option<&Secret>,
    ) -> Attempt<A> {
        let mut request = self
            .inner
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(token) = token {
            match reqwest::header::HeaderValue::from_str(token.expose()) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    request = request.header(reqwest::header::AUTHORIZATION, value);
                }
                Err(_) => {
                    return Attempt::Next(format!(
                        "{shown}: the auth token is not a valid header value"
                    ))
                }
            }
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
        match tokio::time::timeout(self.inner.timeout, exchange).await {
            Err(_) => Attempt::Next(format!(
                "{shown}: no answer within {:?}",
                self.inner.timeout
            )),
            Ok(Err(why)) => Attempt::Next(format!("{shown}: {why}")),
            Ok(Ok((status, bytes))) => answer_of(shown, path, status, &bytes),
        }
    }
}

const GRANT: &str = "/v3/lease/grant";
const KEEPALIVE: &str = "/v3/lease/keepalive";
const REVOKE: &str = "/v3/lease/revoke";
const PUT: &str = "/v3/kv/put";
const RANGE: &str = "/v3/kv/range";
const AUTHENTICATE: &str = "/v3/auth/authenticate";
/// Every path a call uses: each endpoint's URLs are joined once, at start-up.
const PATHS: [&str; 6] = [GRANT, KEEPALIVE, REVOKE, PUT, RANGE, AUTHENTICATE];

/// An endpoint's attempt that settles the call (an answer, or etcd's final error), or
/// why the next endpoint should be tried.
fn settle<A>(attempt: Attempt<A>) -> Result<Result<A, CallError>, String> {
    match attempt {
        Attempt::Answer(answer) => Ok(answer),
        Attempt::Final(f) => Ok(Err(CallError::Final(f))),
        Attempt::Next(why) => Err(why),
    }
}

fn all_failed(path: &str, last: &str) -> CallError {
    CallError::Unavailable(format!("all endpoints failed for {path}, last: {last}"))
}

fn grant_result(answer: Result<LeaseGrantAnswer, CallError>) -> Result<i64, EtcdError> {
    let answer = answer.map_err(|e| lease_error(e, "lease grant"))?;
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

fn keepalive_result(answer: Result<KeepaliveAnswer, CallError>) -> Result<i64, EtcdError> {
    let answer = answer.map_err(|e| lease_error(e, "lease keepalive"))?;
    if let Some(error) = answer.error {
        return Err(stream_error(error));
    }
    match answer.result {
        Some(result) if result.ttl > 0 => Ok(result.ttl),
        _ => Err(EtcdError::LeaseNotFound),
    }
}

fn revoke_result(answer: Result<Ignored, CallError>) -> Result<(), EtcdError> {
    match answer.map_err(|e| lease_error(e, "lease revoke")) {
        Ok(_) | Err(EtcdError::LeaseNotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

fn put_result(answer: Result<Ignored, CallError>) -> Result<(), EtcdError> {
    answer.map(|_| ()).map_err(|e| lease_error(e, "put"))
}

/// One endpoint's exchange as a transport saw it: the answer's status and body, or why
/// there was none (`"no answer within 3s"`, `"connection refused"`).
pub type Exchange<'a> = Result<(u16, &'a [u8]), String>;

/// The decoding half of the lease calls, without a transport: what the client answers
/// when the only endpoint it tried, shown as `shown`, gave `exchange`. The same answer
/// classification and typed decoding as [`EtcdClient`], for a transport that is not
/// HTTP (the simulator's): its sidecar then reads etcd exactly as this client does.
pub mod decode {
    use super::*;

    fn one<A: DeserializeOwned>(
        path: &str,
        shown: &str,
        exchange: Exchange<'_>,
    ) -> Result<A, CallError> {
        let attempt = match exchange {
            Ok((status, body)) => answer_of(shown, path, status, body),
            Err(why) => Attempt::Next(format!("{shown}: {why}")),
        };
        settle(attempt).unwrap_or_else(|why| Err(all_failed(path, &why)))
    }

    /// [`EtcdClient::lease_grant`]'s result.
    pub fn lease_grant(shown: &str, exchange: Exchange<'_>) -> Result<i64, EtcdError> {
        grant_result(one(GRANT, shown, exchange))
    }

    /// [`EtcdClient::lease_keepalive`]'s result.
    pub fn lease_keepalive(shown: &str, exchange: Exchange<'_>) -> Result<i64, EtcdError> {
        keepalive_result(one(KEEPALIVE, shown, exchange))
    }

    /// [`EtcdClient::lease_revoke`]'s result.
    pub fn lease_revoke(shown: &str, exchange: Exchange<'_>) -> Result<(), EtcdError> {
        revoke_result(one(REVOKE, shown, exchange))
    }

    /// [`EtcdClient::put`]'s result.
    pub fn put(shown: &str, exchange: Exchange<'_>) -> Result<(), EtcdError> {
        put_result(one(PUT, shown, exchange))
    }
}

/// What an endpoint's answer means for the call.
fn answer_of<A: DeserializeOwned>(
    shown: &str,
    path: &str,
    status: u16,
    bytes: &[u8],
) -> Attempt<A> {
    if status == 200 {
        // Only an object: serde would also read a struct from a JSON array.
        let object = bytes.trim_ascii_start().starts_with(b"{");
        return match serde_json::from_slice::<A>(bytes) {
            Ok(answer) if object => Attempt::Answer(Ok(answer)),
            Err(e) if object && serde_json::from_slice::<Map<String, Value>>(bytes).is_ok() => {
                let why = format!("{path}: unexpected answer: {e}");
                Attempt::Answer(Err(CallError::BadAnswer(why)))
            }
            _ => Attempt::Next(format!(
                "{shown}: {path} answered 200 without a JSON object: {}",
                excerpt(bytes, 120)
            )),
        };
    }
    let why = format!("{shown}: {path} -> HTTP {status}");
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(error) if error.code != 0 => match classify(error.code, error.text()) {
            Some(f) => Attempt::Final(f),
            None => Attempt::Next(format!("{why}: {}", error.text())),
        },
        _ => Attempt::Next(format!("{why}: {}", excerpt(bytes, 120))),
    }
}

/// The etcd errors that settle a call; `None` for those another member may not share
/// (no leader, timeouts, overload).
fn classify(code: i64, message: String) -> Option<Final> {
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

impl ErrorBody {
    fn text(&self) -> String {
        if self.message.is_empty() {
            self.error.clone()
        } else {
            self.message.clone()
        }
    }
}

impl Final {
    fn message(self) -> String {
        match self {
            Final::NotFound(m)
            | Final::TokenRejected(m)
            | Final::Refused(m)
            | Final::Invalid(m) => m,
        }
    }
}

/// A keepalive's in-stream error, classified like a unary one.
fn stream_error(error: StreamError) -> EtcdError {
    match classify(error.grpc_code, error.message.clone()) {
        Some(Final::NotFound(_)) => EtcdError::LeaseNotFound,
        Some(Final::TokenRejected(m) | Final::Refused(m)) => EtcdError::AuthRejected(m),
        Some(Final::Invalid(m)) => EtcdError::BadAnswer(m),
        None => EtcdError::Unavailable(format!(
            "lease keepalive: code {}: {}",
            error.grpc_code, error.message
        )),
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

/// Authentication failing inside a call ends the call with that error.
fn auth_failed(error: EtcdError) -> CallError {
    match error {
        EtcdError::Unavailable(m) => CallError::Unavailable(m),
        EtcdError::AuthRejected(m) => CallError::Final(Final::Refused(m)),
        EtcdError::BadAnswer(m) => CallError::BadAnswer(m),
        EtcdError::LeaseNotFound => CallError::BadAnswer("authenticate: not found".into()),
    }
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// int64 written as the gateway writes it: a string.
fn int64_out<S: Serializer>(value: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// int64 read as a string or a number; `null` reads as zero, as an absent field.
fn int64_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    use serde::de::Error;
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(0),
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| D::Error::custom(format!("{n} is not an int64"))),
        Value::String(s) => s
            .parse()
            .map_err(|_| D::Error::custom(format!("{s:?} is not an int64"))),
        other => Err(D::Error::custom(format!("{other} is not an int64"))),
    }
}
