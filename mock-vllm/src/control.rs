//! The `/_mock/*` control API: the same operations as the [`MockVllm`] methods, for
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

use crate::server::{Health, MockVllm, Shared};
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

fn handle(shared: &Arc<Shared>) -> MockVllm {
    MockVllm::from_shared(shared.clone())
}

async fn state(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(handle(&shared).state())
}

#[derive(Deserialize)]
struct HealthBody {
    mode: Health,
}

async fn health(State(shared): State<Arc<Shared>>, Json(b): Json<HealthBody>) -> StatusCode {
    handle(&shared).set_health(b.mode);
    StatusCode::NO_CONTENT
}

async fn counter_reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    handle(&shared).counter_reset();
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct GaugeBody {
    name: String,
    waveform: Waveform,
}

async fn override_gauge(State(shared): State<Arc<Shared>>, Json(b): Json<GaugeBody>) -> StatusCode {
    handle(&shared).override_gauge(&b.name, b.waveform);
    StatusCode::NO_CONTENT
}

async fn clear_gauges(State(shared): State<Arc<Shared>>) -> StatusCode {
    handle(&shared).clear_overrides();
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
    let h = handle(&shared);
    let stopped = shared.stopped.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = stopped.wait() => {}
            _ = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                h.crash().await;
                if let Some(d) = restart_after {
                    tokio::time::sleep(d).await;
                    if let Err(e) = h.restart().await {
                        tracing::error!(error = %e, "mock-vllm: restart after crash failed");
                    }
                }
            } => {}
        }
    });
    (StatusCode::ACCEPTED, Json(json!({"crashing": true, "restart_after_ms": restart_after.map(|d| d.as_millis() as u64)})))
        .into_response()
}

async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    handle(&shared).reset();
    StatusCode::NO_CONTENT
}
