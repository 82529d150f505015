//! A minimal etcd v3 client over the JSON gateway (`/v3/...` on the client port): just
//! what registration needs (lease grant/keepalive/revoke, put, range, authenticate).
//!
//! Why the gateway and not gRPC: it is what the reference uses and what every etcd ≥ 3.4
//! serves, with no protobuf toolchain. Facts checked against a real etcd 3.4:
//! - int64 fields (`ID`, `TTL`, revisions) come back as JSON strings; numbers and strings
//!   are both accepted in requests;
//! - proto3 JSON omits zero fields: a keepalive on a dead lease answers
//!   `{"result":{"header":…,"ID":"…"}}` with no `TTL`; an empty value has no `value`;
//! - the auth token goes in the bare `Authorization` header (no `Bearer`); a bad or
//!   expired token answers 401 `{"code":16,"error":"etcdserver: invalid auth token"}`,
//!   a missing one 400 `{"code":3,"error":"etcdserver: user name is empty"}`;
//! - revoking an unknown lease answers 404 `{"code":5,"error":"… lease not found"}`.
//!
//! Endpoints are tried in order for every call; a connection error, a non-200 answer or
//! a 200 whose body is not JSON moves to the next one (a 200 with a non-object JSON body
//! reads as `{}`). When etcd rejects the token, the client authenticates again once and
//! retries the call: simple tokens expire after five idle minutes.

use std::sync::Mutex;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Map, Value};
use url::Url;

use crate::config::Secret;
use crate::http::{snippet, Client, Error as HttpError, Pending, Request, Response, Target};

/// No gateway answer the sidecar needs is anywhere near this.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Every gateway path the client calls; their URLs are built once per endpoint.
const PATHS: [&str; 6] = [
    "/v3/lease/grant",
    "/v3/lease/keepalive",
    "/v3/lease/revoke",
    "/v3/kv/put",
    "/v3/kv/range",
    "/v3/auth/authenticate",
];

/// An etcd call that failed on every endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// etcd rejected the credentials or the token (after one re-authentication).
    Auth(String),
    /// Every endpoint failed; the message is the last endpoint's failure.
    Unavailable { path: String, last: String },
    /// An answer lacked something the call needs (e.g. a lease grant with no ID).
    BadAnswer(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::Auth(m) => write!(f, "etcd auth failed: {m}"),
            EtcdError::Unavailable { path, last } => {
                write!(f, "all etcd endpoints failed for {path}: {last}")
            }
            EtcdError::BadAnswer(m) => write!(f, "unexpected etcd answer: {m}"),
        }
    }
}

impl std::error::Error for EtcdError {}

/// One endpoint's failure, kept to decide what the whole call failed with.
enum Attempt {
    Answer(Map<String, Value>),
    Failed(String),
    TokenRejected(String),
    NotFound(String),
}

#[derive(Clone)]
struct Credentials {
    username: String,
    password: Secret,
}

/// The etcd gateway client. Cheap to share behind an `Arc`; the token is replaced in place
/// on re-authentication.
pub struct EtcdClient {
    http: Client,
    endpoints: Vec<Url>,
    /// `targets[i][j]`: endpoint `i` joined with `PATHS[j]`.
    targets: Vec<Vec<Result<Target, String>>>,
    timeout: Duration,
    credentials: Option<Credentials>,
    token: Mutex<Option<Secret>>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field(
                "endpoints",
                &self.endpoints.iter().map(Url::as_str).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("username", &self.credentials.as_ref().map(|c| &c.username))
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// `username` empty means no auth. Nothing is sent until the first call.
    pub fn new(
        http: Client,
        endpoints: Vec<Url>,
        timeout: Duration,
        username: &str,
        password: Secret,
    ) -> EtcdClient {
        let credentials = (!username.is_empty()).then(|| Credentials {
            username: username.to_string(),
            password,
        });
        let targets = endpoints
            .iter()
            .map(|base| PATHS.iter().map(|path| join(base, path)).collect())
            .collect();
        EtcdClient {
            http,
            endpoints,
            targets,
            timeout,
            credentials,
            token: Mutex::new(None),
        }
    }

    /// Grant a lease of `ttl` seconds; answers its id. etcd may raise a very short TTL
    /// to its minimum (2 s with default election settings).
    pub fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/grant", &json!({"TTL": ttl, "ID": 0}))?;
        match answer.get("ID").and_then(int64) {
            Some(id) if id != 0 => Ok(id),
            _ => Err(EtcdError::BadAnswer("lease grant returned no ID".into())),
        }
    }

