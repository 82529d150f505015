//! The `vllm:*` families of the 0.33 and 0.34 engines, in the order their
//! `PrometheusStatLogger` registers them (`vllm/v1/metrics/loggers.py`, with the
//! estimated-work counters of `perf.py` first and, on 0.34, the render histogram of
//! `vllm/renderers/metrics.py` last). Values come from the load model: waiting requests
//! are all waiting for capacity (nothing defers them), cached prompt tokens are the
//! prefix-cache hits, no request is ever preempted, and admission rejections are the
//! requests refused with a full queue.

use super::{EngineView, Snapshot};
use crate::config::Dialect;
use crate::exposition::{Child, Family, Kind};
use crate::stats::{EngineStats, Hist};

/// A child's label value and how its value is read from the engine.
type Valued = (&'static str, fn(&EngineView) -> f64);

/// A histogram family: name, help, and which of the engine's histograms it shows.
type HistFamily = (&'static str, &'static str, fn(&EngineStats) -> &Hist);

/// Finish reasons of 0.33 after the three the load model produces: never reached.
const EXTRA_REASONS: [&str; 2] = ["error", "repetition"];

pub(super) fn families(c: &Snapshot, out: &mut Vec<Family>) {
    estimated_work(c, out);
    scheduler_gauges(c, out);
    cache_counters(c, out);
    token_counters(c, out);
    out.push(success(c));
    out.push(admission_rejections(c));
    histograms(c, out);
    out.push(c.cache_config_info());
    if c.dialect == Dialect::V0_34 {
        out.push(render_duration(c));
    }
}

fn estimated_work(c: &Snapshot, out: &mut Vec<Family>) {
    for (name, help) in [
        (
            "vllm:estimated_flops_per_gpu",
            "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
        ),
        (
            "vllm:estimated_read_bytes_per_gpu",
            "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
        ),
        (
            "vllm:estimated_write_bytes_per_gpu",
            "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
        ),
    ] {
        out.push(c.counter(name, help, |_| 0.0));
    }
}

fn scheduler_gauges(c: &Snapshot, out: &mut Vec<Family>) {
    out.push(c.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        |e| e.running,
        f64::NEG_INFINITY,
    ));
    out.push(c.waiting());
    out.push(by_label(
        c,
        Family::new(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            Kind::Gauge,
        ),
        "reason",
        &[("capacity", |e| e.waiting), ("deferred", |_| 0.0)],
    ));
    out.push(by_label(
        c,
        Family::new(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            Kind::Gauge,
        ),
        "sleep_state",
        &[
            ("awake", |e| f64::from(u8::from(e.stats.asleep.is_none()))),
            ("weights_offloaded", |e| {
                f64::from(u8::from(e.stats.asleep == Some(1)))
            }),
            ("discard_all", |e| f64::from(u8::from(e.stats.asleep == Some(2)))),
        ],
    ));
    out.push(c.kv_usage());
}

/// One child per (label value, engine), label value first, as vLLM creates them.
fn by_label(c: &Snapshot, mut f: Family, label: &'static str, values: &[Valued]) -> Family {
    for (v, value) in values {
        for e in &c.engines {
            let mut labels = c.labels(e);
            labels.push((label, v.to_string()));
            let created = (f.kind == Kind::Counter)
                .then(|| c.created(e.stats.created))
                .flatten();
            f.children.push(Child::Value {
                labels,
                value: value(e),
                created,
            });
        }
    }
    f
}

fn cache_counters(c: &Snapshot, out: &mut Vec<Family>) {
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
    for (name, help) in [
        (
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        ),
        (
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        ),
        (
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        ),
        (
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
        ),
    ] {
        out.push(c.counter(name, help, |_| 0.0));
    }
    out.push(c.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        |s| s.preemptions,
    ));
}

fn computed(s: &EngineStats) -> f64 {
    (s.prompt_tokens - s.prefix_hits).max(0.0)
}

