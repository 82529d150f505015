//! The request messages of the gateway (`etcdserverpb` Range, Put, DeleteRange, Txn,
//! Compaction, Watch, LeaseGrant, the lease ID requests, Authenticate) and how each
//! field is read from JSON.
//!
//! Why a module of their own: the core, its parts (`kv_ops`, `watchers`), the calls
//! (`calls`) and the size limits (`size`) all need them; none of those needs the others.

use crate::decode::wire::*;

/// etcd's `--max-txn-ops` default.
pub const MAX_TXN_OPS: usize = 128;

#[derive(Default, Debug, Clone)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub limit: i64,
    pub revision: i64,
    pub sort_order: i32,
    pub sort_target: i32,
    pub serializable: bool,
    pub keys_only: bool,
    pub count_only: bool,
    pub min_mod_revision: i64,
    pub max_mod_revision: i64,
    pub min_create_revision: i64,
    pub max_create_revision: i64,
}

crate::message!(RangeRequest {
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
    b"limit" => limit: I64,
    b"revision" => revision: I64,
    b"sort_order" | b"sortOrder" => sort_order: Enum<SortOrder>,
    b"sort_target" | b"sortTarget" => sort_target: Enum<SortTarget>,
    b"serializable" => serializable: Bool,
    b"keys_only" | b"keysOnly" => keys_only: Bool,
    b"count_only" | b"countOnly" => count_only: Bool,
    b"min_mod_revision" | b"minModRevision" => min_mod_revision: I64,
    b"max_mod_revision" | b"maxModRevision" => max_mod_revision: I64,
    b"min_create_revision" | b"minCreateRevision" => min_create_revision: I64,
    b"max_create_revision" | b"maxCreateRevision" => max_create_revision: I64,
});

pub struct SortOrder;
impl EnumType for SortOrder {
    const GO_TYPE: &'static str = "etcdserverpb.RangeRequest_SortOrder";
    const NAMES: &'static [&'static str] = &["NONE", "ASCEND", "DESCEND"];
}

pub struct SortTarget;
impl EnumType for SortTarget {
    const GO_TYPE: &'static str = "etcdserverpb.RangeRequest_SortTarget";
    const NAMES: &'static [&'static str] = &["KEY", "VERSION", "CREATE", "MOD", "VALUE"];
}

#[derive(Default, Debug, Clone)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lease: i64,
    pub prev_kv: bool,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

crate::message!(PutRequest {
    b"key" => key: Bytes,
    b"value" => value: Bytes,
    b"lease" => lease: I64,
    b"prev_kv" | b"prevKv" => prev_kv: Bool,
    b"ignore_value" | b"ignoreValue" => ignore_value: Bool,
    b"ignore_lease" | b"ignoreLease" => ignore_lease: Bool,
});

#[derive(Default, Debug, Clone)]
pub struct DeleteRangeRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub prev_kv: bool,
}

crate::message!(DeleteRangeRequest {
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
    b"prev_kv" | b"prevKv" => prev_kv: Bool,
});

#[derive(Default, Debug, Clone)]
pub struct Compare {
    pub result: i32,
    pub target: i32,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub version: i64,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub value: Vec<u8>,
    pub lease: i64,
}

crate::message!(Compare {
    b"result" => result: Enum<CompareResult>,
    b"target" => target: Enum<CompareTarget>,
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
    b"version" => version: I64,
    b"create_revision" | b"createRevision" => create_revision: I64,
    b"mod_revision" | b"modRevision" => mod_revision: I64,
    b"value" => value: Bytes,
    b"lease" => lease: I64,
});

pub struct CompareResult;
impl EnumType for CompareResult {
    const GO_TYPE: &'static str = "etcdserverpb.Compare_CompareResult";
    const NAMES: &'static [&'static str] = &["EQUAL", "GREATER", "LESS", "NOT_EQUAL"];
}

pub struct CompareTarget;
impl EnumType for CompareTarget {
    const GO_TYPE: &'static str = "etcdserverpb.Compare_CompareTarget";
    const NAMES: &'static [&'static str] = &["VERSION", "CREATE", "MOD", "VALUE", "LEASE"];
}

