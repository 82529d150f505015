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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum MasterAction {
    /// Restart the master. Without `relist` it forgets every instance (heartbeats get 409
    /// until the sidecars register again); with it, it re-reads etcd as the real one does.
    #[serde(rename = "master_restart")]
    Restart {
        #[serde(default)]
        relist: bool,
    },
    /// Change the master's token (`""` disables the check).
    #[serde(rename = "master_token")]
    Token(String),
    #[serde(rename = "master_fault")]
    Fault {
        fault: MasterFault,
        #[serde(default)]
        count: Option<u64>,
        #[serde(default)]
        duration: Option<Dur>,
    },
    #[serde(rename = "master_clear_faults")]
    ClearFaults(bool),
}

/// Faults of the fake master (see `mock-master`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MasterFault {
    HeartbeatStatus { status: u16 },
    Latency { ms: u64 },
}

impl MasterAction {
    pub fn instance(&self) -> Option<&str> {
        None
    }

    pub fn check(&self, _topo: &Topology) -> Result<(), String> {
        match self {
            MasterAction::ClearFaults(b) => words::flag(*b, "master_clear_faults"),
            MasterAction::Restart { .. } | MasterAction::Token(_) | MasterAction::Fault { .. } => {
                Ok(())
            }
        }
    }

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
