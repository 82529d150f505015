//! The one error type every handler returns, shaped as etcd's gateway writes it.
//!
//! grpc-gateway turns a gRPC status into `{"error":M,"message":M,"code":C}` with an HTTP
//! status derived from the gRPC code; a client reads either, so both must match real
//! etcd (see README.md for the table observed against etcd 3.4.23).

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::codec;

/// gRPC status codes used by etcd.
pub mod code {
    pub const UNKNOWN: u32 = 2;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const NOT_FOUND: u32 = 5;
    pub const PERMISSION_DENIED: u32 = 7;
    pub const FAILED_PRECONDITION: u32 = 9;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const OUT_OF_RANGE: u32 = 11;
    pub const UNAVAILABLE: u32 = 14;
    pub const DATA_LOSS: u32 = 15;
    pub const UNAUTHENTICATED: u32 = 16;
}

/// An etcd error as the gateway answers it.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdError {
    pub status: StatusCode,
    pub code: u32,
    pub message: String,
}

impl EtcdError {
    pub fn new(status: StatusCode, code: u32, message: impl Into<String>) -> Self {
        EtcdError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The HTTP status grpc-gateway maps a gRPC code to.
    pub fn status_for(code: u32) -> StatusCode {
        match code {
            0 => StatusCode::OK,
            1 => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            3 | 11 => StatusCode::BAD_REQUEST,
            4 => StatusCode::GATEWAY_TIMEOUT,
            5 => StatusCode::NOT_FOUND,
            6 | 10 => StatusCode::CONFLICT,
            7 => StatusCode::FORBIDDEN,
            8 => StatusCode::TOO_MANY_REQUESTS,
            9 => StatusCode::PRECONDITION_FAILED,
            12 => StatusCode::NOT_IMPLEMENTED,
            14 => StatusCode::SERVICE_UNAVAILABLE,
            16 => StatusCode::UNAUTHORIZED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn grpc(code: u32, message: impl Into<String>) -> Self {
        Self::new(Self::status_for(code), code, message)
    }

    /// A body the gateway could not decode (400, code 3).
    pub fn bad_json(message: impl Into<String>) -> Self {
        Self::grpc(code::INVALID_ARGUMENT, message)
    }

    pub fn key_not_provided() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: key is not provided")
    }
    pub fn key_not_found() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: key not found")
    }
    pub fn value_provided() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: value is provided")
    }
    pub fn lease_provided() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: lease is provided")
    }
    pub fn duplicate_key() -> Self {
        Self::grpc(
            code::INVALID_ARGUMENT,
            "etcdserver: duplicate key given in txn request",
        )
    }
    pub fn too_many_ops() -> Self {
        Self::grpc(
            code::INVALID_ARGUMENT,
            "etcdserver: too many operations in txn request",
        )
    }
    pub fn lease_not_found() -> Self {
        Self::grpc(code::NOT_FOUND, "etcdserver: requested lease not found")
    }
    pub fn lease_exists() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: lease already exists",
        )
    }
    pub fn lease_ttl_too_large() -> Self {
        Self::grpc(code::OUT_OF_RANGE, "etcdserver: too large lease TTL")
    }
    pub fn future_rev() -> Self {
        Self::grpc(
            code::OUT_OF_RANGE,
            "etcdserver: mvcc: required revision is a future revision",
        )
    }
    pub fn compacted() -> Self {
        Self::grpc(
            code::OUT_OF_RANGE,
            "etcdserver: mvcc: required revision has been compacted",
        )
    }
    pub fn request_too_large() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: request is too large")
    }
    /// gRPC's own receive limit (etcd: max request bytes + 512 KiB).
    pub fn grpc_too_large(size: usize, max: usize) -> Self {
        Self::grpc(
            code::RESOURCE_EXHAUSTED,
            format!("grpc: received message larger than max ({size} vs. {max})"),
        )
    }
    pub fn auth_not_enabled() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: authentication is not enabled",
        )
    }
    pub fn auth_failed() -> Self {
        Self::grpc(
            code::INVALID_ARGUMENT,
            "etcdserver: authentication failed, invalid user ID or password",
        )
    }
    pub fn user_empty() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: user name is empty")
    }
    pub fn invalid_token() -> Self {
        Self::grpc(code::UNAUTHENTICATED, "etcdserver: invalid auth token")
    }

    pub fn user_not_found() -> Self {
        Self::grpc(code::FAILED_PRECONDITION, "etcdserver: user name not found")
    }
    pub fn user_exists() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: user name already exists",
        )
    }
    pub fn role_empty() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: role name is empty")
    }
    pub fn role_not_found() -> Self {
        Self::grpc(code::FAILED_PRECONDITION, "etcdserver: role name not found")
    }
    pub fn role_exists() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: role name already exists",
        )
    }
    pub fn role_not_granted() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: role is not granted to the user",
        )
    }
    pub fn permission_not_granted() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: permission is not granted to the role",
        )
    }
    pub fn permission_not_given() -> Self {
        Self::grpc(code::INVALID_ARGUMENT, "etcdserver: permission not given")
    }
    pub fn permission_denied() -> Self {
        Self::grpc(code::PERMISSION_DENIED, "etcdserver: permission denied")
    }
    pub fn root_user_missing() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: root user does not exist",
        )
    }
    pub fn root_role_missing() -> Self {
        Self::grpc(
            code::FAILED_PRECONDITION,
            "etcdserver: root user does not have root role",
        )
    }
    pub fn invalid_auth_mgmt() -> Self {
        Self::grpc(
            code::INVALID_ARGUMENT,
            "etcdserver: invalid auth management",
        )
    }
    /// A user added with `no_password` authenticates never; etcd 3.4 answers its
    /// store's own error, which the gateway reports as Unknown (500).
    pub fn no_password_user() -> Self {
        Self::grpc(
            code::UNKNOWN,
            "auth: authentication failed, password was given for no password user",
        )
    }
    pub fn no_space() -> Self {
        Self::grpc(
            code::RESOURCE_EXHAUSTED,
            "etcdserver: mvcc: database space exceeded",
        )
    }

    /// The error as a Go gRPC client prints it: `rpc error: code = X desc = M` (a watch
    /// create refused for auth reports this as its cancel reason).
    pub fn rpc_error(&self) -> String {
        format!(
            "rpc error: code = {} desc = {}",
            grpc_code_name(self.code),
            self.message
        )
    }

    /// The JSON body, without HTTP framing (also used inside streams).
    pub fn body(&self) -> String {
        // A struct, not `json!`: grpc-gateway writes the keys in this order.
        #[derive(serde::Serialize)]
        struct Body<'a> {
            error: &'a str,
            message: &'a str,
            code: u32,
        }
        let body = Body {
            error: &self.message,
            message: &self.message,
            code: self.code,
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}

