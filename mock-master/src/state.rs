//! What the handlers and the background tasks share, and the operations the control
//! API and [`crate::MockMaster`] both offer (restart, token, watch pause, reset, state).
//! Its own module so that handlers depend on it and the router on them, never back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mock_kit::{Events, FaultRegistry, ServerHandle, Shutdown};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use crate::auth::Token;
use crate::config::Config;
use crate::etcd::EtcdClient;
use crate::event::MasterEvent;
use crate::fault::Fault;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::watch::Command;

/// Everything the handlers and the background tasks share.
pub struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
    pub token: Token,
    pub faults: FaultRegistry<Fault>,
    pub events: Events,
    pub etcd: EtcdClient,
    pub heartbeat_counts: StatusCounts,
    pub paused: watch::Sender<bool>,
    pub commands: mpsc::Sender<Command>,
    /// Client for proxied OpenAI requests and model listings.
    pub upstream: reqwest::Client,
    /// Round-robin cursor for ties between equally loaded instances.
    pub rr: AtomicU64,
    pub shutdown: Shutdown,
    pub server: Mutex<Option<ServerHandle>>,
    /// Frozen: the process is stopped (`SIGSTOP`, a VM pause); requests and timers wait.
    pub freeze: mock_kit::Freeze,
}

pub type AppState = Arc<Shared>;

/// Heartbeat answers by status: one atomic per possible status (100..=599), so
/// counting never takes a lock on the hot path.
pub struct StatusCounts(Vec<AtomicU64>);

impl Default for StatusCounts {
    fn default() -> Self {
        StatusCounts((100..600).map(|_| AtomicU64::new(0)).collect())
    }
}

impl StatusCounts {
    pub fn add(&self, status: u16) {
        if let Some(c) = status
            .checked_sub(100)
            .and_then(|i| self.0.get(usize::from(i)))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> BTreeMap<u16, u64> {
        (100u16..)
            .zip(self.0.iter())
            .map(|(s, c)| (s, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub fn clear(&self) {
        for c in &self.0 {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl Shared {
    pub fn count_heartbeat(&self, status: u16) {
        self.metrics.heartbeat(status);
        self.heartbeat_counts.add(status);
    }

    pub fn heartbeat_counts(&self) -> BTreeMap<u16, u64> {
        self.heartbeat_counts.snapshot()
    }
}

impl Shared {
    /// Where the server listens (the configured address until it is bound).
    pub fn addr(&self) -> SocketAddr {
        self.server
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|h| h.addr))
            .unwrap_or(self.config.listen)
    }

    /// Forget every instance; re-learn them from a fresh range only if `relist`.
    /// Returns once the watcher has done so (or the range failed).
    pub async fn restart_with(&self, relist: bool) {
        // A new process: whatever stopped the old one does not stop it.
        self.freeze.set(false);
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(Command::Restart { relist, done })
            .await
            .is_ok()
        {
            let _ = wait.await;
        }
    }

    /// Rotate the token (`None` or empty: no check).
    pub fn set_token(&self, token: Option<String>) {
        let set = token.as_deref().is_some_and(|t| !t.is_empty());
        self.token.set(token);
        self.events.emit_event(&MasterEvent::Token { set });
    }

    /// Drop the etcd watch and do not re-open it until [`Shared::resume_watch`].
    pub fn pause_watch(&self) {
        self.paused.send_replace(true);
        self.events
            .emit_event(&MasterEvent::WatchPause { paused: true });
    }

    pub fn resume_watch(&self) {
        self.paused.send_replace(false);
        self.events
            .emit_event(&MasterEvent::WatchPause { paused: false });
    }

    pub fn watch_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Back to the configured behaviour: no faults, watch running, configured token,
    /// heartbeat counts zeroed. Instances are kept.
    pub fn reset(&self) {
        self.faults.clear();
        self.resume_watch();
        self.token.set(self.config.token.clone());
        self.heartbeat_counts.clear();
        self.events.emit_event(&MasterEvent::Reset);
    }

    /// What `GET /_mock/state` shows.
    pub fn state_json(&self) -> serde_json::Value {
        json!({
            "addr": self.addr().to_string(),
            "namespace": self.config.etcd_namespace,
            "token_set": self.token.is_set(),
            "watch_paused": self.watch_paused(),
            "heartbeat_counts": self.heartbeat_counts(),
            "instances": self.registry.views(),
            "faults": self.faults.list(),
            "role": self.role_json(),
            "followed_load": self.registry.followed_load(),
        })
    }

    /// What `GET /_mock/role` shows: this replica's service name, its role, the
    /// master's service name as it sees it, and whether it is in replica mode.
    pub fn role_json(&self) -> serde_json::Value {
        let (role, seen) = self.registry.role();
        let elect = seen.is_some();
        let (service_name, master) = seen.unwrap_or_else(|| {
            let me = self.config.service_name.clone();
            (me.clone(), Some(me))
        });
        json!({
            "service_name": service_name,
            "role": role.as_str(),
            "master": master,
            "elect": elect,
        })
    }
}
