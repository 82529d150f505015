//! Alarms (`/v3/maintenance/alarm`) and the space quota that raises NOSPACE.
//!
//! Why a module of its own: alarms are cluster state that the write calls consult; the
//! answer shapes and the quota's arithmetic belong together. What holds, as observed
//! on etcd 3.4.23:
//!
//! - the answer has no header: `{}`, or `{"alarms":[{"memberID","alarm"}]}` (zeros
//!   omitted); GET with alarm NONE lists every alarm; ACTIVATE answers the alarm (also
//!   when it was already raised), DEACTIVATE the alarm it cleared (`{}` if none);
//! - any member may be named (`memberID` 0 included); no token is needed, and a bad
//!   one is refused in the auth store's words with code 2 (500);
//! - while a NOSPACE alarm is raised, puts, txns with a put among their top-level ops
//!   and lease grants answer 429/8 "etcdserver: mvcc: database space exceeded";
//!   ranges, deletes and nested-txn puts still work; `/health` says `"false"` and
//!   `maintenance/status` lists `errors: ["alarm:NOSPACE "]`.
//!
//! The quota: as etcd's `--quota-backend-bytes` (default 2 GiB), a put, txn or lease
//! grant whose cost (etcd's: 256 + key + value per put, 64 per lease) would bring the
//! fake's database size (the `dbSize` it reports) to the quota or past it raises NOSPACE
//! for this member and is refused.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::codec::{is_zero_u64, ser_u64};
use crate::decode::wire::*;
use crate::error::{code, EtcdError};
use crate::requests::{PutRequest, TxnRequest};

pub const NONE: i32 = 0;
pub const NOSPACE: i32 = 1;
pub const CORRUPT: i32 = 2;

const GET: i32 = 0;
const ACTIVATE: i32 = 1;
const DEACTIVATE: i32 = 2;

/// etcd's cost estimates (`kvOverhead`, `leaseOverhead`).
const KV_OVERHEAD: u64 = 256;
pub const LEASE_OVERHEAD: u64 = 64;

#[derive(Default, Debug, Clone)]
pub struct AlarmRequest {
    pub action: i32,
    pub member_id: u64,
    pub alarm: i32,
}

crate::message!(AlarmRequest {
    b"action" => action: Enum<AlarmAction>,
    b"memberID" => member_id: U64,
    b"alarm" => alarm: Enum<AlarmType>,
});

pub struct AlarmAction;
impl EnumType for AlarmAction {
    const GO_TYPE: &'static str = "etcdserverpb.AlarmRequest_AlarmAction";
    const NAMES: &'static [&'static str] = &["GET", "ACTIVATE", "DEACTIVATE"];
}

pub struct AlarmType;
impl EnumType for AlarmType {
    const GO_TYPE: &'static str = "etcdserverpb.AlarmType";
    const NAMES: &'static [&'static str] = &["NONE", "NOSPACE", "CORRUPT"];
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct AlarmMember {
    #[serde(
        rename = "memberID",
        serialize_with = "ser_u64",
        skip_serializing_if = "is_zero_u64"
    )]
    pub member_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm: Option<&'static str>,
}

/// `AlarmResponse` as etcd 3.4's gateway sends it: without a header.
#[derive(Serialize, Debug, Default)]
pub struct AlarmResponse {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<AlarmMember>,
}

/// The raised alarms, as (type, member) pairs in that order.
#[derive(Default, Debug, Clone)]
pub struct Alarms {
    raised: BTreeSet<(i32, u64)>,
}

fn member(t: i32, m: u64) -> AlarmMember {
    let alarm = match t {
        NONE => None,
        t => Some(
            AlarmType::NAMES
                .get(t as usize)
                .copied()
                .unwrap_or("UNKNOWN"),
        ),
    };
    AlarmMember {
        member_id: m,
        alarm,
    }
}

impl Alarms {
    pub fn nospace(&self) -> bool {
        self.raised.iter().any(|(t, _)| *t == NOSPACE)
    }

    /// While a CORRUPT alarm is raised, every write (put, delete, txn with a write,
    /// compaction, lease grant and revoke) answers 500/15 "corrupt cluster"; reads
    /// still work.
    pub fn check_corrupt(&self) -> Result<(), EtcdError> {
        if self.raised.iter().any(|(t, _)| *t == CORRUPT) {
            return Err(EtcdError::grpc(
                code::DATA_LOSS,
                "etcdserver: corrupt cluster",
            ));
        }
        Ok(())
    }

    pub fn raise(&mut self, t: i32, member: u64) {
        self.raised.insert((t, member));
    }

    /// `status`'s `errors`: each alarm in protobuf text form.
    pub fn errors(&self) -> Vec<String> {
        self.raised
            .iter()
            .map(|&(t, m)| {
                let mut s = String::new();
                if m != 0 {
                    s.push_str(&format!("memberID:{m} "));
                }
                if let Some(a) = member(t, m).alarm {
                    s.push_str(&format!("alarm:{a} "));
                }
                s
            })
            .collect()
    }

    /// Apply one request. ACTIVATE with alarm NONE stores nothing (etcd 3.4.23
    /// stops answering).
    pub fn apply(&mut self, r: &AlarmRequest) -> AlarmResponse {
        let alarms = match r.action {
            GET => self
                .raised
                .iter()
                .filter(|(t, _)| r.alarm == NONE || *t == r.alarm)
                .map(|&(t, m)| member(t, m))
                .collect(),
            ACTIVATE if r.alarm != NONE => {
                self.raise(r.alarm, r.member_id);
                vec![member(r.alarm, r.member_id)]
            }
            DEACTIVATE if self.raised.remove(&(r.alarm, r.member_id)) => {
                vec![member(r.alarm, r.member_id)]
            }
            _ => Vec::new(),
        };
        AlarmResponse { alarms }
    }
}

/// etcd's cost of a put.
pub fn put_cost(r: &PutRequest) -> u64 {
    KV_OVERHEAD + r.key.len() as u64 + r.value.len() as u64
}

/// etcd's cost of a txn: the costlier branch's top-level puts.
pub fn txn_cost(r: &TxnRequest) -> u64 {
    let branch = |ops: &[crate::requests::RequestOp]| -> u64 {
        ops.iter()
            .filter_map(|op| op.request_put.as_ref())
            .map(put_cost)
            .sum()
    };
    branch(&r.success).max(branch(&r.failure))
}

/// Whether a txn writes anywhere (etcd's `isTxnReadonly`, negated).
pub fn txn_writes(r: &TxnRequest) -> bool {
    r.success.iter().chain(r.failure.iter()).any(|op| {
        op.request_put.is_some()
            || op.request_delete_range.is_some()
            || op.request_txn.as_deref().is_some_and(txn_writes)
    })
}
