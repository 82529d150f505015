//! The router of the gateway: which paths exist, under `/v3/` and `/v3beta/`, and what
//! an unknown path or a wrong method gets. Only wiring: the handlers live with their API.
//!
//! Real etcd answers a GET on a POST path `405 Method Not Allowed` (text), an unknown
//! path under `/v3/` grpc-gateway's `Not Found`, and anything else Go's mux's `404 page
//! not found`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, MethodRouter};
use axum::Router;

use crate::calls::Call;
use crate::error;
use crate::state::Shared;
use crate::{cluster, fault_layer, lease, lock_wait, unary, watch};

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
    "/auth/user/add",
    "/auth/user/get",
    "/auth/user/list",
    "/auth/user/delete",
    "/auth/user/changepw",
    "/auth/user/grant",
    "/auth/user/revoke",
    "/auth/role/add",
    "/auth/role/get",
    "/auth/role/list",
    "/auth/role/delete",
    "/auth/role/grant",
    "/auth/role/revoke",
    "/auth/enable",
    "/auth/disable",
    "/lock/lock",
    "/lock/unlock",
    "/maintenance/alarm",
    "/maintenance/status",
    "/cluster/member/list",
];

fn handler_for(path: &str) -> MethodRouter<Arc<Shared>> {
    let unary_call = Call::from_path(&format!("/v3{path}"));
    let r: MethodRouter<Arc<Shared>> = match (path, unary_call) {
        ("/lease/keepalive", _) => any(lease::keepalive),
        ("/watch", _) => any(watch::watch),
        ("/lock/lock", _) => any(lock_wait::lock),
        ("/maintenance/status", _) => any(cluster::status),
        ("/cluster/member/list", _) => any(cluster::member_list),
        (_, Some(call)) => any(
            move |State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body| {
                unary::serve(call, shared, headers, body)
            },
        ),
        (_, None) => any(not_found),
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
        fault_layer::middleware,
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

/// `{"health":"true"}`; while an alarm is raised, 503 `{"health":"false"}` and a
/// newline, as etcd 3.4.23 answers.
async fn health(State(shared): State<Arc<Shared>>, method: axum::http::Method) -> Response {
    if method != axum::http::Method::GET {
        return get_only();
    }
    let alarmed = !shared.core().alarms().errors().is_empty();
    let mut r = if alarmed {
        (StatusCode::SERVICE_UNAVAILABLE, "{\"health\":\"false\"}\n").into_response()
    } else {
        (StatusCode::OK, r#"{"health":"true"}"#).into_response()
    };
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
