//! What really happened, counted: per-engine counters and histograms, and the HTTP
//! instrumentation vLLM's FastAPI app exports. Every `/metrics` number comes from here.
//!
//! All series are recorded whatever the dialect; the dialect only picks which to show and
//! which bucket boundaries to use (those differ between vLLM releases).

use std::sync::Arc;

use crate::config::Dialect;

/// A prometheus_client-style histogram: per-bucket counts, sum, count.
#[derive(Clone, Debug)]
pub struct Hist {
    pub bounds: Arc<[f64]>,
    /// Non-cumulative counts, one per bound plus the +Inf bucket.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Hist {
    pub fn new(bounds: Arc<[f64]>) -> Self {
        let n = bounds.len() + 1;
        Hist {
            bounds,
            counts: vec![0; n],
            sum: 0.0,
            count: 0,
        }
    }

    /// prometheus_client puts `v` in the first bucket with `v <= bound`.
    pub fn observe_n(&mut self, v: f64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += n;
        }
        self.sum += v * n as f64;
        self.count += n;
    }

    pub fn observe(&mut self, v: f64) {
        self.observe_n(v, 1)
    }

    /// Add `other`'s observations (the same bounds; a histogram of other bounds is
    /// left out).
    pub fn merge(&mut self, other: &Hist) {
        if other.bounds != self.bounds {
            return;
        }
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.sum += other.sum;
        self.count += other.count;
    }

    /// Cumulative counts, the last one being +Inf.
    pub fn cumulative(&self) -> Vec<f64> {
        let mut acc = 0u64;
        self.counts
            .iter()
            .map(|c| {
                acc += c;
                acc as f64
            })
            .collect()
    }
}

/// Bucket boundaries per vLLM release (`vllm/engine/metrics.py` for v0,
/// `vllm/v1/metrics/loggers.py` for the V1 engine).
#[derive(Clone, Debug)]
pub struct Buckets {
    pub tokens_125: Arc<[f64]>,
    pub iteration: Arc<[f64]>,
    pub n: Arc<[f64]>,
    pub ttft: Arc<[f64]>,
    pub itl: Arc<[f64]>,
    pub latency: Arc<[f64]>,
    /// Preemptions per request (0.33's `vllm:request_num_preemptions`).
    pub preemptions: Arc<[f64]>,
    /// Render time of a request (0.34's `vllm:request_render_duration_seconds`).
    pub render: Arc<[f64]>,
}

/// vLLM's `build_1_2_5_buckets(max_model_len)`.
pub fn buckets_1_2_5(max_value: u32) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale: u64 = 1;
    loop {
        for m in [1u64, 2, 5] {
            let v = m * scale;
            if v > max_value as u64 {
                return out;
            }
            out.push(v as f64);
        }
        scale *= 10;
    }
}

thread_local! {
    /// The boundaries already made on this thread, by (dialect, max_model_len).
    static SHARED: std::cell::RefCell<Vec<((Dialect, u32), Buckets)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Buckets {
    /// [`Buckets::for_dialect`], the same slices for every caller on this thread: a
    /// simulator's thousands of cores then read one copy, which stays in the cache.
    pub fn shared(dialect: Dialect, max_model_len: u32) -> Self {
        SHARED.with(|m| {
            let mut m = m.borrow_mut();
            if let Some((_, b)) = m.iter().find(|(k, _)| *k == (dialect, max_model_len)) {
                return b.clone();
            }
            let b = Buckets::for_dialect(dialect, max_model_len);
            m.push(((dialect, max_model_len), b.clone()));
            b
        })
    }

    pub fn for_dialect(dialect: Dialect, max_model_len: u32) -> Self {
        let v0 = dialect == Dialect::V0;
        let ttft: &[f64] = if v0 {
            &[
                0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0,
            ]
        } else {
            &[
                0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
            ]
        };
        let itl: &[f64] = if v0 {
            &[
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
            ]
        } else {
            &[
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0,
            ]
        };
        let latency: &[f64] = if v0 {
            &[
                0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            ]
        } else {
            &[
                0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
            ]
        };
        let iteration: &[f64] = if v0 {
            // enforce_eager list (the CUDA-graph sizes of a real GPU otherwise).
            &[
                1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8096.0,
            ]
        } else {
            &[
                1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
                16384.0,
            ]
        };
        Buckets {
            tokens_125: buckets_1_2_5(max_model_len).into(),
            iteration: iteration.into(),
            n: [1.0, 2.0, 5.0, 10.0, 20.0].as_slice().into(),
            ttft: ttft.into(),
            itl: itl.into(),
            latency: latency.into(),
            preemptions: [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0].as_slice().into(),
            render: [
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0,
            ]
            .as_slice()
            .into(),
        }
    }
}

/// Why a request finished, in vLLM's `FinishReason` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop = 0,
    Length = 1,
    Abort = 2,
}

