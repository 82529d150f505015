//! `GET /metrics`: the shell around the clock-free parts. Takes a [`Snapshot`] of the
//! live server, has [`crate::metrics::page`] write it, lets
//! [`crate::scrape_faults`] decide and rewrite, and delivers: a status, a hang, a
//! frozen page, a reset after a prefix, a trickle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::metrics::{EngineView, Runtime, Snapshot};
use crate::scrape_faults::ScrapePlan;
use crate::state::{lock, Shared};

/// The handler.
pub(crate) async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let plan = ScrapePlan::decide(|want| shared.fire(|f| want(f).then(|| f.clone())));
    let faults = match plan {
        ScrapePlan::Status(status) => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (code, code.canonical_reason().unwrap_or("error").to_string()).into_response();
        }
        ScrapePlan::Hang => return crate::faults::hang().await,
        ScrapePlan::Page(faults) => faults,
    };
    let content_type = content_type_of(&shared);
    let render = || {
        Bytes::from(crate::metrics::page(&snapshot(&shared, Instant::now(), faults.nonfinite)).0)
    };
    let page = if faults.stale {
        lock(&shared.stale).get_or_insert_with(render).clone()
    } else {
        lock(&shared.stale).take();
        render()
    };
    let page = faults.apply(page, &mut *lock(&shared.rng));
    match (faults.truncate, faults.slow) {
        (Some((_, true)), _) => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(page),
                Err(std::io::Error::other("metrics_truncate: connection reset")),
            ];
            page_response(
                Body::from_stream(futures_util::stream::iter(chunks)),
                content_type,
            )
        }
        (None, Some(bps)) => {
            page_response(Body::from_stream(trickle(page, bps.max(1))), content_type)
        }
        _ => page_response(Body::from(page), content_type),
    }
}

fn content_type_of(shared: &Shared) -> &'static str {
    crate::metrics::content_type(shared.cfg.dialect)
}

fn page_response(body: Body, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
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
        max_model_len: shared.cfg.max_model_len,
        engines,
        nonfinite,
        overrides,
        runtime,
        http: extras.then(|| lock(&core.http).clone()),
    }
}
