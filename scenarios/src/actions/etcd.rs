//! Etcd actions: the fake etcd's gateway faults, releasing hung requests, expiring a
//! lease, losing its data; killing and restarting a member of a real 3-member cluster.
//!
//! Most need the fake etcd (its fault API), which the check says before anything runs;
//! the member actions need a real cluster, which the simulation does not run. An etcd
//! fault excuses missing keys everywhere until it ends; an expired lease or lost data
//! excuses the one re-registration that follows; a killed member is a fault until it
//! restarts, with its election a short excused gap.

use serde::{Deserialize, Serialize};

use super::{words, Armed};
use crate::cluster::Cluster;
use crate::episode::{EpisodeBook, EpisodeKey, Scope};
use crate::topology::{target_indices, EtcdNeed, Target, Topology};

/// An etcd action, written `{ etcd_<verb> = ... }` in a step's `action`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum EtcdAction {
    /// Arm a fault on the fake etcd's gateway:
    /// `etcd_fault = { fault = { hang = { path = "*" } }, duration = "4s" }`.
    #[serde(rename = "etcd_fault")]
    Fault(Armed<EtcdFault>),
    /// Clear every fake etcd fault and let hung requests go: `etcd_clear_faults = true`.
    #[serde(rename = "etcd_clear_faults")]
    ClearFaults(bool),
    /// Let every request a `hang` holds proceed, the faults staying armed:
    /// `etcd_release_hung = true`.
    #[serde(rename = "etcd_release_hung")]
    ReleaseHung(bool),
    /// Expire the lease behind this instance's key (or every lease with `all`).
    #[serde(rename = "etcd_expire_lease")]
    ExpireLease(Target),
    /// Lose every key, lease and token, as an etcd restarted without its data dir:
    /// `etcd_lose_data = { reset_revision = true }`.
    #[serde(rename = "etcd_lose_data")]
    LoseData {
        /// Start again at revision 1, so new writes reuse revisions the master has seen.
        #[serde(default)]
        reset_revision: bool,
    },
    /// Kill a real etcd member: `leader` or its index.
    #[serde(rename = "etcd_kill")]
    Kill(String),
    /// Start a killed real etcd member again.
    #[serde(rename = "etcd_restart")]
    Restart(String),
}

/// Faults of the fake etcd gateway (see `mock-etcd`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum EtcdFault {
    /// Answer an etcd-shaped error instead of serving.
    Fail {
        /// The gateway path pattern (`*` or a prefix ending in `*`).
        path: String,
        /// The HTTP status answered (default 503).
        #[serde(default = "default_fail_status")]
        status: u16,
        /// The gRPC code in the error body (default 14, unavailable).
        #[serde(default)]
        grpc_code: Option<u32>,
        /// The error message (default `etcdserver: request timed out`).
        #[serde(default)]
        message: Option<String>,
    },
    /// Serve, after a delay.
    Latency {
        /// The gateway path pattern (`*` or a prefix ending in `*`).
        path: String,
        /// The delay before serving, in ms.
        ms: u64,
    },
    /// Hold the request until released (`etcd_release_hung`, `etcd_clear_faults`) or the
    /// fake stops.
    Hang {
        /// The gateway path pattern (`*` or a prefix ending in `*`).
        path: String,
    },
}

fn default_fail_status() -> u16 {
    503
}

impl EtcdAction {
    /// The instance the action acts on (a name or `all`); `None`: etcd as a whole.
    pub fn instance(&self) -> Option<&str> {
        match self {
            EtcdAction::ExpireLease(t) => Some(t),
            _ => None,
        }
    }

