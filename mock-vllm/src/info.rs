//! What a client asks about the server itself: `/health` (its modes and startup delay),
//! `/v1/models`, `/version`, shaped like vLLM's answers.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::Rng;
use serde_json::json;

use crate::clock::epoch_secs;
use crate::health::Health;
use crate::state::{lock, Shared};

pub(crate) async fn health(State(shared): State<Arc<Shared>>) -> Response {
    if shared.starting(crate::clock::Now::read()) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match shared.health() {
        Health::Up => StatusCode::OK.into_response(),
        Health::Down => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Health::Hang => crate::faults::hang().await,
    }
}

fn random_hex(shared: &Shared) -> String {
    format!("{:032x}", lock(&shared.rng).gen::<u128>())
}

pub(crate) async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let created = epoch_secs() as u64;
    let m = json!(shared.cfg.model);
    let perm = random_hex(&shared);
    let body = format!(
        r#"{{"object":"list","data":[{{"id":{m},"object":"model","created":{created},"owned_by":"vllm","root":{m},"parent":null,"max_model_len":{},"permission":[{{"id":"modelperm-{perm}","object":"model_permission","created":{created},"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}}]}}]}}"#,
        shared.cfg.max_model_len
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) async fn version(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(json!({"version": shared.cfg.dialect.version()}))
}
