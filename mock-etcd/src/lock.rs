//! v3lock (`/v3/lock/lock`, `/v3/lock/unlock`) as etcd 3.4's lock server runs it: a
//! `concurrency.Mutex` on the caller's behalf.
//!
//! Why a module of its own: the lock is a protocol over keys (one concept), run by the
//! core in steps so that a caller without sockets can drive it; the HTTP side that
//! waits is `crate::lock_wait`. What holds, as observed on etcd 3.4.23:
//!
//! - lock `name` with lease L puts the key `name/<L in lowercase hex>` (empty value,
//!   on lease L) in a txn that succeeds only if that key does not exist: one revision,
//!   none when the same lease locks again; without a lease a 60 s lease is granted
//!   first (no revision; etcd's session TTL) and never kept alive;
//! - the lock is held once no key under `name/` has a smaller create revision; until
//!   then the call waits, and answers `{header, key}` with the header of the moment it
//!   got the lock (the revision of the delete that freed it);
//! - a waiter that goes away deletes its key (etcd's `Mutex.Lock` does on a failed
//!   wait);
//! - unlock deletes the given key (one revision if it existed);
//! - every error (auth, permission, unknown lease, NOSPACE, empty key) comes through
//!   etcd's internal client and is answered with code 2 (500), its message unchanged.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::answers::HeaderOnly;
use crate::codec::{ser_b64, Header};
use crate::core::EtcdCore;
use crate::decode::wire::*;
use crate::error::{code, EtcdError};
use crate::requests::*;
use crate::store::KeyRange;
use crate::watchers::{Spec, WatchSink, Watcher};

/// etcd's `concurrency` default session TTL, for a lock without a lease.
pub const SESSION_TTL: i64 = 60;

#[derive(Default, Debug, Clone)]
pub struct LockRequest {
    pub name: Vec<u8>,
    pub lease: i64,
}

crate::message!(LockRequest { b"name" => name: Bytes, b"lease" => lease: I64 });

#[derive(Default, Debug, Clone)]
pub struct UnlockRequest {
    pub key: Vec<u8>,
}

crate::message!(UnlockRequest { b"key" => key: Bytes });

#[derive(Serialize, Debug)]
pub struct LockResponse {
    pub header: Header,
    #[serde(serialize_with = "ser_b64", skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<u8>,
}

/// A lock asked for: its key is in the store; it is held once no older key under the
/// prefix is left ([`EtcdCore::lock_held`]).
#[derive(Debug, Clone)]
pub struct LockClaim {
    pub key: Vec<u8>,
    pub prefix: Vec<u8>,
    /// The create revision of the claim's key.
    pub rev: i64,
}

/// The error as the lock server answers it: code 2, the message unchanged.
fn through_client(e: EtcdError) -> EtcdError {
    EtcdError::grpc(code::UNKNOWN, e.message)
}

/// The end of the key range holding every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdCore {
    /// Step one of a lock: the session lease if none is given, then the txn that puts
    /// the claim's key unless it exists (checked as any txn of this caller).
    pub fn lock_claim(
        &mut self,
        token: Option<&str>,
        req: &LockRequest,
        now: Duration,
    ) -> Result<LockClaim, EtcdError> {
        let lease = match req.lease {
            0 => {
                let grant = GrantRequest {
                    ttl: SESSION_TTL,
                    id: 0,
                };
                self.grant(token, &grant, now).map_err(through_client)?.id
            }
            l => l,
        };
        let mut prefix = req.name.clone();
        prefix.push(b'/');
        let mut key = prefix.clone();
        key.extend_from_slice(format!("{lease:x}").as_bytes());
        let txn = claim_txn(&key, &prefix, lease);
        self.txn(token, &txn, now).map_err(through_client)?;
        let rev = self.data().get(&key).map_or(0, |kv| kv.create_revision);
        Ok(LockClaim { key, prefix, rev })
    }

    /// The answer once the claim holds the lock: no key under its prefix is older.
    pub fn lock_held(&self, claim: &LockClaim) -> Option<LockResponse> {
        let range = KeyRange::new(claim.prefix.clone(), prefix_end(&claim.prefix));
        let older = self
            .data()
            .range_at(&range, 0)
            .ok()?
            .iter()
            .any(|kv| kv.create_revision < claim.rev);
        (!older).then(|| LockResponse {
            header: self.header(),
            key: claim.key.clone(),
        })
    }

    /// Tell `sink` of every change under the claim's prefix (a waiter's wake-up);
    /// answers the watch stream to drop with [`EtcdCore::lock_unwatch`].
    pub fn lock_watch(&mut self, claim: &LockClaim, sink: Arc<dyn WatchSink>) -> u64 {
        let watchers = &mut self.data_mut().watchers;
        let stream = watchers.new_stream();
        watchers.watchers.push(Watcher {
            stream,
            id: 0,
            spec: Spec {
                range: KeyRange::new(claim.prefix.clone(), prefix_end(&claim.prefix)),
                prev_kv: false,
                no_put: true,
                no_delete: false,
                from_rev: 0,
            },
            out: sink,
        });
        stream
    }

    pub fn lock_unwatch(&mut self, stream: u64) {
        self.data_mut().watchers.drop_stream(stream);
    }

    /// A waiter gone: its key goes, as etcd's mutex deletes it on a failed wait.
    pub fn lock_abandon(&mut self, claim: &LockClaim) {
        let del = DeleteRangeRequest {
            key: claim.key.clone(),
            ..Default::default()
        };
        let _ = crate::kv_ops::delete_range(self.data_mut(), &del);
    }

    /// `/v3/lock/unlock`: delete the key, checked as a delete of this caller.
    pub fn unlock(
        &mut self,
        token: Option<&str>,
        req: &UnlockRequest,
        now: Duration,
    ) -> Result<HeaderOnly, EtcdError> {
        let del = DeleteRangeRequest {
            key: req.key.clone(),
            ..Default::default()
        };
        let resp = self
            .delete_range(token, &del, now)
            .map_err(through_client)?;
        Ok(HeaderOnly {
            header: resp.header,
        })
    }
}

/// The mutex's txn: if the key was never created, put it on the lease; either way
/// read the key and the prefix's oldest key (etcd reads them to decide at once).
fn claim_txn(key: &[u8], prefix: &[u8], lease: i64) -> TxnRequest {
    let compare = Compare {
        result: 0,
        target: 1,
        key: key.to_vec(),
        create_revision: 0,
        ..Default::default()
    };
    let owner = RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: 1,
        sort_target: 2,
        ..Default::default()
    };
    let op = |r: RangeRequest| RequestOp {
        request_range: Some(r),
        ..Default::default()
    };
    let put = PutRequest {
        key: key.to_vec(),
        lease,
        ..Default::default()
    };
    let this_key = RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    };
    TxnRequest {
        compare: vec![compare].into(),
        success: vec![
            RequestOp {
                request_put: Some(put),
                ..Default::default()
            },
            op(owner.clone()),
        ]
        .into(),
        failure: vec![op(this_key), op(owner)].into(),
    }
}
