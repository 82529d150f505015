//! mock-master: a fake of xllm-service's master as vLLM instances and their sidecars see
//! it (docs/contract.md §2 and §3). It learns instances from etcd (range, then watch),
//! keeps each one's state, takes heartbeats, publishes LOADMETRICS and routes OpenAI
//! requests by load. It talks to etcd only through the v3 JSON gateway, so it runs
//! against a real etcd and against `mock-etcd` alike.
//!
//! # Layout
//!
//! - [`etcd`]: a small v3 JSON gateway client (range, put, delete, streaming watch):
//!   [`etcd::EtcdClient::watch`].
//! - [`follow`]: the rules of following etcd, without I/O (new events, revision reset,
//!   compaction, what a key means): [`follow::Cursor::on_response`].
//! - [`watch`]: the stream, backoff, pausing and probe attempts around the core's
//!   following rules (range, watch, resume from the core's cursor, re-list):
//!   [`watch::Watcher::run`].
//! - [`instances`]: the instance state machine (ACTIVE, LEASE_LOST, SUSPECT,
//!   deregistered), clock-free and I/O-free, time as an argument:
//!   [`instances::Instances::apply_put`].
//! - [`registry`]: [`core::MasterCore`] under a lock and a real clock, its decisions
//!   reported as events and metrics: [`registry::Registry::on_watch_event`].
//! - [`probe`]: the `/health` probe a DELETE triggers: [`probe::Prober::attempt`].
//! - [`pbjson`]: the heartbeat body under protobuf's JSON rules:
//!   [`pbjson::HeartbeatRequest::from_json`].
//! - [`auth`]: the rotatable internal token, compared in constant time: [`auth::Token`].
//! - [`body`]: the one capped request-body reader and the oversize guard:
//!   [`body::read_capped`].
//! - [`beat`]: the heartbeat table (answers, body checks, 409), without I/O:
//!   [`beat::read_request`].
//! - [`gate`]: what a heartbeat meets before its body is read (faults, token), without
//!   I/O: [`gate::Gate::check`].
//! - [`heartbeat`]: `POST /v1/internal/heartbeat`, the HTTP shell: [`heartbeat::handle`].
//! - [`publish`]: what a LOADMETRICS round writes, decided without I/O:
//!   [`publish::plan`].
//! - [`loadmetrics`]: the periodic `XLLM:LOADMETRICS:` publisher: [`loadmetrics::run`].
//! - [`pick`]: which routable instance a request goes to, without I/O: [`pick::pick`].
//! - [`routing`]: `/v1/models` and the completions proxy: [`routing::routes`].
//! - [`metrics`]: the master's own Prometheus metrics: [`metrics::Metrics`].
//! - [`fault`]: the [`Fault`] type and its streaming `POST /_mock/faults` decoder:
//!   [`fault::FaultPost`].
//! - [`control`]: the `/_mock/` control API: [`control::routes`].
//! - [`views`]: `GET /v1/internal/instances` and `GET /metrics`: [`views::instances`].
//! - [`error`]: the handlers' error type: [`error::ApiError`].
//! - [`state`]: what handlers and tasks share, and the control operations:
//!   [`state::Shared`].
//! - [`server`]: the router, wiring only: [`server::router`].
//! - [`election`]: which replica is master (service key, leases, the MASTER txn),
//!   clock-free and I/O-free: [`election::Election::on_result`].
//! - [`elect`]: the election's etcd calls carried out, one task each: [`elect::run`].
//! - [`role_event`]: the `elected` / `standby` / `lost_mastership` events: [`RoleEvent`].
//! - [`event`]: every event the master reports, as one typed value: [`MasterEvent`].
//! - [`core`]: every rule above in one value, time as an argument: [`core::MasterCore`]
//!   (watch messages, listings, heartbeats, probe results, ticks in; answers, probe
//!   commands and LOADMETRICS plans out). The real-time shell drives it through
//!   [`registry`]; a simulator drives it directly.
//! - [`config`]: [`Config`] and [`normalize_namespace`].
//! - This file: [`start`] and the [`MockMaster`] handle.
//!
//! # Restart
//!
//! [`MockMaster::restart`] forgets every instance (heartbeats get 409 meanwhile) and
//! then re-learns them the way the real master does when its process starts: a fresh
//! range of `<ns>XLLM:`, registering every instance key found (ACTIVE, with the
//! incarnation in the value), then a new watch from that range's revision + 1. A
//! keepalive never rewrites a key, so without the range a restarted master would never
//! hear of healthy instances again. [`MockMaster::restart_with`]`(false)` skips the
//! range: instances come back only when they put their key again (after a 409).
//!
//! # Replica mode
//!
//! With [`Config::elect`], the master is one of several replicas (docs/contract.md,
//! "Election"): it registers `<ns>XLLM:SERVICE:<service_name>` and runs for
//! `<ns>XLLM:SERVICE:MASTER`. Only the elected one publishes LOADMETRICS; the others
//! answer heartbeats as before and route by the numbers the master published, which
//! they read from the same `<ns>XLLM:` watch. [`MockMaster::role`] and
//! `GET /_mock/role` say where a replica stands. [`MockMaster::stop`] renews nothing
//! more: its leases expire after their TTL and a standby takes over.
//!
//! # etcd auth and data loss
//!
//! With [`Config::etcd_username`] set, [`etcd::EtcdClient`] authenticates and renews its
//! simple token whenever etcd refuses it. If etcd loses its data and its revisions start
//! over, [`watch::Watcher`] notices the lower header revision, re-lists and re-watches.

