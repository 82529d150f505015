//! The state every HTTP handler shares: the core behind one lock, faults, the request
//! log, the stream switches, the clock.
//!
//! Why a module of its own: this is the shell's side of the state; the rules are all in
//! [`EtcdCore`], which never reads a clock: the shell gives it [`Shared::now`].

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mock_kit::{Events, FaultRegistry, Shutdown};

use crate::codec::Header;
use crate::config::Config;
use crate::core::EtcdCore;
use crate::faults::Fault;
use crate::journal::Journal;
use crate::locking::lock;

/// Everything the handlers share.
pub struct Shared {
    pub config: Config,
    pub core: Mutex<EtcdCore>,
    pub journal: Journal,
    pub faults: FaultRegistry<Fault>,
    pub events: Events,
    pub shutdown: Shutdown,
    /// Fires to end every open stream (close_watches, lose_data); replaced after use.
    pub streams: Mutex<Shutdown>,
    /// Bumped to release hung requests.
    pub release: tokio::sync::watch::Sender<u64>,
    /// `http://ADDR` once bound: the member's client URL.
    pub client_url: std::sync::OnceLock<String>,
    /// The shell's clock: the cores are given the time since this instant.
    pub started: Instant,
    /// Bytes queued on every watch stream's backlog (see [`crate::outbox`]).
    pub watch_queued: Arc<AtomicUsize>,
}

impl Shared {
    pub fn header(&self, revision: i64) -> Header {
        Header {
            cluster_id: self.config.cluster_id,
            member_id: self.config.member_id,
            revision,
            raft_term: self.config.raft_term,
        }
    }

    /// The time to give the cores: since the fake started.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// The core, behind the one lock every call takes.
    pub fn core(&self) -> MutexGuard<'_, EtcdCore> {
        lock(&self.core)
    }

    pub fn stream_stop(&self) -> Shutdown {
        lock(&self.streams).clone()
    }

    pub fn close_streams(&self) {
        let mut g = lock(&self.streams);
        g.trigger();
        *g = self.shutdown.child();
    }
}
