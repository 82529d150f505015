//! The sidecar's decisions as a pure state machine: when to probe `/health`, register,
//! refresh the lease, re-register, scrape, heartbeat, revoke and exit.
//!
//! Why: deciding is separated from doing so the same code runs under the production
//! driver ([`crate::driver`], tokio + reqwest) and, thousands of times over, under a
//! simulator in virtual time. The core therefore does no I/O, starts no threads, never
//! reads a clock and owns its randomness:
//!
//! - **time is an argument**: `now` is a [`Duration`] since an arbitrary start (the
//!   driver uses the moment it started; a simulator uses zero). Only differences of
//!   `now` matter, plus [`CoreConfig::unix_ms_at_start`] for the wall-clock stamp in the
//!   etcd value;
//! - **inputs and outputs are values** ([`Input`], [`Answer`], [`Command`], [`Note`]):
//!   they can be logged, compared and replayed. Each command that expects an answer has a
//!   [`CommandId`]; answers to commands the core stopped waiting for are ignored;
//! - **randomness** (incarnation ids, backoff jitter) comes from a `StdRng` seeded with
//!   the seed given to [`Core::new`]: the same seed and the same inputs at the same times
//!   give the same commands, byte for byte.
//!
//! Several commands may be in flight at once: a keepalive never waits for a slow
//! `/health`, `/metrics` or master, because the core issues it on its own schedule
//! (at most [`CoreConfig::keepalive_period`] apart) whatever else is outstanding.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use sidecar::core::{Answer, Command, Core, CoreConfig, Input};
//! use sidecar::config::Config;
//!
//! let config = Config::from_flags(["--lease-ttl", "6"]).unwrap();
//! let mut core = Core::new(CoreConfig::from_config(&config, 0), 7, Duration::ZERO);
//! // First thing: probe vLLM's /health.
//! let Some(Command::ProbeHealth { id }) = core.poll_command() else { panic!() };
//! core.handle(Duration::from_millis(5), Input::Answer(id, Answer::HealthOk));
//! // Healthy: grant a lease.
//! let grant = std::iter::from_fn(|| core.poll_command())
//!     .find_map(|c| match c { Command::GrantLease { id, .. } => Some(id), _ => None })
//!     .unwrap();
//! core.handle(
//!     Duration::from_millis(9),
//!     Input::Answer(grant, Answer::LeaseGranted { lease: 42, ttl: 6 }),
//! );
//! // Then put the key with that lease.
//! let put = std::iter::from_fn(|| core.poll_command())
//!     .find(|c| matches!(c, Command::PutKey { lease: 42, .. }));
//! assert!(put.is_some());
//! // The driver sleeps until `next_wakeup`, then hands in `Input::Timer`.
//! assert!(core.next_wakeup().is_some());
//! ```
#![warn(missing_docs)]

mod beat;
mod config;
mod follow;
mod grid;
mod heartbeat;
mod io;
mod lease;
mod message;
mod state;
mod target;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::backoff::Backoff;
use crate::mapping::Mapper;

pub use config::CoreConfig;
pub use heartbeat::{has_vllm_sample, HeartbeatBody};
pub use io::{Answer, Command, CommandId, Input, LeaseLoss, Note, RevokeReason};
pub use state::{AfterRevoke, Registration};
pub use target::{master_key, FollowConfig, HeartbeatTarget, MasterName};

use follow::Follow;
use state::{Beat, Gate, Health, Pending};

/// What the core currently believes, for readiness probes and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The instance as it is in etcd, while registered.
    pub registration: Option<Current>,
    /// The last `/health` probe succeeded.
    pub healthy: bool,
    /// Deregistered on request (drain), or on the way there.
    pub draining: bool,
}

/// The registration in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The instance key.
    pub key: String,
    /// The lease that holds it.
    pub lease: i64,
    /// The incarnation its value carries.
    pub incarnation: String,
}

/// The state machine. See the module doc.
#[derive(Debug)]
pub struct Core {
    cfg: CoreConfig,
    rng: StdRng,
    last_id: u64,
    out: VecDeque<Command>,
    pending: BTreeMap<CommandId, Pending>,
    reg: Registration,
    health: Health,
    beat: Beat,
    mapper: Mapper,
    /// Failed registrations in a row.
    reg_backoff: Backoff,
    /// Failed keepalives in a row (never waits more than a keepalive period).
    keepalive_backoff: Backoff,
    /// Failed heartbeats in a row.
    beat_backoff: Backoff,
    /// Re-registrations caused by 409s in a row (a master that never sees our key, e.g.
    /// a namespace mismatch) slow down instead of churning leases every heartbeat.
    conflict_backoff: Backoff,
    /// Pages mapped so far (decides which are audited by a full parse).
    pages: u64,
    model_logged: bool,
    /// With `--follow-master`: the elected master heartbeats go to.
    follow: Option<Follow>,
}