    /// Refresh a lease once; answers the TTL left, 0 when the lease is gone (etcd then
    /// omits `TTL`, or the whole `result` may be null).
    pub fn lease_keepalive(&self, lease: i64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/keepalive", &keepalive_body(lease))?;
        Ok(ttl_left(&answer))
    }

    /// Send a keepalive to the first endpoint now and read its answer later
    /// ([`EtcdClient::finish_keepalive`]), so the caller's other requests can be on the
    /// wire meanwhile.
    pub fn start_keepalive(&self, lease: i64) -> PendingKeepalive {
        const PATH: &str = "/v3/lease/keepalive";
        let first = self
            .endpoints
            .first()
            .zip(self.targets.first().and_then(|t| t.get(path_index(PATH)?)));
        let sent = match first {
            Some((base, Ok(target))) => {
                let token = self.credentials.as_ref().and(self.current_token());
                self.send_attempt(target, &keepalive_body(lease), token.as_ref())
                    .map(|pending| (base.clone(), pending))
                    .ok()
            }
            _ => None,
        };
        PendingKeepalive { lease, sent }
    }

    /// The answer to a [`EtcdClient::start_keepalive`], as [`EtcdClient::lease_keepalive`]
    /// answers. When the first endpoint failed or rejected the token, the whole call is
    /// made again the usual way: endpoints in order, authenticating again if needed.
    pub fn finish_keepalive(&self, pending: PendingKeepalive) -> Result<i64, EtcdError> {
        if let Some((base, sent)) = pending.sent {
            if let Attempt::Answer(answer) = answer_of(&base, "/v3/lease/keepalive", sent.finish())
            {
                return Ok(ttl_left(&answer));
            }
        }
        self.lease_keepalive(pending.lease)
    }