    /// Checks what the syntax cannot: the fake etcd for its faults, three real members for kill
    /// and restart, a known instance or member.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let key = words::key(self);
        match self {
            EtcdAction::ClearFaults(b) | EtcdAction::ReleaseHung(b) => {
                words::flag(*b, &key).and(topo.needs_fake_etcd(&key))
            }
            EtcdAction::ExpireLease(t) => {
                topo.check_target(t, true).and(topo.needs_fake_etcd(&key))
            }
            EtcdAction::Fault(_) | EtcdAction::LoseData { .. } => topo.needs_fake_etcd(&key),
            EtcdAction::Kill(m) | EtcdAction::Restart(m) => {
                if topo.etcd != EtcdNeed::Cluster3 {
                    return Err("etcd_kill / etcd_restart need topology.etcd = \"cluster3\"".into());
                }
                if m == "leader" || m.parse::<usize>().is_ok_and(|i| i < 3) {
                    Ok(())
                } else {
                    Err(format!(
                        "etcd member `{m}`: use \"leader\", \"0\", \"1\" or \"2\""
                    ))
                }
            }
        }
    }

    /// A short label for reports: `etcd: {hang:{path:*}} for 4s`, or the action's compact TOML.
    pub fn describe(&self) -> String {
        match self {
            EtcdAction::Fault(f) => words::fault("etcd", &f.fault, &f.duration),
            _ => words::plain(self),
        }
    }

    /// Answers the member actually killed or restarted, or the leases expired.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        match self {
            EtcdAction::Fault(f) => {
                c.etcd_fault(etcd_fault(&f.fault), super::arming(&f.count, &f.duration))?
            }
            EtcdAction::ClearFaults(_) => c.etcd_clear_faults()?,
            EtcdAction::ReleaseHung(_) => c.etcd_release_hung()?,
            EtcdAction::ExpireLease(t) if t == "all" => c.etcd_expire_all_leases()?,
            EtcdAction::ExpireLease(t) => {
                let expired = target_indices(c.topology().instances, t)
                    .into_iter()
                    .map(|i| c.etcd_expire_lease(i))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(Some(format!("expired {expired:?}")));
            }
            EtcdAction::LoseData { reset_revision } => c.etcd_lose_data(*reset_revision)?,
            EtcdAction::Kill(which) | EtcdAction::Restart(which) => {
                let up = matches!(self, EtcdAction::Restart(_));
                let i = c.etcd_member(which, up).await?;
                return Ok(Some(i.to_string()));
            }
        }
        Ok(None)
    }

    /// Why the simulation cannot do this action: killing or restarting a member needs real
    /// etcd processes.
    pub fn sim_unsupported(&self) -> Option<String> {
        matches!(self, EtcdAction::Kill(_) | EtcdAction::Restart(_))
            .then(|| "etcd_kill / etcd_restart need real etcd members (processes)".to_string())
    }

    /// Opens or closes the fault episodes this action causes (see the module's summary).
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let t = book.t();
        match self {
            EtcdAction::Fault(f) => {
                let dur = f.duration.map(|d| d.as_ms());
                let recovery = book.etcd_recovery_ms();
                // A fault on the master's listing or watch blinds it: its view may lag.
                let fault = etcd_fault(&f.fault);
                let on_master = ["/v3/watch", "/v3/kv/range"]
                    .iter()
                    .any(|p| fault.matches(p));
                book.open(EpisodeKey::EtcdFault(t), Scope::All, dur, |e| {
                    e.excuses_registration = true;
                    e.extra_grace_ms = recovery;
                    e.excuses_master = on_master;
                });
            }
            EtcdAction::ClearFaults(_) | EtcdAction::ReleaseHung(_) => {
                book.close_where(|k| matches!(k, EpisodeKey::EtcdFault(_)))
            }
            EtcdAction::ExpireLease(target) => {
                for s in book.scopes(target) {
                    book.open(EpisodeKey::Expire(t), s, Some(0), |e| {
                        e.excuses_registration = true
                    });
                }
            }
            EtcdAction::LoseData { reset_revision } => {
                book.open(EpisodeKey::LoseData(t), Scope::All, Some(0), |e| {
                    e.excuses_registration = true
                });
                // A re-registration can land on a revision the lost data reused, which
                // the master's resumed watch skips; the sidecar's next heartbeat then
                // draws a 409 and a new registration.
                // Any fault that keeps that heartbeat from drawing its 409 (a token
                // change, a master fault, a stopped sidecar, a cut link) keeps the
                // master behind until a heartbeat after it: with reused revisions, only
                // the sidecar can tell the master.
                let topo = book.topology();
                let beat = topo.heartbeat_interval.as_ms();
                let reused = *reset_revision;
                // That heartbeat is the new incarnation's first: the sidecar notices the
                // loss at its next keepalive, registers, and waits at least half an
                // interval, then for its slot on the heartbeat grid (so a fault that
                // begins after one interval can still keep it from the master).
                let keepalive = topo
                    .keepalive_interval
                    .as_ms()
                    .min(topo.lease_ttl.saturating_mul(1000) / 3);
                let lag = if reused {
                    keepalive + beat * 3 / 2
                } else {
                    beat
                };
                book.open(EpisodeKey::LoseDataMaster(t), Scope::All, Some(lag), |e| {
                    e.excuses_master = true;
                    e.is_fault = false;
                    e.outlasts_faults_ms = if reused { beat } else { 0 };
                });
            }
            EtcdAction::Kill(_) => {
                let member = book.detail().unwrap_or_default().to_string();
                book.open(EpisodeKey::EtcdKill(member), Scope::All, None, |_| {});
                let label = format!("{} (election)", book.label());
                let key = EpisodeKey::EtcdElection(t);
                book.open_as(label, key, Scope::All, Some(0), |e| {
                    e.excuses_registration = true;
                    e.is_fault = false;
                });
            }
            EtcdAction::Restart(_) => {
                let member = book.detail().unwrap_or_default().to_string();
                book.close(&EpisodeKey::EtcdKill(member));
            }
        }
    }
}

/// A scenario's etcd fault as the fake's own fault value (both modes).
pub fn etcd_fault(f: &EtcdFault) -> mock_etcd::Fault {
    use mock_etcd::Fault as F;
    match f.clone() {
        EtcdFault::Fail {
            path,
            status,
            grpc_code,
            message,
        } => F::Fail {
            path,
            status,
            grpc_code: grpc_code.unwrap_or(14),
            message: message.unwrap_or_else(|| "etcdserver: request timed out".into()),
        },
        EtcdFault::Latency { path, ms } => F::Latency { path, ms },
        EtcdFault::Hang { path } => F::Hang { path },
    }
}
