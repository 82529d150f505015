//! What a fake vLLM is: its model, its capacity, its latency model and which vLLM
//! release it imitates. One value, fixed for the life of a server (a restart keeps it).

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

/// Which vLLM release the `/metrics` page (and the error shape) imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Older engine (`vllm/engine/metrics.py`): `model_name` label only, no `_created`,
    /// `vllm:gpu_cache_usage_perc`, `vllm:time_per_output_token_seconds`.
    V0,
    /// V1 engine as in the 0.10 series (the fixture page): `engine` label, both KV names.
    V0_10,
    /// 0.11: `vllm:kv_cache_usage_perc`, `vllm:inter_token_latency_seconds`,
    /// `vllm:request_time_per_output_token_seconds`, still the deprecated
    /// `vllm:time_per_output_token_seconds`; `vllm:gpu_cache_usage_perc` is hidden.
    V0_11,
    /// 0.33 (November 2026): waiting by reason, sleep state, admission rejections,
    /// per-request preemptions, prompt tokens by source, the estimated-work counters;
    /// content type `version=1.0.0`; prometheus_client's multiprocess layout when
    /// several data-parallel engines are served.
    V0_33,
    /// 0.34: the 0.33 page plus `vllm:request_render_duration_seconds` and two more
    /// cache-config labels.
    V0_34,
    /// What a 0.11 server answers a scraper that asks for OpenMetrics 1.0: the v0.11
    /// registry (runtime, `vllm:*`, `http_*`, `_created`) in prometheus_client's
    /// OpenMetrics writer, its content type and `# EOF`.
    OpenMetrics,
    /// Only what the sidecar reads (docs/contract.md §4 and §5) of a 0.11 page: requests
    /// waiting, KV-cache usage (newer name), TTFT and inter-token latency histograms, in
    /// prometheus_client's text format. For simulations that scrape fleets: a few
    /// hundred bytes per engine instead of tens of KB.
    Compact,
}

impl Dialect {
    /// The `/version` a server of this dialect reports.
    pub fn version(self) -> &'static str {
        match self {
            Dialect::V0 => "0.6.6",
            Dialect::V0_10 => "0.10.1.1",
            Dialect::V0_11 | Dialect::OpenMetrics | Dialect::Compact => "0.11.0",
            Dialect::V0_33 => "0.33.0",
            Dialect::V0_34 => "0.34.0",
        }
    }

    /// Newer vLLM nests errors as `{"error":{...}}`; older ones answer a flat object.
    pub fn nested_errors(self) -> bool {
        matches!(
            self,
            Dialect::V0_11
                | Dialect::V0_33
                | Dialect::V0_34
                | Dialect::OpenMetrics
                | Dialect::Compact
        )
    }

    /// The 0.33 generation of the page (0.33 and 0.34).
    pub fn is_v0_33_or_newer(self) -> bool {
        matches!(self, Dialect::V0_33 | Dialect::V0_34)
    }

    /// The newest release imitated: the binary's default.
    pub const NEWEST: Dialect = Dialect::V0_34;

    /// Whether pages of this dialect carry the process, Python and HTTP families.
    pub fn has_runtime_families(self) -> bool {
        self != Dialect::Compact
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::V0 => "v0",
            Dialect::V0_10 => "v0.10",
            Dialect::V0_11 => "v0.11",
            Dialect::V0_33 => "v0.33",
            Dialect::V0_34 => "v0.34",
            Dialect::OpenMetrics => "openmetrics",
            Dialect::Compact => "compact",
        }
    }
}

impl FromStr for Dialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "v0" => Ok(Dialect::V0),
            "v0.10" => Ok(Dialect::V0_10),
            "v0.11" => Ok(Dialect::V0_11),
            "v0.33" => Ok(Dialect::V0_33),
            "v0.34" => Ok(Dialect::V0_34),
            "openmetrics" => Ok(Dialect::OpenMetrics),
            "compact" => Ok(Dialect::Compact),
            other => Err(format!(
                "unknown metrics dialect {other:?} (expected v0, v0.10, v0.11, v0.33, v0.34, openmetrics or compact)"
            )),
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a fake vLLM server is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// Served model name (`/v1/models`, `model_name` label, required `model` field).
    pub model: String,
    /// Running slots per engine (vLLM `--max-num-seqs`).
    pub max_num_seqs: usize,
    /// Waiting-queue bound per engine; beyond it requests get 429.
    pub max_waiting: usize,
    /// KV-cache capacity per engine, in tokens.
    pub kv_capacity_tokens: u64,
    /// Seeds every random choice (jitter, output lengths, fault fractions).
    pub seed: u64,
    /// Number of engines (vLLM `--data-parallel-size`), each with its own queue.
    pub data_parallel: usize,
    pub dialect: Dialect,
    /// `/health` answers 503 (and completions 503) this long after (re)start.
    pub startup_delay: Duration,
    /// Serve the `/_mock/*` control API.
    pub control: bool,
    /// Context window (`max_model_len`); also sets the 1-2-5 token histogram buckets.
    pub max_model_len: u32,
    /// Fixed cost of a prefill step.
    pub prefill_overhead: Duration,
    /// Prefill cost per prompt token.
    pub prefill_per_token: Duration,
    /// Time between two output tokens with an empty batch.
    pub inter_token_latency: Duration,
    /// Uniform jitter: every duration is multiplied by a factor in `[1-j, 1+j]`.
    pub jitter: f64,
    /// A full batch is `1 + batch_slowdown` times slower than an empty one.
    pub batch_slowdown: f64,
    /// Without `max_tokens` or `ignore_eos` a request stops ("stop") after a seeded
    /// natural length drawn from this inclusive range.
    pub natural_output_tokens: (u32, u32),
    /// Request body cap in bytes.
    pub max_body_bytes: usize,
}

impl Default for Config {
    /// Fast timings for tests: a short request takes a few milliseconds.
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            model: "mock-model".to_string(),
            max_num_seqs: 256,
            max_waiting: 100_000,
            kv_capacity_tokens: 1_000_000,
            seed: 0,
            data_parallel: 1,
            dialect: Dialect::V0_10,
            startup_delay: Duration::ZERO,
            control: true,
            max_model_len: 8192,
            prefill_overhead: Duration::from_millis(2),
            prefill_per_token: Duration::from_micros(10),
            inter_token_latency: Duration::from_millis(1),
            jitter: 0.1,
            batch_slowdown: 0.5,
            natural_output_tokens: (16, 64),
            max_body_bytes: 4 * 1024 * 1024,
        }
    }
}

impl Config {
    /// Reject configurations that cannot serve (zero slots, zero engines, ...).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_num_seqs == 0 {
            return Err("max_num_seqs must be at least 1".into());
        }
        if self.data_parallel == 0 || self.data_parallel > 64 {
            return Err("data_parallel must be between 1 and 64".into());
        }
        if self.dialect == Dialect::V0 && self.data_parallel > 1 {
            return Err(
                "the v0 engine has no data parallelism (no engine label): use --data-parallel 1"
                    .into(),
            );
        }
        if self.kv_capacity_tokens == 0 {
            return Err("kv_capacity_tokens must be at least 1".into());
        }
        if self.max_model_len == 0 {
            return Err("max_model_len must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err("jitter must be in [0, 1)".into());
        }
        if !(self.batch_slowdown >= 0.0 && self.batch_slowdown.is_finite()) {
            return Err("batch_slowdown must be a finite number >= 0".into());
        }
        let (lo, hi) = self.natural_output_tokens;
        if lo == 0 || lo > hi {
            return Err("natural output range must be 1 <= min <= max".into());
        }
        Ok(())
    }
}
