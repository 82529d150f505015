//! The gateway's JSON dialect on the way out (golang/protobuf `jsonpb` with original
//! field names); reading requests is [`crate::decode`].
//!
//! Why a module of its own: every quirk of an answer lives here. 64-bit integers are
//! written as strings; bytes as standard base64; zero values are omitted; every answer
//! carries the gateway's headers.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::{Serialize, Serializer};

/// The CORS headers etcd's gateway puts on every answer.
pub fn cors(h: &mut HeaderMap) {
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("accept, content-type, authorization"),
    );
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
    );
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
}

/// A successful unary answer: JSON body with the gateway's headers.
pub fn ok(body: String) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        "grpc-metadata-content-type",
        HeaderValue::from_static("application/grpc"),
    );
    cors(h);
    resp
}

/// The `header` of every response.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Header {
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub cluster_id: u64,
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub member_id: u64,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub revision: i64,
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub raft_term: u64,
}

impl Header {
    /// The short header of responses nested in a txn: only the revision.
    pub fn nested(revision: i64) -> Header {
        Header {
            cluster_id: 0,
            member_id: 0,
            revision,
            raft_term: 0,
        }
    }
}

pub fn is_zero(v: &i64) -> bool {
    *v == 0
}
pub fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
pub fn is_false(v: &bool) -> bool {
    !*v
}

// The digits as `Display` writes them, through a stack buffer (every answer has several).
pub fn ser_i64<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(itoa::Buffer::new().format(*v))
}
pub fn ser_u64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(itoa::Buffer::new().format(*v))
}
/// Bytes as base64, written straight into the serializer (a watch line carries every
/// key and value it reports this way, so no string is built for each).
pub fn ser_b64<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    let standard = &base64::engine::general_purpose::STANDARD;
    s.collect_str(&base64::display::Base64Display::new(v, standard))
}
pub fn ser_b64_list<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|k| b64(k)))
}

pub fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(v)
}

/// A 200 streaming answer with the gateway's headers.
pub fn stream_response(body: axum::body::Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        "grpc-metadata-content-type",
        HeaderValue::from_static("application/grpc"),
    );
    cors(h);
    resp
}
