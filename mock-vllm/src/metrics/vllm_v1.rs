//! The `vllm:*` families of the V1 engine (`vllm/v1/metrics/loggers.py`): 0.10 (both
//! KV names, `time_per_output_token`), 0.11 (the KV family renamed, the old one hidden;
//! `time_per_output_token` kept, marked deprecated, beside `inter_token_latency`), and
//! the compact subset.

use super::Snapshot;
use crate::config::Dialect;
use crate::exposition::Family;

pub(super) fn families(c: &Snapshot, out: &mut Vec<Family>) {
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
        // 0.11.0 still registers the deprecated name beside its replacement.
        out.push(c.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
            |s| &s.h_itl,
        ));
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
pub(super) fn compact_families(c: &Snapshot, out: &mut Vec<Family>) {
    out.push(c.waiting());
    out.push(c.kv_usage());
    out.push(c.ttft());
    out.push(c.itl());
}

pub(super) fn latency_families(c: &Snapshot, e2e_help: &'static str, out: &mut Vec<Family>) {
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