impl FinishReason {
    pub const ALL: [FinishReason; 3] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// One finished request's timeline, in seconds.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    pub prompt_tokens: u32,
    pub generation_tokens: u32,
    pub max_tokens_param: Option<u32>,
    pub max_generation_tokens: u32,
    pub n: u32,
    pub queue: f64,
    pub prefill: f64,
    pub decode: f64,
    pub e2e: f64,
}

/// One engine's counters and histograms since it started (or since the last counter
/// reset).
#[derive(Clone, Debug)]
pub struct EngineStats {
    /// Epoch seconds at which the series were created (`_created`).
    pub created: f64,
    pub prompt_tokens: f64,
    pub generation_tokens: f64,
    pub preemptions: f64,
    pub prefix_queries: f64,
    pub prefix_hits: f64,
    pub success: [f64; 3],
    /// v0 creates a `finished_reason` child only once it has been seen.
    pub success_seen: [bool; 3],
    pub rejected: u64,
    pub h_prompt: Hist,
    pub h_generation: Hist,
    pub h_iteration: Hist,
    pub h_max_generation: Hist,
    pub h_n: Hist,
    pub h_max_tokens: Hist,
    pub h_ttft: Hist,
    pub h_itl: Hist,
    pub h_request_tpot: Hist,
    pub h_e2e: Hist,
    pub h_queue: Hist,
    pub h_inference: Hist,
    pub h_prefill: Hist,
    pub h_decode: Hist,
    /// Times each finished request was preempted (the load model never preempts).
    pub h_preemptions: Hist,
    /// Prompt tokens computed at prefill, the prefix-cache hits excluded.
    pub h_prefill_kv: Hist,
    /// Render time of completions and of chat requests; a kind shows on the page once
    /// one has been rendered (prometheus_client creates the child on first use).
    pub h_render: [Hist; 2],
    /// The sleep level while the engine sleeps (1: weights offloaded, 2: all
    /// discarded; 0: scheduling paused), `None` while awake.
    pub asleep: Option<u8>,
}

/// Render time of a request of `prompt_tokens` tokens: templating and tokenizing, a
/// fixed part and a part per token (deterministic, so pages are reproducible).
pub fn render_secs(prompt_tokens: u32, chat: bool) -> f64 {
    let base = if chat { 0.0004 } else { 0.00015 };
    base + prompt_tokens as f64 * 2e-7
}

/// Block size of the pretend prefix cache (vLLM's default).
pub const BLOCK_SIZE: u32 = 16;

impl EngineStats {
    pub fn new(b: &Buckets, created: f64) -> Self {
        EngineStats {
            created,
            prompt_tokens: 0.0,
            generation_tokens: 0.0,
            preemptions: 0.0,
            prefix_queries: 0.0,
            prefix_hits: 0.0,
            success: [0.0; 3],
            success_seen: [false; 3],
            rejected: 0,
            h_prompt: Hist::new(b.tokens_125.clone()),
            h_generation: Hist::new(b.tokens_125.clone()),
            h_iteration: Hist::new(b.iteration.clone()),
            h_max_generation: Hist::new(b.tokens_125.clone()),
            h_n: Hist::new(b.n.clone()),
            h_max_tokens: Hist::new(b.tokens_125.clone()),
            h_ttft: Hist::new(b.ttft.clone()),
            h_itl: Hist::new(b.itl.clone()),
            h_request_tpot: Hist::new(b.itl.clone()),
            h_e2e: Hist::new(b.latency.clone()),
            h_queue: Hist::new(b.latency.clone()),
            h_inference: Hist::new(b.latency.clone()),
            h_prefill: Hist::new(b.latency.clone()),
            h_decode: Hist::new(b.latency.clone()),
            h_preemptions: Hist::new(b.preemptions.clone()),
            h_prefill_kv: Hist::new(b.tokens_125.clone()),
            h_render: [Hist::new(b.render.clone()), Hist::new(b.render.clone())],
            asleep: None,
        }
    }

    /// A request rendered before it is queued (`chat`: a chat request).
    pub fn record_render(&mut self, prompt_tokens: u32, chat: bool) {
        if let Some(h) = self.h_render.get_mut(usize::from(chat)) {
            h.observe(render_secs(prompt_tokens, chat));
        }
    }

    /// The prefill step: prompt tokens processed, the first token out. A prefix-cache
    /// hit covers the prompt's full blocks.
    pub fn record_prefill(&mut self, prompt_tokens: u32, prefix_hit: bool, ttft: f64) {
        self.prompt_tokens += prompt_tokens as f64;
        self.generation_tokens += 1.0;
        self.prefix_queries += prompt_tokens as f64;
        let cached = if prefix_hit {
            prompt_tokens / BLOCK_SIZE * BLOCK_SIZE
        } else {
            0
        };
        self.prefix_hits += cached as f64;
        self.h_prefill_kv.observe((prompt_tokens - cached) as f64);
        self.h_iteration.observe(prompt_tokens as f64 + 1.0);
        self.h_ttft.observe(ttft);
    }

