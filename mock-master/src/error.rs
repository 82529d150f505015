//! The one error type of the HTTP handlers: a status and a JSON body in one of the two
//! shapes the master uses (internal API: `{"error":"..."}`; OpenAI API:
//! `{"error":{"message","type"}}`), and the 413 of each shape.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// A status and a JSON body in one of the two shapes.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    Internal(StatusCode, &'static str),
    OpenAi(StatusCode, String, &'static str),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ApiError::Internal(s, msg) => (s, serde_json::json!({ "error": msg })),
            ApiError::OpenAi(s, msg, kind) => (
                s,
                serde_json::json!({ "error": {"message": msg, "type": kind} }),
            ),
        };
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// 413 in the internal API's shape.
pub fn internal_too_large() -> Response {
    ApiError::Internal(StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response()
}

/// 413 in the OpenAI API's shape.
pub fn openai_too_large() -> Response {
    ApiError::OpenAi(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request body too large".into(),
        "invalid_request",
    )
    .into_response()
}
