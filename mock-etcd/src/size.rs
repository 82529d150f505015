//! Protobuf sizes of requests, for etcd's two size limits.
//!
//! etcd checks sizes on the decoded message, not on the JSON: above gRPC's receive
//! limit (max request bytes + 512 KiB) 429/8, above `--max-request-bytes` for a write
//! 400/3 "request is too large". These functions size a request as its protobuf
//! encoding would be.

use crate::config::Config;
use crate::decode::wire::WireSize;
use crate::error::EtcdError;
use crate::requests::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};

/// Bytes of the raft envelope around a request (header with an ID).
const RAFT_OVERHEAD: usize = 16;

pub fn grpc_max(config: &Config) -> usize {
    config.max_request_bytes + 512 * 1024
}

/// The most JSON a unary body may have: base64 and JSON make a message ~4/3 larger
/// than its protobuf, so 4x `--max-request-bytes` (at least 64 KiB).
pub fn body_cap(config: &Config) -> usize {
    config.max_request_bytes.saturating_mul(4).max(64 * 1024)
}

/// The error for a unary body past [`body_cap`] (gRPC's "larger than max").
pub fn body_too_large(config: &Config) -> EtcdError {
    EtcdError::grpc_too_large(body_cap(config) * 3 / 4, grpc_max(config))
}

pub fn check_grpc(config: &Config, len: usize) -> Result<(), EtcdError> {
    let max = grpc_max(config);
    if len > max {
        return Err(EtcdError::grpc_too_large(len, max));
    }
    Ok(())
}

pub fn check_raft(config: &Config, len: usize) -> Result<(), EtcdError> {
    if len + RAFT_OVERHEAD > config.max_request_bytes {
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
