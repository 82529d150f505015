//! Auth as etcd 3.4 with simple tokens: `/v3/auth/authenticate` and the token check.
//!
//! What real etcd does (and so this does): a token is `<16 letters>.<index>`, sent raw in
//! the `Authorization` header; it expires after `--auth-token-ttl` of *idle* time (each
//! use extends it). With auth on, KV calls without a token fail "user name is empty"
//! (400/3) and any call carrying an unknown or expired token fails "invalid auth token"
//! (401/16) — even with auth off. Lease grant/revoke only check a token if one is sent;
//! keepalive, timetolive and leases never look at it. Every configured user may do
//! everything (as root would); roles are out of scope.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

use crate::body::read_body;
use crate::codec::{self, Header};
use crate::decode::wire::Str;
use crate::error::EtcdError;
use crate::locking::lock;
use crate::state::Shared;

fn token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("grpc-metadata-token")
        .or_else(|| headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
}

/// Validate the token if one was sent; answers its user.
pub fn check_token(shared: &Shared, headers: &HeaderMap) -> Result<Option<String>, EtcdError> {
    lock(&shared.auth).check(token(headers), shared.now())
}

/// With auth on, a call that touches keys needs a user.
pub fn need_user(shared: &Shared, user: Option<String>) -> Result<(), EtcdError> {
    if user.is_none() && lock(&shared.auth).enabled() {
        return Err(EtcdError::user_empty());
    }
    Ok(())
}

pub fn require_user(shared: &Shared, headers: &HeaderMap) -> Result<(), EtcdError> {
    let user = check_token(shared, headers)?;
    need_user(shared, user)
}

/// The auth outcome a watch stream's creates report in their cancel reason.
pub fn watch_access(shared: &Shared, headers: &HeaderMap) -> Result<(), EtcdError> {
    require_user(shared, headers)
}

#[derive(Default)]
struct AuthenticateRequest {
    name: String,
    password: String,
}

crate::message!(AuthenticateRequest { b"name" => name: Str, b"password" => password: Str });

#[derive(Serialize)]
struct AuthenticateResponse {
    header: Header,
    token: String,
}

pub async fn authenticate(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: AuthenticateRequest = crate::decode::parse(&body)?;
    check_token(&shared, &headers)?;
    let token = lock(&shared.auth).authenticate(&req.name, &req.password, shared.now())?;
    let rev = shared.store().rev;
    shared
        .events
        .emit("authenticated", serde_json::json!({ "user": req.name }));
    let resp = AuthenticateResponse {
        header: shared.header(rev),
        token,
    };
    Ok(codec::ok(serde_json::to_string(&resp).unwrap_or_default()))
}
