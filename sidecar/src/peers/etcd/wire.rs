//! The gateway's messages as its JSON writes them: one serde struct per request and
//! answer, the gateway paths, and etcd's error codes.
//!
//! int64 fields (`ID`, `TTL`, revisions) travel as JSON strings; proto3 JSON omits zero
//! fields, so every answer field has a default.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub const GRANT: &str = "/v3/lease/grant";
pub const KEEPALIVE: &str = "/v3/lease/keepalive";
pub const REVOKE: &str = "/v3/lease/revoke";
pub const PUT: &str = "/v3/kv/put";
pub const RANGE: &str = "/v3/kv/range";
pub const AUTHENTICATE: &str = "/v3/auth/authenticate";
/// Every path a call uses: each endpoint's URLs are joined once, at start-up.
pub const PATHS: [&str; 6] = [GRANT, KEEPALIVE, REVOKE, PUT, RANGE, AUTHENTICATE];

pub const GRPC_INVALID_ARGUMENT: i64 = 3;
pub const GRPC_NOT_FOUND: i64 = 5;
pub const GRPC_PERMISSION_DENIED: i64 = 7;
pub const GRPC_FAILED_PRECONDITION: i64 = 9;
pub const GRPC_UNAUTHENTICATED: i64 = 16;

/// A call the sidecar makes, as a value: what a transport needs is its [`path`] and
/// [`body`] (the JSON the gateway reads: key and value base64, int64 as strings, a zero
/// lease left out).
///
/// [`path`]: EtcdRequest::path
/// [`body`]: EtcdRequest::body
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdRequest {
    Grant {
        ttl: i64,
    },
    Keepalive {
        lease: i64,
    },
    Revoke {
        lease: i64,
    },
    /// `key` = `value`, attached to `lease` (0: none).
    Put {
        key: String,
        value: String,
        lease: i64,
    },
    /// The value at one key.
    Range {
        key: String,
    },
}

impl EtcdRequest {
    pub fn path(&self) -> &'static str {
        match self {
            EtcdRequest::Grant { .. } => GRANT,
            EtcdRequest::Keepalive { .. } => KEEPALIVE,
            EtcdRequest::Revoke { .. } => REVOKE,
            EtcdRequest::Put { .. } => PUT,
            EtcdRequest::Range { .. } => RANGE,
        }
    }

    /// The JSON body, as the gateway reads it.
    pub fn body(&self) -> String {
        let encoded = match self {
            EtcdRequest::Grant { ttl } => serde_json::to_string(&LeaseGrantRequest { ttl: *ttl }),
            EtcdRequest::Keepalive { lease } | EtcdRequest::Revoke { lease } => {
                serde_json::to_string(&LeaseIdRequest { id: *lease })
            }
            EtcdRequest::Put { key, value, lease } => serde_json::to_string(&PutRequest {
                key: B64.encode(key),
                value: B64.encode(value),
                lease: *lease,
            }),
            EtcdRequest::Range { key } => serde_json::to_string(&RangeRequest {
                key: B64.encode(key),
            }),
        };
        // These structs of strings and integers always serialize.
        encoded.unwrap_or_default()
    }
}

#[derive(Serialize)]
struct LeaseGrantRequest {
    #[serde(rename = "TTL", serialize_with = "int64_out")]
    ttl: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct LeaseGrantAnswer {
    #[serde(rename = "ID", deserialize_with = "int64_in")]
    pub id: i64,
    pub error: String,
}

/// The request of keepalive and of revoke.
#[derive(Serialize)]
struct LeaseIdRequest {
    #[serde(rename = "ID", serialize_with = "int64_out")]
    id: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeepaliveAnswer {
    pub result: Option<KeepaliveResult>,
    /// A streaming call's error comes inside a 200 answer.
    pub error: Option<StreamError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeepaliveResult {
    #[serde(rename = "TTL", deserialize_with = "int64_in")]
    pub ttl: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct StreamError {
    pub grpc_code: i64,
    pub message: String,
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
pub struct RangeAnswer {
    pub kvs: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeyValue {
    pub value: String,
}

#[derive(Serialize)]
pub struct AuthenticateRequest<'a> {
    pub name: &'a str,
    pub password: &'a str,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AuthenticateAnswer {
    pub token: String,
}

/// Any answer whose content the call does not need (put, revoke).
#[derive(Deserialize, Default)]
pub struct Ignored {}

/// etcd's error body of a unary call.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ErrorBody {
    #[serde(deserialize_with = "int64_in")]
    pub code: i64,
    pub message: String,
    pub error: String,
}

impl ErrorBody {
    pub fn text(&self) -> String {
        if self.message.is_empty() {
            self.error.clone()
        } else {
            self.message.clone()
        }
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
