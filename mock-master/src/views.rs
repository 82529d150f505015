//! The master's read-only internal pages: `GET /v1/internal/instances` and
//! `GET /metrics`.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

pub async fn instances(State(s): State<AppState>) -> Response {
    axum::Json(serde_json::json!({ "instances": s.registry.views() })).into_response()
}

pub async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.metrics.render(&s.registry.counts());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
