//! What etcd's gateway answers, as the master reads them: keys, listings, watch
//! messages and their events, and why a call failed. The client ([`crate::etcd`]) and
//! the watch message reader ([`crate::watch_message`]) both build these.

/// Why an etcd call failed.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdError(pub String);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EtcdError {}

/// One key as the gateway reports it, decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// A consistent listing: every key under a prefix at `revision`.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeResult {
    pub revision: i64,
    pub kvs: Vec<KeyValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub kv: KeyValue,
    pub prev_kv: Option<KeyValue>,
}

/// One message of a watch stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WatchResponse {
    /// `header.revision` (0 when absent).
    pub revision: i64,
    pub created: bool,
    pub canceled: bool,
    /// Set when the watch was canceled because its start revision was compacted away.
    pub compact_revision: i64,
    pub cancel_reason: String,
    pub events: Vec<WatchEvent>,
}
