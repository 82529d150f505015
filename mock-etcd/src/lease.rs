//! The lease API: `/v3/lease/{grant,revoke,keepalive,timetolive,leases}` and expiry.
//!
//! Observed on etcd 3.4: grants below the minimum TTL (2 s with default election
//! timing; also for 0 and negative TTLs) are raised to it; a keepalive answers one
//! `{"result":…}` line per request object in the body and, for a lease that does not
//! exist, omits `TTL`; `timetolive` of a missing lease answers `TTL: -1`; leases are
//! listed by deadline. Expiry is checked every `expiry_tick`, and a lease's keys are
//! deleted in one revision.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::body::{read_body, StreamReader};
use crate::codec::{self, is_zero, ser_b64_list, ser_i64, Header};
use crate::decode::{self, wire::*, Piece};
use crate::error::{code, EtcdError};
use crate::state::Shared;
use crate::store::Lease;

#[derive(Default, Debug)]
pub struct GrantRequest {
    pub ttl: i64,
    pub id: i64,
}

crate::message!(GrantRequest { b"TTL" => ttl: I64, b"ID" => id: I64 });

#[derive(Default, Debug)]
pub struct IdRequest {
    pub id: i64,
    pub keys: bool,
}

crate::message!(IdRequest { b"ID" => id: I64, b"keys" => keys: Bool });

#[derive(Serialize)]
struct GrantResponse {
    header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    ttl: i64,
}

#[derive(Serialize)]
struct KeepAliveLine {
    result: GrantResponse,
}

#[derive(Serialize)]
struct TimeToLiveResponse {
    header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    ttl: i64,
    #[serde(
        rename = "grantedTTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    granted: i64,
    #[serde(serialize_with = "ser_b64_list", skip_serializing_if = "Vec::is_empty")]
    keys: Vec<Vec<u8>>,
}

#[derive(Serialize)]
struct LeasesResponse {
    header: Header,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    leases: Vec<LeaseStatus>,
}

#[derive(Serialize)]
struct LeaseStatus {
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    id: i64,
}

#[derive(Serialize)]
struct HeaderOnly {
    header: Header,
}

fn respond<T: Serialize>(v: &T) -> Response {
    codec::ok(serde_json::to_string(v).unwrap_or_default())
}

pub async fn grant(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: GrantRequest = decode::parse(&body)?;
    crate::auth::check_token(&shared, &headers)?;
    let mut store = shared.store();
    let (id, ttl) = store.grant(req.id, req.ttl, shared.now())?;
    let resp = GrantResponse {
        header: shared.header(store.rev),
        id,
        ttl,
    };
    drop(store);
    Ok(respond(&resp))
}

pub async fn revoke(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: IdRequest = decode::parse(&body)?;
    let user = crate::auth::check_token(&shared, &headers)?;
    let has_keys = match shared.store().leases.get(&req.id) {
        None => return Err(EtcdError::lease_not_found()),
        Some(l) => !l.keys.is_empty(),
    };
    if has_keys {
        crate::auth::need_user(&shared, user)?;
    }
    let mut store = shared.store();
    if store.revoke(req.id).is_none() {
        return Err(EtcdError::lease_not_found());
    }
    let resp = HeaderOnly {
        header: shared.header(store.rev),
    };
    drop(store);
    shared
        .events
        .emit("lease_revoked", serde_json::json!({ "id": req.id }));
    Ok(respond(&resp))
}

pub async fn time_to_live(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: IdRequest = decode::parse(&body)?;
    let store = shared.store();
    let resp = match store.leases.get(&req.id) {
        Some(l) => TimeToLiveResponse {
            header: shared.header(store.rev),
            id: l.id,
            ttl: l.remaining_secs(shared.now()),
            granted: l.ttl,
            keys: if req.keys {
                l.keys.iter().cloned().collect()
            } else {
                Vec::new()
            },
        },
        None => TimeToLiveResponse {
            header: shared.header(store.rev),
            id: req.id,
            ttl: -1,
            granted: 0,
            keys: Vec::new(),
        },
    };
    drop(store);
    Ok(respond(&resp))
}

