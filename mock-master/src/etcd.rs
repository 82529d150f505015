//! A small client for etcd's v3 JSON gateway: range, put, delete, a streaming watch, and
//! for replica mode lease grant and keepalive and a create-if-absent txn.
//!
//! The master talks to etcd only through the gateway, so the same code runs against a
//! real etcd and against `mock-etcd`. Written from the gateway's wire format (base64 keys
//! and values, 64-bit integers as JSON strings, one JSON object per watch message), not
//! from any other crate of this workspace.
//!
//! With credentials the client authenticates (`/v3/auth/authenticate`) before its first
//! call and sends the simple token in `Authorization` on every call, as etcdctl does.
//! Simple tokens expire after `--auth-token-ttl` of idle time and vanish when etcd
//! restarts, so a call answered 401 (gRPC 16, "invalid auth token") re-authenticates
//! once and is retried; a watch refused for its token ([`is_auth_cancel`]) drops the
//! token so the next open authenticates again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

pub use crate::etcd_answer::{
    EtcdError, EventKind, KeyValue, RangeResult, WatchEvent, WatchResponse,
};
use crate::watch_message::WatchMessage;

/// Largest unparsed watch backlog kept in memory; beyond it the stream is dropped and
/// re-opened (a message that large is not something etcd sends).
const MAX_WATCH_BUFFER: usize = 64 * 1024 * 1024;
/// Largest range/put/delete answer read.
const MAX_BODY: usize = 64 * 1024 * 1024;

fn err(msg: impl Into<String>) -> EtcdError {
    EtcdError(msg.into())
}

/// A user name and password for etcd auth. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<set>")
            .finish()
    }
}

/// The gateway client. Endpoints are tried in order for every call. Clones share the
/// auth token.
#[derive(Clone)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    http: reqwest::Client,
    watch_http: reqwest::Client,
    timeout: Duration,
    credentials: Option<Arc<Credentials>>,
    token: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// How one call to one endpoint failed: the token was refused, or anything else.
enum CallError {
    Unauthenticated(EtcdError),
    Other(EtcdError),
}

impl CallError {
    fn into_inner(self) -> EtcdError {
        match self {
            CallError::Unauthenticated(e) | CallError::Other(e) => e,
        }
    }
}

/// True when a watch was canceled because of its token (missing, expired or unknown):
/// the gateway answers such a watch with created+canceled, not with an HTTP error.
pub fn is_auth_cancel(reason: &str) -> bool {
    reason.contains("invalid auth token") || reason.contains("user name is empty")
}

