//! The control API under `/_mock/` (the same operations exist as methods on
//! [`crate::MockMaster`]): state, role, restart, token rotation, faults, watch pause.
//!
//! Bodies are read with the one capped reader and decoded into typed structs that skip
//! unknown fields unread. The `/_mock/faults` routes answer as `mock_kit`'s shared ones
//! do (`{"id":N}`, 204, 404), with this crate's streaming [`FaultPost`] decoder.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use crate::body::{read_capped, BodyError};
use crate::fault::FaultPost;
use crate::state::AppState;

pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/_mock/state", get(show))
        .route("/_mock/role", get(role))
        .route("/_mock/restart", post(restart))
        .route("/_mock/token", post(token))
        .route("/_mock/watch/pause", post(pause))
        .route("/_mock/watch/resume", post(resume))
        .route("/_mock/reset", post(reset))
        .route(
            "/_mock/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/_mock/faults/{id}", delete(remove_fault))
        .with_state(state)
}

async fn show(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(s.state_json())
}

async fn role(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(s.role_json())
}

#[derive(Debug, Default, Deserialize)]
struct RestartBody {
    #[serde(default)]
    relist: Option<bool>,
}

async fn restart(State(s): State<AppState>, body: Body) -> Response {
    let cap = s.config.max_body_bytes;
    let relist = match read_json::<RestartBody>(body, cap, "restart").await {
        Ok(b) => b.and_then(|b| b.relist).unwrap_or(true),
        Err(refusal) => return refusal,
    };
    s.restart_with(relist).await;
    Json(json!({"ok": true, "relist": relist})).into_response()
}

/// Decode a control body read with the one capped reader: `Ok(None)` when empty; the
/// `Err` is the answer to send (413 past the cap, 400 with the reason otherwise).
async fn read_json<T: DeserializeOwned>(
    body: Body,
    cap: usize,
    what: &str,
) -> Result<Option<T>, Response> {
    let bytes = match read_capped(body, cap).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return Err(crate::error::internal_too_large()),
        Err(BodyError::Unreadable) => return Err(bad_body(what, "could not read it")),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| bad_body(what, e))
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    #[serde(deserialize_with = "Option::deserialize")]
    token: Option<String>,
}

fn bad_body(what: &str, e: impl std::fmt::Display) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": format!("bad {what} body: {e}")})),
    )
        .into_response()
}

async fn token(State(s): State<AppState>, body: Body) -> Response {
    let cap = s.config.max_body_bytes;
    match read_json::<TokenBody>(body, cap, "token").await {
        Ok(Some(b)) => {
            s.set_token(b.token);
            Json(json!({"ok": true})).into_response()
        }
        Ok(None) => bad_body(
            "token",
            "empty; send {\"token\":\"...\"} or {\"token\":null}",
        ),
        Err(refusal) => refusal,
    }
}

async fn pause(State(s): State<AppState>) -> Json<serde_json::Value> {
    s.pause_watch();
    Json(json!({"ok": true}))
}

async fn resume(State(s): State<AppState>) -> Json<serde_json::Value> {
    s.resume_watch();
    Json(json!({"ok": true}))
}

async fn reset(State(s): State<AppState>) -> Json<serde_json::Value> {
    s.reset();
    Json(json!({"ok": true}))
}

async fn list_faults(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({ "faults": s.faults.list() }))
}

async fn add_fault(State(s): State<AppState>, body: Body) -> Response {
    let cap = s.config.max_body_bytes;
    match read_json::<FaultPost>(body, cap, "fault").await {
        Ok(Some(p)) => {
            let duration = p.duration_ms.map(std::time::Duration::from_millis);
            let id = s.faults.add(p.fault, p.count, duration);
            Json(json!({ "id": id })).into_response()
        }
        Ok(None) => bad_body("fault", "empty"),
        Err(refusal) => refusal,
    }
}

async fn clear_faults(State(s): State<AppState>) -> StatusCode {
    s.faults.clear();
    StatusCode::NO_CONTENT
}

async fn remove_fault(State(s): State<AppState>, Path(id): Path<u64>) -> StatusCode {
    if s.faults.remove(id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}
