//! What the sidecar's etcd client (`sidecar::peers::etcd`) makes of a gateway answer,
//! for the simulated sidecar: the same classes of error by gRPC code, the same checks
//! of a 200 body, the same messages.
//!
//! Why here and not called: those rules are private functions of the client
//! (`answer_of`, `classify`, `stream_error`, `lease_error`) that take a live HTTP
//! response. Until the sidecar exposes them as pure functions of (status, body), the
//! simulator restates them; `tests/wire.rs` runs them against mock-etcd's own answers.
//! One endpoint only: the client's endpoint failover and re-authentication are not
//! simulated.

use std::time::Duration;

use serde_json::{Map, Value};
use sidecar::core::Answer;
use sidecar::peers::etcd::EtcdError;

use crate::node::{Failure, Outcome, Reply};

/// The etcd calls of the sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdCall {
    /// The TTL asked for: the driver answers a grant with it, not etcd's.
    Grant {
        ttl: i64,
    },
    Put,
    Keepalive,
    Revoke,
}

/// The core's answer to etcd call `kind` that ended with `outcome`; `shown` is the
/// endpoint as the client's messages show it, `timeout` the etcd timeout.
pub fn answer(kind: EtcdCall, outcome: Outcome, shown: &str, timeout: Duration) -> Answer {
    let path = match kind {
        EtcdCall::Grant { .. } => "/v3/lease/grant",
        EtcdCall::Put => "/v3/kv/put",
        EtcdCall::Revoke => "/v3/lease/revoke",
        EtcdCall::Keepalive => "/v3/lease/keepalive",
    };
    let result = call(outcome, path, shown, timeout);
    match kind {
        EtcdCall::Grant { ttl } => match result.map(|m| int64(m.get("ID"))) {
            Ok(lease) if lease != 0 => Answer::LeaseGranted { lease, ttl },
            Ok(_) => Answer::GrantFailed(
                EtcdError::BadAnswer("lease grant returned no ID".into()).to_string(),
            ),
            Err(e) => Answer::GrantFailed(lease_error(e).to_string()),
        },
        EtcdCall::Put => match result {
            Ok(_) => Answer::PutDone,
            Err(e) => Answer::PutFailed(lease_error(e).to_string()),
        },
        EtcdCall::Revoke => match result.map_err(lease_error) {
            Ok(_) | Err(EtcdError::LeaseNotFound) => Answer::RevokeDone,
            Err(e) => Answer::RevokeFailed(e.to_string()),
        },
        EtcdCall::Keepalive => match result.map_err(lease_error).and_then(|m| keepalive_ttl(&m)) {
            Ok(ttl) if ttl > 0 => Answer::KeepaliveTtl(ttl),
            Ok(_) | Err(EtcdError::LeaseNotFound) => Answer::LeaseNotFound,
            Err(e) => Answer::KeepaliveFailed(e.to_string()),
        },
    }
}

/// One call's failure before the lease rules: etcd's own final error (code, message)
/// or no usable answer.
enum CallError {
    Final(i64, String),
    Other(EtcdError),
}

/// The answer's JSON object, or why the call failed (one endpoint: "all endpoints
/// failed" names it).
fn call(
    outcome: Outcome,
    path: &str,
    shown: &str,
    timeout: Duration,
) -> Result<Map<String, Value>, CallError> {
    let unavailable = |why: String| {
        CallError::Other(EtcdError::Unavailable(format!(
            "all endpoints failed for {path}, last: {shown}: {why}"
        )))
    };
    let (status, body) = match outcome {
        Outcome::Reply(Reply::Gateway { status, body }) => (status, body),
        Outcome::Reply(other) => return Err(unavailable(format!("unexpected answer {other:?}"))),
        Outcome::Failed(Failure::Timeout) => {
            return Err(unavailable(format!("no answer within {timeout:?}")))
        }
        Outcome::Failed(f) => return Err(unavailable(f.describe().to_string())),
    };
    let parsed = serde_json::from_slice::<Value>(&body);
    if status == 200 {
        return match parsed {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(unavailable(format!(
                "{path} answered 200 without a JSON object"
            ))),
        };
    }
    let error = parsed
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    let code = int64(error.get("code"));
    let message = ["message", "error"]
        .iter()
        .filter_map(|k| error.get(*k).and_then(Value::as_str))
        .find(|m| !m.is_empty())
        .unwrap_or("")
        .to_string();
    match code {
        0 => Err(unavailable(format!("{path} -> HTTP {status}"))),
        // Unavailable, deadline, overload...: another member might answer.
        c if !is_final(c) => Err(unavailable(format!("{path} -> HTTP {status}: {message}"))),
        c => Err(CallError::Final(c, message)),
    }
}

const INVALID_ARGUMENT: i64 = 3;
const NOT_FOUND: i64 = 5;
const PERMISSION_DENIED: i64 = 7;
const FAILED_PRECONDITION: i64 = 9;
const UNAUTHENTICATED: i64 = 16;

fn is_final(code: i64) -> bool {
    matches!(
        code,
        INVALID_ARGUMENT | NOT_FOUND | PERMISSION_DENIED | FAILED_PRECONDITION | UNAUTHENTICATED
    )
}

/// A lease call's failure: NotFound is the lease; the rest as the client classifies.
fn lease_error(e: CallError) -> EtcdError {
    match e {
        CallError::Final(NOT_FOUND, _) => EtcdError::LeaseNotFound,
        CallError::Final(INVALID_ARGUMENT, m) if !m.contains("authentication failed") => {
            if is_token_message(&m) {
                EtcdError::AuthRejected(m)
            } else {
                EtcdError::BadAnswer(m)
            }
        }
        CallError::Final(_, m) => EtcdError::AuthRejected(m),
        CallError::Other(e) => e,
    }
}

fn is_token_message(m: &str) -> bool {
    m.contains("user name is empty")
        || m.contains("invalid auth token")
        || m.contains("revision of auth store is old")
}

/// A keepalive's TTL: an in-stream error is classified like a unary one; no `TTL`
/// means the lease is gone.
fn keepalive_ttl(m: &Map<String, Value>) -> Result<i64, EtcdError> {
    if let Some(err) = m.get("error").and_then(Value::as_object) {
        let code = int64(err.get("grpc_code"));
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        return Err(if is_final(code) {
            lease_error(CallError::Final(code, message))
        } else {
            EtcdError::Unavailable(format!("lease keepalive: code {code}: {message}"))
        });
    }
    let ttl = m.get("result").and_then(|r| r.get("TTL"));
    Ok(int64(ttl))
}

/// An int64 as the gateway writes it (a string) or as a number; absent is zero.
fn int64(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}
