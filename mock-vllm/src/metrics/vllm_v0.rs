//! The `vllm:*` families of the older engine (`vllm/engine/metrics.py`): `model_name`
//! label only, no `_created`, histograms without children until observed.

use super::Snapshot;
use crate::exposition::{Family, Kind};

pub(super) fn families(c: &Snapshot, out: &mut Vec<Family>) {
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
    super::vllm_v1::latency_families(
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
