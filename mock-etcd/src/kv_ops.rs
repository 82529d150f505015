//! The KV operations as etcd applies them to the data: range, put, delete, txn.
//!
//! Why a module of its own: this is the rule, free of HTTP and clocks (`kv` is the
//! HTTP side). Validation happens in etcd's order (static request checks, then
//! duplicate keys in a txn, then lease and key existence on the branch that will run,
//! then the write), so a bad request never changes anything and the error is the one
//! etcd gives first. Answers leave their top header to the caller.

use serde::Serialize;

use crate::codec::{is_false, is_zero, ser_i64, Header};
use crate::data::Data;
use crate::error::EtcdError;
use crate::requests::*;
use crate::store::{Batch, KeyRange, KeyValue, Store};

#[derive(Serialize, Debug)]
pub struct RangeResponse {
    pub header: Header,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kvs: Vec<KeyValue>,
    #[serde(skip_serializing_if = "is_false")]
    pub more: bool,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub count: i64,
}

#[derive(Serialize, Debug)]
pub struct PutResponse {
    pub header: Header,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<KeyValue>,
}

#[derive(Serialize, Debug)]
pub struct DeleteRangeResponse {
    pub header: Header,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub deleted: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Serialize, Debug)]
pub struct TxnResponse {
    pub header: Header,
    #[serde(skip_serializing_if = "is_false")]
    pub succeeded: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub responses: Vec<ResponseOp>,
}

/// A txn's per-op answer; variant names are the gateway's field names.
#[derive(Serialize, Debug)]
#[serde(rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)]
pub enum ResponseOp {
    ResponseRange(RangeResponse),
    ResponsePut(PutResponse),
    ResponseDeleteRange(DeleteRangeResponse),
    ResponseTxn(TxnResponse),
}

/// Put `r` in a revision of its own.
pub fn put(data: &mut Data, r: &PutRequest) -> Result<PutResponse, EtcdError> {
    precheck_put(data, r)?;
    let mut batch = Batch::default();
    let prev = do_put(data, &mut batch, r);
    data.commit(batch);
    Ok(PutResponse {
        header: Header::nested(0),
        prev_kv: prev,
    })
}

pub fn check_delete(r: &DeleteRangeRequest) -> Result<(), EtcdError> {
    if r.key.is_empty() {
        return Err(EtcdError::key_not_provided());
    }
    Ok(())
}

/// Delete the keys of `r` in one revision (none if nothing matched).
pub fn delete_range(data: &mut Data, r: &DeleteRangeRequest) -> DeleteRangeResponse {
    let mut batch = Batch::default();
    let resp = do_delete(data, &mut batch, r);
    data.commit(batch);
    resp
}

pub fn check_range(r: &RangeRequest) -> Result<(), EtcdError> {
    if r.key.is_empty() {
        return Err(EtcdError::key_not_provided());
    }
    Ok(())
}

pub fn check_put(r: &PutRequest) -> Result<(), EtcdError> {
    if r.key.is_empty() {
        return Err(EtcdError::key_not_provided());
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(EtcdError::value_provided());
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(EtcdError::lease_provided());
    }
    Ok(())
}

fn precheck_put(store: &Store, r: &PutRequest) -> Result<(), EtcdError> {
    if r.lease != 0 && !store.leases.contains_key(&r.lease) {
        return Err(EtcdError::lease_not_found());
    }
    if (r.ignore_value || r.ignore_lease) && store.get(&r.key).is_none() {
        return Err(EtcdError::key_not_found());
    }
    Ok(())
}

