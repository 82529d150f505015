//! The `/metrics` page of each dialect: which families a real vLLM of that release
//! exports, in the order its registry holds them, with values from [`crate::stats`].
//! Clock-free: [`page`] renders a [`Snapshot`] read by the caller at its own "now" (the
//! live server in [`crate::scrape`], a simulation at its virtual time).
//!
//! Orders, names, help texts and label sets follow `vllm/engine/metrics.py` (v0,
//! `vllm_v0`) and `vllm/v1/metrics/loggers.py` (0.10, 0.11, `vllm_v1`) plus the default
//! `prometheus_client` collectors (`runtime`) and prometheus-fastapi-instrumentator
//! (`http`), as on the real page in `shared/fixtures/vllm-0.10-metrics.txt`. The
//! OpenMetrics dialect is what a vLLM 0.11 answers a scraper that asks for OpenMetrics
//! (its prometheus_client negotiates by `Accept`): the same registry in the other format.

mod cache_config;
mod compact;
pub(crate) use compact::PageMemo;
mod http;
mod multiprocess;
mod runtime;
mod vllm_v0;
mod vllm_v033;
mod vllm_v1;

use crate::config::Dialect;
use crate::exposition::{render_openmetrics, render_text, Child, Family, Kind, Labels};
use crate::process::ProcessView;
use crate::stats::{EngineStats, FinishReason, Hist, HttpStats};

pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// What prometheus_client 0.23 and later call the text format (0.33 and 0.34 ship one):
/// the same text, announced as version 1.0.0.
pub const TEXT_1_0_CONTENT_TYPE: &str = "text/plain; version=1.0.0; charset=utf-8";
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `Content-Type` a server of `dialect` answers `/metrics` with.
pub fn content_type(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        Dialect::V0_33 | Dialect::V0_34 => TEXT_1_0_CONTENT_TYPE,
        _ => TEXT_CONTENT_TYPE,
    }
}

/// One engine's gauges and a copy of its counters, read at the scrape's instant.
#[derive(Clone, Debug)]
pub struct EngineView {
    pub index: usize,
    pub running: f64,
    pub waiting: f64,
    /// KV-cache usage, 0..=1.
    pub kv: f64,
    pub kv_capacity: u64,
    pub stats: EngineStats,
}

/// What the process families report: `/proc` readings and the (pretend) process start.
#[derive(Clone, Debug, Default)]
pub struct Runtime {
    pub process: ProcessView,
    /// Process start, epoch seconds.
    pub start: f64,
    /// CPU seconds already spent before that start (subtracted).
    pub cpu_base: f64,
}

/// Everything a page shows, read at one instant: the whole input of [`page`]. Time is
/// in it (gauge overrides already evaluated, `_created` stamps in the stats), never
/// read by the renderer.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub dialect: Dialect,
    pub model: String,
    /// The context window (`max_model_len`): the cache config's concurrency label.
    pub max_model_len: u32,
    pub engines: Vec<EngineView>,
    /// The `metrics_nonfinite` fault: gauges NaN/±Inf, `_seconds` sums NaN.
    pub nonfinite: bool,
    /// Gauge families forced to a value (waveform overrides at this instant).
    pub overrides: Vec<(String, f64)>,
    /// `python_*`/`process_*` readings; `None` for dialects without them.
    pub runtime: Option<Runtime>,
    /// The `http_*` instrumentation; `None` for dialects without it.
    pub http: Option<HttpStats>,
}

impl Snapshot {
    pub(super) fn labels(&self, e: &EngineView) -> Labels {
        if self.dialect == Dialect::V0 {
            vec![("model_name", self.model.to_string())]
        } else {
            vec![
                ("model_name", self.model.to_string()),
                ("engine", e.index.to_string()),
            ]
        }
    }

    pub(super) fn created(&self, t: f64) -> Option<f64> {
        (self.dialect != Dialect::V0).then_some(t)
    }

