//! `POST /v1/completions` and `POST /v1/chat/completions`, streaming or not, shaped like
//! vLLM's `protocol.py` answers. The text is trivial; the timing and accounting are not:
//! each request goes through its engine's queue and slot, sleeps until each token is
//! due, and records what really happened into the engine's stats.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::clock::epoch_secs;
use crate::engine::{Admit, Engine, Slot};
use crate::error::ApiError;
use crate::faults::Fault;
use crate::state::Shared;
use crate::stats::{FinishReason, Finished};
use crate::tokenizer::token_text;
use crate::validate::{self, Api, Req};

pub(crate) async fn completions(State(shared): State<Arc<Shared>>, body: Body) -> Response {
    serve(shared, Api::Completions, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(crate) async fn chat_completions(State(shared): State<Arc<Shared>>, body: Body) -> Response {
    serve(shared, Api::Chat, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// A request in flight on an engine: holds the slot, records an abort if dropped
/// before it finished (client gone, connection reset, fault).
struct Inflight {
    engine: Arc<Engine>,
    slot: Option<Slot>,
    pending_itls: Vec<f64>,
    done: bool,
}

impl Inflight {
    fn flush(&mut self) {
        if !self.pending_itls.is_empty() {
            self.engine.stats().record_decode(&self.pending_itls);
            self.pending_itls.clear();
        }
    }

    fn finish(&mut self, reason: FinishReason, f: &Finished) {
        self.flush();
        self.engine.stats().record_finished(reason, f);
        self.done = true;
        self.slot.take();
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        if !self.done {
            self.flush();
            self.engine.stats().count_success(FinishReason::Abort);
        }
    }
}

/// Per-request identity and plan.
struct Plan {
    api: Api,
    id: String,
    created: u64,
    model_json: String,
    prompt_tokens: u32,
    out_tokens: u32,
    reason: FinishReason,
    word_offset: u64,
    drop_after: Option<u32>,
    arrival: Instant,
    scheduled: Instant,
    req: Req,
}

impl Plan {
    fn usage(&self, completion: u32) -> String {
        format!(
            r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{completion},"prompt_tokens_details":null}}"#,
            self.prompt_tokens,
            self.prompt_tokens + completion
        )
    }

    fn finished(&self, first: Instant, end: Instant, generated: u32) -> Finished {
        Finished {
            prompt_tokens: self.prompt_tokens,
            generation_tokens: generated,
            max_tokens_param: self.req.max_tokens_param,
            max_generation_tokens: self.req.max_tokens,
            n: 1,
            queue: self.scheduled.duration_since(self.arrival).as_secs_f64(),
            prefill: first.duration_since(self.scheduled).as_secs_f64(),
            decode: end.duration_since(first).as_secs_f64(),
            e2e: end.duration_since(self.arrival).as_secs_f64(),
        }
    }

    fn text(&self, from: u32, to: u32) -> String {
        let mut s = String::new();
        for i in from..to {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(token_text(self.word_offset, i));
        }
        s
    }

    /// One SSE chunk carrying tokens `[from, to)`; `finish` on the last one.
    fn chunk(&self, from: u32, to: u32, finish: Option<FinishReason>) -> String {
        let text = self.text(from, to);
        let fin = finish
            .map(|r| format!("\"{}\"", r.as_str()))
            .unwrap_or_else(|| "null".into());
        match self.api {
            Api::Completions => format!(
                "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"text\":\"{}\",\"logprobs\":null,\"finish_reason\":{},\"stop_reason\":null}}]}}\n\n",
                self.id, self.created, self.model_json, text, fin
            ),
            Api::Chat => format!(
                "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"logprobs\":null,\"finish_reason\":{}{}}}]}}\n\n",
                self.id, self.created, self.model_json, text, fin,
                if finish.is_some() { ",\"stop_reason\":null" } else { "" }
            ),
        }
    }

    fn role_chunk(&self) -> String {
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
            self.id, self.created, self.model_json
        )
    }

    fn usage_chunk(&self, completion: u32) -> String {
        let object = if self.api == Api::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{}}}\n\n",
            self.id,
            self.created,
            self.model_json,
            self.usage(completion)
        )
    }

    /// The non-streaming answer, fields in vLLM's (pydantic) order.
    fn full_body(&self) -> String {
        let text = self.text(0, self.out_tokens);
        let reason = self.reason.as_str();
        let usage = self.usage(self.out_tokens);
        match self.api {
            Api::Completions => format!(
                r#"{{"id":"{}","object":"text_completion","created":{},"model":{},"choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":"{reason}","stop_reason":null,"prompt_logprobs":null}}],"usage":{usage},"kv_transfer_params":null}}"#,
                self.id, self.created, self.model_json
            ),
            Api::Chat => format!(
                r#"{{"id":"{}","object":"chat.completion","created":{},"model":{},"choices":[{{"index":0,"message":{{"role":"assistant","reasoning_content":null,"content":"{text}","tool_calls":[]}},"logprobs":null,"finish_reason":"{reason}","stop_reason":null}}],"usage":{usage},"prompt_logprobs":null,"kv_transfer_params":null}}"#,
                self.id, self.created, self.model_json
            ),
        }
    }
}