impl Core {
    /// A core at time `now`, its randomness seeded with `seed`. It first probes `/health`.
    pub fn new(cfg: CoreConfig, seed: u64, now: Duration) -> Core {
        let ttl = cfg.lease_ttl_duration();
        let reg_base = cfg.probe_interval.min(Duration::from_secs(1));
        let hb = cfg.heartbeat_interval;
        let ka = cfg.keepalive_period;
        let mut core = Core {
            rng: StdRng::seed_from_u64(seed),
            last_id: 0,
            out: VecDeque::new(),
            pending: BTreeMap::new(),
            reg: Registration::Unregistered { retry_at: now },
            health: Health {
                gate: Gate::Starting {
                    wait: Duration::from_secs(1).min(ttl),
                },
                healthy: false,
                fails: 0,
                next: now,
                in_flight: None,
            },
            beat: Beat {
                due: now + hb,
                in_flight: None,
                after_conflict: false,
            },
            mapper: Mapper::new(cfg.mapper.clone()),
            reg_backoff: Backoff::new(reg_base, ttl.max(reg_base)),
            keepalive_backoff: Backoff::new(ka / 4, ka),
            beat_backoff: Backoff::new(hb, hb * 4),
            conflict_backoff: Backoff::new(hb, hb.max(Duration::from_secs(30))),
            pages: 0,
            model_logged: false,
            follow: cfg.follow.clone().map(|f| Follow::new(f, now)),
            cfg,
        };
        core.advance(now);
        core
    }

    /// Feed what happened at `now`; the commands it causes are then in
    /// [`Core::poll_command`]. `now` must not go backwards.
    pub fn handle(&mut self, now: Duration, input: Input) {
        if self.reg == Registration::Exited {
            return;
        }
        match input {
            Input::Timer => {}
            Input::Answer(id, answer) => self.on_answer(now, id, answer),
            Input::Shutdown => self.shutdown(now),
            Input::Drain => self.drain(now),
            Input::Undrain => self.undrain(now),
        }
        self.advance(now);
    }

    /// The next command to run, in order; `None` when there is nothing to do for now.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// When the core next needs [`Input::Timer`] (if nothing else happens first); `None`
    /// once it has exited.
    pub fn next_wakeup(&self) -> Option<Duration> {
        let mut at: Option<Duration> = None;
        let mut wake = |t: Duration| at = Some(at.map_or(t, |a| a.min(t)));
        match &self.reg {
            Registration::Exited => return None,
            Registration::Unregistered { retry_at } if self.may_register() => wake(*retry_at),
            Registration::Registered(l) => {
                wake(l.next_keepalive);
                wake(l.certain_expiry());
                if self.beat.in_flight.is_none() {
                    wake(self.beat.due);
                }
            }
            Registration::Revoking {
                then: AfterRevoke::Exit { deadline },
                ..
            } => wake(*deadline),
            _ => {}
        }
        if !self.shutting_down() {
            if self.health.in_flight.is_none() {
                wake(self.health.next);
            }
            if let Some(read) = self.follow_wakeup() {
                wake(read);
            }
        }
        at
    }

    /// What the core believes now.
    pub fn status(&self) -> Status {
        let draining = matches!(
            self.reg,
            Registration::Drained
                | Registration::Revoking {
                    then: AfterRevoke::Drain,
                    ..
                }
        );
        Status {
            registration: self.reg.registered().map(|l| Current {
                key: self.cfg.key.clone(),
                lease: l.id,
                incarnation: l.incarnation.clone(),
            }),
            healthy: self.health.healthy,
            draining,
        }
    }

    /// The registration state, for tests and simulators.
    pub fn registration(&self) -> &Registration {
        &self.reg
    }

    /// Where heartbeats go now (the configured URL unless following a master).
    pub fn heartbeat_target(&self) -> HeartbeatTarget {
        self.follow
            .as_ref()
            .map_or(HeartbeatTarget::Configured, |f| f.target().clone())
    }

    /// The settings the core was built with.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// Issue whatever has fallen due at `now`.
    fn advance(&mut self, now: Duration) {
        if self.reg == Registration::Exited {
            return;
        }
        self.check_exit_deadline(now);
        self.check_lease(now);
        self.probe_if_due(now);
        self.register_if_due(now);
        self.read_master_if_due(now);
        self.beat_if_due(now);
    }