fn token_counters(c: &Snapshot, out: &mut Vec<Family>) {
    out.push(c.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        |s| s.prompt_tokens,
    ));
    out.push(by_label(
        c,
        Family::new(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            Kind::Counter,
        ),
        "source",
        &[
            ("local_compute", |e| computed(&e.stats)),
            ("local_cache_hit", |e| e.stats.prefix_hits),
            ("external_kv_transfer", |_| 0.0),
        ],
    ));
    out.push(c.counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        |s| s.prefix_hits,
    ));
    out.push(by_label(
        c,
        Family::new(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            Kind::Counter,
        ),
        "source",
        &[
            ("device", |e| e.stats.prefix_hits),
            ("host", |_| 0.0),
            ("p2p", |_| 0.0),
            ("disk", |_| 0.0),
            ("external_unspecified", |_| 0.0),
        ],
    ));
    out.push(c.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        |s| s.generation_tokens,
    ));
}

/// The three reasons the load model produces, then the two it never does.
fn success(c: &Snapshot) -> Family {
    let mut f = c.success();
    for reason in EXTRA_REASONS {
        for e in &c.engines {
            let mut labels = c.labels(e);
            labels.push(("finished_reason", reason.to_string()));
            f.children.push(Child::Value {
                labels,
                value: 0.0,
                created: c.created(e.stats.created),
            });
        }
    }
    f
}

/// Frontend-wide: a `model_name` label and a reason, no `engine`.
fn admission_rejections(c: &Snapshot) -> Family {
    let mut f = Family::new(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        Kind::Counter,
    );
    let full: f64 = c.engines.iter().map(|e| e.stats.rejected as f64).sum();
    let created = c
        .engines
        .iter()
        .map(|e| e.stats.created)
        .fold(f64::INFINITY, f64::min);
    for (reason, value) in [
        ("max_num_queued_reqs", full),
        ("max_num_queued_tokens", 0.0),
    ] {
        f.children.push(Child::Value {
            labels: vec![
                ("model_name", c.model.clone()),
                ("reason", reason.to_string()),
            ],
            value,
            created: created.is_finite().then_some(created),
        });
    }
    f
}

fn histograms(c: &Snapshot, out: &mut Vec<Family>) {
    let tokens: [HistFamily; 6] = [
        (
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            |s| &s.h_prompt,
        ),
        (
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            |s| &s.h_generation,
        ),
        (
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            |s| &s.h_iteration,
        ),
        (
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            |s| &s.h_max_generation,
        ),
        (
            "vllm:request_params_n",
            "Histogram of the n request parameter.",
            |s| &s.h_n,
        ),
        (
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            |s| &s.h_max_tokens,
        ),
    ];
    for (name, help, hist) in tokens {
        out.push(c.histogram(name, help, hist));
    }
    out.push(c.ttft());
    out.push(c.itl());
    out.push(c.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        |s| &s.h_request_tpot,
    ));
    super::vllm_v1::latency_families(c, "Histogram of e2e request latency in seconds.", out);
    out.push(c.histogram(
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        |s| &s.h_preemptions,
    ));
    out.push(c.histogram(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        |s| &s.h_prefill_kv,
    ));
}

/// Frontend-wide (`model_name`, `request_type`), summed over engines; a request type
/// shows once one request of it was rendered.
fn render_duration(c: &Snapshot) -> Family {
    let mut f = Family::new(
        "vllm:request_render_duration_seconds",
        "Time spent rendering a request, including chat templating, tokenization, and multimodal preprocessing.",
        Kind::Histogram,
    );
    let mut kinds: Vec<(usize, f64)> = Vec::new();
    for e in &c.engines {
        for (i, h) in e.stats.h_render.iter().enumerate() {
            if h.count > 0 && !kinds.iter().any(|(k, _)| *k == i) {
                kinds.push((i, e.stats.created));
            }
        }
    }
    for (i, created) in kinds {
        let mut total: Option<Hist> = None;
        for e in &c.engines {
            if let Some(h) = e.stats.h_render.get(i) {
                match &mut total {
                    Some(t) => t.merge(h),
                    None => total = Some(h.clone()),
                }
            }
        }
        let Some(h) = total else { continue };
        let kind = if i == 1 { "chat" } else { "completion" };
        f.children.push(super::hist_child(
            vec![
                ("model_name", c.model.clone()),
                ("request_type", kind.to_string()),
            ],
            &h,
            h.sum,
            c.created(created),
        ));
    }
    f
}