async fn serve(shared: Arc<Shared>, api: Api, body: Body) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let nested = shared.cfg.dialect.nested_errors();
    if shared.starting(crate::clock::Now::read()) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The server is starting up.",
            nested,
        ));
    }
    let bytes = match crate::body::read_capped(body, shared.cfg.max_body_bytes, nested).await {
        Ok(b) => b,
        Err(answer) => return Ok(answer),
    };
    let req = validate::parse(&shared.cfg, api, &bytes)?;

    let core = shared.core();
    let seq = core.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut rng = StdRng::seed_from_u64(
        shared.cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.wrapping_add(1),
    );

    let roll: f64 = rng.gen();
    let armed = shared.faults.any(|f| {
        matches!(
            f,
            Fault::CompletionFail { .. } | Fault::CompletionHang | Fault::CompletionDrop { .. }
        )
    });
    let failing = if !armed {
        None
    } else {
        shared.fire(|f| match f {
            Fault::CompletionFail { fraction, status } if roll < *fraction => Some(*status),
            _ => None,
        })
    };
    if let Some(status) = failing {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return Err(ApiError::new(
            code,
            "Injected failure (completion_fail fault).",
            nested,
        ));
    }

    let Some(engine) = core.pick_engine().cloned() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "No engine.",
            nested,
        ));
    };
    let (lo, hi) = shared.cfg.natural_output_tokens;
    let natural = rng.gen_range(lo..=hi).max(req.min_tokens);
    let (out_tokens, reason) = if req.ignore_eos || natural >= req.max_tokens {
        (req.max_tokens, FinishReason::Length)
    } else {
        (natural, FinishReason::Stop)
    };
    let need = req.prompt_tokens as u64 + out_tokens as u64;
    let slot = match engine.admit(need) {
        Admit::Running(slot) => slot,
        Admit::Queued(ticket) => ticket.wait().await,
        Admit::Rejected => {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "The waiting queue is full ({} requests).",
                    shared.cfg.max_waiting
                ),
                nested,
            ))
        }
    };
    let scheduled = Instant::now();
    let mut inflight = Inflight {
        engine: engine.clone(),
        slot: Some(slot),
        pending_itls: Vec::new(),
        done: false,
    };

    if armed
        && shared
            .fire(|f| matches!(f, Fault::CompletionHang).then_some(()))
            .is_some()
    {
        let _hold = inflight;
        return Ok(crate::faults::hang().await);
    }
    let drop_after = if armed {
        shared.fire(|f| match f {
            Fault::CompletionDrop { after_tokens } => Some(*after_tokens),
            _ => None,
        })
    } else {
        None
    };

    let prefix = if api == Api::Chat { "chatcmpl" } else { "cmpl" };
    let plan = Plan {
        api,
        id: format!("{prefix}-{:032x}", rng.gen::<u128>()),
        created: epoch_secs() as u64,
        model_json: Value::String(shared.cfg.model.clone()).to_string(),
        prompt_tokens: req.prompt_tokens,
        out_tokens,
        reason,
        word_offset: rng.gen::<u16>() as u64,
        drop_after,
        arrival,
        scheduled,
        req,
    };

    if plan.req.stream {
        let body = stream_body(plan, inflight, rng);
        return Ok((
            [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
            Body::from_stream(body),
        )
            .into_response());
    }

    // Non-streaming: sleep to the first token, then to the last.
    let prefill = engine.prefill_time(plan.prompt_tokens, &mut rng);
    sleep_until(scheduled + prefill).await;
    let first = Instant::now();
    let hit = engine.prefix_lookup(plan.req.prompt_hash);
    engine.stats().record_prefill(
        plan.prompt_tokens,
        hit,
        first.duration_since(arrival).as_secs_f64(),
    );
    let planned: Vec<Duration> = (1..plan.out_tokens)
        .map(|_| engine.inter_token_time(&mut rng))
        .collect();
    if let Some(k) = plan.drop_after {
        if k < plan.out_tokens {
            let until: Duration = planned.iter().take(k.saturating_sub(1) as usize).sum();
            sleep_until(first + until).await;
            drop(inflight);
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from_static(b"{\"id\":")),
                Err(std::io::Error::other("completion_drop")),
            ];
            return Ok((
                [(header::CONTENT_TYPE, "application/json")],
                Body::from_stream(futures_util::stream::iter(chunks)),
            )
                .into_response());
        }
    }
    let total: Duration = planned.iter().sum();
    sleep_until(first + total).await;
    let end = Instant::now();
    // The decode really took `end - first`: spread it over the tokens as planned.
    let real = end.duration_since(first).as_secs_f64();
    let scale = if total.is_zero() {
        1.0
    } else {
        real / total.as_secs_f64()
    };
    inflight.pending_itls = planned.iter().map(|d| d.as_secs_f64() * scale).collect();
    let finished = plan.finished(first, end, plan.out_tokens);
    inflight.finish(plan.reason, &finished);
    let body = plan.full_body();
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Sleep until `at`, without touching the timer wheel when it is already due.
async fn sleep_until(at: Instant) {
    if at > Instant::now() {
        tokio::time::sleep_until(at.into()).await;
    }
}

