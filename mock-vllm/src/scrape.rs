//! `GET /metrics`: the page of the configured dialect, and every `metrics_*` fault that
//! can happen to it on the way out (status, hang, stale, garbage, padding, truncation,
//! trickle).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rand::Rng;

use crate::faults::Fault;
use crate::metrics::{EngineView, Runtime, Snapshot};
use crate::state::{lock, Shared};

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

/// The handler.
pub(crate) async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
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
            crate::metrics::page(&snapshot(&shared, Instant::now(), nonfinite))
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
        let (p, ct) = crate::metrics::page(&snapshot(&shared, Instant::now(), nonfinite));
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

/// Everything the page shows, read from the live server at `now`.
fn snapshot(shared: &Shared, now: Instant, nonfinite: bool) -> Snapshot {
    let core = shared.core();
    let dialect = shared.cfg.dialect;
    let overrides = lock(&shared.overrides)
        .iter()
        .map(|(n, w, since)| (n.clone(), w.value_at(now.saturating_duration_since(*since))))
        .collect();
    let engines = core
        .engines
        .iter()
        .map(|e| {
            let (running, waiting, kv_used) = e.snapshot();
            EngineView {
                index: e.index,
                running: running as f64,
                waiting: waiting as f64,
                kv: (kv_used as f64 / e.kv_capacity() as f64).min(1.0),
                kv_capacity: e.kv_capacity(),
                stats: e.stats().clone(),
            }
        })
        .collect();
    let extras = dialect.has_runtime_families();
    let runtime = extras.then(|| {
        let (start, cpu_base) = *lock(&shared.process_epoch);
        Runtime {
            process: crate::process::process_view(),
            start,
            cpu_base,
        }
    });
    Snapshot {
        dialect,
        model: shared.cfg.model.clone(),
        engines,
        nonfinite,
        overrides,
        runtime,
        http: extras.then(|| lock(&core.http).clone()),
    }
}
