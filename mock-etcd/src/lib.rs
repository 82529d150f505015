//! mock-etcd: an in-memory fake of etcd 3.4's v3 JSON gateway (grpc-gateway), with faults.
//!
//! Written from etcd's side of the wire: every answer, header, zero-value omission and
//! error body was observed on a real etcd 3.4.23 (see README.md), and
//! `tests/differential.rs` replays the same requests against both.
//!
//! # Layout
//!
//! Cores (the rules, given the time as a `Duration` since an arbitrary start, no HTTP,
//! no clock, randomness from a seed):
//!
//! - [`core`]: [`EtcdCore`], the whole fake as one value: every gateway call a method
//!   (`range`, `put`, `delete_range`, `txn`, `grant`, `revoke`, `keepalive`,
//!   `time_to_live`, `leases`, `authenticate`, `watch_open`/`watch_json`/`watch_close`),
//!   expiry when told ([`EtcdCore::expire_due`]), the data faults.
//! - [`calls`]: the unary calls in wire form: [`Call::from_path`], [`Call::decode`],
//!   [`EtcdCore::apply`], and [`EtcdCore::handle_json`] (path + JSON body in, status +
//!   JSON body out, no HTTP).
//! - [`store`]: keys, bounded MVCC history, leases, revision;
//!   [`store::Store::close_revision`] closes a revision.
//! - [`data`]: [`data::Data`], the store and its watchers ([`data::Data::commit`] closes
//!   a revision and tells the watchers).
//! - [`watchers`]: the watch registry and its answer lines; [`watchers::Registry`],
//!   answers to a [`WatchSink`] ([`LineSink`] keeps them to drain).
//! - [`tokens`]: simple tokens with etcd's sliding idle TTL; [`tokens::Auth::check`].
//! - [`kv_ops`]: range, put, delete and txn as etcd applies them; [`kv_ops::apply_txn`].
//! - [`accounts`]: users, roles, key permissions and the coverage rule
//!   ([`accounts::Accounts::permit`], [`accounts::Accounts::admin`]); [`permits`]: the
//!   permissions each KV request needs.
//! - [`auth_admin`]: auth management with etcd's preconditions
//!   ([`EtcdCore::auth_manage`]); its messages in [`auth_messages`].
//! - [`lock`]: v3lock in steps ([`EtcdCore::lock_claim`], [`EtcdCore::lock_held`],
//!   [`EtcdCore::lock_abandon`], [`EtcdCore::unlock`]).
//! - [`alarm`]: alarms and the space quota's arithmetic; [`alarm_call`]: the calls on
//!   the core ([`EtcdCore::alarm`], [`EtcdCore::check_space`]).
//! - [`outbox`]: a watch stream's backlog, bounded in answers and bytes.
//! - `config`: [`Config`], etcd's defaults.
//! - [`faults`]: [`Fault`] (fail, latency, hang), which paths it matches, and the
//!   decision it makes ([`faults::FaultDecision`]; the caller applies it).
//! - [`journal`]: the bounded request log behind `GET /_mock/requests`.
//!
//! The gateway's JSON:
//!
//! - [`scan`]: Go's JSON scanner (syntax, depth, message ends, Go's wording);
//!   [`scan::Scanner`].
//! - [`decode`]: reading requests as jsonpb does, into typed messages without building
//!   a tree; [`decode::parse`], the [`message!`] macro, [`decode::MessageSplitter`].
//! - [`requests`]: the request messages (KV, watch, lease, authenticate).
//! - [`answers`]: the lease and auth answer messages.
//! - [`codec`]: the JSON dialect on the way out (int64 as strings, base64 bytes,
//!   omitted zeros) and the gateway's headers; [`codec::ok`].
//! - [`error`]: [`EtcdError`], the one error type, rendered as `{"error","message","code"}`.
//! - [`event`]: every event mock-etcd reports, as one typed value: [`EtcdEvent`].
//! - `size`: protobuf sizes of requests for etcd's two size limits.
//!
//! The HTTP shell:
//!
//! - `gateway`: the router of etcd's paths (`/v3/` and `/v3beta/`), 404/405, 301;
//!   wiring only.
//! - `state`: `state::Shared`, what every handler shares: the core behind one
//!   lock, the clock (`state::Shared::now`), faults, streams.
//! - `unary`: every unary call: capped body, decode outside the lock, apply under it
//!   (`unary::serve`).
//! - `body`: the capped unary body reader `body::read_body` and the streamed
//!   `body::StreamReader`.
//! - `lease`: the keepalive stream, and the expiry loop `lease::run_expiry`.
//! - `watch`: the `/v3/watch` streams (`watch::watch`).
//! - `lock_wait`: `/v3/lock/lock`, waiting until the lock is held.
//! - `cluster`: `/v3/maintenance/status` and `/v3/cluster/member/list` of a
//!   single-member cluster.
//! - `auth`: where a request's token is found (`auth::token`).
//! - `fault_layer`: the middleware that applies faults and logs requests.
//! - `control`: the `/_mock/` control API, mirroring the [`MockEtcd`] methods.
//! - `locking`: a lock that survives a panicked holder.
//!
//! Entry point: [`start`] binds, spawns the server and the lease-expiry loop, and answers
//! a [`MockEtcd`] handle.