/// The trailer grpc-gateway declares on an error answer and sends after its body.
const TRAILER: &str = "grpc-trailer-content-type";

/// As grpc-gateway writes an error: chunked (no `Content-Length`), a `Trailer:
/// Grpc-Trailer-Content-Type` header, the body, then that trailer. hyper sends the
/// trailer only to a client that asked for trailers (`TE: trailers`); to others the
/// answer is the same but for the trailer line.
impl IntoResponse for EtcdError {
    fn into_response(self) -> Response {
        let mut trailers = HeaderMap::new();
        trailers.insert(TRAILER, HeaderValue::from_static("application/grpc"));
        // A stream, so that its size is unknown and hyper sends it chunked.
        let data = Ok::<_, std::convert::Infallible>(Bytes::from(self.body()));
        let data = Body::from_stream(futures_util::stream::iter([data]));
        let trailers = std::future::ready(Some(Ok::<_, axum::Error>(trailers)));
        let body = Body::new(data.with_trailers(trailers));
        let mut resp = (self.status, body).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            header::TRAILER,
            HeaderValue::from_static("Grpc-Trailer-Content-Type"),
        );
        codec::cors(h);
        resp
    }
}

impl EtcdError {
    /// An error the gateway answers before any gRPC call is made (a body it cannot
    /// decode; a streamed call refused before its stream starts): written with a
    /// length and no trailer, as grpc-gateway does when it has no call metadata.
    pub fn untrailed(self) -> Response {
        let mut resp = (self.status, self.body()).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        codec::cors(h);
        resp
    }
}

/// Plain-text answers of Go's HTTP muxes (not JSON): unknown paths and wrong methods.
pub fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut resp = (status, text).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// grpc-gateway's answer for an unknown path under `/v3/`.
pub fn gateway_not_found() -> Response {
    let mut r = plain(StatusCode::NOT_FOUND, "Not Found\n");
    codec::cors(r.headers_mut());
    r
}

/// grpc-gateway's answer for a known path with a method other than POST.
pub fn method_not_allowed() -> Response {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    codec::cors(r.headers_mut());
    r
}

/// Go's `http.ServeMux` answer for a path nobody serves.
pub fn mux_not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// Go's `codes.Code.String()`.
pub fn grpc_code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        _ => "Unauthenticated",
    }
}