pub mod auth;
pub mod beat;
pub mod body;
pub mod config;
pub mod control;
pub mod core;
pub mod elect;
pub mod election;
pub mod error;
pub mod etcd;
pub mod etcd_answer;
pub mod event;
pub mod fault;
pub mod follow;
pub mod gate;
pub mod heartbeat;
pub mod heartbeat_event;
pub mod instances;
pub mod loadmetrics;
pub mod metrics;
pub mod pbjson;
pub mod pick;
pub mod probe;
pub mod publish;
pub mod registry;
pub mod role_event;
pub mod routing;
pub mod server;
pub mod state;
pub mod views;
pub mod watch;
pub mod watch_message;
pub mod watch_plan;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_kit::{Events, FaultRegistry, Shutdown};
use tokio::sync::{mpsc, oneshot};

pub use election::Role;
pub use event::{MasterEvent, RouteChoice};
pub use fault::Fault;
pub use heartbeat_event::HeartbeatEvent;
pub use pbjson::{HeartbeatRequest, LatencyMetrics, LoadMetrics};
pub use registry::{InstanceRef, InstanceState, InstanceView};
pub use role_event::{RoleChange, RoleEvent};

pub use config::{normalize_namespace, Config};
use state::{AppState, Shared};

/// A running master. Clones share it.
#[derive(Clone)]
pub struct MockMaster {
    pub(crate) shared: AppState,
}

impl std::fmt::Debug for MockMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockMaster")
            .field("addr", &self.addr())
            .finish()
    }
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Bind `config.listen`, start the watcher, the timers and the publisher, and wait (up
/// to the etcd timeout) for the first listing of etcd to be applied.
pub async fn start(mut config: Config, events: Events) -> std::io::Result<MockMaster> {
    config.etcd_namespace = normalize_namespace(&config.etcd_namespace);
    if config.elect {
        config::check_service_name(&config.service_name)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    }
    let metrics = Arc::new(metrics::Metrics::new());
    // One origin for the core's time and the faults' wall-clock methods.
    let started = std::time::Instant::now();
    let gate = gate::Gate {
        token: auth::Token::new(config.token.clone()),
        faults: FaultRegistry::with_origin(started),
    };
    let core = core::MasterCore::with_gate(&config, gate.clone(), Duration::ZERO);
    let registry = registry::Registry::over(core, started, events.clone(), metrics.clone());
    let etcd = etcd::EtcdClient::new(&config.etcd_endpoints, config.etcd_timeout)
        .map_err(io_err)?
        .with_credentials(&config.etcd_username, &config.etcd_password);
    let prober = probe::Prober::new(config.probe_timeout).map_err(io_err)?;
    let upstream = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(config.upstream_timeout)
        .build()
        .map_err(io_err)?;
    let (paused_tx, paused_rx) = tokio::sync::watch::channel(false);
    let (cmd_tx, cmd_rx) = mpsc::channel(8);
    let shutdown = Shutdown::new();
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let shared = Arc::new(Shared {
        token: gate.token,
        config,
        registry: registry.clone(),
        metrics: metrics.clone(),
        faults: gate.faults,
        events: events.clone(),
        etcd: etcd.clone(),
        heartbeat_counts: state::StatusCounts::default(),
        paused: paused_tx,
        commands: cmd_tx,
        upstream,
        rr: AtomicU64::new(0),
        shutdown: shutdown.clone(),
        server: Mutex::new(None),
        freeze: mock_kit::Freeze::new(),
    });
    let handle =
        mock_kit::serve::spawn(listener, server::router(shared.clone()), shutdown.child())?;
    let addr = handle.addr;
    if let Ok(mut g) = shared.server.lock() {
        *g = Some(handle);
    }

    let (first_tx, first_rx) = oneshot::channel();
    let watcher = watch::Watcher {
        etcd,
        namespace: shared.config.etcd_namespace.clone(),
        registry: registry.clone(),
        prober,
        events: events.clone(),
        metrics,
        paused: paused_rx,
        commands: cmd_rx,
        shutdown: shutdown.clone(),
        freeze: shared.freeze.clone(),
        first_listing: Some(first_tx),
    };
    tokio::spawn(watcher.run());
    tokio::spawn(ticker(shared.clone()));
    if shared.config.elect {
        tokio::spawn(elect::run(elect::Caller {
            registry: registry.clone(),
            etcd: shared.etcd.clone(),
            events: events.clone(),
            shutdown: shutdown.clone(),
            freeze: shared.freeze.clone(),
        }));
    }
    tokio::spawn(loadmetrics::run(shared.clone()));
    let wait = shared.config.etcd_timeout + Duration::from_secs(1);
    let _ = tokio::time::timeout(wait, first_rx).await;
    events.emit_event(&MasterEvent::Started { addr });
    Ok(MockMaster { shared })
}

/// Apply the state timeouts often enough that they fire within a few percent of their
/// durations (the real master checks once a second).
async fn ticker(s: AppState) {
    let period = core::tick_period(s.config.lease_lost_timeout, s.config.suspect_window);
    let mut t = tokio::time::interval(period);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = s.shutdown.wait() => return,
            _ = t.tick() => {
                s.freeze.thawed().await;
                s.registry.tick()
            }
        }
    }
}

