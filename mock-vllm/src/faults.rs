//! What this fake can be told to do wrong. Armed through `mock_kit::FaultRegistry`
//! (`POST /_mock/faults` with `{"kind":"...", ..., "count":N, "duration_ms":M}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// One fault. `/metrics` faults act on scrapes, `completion_*` faults on OpenAI calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// `/metrics` answers this status with a short text body.
    MetricsStatus { status: u16 },
    /// `/metrics` never answers (until the client gives up or the server stops).
    MetricsHang,
    /// `/metrics` body trickles out at this rate.
    MetricsSlow { bytes_per_sec: u64 },
    /// `/metrics` body cut after `at_bytes`. By default the page is short but the HTTP
    /// exchange is clean (Content-Length matches); with `abort` the connection is reset
    /// after the prefix instead.
    MetricsTruncate {
        at_bytes: usize,
        #[serde(default)]
        abort: bool,
    },
    /// `lines` garbage lines mixed into the page at seeded positions.
    MetricsGarbage { lines: usize },
    /// Gauges report NaN / +Inf / -Inf and histogram sums NaN.
    MetricsNonfinite,
    /// The page is padded with valid filler series up to at least `bytes`.
    MetricsHuge { bytes: usize },
    /// The page freezes: every scrape while armed returns the bytes of the first.
    MetricsStale,
    /// Fail this fraction (0..=1) of completions with `status` (vLLM error body).
    CompletionFail { fraction: f64, status: u16 },
    /// Hang after scheduling, before the first token, holding the running slot.
    CompletionHang,
    /// Reset the connection after this many output tokens.
    CompletionDrop { after_tokens: u32 },
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::MetricsStatus { .. } => "metrics_status",
            Fault::MetricsHang => "metrics_hang",
            Fault::MetricsSlow { .. } => "metrics_slow",
            Fault::MetricsTruncate { .. } => "metrics_truncate",
            Fault::MetricsGarbage { .. } => "metrics_garbage",
            Fault::MetricsNonfinite => "metrics_nonfinite",
            Fault::MetricsHuge { .. } => "metrics_huge",
            Fault::MetricsStale => "metrics_stale",
            Fault::CompletionFail { .. } => "completion_fail",
            Fault::CompletionHang => "completion_hang",
            Fault::CompletionDrop { .. } => "completion_drop",
        }
    }
}

/// What a `*_hang` fault (and `/health` in `hang` mode) answers: nothing, ever. The
/// connection goes when the client gives up or the server stops.
pub(crate) async fn hang() -> Response {
    std::future::pending::<()>().await;
    StatusCode::INTERNAL_SERVER_ERROR.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape() {
        let f: mock_kit::faults::FaultRequest<Fault> = serde_json::from_str(
            r#"{"kind":"completion_fail","fraction":0.5,"status":503,"count":3}"#,
        )
        .unwrap();
        assert_eq!(
            f.fault,
            Fault::CompletionFail {
                fraction: 0.5,
                status: 503
            }
        );
        assert_eq!(f.count, Some(3));
        let t: Fault =
            serde_json::from_str(r#"{"kind":"metrics_truncate","at_bytes":10}"#).unwrap();
        assert_eq!(
            t,
            Fault::MetricsTruncate {
                at_bytes: 10,
                abort: false
            }
        );
        assert_eq!(
            serde_json::to_value(Fault::MetricsHang).unwrap(),
            serde_json::json!({"kind":"metrics_hang"})
        );
    }
}
