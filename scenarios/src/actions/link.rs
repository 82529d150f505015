//! Link actions: a fault on one link of the cluster (latency, blackhole, reset, refuse,
//! a one-way partition, heal), for a time or until healed.
//!
//! In real mode the fault is set on the link's TCP proxy, in virtual time on the
//! world's simulated link; `duration` heals it, unless something else replaced the
//! fault meanwhile. A fault on a sidecar's etcd or vLLM link excuses the missing key
//! (unless it is mild latency, or one etcd endpoint of several: that one must be
//! survived); a master–etcd fault excuses the master's view lagging etcd.

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::{Cluster, LinkSel};
use crate::dur::Dur;
use crate::episode::{EpisodeBook, EpisodeKey, Scope};
use crate::proxy::{Direction, LinkFault};
use crate::topology::{target_indices, Target, Topology};

/// A link action:
/// `link = { link = "sidecar_etcd", instance = "i0", fault = "blackhole", duration = "4s" }`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum LinkAction {
    /// A fault on one link of the cluster; `duration` heals it automatically.
    #[serde(rename = "link")]
    Fault(LinkStep),
}

/// What a `link` action says: which link, whose, the fault and for how long.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkStep {
    /// Which link: `sidecar_etcd`, `sidecar_master`, `sidecar_vllm` or `master_etcd`.
    pub link: LinkKind,
    /// Whose link: an instance name or `all` (the default; ignored for `master_etcd`).
    #[serde(default = "crate::topology::all_target")]
    pub instance: Target,
    /// Only this etcd endpoint of the sidecar (index), default all.
    #[serde(default)]
    pub endpoint: Option<usize>,
    /// The fault to set (`heal` clears it).
    pub fault: LinkFault,
    /// Heal after this long (`None`: until a `heal`).
    #[serde(default)]
    pub duration: Option<Dur>,
}

pub use crate::topology::LinkKind;

impl LinkAction {
    /// The instance whose link it is (a name or `all`).
    pub fn instance(&self) -> Option<&str> {
        let LinkAction::Fault(step) = self;
        Some(&step.instance)
    }

    /// Checks the instance exists and `endpoint` names an etcd endpoint of an etcd link.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let LinkAction::Fault(f) = self;
        topo.check_target(&f.instance, true)?;
        if let Some(e) = f.endpoint {
            if f.link != LinkKind::SidecarEtcd && f.link != LinkKind::MasterEtcd {
                return Err("`endpoint` applies to etcd links only".into());
            }
            if e >= topo.etcd_endpoints.max(topo.etcd_members()) {
                return Err(format!("endpoint {e} does not exist"));
            }
        }
        Ok(())
    }

    /// `link sidecar_etcd i0: blackhole for 4s`.
    pub fn describe(&self) -> String {
        let LinkAction::Fault(f) = self;
        let link = words::compact(&f.link);
        let ep = f
            .endpoint
            .map(|e| format!(" endpoint {e}"))
            .unwrap_or_default();
        let who = match f.link {
            LinkKind::MasterEtcd => String::new(),
            _ => format!(" {}", f.instance),
        };
        words::fault(&format!("link {link}{who}{ep}"), &f.fault, &f.duration)
    }

    /// Sets the fault on the selected links, to heal after `duration` (never for `heal` itself).
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        let LinkAction::Fault(f) = self;
        let sel = LinkSel {
            link: f.link,
            instances: target_indices(c.topology().instances, &f.instance),
            endpoint: f.endpoint,
        };
        let heal_after = f
            .duration
            .map(|d| d.0)
            .filter(|_| f.fault != LinkFault::Heal);
        c.link_fault(&sel, &f.fault, heal_after).await?;
        Ok(None)
    }

    /// Opens the link's episodes, or closes them for `heal` (see the module's summary).
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let LinkAction::Fault(LinkStep {
            link,
            instance,
            endpoint,
            fault,
            duration,
        }) = self;
        let master = *link == LinkKind::MasterEtcd;
        let scopes = if master {
            vec![Scope::All]
        } else {
            book.scopes(instance)
        };
        let topo = book.topology();
        // With other etcd endpoints left, one endpoint's fault must be survived.
        let failover = endpoint.is_some() && topo.etcd_endpoints.max(topo.etcd_members()) > 1;
        let excuses = matches!(link, LinkKind::SidecarEtcd | LinkKind::SidecarVllm)
            && !failover
            && !matches!(fault, LinkFault::Latency { ms, jitter_ms } if ms + jitter_ms < 200);
        // A cut path from the sidecar to its vLLM is, to that sidecar, vLLM down: its
        // probes fail and a sidecar still in its start-up gate backs off as it would.
        let vllm_cut = *link == LinkKind::SidecarVllm && excuses;
        let recovery = match link {
            LinkKind::SidecarEtcd => book.etcd_recovery_ms(),
            _ => 0,
        };
        for s in scopes {
            if *fault == LinkFault::Heal {
                book.close_where(|k| matches!(k, EpisodeKey::Link(l, ..) if l == link));
                continue;
            }
            let key = EpisodeKey::Link(*link, s, *endpoint);
            book.open(key, s, duration.map(|d| d.as_ms()), |e| {
                e.excuses_registration = excuses;
                e.vllm_down = vllm_cut;
                e.excuses_master = master;
                e.extra_grace_ms = recovery;
            });
        }
        if master
            && *fault
                == (LinkFault::Partition {
                    direction: Direction::FromTarget,
                })
        {
            master_lost_lines(book);
        }
    }
}

/// Watch lines etcd sent while its answers to the master were dropped are lost on a
/// connection that stays open (the proxy drops them; TCP itself would not), and the
/// master cannot tell. Only the sidecar repairs its view: its next heartbeat is answered
/// 409 and it registers again, a put the master sees. After 409s in a row that
/// heartbeat waits out the sidecar's conflict backoff (at most 30 s, or the heartbeat
/// interval if longer; `sidecar::core`), so the master is excused that long, plus a
/// heartbeat, past the fault.
fn master_lost_lines(book: &mut EpisodeBook<'_>) {
    let beat = book.topology().heartbeat_interval.as_ms();
    let tail = beat.max(30_000) + beat;
    let key = EpisodeKey::MasterLostLines(book.t());
    book.open(key, Scope::All, Some(0), |e| {
        e.excuses_master = true;
        e.is_fault = false;
        e.outlasts_faults_ms = tail;
    });
}