/// `127.0.0.1:2379` -> `http://127.0.0.1:2379`; schemes are kept; trailing `/` dropped.
pub fn normalize_endpoint(endpoint: &str) -> String {
    let e = endpoint.trim().trim_end_matches('/');
    if e.starts_with("http://") || e.starts_with("https://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

/// The end of the key range holding every key that starts with `prefix`.
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff (or the prefix was empty): "to the end of the keyspace".
    vec![0]
}

impl EtcdClient {
    /// `timeout` bounds every unary call; the watch has only a connect timeout, and its
    /// reads are bounded by the `idle` given to [`EtcdClient::watch`].
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Self, EtcdError> {
        let endpoints: Vec<String> = endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .filter(|e| e.len() > "http://".len())
            .collect();
        if endpoints.is_empty() {
            return Err(err("no etcd endpoint given"));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| err(format!("building http client: {e}")))?;
        let watch_http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .tcp_keepalive(Duration::from_secs(10))
            .build()
            .map_err(|e| err(format!("building http client: {e}")))?;
        Ok(EtcdClient {
            endpoints,
            http,
            watch_http,
            timeout,
            credentials: None,
            token: Arc::new(Mutex::new(None)),
        })
    }

    /// Authenticate as `username` (empty: no auth, the default).
    pub fn with_credentials(mut self, username: &str, password: &str) -> Self {
        self.credentials = (!username.is_empty()).then(|| {
            Arc::new(Credentials {
                username: username.to_string(),
                password: password.to_string(),
            })
        });
        self
    }

    fn current_token(&self) -> Option<String> {
        self.token.lock().ok().and_then(|g| g.clone())
    }

    /// Forget `used` (if it is still the current token): the next call authenticates.
    pub fn invalidate_token(&self, used: Option<&str>) {
        if let Ok(mut g) = self.token.lock() {
            if used.is_none() || g.as_deref() == used {
                *g = None;
            }
        }
    }

    /// The token to send to `ep`: none without credentials; else the current one, or a
    /// fresh one if there is none.
    async fn token_for(&self, ep: &str) -> Result<Option<String>, EtcdError> {
        if self.credentials.is_none() {
            return Ok(None);
        }
        if let Some(t) = self.current_token() {
            return Ok(Some(t));
        }
        self.authenticate(ep).await.map(Some)
    }

    /// `POST /v3/auth/authenticate` on `ep`; stores and answers the new token.
    async fn authenticate(&self, ep: &str) -> Result<String, EtcdError> {
        let Some(c) = &self.credentials else {
            return Err(err("no etcd credentials configured"));
        };
        let body = authenticate_request(&c.username, &c.password);
        let v = self
            .call_one(ep, "/v3/auth/authenticate", &body, None)
            .await
            .map_err(|e| {
                err(format!(
                    "authenticating as {}: {}",
                    c.username,
                    e.into_inner()
                ))
            })?;
        let token =
            parse_token(&v).ok_or_else(|| err(format!("{ep}: authenticate answered no token")))?;
        if let Ok(mut g) = self.token.lock() {
            *g = Some(token.clone());
        }
        tracing::debug!(endpoint = ep, user = %c.username, "authenticated to etcd");
        Ok(token)
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// POST `body` to `path` on each endpoint in turn; the first 200 whose body is a JSON
    /// object wins. A refused token is renewed once per endpoint.
    async fn call(&self, path: &str, body: &Value) -> Result<Value, EtcdError> {
        let mut last = err("no endpoint answered");
        for ep in &self.endpoints {
            let token = match self.token_for(ep).await {
                Ok(t) => t,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match self.call_one(ep, path, body, token.as_deref()).await {
                Ok(v) => return Ok(v),
                Err(CallError::Unauthenticated(e)) if self.credentials.is_some() => {
                    tracing::info!(endpoint = %ep, error = %e, "etcd refused the token; re-authenticating");
                    self.invalidate_token(token.as_deref());
                    let retried = match self.authenticate(ep).await {
                        Ok(t) => self
                            .call_one(ep, path, body, Some(&t))
                            .await
                            .map_err(CallError::into_inner),
                        Err(e) => Err(e),
                    };
                    match retried {
                        Ok(v) => return Ok(v),
                        Err(e) => last = e,
                    }
                }
                Err(e) => last = e.into_inner(),
            }
        }
        Err(last)
    }

    async fn call_one(
        &self,
        ep: &str,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<Value, CallError> {
        let url = format!("{ep}{path}");
        let other = |e: String| CallError::Other(err(format!("{url}: {e}")));
        let mut req = self.http.post(&url).json(body);
        if let Some(t) = token {
            req = req.header(reqwest::header::AUTHORIZATION, t);
        }
        let resp = req.send().await.map_err(|e| other(e.to_string()))?;
        let status = resp.status();
        let bytes = read_capped(resp, MAX_BODY).await.map_err(other)?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let e = err(format!("{url}: HTTP {status}: {}", text.trim()));
            // etcd: 401 with gRPC code 16 (Unauthenticated), "invalid auth token".
            if status == reqwest::StatusCode::UNAUTHORIZED {
                return Err(CallError::Unauthenticated(e));
            }
            return Err(CallError::Other(e));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(other("answer is not a JSON object".to_string())),
        }
    }

    /// Every key starting with `prefix`, and the store revision of the listing.
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<RangeResult, EtcdError> {
        let v = self
            .call("/v3/kv/range", &range_prefix_request(prefix))
            .await?;
        parse_range(&v)
    }

    /// Put `value` at `key` (no lease). Answers the new revision.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<i64, EtcdError> {
        let v = self
            .call("/v3/kv/put", &put_request(key, value, None))
            .await?;
        Ok(parse_put(&v))
    }

    /// Put `value` at `key` attached to `lease`. Answers the new revision.
    pub async fn put_on_lease(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<i64, EtcdError> {
        let body = put_request(key, value, Some(lease));
        let v = self.call("/v3/kv/put", &body).await?;
        Ok(parse_put(&v))
    }

    /// `/v3/lease/grant` of a lease of `ttl_secs`; answers its id.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<i64, EtcdError> {
        let v = self
            .call("/v3/lease/grant", &lease_grant_request(ttl_secs))
            .await?;
        parse_grant(&v)
    }

    /// One `/v3/lease/keepalive` of `lease`; answers the TTL etcd reports (0 or less:
    /// etcd no longer knows the lease).
    pub async fn lease_keepalive(&self, lease: i64) -> Result<i64, EtcdError> {
        let v = self
            .call("/v3/lease/keepalive", &lease_keepalive_request(lease))
            .await?;
        parse_keepalive(&v)
    }

    /// The txn `create_revision(key) == 0 → put key=value on lease`, else range `key`.
    pub async fn create_if_absent(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<TxnAnswer, EtcdError> {
        let v = self
            .call("/v3/kv/txn", &create_if_absent_request(key, value, lease))
            .await?;
        parse_txn(&v)
    }

    /// Delete `key`. Answers how many keys were deleted.
    pub async fn delete(&self, key: &[u8]) -> Result<i64, EtcdError> {
        let v = self
            .call("/v3/kv/deleterange", &delete_request(key))
            .await?;
        Ok(parse_delete(&v))
    }

    /// Open a watch on every key starting with `prefix`, from `start_revision`, with the
    /// previous value of each key in every event. The answer's headers must come within
    /// the call timeout; after that, silence longer than `idle` ends the stream.
    pub async fn watch(
        &self,
        prefix: &[u8],
        start_revision: i64,
        idle: Duration,
    ) -> Result<WatchStream, EtcdError> {
        let body = watch_create_request(prefix, start_revision);
        let mut last = err("no endpoint answered");
        for ep in &self.endpoints {
            let url = format!("{ep}/v3/watch");
            let token = match self.token_for(ep).await {
                Ok(t) => t,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let mut req = self.watch_http.post(&url).json(&body);
            if let Some(t) = &token {
                req = req.header(reqwest::header::AUTHORIZATION, t);
            }
            let sent = tokio::time::timeout(self.timeout, req.send()).await;
            match sent {
                Ok(Ok(resp)) if resp.status().is_success() => {
                    return Ok(WatchStream {
                        response: resp,
                        frames: Framer::default(),
                        idle,
                        token,
                    })
                }
                Ok(Ok(resp)) => {
                    if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
                        self.invalidate_token(token.as_deref());
                    }
                    last = err(format!("{url}: HTTP {}", resp.status()))
                }
                Ok(Err(e)) => last = err(format!("{url}: {e}")),
                Err(_) => last = err(format!("{url}: no answer within {:?}", self.timeout)),
            }
        }
        Err(last)
    }
}

/// The body of a `/v3/kv/put` of `value` at `key`, on `lease` if one is given.
pub fn put_request(key: &[u8], value: &[u8], lease: Option<i64>) -> Value {
    let mut body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
    if let (Some(lease), Some(map)) = (lease, body.as_object_mut()) {
        map.insert("lease".into(), Value::String(lease.to_string()));
    }
    body
}

/// A put answer's revision (the header's; 0 when absent).
pub fn parse_put(v: &Value) -> i64 {
    header_revision(v)
}

/// The body of a `/v3/kv/deleterange` of the one key `key`.
pub fn delete_request(key: &[u8]) -> Value {
    json!({ "key": B64.encode(key) })
}

/// A deleterange answer: how many keys it deleted (0 when absent, as proto3 leaves it).
pub fn parse_delete(v: &Value) -> i64 {
    v.get("deleted").and_then(json_i64).unwrap_or(0)
}

/// The body of a `/v3/lease/grant` of a lease of `ttl_secs` (etcd picks the id).
pub fn lease_grant_request(ttl_secs: i64) -> Value {
    json!({ "TTL": ttl_secs.to_string(), "ID": "0" })
}

/// The body of one `/v3/lease/keepalive` of `lease`.
pub fn lease_keepalive_request(lease: i64) -> Value {
    json!({ "ID": lease.to_string() })
}

/// What a create-if-absent txn found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnAnswer {
    /// The compare held: the key was put.
    pub succeeded: bool,
    /// The header revision.
    pub revision: i64,
    /// When it failed: the key's value read in the failure branch (`None`: not read,
    /// or the key vanished in between).
    pub value: Option<Vec<u8>>,
}

/// The body of [`EtcdClient::create_if_absent`]'s txn (`/v3/kv/txn`).
pub fn create_if_absent_request(key: &[u8], value: &[u8], lease: i64) -> Value {
    let k = B64.encode(key);
    json!({
        "compare": [{
            "key": k,
            "target": "CREATE",
            "result": "EQUAL",
            "create_revision": "0",
        }],
        "success": [{ "request_put": {
            "key": k,
            "value": B64.encode(value),
            "lease": lease.to_string(),
        }}],
        "failure": [{ "request_range": { "key": k } }],
    })
}

/// A txn answer: `succeeded` is left out when false (proto3's JSON), and a failure
/// branch's range answer is `responses[0].response_range`.
pub fn parse_txn(v: &Value) -> Result<TxnAnswer, EtcdError> {
    let succeeded = v.get("succeeded").and_then(Value::as_bool).unwrap_or(false);
    let kv = v
        .get("responses")
        .and_then(Value::as_array)
        .and_then(|r| r.first())
        .and_then(|r| r.get("response_range"))
        .and_then(|r| r.get("kvs"))
        .and_then(Value::as_array)
        .and_then(|kvs| kvs.first());
    let value = match kv {
        Some(kv) => Some(decode_kv(kv)?.value),
        None => None,
    };
    Ok(TxnAnswer {
        succeeded,
        revision: header_revision(v),
        value,
    })
}

/// A grant answer's lease id; an answer with an `error` or no positive `ID` is an error.
pub fn parse_grant(v: &Value) -> Result<i64, EtcdError> {
    if let Some(e) = v
        .get("error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
    {
        return Err(err(format!("lease grant: {e}")));
    }
    v.get("ID")
        .and_then(json_i64)
        .filter(|id| *id > 0)
        .ok_or_else(|| err("lease grant answered no ID"))
}

/// A keepalive answer (`{"result":{"TTL":"3",..}}`): the TTL, 0 when absent (etcd
/// leaves it out for a lease it does not know); an `error` inside the 200 is an error.
pub fn parse_keepalive(v: &Value) -> Result<i64, EtcdError> {
    if let Some(e) = v.get("error") {
        return Err(err(format!("lease keepalive: {e}")));
    }
    let r = v.get("result").unwrap_or(v);
    Ok(r.get("TTL").and_then(json_i64).unwrap_or(0))
}

/// `/v3/auth/authenticate`'s request.
pub fn authenticate_request(username: &str, password: &str) -> Value {
    json!({ "name": username, "password": password })
}

/// The simple token of an authenticate answer, if it has a non-empty one.
pub fn parse_token(v: &Value) -> Option<String> {
    let token = v.get("token").and_then(Value::as_str)?;
    (!token.is_empty()).then(|| token.to_string())
}

/// The body of a range over every key starting with `prefix` (`/v3/kv/range`).
pub fn range_prefix_request(prefix: &[u8]) -> Value {
    json!({
        "key": B64.encode(prefix),
        "range_end": B64.encode(prefix_range_end(prefix)),
    })
}

/// A range answer (a JSON object) as a listing: its keys and its revision.
pub fn parse_range(v: &Value) -> Result<RangeResult, EtcdError> {
    let revision = header_revision(v);
    let mut kvs = Vec::new();
    if let Some(list) = v.get("kvs").and_then(Value::as_array) {
        for kv in list {
            kvs.push(decode_kv(kv)?);
        }
    }
    Ok(RangeResult { revision, kvs })
}

/// The body that opens a watch on every key starting with `prefix` from
/// `start_revision`, with each key's previous value (`/v3/watch`).
pub fn watch_create_request(prefix: &[u8], start_revision: i64) -> Value {
    json!({
        "create_request": {
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_range_end(prefix)),
            "start_revision": start_revision.to_string(),
            "prev_kv": true,
        }
    })
}

/// An open watch: a stream of JSON messages on one long HTTP response.
pub struct WatchStream {
    response: reqwest::Response,
    frames: Framer,
    idle: Duration,
    /// The token the watch was opened with (to drop it if etcd refuses it).
    token: Option<String>,
}

/// Splits a byte stream into watch messages, however the bytes were chunked (the gateway
/// writes one object per line, but the transport may split or join them).
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), EtcdError> {
        if self.buf.len() + bytes.len() > MAX_WATCH_BUFFER {
            return Err(err("watch message too large"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete message, if the buffer holds one.
    pub fn next_message(&mut self) -> Result<Option<WatchMessage>, EtcdError> {
        let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<WatchMessage>();
        match it.next() {
            Some(Ok(m)) => {
                let used = it.byte_offset();
                self.buf.drain(..used);
                Ok(Some(m))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            Some(Err(e)) => Err(err(format!("watch stream is not JSON: {e}"))),
            None => {
                self.buf.clear();
                Ok(None)
            }
        }
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("idle", &self.idle)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl WatchStream {
    /// The token this watch was opened with, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The next message; `Ok(None)` when the server ended the stream. Silence longer than
    /// the idle timeout is an error (the caller re-opens the watch).
    pub async fn next(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        loop {
            if let Some(m) = self.frames.next_message()? {
                return m.into_response().map(Some);
            }
            let chunk = tokio::time::timeout(self.idle, self.response.chunk())
                .await
                .map_err(|_| err(format!("watch silent for {:?}", self.idle)))?
                .map_err(|e| err(format!("watch stream: {e}")))?;
            match chunk {
                Some(c) => self.frames.push(&c)?,
                None => return Ok(None),
            }
        }
    }
}

/// Decode one watch message from its tree: `{"result":{...}}`, or `{"error":...}` (an
/// error). The oracle [`crate::watch_message`] is tested against: it reads the same
/// messages from their text without building the tree.
#[cfg(test)]
pub(crate) fn parse_watch_message(v: &Value) -> Result<WatchResponse, EtcdError> {
    if let Some(e) = v.get("error") {
        return Err(err(format!("watch error: {e}")));
    }
    let r = v.get("result").unwrap_or(v);
    let mut out = WatchResponse {
        revision: header_revision(r),
        created: r.get("created").and_then(Value::as_bool).unwrap_or(false),
        canceled: r.get("canceled").and_then(Value::as_bool).unwrap_or(false),
        compact_revision: r.get("compact_revision").and_then(json_i64).unwrap_or(0),
        cancel_reason: r
            .get("cancel_reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        events: Vec::new(),
    };
    if let Some(events) = r.get("events").and_then(Value::as_array) {
        for ev in events {
            let kind = match ev.get("type").and_then(Value::as_str) {
                None | Some("PUT") => EventKind::Put,
                Some("DELETE") => EventKind::Delete,
                Some(other) => return Err(err(format!("unknown watch event type {other}"))),
            };
            let kv = decode_kv(ev.get("kv").unwrap_or(&Value::Null))?;
            let prev_kv = match ev.get("prev_kv") {
                Some(p) if p.is_object() => Some(decode_kv(p)?),
                _ => None,
            };
            out.events.push(WatchEvent { kind, kv, prev_kv });
        }
    }
    Ok(out)
}

fn decode_kv(kv: &Value) -> Result<KeyValue, EtcdError> {
    let b64 = |field: &str| -> Result<Vec<u8>, EtcdError> {
        match kv.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => B64
                .decode(s)
                .map_err(|e| err(format!("bad base64 in {field}: {e}"))),
            Some(_) => Err(err(format!("{field} is not a string"))),
        }
    };
    Ok(KeyValue {
        key: b64("key")?,
        value: b64("value")?,
        mod_revision: kv.get("mod_revision").and_then(json_i64).unwrap_or(0),
    })
}

fn header_revision(v: &Value) -> i64 {
    v.get("header")
        .and_then(|h| h.get("revision"))
        .and_then(json_i64)
        .unwrap_or(0)
}

/// A 64-bit integer as the gateway writes it: a JSON string, or a number.
fn json_i64(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// The body of `resp`, at most `cap` bytes.
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if out.len() + chunk.len() > cap {
            return Err(format!("answer larger than {cap} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_end_increments_last_byte() {
        assert_eq!(prefix_range_end(b"XLLM:"), b"XLLM;".to_vec());
        assert_eq!(prefix_range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_range_end(b""), vec![0]);
    }

    #[test]
    fn endpoints_get_a_scheme() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:2379"),
            "http://127.0.0.1:2379"
        );
        assert_eq!(normalize_endpoint("https://h:1/"), "https://h:1");
    }

    #[test]
    fn parses_a_real_delete_event() {
        // Copied from a real etcd 3.4 gateway.
        let line = r#"{"result":{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},"events":[{"type":"DELETE","kv":{"key":"WExMTTpERUZBVUxUOmE=","mod_revision":"4"},"prev_kv":{"key":"WExMTTpERUZBVUxUOmE=","create_revision":"2","mod_revision":"3","version":"2","value":"eyJ4IjoxfQ=="}}]}}"#;
        let v: Value = serde_json::from_str(line).unwrap();
        let r = parse_watch_message(&v).unwrap();
        assert_eq!(r.revision, 4);
        assert_eq!(r.events.len(), 1);
        assert_eq!(r.events[0].kind, EventKind::Delete);
        assert_eq!(r.events[0].kv.key, b"XLLM:DEFAULT:a".to_vec());
        assert_eq!(r.events[0].kv.mod_revision, 4);
        assert_eq!(
            r.events[0].prev_kv.as_ref().unwrap().value,
            br#"{"x":1}"#.to_vec()
        );
    }

    #[test]
    fn framing_survives_any_chunking() {
        let text =
            "{\"result\":{\"created\":true}}\n{\"result\":{\"header\":{\"revision\":\"7\"}}}\n";
        for size in 1..text.len() {
            let mut f = Framer::default();
            let mut got = Vec::new();
            for chunk in text.as_bytes().chunks(size) {
                f.push(chunk).unwrap();
                while let Some(m) = f.next_message().unwrap() {
                    got.push(m.into_response().unwrap());
                }
            }
            assert_eq!(got.len(), 2, "chunk size {size}");
            assert!(got[0].created);
            assert_eq!(got[1].revision, 7);
        }
        let mut f = Framer::default();
        f.push(b"{\"result\": nope}").unwrap();
        assert!(f.next_message().is_err());
    }

    #[test]
    fn an_error_message_is_an_error() {
        let v: Value =
            serde_json::from_str(r#"{"error":{"grpc_code":14,"message":"unavailable"}}"#).unwrap();
        assert!(parse_watch_message(&v).is_err());
    }

    #[test]
    fn parses_txn_grant_and_keepalive_answers() {
        // Shapes of a real etcd 3.4 gateway's answers.
        let lost: Value = serde_json::from_str(r#"{"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"},"kvs":[{"key":"TQ==","create_revision":"5","mod_revision":"5","version":"1","value":"MTI3LjAuMC4xOjg4ODk=","lease":"7"}],"count":"1"}}]}"#).unwrap();
        let t = parse_txn(&lost).unwrap();
        assert!(!t.succeeded);
        assert_eq!(t.revision, 9);
        assert_eq!(t.value.as_deref(), Some(b"127.0.0.1:8889".as_slice()));
        let won: Value = serde_json::from_str(r#"{"header":{"revision":"10"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"10"}}}]}"#).unwrap();
        assert_eq!(
            parse_txn(&won).unwrap(),
            TxnAnswer {
                succeeded: true,
                revision: 10,
                value: None
            }
        );
        assert_eq!(parse_grant(&json!({"ID": "7587", "TTL": "3"})), Ok(7587));
        assert!(parse_grant(&json!({"error": "etcdserver: too many requests"})).is_err());
        assert!(parse_grant(&json!({"TTL": "3"})).is_err());
        assert_eq!(
            parse_keepalive(&json!({"result": {"ID": "1", "TTL": "3"}})),
            Ok(3)
        );
        assert_eq!(parse_keepalive(&json!({"result": {"ID": "1"}})), Ok(0));
        assert!(parse_keepalive(&json!({"error": {"grpc_code": 14}})).is_err());
        let body = create_if_absent_request(b"M", b"v", 7);
        assert_eq!(body["compare"][0]["target"], "CREATE");
        assert_eq!(body["success"][0]["request_put"]["lease"], "7");
    }

    /// The builders the client and the simulator share: gateway JSON, ids as strings.
    #[test]
    fn builds_put_delete_grant_and_keepalive_bodies() {
        assert_eq!(
            put_request(b"k", b"v", None),
            json!({"key": "aw==", "value": "dg=="})
        );
        assert_eq!(
            put_request(b"k", b"v", Some(7)),
            json!({"key": "aw==", "value": "dg==", "lease": "7"})
        );
        assert_eq!(delete_request(b"k"), json!({"key": "aw=="}));
        assert_eq!(lease_grant_request(3), json!({"TTL": "3", "ID": "0"}));
        assert_eq!(lease_keepalive_request(9), json!({"ID": "9"}));
        assert_eq!(parse_put(&json!({"header": {"revision": "12"}})), 12);
        assert_eq!(parse_delete(&json!({"deleted": "1"})), 1);
        assert_eq!(parse_delete(&json!({})), 0);
    }

    #[test]
    fn parses_a_compaction_cancel() {
        let line =
            r#"{"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"6"}}"#;
        let r = parse_watch_message(&serde_json::from_str(line).unwrap()).unwrap();
        assert!(r.canceled);
        assert_eq!(r.compact_revision, 6);
    }
}
