//! vLLM-shaped error answers. One type for every handler (`Result<_, ApiError>`).
//!
//! vLLM up to the 0.10 series answers a flat object
//! `{"object":"error","message":..,"type":"BadRequestError","param":null,"code":400}`;
//! newer releases nest it: `{"error":{"message":..,"type":..,"param":null,"code":400}}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    /// Use the newer nested shape.
    pub nested: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>, nested: bool) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            nested,
        }
    }

    /// The `type` vLLM reports for a status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 413 | 422 => "BadRequestError",
            401 => "AuthenticationError",
            404 => "NotFoundError",
            429 => "TooManyRequestsError",
            503 => "ServiceUnavailableError",
            _ => "InternalServerError",
        }
    }

    /// The body, fields in pydantic's declaration order.
    pub fn body(&self) -> String {
        let code = self.status.as_u16();
        let message = json!(self.message);
        let param = json!(self.param);
        let kind = self.kind();
        if self.nested {
            format!(
                r#"{{"error":{{"message":{message},"type":"{kind}","param":{param},"code":{code}}}}}"#
            )
        } else {
            format!(
                r#"{{"object":"error","message":{message},"type":"{kind}","param":{param},"code":{code}}}"#
            )
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}
