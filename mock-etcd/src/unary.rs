//! The HTTP side of the unary calls (KV, lease grant/revoke/timetolive/leases,
//! authenticate): read the capped body, decode it outside the lock, let the core
//! answer under it, report what happened.
//!
//! Why a module of its own: every unary path is the same few steps around
//! [`crate::calls`]; the rules (and the order of checks) are the core's.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::body::read_body;
use crate::calls::Call;
use crate::codec;
use crate::state::Shared;

/// Serve one unary call.
pub async fn serve(call: Call, shared: Arc<Shared>, headers: HeaderMap, body: Body) -> Response {
    let body = match read_body(&shared, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let req = match call.decode(&body) {
        Ok(r) => r,
        Err(e) => return e.untrailed(),
    };
    let token = crate::auth::token(&headers);
    let now = shared.now();
    let outcome = shared.core().apply(req, token, now);
    match outcome {
        Ok(reply) => {
            if let Some(r) = &reply.report {
                shared.events.emit_event(r);
            }
            codec::ok(reply.body)
        }
        Err(e) => e.into_response(),
    }
}
