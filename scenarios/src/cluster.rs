//! The cluster a scenario acts on and observes, whichever mode it runs in: the verbs
//! every action family and the one play loop ([`crate::engine`]) are written against.
//!
//! Two clusters implement it: [`crate::real_cluster::RealCluster`] (processes, TCP fault
//! proxies, the wall clock) and [`crate::sim_cluster::SimCluster`] (the `sim` crate's
//! world in virtual time). What differs between the modes lives behind these verbs;
//! everything above them (parsing, checking, episodes, verdicts, reports) exists once.
//!
//! Instances are named by index (topology order). Faults are the fakes' own values
//! (`mock_vllm::Fault`, `mock_etcd::Fault`, `mock_master::Fault`), which both modes hand
//! to the same fake core.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::observe::Sample;
use crate::proxy::LinkFault;
use crate::timeline::Timeline;
use crate::topology::{LinkKind, Topology};

/// A signal to a sidecar process (in virtual time: the input the driver makes of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: revoke the lease and exit.
    Term,
    /// SIGKILL.
    Kill,
    /// SIGUSR1: revoke the lease and stay deregistered.
    Drain,
    /// SIGUSR2: register again after a drain.
    Undrain,
}

/// How long a fault stays armed: by use count, by time, or both (`None`: until cleared).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arming {
    /// Fire at most this many times (`None`: no limit).
    pub count: Option<u64>,
    /// Disarm after this long (`None`: no time limit).
    pub lasting: Option<Duration>,
}

/// Which links a link fault applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSel {
    /// Which link of each instance (or the master's etcd link).
    pub link: LinkKind,
    /// The instances whose link it is (ignored for the master's etcd link).
    pub instances: Vec<usize>,
    /// Only this etcd endpoint (etcd links); `None`: every endpoint.
    pub endpoint: Option<usize>,
}

/// A process a pause or a throttle stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stoppable {
    /// Instance `i`'s sidecar.
    Sidecar(usize),
    /// Instance `i`'s vLLM.
    Vllm(usize),
    /// The master.
    Master,
}

/// How a throttled process runs: for `run` in every `period`, stopped for the rest (a
/// CPU quota spent early in each period).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DutyCycle {
    /// Running time in each period.
    pub run: Duration,
    /// The period.
    pub period: Duration,
}

/// Load offered for a time: to one instance's vLLM, or routed by the master.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadSpec {
    /// `None`: through the master's routing.
    pub instance: Option<usize>,
    /// Requests per second offered.
    pub rps: f64,
    /// How long the load runs.
    pub duration: Duration,
    /// Each request's `max_tokens`.
    pub max_tokens: u32,
}

/// A scenario's cluster. Every verb answers an error a person can read when it cannot
/// be done (the step's `action` verdict fails with it); none panics.
///
/// The async verbs are awaited by the one play loop on the concrete cluster, so a real
/// cluster's futures stay `Send` where its runner spawns them; nothing holds the trait
/// as an object, which is why plain `async fn` is used.
#[allow(async_fn_in_trait)]
pub trait Cluster {
    /// The topology the cluster was started from.
    fn topology(&self) -> &Topology;
    /// The run's merged event timeline, which every part of the cluster writes to.
    fn timeline(&self) -> &Arc<Timeline>;
    /// Milliseconds since the run's start (wall or virtual).
    fn now_ms(&self) -> u64;
    /// Let the cluster run until `ms` (real mode: wait; virtual time: run the world).
    async fn advance_to(&mut self, ms: u64);
    /// One observation of the whole cluster, read from etcd, the master and the
    /// processes directly (never through a faulted link).
    async fn observe(&mut self) -> Sample;
    /// Run until `ms` at the most, stopping at the first event that changes what
    /// [`Cluster::observe`] shows, and answer the observation then (`None`: nothing
    /// changed by `ms`, or the mode cannot tell: real mode only samples).
    async fn next_change(&mut self, _ms: u64) -> Option<Sample> {
        None
    }
    /// The observation now if an action just changed it (`None`: it did not, or the
    /// mode cannot tell).
    async fn change_now(&mut self) -> Option<Sample> {
        None
    }
    /// The instance index of each request the master routed, oldest first.
    fn routed(&self) -> Cow<'_, [usize]>;
    /// Each instance's registered address (the name the master knows it by).
    fn addrs(&self) -> Vec<String>;
    /// The sidecar phase of each of `instances` (`registered`, `re_registering`, …),
    /// where the mode can tell (virtual time); empty otherwise.
    fn sidecar_phases(&self, _instances: &[usize]) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// Instance `i`'s sidecar's last output lines (what it said before it exited).
    fn sidecar_output(&self, _i: usize) -> Vec<String> {
        Vec::new()
    }
    /// Called once after each action: virtual time takes up what the change caused at
    /// the same instant (watch events, new timers).
    fn settle(&mut self) {}