    /// Revoke a lease: its keys disappear at once. A lease etcd no longer knows is
    /// already gone, which is what revoking wants: that is `Ok`.
    pub fn lease_revoke(&self, lease: i64) -> Result<(), EtcdError> {
        match self.call("/v3/lease/revoke", &json!({"ID": lease.to_string()})) {
            Ok(_) => Ok(()),
            Err(EtcdError::Unavailable { last, .. }) if last.contains("lease not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Put `key` = `value`, attached to `lease` (0: no lease).
    pub fn put(&self, key: &str, value: &str, lease: i64) -> Result<(), EtcdError> {
        let mut body = json!({"key": B64.encode(key), "value": B64.encode(value)});
        if lease != 0 {
            body["lease"] = Value::String(lease.to_string());
        }
        self.call("/v3/kv/put", &body).map(|_| ())
    }

    /// The value at `key`, `None` when absent (`Some("")` for an empty value, which etcd
    /// sends with no `value` field).
    pub fn get(&self, key: &str) -> Result<Option<String>, EtcdError> {
        let answer = self.call("/v3/kv/range", &json!({"key": B64.encode(key)}))?;
        let Some(first) = answer
            .get("kvs")
            .and_then(Value::as_array)
            .and_then(|kvs| kvs.first())
        else {
            return Ok(None);
        };
        let encoded = first.get("value").and_then(Value::as_str).unwrap_or("");
        let raw = B64
            .decode(encoded)
            .map_err(|e| EtcdError::BadAnswer(format!("value is not base64: {e}")))?;
        Ok(Some(String::from_utf8_lossy(&raw).into_owned()))
    }

    /// Authenticate now (normally done lazily by the first call that needs it).
    pub fn authenticate(&self) -> Result<(), EtcdError> {
        let Some(credentials) = &self.credentials else {
            return Ok(());
        };
        let body = json!({
            "name": credentials.username,
            "password": credentials.password.expose(),
        });
        let answer = match self.call_endpoints("/v3/auth/authenticate", &body, None) {
            Ok(answer) => answer,
            Err(EtcdError::Unavailable { last, .. }) if last.contains("authentication failed") => {
                return Err(EtcdError::Auth(last));
            }
            Err(e) => return Err(e),
        };
        match answer.get("token").and_then(Value::as_str) {
            Some(token) if !token.is_empty() => {
                if let Ok(mut slot) = self.token.lock() {
                    *slot = Some(Secret::new(token));
                }
                Ok(())
            }
            _ => Err(EtcdError::Auth("authenticate returned no token".into())),
        }
    }

    fn current_token(&self) -> Option<Secret> {
        self.token.lock().ok().and_then(|t| t.clone())
    }

    /// One call: authenticate first if needed, and once more if etcd rejects the token.
    fn call(&self, path: &str, body: &Value) -> Result<Map<String, Value>, EtcdError> {
        if self.credentials.is_none() {
            return self.call_endpoints(path, body, None);
        }
        if self.current_token().is_none() {
            self.authenticate()?;
        }
        match self.call_endpoints(path, body, self.current_token()) {
            Err(EtcdError::Auth(reason)) => {
                tracing::info!(%reason, "etcd rejected the auth token, authenticating again");
                self.authenticate()?;
                self.call_endpoints(path, body, self.current_token())
            }
            other => other,
        }
    }

    fn call_endpoints(
        &self,
        path: &str,
        body: &Value,
        token: Option<Secret>,
    ) -> Result<Map<String, Value>, EtcdError> {
        let mut last = String::from("no endpoint");
        let mut token_rejected = None;
        // Which prepared path this is: the same for every endpoint.
        let path_index = path_index(path);
        for (i, base) in self.endpoints.iter().enumerate() {
            let prepared = path_index.and_then(|j| self.targets.get(i)?.get(j));
            let joined;
            let target = match prepared {
                Some(Ok(target)) => target,
                Some(Err(why)) => {
                    last = why.clone();
                    continue;
                }
                None => match join(base, path) {
                    Ok(target) => {
                        joined = target;
                        &joined
                    }
                    Err(why) => {
                        last = why;
                        continue;
                    }
                },
            };
            match self.attempt(base, target, path, body, token.as_ref()) {
                Attempt::Answer(map) => return Ok(map),
                Attempt::Failed(why) | Attempt::NotFound(why) => last = why,
                Attempt::TokenRejected(why) => {
                    last = why.clone();
                    token_rejected = Some(why);
                }
            }
        }
        match token_rejected {
            Some(why) if self.credentials.is_some() => Err(EtcdError::Auth(why)),
            _ => Err(EtcdError::Unavailable {
                path: path.to_string(),
                last,
            }),
        }
    }

    fn attempt(
        &self,
        base: &Url,
        target: &Target,
        path: &str,
        body: &Value,
        token: Option<&Secret>,
    ) -> Attempt {
        // The client itself resends once on a fresh connection when a pooled one turns
        // out closed (an etcd that restarted), so a single endpoint survives a restart.
        let answer = self
            .send_attempt(target, body, token)
            .and_then(|pending| pending.finish());
        answer_of(base, path, answer)
    }

    /// Put one request on the wire.
    fn send_attempt(
        &self,
        target: &Target,
        body: &Value,
        token: Option<&Secret>,
    ) -> Result<Pending, HttpError> {
        // Encoding a `Value` cannot fail; the empty body would be refused by etcd anyway.
        let json = serde_json::to_vec(body).unwrap_or_default();
        let authorization = token.map(|token| ("authorization", token.expose()));
        let request = Request::post_json(target, &json).headers(authorization.as_slice());
        self.http.start(request, MAX_ANSWER_BYTES, self.timeout)
    }
}

/// A keepalive on the wire: see [`EtcdClient::start_keepalive`].
#[derive(Debug)]
pub struct PendingKeepalive {
    lease: i64,
    /// The first endpoint and the request sent to it; `None` when it could not be sent.
    sent: Option<(Url, Pending)>,
}

fn keepalive_body(lease: i64) -> Value {
    json!({"ID": lease.to_string()})
}

/// The TTL a keepalive answer leaves, 0 when the lease is gone.
fn ttl_left(answer: &Map<String, Value>) -> i64 {
    answer
        .get("result")
        .and_then(Value::as_object)
        .and_then(|r| r.get("TTL"))
        .and_then(int64)
        .unwrap_or(0)
        .max(0)
}

fn path_index(path: &str) -> Option<usize> {
    PATHS.iter().position(|p| *p == path)
}

/// What one endpoint's answer (or failure) means for the call.
fn answer_of(base: &Url, path: &str, answer: Result<Response, HttpError>) -> Attempt {
    let response = match answer {
        Ok(response) => response,
        Err(HttpError::TimedOut(t)) => {
            return Attempt::Failed(format!("{base}: timed out after {t:?}"))
        }
        Err(why) => return Attempt::Failed(format!("{base}: {why}")),
    };
    let (status, bytes) = (response.head.status, response.body);
    if (200..300).contains(&status) {
        return match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Attempt::Answer(map),
            Ok(_) => Attempt::Answer(Map::new()),
            Err(e) => Attempt::Failed(format!("{base}: {path} answered invalid JSON: {e}")),
        };
    }
    let (code, message) = error_body(&bytes);
    let why = format!("{base}: {path} -> HTTP {status}: {message}");
    if is_token_rejection(status, code, &message) {
        Attempt::TokenRejected(why)
    } else if code == Some(5) {
        Attempt::NotFound(why)
    } else {
        Attempt::Failed(why)
    }
}

/// `base` joined with a gateway path, prepared for requests.
fn join(base: &Url, path: &str) -> Result<Target, String> {
    let url = base
        .join(path)
        .map_err(|e| format!("{base}: cannot join {path}: {e}"))?;
    Target::new(&url).map_err(|e| format!("{base}: {e}"))
}

/// etcd's gateway error body: `{"error","message","code"}` (gRPC code).
fn error_body(bytes: &[u8]) -> (Option<i64>, String) {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => {
            let code = map.get("code").and_then(int64);
            let message = map
                .get("message")
                .or_else(|| map.get("error"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| snippet(bytes, 200));
            (code, message)
        }
        _ => (None, snippet(bytes, 200)),
    }
}

/// An answer that a fresh token would fix: 401 / gRPC Unauthenticated (an invalid or
/// expired token), or "user name is empty" (no token at all, e.g. auth was enabled after
/// the sidecar started).
fn is_token_rejection(status: u16, code: Option<i64>, message: &str) -> bool {
    status == 401
        || code == Some(16)
        || message.contains("invalid auth token")
        || message.contains("user name is empty")
}

/// An int64 as etcd's gateway writes it (a string) or as a plain number.
fn int64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_reads_strings_and_numbers() {
        assert_eq!(
            int64(&json!("7587899241118086159")),
            Some(7587899241118086159)
        );
        assert_eq!(int64(&json!(4)), Some(4));
        assert_eq!(int64(&json!(null)), None);
        assert_eq!(int64(&json!("x")), None);
    }

    #[test]
    fn token_rejections_are_recognised() {
        assert!(is_token_rejection(
            401,
            Some(16),
            "etcdserver: invalid auth token"
        ));
        assert!(is_token_rejection(
            400,
            Some(3),
            "etcdserver: user name is empty"
        ));
        assert!(!is_token_rejection(
            404,
            Some(5),
            "etcdserver: requested lease not found"
        ));
    }
}
