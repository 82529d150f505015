//! Where the HTTP shell finds the token: etcd 3.4's gateway takes it raw from the
//! `Authorization` header (or grpc-gateway's `Grpc-Metadata-Token`).
//!
//! The rules (simple tokens with an idle TTL, which calls need a user) are the core's:
//! [`crate::tokens`] and [`crate::core::EtcdCore`].

use axum::http::HeaderMap;

/// The token a request carries, if any.
pub fn token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("grpc-metadata-token")
        .or_else(|| headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
}
