//! The unary gateway calls in their wire form: which path is which [`Call`], how its
//! JSON body decodes into a [`Request`], and how [`EtcdCore`] answers it in JSON.
//!
//! Why a module of its own: the HTTP shell and a simulator must go through the same
//! decode and encode, so that a field named differently on the two sides of the wire
//! fails in simulation too. [`EtcdCore::handle_json`] is the whole round trip without
//! HTTP; the shell reads the body, decodes outside the lock and applies under it.

use std::time::Duration;

use serde::Serialize;

use crate::alarm::AlarmRequest;
use crate::auth_messages::AuthRequest;
use crate::core::EtcdCore;
use crate::decode::{self, MessageSplitter, Piece};
use crate::error::{code, EtcdError};
use crate::event::EtcdEvent;
use crate::lock::UnlockRequest;
use crate::requests::*;
use crate::size;

/// A unary call of the gateway (keepalive: a whole request body of messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Range,
    Put,
    DeleteRange,
    Txn,
    Compaction,
    Grant,
    Revoke,
    KeepAlive,
    TimeToLive,
    Leases,
    Authenticate,
    Alarm,
    /// `/v3/lock/unlock` (a lock waits, so `/v3/lock/lock` is not unary: see
    /// [`crate::lock`]).
    Unlock,
    /// Auth management: which one is the [`AuthOp`].
    Auth(AuthOp),
}

/// The auth management calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthOp {
    UserAdd,
    UserGet,
    UserList,
    UserDelete,
    UserChangePassword,
    UserGrant,
    UserRevoke,
    RoleAdd,
    RoleGet,
    RoleList,
    RoleDelete,
    RoleGrant,
    RoleRevoke,
    Enable,
    Disable,
}

impl AuthOp {
    fn from_path(rest: &str) -> Option<AuthOp> {
        Some(match rest {
            "/auth/user/add" => AuthOp::UserAdd,
            "/auth/user/get" => AuthOp::UserGet,
            "/auth/user/list" => AuthOp::UserList,
            "/auth/user/delete" => AuthOp::UserDelete,
            "/auth/user/changepw" => AuthOp::UserChangePassword,
            "/auth/user/grant" => AuthOp::UserGrant,
            "/auth/user/revoke" => AuthOp::UserRevoke,
            "/auth/role/add" => AuthOp::RoleAdd,
            "/auth/role/get" => AuthOp::RoleGet,
            "/auth/role/list" => AuthOp::RoleList,
            "/auth/role/delete" => AuthOp::RoleDelete,
            "/auth/role/grant" => AuthOp::RoleGrant,
            "/auth/role/revoke" => AuthOp::RoleRevoke,
            "/auth/enable" => AuthOp::Enable,
            "/auth/disable" => AuthOp::Disable,
            _ => return None,
        })
    }

    fn decode(self, body: &[u8]) -> Result<AuthRequest, EtcdError> {
        use decode::parse;
        Ok(match self {
            AuthOp::UserAdd => AuthRequest::UserAdd(parse(body)?),
            AuthOp::UserGet => AuthRequest::UserGet(parse(body)?),
            AuthOp::UserDelete => AuthRequest::UserDelete(parse(body)?),
            AuthOp::UserChangePassword => AuthRequest::UserChangePassword(parse(body)?),
            AuthOp::UserGrant => AuthRequest::UserGrant(parse(body)?),
            AuthOp::UserRevoke => AuthRequest::UserRevoke(parse(body)?),
            AuthOp::RoleAdd => AuthRequest::RoleAdd(parse(body)?),
            AuthOp::RoleGet => AuthRequest::RoleGet(parse(body)?),
            AuthOp::RoleDelete => AuthRequest::RoleDelete(parse(body)?),
            AuthOp::RoleGrant => AuthRequest::RoleGrant(parse(body)?),
            AuthOp::RoleRevoke => AuthRequest::RoleRevoke(parse(body)?),
            // The empty requests: the body must still be a JSON object.
            op => {
                let _: decode::wire::Empty = parse(body)?;
                match op {
                    AuthOp::UserList => AuthRequest::UserList,
                    AuthOp::RoleList => AuthRequest::RoleList,
                    AuthOp::Enable => AuthRequest::Enable,
                    _ => AuthRequest::Disable,
                }
            }
        })
    }
}

impl Call {
    /// The call a gateway path names, under `/v3/` or `/v3beta/`; None for any other.
    pub fn from_path(path: &str) -> Option<Call> {
        let rest = path
            .strip_prefix("/v3beta")
            .or_else(|| path.strip_prefix("/v3"))?;
        Some(match rest {
            "/kv/range" => Call::Range,
            "/kv/put" => Call::Put,
            "/kv/deleterange" => Call::DeleteRange,
            "/kv/txn" => Call::Txn,
            "/kv/compaction" => Call::Compaction,
            "/lease/grant" => Call::Grant,
            "/lease/revoke" | "/kv/lease/revoke" => Call::Revoke,
            "/lease/keepalive" => Call::KeepAlive,
            "/lease/timetolive" | "/kv/lease/timetolive" => Call::TimeToLive,
            "/lease/leases" | "/kv/lease/leases" => Call::Leases,
            "/auth/authenticate" => Call::Authenticate,
            "/maintenance/alarm" => Call::Alarm,
            "/lock/unlock" => Call::Unlock,
            other => Call::Auth(AuthOp::from_path(other)?),
        })
    }

