//! The `/metrics` page of each dialect: which families a real vLLM of that release
//! exports, in the order its registry holds them, with values from [`crate::stats`].
//!
//! Orders, names, help texts and label sets follow `vllm/engine/metrics.py` (v0) and
//! `vllm/v1/metrics/loggers.py` (0.10, 0.11) plus the default `prometheus_client`
//! collectors (`python_*`, `process_*`) and prometheus-fastapi-instrumentator (`http_*`),
//! as on the real page in `shared/fixtures/vllm-0.10-metrics.txt`. The OpenMetrics
//! dialect is what a vLLM 0.11 answers a scraper that asks for OpenMetrics (its
//! prometheus_client negotiates by `Accept`): the same registry in the other format.

use crate::config::Dialect;
use crate::exposition::{render_openmetrics, render_text, Child, Family, Kind, Labels};
use crate::process::ProcessView;
use crate::stats::{EngineStats, FinishReason, Hist, HttpStats};

pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
    fn labels(&self, e: &EngineView) -> Labels {
        if self.dialect == Dialect::V0 {
            vec![("model_name", self.model.to_string())]
        } else {
            vec![
                ("model_name", self.model.to_string()),
                ("engine", e.index.to_string()),
            ]
        }
    }

    fn created(&self, t: f64) -> Option<f64> {
        (self.dialect != Dialect::V0).then_some(t)
    }

    /// A per-engine gauge; overrides and the non-finite fault apply here.
    fn gauge(
        &self,
        name: &str,
        help: &str,
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

    fn counter(&self, name: &str, help: &str, value: impl Fn(&EngineStats) -> f64) -> Family {
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

    fn histogram(&self, name: &str, help: &str, hist: impl Fn(&EngineStats) -> &Hist) -> Family {
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

    // The families the sidecar reads (contract §4), shared by every dialect that has them.
    fn waiting(&self) -> Family {
        self.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            |e| e.waiting,
            f64::NAN,
        )
    }

    fn kv_usage(&self) -> Family {
        self.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            |e| e.kv,
            f64::INFINITY,
        )
    }

    fn ttft(&self) -> Family {
        self.histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |s| &s.h_ttft,
        )
    }

    fn itl(&self) -> Family {
        self.histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |s| &s.h_itl,
        )
    }

    fn success(&self) -> Family {
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

    fn cache_config_info(&self) -> Family {
        let mut f = Family::new(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            Kind::Gauge,
        );
        for e in &self.engines {
            let blocks = (e.kv_capacity / crate::stats::BLOCK_SIZE as u64).to_string();
            let s = |v: &str| v.to_string();
            let labels: Labels = if self.dialect == Dialect::V0 {
                vec![
                    ("block_size", s("16")),
                    ("cache_dtype", s("auto")),
                    ("cpu_offload_gb", s("0")),
                    ("enable_prefix_caching", s("True")),
                    ("gpu_memory_utilization", s("0.9")),
                    ("is_attention_free", s("False")),
                    ("num_cpu_blocks", s("2048")),
                    ("num_gpu_blocks", blocks),
                    ("num_gpu_blocks_override", s("None")),
                    ("sliding_window", s("None")),
                    ("swap_space", s("4")),
                    ("swap_space_bytes", s("4294967296")),
                ]
            } else {
                vec![
                    ("block_size", s("16")),
                    ("cache_dtype", s("auto")),
                    ("calculate_kv_scales", s("False")),
                    ("cpu_kvcache_space_bytes", s("None")),
                    ("cpu_offload_gb", s("0.0")),
                    ("enable_prefix_caching", s("True")),
                    ("engine", e.index.to_string()),
                    ("gpu_memory_utilization", s("0.9")),
                    ("is_attention_free", s("False")),
                    ("kv_sharing_fast_prefill", s("False")),
                    ("mamba_cache_dtype", s("auto")),
                    ("mamba_page_size_padded", s("None")),
                    ("mamba_ssm_cache_dtype", s("auto")),
                    ("num_cpu_blocks", s("None")),
                    ("num_gpu_blocks", blocks),
                    ("num_gpu_blocks_override", s("None")),
                    ("prefix_caching_hash_algo", s("builtin")),
                    ("sliding_window", s("None")),
                    ("swap_space", s("4.0")),
                    ("swap_space_bytes", s("4294967296.0")),
                ]
            };
            f.children.push(Child::Value {
                labels,
                value: 1.0,
                created: None,
            });
        }
        f
    }
}