pub async fn leases(State(shared): State<Arc<Shared>>, body: Body) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let _: IdRequest = decode::parse(&body)?;
    let store = shared.store();
    let resp = LeasesResponse {
        header: shared.header(store.rev),
        leases: store
            .leases_by_expiry()
            .into_iter()
            .map(|l| LeaseStatus { id: l.id })
            .collect(),
    };
    drop(store);
    Ok(respond(&resp))
}

/// The keepalive stream: one answer line per request object, until the body ends.
pub async fn keepalive(State(shared): State<Arc<Shared>>, body: Body) -> Response {
    let mut ka = KeepAlive {
        stop: shared.stream_stop(),
        reader: StreamReader::new(body, shared.config.max_request_bytes * 2),
        shared,
    };
    // A malformed first message is a plain 500 error, as the gateway answers it.
    let first = match ka.reader.next().await {
        Some(Piece::Malformed(msg)) => return EtcdError::grpc(code::UNKNOWN, msg).into_response(),
        Some(Piece::Message(v)) => match ka.answer(v) {
            Ok(line) => Some(line),
            Err(msg) => return EtcdError::grpc(code::UNKNOWN, msg).into_response(),
        },
        None => None,
    };
    let stream = futures_util::stream::unfold((ka, first), |(mut ka, pending)| async move {
        if let Some(l) = pending {
            return Some((Ok::<_, std::convert::Infallible>(l), (ka, None)));
        }
        let stop = ka.stop.clone();
        let piece = tokio::select! {
            p = ka.reader.next() => p,
            _ = stop.wait() => None,
        };
        match piece {
            Some(Piece::Message(v)) => ka.answer(v).ok().map(|l| (Ok(l), (ka, None))),
            Some(Piece::Malformed(_)) | None => None,
        }
    });
    codec::stream_response(Body::from_stream(stream))
}

struct KeepAlive {
    shared: Arc<Shared>,
    reader: StreamReader,
    stop: mock_kit::Shutdown,
}

impl KeepAlive {
    /// The answer line to one request object; Err if it does not decode.
    fn answer(&mut self, msg: Vec<u8>) -> Result<String, String> {
        let req: IdRequest = decode::parse_value(&msg)?;
        let mut store = self.shared.store();
        let ttl = store.keepalive(req.id, self.shared.now()).unwrap_or(0);
        let line = KeepAliveLine {
            result: GrantResponse {
                header: self.shared.header(store.rev),
                id: req.id,
                ttl,
            },
        };
        drop(store);
        let mut s = serde_json::to_string(&line).map_err(|e| e.to_string())?;
        s.push('\n');
        Ok(s)
    }
}

/// Revoke due leases every tick until shutdown.
pub async fn run_expiry(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.config.expiry_tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.wait() => return,
        }
        let gone = shared.store().expire_due(shared.now());
        for l in gone {
            report_expired(&shared, &l, "ttl");
        }
    }
}

fn report_expired(shared: &Shared, l: &Lease, why: &str) {
    if shared.events.enabled() {
        let keys: Vec<String> = l
            .keys
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        shared.events.emit(
            "lease_expired",
            serde_json::json!({ "id": l.id, "keys": keys, "why": why }),
        );
    }
}

/// Expire one lease now (fault injection).
pub fn expire(shared: &Shared, id: i64) -> bool {
    let gone = shared.store().revoke(id);
    match gone {
        Some(l) => {
            report_expired(shared, &l, "forced");
            true
        }
        None => false,
    }
}

/// Expire every lease now (fault injection).
pub fn expire_all(shared: &Shared) {
    let mut store = shared.store();
    let ids: Vec<i64> = store.leases.keys().copied().collect();
    let gone: Vec<Lease> = ids.into_iter().filter_map(|id| store.revoke(id)).collect();
    drop(store);
    for l in gone {
        report_expired(shared, &l, "forced");
    }
}
