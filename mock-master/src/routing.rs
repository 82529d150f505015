//! OpenAI traffic: `GET /v1/models` and the completions routes, proxied by load.
//!
//! The target is the routable instance (ACTIVE or LEASE_LOST) [`crate::pick`] chooses.
//! Responses (streams included) are relayed as they arrive.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::body::{read_capped, BodyError};
use crate::error::ApiError;
use crate::event::{MasterEvent, RouteChoice};
use crate::pick::pick;
use crate::state::AppState;

/// How long `/v1/models` waits for each instance.
const MODELS_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest model list read from one instance.
const MODELS_CAP: usize = 1024 * 1024;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
}

fn unavailable() -> ApiError {
    ApiError::OpenAi(
        StatusCode::SERVICE_UNAVAILABLE,
        "no routable instance".to_string(),
        "service_unavailable",
    )
}

async fn models(State(s): State<AppState>) -> Result<Response, ApiError> {
    let names: Vec<String> = s.registry.routable().into_iter().map(|(n, _)| n).collect();
    if names.is_empty() {
        s.metrics.routed("models", "no_instance");
        return Err(unavailable());
    }
    let fetches = names.iter().map(|name| {
        let http = s.upstream.clone();
        let url = format!("http://{name}/v1/models");
        async move {
            let resp = tokio::time::timeout(MODELS_TIMEOUT, http.get(&url).send())
                .await
                .ok()?
                .ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body =
                tokio::time::timeout(MODELS_TIMEOUT, crate::etcd::read_capped(resp, MODELS_CAP))
                    .await
                    .ok()?
                    .ok()?;
            serde_json::from_slice::<Value>(&body).ok()
        }
    });
    let answers = futures_util::future::join_all(fetches).await;
    let mut data: Vec<Value> = Vec::new();
    let mut answered = 0;
    for list in answers.into_iter().flatten() {
        answered += 1;
        for model in list
            .get("data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = model.get("id");
            if id.is_some() && !data.iter().any(|m| m.get("id") == id) {
                data.push(model.clone());
            }
        }
    }
    if answered == 0 {
        s.metrics.routed("models", "upstream_error");
        return Err(ApiError::OpenAi(
            StatusCode::BAD_GATEWAY,
            "no instance answered /v1/models".to_string(),
            "bad_gateway",
        ));
    }
    s.metrics.routed("models", "ok");
    Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
}

async fn completions(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    proxy(s, "/v1/completions", headers, body).await
}

async fn chat_completions(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    proxy(s, "/v1/chat/completions", headers, body).await
}

async fn proxy(
    s: AppState,
    path: &'static str,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_capped(body, s.config.max_body_bytes)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => ApiError::OpenAi(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large".into(),
                "invalid_request",
            ),
            BodyError::Unreadable => ApiError::OpenAi(
                StatusCode::BAD_REQUEST,
                "could not read request body".into(),
                "invalid_request",
            ),
        })?;
    let candidates = s.registry.routable();
    let cursor = s.rr.fetch_add(1, AtomicOrdering::Relaxed);
    let Some(i) = pick(&candidates, cursor) else {
        s.metrics.routed(path, "no_instance");
        s.events
            .emit_event(&MasterEvent::Route { path, chosen: None });
        return Err(unavailable());
    };
    let Some((name, load)) = candidates.get(i) else {
        return Err(unavailable());
    };
    s.events.emit_event(&MasterEvent::Route {
        path,
        chosen: Some(RouteChoice {
            name,
            load,
            candidates: &candidates,
        }),
    });
    let mut req = s.upstream.post(format!("http://{name}{path}")).body(body);
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            s.metrics.routed(path, "upstream_error");
            return Err(ApiError::OpenAi(
                StatusCode::BAD_GATEWAY,
                format!("instance {name} failed: {e}"),
                "bad_gateway",
            ));
        }
    };
    s.metrics.routed(path, "ok");
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder()
        .status(status)
        .header("x-routed-to", name.as_str());
    if let Some(ct) = resp.headers().get(reqwest::header::CONTENT_TYPE) {
        out = out.header(header::CONTENT_TYPE, ct.as_bytes());
    }
    out.body(Body::from_stream(resp.bytes_stream()))
        .map_err(|e| ApiError::OpenAi(StatusCode::BAD_GATEWAY, e.to_string(), "bad_gateway"))
}
