//! vLLM actions: the fake vLLM's health, its faults (scrape and completion), a crash
//! and a restart on the same port, a counter reset (a restart the sidecar only sees
//! in its counters), and sleep mode (`vllm_sleep` / `vllm_wake`: /health still 200,
//! requests queue, the sleep-state gauge says so).
//!
//! In real mode they go through the fake's control API, in virtual time to its core:
//! the same fault values either way ([`vllm_fault`]). An unhealthy or crashed vLLM
//! excuses the missing key until it is up again; a metrics fault is a fault in the
//! reports, a completion fault is not (it disturbs load, not registration).

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::Cluster;
use crate::dur::Dur;
use crate::episode::{EpisodeBook, EpisodeKey, Scope};
use crate::topology::{target_indices, Target, Topology};

/// What a step does to a fake vLLM (one instance, or `all`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum VllmAction {
    /// `vllm_health`: `/health` up, down (503) or hanging.
    #[serde(rename = "vllm_health")]
    Health {
        /// Whose vLLM.
        instance: Target,
        /// How its `/health` answers.
        health: Health,
    },
    /// `vllm_fault`: arm a fault, for `count` uses and/or `duration`.
    #[serde(rename = "vllm_fault")]
    Fault {
        /// Whose vLLM.
        instance: Target,
        /// The fault.
        fault: VllmFault,
        /// It fires this many times at most.
        #[serde(default)]
        count: Option<u64>,
        /// It is armed this long at most.
        #[serde(default)]
        duration: Option<Dur>,
    },
    /// `vllm_clear_faults`: disarm every fault.
    #[serde(rename = "vllm_clear_faults")]
    ClearFaults(Target),
    /// `vllm_crash`: the server stops answering (its port closed).
    #[serde(rename = "vllm_crash")]
    Crash(Target),
    /// `vllm_restart`: a crashed server serves again on its port.
    #[serde(rename = "vllm_restart")]
    Restart(Target),
    /// `vllm_counter_reset`: its counters start from 0, as after a restart.
    #[serde(rename = "vllm_counter_reset")]
    CounterReset(Target),
    /// `vllm_sleep`: `level` 0 pauses scheduling, 1 offloads the weights, 2 discards
    /// everything.
    #[serde(rename = "vllm_sleep")]
    Sleep {
        /// Whose vLLM.
        instance: Target,
        /// The sleep level (0 to 2).
        #[serde(default = "default_sleep_level")]
        level: u8,
    },
    /// `vllm_wake`: `POST /wake_up`.
    #[serde(rename = "vllm_wake")]
    Wake(Target),
}

fn default_sleep_level() -> u8 {
    1
}

/// How a fake vLLM's `/health` answers: `up` (200), `down` (503) or `hang` (no answer
/// until the prober gives up); the fake's own value, in both modes.
pub use mock_vllm::Health;

/// Faults of the fake vLLM (see `mock-vllm`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum VllmFault {
    /// `/metrics` answers this status.
    MetricsStatus {
        /// The HTTP status.
        status: u16,
    },
    /// `/metrics` never answers.
    MetricsHang,
    /// `/metrics` trickles its page.
    MetricsSlow {
        /// The rate it is sent at.
        bytes_per_sec: u64,
    },
    /// `/metrics` ends its page early.
    MetricsTruncate {
        /// Where the page is cut.
        at_bytes: usize,
    },
    /// `/metrics` mixes lines that are no exposition format into its page.
    MetricsGarbage {
        /// How many such lines.
        lines: u32,
    },
    /// `/metrics` reports NaN and infinities.
    MetricsNonfinite,
    /// `/metrics` sends a page this large.
    MetricsHuge {
        /// The page's size.
        bytes: usize,
    },
    /// `/metrics` serves the same page again and again.
    MetricsStale,
    /// A share of completions fail with this status.
    CompletionFail {
        /// The share failed (0 to 1).
        fraction: f64,
        /// Their status.
        status: u16,
    },
    /// Completions never answer.
    CompletionHang,
    /// Completion streams stop after some tokens.
    CompletionDrop {
        /// Tokens sent before the stream stops.
        after_tokens: u32,
    },
}

impl VllmAction {
    /// The instance it acts on (a name or `all`).
    pub fn instance(&self) -> Option<&str> {
        match self {
            VllmAction::Health { instance, .. }
            | VllmAction::Fault { instance, .. }
            | VllmAction::ClearFaults(instance)
            | VllmAction::Crash(instance)
            | VllmAction::Restart(instance)
            | VllmAction::CounterReset(instance)
            | VllmAction::Sleep { instance, .. }
            | VllmAction::Wake(instance) => Some(instance),
        }
    }

