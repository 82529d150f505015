//! `POST /v1/internal/heartbeat` (contract §3): the checks in the master's order.
//!
//! token (401; a repeated header is joined with `,` as brpc joins it, so two copies
//! never pass) →
//! body size (413) → protobuf-JSON body (400) → name (400) → known name
//! and tracked incarnation (409) → 200 and the metrics are stored. Armed faults (a
//! chosen status, added latency) act before all of that.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::beat::{self, Answer};
use crate::body::{self, BodyError};
use crate::fault::Fault;
use crate::state::AppState;

fn answer(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub async fn handle(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    if let Some(ms) = s.faults.fire(|f| match f {
        Fault::Latency { ms } => Some(*ms),
        _ => None,
    }) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(status) = s.faults.fire(|f| match f {
        Fault::HeartbeatStatus { status } => Some(*status),
        _ => None,
    }) {
        // A final answer must be 2xx..5xx; anything else armed becomes a 500.
        let code = Some(status)
            .filter(|s| (200..=599).contains(s))
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        s.count_heartbeat(code.as_u16());
        s.events
            .emit("heartbeat", json!({"status": code.as_u16(), "fault": true}));
        return answer(code, beat::body_for(code.as_u16()));
    }
    let (status, body, name, detail) = check(&s, &headers, body).await;
    s.count_heartbeat(status.as_u16());
    if s.events.enabled() {
        let mut d = json!({"status": status.as_u16(), "name": name});
        if let (Some(obj), Some(extra)) = (d.as_object_mut(), detail) {
            obj.extend(extra);
        }
        s.events.emit("heartbeat", d);
    }
    answer(status, body)
}

type Detail = Option<serde_json::Map<String, serde_json::Value>>;

fn code(a: Answer) -> StatusCode {
    StatusCode::from_u16(a.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The heartbeat proper: answers the status, the name (if read) and event detail.
async fn check(
    s: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> (StatusCode, &'static str, Option<String>, Detail) {
    let refuse = |a: Answer| (code(a), a.body(), None, None);
    if !s.token.admits(crate::auth::presented(headers).as_deref()) {
        return refuse(Answer::InvalidToken);
    }
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
    let verdict = s.registry.heartbeat(
        &req.name,
        &req.incarnation_id,
        req.load_metrics,
        req.latency_metrics,
    );
    let a = Answer::of(verdict);
    let (status, body) = (code(a), a.body());
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
    (status, body, Some(req.name), detail)
}
