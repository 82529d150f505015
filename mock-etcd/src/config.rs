//! How to run the fake: [`Config`], with etcd 3.4's defaults.
//!
//! Why a module of its own: the binary, the library entry point and the shared state
//! all read it; it depends on nothing of theirs.

use std::net::SocketAddr;
use std::time::Duration;

/// How to run the fake.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// `(name, password)`; when non-empty, auth is enabled as after `etcdctl auth enable`.
    pub users: Vec<(String, String)>,
    /// Simple-token idle TTL (etcd `--auth-token-ttl`, default 300 s).
    pub token_ttl: Duration,
    /// Serve the `/_mock/` control API.
    pub control: bool,
    /// Smallest lease TTL; etcd raises smaller grants to this (2 s with default timing).
    pub min_lease_ttl: i64,
    pub cluster_id: u64,
    pub member_id: u64,
    pub raft_term: u64,
    /// Events kept for `revision`/`start_revision`; older ones are compacted away.
    pub history_cap: usize,
    /// Responses buffered per watch stream before a slow watcher is cancelled.
    pub watch_backlog: usize,
    /// Bytes of responses buffered per watch stream before a slow watcher is
    /// cancelled (a single response larger than this is still sent when the
    /// backlog is empty, so a catch-up from history always gets through).
    pub watch_backlog_bytes: usize,
    /// Bytes of superseded key versions the history keeps; past it the oldest
    /// revisions are compacted away, as by `history_cap`.
    pub history_bytes_cap: usize,
    /// etcd `--quota-backend-bytes` (2 GiB): a write that would bring the database
    /// size there raises NOSPACE.
    pub quota_backend_bytes: u64,
    /// etcd `--max-request-bytes` (1.5 MiB).
    pub max_request_bytes: usize,
    /// How often leases are checked for expiry.
    pub expiry_tick: Duration,
    /// Requests kept by the request log.
    pub journal_cap: usize,
    /// The member's name and peer URL in `/v3/cluster/member/list`.
    pub name: String,
    pub peer_url: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            users: Vec::new(),
            token_ttl: Duration::from_secs(300),
            control: true,
            min_lease_ttl: 2,
            cluster_id: 14841639068965178418,
            member_id: 10276657743932975437,
            raft_term: 2,
            history_cap: 100_000,
            watch_backlog: 1024,
            watch_backlog_bytes: 8 << 20,
            history_bytes_cap: 64 << 20,
            quota_backend_bytes: 2 << 30,
            max_request_bytes: 1572864,
            expiry_tick: Duration::from_millis(100),
            journal_cap: 1000,
            name: "default".to_string(),
            peer_url: "http://localhost:2380".to_string(),
        }
    }
}
