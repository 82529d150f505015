//! The router: which handler serves which path, the instrumentation layer, and the
//! control API when configured. Wiring only; the handlers live in their own modules.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::state::Shared;
use crate::{control, info, instrument, openai, scrape, sleep};

/// Every route of a server; the control API only when configured.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let serving = Router::new()
        .route("/health", get(info::health))
        .route("/v1/models", get(info::models))
        .route("/version", get(info::version))
        .route("/metrics", get(scrape::metrics))
        .route("/sleep", post(sleep::sleep))
        .route("/wake_up", post(sleep::wake_up))
        .route("/is_sleeping", get(sleep::is_sleeping))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            instrument::instrument,
        ))
        .with_state(shared.clone());
    let serving = mock_kit::freeze::hold_requests(serving, &shared.freeze);
    let router = if shared.cfg.control {
        serving.merge(control::routes(shared))
    } else {
        serving
    };
    router.fallback(not_found)
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response()
}
