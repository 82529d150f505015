//! Reading a request body: the one place a body is read, always with a size cap.

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The whole body, at most `limit` bytes; otherwise the answer to give instead
/// (`nested`: the newer vLLM error shape).
pub(crate) async fn read_capped(body: Body, limit: usize, nested: bool) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| unreadable(&e, limit, nested))
}

/// The answer to a body that could not be read. Broken HTTP framing (a bad chunk size,
/// a body cut short) is what uvicorn answers itself, before the app: 400 in plain text,
/// connection closed. Anything else is the fake's own size cap: 413, vLLM-shaped.
fn unreadable(e: &axum::Error, limit: usize, nested: bool) -> Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<hyper::Error>() {
            return (
                StatusCode::BAD_REQUEST,
                [
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                    (header::CONNECTION, "close"),
                ],
                "Invalid HTTP request received.",
            )
                .into_response();
        }
        source = err.source();
    }
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Request body too large (limit {limit} bytes)."),
        nested,
    )
    .into_response()
}