fn hist_child(labels: Labels, h: &Hist, sum: f64, created: Option<f64>) -> Child {
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
    // The OpenMetrics page is the same registry as v0.11's, negotiated by `Accept`.
    let mut fams = Vec::new();
    if let Some(rt) = &s.runtime {
        runtime_families(s, rt, &mut fams);
    }
    match s.dialect {
        Dialect::Compact => compact_families(s, &mut fams),
        Dialect::V0 => v0_families(s, &mut fams),
        Dialect::V0_10 | Dialect::V0_11 | Dialect::OpenMetrics => v1_families(s, &mut fams),
    }
    if let Some(http) = &s.http {
        http_families(http, s.dialect, &mut fams);
    }
    let mut out = String::with_capacity(if s.runtime.is_some() {
        48 * 1024
    } else {
        8 * 1024
    });
    if s.dialect == Dialect::OpenMetrics {
        render_openmetrics(&fams, &mut out);
        (out, OPENMETRICS_CONTENT_TYPE)
    } else {
        render_text(&fams, &mut out);
        (out, TEXT_CONTENT_TYPE)
    }
}

fn v1_families(c: &Snapshot, out: &mut Vec<Family>) {
    let v10 = c.dialect == Dialect::V0_10;
    out.push(c.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        |e| e.running,
        f64::NEG_INFINITY,
    ));
    out.push(c.waiting());
    if v10 {
        out.push(c.gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            |e| e.kv,
            f64::INFINITY,
        ));
        out.push(c.counter(
            "vllm:gpu_prefix_cache_queries",
            "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
            |s| s.prefix_queries,
        ));
        out.push(c.counter(
            "vllm:gpu_prefix_cache_hits",
            "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
            |s| s.prefix_hits,
        ));
    }
    out.push(c.kv_usage());
    out.push(c.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        |s| s.prefix_queries,
    ));
    out.push(c.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        |s| s.prefix_hits,
    ));
    out.push(c.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        |s| s.preemptions,
    ));
    out.push(c.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        |s| s.prompt_tokens,
    ));
    out.push(c.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        |s| s.generation_tokens,
    ));
    out.push(c.success());
    out.push(c.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        |s| &s.h_prompt,
    ));
    out.push(c.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        |s| &s.h_generation,
    ));
    out.push(c.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        |s| &s.h_iteration,
    ));
    out.push(c.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        |s| &s.h_max_generation,
    ));
    out.push(c.histogram(
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        |s| &s.h_n,
    ));
    out.push(c.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        |s| &s.h_max_tokens,
    ));
    out.push(c.ttft());
    if v10 {
        out.push(c.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            |s| &s.h_itl,
        ));
    } else {
        out.push(c.itl());
        out.push(c.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            |s| &s.h_request_tpot,
        ));
    }
    latency_families(c, "Histogram of e2e request latency in seconds.", out);
    out.push(c.cache_config_info());
}

/// The compact page: the four families the sidecar reads, as v0.11 writes them.
fn compact_families(c: &Snapshot, out: &mut Vec<Family>) {
    out.push(c.waiting());
    out.push(c.kv_usage());
    out.push(c.ttft());
    out.push(c.itl());
}

fn latency_families(c: &Snapshot, e2e_help: &str, out: &mut Vec<Family>) {
    out.push(c.histogram("vllm:e2e_request_latency_seconds", e2e_help, |s| &s.h_e2e));
    out.push(c.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        |s| &s.h_queue,
    ));
    out.push(c.histogram(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        |s| &s.h_inference,
    ));
    out.push(c.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        |s| &s.h_prefill,
    ));
    out.push(c.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        |s| &s.h_decode,
    ));
}