    /// A per-engine gauge; overrides and the non-finite fault apply here.
    pub(super) fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        value: impl Fn(&EngineView) -> f64,
        nonfinite: f64,
    ) -> Family {
        let mut f = Family::new(name, help, Kind::Gauge);
        let forced = self
            .overrides
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v);
        for e in &self.engines {
            let v = if self.nonfinite {
                nonfinite
            } else {
                forced.unwrap_or_else(|| value(e))
            };
            f.children.push(Child::Value {
                labels: self.labels(e),
                value: v,
                created: None,
            });
        }
        f
    }

    pub(super) fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        value: impl Fn(&EngineStats) -> f64,
    ) -> Family {
        let mut f = Family::new(name, help, Kind::Counter);
        for e in &self.engines {
            f.children.push(Child::Value {
                labels: self.labels(e),
                value: value(&e.stats),
                created: self.created(e.stats.created),
            });
        }
        f
    }

    pub(super) fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        hist: impl Fn(&EngineStats) -> &Hist,
    ) -> Family {
        let mut f = Family::new(name, help, Kind::Histogram);
        for e in &self.engines {
            let h = hist(&e.stats);
            // v0 logs histograms through `.labels(...).observe()`: no child until observed.
            if self.dialect == Dialect::V0 && h.count == 0 {
                continue;
            }
            let sum = if self.nonfinite && name.ends_with("_seconds") {
                f64::NAN
            } else {
                h.sum
            };
            f.children.push(hist_child(
                self.labels(e),
                h,
                sum,
                self.created(e.stats.created),
            ));
        }
        f
    }

    // The families the sidecar reads (docs/contract.md §4), shared by every dialect that
    // has them.
    pub(super) fn waiting(&self) -> Family {
        self.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            |e| e.waiting,
            f64::NAN,
        )
    }

    pub(super) fn kv_usage(&self) -> Family {
        self.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            |e| e.kv,
            f64::INFINITY,
        )
    }

    pub(super) fn ttft(&self) -> Family {
        self.histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |s| &s.h_ttft,
        )
    }

    pub(super) fn itl(&self) -> Family {
        self.histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |s| &s.h_itl,
        )
    }

    pub(super) fn success(&self) -> Family {
        let mut f = Family::new(
            "vllm:request_success",
            "Count of successfully processed requests.",
            Kind::Counter,
        );
        let mut push = |e: &EngineView, r: FinishReason| {
            let mut labels = self.labels(e);
            labels.push(("finished_reason", r.as_str().to_string()));
            f.children.push(Child::Value {
                labels,
                value: e.stats.success[r as usize],
                created: self.created(e.stats.created),
            });
        };
        if self.dialect == Dialect::V0 {
            for e in &self.engines {
                for r in FinishReason::ALL {
                    if e.stats.success_seen[r as usize] {
                        push(e, r);
                    }
                }
            }
        } else {
            for r in FinishReason::ALL {
                for e in &self.engines {
                    push(e, r);
                }
            }
        }
        f
    }

    pub(super) fn cache_config_info(&self) -> Family {
        cache_config::family(self)
    }
}

pub(super) fn hist_child(labels: Labels, h: &Hist, sum: f64, created: Option<f64>) -> Child {
    Child::Histogram {
        labels,
        bounds: h.bounds.clone(),
        cumulative: h.cumulative(),
        count: h.count as f64,
        sum,
        created,
    }
}

/// Write the page of `s`. Answers (body, content type). Pure: the same snapshot gives
/// the same bytes.
pub fn page(s: &Snapshot) -> (String, &'static str) {
    let mut out = String::with_capacity(if s.runtime.is_some() {
        48 * 1024
    } else {
        8 * 1024
    });
    let content_type = page_into(s, &mut out);
    (out, content_type)
}

