//! Link actions: a fault on one link of the cluster (latency, blackhole, reset, refuse,
//! a one-way partition, heal), for a time or until healed.
//!
//! In real mode the fault is set on the link's TCP proxy, in virtual time on the
//! world's simulated link; `duration` heals it, unless something else replaced the
//! fault meanwhile. A fault on a sidecar's etcd or vLLM link excuses the missing key
//! (unless it is mild latency, or one etcd endpoint of several: that one must be
//! survived); a master–etcd fault excuses the master's view lagging etcd.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sim::{NodeId, World};

use super::words;
use crate::cluster::Cluster;
use crate::dur::Dur;
use crate::episode::{EpisodeBook, Scope};
use crate::proxy::{Direction, LinkFault, LinkHandle, Proxy};
use crate::sim_cluster::{node_index, SimCluster};
use crate::topology::{Target, Topology};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum LinkAction {
    /// A fault on one link of the cluster; `duration` heals it automatically.
    #[serde(rename = "link")]
    Fault {
        link: LinkKind,
        #[serde(default = "all_target")]
        instance: Target,
        /// Only this etcd endpoint of the sidecar (index), default all.
        #[serde(default)]
        endpoint: Option<usize>,
        fault: LinkFault,
        #[serde(default)]
        duration: Option<Dur>,
    },
}

fn all_target() -> String {
    "all".into()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    SidecarEtcd,
    SidecarMaster,
    SidecarVllm,
    MasterEtcd,
}

