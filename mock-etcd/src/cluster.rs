//! `/v3/maintenance/status` and `/v3/cluster/member/list`: what a client asks to learn
//! which server it talks to (etcd3gw's `status()` and `members()`).
//!
//! Observed on etcd 3.4.23: neither checks a token (with auth on or off); status answers
//! the full header, the server version, database sizes, the leader (this member) and
//! raft indexes; the member list's header has no revision and one member with its name,
//! peer URLs and client URLs. The fake is a single member that is always leader; its
//! raft index follows the revision (a fresh etcd is at raft index 4, revision 1), and
//! its database grows from etcd's fresh 20 KiB by whole 4 KiB pages of stored data.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde::Serialize;

use crate::body::read_body;
use crate::codec::{self, ser_i64, ser_u64, Header};
use crate::decode::{self, wire::Empty};
use crate::error::EtcdError;
use crate::state::Shared;

/// The version `/version` and `status` report.
pub const SERVER_VERSION: &str = "3.4.23";

#[derive(Serialize)]
struct StatusResponse {
    header: Header,
    version: &'static str,
    #[serde(rename = "dbSize", serialize_with = "ser_i64")]
    db_size: i64,
    #[serde(serialize_with = "ser_u64")]
    leader: u64,
    #[serde(rename = "raftIndex", serialize_with = "ser_u64")]
    raft_index: u64,
    #[serde(rename = "raftTerm", serialize_with = "ser_u64")]
    raft_term: u64,
    #[serde(rename = "raftAppliedIndex", serialize_with = "ser_u64")]
    raft_applied_index: u64,
    /// The raised alarms (`alarm:NOSPACE `), omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
    #[serde(rename = "dbSizeInUse", serialize_with = "ser_i64")]
    db_size_in_use: i64,
}

#[derive(Serialize)]
struct MemberListResponse {
    header: Header,
    members: Vec<Member>,
}

#[derive(Serialize)]
struct Member {
    #[serde(rename = "ID", serialize_with = "ser_u64")]
    id: u64,
    name: String,
    #[serde(rename = "peerURLs")]
    peer_urls: Vec<String>,
    #[serde(rename = "clientURLs")]
    client_urls: Vec<String>,
}

pub async fn status(State(shared): State<Arc<Shared>>, body: Body) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    if let Err(e) = decode::parse::<Empty>(&body) {
        return Ok(e.untrailed());
    }
    let core = shared.core();
    let rev = core.revision();
    let (db_size, db_size_in_use) = (core.data().db_size(), core.data().db_size_in_use());
    let errors = core.alarms().errors();
    drop(core);
    let raft_index = (rev + 3).max(0) as u64;
    let resp = StatusResponse {
        header: shared.header(rev),
        version: SERVER_VERSION,
        db_size,
        leader: shared.config.member_id,
        raft_index,
        raft_term: shared.config.raft_term,
        raft_applied_index: raft_index,
        errors,
        db_size_in_use,
    };
    Ok(codec::ok(serde_json::to_string(&resp).unwrap_or_default()))
}

pub async fn member_list(
    State(shared): State<Arc<Shared>>,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    if let Err(e) = decode::parse::<Empty>(&body) {
        return Ok(e.untrailed());
    }
    let client_url = shared.client_url.get().cloned().unwrap_or_default();
    let resp = MemberListResponse {
        header: shared.header(0),
        members: vec![Member {
            id: shared.config.member_id,
            name: shared.config.name.clone(),
            peer_urls: vec![shared.config.peer_url.clone()],
            client_urls: vec![client_url],
        }],
    };
    Ok(codec::ok(serde_json::to_string(&resp).unwrap_or_default()))
}
