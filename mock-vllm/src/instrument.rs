//! The HTTP instrumentation vLLM's FastAPI app carries (prometheus-fastapi-instrumentator):
//! every request counted by handler, method and status, with sizes and latency, for the
//! `http_*` families; `/metrics`, `/health`, `/version` are not counted, as in vLLM.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::event::VllmEvent;
use crate::state::{lock, Shared};
use crate::stats::Exchange;

/// Handlers prometheus-fastapi-instrumentator does not count in vLLM.
const UNINSTRUMENTED: [&str; 4] = ["/metrics", "/health", "/version", "/ping"];

/// The middleware: run the handler, then record what it answered.
pub(crate) async fn instrument(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| req.uri().path().to_string());
    let method = req.method().as_str().to_string();
    let req_bytes = content_length(req.headers().get(header::CONTENT_LENGTH));
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    if !UNINSTRUMENTED.contains(&path.as_str()) {
        let resp_bytes = content_length(resp.headers().get(header::CONTENT_LENGTH));
        let core = shared.core();
        let exchange = Exchange {
            handler: &path,
            method: &method,
            status,
            req_bytes,
            resp_bytes,
            secs: start.elapsed().as_secs_f64(),
        };
        lock(&core.http).record(&exchange, crate::clock::epoch_secs());
    }
    shared.events.emit_event(&VllmEvent::Request {
        path: &path,
        method: &method,
        status,
    });
    resp
}

fn content_length(v: Option<&HeaderValue>) -> u64 {
    v.and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
