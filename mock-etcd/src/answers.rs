//! The answer messages of the lease and auth APIs, in etcd's field order and JSON
//! dialect (the KV answers are with their rules in `kv_ops`, the watch answer in
//! `watchers`).
//!
//! Why a module of their own: the core builds them and the keepalive stream frames
//! them; neither should own the other's shapes.

use serde::Serialize;

use crate::codec::{is_zero, ser_b64_list, ser_i64, Header};

/// `LeaseGrantResponse`, also the `result` of a keepalive line.
#[derive(Serialize, Debug)]
pub struct GrantResponse {
    pub header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub ttl: i64,
}

/// One line of the keepalive stream: `{"result":…}`.
#[derive(Serialize, Debug)]
pub struct KeepAliveLine {
    pub result: GrantResponse,
}

impl KeepAliveLine {
    /// The line as streamed, newline included.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

#[derive(Serialize, Debug)]
pub struct TimeToLiveResponse {
    pub header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub ttl: i64,
    #[serde(
        rename = "grantedTTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub granted: i64,
    #[serde(serialize_with = "ser_b64_list", skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<Vec<u8>>,
}

#[derive(Serialize, Debug)]
pub struct LeasesResponse {
    pub header: Header,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<LeaseStatus>,
}

#[derive(Serialize, Debug)]
pub struct LeaseStatus {
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
}

/// Answers that carry nothing but the header (revoke, compaction).
#[derive(Serialize, Debug)]
pub struct HeaderOnly {
    pub header: Header,
}

#[derive(Serialize, Debug)]
pub struct AuthenticateResponse {
    pub header: Header,
    pub token: String,
}
