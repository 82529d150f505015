//! The router and the small non-OpenAI handlers: `/health`, `/v1/models`, `/version`,
//! `/metrics` (with its faults), plus the HTTP instrumentation vLLM's app carries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use rand::Rng;
use serde_json::json;

use crate::clock::epoch_secs;
use crate::faults::Fault;
use crate::state::{lock, Health, Shared};

/// Every route of a server; the control API only when configured.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let serving = Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/v1/completions", post(crate::openai::completions))
        .route(
            "/v1/chat/completions",
            post(crate::openai::chat_completions),
        )
        .layer(middleware::from_fn_with_state(shared.clone(), instrument))
        .with_state(shared.clone());
    let router = if shared.cfg.control {
        serving.merge(crate::control::routes(shared))
    } else {
        serving
    };
    router.fallback(not_found)
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response()
}

/// Handlers prometheus-fastapi-instrumentator does not count in vLLM.
const UNINSTRUMENTED: [&str; 4] = ["/metrics", "/health", "/version", "/ping"];

async fn instrument(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
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
        lock(&core.http).record(
            &path,
            &method,
            status,
            req_bytes,
            resp_bytes,
            start.elapsed().as_secs_f64(),
        );
    }
    if shared.events.enabled() {
        shared.events.emit(
            "request",
            json!({"path": path, "method": method, "status": status}),
        );
    }
    resp
}

fn content_length(v: Option<&HeaderValue>) -> u64 {
    v.and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    if shared.starting() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match shared.health() {
        Health::Up => StatusCode::OK.into_response(),
        Health::Down => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Health::Hang => crate::faults::hang().await,
    }
}

fn random_hex(shared: &Shared) -> String {
    format!("{:032x}", lock(&shared.rng).gen::<u128>())
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let created = epoch_secs() as u64;
    let m = json!(shared.cfg.model);
    let perm = random_hex(&shared);
    let body = format!(
        r#"{{"object":"list","data":[{{"id":{m},"object":"model","created":{created},"owned_by":"vllm","root":{m},"parent":null,"max_model_len":{},"permission":[{{"id":"modelperm-{perm}","object":"model_permission","created":{created},"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}}]}}]}}"#,
        shared.cfg.max_model_len
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn version(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(json!({"version": shared.cfg.dialect.version()}))
}

const GARBAGE: [&str; 6] = [
    "this is not a metric",
    "vllm:num_requests_waiting{model_name=\"broken 1.0",
    "}{ 12 34",
    "# TYPE",
    "vllm:garbage_without_value",
    "\u{1}\u{2}\u{3}binary junk\u{7f}",
];

/// Largest page `metrics_huge` will build.
const HUGE_CAP: usize = 256 * 1024 * 1024;

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    if let Some(status) = shared.fire(|f| match f {
        Fault::MetricsStatus { status } => Some(*status),
        _ => None,
    }) {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (code, code.canonical_reason().unwrap_or("error").to_string()).into_response();
    }
    if shared
        .fire(|f| matches!(f, Fault::MetricsHang).then_some(()))
        .is_some()
    {
        return crate::faults::hang().await;
    }
    let stale = shared
        .fire(|f| matches!(f, Fault::MetricsStale).then_some(()))
        .is_some();
    let nonfinite = shared
        .fire(|f| matches!(f, Fault::MetricsNonfinite).then_some(()))
        .is_some();
    let (page, content_type) = if stale {
        let mut frozen = lock(&shared.stale);
        let (fresh, ct) = if frozen.is_none() {
            crate::metrics::render(&shared, nonfinite)
        } else {
            (String::new(), "")
        };
        let ct = if ct.is_empty() {
            content_type_of(&shared)
        } else {
            ct
        };
        let bytes = frozen.get_or_insert_with(|| Bytes::from(fresh)).clone();
        (bytes, ct)
    } else {
        lock(&shared.stale).take();
        let (p, ct) = crate::metrics::render(&shared, nonfinite);
        (Bytes::from(p), ct)
    };
    let mut page = page;
    if let Some(lines) = shared.fire(|f| match f {
        Fault::MetricsGarbage { lines } => Some(*lines),
        _ => None,
    }) {
        page = with_garbage(&shared, &page, lines.min(100_000));
    }
    if let Some(bytes) = shared.fire(|f| match f {
        Fault::MetricsHuge { bytes } => Some(*bytes),
        _ => None,
    }) {
        page = padded(&page, bytes.min(HUGE_CAP));
    }
    if let Some((at, abort)) = shared.fire(|f| match f {
        Fault::MetricsTruncate { at_bytes, abort } => Some((*at_bytes, *abort)),
        _ => None,
    }) {
        let prefix = page.slice(..at.min(page.len()));
        if abort {
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(prefix),
                Err(std::io::Error::other("metrics_truncate: connection reset")),
            ];
            return page_response(
                Body::from_stream(futures_util::stream::iter(chunks)),
                content_type,
            );
        }
        return page_response(Body::from(prefix), content_type);
    }
    if let Some(bps) = shared.fire(|f| match f {
        Fault::MetricsSlow { bytes_per_sec } => Some(*bytes_per_sec),
        _ => None,
    }) {
        return page_response(Body::from_stream(trickle(page, bps.max(1))), content_type);
    }
    page_response(Body::from(page), content_type)
}

fn content_type_of(shared: &Shared) -> &'static str {
    if shared.cfg.dialect == crate::config::Dialect::OpenMetrics {
        crate::metrics::OPENMETRICS_CONTENT_TYPE
    } else {
        crate::metrics::TEXT_CONTENT_TYPE
    }
}

fn page_response(body: Body, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The page with `n` junk lines inserted at seeded line boundaries.
fn with_garbage(shared: &Shared, page: &[u8], n: usize) -> Bytes {
    let text = String::from_utf8_lossy(page);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut rng = lock(&shared.rng);
    for i in 0..n {
        // Never after `# EOF`: keep the junk inside the page.
        let limit = lines
            .len()
            .saturating_sub(usize::from(lines.last().is_some_and(|l| l == "# EOF")));
        let at = rng.gen_range(0..=limit);
        lines.insert(at, GARBAGE[i % GARBAGE.len()].to_string());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Bytes::from(out)
}

/// The page grown to at least `bytes` with a valid filler gauge family.
fn padded(page: &Bytes, bytes: usize) -> Bytes {
    if page.len() >= bytes {
        return page.clone();
    }
    let text = String::from_utf8_lossy(page);
    let (body, eof) = match text.strip_suffix("# EOF\n") {
        Some(b) => (b.to_string(), "# EOF\n"),
        None => (text.to_string(), ""),
    };
    let mut out = String::with_capacity(bytes + 128);
    out.push_str(&body);
    out.push_str(
        "# HELP mock_padding Filler series (metrics_huge fault).\n# TYPE mock_padding gauge\n",
    );
    let mut i = 0u64;
    while out.len() + eof.len() < bytes {
        out.push_str(&format!("mock_padding{{i=\"{i}\"}} 1.0\n"));
        i += 1;
    }
    out.push_str(eof);
    Bytes::from(out)
}

/// The page in 50 ms slices at `bps` bytes per second.
fn trickle(
    page: Bytes,
    bps: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let chunk = ((bps / 20).max(1) as usize).min(page.len().max(1));
    futures_util::stream::unfold((page, 0usize, true), move |(page, at, first)| async move {
        if at >= page.len() {
            return None;
        }
        if !first {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let end = (at + chunk).min(page.len());
        Some((Ok(page.slice(at..end)), (page, end, false)))
    })
}
