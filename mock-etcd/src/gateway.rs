//! The HTTP surface of the gateway: which paths exist, under `/v3/` and `/v3beta/`,
//! what an unknown path or a wrong method gets, and how request bodies are read.
//!
//! Real etcd answers a GET on a POST path `405 Method Not Allowed` (text), an unknown
//! path under `/v3/` grpc-gateway's `Not Found`, and anything else Go's mux's `404 page
//! not found`. Sizes are checked on the decoded message as etcd does: above gRPC's
//! receive limit (max request bytes + 512 KiB) 429/8, above `--max-request-bytes` for a
//! write 400/3 "request is too large".

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, MethodRouter};
use axum::Router;
use http_body_util::BodyExt;

use crate::error::{self, EtcdError};
use crate::{auth, cluster, faults, kv, lease, watch, Shared};

/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The paths etcd 3.4's gateway serves that this fake implements, without the prefix.
pub const PATHS: &[&str] = &[
    "/kv/range",
    "/kv/put",
    "/kv/deleterange",
    "/kv/txn",
    "/kv/compaction",
    "/lease/grant",
    "/lease/revoke",
    "/kv/lease/revoke",
    "/lease/keepalive",
    "/lease/timetolive",
    "/kv/lease/timetolive",
    "/lease/leases",
    "/kv/lease/leases",
    "/watch",
    "/auth/authenticate",
    "/maintenance/status",
    "/cluster/member/list",
];

fn handler_for(path: &str) -> MethodRouter<Arc<Shared>> {
    let r: MethodRouter<Arc<Shared>> = match path {
        "/kv/range" => any(kv::range),
        "/kv/put" => any(kv::put),
        "/kv/deleterange" => any(kv::delete_range),
        "/kv/txn" => any(kv::txn),
        "/kv/compaction" => any(kv::compaction),
        "/lease/grant" => any(lease::grant),
        "/lease/revoke" | "/kv/lease/revoke" => any(lease::revoke),
        "/lease/keepalive" => any(lease::keepalive),
        "/lease/timetolive" | "/kv/lease/timetolive" => any(lease::time_to_live),
        "/lease/leases" | "/kv/lease/leases" => any(lease::leases),
        "/watch" => any(watch::watch),
        "/maintenance/status" => any(cluster::status),
        "/cluster/member/list" => any(cluster::member_list),
        _ => any(auth::authenticate),
    };
    // `any` + our own check: axum's method routing would add an `Allow` header.
    r.layer(axum::middleware::from_fn(require_post))
}

async fn require_post(req: Request, next: axum::middleware::Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return error::method_not_allowed();
    }
    next.run(req).await
}

/// etcd's CORS handler answers every OPTIONS, on any path, with an empty 200.
async fn preflight(req: Request, next: axum::middleware::Next) -> Response {
    if req.method() == axum::http::Method::OPTIONS {
        let mut r = StatusCode::OK.into_response();
        crate::codec::cors(r.headers_mut());
        return r;
    }
    next.run(req).await
}

/// Every etcd path, both spellings, with the fault/journal middleware around them.
pub fn router(shared: Arc<Shared>) -> Router {
    let mut r: Router<Arc<Shared>> = Router::new();
    for prefix in ["/v3", "/v3beta"] {
        for p in PATHS {
            r = r.route(&format!("{prefix}{p}"), handler_for(p));
        }
    }
    r = r
        .route("/health", any(health))
        .route("/version", any(version))
        .fallback(not_found);
    r.layer(axum::middleware::from_fn_with_state(
        shared.clone(),
        faults::middleware,
    ))
    .layer(axum::middleware::from_fn(preflight))
    .layer(DefaultBodyLimit::disable())
    .with_state(shared)
}

async fn not_found(req: Request) -> Response {
    let p = req.uri().path();
    // Go's ServeMux redirects unclean paths and subtree roots without their slash.
    let cleaned = clean_path(p);
    let target = if cleaned != p {
        Some(cleaned)
    } else if p == "/v3" || p == "/v3beta" {
        Some(format!("{p}/"))
    } else {
        None
    };
    if let Some(mut to) = target {
        if let Some(q) = req.uri().query() {
            to = format!("{to}?{q}");
        }
        let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
        if let Ok(v) = HeaderValue::from_str(&to) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    }
    if p.starts_with("/v3/") || p.starts_with("/v3beta/") {
        error::gateway_not_found()
    } else {
        error::mux_not_found()
    }
}

/// Go's `path.Clean` as ServeMux applies it (a trailing slash is kept).
fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    if p.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

fn get_only() -> Response {
    let mut r = error::plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    r
}

