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

use crate::answer::{output_length, Plan};
use crate::clock::epoch_secs;
use crate::config::Config;
use crate::engine::{Admit, Engine, Slot};
use crate::error::ApiError;
use crate::faults::Fault;
use crate::state::Shared;
use crate::stats::{FinishReason, Finished};
use crate::validate::{self, Api};

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

    let armed = completion_faults_armed(&shared);
    let roll: f64 = rng.gen();
    if armed {
        injected_failure(&shared, roll, nested)?;
    }

    let Some(engine) = core.pick_engine().cloned() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "No engine.",
            nested,
        ));
    };
    let (out_tokens, reason) = output_length(&req, shared.cfg.natural_output_tokens, &mut rng);
    let need = req.prompt_tokens as u64 + out_tokens as u64;
    let slot = admit(&engine, need, &shared.cfg, nested).await?;
    let scheduled = Instant::now();
    let inflight = Inflight {
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

    Ok(whole_answer(plan, inflight, rng).await)
}

/// The non-streaming answer: sleep to the first token, then to the last (or to the
/// drop), record what happened, answer the body.
async fn whole_answer(plan: Plan, mut inflight: Inflight, mut rng: StdRng) -> Response {
    let engine = inflight.engine.clone();
    let (arrival, scheduled) = (plan.arrival, plan.scheduled);
    let prefill = engine.prefill_time(plan.prompt_tokens, &mut rng);
    sleep_until(scheduled + prefill).await;
    let first = Instant::now();
    let hit = engine.prefix_lookup(plan.req.prompt_hash);
    {
        let mut stats = engine.stats();
        stats.record_render(plan.prompt_tokens, plan.req.chat);
        stats.record_prefill(
            plan.prompt_tokens,
            hit,
            first.duration_since(arrival).as_secs_f64(),
        );
    }
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
            return (
                [(header::CONTENT_TYPE, "application/json")],
                Body::from_stream(futures_util::stream::iter(chunks)),
            )
                .into_response();
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
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
/// Whether any `completion_*` fault is armed (most requests skip the fault path).
fn completion_faults_armed(shared: &Shared) -> bool {
    shared.faults.any(|f| {
        matches!(
            f,
            Fault::CompletionFail { .. } | Fault::CompletionHang | Fault::CompletionDrop { .. }
        )
    })
}

/// `completion_fail`: this request fails if its `roll` falls under the fraction.
fn injected_failure(shared: &Shared, roll: f64, nested: bool) -> Result<(), ApiError> {
    let failing = shared.fire(|f| match f {
        Fault::CompletionFail { fraction, status } if roll < *fraction => Some(*status),
        _ => None,
    });
    match failing {
        None => Ok(()),
        Some(status) => Err(ApiError::new(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Injected failure (completion_fail fault).",
            nested,
        )),
    }
}

/// A running slot on `engine` for `need` KV tokens, after queueing if it must; 429 when
/// the queue is full.
async fn admit(
    engine: &Arc<Engine>,
    need: u64,
    cfg: &Config,
    nested: bool,
) -> Result<Slot, ApiError> {
    match engine.admit(need) {
        Admit::Running(slot) => Ok(slot),
        Admit::Queued(ticket) => Ok(ticket.wait().await),
        Admit::Rejected => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("The waiting queue is full ({} requests).", cfg.max_waiting),
            nested,
        )),
    }
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
            {
                let mut stats = engine.stats();
                stats.record_render(st.plan.prompt_tokens, st.plan.req.chat);
                stats.record_prefill(
                    st.plan.prompt_tokens,
                    hit,
                    now.duration_since(st.plan.arrival).as_secs_f64(),
                );
            }
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
