//! `POST /v1/internal/heartbeat` (docs/contract.md §3): the checks in the master's order.
//!
//! token (401; a repeated header is joined with `,` as brpc joins it, so two copies
//! never pass) →
//! body size (413) → protobuf-JSON body (400) → name (400) → known name
//! and tracked incarnation (409) → 200 and the metrics are stored. Armed faults (a
//! chosen status, added latency) act before all of that.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth;
use crate::beat::{self, Answer};
use crate::body::{self, BodyError};
use crate::gate;
use crate::heartbeat_event::HeartbeatEvent;
use crate::state::AppState;

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
        let ev = HeartbeatEvent {
            status: r.status,
            name: None,
            fault: true,
        };
        s.events.emit(HeartbeatEvent::KIND, ev.detail());
        return answer(r.status, r.body);
    }
    let (status, body, name, detail) = match refusal {
        Some(r) => (r.status, r.body, None, None),
        None => check(&s, &headers, body).await,
    };
    s.count_heartbeat(status);
    if s.events.enabled() {
        let ev = HeartbeatEvent {
            status,
            name: name.as_deref(),
            fault: false,
        };
        let mut d = ev.detail();
        if let (Some(obj), Some(extra)) = (d.as_object_mut(), detail) {
            obj.extend(extra);
        }
        s.events.emit(HeartbeatEvent::KIND, d);
    }
    answer(status, body)
}

fn answer(status: u16, body: &'static str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

type Detail = Option<serde_json::Map<String, serde_json::Value>>;

/// The heartbeat past the gate: size, body, verdict. Answers the status, the body,
/// the name (if read) and event detail.
async fn check(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> (u16, &'static str, Option<String>, Detail) {
    let refuse = |a: Answer| (a.status(), a.body(), None, None);
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
    let detail = s.events.enabled().then(|| {
        let mut m = serde_json::Map::new();
        m.insert("incarnation".into(), json!(req.incarnation_id));
        m.insert(
            "waiting_requests_num".into(),
            json!(req.load_metrics.waiting_requests_num),
        );
        m.insert(
            "gpu_cache_usage_perc".into(),
            crate::pbjson::float_json(req.load_metrics.gpu_cache_usage_perc),
        );
        m.insert(
            "recent_max_ttft".into(),
            json!(req.latency_metrics.recent_max_ttft),
        );
        m.insert(
            "recent_max_tbt".into(),
            json!(req.latency_metrics.recent_max_tbt),
        );
        m
    });
    (reply.status, reply.body, Some(req.name), detail)
}