/// [`page`] into a caller's buffer (cleared first), so a caller that renders often
/// reuses one allocation. Answers the content type.
pub fn page_into(s: &Snapshot, out: &mut String) -> &'static str {
    out.clear();
    if compact::applies(s) && compact::page_into(s, out) {
        return TEXT_CONTENT_TYPE;
    }
    // The OpenMetrics page is the same registry as v0.11's, negotiated by `Accept`.
    let mut fams = Vec::with_capacity(64);
    // Under the multiprocess layout only the files of the metrics are read: no process
    // or Python collectors.
    if let Some(rt) = s.runtime.as_ref().filter(|_| !multiprocess::applies(s)) {
        runtime::families(s, rt, &mut fams);
    }
    match s.dialect {
        Dialect::Compact => vllm_v1::compact_families(s, &mut fams),
        Dialect::V0 => vllm_v0::families(s, &mut fams),
        Dialect::V0_10 | Dialect::V0_11 | Dialect::OpenMetrics => vllm_v1::families(s, &mut fams),
        Dialect::V0_33 | Dialect::V0_34 => vllm_v033::families(s, &mut fams),
    }
    if let Some(http) = &s.http {
        http::families(http, s.dialect, &mut fams);
    }
    if s.dialect == Dialect::OpenMetrics {
        render_openmetrics(&fams, out);
        OPENMETRICS_CONTENT_TYPE
    } else if s.dialect.is_v0_33_or_newer() {
        if multiprocess::applies(s) {
            multiprocess::render(&fams, out);
        } else {
            render_text(&fams, out);
        }
        TEXT_1_0_CONTENT_TYPE
    } else {
        render_text(&fams, out);
        TEXT_CONTENT_TYPE
    }
}

/// The page of `s` for a core that keeps its last compact page in `memo`: a compact
/// page is answered from the memo (kept when its numbers did not change, else written
/// there); any other page is written into `out` by [`page_into`].
pub(crate) fn page_kept<'a>(
    s: &Snapshot,
    out: &'a mut String,
    memo: Option<&'a mut PageMemo>,
) -> &'a str {
    if let Some(memo) = memo {
        if compact::applies(s) && compact::page_into_memo(s, memo) {
            return memo.page();
        }
    }
    page_into(s, out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Buckets;

    /// One engine, two observed TTFTs, created at t=1000 s: no server, no clock.
    fn snapshot(dialect: Dialect) -> Snapshot {
        let mut stats = EngineStats::new(&Buckets::for_dialect(dialect, 8192), 1000.0);
        stats.record_prefill(10, false, 0.003);
        stats.record_prefill(10, true, 0.3);
        stats.record_decode(&[0.01, 0.02]);
        Snapshot {
            dialect,
            model: "m".into(),
            max_model_len: 8192,
            engines: vec![EngineView {
                index: 0,
                running: 1.0,
                waiting: 3.0,
                kv: 0.25,
                kv_capacity: 1600,
                stats,
            }],
            nonfinite: false,
            overrides: vec![("vllm:kv_cache_usage_perc".into(), 0.5)],
            runtime: dialect.has_runtime_families().then(|| Runtime {
                start: 1500.25,
                ..Runtime::default()
            }),
            http: dialect
                .has_runtime_families()
                .then(|| HttpStats::new(1000.0)),
        }
    }

    #[test]
    fn a_page_is_a_function_of_its_snapshot() {
        let s = snapshot(Dialect::Compact);
        let (page, ct) = super::page(&s);
        assert_eq!(
            (page.as_str(), ct),
            (super::page(&s).0.as_str(), TEXT_CONTENT_TYPE)
        );
        for line in [
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5",
            "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"m\"} 2.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.005\",model_name=\"m\"} 1.0",
            "vllm:time_to_first_token_seconds_created{engine=\"0\",model_name=\"m\"} 1000.0",
            "vllm:inter_token_latency_seconds_count{engine=\"0\",model_name=\"m\"} 2.0",
        ] {
            assert!(page.lines().any(|l| l == line), "{line}\n{page}");
        }
        assert!(!page.contains("process_"));
    }

    #[test]
    fn full_pages_take_the_process_readings_given() {
        let (page, _) = super::page(&snapshot(Dialect::V0_10));
        assert!(
            page.contains("\nprocess_start_time_seconds 1500.25\n"),
            "{page}"
        );
        assert!(page.contains("\nprocess_resident_memory_bytes 0.0\n"));
    }
}