    /// Start instance `i`'s sidecar (with another token, if given).
    fn sidecar_start(&mut self, i: usize, token: Option<String>) -> Result<(), String>;
    /// Send `signal` to instance `i`'s sidecar.
    fn sidecar_signal(&mut self, i: usize, signal: Signal) -> Result<(), String>;

    /// Set what instance `i`'s vLLM health endpoint answers (up, down, hang).
    fn vllm_health(&mut self, i: usize, health: mock_vllm::Health) -> Result<(), String>;
    /// Arm a fault on instance `i`'s vLLM.
    fn vllm_fault(&mut self, i: usize, f: mock_vllm::Fault, arm: Arming) -> Result<(), String>;
    /// Clear every fault of instance `i`'s vLLM.
    fn vllm_clear_faults(&mut self, i: usize) -> Result<(), String>;
    /// Crash instance `i`'s vLLM: it stops listening and resets every open connection.
    async fn vllm_crash(&mut self, i: usize) -> Result<(), String>;
    /// Start instance `i`'s vLLM again on its address, with fresh state.
    async fn vllm_restart(&mut self, i: usize) -> Result<(), String>;
    /// Reset instance `i`'s vLLM counters and histograms to 0, as a vLLM restart seen by a scraper.
    fn vllm_counter_reset(&mut self, i: usize) -> Result<(), String>;
    /// vLLM's `POST /sleep?level=N`: no request starts until [`Cluster::vllm_wake`].
    fn vllm_sleep(&mut self, i: usize, level: u8) -> Result<(), String>;
    /// vLLM's `POST /wake_up`.
    fn vllm_wake(&mut self, i: usize) -> Result<(), String>;

    /// Arm a fault on the fake etcd's gateway.
    fn etcd_fault(&mut self, f: mock_etcd::Fault, arm: Arming) -> Result<(), String>;
    /// Clear every etcd fault; a request a hang holds is let go.
    fn etcd_clear_faults(&mut self) -> Result<(), String>;
    /// Let every request a `hang` holds proceed; the faults stay armed.
    fn etcd_release_hung(&mut self) -> Result<(), String>;
    /// Expire the lease behind instance `i`'s key; answers the lease's id.
    fn etcd_expire_lease(&mut self, i: usize) -> Result<i64, String>;
    /// Expire every lease at once.
    fn etcd_expire_all_leases(&mut self) -> Result<(), String>;
    /// Lose every key, lease and token, as an etcd restarted without its data dir
    /// (`reset_revision`: start again at revision 1).
    fn etcd_lose_data(&mut self, reset_revision: bool) -> Result<(), String>;
    /// Kill (`up` false) or start again (`up` true) a member of a real etcd cluster:
    /// `leader` or an index. Answers the member's index.
    async fn etcd_member(&mut self, which: &str, up: bool) -> Result<usize, String>;

    /// Restart master replica `k`: forget every instance, and re-read etcd if `relist`;
    /// a killed replica starts again (registers, runs for master).
    async fn master_restart(&mut self, k: usize, relist: bool) -> Result<(), String>;
    /// Kill master replica `k`: its process dies without a word (its leases run out).
    async fn master_kill(&mut self, k: usize) -> Result<(), String>;
    /// The replica that holds itself master now (`None`: none does; a single master
    /// that elects nothing is replica 0).
    fn elected_master(&self) -> Option<usize>;
    /// The master's internal token (`None`: no check).
    fn master_token(&mut self, token: Option<String>) -> Result<(), String>;
    /// Arm a heartbeat fault on the master.
    fn master_fault(&mut self, f: mock_master::Fault, arm: Arming) -> Result<(), String>;
    /// Clear every master fault.
    fn master_clear_faults(&mut self) -> Result<(), String>;

    /// Set `fault` on the selected links; after `heal_after` the links heal, unless
    /// something else replaced the fault meanwhile.
    async fn link_fault(
        &mut self,
        sel: &LinkSel,
        fault: &LinkFault,
        heal_after: Option<Duration>,
    ) -> Result<(), String>;

    /// Stop `node` for `lasting` as `SIGSTOP` … `SIGCONT` does (`duty`: throttled
    /// instead, running part of each period): it handles nothing while stopped, and
    /// what reached it meanwhile is handled when it continues. A process that is not
    /// running is left alone.
    fn pause(
        &mut self,
        node: Stoppable,
        lasting: Duration,
        duty: Option<DutyCycle>,
    ) -> Result<(), String>;

    /// Start offering `load`; it ends after its duration or at `load_off`.
    fn load_start(&mut self, load: LoadSpec) -> Result<(), String>;
    /// End every load now (requests already sent run their course).
    fn load_off(&mut self);
}