/// Read `r` (without its header, which the caller stamps).
pub fn range(store: &Store, r: &RangeRequest) -> Result<RangeResponse, EtcdError> {
    let range = KeyRange::new(r.key.clone(), r.range_end.clone());
    let mut kvs = store.range_at(&range, r.revision)?;
    let count = kvs.len() as i64;
    if r.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= r.max_mod_revision);
    }
    if r.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= r.min_mod_revision);
    }
    if r.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= r.max_create_revision);
    }
    if r.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= r.min_create_revision);
    }
    let order = if r.sort_target != 0 && r.sort_order == 0 {
        1
    } else {
        r.sort_order
    };
    if order != 0 {
        match r.sort_target {
            1 => kvs.sort_by_key(|kv| kv.version),
            2 => kvs.sort_by_key(|kv| kv.create_revision),
            3 => kvs.sort_by_key(|kv| kv.mod_revision),
            4 => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
            _ => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
        }
        if order == 2 {
            kvs.reverse();
        }
    }
    if r.count_only {
        kvs.clear();
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() as i64 > r.limit {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    Ok(RangeResponse {
        header: Header::nested(0),
        kvs,
        more,
        count,
    })
}

fn do_put(store: &mut Store, batch: &mut Batch, r: &PutRequest) -> Option<KeyValue> {
    let current = store.get(&r.key);
    let value = if r.ignore_value {
        current.map(|kv| kv.value.clone()).unwrap_or_default()
    } else {
        r.value.clone()
    };
    let lease = if r.ignore_lease {
        current.map_or(0, |kv| kv.lease)
    } else {
        r.lease
    };
    let prev = store.put(batch, &r.key, value, lease);
    if r.prev_kv {
        prev
    } else {
        None
    }
}

fn do_delete(store: &mut Store, batch: &mut Batch, r: &DeleteRangeRequest) -> DeleteRangeResponse {
    let gone = store.delete(batch, &KeyRange::new(r.key.clone(), r.range_end.clone()));
    DeleteRangeResponse {
        header: Header::nested(0),
        deleted: gone.len() as i64,
        prev_kvs: if r.prev_kv { gone } else { Vec::new() },
    }
}

/// Run a txn: checks, compare, branch prechecks, then the writes in one revision.
pub fn apply_txn(store: &mut Data, r: &TxnRequest) -> Result<TxnResponse, EtcdError> {
    check_txn(r)?;
    check_intervals(r)?;
    let mut path = Vec::new();
    precheck_branch(store, r, &mut path)?;
    let mut batch = Batch::default();
    let mut path_iter = path.into_iter();
    let resp = exec_txn(store, &mut batch, r, &mut path_iter)?;
    store.commit(batch);
    Ok(resp)
}

pub fn check_txn(r: &TxnRequest) -> Result<(), EtcdError> {
    let ops = r.compare.len().max(r.success.len()).max(r.failure.len());
    if ops > MAX_TXN_OPS {
        return Err(EtcdError::too_many_ops());
    }
    if r.compare.iter().any(|c| c.key.is_empty()) {
        return Err(EtcdError::key_not_provided());
    }
    for op in r.success.iter().chain(&r.failure) {
        check_op(op)?;
    }
    Ok(())
}

fn check_op(op: &RequestOp) -> Result<(), EtcdError> {
    if let Some(r) = &op.request_range {
        check_range(r)
    } else if let Some(p) = &op.request_put {
        check_put(p)
    } else if let Some(d) = &op.request_delete_range {
        if d.key.is_empty() {
            Err(EtcdError::key_not_provided())
        } else {
            Ok(())
        }
    } else if let Some(t) = &op.request_txn {
        check_txn(t)
    } else {
        Err(EtcdError::key_not_found())
    }
}

/// etcd refuses a txn branch that writes one key twice (put/put or put/delete).
fn check_intervals(r: &TxnRequest) -> Result<(), EtcdError> {
    branch_writes(&r.success)?;
    branch_writes(&r.failure)?;
    Ok(())
}

/// (puts, deletes) of a branch, including nested txns; errors on a duplicate.
fn branch_writes(ops: &[RequestOp]) -> Result<(Vec<Vec<u8>>, Vec<KeyRange>), EtcdError> {
    let mut puts: Vec<Vec<u8>> = Vec::new();
    let mut dels: Vec<KeyRange> = Vec::new();
    for op in ops {
        if let Some(d) = &op.request_delete_range {
            dels.push(KeyRange::new(d.key.clone(), d.range_end.clone()));
        }
    }
    for op in ops {
        if let Some(p) = &op.request_put {
            if puts.contains(&p.key) || dels.iter().any(|d| d.contains(&p.key)) {
                return Err(EtcdError::duplicate_key());
            }
            puts.push(p.key.clone());
        }
    }
    for op in ops {
        if let Some(t) = &op.request_txn {
            let (sp, sd) = branch_writes(&t.success)?;
            let (fp, fd) = branch_writes(&t.failure)?;
            for k in sp.iter().chain(&fp) {
                if puts.contains(k) || dels.iter().any(|d| d.contains(k)) {
                    return Err(EtcdError::duplicate_key());
                }
            }
            for d in sd.iter().chain(&fd) {
                if puts.iter().any(|k| d.contains(k)) {
                    return Err(EtcdError::duplicate_key());
                }
            }
            puts.extend(sp.into_iter().chain(fp));
            dels.extend(sd.into_iter().chain(fd));
        }
    }
    Ok((puts, dels))
}

fn compare_holds(store: &Store, c: &Compare) -> bool {
    let range = KeyRange::new(c.key.clone(), c.range_end.clone());
    let kvs = store.range_at(&range, 0).unwrap_or_default();
    if kvs.is_empty() {
        // A missing key never equals any value ("" included), as in etcd.
        return c.target != 3 && compare_kv(c, &KeyValue::default());
    }
    kvs.iter().all(|kv| compare_kv(c, kv))
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering;
    let ord = match c.target {
        0 => kv.version.cmp(&c.version),
        1 => kv.create_revision.cmp(&c.create_revision),
        2 => kv.mod_revision.cmp(&c.mod_revision),
        3 => kv.value.as_slice().cmp(c.value.as_slice()),
        4 => kv.lease.cmp(&c.lease),
        _ => Ordering::Equal,
    };
    match c.result {
        0 => ord == Ordering::Equal,
        1 => ord == Ordering::Greater,
        2 => ord == Ordering::Less,
        3 => ord != Ordering::Equal,
        _ => true,
    }
}

/// Decide every compare against the state before the txn (as etcd does) and check the
/// ops of the chosen branches; `path` records the decisions in depth-first order.
fn precheck_branch(store: &Store, r: &TxnRequest, path: &mut Vec<bool>) -> Result<(), EtcdError> {
    let ok = r.compare.iter().all(|c| compare_holds(store, c));
    path.push(ok);
    let ops = if ok { &r.success } else { &r.failure };
    for op in ops {
        if let Some(p) = &op.request_put {
            precheck_put(store, p)?;
        } else if let Some(rr) = &op.request_range {
            if rr.revision > store.rev {
                return Err(EtcdError::future_rev());
            }
            if rr.revision > 0 && rr.revision < store.compact_rev {
                return Err(EtcdError::compacted());
            }
        } else if let Some(t) = &op.request_txn {
            precheck_branch(store, t, path)?;
        }
    }
    Ok(())
}

fn exec_txn(
    store: &mut Store,
    batch: &mut Batch,
    r: &TxnRequest,
    path: &mut impl Iterator<Item = bool>,
) -> Result<TxnResponse, EtcdError> {
    let ok = path.next().unwrap_or(false);
    let ops = if ok { &r.success } else { &r.failure };
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let mut resp = if let Some(rr) = &op.request_range {
            ResponseOp::ResponseRange(range(store, rr)?)
        } else if let Some(p) = &op.request_put {
            let prev = do_put(store, batch, p);
            ResponseOp::ResponsePut(PutResponse {
                header: Header::nested(0),
                prev_kv: prev,
            })
        } else if let Some(d) = &op.request_delete_range {
            ResponseOp::ResponseDeleteRange(do_delete(store, batch, d))
        } else if let Some(t) = &op.request_txn {
            ResponseOp::ResponseTxn(exec_txn(store, batch, t, path)?)
        } else {
            continue;
        };
        set_nested_revision(&mut resp, revision_so_far(store, batch));
        responses.push(resp);
    }
    Ok(TxnResponse {
        header: Header::nested(0),
        succeeded: ok,
        responses,
    })
}