impl LinkAction {
    pub fn instance(&self) -> Option<&str> {
        let LinkAction::Fault { instance, .. } = self;
        Some(instance)
    }

    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let LinkAction::Fault {
            instance,
            link,
            endpoint,
            ..
        } = self;
        topo.check_target(instance, true)?;
        if let Some(e) = endpoint {
            if *link != LinkKind::SidecarEtcd && *link != LinkKind::MasterEtcd {
                return Err("`endpoint` applies to etcd links only".into());
            }
            if *e >= topo.etcd_endpoints.max(topo.etcd_members()) {
                return Err(format!("endpoint {e} does not exist"));
            }
        }
        Ok(())
    }

    /// `link sidecar_etcd i0: blackhole for 4s`.
    pub fn describe(&self) -> String {
        let LinkAction::Fault {
            link,
            instance,
            endpoint,
            fault,
            duration,
        } = self;
        let link = words::compact(link);
        let ep = endpoint
            .map(|e| format!(" endpoint {e}"))
            .unwrap_or_default();
        let who = if link == "master_etcd" {
            String::new()
        } else {
            format!(" {instance}")
        };
        format!(
            "link {link}{who}{ep}: {}{}",
            words::compact(fault),
            words::for_dur(duration)
        )
    }

    pub async fn apply_real(&self, c: &mut Cluster) -> Result<Option<String>, String> {
        let LinkAction::Fault {
            link,
            instance,
            endpoint,
            fault,
            duration,
        } = self;
        let links = proxies(c, *link, instance, *endpoint);
        for p in &links {
            p.set(fault.clone())
                .await
                .map_err(|e| format!("link: {e}"))?;
        }
        if let (Some(d), false) = (duration, *fault == LinkFault::Heal) {
            // Heal after the duration, unless something else replaced the fault.
            let owned: Vec<(LinkHandle, LinkFault)> =
                links.iter().map(|p| (p.handle(), fault.clone())).collect();
            let d = d.0;
            let stop = c.stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.wait() => {}
                    _ = tokio::time::sleep(d) => {
                        for (h, f) in owned {
                            h.heal_if(&f).await;
                        }
                    }
                }
            });
        }
        Ok(None)
    }

    pub fn sim_unsupported(&self) -> Option<String> {
        None
    }

    pub fn apply_sim(&self, c: &mut SimCluster, now: Duration) -> Result<Option<String>, String> {
        let LinkAction::Fault {
            link,
            instance,
            endpoint,
            fault,
            duration,
        } = self;
        let fault: sim::LinkFault = serde_json::to_value(fault)
            .and_then(serde_json::from_value)
            .map_err(|e| format!("link fault: {e}"))?;
        // A sidecar's etcd link is one per endpoint: the one named, or all of them.
        let endpoints: Vec<usize> = match endpoint {
            Some(e) => vec![*e],
            None => (0..c.topology.etcd_endpoints.max(1)).collect(),
        };
        let pairs: Vec<(NodeId, NodeId)> = match link {
            LinkKind::MasterEtcd => vec![(NodeId::Master, NodeId::Etcd)],
            _ => c
                .targets(instance)
                .into_iter()
                .flat_map(|i| {
                    let me = NodeId::Sidecar(node_index(i));
                    let servers = match link {
                        LinkKind::SidecarMaster => vec![NodeId::Master],
                        LinkKind::SidecarVllm => vec![NodeId::Vllm(node_index(i))],
                        _ => endpoints
                            .iter()
                            .map(|&k| NodeId::etcd_endpoint(k))
                            .collect(),
                    };
                    servers.into_iter().map(move |server| (me, server))
                })
                .collect(),
        };
        for (me, server) in pairs {
            c.world.set_link(me, server, fault.clone());
            if let (Some(d), false) = (duration, fault == sim::LinkFault::Heal) {
                // Heal after the duration, unless something else replaced the fault.
                let set = fault.clone();
                c.world.at(now + d.0, move |w: &mut World| {
                    if w.link_fault(me, server) == set {
                        w.set_link(me, server, sim::LinkFault::Heal);
                    }
                });
            }
        }
        Ok(None)
    }

    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let LinkAction::Fault {
            link,
            instance,
            endpoint,
            fault,
            duration,
        } = self;
        let scopes = if *link == LinkKind::MasterEtcd {
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
        let master = *link == LinkKind::MasterEtcd;
        let recovery = match link {
            LinkKind::SidecarEtcd => book.etcd_recovery_ms(),
            _ => 0,
        };
        for s in scopes {
            if *fault == LinkFault::Heal {
                book.close_prefix(&format!("link:{link:?}:"));
                continue;
            }
            let key = format!("link:{link:?}:{s:?}:{endpoint:?}");
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
/// heartbeat, past the fault (found by `scenarios explore`, seed 21011).
fn master_lost_lines(book: &mut EpisodeBook<'_>) {
    let beat = book.topology().heartbeat_interval.as_ms();
    let tail = beat.max(30_000) + beat;
    let key = format!("master_lost_lines:{}", book.t());
    book.open(key, Scope::All, Some(0), |e| {
        e.excuses_master = true;
        e.is_fault = false;
        e.outlasts_faults_ms = tail;
    });
}

/// The proxies of a link: the master's (one per etcd endpoint) or each target's.
fn proxies<'a>(
    c: &'a Cluster,
    link: LinkKind,
    instance: &str,
    endpoint: Option<usize>,
) -> Vec<&'a Proxy> {
    let picked = |k: &usize| endpoint.is_none_or(|e| e == *k);
    if link == LinkKind::MasterEtcd {
        return c
            .master_links
            .iter()
            .enumerate()
            .filter(|(k, _)| picked(k))
            .map(|(_, p)| p)
            .collect();
    }
    let mut links = Vec::new();
    for x in c
        .targets(instance)
        .into_iter()
        .filter_map(|i| c.instances.get(i))
    {
        match link {
            LinkKind::SidecarEtcd => links.extend(
                x.etcd_links
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| picked(k))
                    .map(|(_, p)| p),
            ),
            LinkKind::SidecarMaster => links.push(&x.master_link),
            LinkKind::SidecarVllm => links.push(&x.vllm_link),
            LinkKind::MasterEtcd => {}
        }
    }
    links
}