impl MockMaster {
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The namespace in use, normalized.
    pub fn namespace(&self) -> &str {
        &self.shared.config.etcd_namespace
    }

    /// Stop serving and stop every background task (open requests get 2 s to finish).
    pub async fn stop(&self) {
        self.shared.shutdown.trigger();
        let handle = self.shared.server.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = handle {
            let _ = tokio::time::timeout(Duration::from_secs(2), h.stop()).await;
        }
    }

    /// What stops and continues the master as a process is by `SIGSTOP` and
    /// `SIGCONT`: requests, watch messages, probes and its timers wait while it is
    /// frozen (see [`mock_kit::freeze`]).
    pub fn freeze(&self) -> &mock_kit::Freeze {
        &self.shared.freeze
    }

    /// Every tracked instance, sorted by name.
    pub fn instances(&self) -> Vec<InstanceView> {
        self.shared.registry.views()
    }

    pub fn instance(&self, name: &str) -> Option<InstanceView> {
        self.shared.registry.view(name)
    }

    /// Forget every instance and re-learn them from a fresh range (see the crate docs).
    pub async fn restart(&self) {
        self.restart_with(true).await
    }

    /// Forget every instance; re-learn them from a fresh range only if `relist`.
    /// Returns once the watcher has done so (or the range failed).
    pub async fn restart_with(&self, relist: bool) {
        self.shared.restart_with(relist).await
    }

    /// Rotate the token (`None` or empty: no check).
    pub fn set_token(&self, token: Option<String>) {
        self.shared.set_token(token)
    }

    pub fn faults(&self) -> &FaultRegistry<Fault> {
        &self.shared.faults
    }

    /// Drop the etcd watch and do not re-open it until [`MockMaster::resume_watch`];
    /// events meanwhile are caught up on resume, none lost.
    pub fn pause_watch(&self) {
        self.shared.pause_watch()
    }

    pub fn resume_watch(&self) {
        self.shared.resume_watch()
    }

    pub fn watch_paused(&self) -> bool {
        self.shared.watch_paused()
    }

    /// Heartbeat answers since start (or the last reset), by status.
    pub fn heartbeat_counts(&self) -> BTreeMap<u16, u64> {
        self.shared.heartbeat_counts()
    }

    /// Back to the configured behaviour: no faults, watch running, configured token,
    /// heartbeat counts zeroed. Instances are kept (that is [`MockMaster::restart`]).
    pub fn reset(&self) {
        self.shared.reset()
    }

    /// Publish LOADMETRICS now instead of waiting for the next round.
    pub async fn publish_now(&self) {
        loadmetrics::publish_once(&self.shared).await
    }

    /// What `GET /_mock/state` shows.
    pub fn state_json(&self) -> serde_json::Value {
        self.shared.state_json()
    }

    /// This replica's role ([`Role::Master`] when not in replica mode).
    pub fn role(&self) -> Role {
        self.shared.registry.role().0
    }

    /// Whether this replica publishes LOADMETRICS (always, when not in replica mode).
    pub fn is_master(&self) -> bool {
        self.role() == Role::Master
    }

    /// The master's service name as this replica sees it (the MASTER key's value; in
    /// single-master mode, its own `service_name`).
    pub fn master_seen(&self) -> Option<String> {
        match self.shared.registry.role().1 {
            Some((_, holder)) => holder,
            None => Some(self.shared.config.service_name.clone()),
        }
    }

    /// `XLLM:LOADMETRICS:` as this replica last read it from etcd, by instance name:
    /// what it routes by when it is not master.
    pub fn followed_load(&self) -> BTreeMap<String, LoadMetrics> {
        self.shared.registry.followed_load()
    }

    /// What `GET /_mock/role` shows.
    pub fn role_json(&self) -> serde_json::Value {
        self.shared.role_json()
    }
}
