//! Master actions: restart the fake master (forgetting every instance, or re-reading
//! etcd as the real one does), change its internal token, and its heartbeat faults.
//!
//! A restart excuses the master's view lagging etcd for a moment; a token change may
//! start (or end) a token mismatch, which the episode book re-checks for every sidecar.

use serde::{Deserialize, Serialize};

use super::{words, Armed};
use crate::cluster::Cluster;
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
        /// Which replica (default 0); a killed one starts again, registers and runs
        /// for master.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<Replica>,
    },
    /// Kill one master replica (its process dies without a word; its leases run out):
    /// `master_kill = "elected"` or `master_kill = 1`.
    #[serde(rename = "master_kill")]
    Kill(Replica),
    /// Change the master's token (`""` disables the check).
    #[serde(rename = "master_token")]
    Token(String),
    /// Arm a heartbeat fault on the fake master:
    /// `master_fault = { fault = { heartbeat_status = { status = 503 } }, duration = "2s" }`.
    #[serde(rename = "master_fault")]
    Fault(Armed<MasterFault>),
    /// Clear every master fault: `master_clear_faults = true`.
    #[serde(rename = "master_clear_faults")]
    ClearFaults(bool),
}

/// A master replica: by index, or the one elected when the action runs.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Replica {
    /// Replica `k` (0 is the one sidecars are configured with).
    Index(usize),
    /// The replica that holds itself master when the action runs.
    Elected(ElectedWord),
}

/// The word `elected`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ElectedWord {
    /// `"elected"`.
    Elected,
}

impl Replica {
    /// The replica index now (`None`: `elected` while no replica is master).
    fn resolve(&self, c: &impl Cluster) -> Option<usize> {
        match self {
            Replica::Index(k) => Some(*k),
            Replica::Elected(_) => c.elected_master(),
        }
    }
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
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let replicas = topo.master.replicas;
        let exists = |r: &Option<Replica>| match r {
            Some(Replica::Index(k)) if *k >= replicas => Err(format!(
                "master replica {k} does not exist (topology has {replicas})"
            )),
            _ => Ok(()),
        };
        match self {
            MasterAction::ClearFaults(b) => words::flag(*b, "master_clear_faults"),
            MasterAction::Kill(_) if replicas < 2 => {
                Err("`master_kill` needs `topology.master.replicas` of 2 or more".into())
            }
            MasterAction::Kill(r) => exists(&Some(r.clone())),
            MasterAction::Restart { replica, .. } => exists(replica),
            MasterAction::Token(_) | MasterAction::Fault(_) => Ok(()),
        }
    }

    /// A short label for reports: `master: {latency:{ms:500}} for 2s`, or the action's
    /// compact TOML.
    pub fn describe(&self) -> String {
        match self {
            MasterAction::Fault(f) => words::fault("master", &f.fault, &f.duration),
            _ => words::plain(self),
        }
    }

    /// Restarts the master, sets its token, or arms or clears its faults.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        match self {
            MasterAction::Restart { relist, replica } => {
                let k = match replica {
                    None => 0,
                    Some(r) => r.resolve(c).ok_or("no master replica is elected")?,
                };
                c.master_restart(k, *relist).await?;
                if replica.is_some() {
                    return Ok(Some(format!("replica {k}")));
                }
            }
            MasterAction::Kill(r) => {
                let k = r.resolve(c).ok_or("no master replica is elected")?;
                c.master_kill(k).await?;
                return Ok(Some(format!("replica {k}")));
            }
            MasterAction::Token(tok) => {
                c.master_token(Some(tok.clone()).filter(|t| !t.is_empty()))?
            }
            MasterAction::Fault(f) => {
                c.master_fault(master_fault(&f.fault), super::arming(&f.count, &f.duration))?
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
            MasterAction::Kill(_) => {
                // Another replica may have to be elected and found by the sidecars.
                let follow = follow_window_ms(book.topology());
                book.open(EpisodeKey::MasterKill(t), Scope::All, Some(follow), |e| {
                    e.excuses_master = true
                });
            }
            MasterAction::Token(tok) => {
                book.set_master_token(tok);
                book.recheck_tokens();
            }
            MasterAction::Fault(f) => {
                let dur = f.duration.map(|d| d.as_ms());
                book.open(EpisodeKey::MasterFault(t), Scope::All, dur, |_| {});
            }
            MasterAction::ClearFaults(_) => {
                book.close_where(|k| matches!(k, EpisodeKey::MasterFault(_)))
            }
        }
    }
}

/// How long after a master dies its sidecars may still miss the master: its keys'
/// leases run out (the election TTL), a standby wins the election, and each sidecar's
/// next heartbeat fails over to it (a heartbeat interval, plus a second for the read of
/// the MASTER key and the round trips).
pub fn follow_window_ms(topo: &Topology) -> u64 {
    topo.master.election_ttl.as_ms() + topo.heartbeat_interval.as_ms() + 1000
}

fn master_fault(f: &MasterFault) -> mock_master::Fault {
    use mock_master::Fault as F;
    match *f {
        MasterFault::HeartbeatStatus { status } => F::HeartbeatStatus { status },
        MasterFault::Latency { ms } => F::Latency { ms },
    }
}