struct StreamState {
    plan: Plan,
    inflight: Inflight,
    rng: StdRng,
    /// Tokens sent so far.
    sent: u32,
    first: Option<Instant>,
    last: Instant,
    done: bool,
}

/// The SSE body: one chunk per token at its due time, then usage and `[DONE]`.
fn stream_body(
    plan: Plan,
    inflight: Inflight,
    rng: StdRng,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let last = plan.scheduled;
    let st = StreamState {
        plan,
        inflight,
        rng,
        sent: 0,
        first: None,
        last,
        done: false,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let engine = st.inflight.engine.clone();
        if st
            .plan
            .drop_after
            .is_some_and(|k| st.sent >= k && st.sent < st.plan.out_tokens)
        {
            st.done = true;
            return Some((Err(std::io::Error::other("completion_drop")), st));
        }
        let mut out = String::new();
        if st.sent == 0 {
            let prefill = engine.prefill_time(st.plan.prompt_tokens, &mut st.rng);
            sleep_until(st.plan.scheduled + prefill).await;
            let now = Instant::now();
            st.first = Some(now);
            st.last = now;
            let hit = engine.prefix_lookup(st.plan.req.prompt_hash);
            engine.stats().record_prefill(
                st.plan.prompt_tokens,
                hit,
                now.duration_since(st.plan.arrival).as_secs_f64(),
            );
            if st.plan.api == Api::Chat {
                out.push_str(&st.plan.role_chunk());
            }
        } else {
            let itl = engine.inter_token_time(&mut st.rng);
            sleep_until(st.last + itl).await;
            let now = Instant::now();
            st.inflight
                .pending_itls
                .push(now.duration_since(st.last).as_secs_f64());
            if st.inflight.pending_itls.len() >= 16 {
                st.inflight.flush();
            }
            st.last = now;
        }
        st.sent += 1;
        let last_token = st.sent >= st.plan.out_tokens;
        out.push_str(
            &st.plan
                .chunk(st.sent - 1, st.sent, last_token.then_some(st.plan.reason)),
        );
        if last_token {
            let first = st.first.unwrap_or(st.last);
            let finished = st.plan.finished(first, st.last, st.sent);
            st.inflight.finish(st.plan.reason, &finished);
            if st.plan.req.include_usage {
                out.push_str(&st.plan.usage_chunk(st.sent));
            }
            out.push_str("data: [DONE]\n\n");
            st.done = true;
        }
        Some((Ok(Bytes::from(out)), st))
    })
}