    /// What the file cannot say by its syntax: the instance exists, the level is 0 to 2.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        if let VllmAction::Sleep { level, .. } = self {
            if *level > 2 {
                return Err(format!("vllm_sleep: level {level} is not 0, 1 or 2"));
            }
        }
        topo.check_target(self.instance().unwrap_or_default(), true)
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self {
            VllmAction::Health { instance, health } => {
                format!("vllm {instance}: health {}", words::compact(health))
            }
            VllmAction::Fault {
                instance,
                fault,
                duration,
                ..
            } => words::fault(&format!("vllm {instance}"), fault, duration),
            _ => words::plain(self),
        }
    }

    /// Do it on every targeted instance's vLLM.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        let instance = self.instance().unwrap_or_default();
        for i in target_indices(c.topology().instances, instance) {
            match self {
                VllmAction::Health { health, .. } => c.vllm_health(i, *health)?,
                VllmAction::Fault {
                    fault,
                    count,
                    duration,
                    ..
                } => c.vllm_fault(i, vllm_fault(fault), super::arming(count, duration))?,
                VllmAction::ClearFaults(_) => c.vllm_clear_faults(i)?,
                VllmAction::Crash(_) => c.vllm_crash(i).await?,
                VllmAction::Restart(_) => c.vllm_restart(i).await?,
                VllmAction::CounterReset(_) => c.vllm_counter_reset(i)?,
                VllmAction::Sleep { level, .. } => c.vllm_sleep(i, *level)?,
                VllmAction::Wake(_) => c.vllm_wake(i)?,
            }
        }
        Ok(None)
    }

    /// Open or close the episodes it causes (a vLLM down, crashed or asleep excuses the
    /// missing key).
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let t = book.t();
        let instance = self.instance().unwrap_or_default();
        for s in book.scopes(instance) {
            match self {
                VllmAction::Health { health, .. } => {
                    if *health == Health::Up {
                        book.close_scope(s, EpisodeKey::VllmHealth);
                    } else {
                        // A probe sent into a hang is answered by its timeout only, so
                        // the sidecar may see vLLM back up to `--health-timeout` late.
                        let late = match health {
                            Health::Hang => book.topology().health_timeout.as_ms(),
                            _ => 0,
                        };
                        book.open(EpisodeKey::VllmHealth(s), s, None, |e| {
                            e.excuses_registration = true;
                            e.vllm_down = true;
                            e.extra_grace_ms = late;
                        });
                    }
                }
                VllmAction::Crash(_) => {
                    book.open(EpisodeKey::VllmCrash(s), s, None, |e| {
                        e.excuses_registration = true;
                        e.vllm_down = true;
                    });
                }
                VllmAction::Restart(_) => book.close_scope(s, EpisodeKey::VllmCrash),
                VllmAction::Fault {
                    fault, duration, ..
                } => {
                    let metrics = !matches!(
                        fault,
                        VllmFault::CompletionFail { .. }
                            | VllmFault::CompletionHang
                            | VllmFault::CompletionDrop { .. }
                    );
                    let dur = duration.map(|d| d.as_ms());
                    book.open(EpisodeKey::VllmFault(s, t), s, dur, |e| {
                        e.is_fault = metrics;
                    });
                }
                VllmAction::ClearFaults(_) => {
                    let all = s == Scope::All;
                    book.close_where(
                        |k| matches!(k, EpisodeKey::VllmFault(of, _) if all || *of == s),
                    );
                }
                VllmAction::CounterReset(_) => {
                    book.open(EpisodeKey::CounterReset(t), s, Some(0), |_| {});
                }
                // Healthy but serving nothing: a sidecar may deregister it (as a drain
                // does) until it wakes, so a missing key is excused meanwhile.
                VllmAction::Sleep { .. } => {
                    book.open(EpisodeKey::VllmSleep(s), s, None, |e| {
                        e.excuses_registration = true;
                    });
                }
                VllmAction::Wake(_) => book.close_scope(s, EpisodeKey::VllmSleep),
            }
        }
    }
}

/// A scenario's vLLM fault as the fake's own fault value (both modes).
pub fn vllm_fault(f: &VllmFault) -> mock_vllm::Fault {
    use mock_vllm::Fault as F;
    match *f {
        VllmFault::MetricsStatus { status } => F::MetricsStatus { status },
        VllmFault::MetricsHang => F::MetricsHang,
        VllmFault::MetricsSlow { bytes_per_sec } => F::MetricsSlow { bytes_per_sec },
        VllmFault::MetricsTruncate { at_bytes } => F::MetricsTruncate {
            at_bytes,
            abort: false,
        },
        VllmFault::MetricsGarbage { lines } => F::MetricsGarbage {
            lines: lines as usize,
        },
        VllmFault::MetricsNonfinite => F::MetricsNonfinite,
        VllmFault::MetricsHuge { bytes } => F::MetricsHuge { bytes },
        VllmFault::MetricsStale => F::MetricsStale,
        VllmFault::CompletionFail { fraction, status } => F::CompletionFail { fraction, status },
        VllmFault::CompletionHang => F::CompletionHang,
        VllmFault::CompletionDrop { after_tokens } => F::CompletionDrop { after_tokens },
    }
}