async fn health(method: axum::http::Method) -> Response {
    if method != axum::http::Method::GET {
        return get_only();
    }
    let mut r = (StatusCode::OK, r#"{"health":"true"}"#).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn version(method: axum::http::Method) -> Response {
    if method != axum::http::Method::GET {
        return get_only();
    }
    let mut r = (
        StatusCode::OK,
        format!(
            r#"{{"etcdserver":"{}","etcdcluster":"3.4.0"}}"#,
            cluster::SERVER_VERSION
        ),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Read a unary request body, capped (base64 and JSON make a message ~4/3 larger).
pub async fn read_body(shared: &Shared, body: Body) -> Result<Bytes, EtcdError> {
    let cap = shared
        .config
        .max_request_bytes
        .saturating_mul(4)
        .max(64 * 1024);
    let grpc_max = size::grpc_max(shared);
    let read = async {
        let mut body = body;
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| EtcdError::bad_json(format!("reading body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > cap {
                    return Err(EtcdError::grpc_too_large(buf.len() * 3 / 4, grpc_max));
                }
            }
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(EtcdError::bad_json("unexpected EOF")),
    }
}

/// Protobuf sizes of requests, for etcd's two size limits.
pub mod size {
    use crate::decode::wire::WireSize;
    use crate::kv::{Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};
    use crate::{EtcdError, Shared};

    /// Bytes of the raft envelope around a request (header with an ID).
    const RAFT_OVERHEAD: usize = 16;

    pub fn grpc_max(shared: &Shared) -> usize {
        shared.config.max_request_bytes + 512 * 1024
    }

    pub fn check_grpc(shared: &Shared, len: usize) -> Result<(), EtcdError> {
        let max = grpc_max(shared);
        if len > max {
            return Err(EtcdError::grpc_too_large(len, max));
        }
        Ok(())
    }

    pub fn check_raft(shared: &Shared, len: usize) -> Result<(), EtcdError> {
        if len + RAFT_OVERHEAD > shared.config.max_request_bytes {
            return Err(EtcdError::request_too_large());
        }
        Ok(())
    }

    fn varint(v: u64) -> usize {
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }
    fn bytes(b: &[u8]) -> usize {
        if b.is_empty() {
            0
        } else {
            1 + varint(b.len() as u64) + b.len()
        }
    }
    fn int(v: i64) -> usize {
        if v == 0 {
            0
        } else {
            1 + varint(v as u64)
        }
    }
    fn flag(b: bool) -> usize {
        if b {
            2
        } else {
            0
        }
    }
    fn nested(len: usize) -> usize {
        1 + varint(len as u64) + len
    }

    pub fn put(r: &PutRequest) -> usize {
        bytes(&r.key)
            + bytes(&r.value)
            + int(r.lease)
            + flag(r.prev_kv)
            + flag(r.ignore_value)
            + flag(r.ignore_lease)
    }

    pub fn range(r: &RangeRequest) -> usize {
        bytes(&r.key)
            + bytes(&r.range_end)
            + int(r.limit)
            + int(r.revision)
            + int(r.sort_order as i64)
            + int(r.sort_target as i64)
            + flag(r.serializable)
            + flag(r.keys_only)
            + flag(r.count_only)
            + int(r.min_mod_revision)
            + int(r.max_mod_revision)
            + int(r.min_create_revision)
            + int(r.max_create_revision)
    }

    pub fn delete(r: &DeleteRangeRequest) -> usize {
        bytes(&r.key) + bytes(&r.range_end) + flag(r.prev_kv)
    }

    impl WireSize for Compare {
        fn wire_size(&self) -> usize {
            nested(compare(self))
        }
    }

    impl WireSize for RequestOp {
        fn wire_size(&self) -> usize {
            nested(op(self))
        }
    }

    fn compare(c: &Compare) -> usize {
        int(c.result as i64)
            + int(c.target as i64)
            + bytes(&c.key)
            + bytes(&c.range_end)
            + int(c.version)
            + int(c.create_revision)
            + int(c.mod_revision)
            + bytes(&c.value)
            + int(c.lease)
    }

    fn op(o: &RequestOp) -> usize {
        let inner = if let Some(r) = &o.request_range {
            range(r)
        } else if let Some(p) = &o.request_put {
            put(p)
        } else if let Some(d) = &o.request_delete_range {
            delete(d)
        } else if let Some(t) = &o.request_txn {
            txn(t)
        } else {
            // No request set: an empty message, nothing inside.
            return 0;
        };
        nested(inner)
    }

    pub fn txn(r: &TxnRequest) -> usize {
        let list = |ops: &[RequestOp]| ops.iter().map(WireSize::wire_size).sum::<usize>();
        r.compare.iter().map(WireSize::wire_size).sum::<usize>()
            + r.compare.dropped_bytes()
            + list(&r.success)
            + r.success.dropped_bytes()
            + list(&r.failure)
            + r.failure.dropped_bytes()
    }
}

/// Reads the request objects of a streamed body (keepalive, watch) as they arrive.
pub struct StreamReader {
    body: Option<axum::body::BodyDataStream>,
    splitter: crate::decode::MessageSplitter,
    max: usize,
    /// The body failed rather than ended: the client is gone (a reset connection).
    broken: bool,
}

impl StreamReader {
    pub fn new(body: Body, max: usize) -> Self {
        StreamReader {
            body: Some(body.into_data_stream()),
            splitter: Default::default(),
            max,
            broken: false,
        }
    }

    /// True once reading the body failed: the connection is gone, so should the stream.
    /// (A body that simply ends is a client done sending; its stream stays open.)
    pub fn client_gone(&self) -> bool {
        self.broken
    }

    pub fn is_open(&self) -> bool {
        self.body.is_some()
    }

    /// Stop reading requests (the response stream may go on).
    pub fn close(&mut self) {
        self.body = None;
    }

    /// The next request object; None once the body has ended.
    pub async fn next(&mut self) -> Option<crate::decode::Piece> {
        use futures_util::StreamExt;
        loop {
            if let Some(p) = self.splitter.next(self.body.is_none()) {
                return Some(p);
            }
            let body = self.body.as_mut()?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    self.splitter.push(&chunk);
                    if self.splitter.buffered() > self.max {
                        self.body = None;
                        return Some(crate::decode::Piece::Malformed(format!(
                            "grpc: received message larger than max ({} vs. {})",
                            self.splitter.buffered(),
                            self.max
                        )));
                    }
                }
                Some(Err(_)) => {
                    self.broken = true;
                    self.body = None;
                }
                None => self.body = None,
            }
        }
    }
}
