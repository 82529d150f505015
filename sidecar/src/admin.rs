//! The optional admin endpoint (`--admin-listen`): probes for the orchestrator, the
//! sidecar's own metrics, and drain control for rolling upgrades.
//!
//! - `GET /healthz`: 200 while the driver makes progress; 503 once it has made none for
//!   more than twice the longest period plus the longest timeout (a wedged sidecar is
//!   restarted instead of silently letting its lease lapse);
//! - `GET /readyz`: 200 with the key and incarnation while registered, else 503 (saying
//!   `draining` during a drain);
//! - `GET /metrics`: the sidecar's counters, gauges and histograms (OpenMetrics text);
//! - `POST /drain`, `POST /undrain`: revoke the lease and stay deregistered / register
//!   again. The endpoint is reachable from the pod network, so these are refused (403)
//!   unless the peer is loopback or the request carries the `--internal-token` as
//!   `X-Internal-Token`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Secret;
use crate::core::Status;
use crate::driver::{Liveness, Requests};
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// What the handlers read and whom they tell.
#[derive(Clone)]
pub struct AdminState {
    pub telemetry: Arc<Telemetry>,
    pub status: watch::Receiver<Status>,
    pub liveness: Liveness,
    pub requests: Requests,
    /// Lets a non-loopback caller drain/undrain; empty: loopback only.
    pub token: Secret,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/drain", post(drain))
        .route("/undrain", post(undrain))
        .with_state(state)
}

async fn healthz(State(state): State<AdminState>) -> Response {
    if state.liveness.is_alive() {
        "ok\n".into_response()
    } else {
        let idle = state.liveness.idle().as_secs_f64();
        let text = format!("stalled: no progress for {idle:.1} s\n");
        (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
    }
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
        None => {
            let mut body = json!({"registered": false, "vllm_healthy": status.healthy});
            if status.draining {
                body["state"] = json!("draining");
            }
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
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

async fn drain(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    control(&state, peer, &headers, Requests::drain, "draining\n")
}

async fn undrain(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    control(&state, peer, &headers, Requests::undrain, "undraining\n")
}

/// Pass on a drain or undrain request if the caller may make it: from loopback, or with
/// the internal token (when one is configured).
fn control(
    state: &AdminState,
    peer: SocketAddr,
    headers: &HeaderMap,
    request: fn(&Requests),
    done: &'static str,
) -> Response {
    let sent = headers
        .get("x-internal-token")
        .and_then(|v| v.to_str().ok());
    let token = !state.token.is_empty() && sent == Some(state.token.expose());
    if !peer.ip().is_loopback() && !token {
        let text = "drain control needs loopback or X-Internal-Token\n";
        return (StatusCode::FORBIDDEN, text).into_response();
    }
    request(&state.requests);
    (StatusCode::ACCEPTED, done).into_response()
}

/// Serve until `shutdown` fires.
pub async fn serve(listener: TcpListener, state: AdminState, mut shutdown: Shutdown) {
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "admin endpoint stopped");
    }
}
