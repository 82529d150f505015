//! The `/_mock/` control API: the same operations as the [`crate::MockEtcd`] methods,
//! for a scenario or a person with curl.
//!
//! `GET /_mock/state`, `GET /_mock/requests`, `GET|POST|DELETE /_mock/faults[/{id}]`,
//! `POST /_mock/leases/{id}/expire`, `POST /_mock/leases/expire_all`,
//! `POST /_mock/lose_data {"reset_revision":bool}`, `POST /_mock/release`,
//! `POST /_mock/watches/close`, `POST /_mock/reset`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::event::EtcdEvent;
use crate::lease;
use crate::state::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    let faults = shared.faults.routes::<()>();
    Router::new()
        .route("/_mock/state", get(get_state))
        .route("/_mock/requests", get(get_requests))
        .route("/_mock/leases/expire_all", post(expire_all))
        .route("/_mock/leases/{id}/expire", post(expire_one))
        .route("/_mock/lose_data", post(post_lose_data))
        .route("/_mock/release", post(release))
        .route("/_mock/watches/close", post(close_watches))
        .route("/_mock/reset", post(post_reset))
        .with_state(shared)
        .merge(faults)
}

/// Keys (decoded), leases with remaining TTL, revision, watchers, auth.
pub fn state(shared: &Shared) -> serde_json::Value {
    let now = shared.now();
    shared.core().snapshot(now)
}

pub fn lose_data(shared: &Shared, reset_revision: bool) {
    shared
        .core()
        .lose_data(reset_revision, mock_kit::events::now_ms());
    shared.close_streams();
    shared
        .events
        .emit_event(&EtcdEvent::DataLost { reset_revision });
}

pub fn reset(shared: &Shared) {
    shared.faults.clear();
    shared.release.send_modify(|g| *g += 1);
    shared.core().lose_data(true, mock_kit::events::now_ms());
    shared.close_streams();
    shared.journal.clear();
    shared.events.emit_event(&EtcdEvent::Reset);
}

async fn get_state(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(state(&shared))
}

async fn get_requests(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "requests": shared.journal.snapshot() }))
}

async fn expire_one(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<i64>,
) -> (StatusCode, Json<serde_json::Value>) {
    if lease::expire(&shared, id) {
        (StatusCode::OK, Json(serde_json::json!({ "expired": id })))
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": "no such lease", "id": id })),
        )
    }
}

async fn expire_all(State(shared): State<Arc<Shared>>) -> StatusCode {
    lease::expire_all(&shared);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LoseData {
    reset_revision: bool,
}

async fn post_lose_data(
    State(shared): State<Arc<Shared>>,
    body: axum::body::Bytes,
) -> (StatusCode, Json<serde_json::Value>) {
    let req: LoseData = if body.trim_ascii().is_empty() {
        LoseData::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(serde_json::json!({ "error": format!("bad body: {e}") })),
                )
            }
        }
    };
    lose_data(&shared, req.reset_revision);
    (
        StatusCode::OK,
        Json(serde_json::json!({ "reset_revision": req.reset_revision })),
    )
}

async fn release(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.release.send_modify(|g| *g += 1);
    StatusCode::NO_CONTENT
}

async fn close_watches(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.close_streams();
    shared.events.emit_event(&EtcdEvent::WatchesClosed);
    StatusCode::NO_CONTENT
}

async fn post_reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    reset(&shared);
    StatusCode::NO_CONTENT
}
