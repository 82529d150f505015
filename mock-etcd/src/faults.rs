//! Faults a scenario can arm: fail, delay or hang the requests of a path.
//!
//! `path` is an etcd path in either spelling (`/v3/kv/put` also matches
//! `/v3beta/kv/put`), a prefix ending in `*` (`/v3/lease/*`), or `*` for every path.
//! Faults are armed through [`mock_kit::FaultRegistry`] (count and duration limits,
//! `POST /_mock/faults`); `crate::fault_layer` applies the first armed one that matches.

use serde::{Deserialize, Serialize};

use crate::error::EtcdError;

fn default_status() -> u16 {
    503
}
fn default_code() -> u32 {
    14
}
fn default_message() -> String {
    "etcdserver: request timed out".to_string()
}

/// What to do wrong. Serialized with a `kind` tag:
/// `{"kind":"fail","path":"/v3/kv/put","status":503,"grpc_code":14,"message":"…"}`,
/// `{"kind":"latency","path":"/v3/lease/keepalive","ms":1500}`, `{"kind":"hang","path":"*"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Answer an etcd-shaped error instead of serving.
    Fail {
        path: String,
        #[serde(default = "default_status")]
        status: u16,
        #[serde(default = "default_code")]
        grpc_code: u32,
        #[serde(default = "default_message")]
        message: String,
    },
    /// Serve, after a delay.
    Latency { path: String, ms: u64 },
    /// Hold the request until released (`POST /_mock/release`) or the fake stops.
    Hang { path: String },
}

impl Fault {
    pub fn path(&self) -> &str {
        match self {
            Fault::Fail { path, .. } | Fault::Latency { path, .. } | Fault::Hang { path } => path,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Fault::Fail { .. } => "fail",
            Fault::Latency { .. } => "latency",
            Fault::Hang { .. } => "hang",
        }
    }

    /// Whether this fault applies to a request path.
    pub fn matches(&self, request_path: &str) -> bool {
        path_matches(self.path(), request_path)
    }
}

/// What a matching fault makes of a request: the decision only; whoever serves the
/// request (the HTTP shell, a simulator) applies it.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultDecision {
    /// Answer this error instead of serving.
    Fail(EtcdError),
    /// Serve after this delay.
    Delay(std::time::Duration),
    /// Hold the request until released.
    Hang,
}

impl Fault {
    pub fn decision(&self) -> FaultDecision {
        match self {
            Fault::Fail {
                status,
                grpc_code,
                message,
                ..
            } => {
                let status = axum::http::StatusCode::from_u16(*status)
                    .unwrap_or(axum::http::StatusCode::SERVICE_UNAVAILABLE);
                FaultDecision::Fail(EtcdError::new(status, *grpc_code, message.clone()))
            }
            Fault::Latency { ms, .. } => {
                FaultDecision::Delay(std::time::Duration::from_millis(*ms))
            }
            Fault::Hang { .. } => FaultDecision::Hang,
        }
    }
}

/// The first armed fault that matches `path` (counting it as fired).
pub fn pick(faults: &mock_kit::FaultRegistry<Fault>, path: &str) -> Option<Fault> {
    faults.fire(|f| f.matches(path).then(|| f.clone()))
}

/// `/v3beta/x` is `/v3/x`.
fn canonical(p: &str) -> std::borrow::Cow<'_, str> {
    match p.strip_prefix("/v3beta/") {
        Some(rest) => format!("/v3/{rest}").into(),
        None => p.into(),
    }
}

pub fn path_matches(pattern: &str, request_path: &str) -> bool {
    if pattern == "*" || pattern.is_empty() {
        return true;
    }
    let pat = canonical(pattern);
    let req = canonical(request_path);
    match pat.strip_suffix('*') {
        Some(prefix) => req.starts_with(prefix),
        None => pat.trim_end_matches('/') == req.trim_end_matches('/'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_both_spellings_and_prefixes() {
        assert!(path_matches("/v3/kv/put", "/v3beta/kv/put"));
        assert!(path_matches("/v3beta/kv/put", "/v3/kv/put"));
        assert!(!path_matches("/v3/kv/put", "/v3/kv/range"));
        assert!(path_matches("/v3/lease/*", "/v3beta/lease/keepalive"));
        assert!(path_matches("*", "/health"));
    }

    #[test]
    fn serde_shape() {
        let f: Fault = serde_json::from_str(r#"{"kind":"fail","path":"/v3/kv/put"}"#).unwrap();
        assert_eq!(
            f,
            Fault::Fail {
                path: "/v3/kv/put".into(),
                status: 503,
                grpc_code: 14,
                message: "etcdserver: request timed out".into()
            }
        );
        let v = serde_json::to_value(Fault::Latency {
            path: "*".into(),
            ms: 5,
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"kind":"latency","path":"*","ms":5}));
    }
}
