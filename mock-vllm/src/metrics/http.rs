//! prometheus-fastapi-instrumentator's `http_*` families, as vLLM's app carries them.

use super::hist_child;
use crate::config::Dialect;
use crate::exposition::{Child, Family, Kind};
use crate::stats::HttpStats;

/// prometheus-fastapi-instrumentator's families (vLLM excludes /metrics, /health, ...).
pub(super) fn families(http: &HttpStats, dialect: Dialect, out: &mut Vec<Family>) {
    let created = |t: f64| (dialect != Dialect::V0).then_some(t);
    let mut req = Family::new(
        "http_requests",
        "Total number of requests by method, status and handler.",
        Kind::Counter,
    );
    for ((h, m, s), v, t) in &http.requests {
        req.children.push(Child::Value {
            labels: vec![
                ("handler", h.clone()),
                ("method", m.clone()),
                ("status", s.clone()),
            ],
            value: *v,
            created: created(*t),
        });
    }
    out.push(req);
    let size_help = |what: &str| {
        format!(
            "Content length of {what} by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. "
        )
    };
    let mut reqsize = Family::new(
        "http_request_size_bytes",
        size_help("incoming requests"),
        Kind::Summary,
    );
    let mut respsize = Family::new(
        "http_response_size_bytes",
        size_help("outgoing responses"),
        Kind::Summary,
    );
    for h in &http.handlers {
        reqsize.children.push(Child::Summary {
            labels: vec![("handler", h.handler.clone())],
            count: h.request_bytes.0,
            sum: h.request_bytes.1,
            created: created(h.created),
        });
        respsize.children.push(Child::Summary {
            labels: vec![("handler", h.handler.clone())],
            count: h.response_bytes.0,
            sum: h.response_bytes.1,
            created: created(h.created),
        });
    }
    out.push(reqsize);
    out.push(respsize);
    let mut highr = Family::new(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
        Kind::Histogram,
    );
    highr.children.push(hist_child(
        vec![],
        &http.highr,
        http.highr.sum,
        created(http.created),
    ));
    out.push(highr);
    let mut dur = Family::new(
        "http_request_duration_seconds",
        "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
        Kind::Histogram,
    );
    for h in &http.handlers {
        dur.children.push(hist_child(
            vec![("handler", h.handler.clone()), ("method", h.method.clone())],
            &h.duration,
            h.duration.sum,
            created(h.created),
        ));
    }
    out.push(dur);
}
