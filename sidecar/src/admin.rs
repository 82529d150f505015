//! The optional admin endpoint (`--admin-listen`): probes for the orchestrator and the
//! sidecar's own metrics.
//!
//! - `GET /healthz`: 200 while the process runs (liveness);
//! - `GET /readyz`: 200 with the key and incarnation while registered, else 503;
//! - `GET /metrics`: the sidecar's counters and gauges (OpenMetrics text).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::lifecycle::Status;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// What the handlers read.
#[derive(Clone)]
pub struct AdminState {
    pub telemetry: Arc<Telemetry>,
    pub status: watch::Receiver<Status>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let status = state.status.borrow().clone();
    match status.registration {
        Some(r) => (
            StatusCode::OK,
            Json(json!({
                "registered": true,
                "key": r.key,
                "incarnation_id": r.incarnation,
                "lease": r.lease.to_string(),
                "vllm_healthy": status.healthy,
            })),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"registered": false, "vllm_healthy": status.healthy})),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.telemetry.encode(),
    )
        .into_response()
}

/// Serve until `shutdown` fires.
pub async fn serve(listener: TcpListener, state: AdminState, mut shutdown: Shutdown) {
    let app = router(state);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "admin endpoint stopped");
    }
}
