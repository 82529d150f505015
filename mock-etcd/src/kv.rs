//! The KV API's HTTP side: `/v3/kv/{range,put,deleterange,txn,compaction}`.
//!
//! Each handler reads and decodes its body, then checks in etcd's order: the gRPC size
//! limit, the request's own fields, the token, the raft size limit for writes; then it
//! runs the operation of [`crate::kv_ops`] under the data lock and stamps the header.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

use crate::body::read_body;
use crate::codec::{self, Header};
use crate::decode;
use crate::error::EtcdError;
use crate::kv_ops;
use crate::requests::*;
use crate::size;
use crate::state::Shared;

#[derive(Serialize, Debug)]
struct HeaderOnly {
    header: Header,
}

fn respond<T: Serialize>(v: &T) -> Response {
    codec::ok(serde_json::to_string(v).unwrap_or_default())
}

pub async fn range(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: RangeRequest = decode::parse(&body)?;
    size::check_grpc(&shared, size::range(&req))?;
    kv_ops::check_range(&req)?;
    crate::auth::require_user(&shared, &headers)?;
    let store = shared.store();
    let mut resp = kv_ops::range(&store, &req)?;
    resp.header = shared.header(store.rev);
    drop(store);
    Ok(respond(&resp))
}

pub async fn put(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: PutRequest = decode::parse(&body)?;
    let len = size::put(&req);
    size::check_grpc(&shared, len)?;
    kv_ops::check_put(&req)?;
    crate::auth::require_user(&shared, &headers)?;
    size::check_raft(&shared, len)?;
    let mut store = shared.store();
    let mut resp = kv_ops::put(&mut store, &req)?;
    resp.header = shared.header(store.rev);
    drop(store);
    Ok(respond(&resp))
}

pub async fn delete_range(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: DeleteRangeRequest = decode::parse(&body)?;
    let len = size::delete(&req);
    size::check_grpc(&shared, len)?;
    kv_ops::check_delete(&req)?;
    crate::auth::require_user(&shared, &headers)?;
    size::check_raft(&shared, len)?;
    let mut store = shared.store();
    let mut resp = kv_ops::delete_range(&mut store, &req);
    resp.header = shared.header(store.rev);
    drop(store);
    Ok(respond(&resp))
}

pub async fn txn(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: TxnRequest = decode::parse(&body)?;
    let len = size::txn(&req);
    size::check_grpc(&shared, len)?;
    kv_ops::check_txn(&req)?;
    let token = crate::auth::check_token(&shared, &headers)?;
    if !(req.compare.is_empty() && req.success.is_empty() && req.failure.is_empty()) {
        crate::auth::need_user(&shared, token)?;
    }
    size::check_raft(&shared, len)?;
    let mut store = shared.store();
    let mut resp = kv_ops::apply_txn(&mut store, &req)?;
    resp.header = shared.header(store.rev);
    drop(store);
    Ok(respond(&resp))
}

pub async fn compaction(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: CompactionRequest = decode::parse(&body)?;
    crate::auth::check_token(&shared, &headers)?;
    let mut store = shared.store();
    store.compact(req.revision)?;
    let resp = HeaderOnly {
        header: shared.header(store.rev),
    };
    drop(store);
    Ok(respond(&resp))
}
