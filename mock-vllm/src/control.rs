//! The `/_mock/*` control API: the same operations as the [`crate::MockVllm`] methods, for
//! scenarios and people with curl. Faults come from `mock_kit::FaultRegistry::routes`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::clock::Now;
use crate::health::Health;
use crate::process::cpu_seconds;
use crate::state::Shared;
use crate::waveform::Waveform;

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/_mock/state", get(state))
        .route("/_mock/health", post(health))
        .route("/_mock/counter_reset", post(counter_reset))
        .route("/_mock/gauges", post(override_gauge).delete(clear_gauges))
        .route("/_mock/crash", post(crash))
        .route("/_mock/reset", post(reset))
        .with_state(shared.clone())
        .merge(shared.faults.routes())
}

async fn state(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(shared.state_json(Now::read()))
}

#[derive(Deserialize)]
struct HealthBody {
    mode: Health,
}

async fn health(State(shared): State<Arc<Shared>>, Json(b): Json<HealthBody>) -> StatusCode {
    shared.set_health(b.mode);
    StatusCode::NO_CONTENT
}

async fn counter_reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.counter_reset(Now::read(), cpu_seconds());
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct GaugeBody {
    name: String,
    waveform: Waveform,
}

async fn override_gauge(State(shared): State<Arc<Shared>>, Json(b): Json<GaugeBody>) -> StatusCode {
    shared.override_gauge(&b.name, b.waveform, Now::read());
    StatusCode::NO_CONTENT
}

async fn clear_gauges(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.clear_overrides();
    StatusCode::NO_CONTENT
}

#[derive(Deserialize, Default)]
struct CrashBody {
    #[serde(default)]
    restart_after_ms: Option<u64>,
}

/// Answers 202 at once; the crash happens 20 ms later (so this answer gets out), the
/// restart `restart_after_ms` after that.
async fn crash(State(shared): State<Arc<Shared>>, body: Option<Json<CrashBody>>) -> Response {
    let restart_after = body
        .and_then(|Json(b)| b.restart_after_ms)
        .map(Duration::from_millis);
    shared.request_crash(restart_after);
    (StatusCode::ACCEPTED, Json(json!({"crashing": true, "restart_after_ms": restart_after.map(|d| d.as_millis() as u64)})))
        .into_response()
}

async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.reset(Now::read(), cpu_seconds());
    StatusCode::NO_CONTENT
}