fn v0_families(c: &Snapshot, out: &mut Vec<Family>) {
    out.push(c.gauge(
        "vllm:num_requests_running",
        "Number of requests currently running on GPU.",
        |e| e.running,
        f64::NEG_INFINITY,
    ));
    out.push(c.waiting());
    out.push(Family::new(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        Kind::Gauge,
    ));
    out.push(c.gauge(
        "vllm:num_requests_swapped",
        "Number of requests swapped to CPU.",
        |_| 0.0,
        f64::NAN,
    ));
    out.push(c.gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        |e| e.kv,
        f64::INFINITY,
    ));
    out.push(c.gauge(
        "vllm:cpu_cache_usage_perc",
        "CPU KV-cache usage. 1 means 100 percent usage.",
        |_| 0.0,
        f64::NAN,
    ));
    out.push(c.gauge(
        "vllm:cpu_prefix_cache_hit_rate",
        "CPU prefix cache block hit rate.",
        |_| -1.0,
        f64::NAN,
    ));
    out.push(c.gauge(
        "vllm:gpu_prefix_cache_hit_rate",
        "GPU prefix cache block hit rate.",
        |e| {
            if e.stats.prefix_queries > 0.0 {
                e.stats.prefix_hits / e.stats.prefix_queries
            } else {
                0.0
            }
        },
        f64::NAN,
    ));
    out.push(c.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        |s| s.preemptions,
    ));
    out.push(c.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        |s| s.prompt_tokens,
    ));
    out.push(c.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        |s| s.generation_tokens,
    ));
    out.push(c.counter(
        "vllm:tokens",
        "Number of prefill plus generation tokens processed.",
        |s| s.prompt_tokens + s.generation_tokens,
    ));
    out.push(c.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        |s| &s.h_iteration,
    ));
    out.push(c.ttft());
    out.push(c.histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        |s| &s.h_itl,
    ));
    latency_families(
        c,
        "Histogram of end to end request latency in seconds.",
        out,
    );
    out.push(c.histogram(
        "vllm:time_in_queue_requests",
        "Histogram of the time the request spent in the queue in seconds.",
        |s| &s.h_queue,
    ));
    out.push(Family::new(
        "vllm:model_forward_time_milliseconds",
        "Histogram of time spent in the model forward pass in ms.",
        Kind::Histogram,
    ));
    out.push(Family::new(
        "vllm:model_execute_time_milliseconds",
        "Histogram of time spent in the model execute function in ms.",
        Kind::Histogram,
    ));
    out.push(c.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        |s| &s.h_prompt,
    ));
    out.push(c.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        |s| &s.h_generation,
    ));
    out.push(c.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        |s| &s.h_max_generation,
    ));
    out.push(c.histogram(
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        |s| &s.h_n,
    ));
    out.push(c.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        |s| &s.h_max_tokens,
    ));
    out.push(c.success());
    out.push(Family::new(
        "vllm:spec_decode_draft_acceptance_rate",
        "Speulative token acceptance rate.",
        Kind::Gauge,
    ));
    out.push(Family::new(
        "vllm:spec_decode_efficiency",
        "Speculative decoding system efficiency.",
        Kind::Gauge,
    ));
    out.push(Family::new(
        "vllm:spec_decode_num_accepted_tokens",
        "Number of accepted tokens.",
        Kind::Counter,
    ));
    out.push(Family::new(
        "vllm:spec_decode_num_draft_tokens",
        "Number of draft tokens.",
        Kind::Counter,
    ));
    out.push(Family::new(
        "vllm:spec_decode_num_emitted_tokens",
        "Number of emitted tokens.",
        Kind::Counter,
    ));
    out.push(c.cache_config_info());
}

fn single(name: &str, help: &str, kind: Kind, value: f64) -> Family {
    let mut f = Family::new(name, help, kind);
    f.children.push(Child::Value {
        labels: vec![],
        value,
        created: None,
    });
    f
}

/// The default prometheus_client collectors of a CPython 3.12 process.
fn runtime_families(s: &Snapshot, rt: &Runtime, out: &mut Vec<Family>) {
    // Garbage collection grows with the work done since the (pretend) process start.
    let served: f64 = s.engines.iter().map(|e| e.stats.h_e2e.count as f64).sum();
    let (start, cpu_base) = (rt.start, rt.cpu_base);
    let gc = |name: &str, help: &str, vals: [f64; 3]| {
        let mut f = Family::new(name, help, Kind::Counter);
        for (i, v) in vals.iter().enumerate() {
            f.children.push(Child::Value {
                labels: vec![("generation", i.to_string())],
                value: *v,
                created: None,
            });
        }
        f
    };
    out.push(gc(
        "python_gc_objects_collected",
        "Objects collected during gc",
        [
            12000.0 + served * 9.0,
            3000.0 + served,
            900.0 + (served / 10.0).floor(),
        ],
    ));
    out.push(gc(
        "python_gc_objects_uncollectable",
        "Uncollectable objects found during GC",
        [0.0; 3],
    ));
    out.push(gc(
        "python_gc_collections",
        "Number of times this generation was collected",
        [
            400.0 + (served / 3.0).floor(),
            36.0 + (served / 30.0).floor(),
            3.0 + (served / 300.0).floor(),
        ],
    ));
    let mut info = Family::new("python_info", "Python platform information", Kind::Gauge);
    info.children.push(Child::Value {
        labels: vec![
            ("implementation", "CPython".into()),
            ("major", "3".into()),
            ("minor", "12".into()),
            ("patchlevel", "3".into()),
            ("version", "3.12.3".into()),
        ],
        value: 1.0,
        created: None,
    });
    out.push(info);
    let p = &rt.process;
    out.push(single(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        Kind::Gauge,
        p.vsize,
    ));
    out.push(single(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        Kind::Gauge,
        p.rss,
    ));
    out.push(single(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        Kind::Gauge,
        (start * 100.0).round() / 100.0,
    ));
    out.push(single(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        Kind::Counter,
        (p.cpu_secs - cpu_base).max(0.0),
    ));
    // prometheus_client names it without `_total` internally; the writer adds it.
    if let Some(last) = out.last_mut() {
        last.name = "process_cpu_seconds".into();
    }
    out.push(single(
        "process_open_fds",
        "Number of open file descriptors.",
        Kind::Gauge,
        p.open_fds,
    ));
    out.push(single(
        "process_max_fds",
        "Maximum number of open file descriptors.",
        Kind::Gauge,
        p.max_fds,
    ));
}

/// prometheus-fastapi-instrumentator's families (vLLM excludes /metrics, /health, ...).
fn http_families(http: &HttpStats, dialect: Dialect, out: &mut Vec<Family>) {
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