    /// Decode steps after the first token: one token each, with its latency.
    pub fn record_decode(&mut self, itls: &[f64]) {
        self.generation_tokens += itls.len() as f64;
        self.h_iteration.observe_n(1.0, itls.len() as u64);
        for itl in itls {
            self.h_itl.observe(*itl);
        }
    }

    pub fn record_finished(&mut self, reason: FinishReason, f: &Finished) {
        self.count_success(reason);
        self.h_preemptions.observe(0.0);
        self.h_e2e.observe(f.e2e);
        self.h_queue.observe(f.queue);
        self.h_prefill.observe(f.prefill);
        self.h_inference.observe(f.prefill + f.decode);
        self.h_decode.observe(f.decode);
        self.h_prompt.observe(f.prompt_tokens as f64);
        self.h_generation.observe(f.generation_tokens as f64);
        self.h_max_generation
            .observe(f.max_generation_tokens as f64);
        self.h_n.observe(f.n as f64);
        if let Some(m) = f.max_tokens_param {
            self.h_max_tokens.observe(m as f64);
        }
        if f.generation_tokens > 1 {
            self.h_request_tpot
                .observe(f.decode / (f.generation_tokens - 1) as f64);
        }
    }

    pub fn count_success(&mut self, reason: FinishReason) {
        let i = reason as usize;
        if let Some(s) = self.success.get_mut(i) {
            *s += 1.0;
        }
        if let Some(s) = self.success_seen.get_mut(i) {
            *s = true;
        }
    }
}

/// One HTTP handler's series (prometheus-fastapi-instrumentator).
#[derive(Clone, Debug)]
pub struct HandlerStats {
    pub handler: String,
    pub method: String,
    pub created: f64,
    pub request_bytes: (f64, f64),
    pub response_bytes: (f64, f64),
    pub duration: Hist,
}

/// One answered HTTP request, as the instrumentation sees it.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    pub handler: &'a str,
    pub method: &'a str,
    pub status: u16,
    pub req_bytes: u64,
    pub resp_bytes: u64,
    pub secs: f64,
}

/// The `http_*` families, children in first-seen order as prometheus_client keeps them.
#[derive(Clone, Debug)]
pub struct HttpStats {
    pub created: f64,
    /// (handler, method, status group) -> count, created.
    pub requests: Vec<((String, String, String), f64, f64)>,
    pub handlers: Vec<HandlerStats>,
    pub highr: Hist,
}

const HIGHR: [f64; 21] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
const FEW: [f64; 3] = [0.1, 0.5, 1.0];

impl HttpStats {
    pub fn new(created: f64) -> Self {
        HttpStats {
            created,
            requests: Vec::new(),
            handlers: Vec::new(),
            highr: Hist::new(HIGHR.as_slice().into()),
        }
    }

    /// Count one answered request; a new label set is created at `now_epoch`.
    pub fn record(&mut self, x: &Exchange, now_epoch: f64) {
        let Exchange {
            handler,
            method,
            status,
            req_bytes,
            resp_bytes,
            secs,
        } = *x;
        let group = match status / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        };
        match self
            .requests
            .iter_mut()
            .find(|((h, m, s), _, _)| h == handler && m == method && s == group)
        {
            Some(entry) => entry.1 += 1.0,
            None => self.requests.push((
                (handler.into(), method.into(), group.into()),
                1.0,
                now_epoch,
            )),
        }
        let idx = match self
            .handlers
            .iter()
            .position(|h| h.handler == handler && h.method == method)
        {
            Some(i) => i,
            None => {
                self.handlers.push(HandlerStats {
                    handler: handler.into(),
                    method: method.into(),
                    created: now_epoch,
                    request_bytes: (0.0, 0.0),
                    response_bytes: (0.0, 0.0),
                    duration: Hist::new(FEW.as_slice().into()),
                });
                self.handlers.len() - 1
            }
        };
        if let Some(h) = self.handlers.get_mut(idx) {
            h.request_bytes.0 += 1.0;
            h.request_bytes.1 += req_bytes as f64;
            h.response_bytes.0 += 1.0;
            h.response_bytes.1 += resp_bytes as f64;
            h.duration.observe(secs);
        }
        self.highr.observe(secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five() {
        assert_eq!(
            buckets_1_2_5(100),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(buckets_1_2_5(8192).last(), Some(&5000.0));
    }

    #[test]
    fn hist_le_is_inclusive() {
        let mut h = Hist::new([1.0, 2.0].as_slice().into());
        h.observe(1.0);
        h.observe(1.5);
        h.observe(9.0);
        assert_eq!(h.cumulative(), vec![1.0, 2.0, 3.0]);
        assert_eq!(h.count, 3);
        assert!((h.sum - 11.5).abs() < 1e-12);
    }
}