    fn on_answer(&mut self, now: Duration, id: CommandId, answer: Answer) {
        let Some(pending) = self.pending.remove(&id) else {
            return; // not ours, or answered already
        };
        match (pending, answer) {
            (Pending::Probe, Answer::HealthOk) => self.on_health(now, id, None),
            (Pending::Probe, Answer::HealthFailed(e)) => self.on_health(now, id, Some(e)),
            (Pending::Grant, Answer::LeaseGranted { lease, ttl }) => {
                self.on_granted(now, id, lease, ttl)
            }
            (Pending::Grant, Answer::GrantFailed(e)) => self.on_grant_failed(now, id, e),
            (Pending::Put, Answer::PutDone) => self.on_put(now, id, None),
            (Pending::Put, Answer::PutFailed(e)) => self.on_put(now, id, Some(e)),
            (Pending::Keepalive { lease, sent }, a) => self.on_keepalive(now, lease, sent, a),
            (Pending::Scrape { incarnation }, a) => self.on_scrape(now, id, incarnation, a),
            (Pending::Post { incarnation }, a) => self.on_post(now, id, incarnation, a),
            (Pending::Revoke, a) => self.on_revoke(now, id, a),
            (Pending::SideRevoke { lease }, a) => self.on_side_revoke(lease, a),
            (Pending::MasterRead, a @ (Answer::MasterValue(_) | Answer::MasterReadFailed(_))) => {
                self.on_master_read(now, id, a)
            }
            (pending, _) => {
                // An answer of the wrong kind: keep waiting for the right one.
                self.pending.insert(id, pending);
            }
        }
    }

    /// A fresh id for a command that expects an answer, remembered as `pending`.
    fn issue(&mut self, pending: Pending) -> CommandId {
        self.last_id += 1;
        let id = CommandId(self.last_id);
        self.pending.insert(id, pending);
        id
    }

    fn push(&mut self, command: Command) {
        self.out.push_back(command);
    }

    fn note(&mut self, note: Note) {
        self.out.push_back(Command::Note(note));
    }

    fn shutting_down(&self) -> bool {
        matches!(
            self.reg,
            Registration::Exited
                | Registration::Revoking {
                    then: AfterRevoke::Exit { .. },
                    ..
                }
        )
    }

    /// Unregistered and allowed to register: healthy (past the start-up gate).
    fn may_register(&self) -> bool {
        self.health.healthy && self.health.gate == Gate::Running
    }

    /// `<instance-name>-<12 lowercase hex>` (just the hex for an empty name), from the
    /// core's own generator.
    fn new_incarnation(&mut self) -> String {
        let hex = format!("{:012x}", self.rng.gen::<u64>() & 0xffff_ffff_ffff);
        if self.cfg.instance_name.is_empty() {
            hex
        } else {
            format!("{}-{hex}", self.cfg.instance_name)
        }
    }

    /// Probe `/health` when due (one probe at a time; none while shutting down).
    fn probe_if_due(&mut self, now: Duration) {
        if self.health.in_flight.is_some() || self.shutting_down() || now < self.health.next {
            return;
        }
        let id = self.issue(Pending::Probe);
        self.health.in_flight = Some(id);
        if self.health.gate == Gate::Running {
            self.health.next = grid::after(self.cfg.probe_interval, now);
        }
        self.push(Command::ProbeHealth { id });
    }

    fn on_health(&mut self, now: Duration, id: CommandId, error: Option<String>) {
        if self.health.in_flight == Some(id) {
            self.health.in_flight = None;
        }
        match (error, self.health.gate) {
            (None, _) => {
                if self.health.fails > 0 && self.health.gate == Gate::Running {
                    let failed_probes = self.health.fails;
                    self.note(Note::HealthRecovered { failed_probes });
                }
                if self.health.gate != Gate::Running {
                    self.health.gate = Gate::Running;
                    self.health.next = grid::after(self.cfg.probe_interval, now);
                }
                self.health.fails = 0;
                self.health.healthy = true;
            }
            (Some(error), Gate::Starting { wait }) => {
                self.health.next = now + wait;
                let cap = self.cfg.lease_ttl_duration();
                self.health.gate = Gate::Starting {
                    wait: (wait * 2).min(cap),
                };
                self.note(Note::WaitingForHealth {
                    retry_in: wait,
                    error,
                });
            }
            (Some(error), Gate::Running) => {
                self.health.healthy = false;
                self.health.fails = self.health.fails.saturating_add(1);
                let (fails, threshold) = (self.health.fails, self.cfg.health_fail_threshold);
                self.note(Note::HealthFailed {
                    fails,
                    threshold,
                    error,
                });
                if fails >= threshold {
                    self.deregister(now, RevokeReason::Unhealthy, AfterRevoke::Register);
                }
            }
        }
    }
}
