//! Master actions: restart the fake master (forgetting every instance, or re-reading
//! etcd as the real one does), change its internal token, and its heartbeat faults.
//!
//! A restart excuses the master's view lagging etcd for a moment; a token change may
//! start (or end) a token mismatch, which the episode book re-checks for every sidecar.

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::{Arming, Cluster};
use crate::dur::Dur;
use crate::episode::{EpisodeBook, EpisodeKey, Scope};
use crate::topology::Topology;

/// A master action, written `{ master_<verb> = ... }` in a step's `action`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum MasterAction {
    /// Restart the master. Without `relist` it forgets every instance (heartbeats get 409
    /// until the sidecars register again); with it, it re-reads etcd as the real one does.
    #[serde(rename = "master_restart")]
    Restart {
        /// Re-read etcd on restart, as the real master does (default false: forget everything).
        #[serde(default)]
        relist: bool,
    },
    /// Change the master's token (`""` disables the check).
    #[serde(rename = "master_token")]
    Token(String),
    /// Arm a heartbeat fault on the fake master:
    /// `master_fault = { fault = { heartbeat_status = { status = 503 } }, duration = "2s" }`.
    #[serde(rename = "master_fault")]
    Fault {
        /// What the master does to heartbeats.
        fault: MasterFault,
        /// Fire at most this many times (`None`: no limit).
        #[serde(default)]
        count: Option<u64>,
        /// Disarm after this long (`None`: until `master_clear_faults`).
        #[serde(default)]
        duration: Option<Dur>,
    },
    /// Clear every master fault: `master_clear_faults = true`.
    #[serde(rename = "master_clear_faults")]
    ClearFaults(bool),
}

/// Faults of the fake master (see `mock-master`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MasterFault {
    /// Answer heartbeats with this status, without looking at them.
    HeartbeatStatus {
        /// The HTTP status answered.
        status: u16,
    },
    /// Delay each heartbeat answer.
    Latency {
        /// The delay, in ms.
        ms: u64,
    },
}

impl MasterAction {
    /// Always `None`: a master action acts on the cluster as a whole.
    pub fn instance(&self) -> Option<&str> {
        None
    }

    /// Checks that `master_clear_faults` is written `= true`; the rest need no check.
    pub fn check(&self, _topo: &Topology) -> Result<(), String> {
        match self {
            MasterAction::ClearFaults(b) => words::flag(*b, "master_clear_faults"),
            MasterAction::Restart { .. } | MasterAction::Token(_) | MasterAction::Fault { .. } => {
                Ok(())
            }
        }
    }

    /// A short label for reports: `master: {latency:{ms:500}} for 2s`, or the action's
    /// compact TOML.
    pub fn describe(&self) -> String {
        match self {
            MasterAction::Fault {
                fault, duration, ..
            } => format!(
                "master: {}{}",
                words::compact(fault),
                words::for_dur(duration)
            ),
            _ => words::plain(self),
        }
    }

    /// Restarts the master, sets its token, or arms or clears its faults.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        match self {
            MasterAction::Restart { relist } => c.master_restart(*relist).await?,
            MasterAction::Token(tok) => c.master_token(token_of(tok))?,
            MasterAction::Fault {
                fault,
                count,
                duration,
            } => {
                let arm = Arming {
                    count: *count,
                    lasting: duration.map(|d| d.0),
                };
                c.master_fault(master_fault(fault), arm)?
            }
            MasterAction::ClearFaults(_) => c.master_clear_faults()?,
        }
        Ok(None)
    }

    /// Opens or closes the episodes this action causes; a token change re-checks every
    /// sidecar's token against the master's.
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let t = book.t();
        match self {
            MasterAction::Restart { .. } => {
                book.open(EpisodeKey::MasterRestart(t), Scope::All, Some(0), |e| {
                    e.excuses_master = true
                });
            }
            MasterAction::Token(tok) => {
                book.set_master_token(tok);
                book.recheck_tokens();
            }
            MasterAction::Fault { duration, .. } => {
                let dur = duration.map(|d| d.as_ms());
                book.open(EpisodeKey::MasterFault(t), Scope::All, dur, |_| {});
            }
            MasterAction::ClearFaults(_) => {
                book.close_where(|k| matches!(k, EpisodeKey::MasterFault(_)))
            }
        }
    }
}

/// `""` switches the token check off.
fn token_of(tok: &str) -> Option<String> {
    Some(tok.to_string()).filter(|t| !t.is_empty())
}

fn master_fault(f: &MasterFault) -> mock_master::Fault {
    match f {
        MasterFault::HeartbeatStatus { status } => {
            mock_master::Fault::HeartbeatStatus { status: *status }
        }
        MasterFault::Latency { ms } => mock_master::Fault::Latency { ms: *ms },
    }
}