pub mod accounts;
pub mod alarm;
pub mod alarm_call;
pub mod answers;
mod auth;
pub mod auth_admin;
pub mod auth_messages;
mod body;
pub mod calls;
mod cluster;
pub mod codec;
mod config;
mod control;
pub mod core;
pub mod data;
pub mod decode;
pub mod error;
pub mod event;
mod fault_layer;
pub mod faults;
mod gateway;
pub mod journal;
pub mod kv_ops;
mod lease;
pub mod lock;
mod lock_wait;
mod locking;
pub mod outbox;
pub mod permits;
pub mod requests;
pub mod scan;
mod size;
mod state;
pub mod store;
pub mod tokens;
mod unary;
mod watch;
pub mod watchers;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use mock_kit::{Events, FaultRegistry, ServerHandle, Shutdown};

pub use crate::calls::{Answer, Call, Request};
pub use crate::core::{EtcdCore, WatchStream};
pub use crate::watchers::{LineSink, WatchSink};
pub use config::Config;
pub use error::EtcdError;
pub use event::EtcdEvent;
pub use faults::Fault;
pub use journal::RequestLog;

use crate::journal::Journal;
use crate::locking::lock;
use crate::state::Shared;

/// Bytes of keys and values and of queued watch answers the fake holds now: what
/// its memory grows with (the rest is bounded by constants and the request log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Retained {
    /// Current keys and values.
    pub live: usize,
    /// Superseded versions the history keeps (at most `Config::history_bytes_cap`).
    pub history: usize,
    /// Answers queued for watch streams (at most `Config::watch_backlog_bytes` plus
    /// one answer, per open stream).
    pub watch_backlog: usize,
}

/// A running fake etcd.
#[derive(Clone)]
pub struct MockEtcd {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Arc<Mutex<Option<ServerHandle>>>,
}

impl std::fmt::Debug for MockEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockEtcd")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Bind `config.listen`, serve the gateway (and the control API unless disabled), run
/// lease expiry. Answers once the socket is bound.
pub async fn start(config: Config, events: Events) -> std::io::Result<MockEtcd> {
    let shutdown = Shutdown::new();
    let core = EtcdCore::new(config.clone(), mock_kit::events::now_ms(), rand::random());
    let (release, _) = tokio::sync::watch::channel(0u64);
    let shared = Arc::new(Shared {
        journal: Journal::new(config.journal_cap),
        core: Mutex::new(core),
        faults: FaultRegistry::new(),
        events,
        streams: Mutex::new(shutdown.child()),
        shutdown: shutdown.clone(),
        release,
        client_url: std::sync::OnceLock::new(),
        started: std::time::Instant::now(),
        watch_queued: Default::default(),
        config,
    });
    let mut router = gateway::router(shared.clone());
    if shared.config.control {
        router = router.merge(control::router(shared.clone()));
    }
    let handle =
        mock_kit::serve::bind_and_spawn(shared.config.listen, router, shutdown.clone()).await?;
    let addr = handle.addr;
    let _ = shared.client_url.set(format!("http://{addr}"));
    tokio::spawn(lease::run_expiry(shared.clone()));
    Ok(MockEtcd {
        shared,
        addr,
        server: Arc::new(Mutex::new(Some(handle))),
    })
}

impl MockEtcd {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop serving: open streams end, the listener closes. Idempotent.
    pub async fn stop(&self) {
        self.shared.shutdown.trigger();
        let handle = lock(&self.server).take();
        if let Some(h) = handle {
            if let Err(e) = h.stop().await {
                tracing::warn!(error = %e, "mock-etcd server ended with an error");
            }
        }
    }

    /// Expire one lease now (its keys are deleted in one revision). False if unknown.
    pub fn expire_lease(&self, id: i64) -> bool {
        lease::expire(&self.shared, id)
    }

    pub fn expire_all_leases(&self) {
        lease::expire_all(&self.shared)
    }

    /// Lose every key, lease and token, as an etcd restarted without its data dir;
    /// open streams are closed. `reset_revision`: start again at revision 1.
    pub fn lose_data(&self, reset_revision: bool) {
        control::lose_data(&self.shared, reset_revision)
    }

    pub fn faults(&self) -> &FaultRegistry<Fault> {
        &self.shared.faults
    }

    /// Let every hung request proceed.
    pub fn release_hung(&self) {
        self.shared.release.send_modify(|g| *g += 1);
    }

    /// End every open watch (and keepalive) stream, as a connection loss would.
    pub fn close_watches(&self) {
        self.shared.close_streams();
        self.shared.events.emit_event(&EtcdEvent::WatchesClosed);
    }

    /// Keys (decoded), leases with remaining TTL, revision.
    pub fn state(&self) -> serde_json::Value {
        control::state(&self.shared)
    }

    /// The current value and lease of a key.
    pub fn get(&self, key: &str) -> Option<(String, i64)> {
        let core = self.shared.core();
        core.data()
            .get(key.as_bytes())
            .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.lease))
    }

    /// The highest mod revision of a key under `prefix` (`None`: no key has it). Reads
    /// the store directly, so the gateway's faults neither blind it nor fire on it.
    pub fn max_mod_revision(&self, prefix: &str) -> Option<i64> {
        let core = self.shared.core();
        let prefix = prefix.as_bytes();
        core.data()
            .iter()
            .filter(|kv| kv.key.starts_with(prefix))
            .map(|kv| kv.mod_revision)
            .max()
    }

    /// What the fake's memory holds now (see [`Retained`]).
    pub fn retained(&self) -> Retained {
        let core = self.shared.core();
        Retained {
            live: core.data().data_bytes(),
            history: core.data().history_bytes(),
            watch_backlog: self
                .shared
                .watch_queued
                .load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// The most recent requests, oldest first.
    pub fn requests(&self) -> Vec<RequestLog> {
        self.shared.journal.snapshot()
    }

    /// Everything back to a fresh start: data, faults, request log, streams, tokens.
    pub fn reset(&self) {
        control::reset(&self.shared)
    }
}
