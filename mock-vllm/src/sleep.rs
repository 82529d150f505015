//! Sleep mode as vLLM's dev-mode server (`VLLM_SERVER_DEV_MODE=1`) answers it:
//! `POST /sleep?level=0|1|2[&mode=abort|wait|keep]`, `POST /wake_up[?tags=..]`,
//! `GET /is_sleeping` (`vllm/entrypoints/serve/dev/sleep/api_router.py`). Served
//! whatever the mode here.
//!
//! While asleep no engine starts a request: arrivals wait in the queue until wake-up,
//! as 0.33 queues them (sleep pauses the scheduler without setting the engine to reject
//! new requests; only `POST /pause` does that, answering `engine_paused`, and the fake
//! has no `/pause`). Running requests finish, which is vLLM's `mode=wait`; the default
//! `abort` (in-flight requests aborted) and `keep` (frozen) are accepted but not
//! modelled. Every engine sleeps together, as `engine_client.sleep` puts the whole
//! data-parallel group to sleep; `vllm:engine_sleep_state` follows (awake 0; level 1
//! `weights_offloaded`, level 2 `discard_all`; level 0 only pauses).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::state::Shared;

/// The level of `POST /sleep`'s query, or FastAPI's 422 body for a bad one
/// (`level: Annotated[int, Query(ge=0, le=2)] = 1`, `mode: PauseMode = "abort"`).
pub fn sleep_level(query: &[(String, String)]) -> Result<u8, Value> {
    let get = |name: &str| query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    if let Some(mode) = get("mode") {
        if !matches!(mode.as_str(), "abort" | "wait" | "keep") {
            return Err(detail(json!({
                "type": "literal_error",
                "loc": ["query", "mode"],
                "msg": "Input should be 'abort', 'wait' or 'keep'",
                "input": mode,
                "ctx": {"expected": "'abort', 'wait' or 'keep'"},
            })));
        }
    }
    let Some(raw) = get("level") else {
        return Ok(1);
    };
    let Ok(level) = raw.trim().parse::<i64>() else {
        return Err(detail(json!({
            "type": "int_parsing",
            "loc": ["query", "level"],
            "msg": "Input should be a valid integer, unable to parse string as an integer",
            "input": raw,
        })));
    };
    match level {
        0..=2 => Ok(level as u8),
        l if l < 0 => Err(detail(json!({
            "type": "greater_than_equal",
            "loc": ["query", "level"],
            "msg": "Input should be greater than or equal to 0",
            "input": raw,
            "ctx": {"ge": 0},
        }))),
        _ => Err(detail(json!({
            "type": "less_than_equal",
            "loc": ["query", "level"],
            "msg": "Input should be less than or equal to 2",
            "input": raw,
            "ctx": {"le": 2},
        }))),
    }
}

fn detail(error: Value) -> Value {
    json!({ "detail": [error] })
}

/// `POST /wake_up`'s answer: the tags echoed (`null` without any).
pub fn wake_answer(query: &[(String, String)]) -> Value {
    let tags: Vec<&str> = query
        .iter()
        .filter(|(k, _)| k == "tags")
        .map(|(_, v)| v.as_str())
        .collect();
    let tags = if tags.is_empty() {
        Value::Null
    } else {
        json!(tags)
    };
    json!({"status": "awake", "tags": tags})
}

pub(crate) async fn sleep(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    match sleep_level(&query) {
        Ok(level) => {
            for e in &shared.core().engines {
                e.sleep(level);
            }
            Json(json!({"status": "sleeping", "level": level})).into_response()
        }
        Err(body) => (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response(),
    }
}

pub(crate) async fn wake_up(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Json<Value> {
    for e in &shared.core().engines {
        e.wake();
    }
    Json(wake_answer(&query))
}

pub(crate) async fn is_sleeping(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let asleep = shared
        .core()
        .engines
        .iter()
        .any(|e| e.stats().asleep.is_some());
    Json(json!({ "is_sleeping": asleep }))
}