/// The revision a txn op reports: etcd's write txn answers the revision before the txn
/// until it has written something, and the one it is building from then on.
fn revision_so_far(store: &Store, batch: &Batch) -> i64 {
    if batch.events.is_empty() {
        store.rev
    } else {
        store.rev + 1
    }
}

/// Nested op headers carry only a revision (see [`revision_so_far`], taken right after
/// the op); nested txn headers are empty and their own ops were stamped as they ran.
fn set_nested_revision(op: &mut ResponseOp, rev: i64) {
    match op {
        ResponseOp::ResponseRange(r) => r.header = Header::nested(rev),
        ResponseOp::ResponsePut(p) => p.header = Header::nested(rev),
        ResponseOp::ResponseDeleteRange(d) => d.header = Header::nested(rev),
        ResponseOp::ResponseTxn(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::decode::parse;

    fn data() -> Data {
        let config = Config::default();
        Data::new(&config, Header::nested(0), 1_764_590_000_000)
    }

    fn nested_revisions(resp: &TxnResponse) -> Vec<i64> {
        resp.responses
            .iter()
            .map(|op| match op {
                ResponseOp::ResponseRange(r) => r.header.revision,
                ResponseOp::ResponsePut(p) => p.header.revision,
                ResponseOp::ResponseDeleteRange(d) => d.header.revision,
                ResponseOp::ResponseTxn(_) => 0,
            })
            .collect()
    }

    /// No server, no clock: the txn rule runs on the data alone.
    #[test]
    fn txn_ops_report_the_revision_as_of_each_op() {
        let mut d = data();
        let req: PutRequest = parse(br#"{"key":"YQ==","value":"MQ=="}"#).unwrap();
        put(&mut d, &req).unwrap();
        assert_eq!(d.rev, 2);
        let txn: TxnRequest = parse(
            br#"{"success":[{"request_range":{"key":"YQ=="}},{"request_delete_range":{"key":"eg=="}},
                {"request_put":{"key":"Yg==","value":"MQ=="}},{"request_range":{"key":"Yg=="}},
                {"request_delete_range":{"key":"eg=="}}]}"#,
        )
        .unwrap();
        let resp = apply_txn(&mut d, &txn).unwrap();
        assert_eq!(d.rev, 3);
        assert_eq!(nested_revisions(&resp), vec![2, 2, 3, 3, 3]);
        let read_only: TxnRequest =
            parse(br#"{"success":[{"request_range":{"key":"YQ=="}}]}"#).unwrap();
        assert_eq!(
            nested_revisions(&apply_txn(&mut d, &read_only).unwrap()),
            vec![3]
        );
        assert_eq!(d.rev, 3);
    }
}
