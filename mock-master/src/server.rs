//! The HTTP face of the master: shared state, the one error type, the router.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
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
    pub heartbeat_counts: Mutex<BTreeMap<u16, u64>>,
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

impl Shared {
    pub fn count_heartbeat(&self, status: u16) {
        self.metrics.heartbeat(status);
        let mut g = match self.heartbeat_counts.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g.entry(status).or_default() += 1;
    }

    pub fn heartbeat_counts(&self) -> BTreeMap<u16, u64> {
        match self.heartbeat_counts.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
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

/// Read a request body, at most `cap` bytes; `Err(true)` when it was larger.
pub async fn read_body(body: axum::body::Body, cap: usize) -> Result<bytes::Bytes, bool> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| false)?;
        if out.len() + chunk.len() > cap {
            return Err(true);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}
