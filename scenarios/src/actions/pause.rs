//! Pause and throttle actions: stop a sidecar, a vLLM or the master for a while, as a
//! GC or VM pause, `SIGSTOP` or memory pressure does (`pause`), or let it run only part
//! of each period, as a spent CPU quota does (`throttle`).
//!
//! In real mode a sidecar gets `SIGSTOP` and `SIGCONT`, a fake run in-process is frozen
//! at its edges; in virtual time the node handles nothing while stopped and everything
//! that reached it happens when it continues (see `sim::pause`).
//!
//! What a stop excuses depends on its longest stretch (the whole pause, or the stopped
//! part of a throttle's period), measured against the timers of the stopped process:
//! - a sidecar stopped for less than its lease's least remaining time (the TTL less a
//!   keepalive interval and an etcd timeout) must keep its key and its incarnation:
//!   nothing is excused. A longer stop may let the lease run out: the missing key is
//!   excused until it ends, after which the sidecar must notice its lease is gone and
//!   register a new incarnation within the scenario's grace. A stop longer than the
//!   TTL itself ends the lease for certain, and the sidecar's own clock says so: the
//!   incarnation from before it must not be heartbeated once it continues
//!   (`no_stale_heartbeat_accepted`);
//! - a vLLM stopped for a health timeout or more fails the sidecar's probes (and the
//!   master's): as a hanging `/health`, vLLM is down, and the sidecar may learn it is
//!   back up to a health timeout late;
//! - the master, stopped, lags etcd: its view is excused until it ends.

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::{Cluster, DutyCycle, Stoppable};
use crate::dur::Dur;
use crate::episode::{EpisodeBook, EpisodeKey, Scope};
use crate::topology::{target_indices, ProcessKind, Target, Topology};

/// A pause or a throttle, written
/// `pause = { process = "sidecar", instance = "i0", duration = "20s" }` or
/// `throttle = { process = "sidecar", instance = "i0", duration = "60s", run = "100ms", period = "400ms" }`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum PauseAction {
    /// Stop the process for `duration`, then continue it.
    #[serde(rename = "pause")]
    Pause {
        /// Which process: `sidecar`, `vllm` or `master`.
        process: ProcessKind,
        /// Whose (an instance name or `all`, the default; ignored for the master).
        #[serde(default = "crate::topology::all_target")]
        instance: Target,
        /// How long it stays stopped.
        duration: Dur,
    },
    /// Let the process run for `run` in every `period` (default 100 ms in 400 ms, a
    /// quarter of a CPU), for `duration`.
    #[serde(rename = "throttle")]
    Throttle {
        /// Which process: `sidecar`, `vllm` or `master`.
        process: ProcessKind,
        /// Whose (an instance name or `all`, the default; ignored for the master).
        #[serde(default = "crate::topology::all_target")]
        instance: Target,
        /// How long the throttle lasts.
        duration: Dur,
        /// Running time in each period.
        #[serde(default = "default_run")]
        run: Dur,
        /// The period.
        #[serde(default = "default_period")]
        period: Dur,
    },
}

fn default_run() -> Dur {
    Dur(std::time::Duration::from_millis(100))
}

fn default_period() -> Dur {
    Dur(std::time::Duration::from_millis(400))
}

impl PauseAction {
    fn parts(&self) -> (ProcessKind, &Target, Dur, Option<DutyCycle>) {
        match self {
            PauseAction::Pause {
                process,
                instance,
                duration,
            } => (*process, instance, *duration, None),
            PauseAction::Throttle {
                process,
                instance,
                duration,
                run,
                period,
            } => (
                *process,
                instance,
                *duration,
                Some(DutyCycle {
                    run: run.0,
                    period: period.0,
                }),
            ),
        }
    }

    /// The instance whose process it stops (`None`: the master).
    pub fn instance(&self) -> Option<&str> {
        match self.parts() {
            (ProcessKind::Master, ..) => None,
            (_, instance, ..) => Some(instance),
        }
    }

    /// Checks the instance exists and a throttle's running time is shorter than its
    /// period and not zero (else it would not throttle, or never run).
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let (process, instance, _, duty) = self.parts();
        if process != ProcessKind::Master {
            topo.check_target(instance, true)?;
        }
        match duty {
            Some(d) if d.run.is_zero() || d.run >= d.period => Err(format!(
                "a throttle runs for part of each period: `run` ({}) must be above 0 and below `period` ({})",
                Dur(d.run),
                Dur(d.period)
            )),
            _ => Ok(()),
        }
    }

    /// `pause sidecar i0 for 20s`, `throttle sidecar i0: 100ms in 400ms for 60s`.
    pub fn describe(&self) -> String {
        let (process, instance, duration, duty) = self.parts();
        let who = match process {
            ProcessKind::Master => String::new(),
            _ => format!(" {instance}"),
        };
        let process = words::compact(&process);
        match duty {
            None => format!("pause {process}{who} for {duration}"),
            Some(d) => format!(
                "throttle {process}{who}: {} in {} for {duration}",
                Dur(d.run),
                Dur(d.period)
            ),
        }
    }

    /// Stops each selected process (the cluster continues it when the time is up).
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        let (process, instance, duration, duty) = self.parts();
        let instances = target_indices(c.topology().instances, instance).into_iter();
        let nodes: Vec<Stoppable> = match process {
            ProcessKind::Master => vec![Stoppable::Master],
            ProcessKind::Sidecar => instances.map(Stoppable::Sidecar).collect(),
            ProcessKind::Vllm => instances.map(Stoppable::Vllm).collect(),
        };
        for node in nodes {
            c.pause(node, duration.0, duty)?;
        }
        Ok(None)
    }

    /// Opens the stop's episode, excusing what its longest stretch may break (see the
    /// module's summary).
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let (process, instance, duration, duty) = self.parts();
        let stretch = duty.map_or(duration.0, |d| {
            d.period.saturating_sub(d.run).min(duration.0)
        });
        let stretch_ms = u64::try_from(stretch.as_millis()).unwrap_or(u64::MAX);
        let topo = book.topology();
        let health_timeout = topo.health_timeout.as_ms();
        let lease_safe_ms = lease_safe_ms(topo);
        let ttl_ms = topo.lease_ttl.saturating_mul(1000);
        let scopes = match process {
            ProcessKind::Master => vec![Scope::All],
            _ => book.scopes(instance),
        };
        let t = book.t();
        for s in scopes {
            let key = EpisodeKey::Stopped(process, s, t);
            book.open(key, s, Some(duration.as_ms()), |e| match process {
                ProcessKind::Sidecar => {
                    e.excuses_registration = stretch_ms >= lease_safe_ms;
                    e.outlives_lease = stretch_ms > ttl_ms;
                }
                ProcessKind::Vllm => {
                    let fails_probes = stretch_ms >= health_timeout;
                    e.excuses_registration = fails_probes;
                    e.vllm_down = fails_probes;
                    e.extra_grace_ms = if fails_probes { health_timeout } else { 0 };
                }
                ProcessKind::Master => e.excuses_master = true,
            });
        }
    }
}

/// The longest a sidecar may stop without its lease running out: the TTL, less the
/// keepalive interval (the last refresh may be that old) and an etcd timeout (its
/// answer may have taken that long).
pub fn lease_safe_ms(topo: &Topology) -> u64 {
    topo.lease_ttl
        .saturating_mul(1000)
        .saturating_sub(topo.keepalive_interval.as_ms())
        .saturating_sub(topo.etcd_timeout.as_ms())
}