    /// Decode a body as the gateway does (an empty body is the empty message).
    pub fn decode(self, body: &[u8]) -> Result<Request, EtcdError> {
        Ok(match self {
            Call::Range => Request::Range(decode::parse(body)?),
            Call::Put => Request::Put(decode::parse(body)?),
            Call::DeleteRange => Request::DeleteRange(decode::parse(body)?),
            Call::Txn => Request::Txn(decode::parse(body)?),
            Call::Compaction => Request::Compaction(decode::parse(body)?),
            Call::Grant => Request::Grant(decode::parse(body)?),
            Call::Revoke => Request::Revoke(decode::parse(body)?),
            Call::KeepAlive => Request::KeepAlive(keepalives(body)?),
            Call::TimeToLive => Request::TimeToLive(decode::parse(body)?),
            Call::Leases => {
                let _: IdRequest = decode::parse(body)?;
                Request::Leases
            }
            Call::Authenticate => Request::Authenticate(decode::parse(body)?),
            Call::Auth(op) => Request::Auth(op.decode(body)?),
            Call::Alarm => Request::Alarm(decode::parse(body)?),
            Call::Unlock => Request::Unlock(decode::parse(body)?),
        })
    }
}

/// The keepalive messages of a whole body. A first message that does not decode is
/// the gateway's plain 500; a later one ends the stream, as it does on the wire.
fn keepalives(body: &[u8]) -> Result<Vec<IdRequest>, EtcdError> {
    let mut splitter = MessageSplitter::default();
    splitter.push(body);
    let mut out = Vec::new();
    while let Some(piece) = splitter.next(true) {
        let parsed = match piece {
            Piece::Message(m) => decode::parse_value::<IdRequest>(&m),
            Piece::Malformed(msg) => Err(msg),
        };
        match parsed {
            Ok(r) => out.push(r),
            Err(msg) if out.is_empty() => return Err(EtcdError::grpc(code::UNKNOWN, msg)),
            Err(_) => break,
        }
    }
    Ok(out)
}

/// A decoded request of one [`Call`].
#[derive(Debug)]
pub enum Request {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    Compaction(CompactionRequest),
    Grant(GrantRequest),
    Revoke(IdRequest),
    KeepAlive(Vec<IdRequest>),
    TimeToLive(IdRequest),
    Leases,
    Authenticate(AuthenticateRequest),
    Auth(AuthRequest),
    Alarm(AlarmRequest),
    Unlock(UnlockRequest),
}

/// A success: the JSON body (for keepalive, its lines) and what to report.
#[derive(Debug)]
pub struct Reply {
    pub body: String,
    pub report: Option<EtcdEvent<'static>>,
}

/// An answer without HTTP: status and body as the gateway sends them.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// What to report, as the HTTP shell reports it.
    pub report: Option<EtcdEvent<'static>>,
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl EtcdCore {
    /// Answer a decoded request at `now`, with the token the client sent.
    pub fn apply(
        &mut self,
        req: Request,
        token: Option<&str>,
        now: Duration,
    ) -> Result<Reply, EtcdError> {
        let mut report = None;
        let body = match req {
            Request::Range(r) => json(&self.range(token, &r, now)?),
            Request::Put(r) => json(&self.put(token, &r, now)?),
            Request::DeleteRange(r) => json(&self.delete_range(token, &r, now)?),
            Request::Txn(r) => json(&self.txn(token, &r, now)?),
            Request::Compaction(r) => json(&self.compaction(token, &r, now)?),
            Request::Grant(r) => json(&self.grant(token, &r, now)?),
            Request::Revoke(r) => {
                let resp = self.revoke(token, &r, now)?;
                report = Some(EtcdEvent::LeaseRevoked { id: r.id });
                json(&resp)
            }
            Request::KeepAlive(rs) => rs.iter().map(|r| self.keepalive(r, now).line()).collect(),
            Request::TimeToLive(r) => json(&self.time_to_live(&r, now)),
            Request::Leases => json(&self.leases()),
            Request::Authenticate(r) => {
                let resp = self.authenticate(token, &r, now)?;
                report = Some(EtcdEvent::Authenticated { user: r.name });
                json(&resp)
            }
            Request::Auth(r) => json(&self.auth_manage(token, &r, now)?),
            Request::Alarm(r) => json(&self.alarm(token, &r, now)?),
            Request::Unlock(r) => json(&self.unlock(token, &r, now)?),
        };
        Ok(Reply { body, report })
    }

    /// The whole unary round trip without HTTP: a POST of `body` to `path` with the
    /// token header `token`, at `now`; answers the status and body the gateway sends
    /// (JSON, or the gateway's plain-text 404 for a path it does not serve). The
    /// streams are not unary: a keepalive body's lines come back together (one per
    /// request object); `/v3/watch` is [`EtcdCore::watch_open`] and
    /// [`EtcdCore::watch_json`]; `/v3/lock/lock` waits, so it is run in steps
    /// ([`EtcdCore::lock_claim`], then [`EtcdCore::lock_held`] after each change)
    /// and answers 404 here, as do the cluster calls (status, member list), which stay
    /// with the HTTP shell.
    pub fn handle_json(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        now: Duration,
    ) -> Answer {
        let Some(call) = Call::from_path(path) else {
            let text = if path.starts_with("/v3/") || path.starts_with("/v3beta/") {
                "Not Found\n"
            } else {
                "404 page not found\n"
            };
            return Answer {
                status: 404,
                body: text.as_bytes().to_vec(),
                report: None,
            };
        };
        let outcome = if body.len() > size::body_cap(self.config()) {
            Err(size::body_too_large(self.config()))
        } else {
            call.decode(body)
                .and_then(|req| self.apply(req, token, now))
        };
        match outcome {
            Ok(reply) => Answer {
                status: 200,
                body: reply.body.into_bytes(),
                report: reply.report,
            },
            Err(e) => Answer {
                status: e.status.as_u16(),
                body: e.body().into_bytes(),
                report: None,
            },
        }
    }
}
