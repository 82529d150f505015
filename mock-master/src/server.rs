//! The HTTP face of the master: shared state, the one error type, the router.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use mock_kit::{Events, FaultRegistry, ServerHandle, Shutdown};
use tokio::sync::{mpsc, watch};

use crate::auth::Token;
use crate::control::Fault;
use crate::etcd::EtcdClient;
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

/// All routes: the master's API, plus the control API unless disabled.
pub fn router(state: AppState) -> Router {
    let mut app = Router::new()
        .route("/v1/internal/heartbeat", post(crate::heartbeat::handle))
        .route("/v1/internal/instances", get(instances))
        .route("/metrics", get(metrics))
        .merge(crate::routing::routes())
        .with_state(state.clone());
    if state.config.control {
        app = app.merge(crate::control::routes(state.clone()));
    }
    app.layer(DefaultBodyLimit::disable())
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

/// Read a request body, at most `cap` bytes; `Err(true)` when it was larger. A body
/// that arrives in one chunk (the common case) is not copied.
pub async fn read_body(body: axum::body::Body, cap: usize) -> Result<bytes::Bytes, bool> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut first: Option<bytes::Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| false)?;
        let have = first.as_ref().map_or(0, |f| f.len()) + rest.len();
        if have + chunk.len() > cap {
            return Err(true);
        }
        match first.take() {
            None if rest.is_empty() => first = Some(chunk),
            Some(f) => {
                rest.extend_from_slice(&f);
                rest.extend_from_slice(&chunk);
            }
            None => rest.extend_from_slice(&chunk),
        }
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}
