//! The HTTP face of the master: shared state, the one error type, the router.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Router};
use mock_kit::{Events, FaultRegistry, ServerHandle, Shutdown};
use tokio::sync::{mpsc, watch};

use crate::auth::Token;
use crate::body::{refuse_declared, Guard};
use crate::etcd::EtcdClient;
use crate::fault::Fault;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::watch::Command;
use crate::Config;

/// Everything the handlers and the background tasks share.
pub struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
    pub token: Token,
    pub faults: FaultRegistry<Fault>,
    pub events: Events,
    pub etcd: EtcdClient,
    pub heartbeat_counts: StatusCounts,
    pub paused: watch::Sender<bool>,
    pub commands: mpsc::Sender<Command>,
    /// Client for proxied OpenAI requests and model listings.
    pub upstream: reqwest::Client,
    /// Round-robin cursor for ties between equally loaded instances.
    pub rr: AtomicU64,
    pub shutdown: Shutdown,
    pub server: Mutex<Option<ServerHandle>>,
}

pub type AppState = Arc<Shared>;

/// Heartbeat answers by status: one atomic per possible status (100..=599), so
/// counting never takes a lock on the hot path.
pub struct StatusCounts(Vec<AtomicU64>);

impl Default for StatusCounts {
    fn default() -> Self {
        StatusCounts((100..600).map(|_| AtomicU64::new(0)).collect())
    }
}

impl StatusCounts {
    pub fn add(&self, status: u16) {
        if let Some(c) = status
            .checked_sub(100)
            .and_then(|i| self.0.get(usize::from(i)))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> BTreeMap<u16, u64> {
        (100u16..)
            .zip(self.0.iter())
            .map(|(s, c)| (s, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub fn clear(&self) {
        for c in &self.0 {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl Shared {
    pub fn count_heartbeat(&self, status: u16) {
        self.metrics.heartbeat(status);
        self.heartbeat_counts.add(status);
    }

    pub fn heartbeat_counts(&self) -> BTreeMap<u16, u64> {
        self.heartbeat_counts.snapshot()
    }
}

/// The one error type: a status and a JSON body, in one of the two shapes the master
/// uses (internal API: `{"error":"..."}`; OpenAI API: `{"error":{"message","type"}}`).
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    Internal(StatusCode, &'static str),
    OpenAi(StatusCode, String, &'static str),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::Internal(s, msg) => (s, serde_json::json!({ "error": msg })),
            ApiError::OpenAi(s, msg, kind) => (
                s,
                serde_json::json!({ "error": {"message": msg, "type": kind} }),
            ),
        };
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// All routes: the master's API, plus the control API unless disabled. Every route is
/// capped at `max_body_bytes` (see [`crate::body`]): the heartbeat checks its token
/// first and then reads capped; every other group refuses a declared oversized body
/// before its handler runs, in its own error shape.
pub fn router(state: AppState) -> Router {
    let cap = state.config.max_body_bytes;
    let guard = |refusal| middleware::from_fn_with_state(Guard { cap, refusal }, refuse_declared);
    let mut internal = Router::new()
        .route("/v1/internal/instances", get(instances))
        .route("/metrics", get(metrics))
        .with_state(state.clone());
    if state.config.control {
        internal = internal.merge(crate::control::routes(state.clone()));
    }
    let openai = crate::routing::routes()
        .with_state(state.clone())
        .layer(guard(openai_too_large));
    Router::new()
        .route("/v1/internal/heartbeat", post(crate::heartbeat::handle))
        .with_state(state)
        .merge(internal.layer(guard(internal_too_large)))
        .merge(openai)
        .layer(DefaultBodyLimit::max(cap))
}

/// 413 in the internal API's shape.
pub fn internal_too_large() -> Response {
    ApiError::Internal(StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response()
}

/// 413 in the OpenAI API's shape.
pub fn openai_too_large() -> Response {
    ApiError::OpenAi(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request body too large".into(),
        "invalid_request",
    )
    .into_response()
}

async fn instances(axum::extract::State(s): axum::extract::State<AppState>) -> Response {
    axum::Json(serde_json::json!({ "instances": s.registry.views() })).into_response()
}

async fn metrics(axum::extract::State(s): axum::extract::State<AppState>) -> Response {
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
