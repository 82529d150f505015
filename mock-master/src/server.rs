//! The router: which handler serves which route, and the body cap of each group. Only
//! wiring; the handlers live in their own modules.

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};

use crate::body::{refuse_declared, Guard};
use crate::state::AppState;
use crate::{error, views};

/// All routes: the master's API, plus the control API unless disabled. Every route is
/// capped at `max_body_bytes` (see [`crate::body`]): the heartbeat checks its token
/// first and then reads capped; every other group refuses a declared oversized body
/// before its handler runs, in its own error shape.
pub fn router(state: AppState) -> Router {
    let cap = state.config.max_body_bytes;
    let guard = |refusal| middleware::from_fn_with_state(Guard { cap, refusal }, refuse_declared);
    let mut internal = Router::new()
        .route("/v1/internal/instances", get(views::instances))
        .route("/metrics", get(views::metrics))
        .with_state(state.clone());
    if state.config.control {
        internal = internal.merge(crate::control::routes(state.clone()));
    }
    let openai = crate::routing::routes()
        .with_state(state.clone())
        .layer(guard(error::openai_too_large));
    let router = Router::new()
        .route("/v1/internal/heartbeat", post(crate::heartbeat::handle))
        .with_state(state.clone())
        .merge(internal.layer(guard(error::internal_too_large)))
        .merge(openai)
        .layer(DefaultBodyLimit::max(cap));
    let freeze = state.freeze.clone();
    mock_kit::freeze::hold_requests(router, &freeze)
}