#[derive(Default, Debug, Clone)]
pub struct RequestOp {
    pub request_range: Option<RangeRequest>,
    pub request_put: Option<PutRequest>,
    pub request_delete_range: Option<DeleteRangeRequest>,
    pub request_txn: Option<Box<TxnRequest>>,
}

crate::message!(RequestOp {
    b"request_range" | b"requestRange" => request_range: Nested<RangeRequest>,
    b"request_put" | b"requestPut" => request_put: Nested<PutRequest>,
    b"request_delete_range" | b"requestDeleteRange" => request_delete_range: Nested<DeleteRangeRequest>,
    b"request_txn" | b"requestTxn" => request_txn: Boxed<TxnRequest>,
});

/// Ops and compares kept per list: one more than etcd allows, so the count check still
/// fires, and no more, so a body of a million empty ops costs nothing.
const LIST_CAP: usize = MAX_TXN_OPS + 1;

#[derive(Default, Debug, Clone)]
pub struct TxnRequest {
    pub compare: Capped<Compare>,
    pub success: Capped<RequestOp>,
    pub failure: Capped<RequestOp>,
}

crate::message!(TxnRequest {
    b"compare" => compare: List<Compare, LIST_CAP>,
    b"success" => success: List<RequestOp, LIST_CAP>,
    b"failure" => failure: List<RequestOp, LIST_CAP>,
});

#[derive(Default, Debug, Clone)]
pub struct CompactionRequest {
    pub revision: i64,
    pub physical: bool,
}

crate::message!(CompactionRequest {
    b"revision" => revision: I64,
    b"physical" => physical: Bool,
});

#[derive(Default, Debug)]
pub struct WatchRequest {
    pub create_request: Option<CreateRequest>,
    pub cancel_request: Option<CancelRequest>,
    pub progress_request: Option<Empty>,
}

crate::message!(WatchRequest {
    b"create_request" | b"createRequest" => create_request: Nested<CreateRequest>,
    b"cancel_request" | b"cancelRequest" => cancel_request: Nested<CancelRequest>,
    b"progress_request" | b"progressRequest" => progress_request: Nested<Empty>,
});

#[derive(Default, Debug)]
pub struct CreateRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub start_revision: i64,
    pub progress_notify: bool,
    pub filters: Vec<i32>,
    pub prev_kv: bool,
    pub watch_id: i64,
    pub fragment: bool,
}

crate::message!(CreateRequest {
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
    b"start_revision" | b"startRevision" => start_revision: I64,
    b"progress_notify" | b"progressNotify" => progress_notify: Bool,
    b"filters" => filters: Enums<FilterType>,
    b"prev_kv" | b"prevKv" => prev_kv: Bool,
    b"watch_id" | b"watchId" => watch_id: I64,
    b"fragment" => fragment: Bool,
});

pub struct FilterType;
impl EnumType for FilterType {
    const GO_TYPE: &'static str = "etcdserverpb.WatchCreateRequest_FilterType";
    const NAMES: &'static [&'static str] = &["NOPUT", "NODELETE"];
}

#[derive(Default, Debug)]
pub struct CancelRequest {
    pub watch_id: i64,
}

crate::message!(CancelRequest { b"watch_id" | b"watchId" => watch_id: I64 });

/// `LeaseGrantRequest`.
#[derive(Default, Debug, Clone)]
pub struct GrantRequest {
    pub ttl: i64,
    pub id: i64,
}

crate::message!(GrantRequest { b"TTL" => ttl: I64, b"ID" => id: I64 });

/// `LeaseRevokeRequest`, `LeaseKeepAliveRequest`, `LeaseTimeToLiveRequest` and
/// `LeaseLeasesRequest` (which reads no field): an ID, and whether to list the keys.
#[derive(Default, Debug, Clone)]
pub struct IdRequest {
    pub id: i64,
    pub keys: bool,
}

crate::message!(IdRequest { b"ID" => id: I64, b"keys" => keys: Bool });

/// `AuthenticateRequest`.
#[derive(Default, Debug, Clone)]
pub struct AuthenticateRequest {
    pub name: String,
    pub password: String,
}

crate::message!(AuthenticateRequest { b"name" => name: Str, b"password" => password: Str });
