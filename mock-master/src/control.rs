//! The control API under `/_mock/` (the same operations exist as methods on
//! [`crate::MockMaster`]): state, restart, token rotation, faults, watch pause.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::server::AppState;
use crate::MockMaster;

/// What the master can be told to do wrong (`POST /_mock/faults`, with optional
/// `count` and `duration_ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Answer heartbeats with this status (and the body the real master sends with it),
    /// without looking at them.
    HeartbeatStatus { status: u16 },
    /// Delay each heartbeat answer by this much.
    Latency { ms: u64 },
}

pub fn routes(state: AppState) -> Router {
    let faults = state.faults.routes::<()>();
    Router::new()
        .route("/_mock/state", get(show))
        .route("/_mock/restart", post(restart))
        .route("/_mock/token", post(token))
        .route("/_mock/watch/pause", post(pause))
        .route("/_mock/watch/resume", post(resume))
        .route("/_mock/reset", post(reset))
        .with_state(state)
        .merge(faults)
}

fn handle(s: AppState) -> MockMaster {
    MockMaster { shared: s }
}

async fn show(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(handle(s).state_json())
}

#[derive(Debug, Default, Deserialize)]
struct RestartBody {
    #[serde(default)]
    relist: Option<bool>,
}

async fn restart(State(s): State<AppState>, body: axum::body::Bytes) -> Response {
    let relist = if body.is_empty() {
        true
    } else {
        match serde_json::from_slice::<RestartBody>(&body) {
            Ok(b) => b.relist.unwrap_or(true),
            Err(e) => return bad_body("restart", e),
        }
    };
    handle(s).restart_with(relist).await;
    Json(json!({"ok": true, "relist": relist})).into_response()
}

/// `{"token":"..."}` sets the token, `{"token":null}` turns the check off; the field
/// must be there (`{}` is an error, so a typo cannot switch the check off).
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

async fn token(State(s): State<AppState>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<TokenBody>(&body) {
        Ok(b) => {
            handle(s).set_token(b.token);
            Json(json!({"ok": true})).into_response()
        }
        Err(e) => bad_body("token", e),
    }
}

async fn pause(State(s): State<AppState>) -> Json<serde_json::Value> {
    handle(s).pause_watch();
    Json(json!({"ok": true}))
}

async fn resume(State(s): State<AppState>) -> Json<serde_json::Value> {
    handle(s).resume_watch();
    Json(json!({"ok": true}))
}

async fn reset(State(s): State<AppState>) -> Json<serde_json::Value> {
    handle(s).reset();
    Json(json!({"ok": true}))
}
