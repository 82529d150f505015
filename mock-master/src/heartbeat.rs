//! `POST /v1/internal/heartbeat` (docs/contract.md §3): the checks in the master's order.
//!
//! token (401; a repeated header is joined with `,` as brpc joins it, so two copies
//! never pass) →
//! body size (413) → protobuf-JSON body (400) → name (400) → known name
//! and tracked incarnation (409) → 200 and the metrics are stored. Armed faults (a
//! chosen status, added latency) act before all of that.

use crate::auth;
use crate::beat::{self, Answer};
use crate::body::{self, BodyError};
use crate::event::MasterEvent;
use crate::gate;
use crate::heartbeat_event::HeartbeatEvent;
use crate::pbjson::HeartbeatRequest;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

pub async fn handle(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let now = s.registry.now();
    let (delay, refusal) = gate::check(
        &s.token,
        &s.faults,
        now,
        auth::presented(&headers).as_deref(),
    );
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if let Some(r) = refusal.filter(|r| r.fault) {
        s.count_heartbeat(r.status);
        s.events.emit_event(&MasterEvent::Heartbeat {
            beat: HeartbeatEvent {
                status: r.status,
                name: None,
                fault: true,
            },
            request: None,
        });
        return answer(r.status, r.body);
    }
    let (status, body, request) = match refusal {
        Some(r) => (r.status, r.body, None),
        None => check(&s, &headers, body).await,
    };
    s.count_heartbeat(status);
    s.events.emit_event(&MasterEvent::Heartbeat {
        beat: HeartbeatEvent {
            status,
            name: request.as_ref().map(|r| r.name.as_str()),
            fault: false,
        },
        request: request.as_ref(),
    });
    answer(status, body)
}

fn answer(status: u16, body: &'static str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The heartbeat past the gate: size, body, verdict. Answers the status, the body and
/// the decoded request (when the body was read that far).
async fn check(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> (u16, &'static str, Option<HeartbeatRequest>) {
    let refuse = |a: Answer| (a.status(), a.body(), None);
    let cap = s.config.max_body_bytes;
    if body::declares_more_than(headers, cap) {
        return refuse(Answer::TooLarge);
    }
    let bytes = match body::read_capped(body, cap).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return refuse(Answer::TooLarge),
        Err(BodyError::Unreadable) => return refuse(Answer::InvalidJson),
    };
    let req = match beat::read_request(&bytes) {
        Ok(r) => r,
        Err(a) => return refuse(a),
    };
    let reply = s.registry.heartbeat(&req);
    (reply.status, reply.body, Some(req))
}
