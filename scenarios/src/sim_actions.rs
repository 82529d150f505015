//! Scenario actions applied to the simulated cluster, at the virtual time they fire.
//!
//! Each action changes a node's core the way the fake's control API changes it in real
//! mode (the same fault values, the same health modes); it runs inside the world as a
//! scripted event, so the world then schedules whatever the change caused (watch
//! events, timers). What the simulation cannot do yet is refused up front, with the
//! reason, by [`unsupported`].

use std::time::Duration;

use sidecar::core::Input;
use sim::etcd_node::EtcdNode;
use sim::load::Load;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{NodeId, World};

use crate::cluster::{etcd_fault, vllm_fault};
use crate::sim_cluster::{node_index, SimCluster};
use crate::spec::{Action, Health, LinkKind, MasterFault};

/// Why the simulation cannot run this action, if it cannot.
pub fn unsupported(a: &Action) -> Option<String> {
    let why = match a {
        Action::EtcdKill(_) | Action::EtcdRestart(_) => {
            "etcd_kill / etcd_restart need real etcd members (processes)"
        }
        _ => return None,
    };
    Some(why.to_string())
}

impl SimCluster {
    /// Do one action now. Answers a detail worth recording.
    pub fn apply(&mut self, action: &Action) -> Result<Option<String>, String> {
        if let Some(why) = unsupported(action) {
            return Err(why);
        }
        let now = self.world.now();
        let detail = self.apply_now(action, now)?;
        // Let the world take up what the change caused (watch events, new timers).
        self.world.at(now, |_| {});
        self.world.run_until(now);
        self.drain_records();
        Ok(detail)
    }

    fn targets(&self, t: &str) -> Vec<usize> {
        if t == "all" {
            (0..self.instances.len()).collect()
        } else {
            self.instances
                .iter()
                .position(|x| x.name == t)
                .into_iter()
                .collect()
        }
    }

    fn vllm(&mut self, i: usize) -> Result<&mut VllmNode, String> {
        self.world
            .server_as_mut::<VllmNode>(NodeId::Vllm(node_index(i)))
            .ok_or_else(|| format!("no vLLM node for instance {i}"))
    }

    fn etcd(&mut self) -> Result<&mut EtcdNode, String> {
        self.world
            .server_as_mut::<EtcdNode>(NodeId::Etcd)
            .ok_or_else(|| "no etcd node".to_string())
    }

    fn master(&mut self) -> Result<&mut MasterNode, String> {
        self.world
            .server_as_mut::<MasterNode>(NodeId::Master)
            .ok_or_else(|| "no master node".to_string())
    }

    fn apply_now(&mut self, action: &Action, now: Duration) -> Result<Option<String>, String> {
        match action {
            Action::SidecarStart { instance, token } => {
                for i in self.targets(instance) {
                    self.start_sidecar(i, token.clone())?;
                }
            }
            Action::SidecarStop(t) => {
                for i in self.targets(t) {
                    self.world.input_at(now, node_index(i), Input::Shutdown);
                }
            }
            Action::SidecarKill(t) => {
                for i in self.targets(t) {
                    self.world.kill_sidecar(node_index(i));
                }
            }
            Action::VllmHealth { instance, health } => {
                let mode = match health {
                    Health::Up => mock_vllm::Health::Up,
                    Health::Down => mock_vllm::Health::Down,
                    Health::Hang => mock_vllm::Health::Hang,
                };
                for i in self.targets(instance) {
                    self.vllm(i)?.set_health(mode);
                }
            }
            Action::VllmFault {
                instance,
                fault,
                count,
                duration,
            } => {
                for i in self.targets(instance) {
                    let id = self.vllm(i)?.add_fault(vllm_fault(fault), *count);
                    // mock-vllm's core fires faults by count; a duration ends it here.
                    if let Some(d) = duration {
                        let node = NodeId::Vllm(node_index(i));
                        self.world.at(now + d.0, move |w: &mut World| {
                            if let Some(v) = w.server_as_mut::<VllmNode>(node) {
                                v.core().faults().remove(id);
                            }
                        });
                    }
                }
            }
            Action::VllmClearFaults(t) => {
                for i in self.targets(t) {
                    self.vllm(i)?.core().faults().clear();
                }
            }
            Action::VllmCrash(t) => {
                for i in self.targets(t) {
                    self.vllm(i)?.core().crash(now);
                }
            }
            Action::VllmRestart(t) => {
                for i in self.targets(t) {
                    self.vllm(i)?.core().restart(now);
                }
            }
            Action::VllmCounterReset(t) => {
                for i in self.targets(t) {
                    self.vllm(i)?.core().counter_reset(now);
                }
            }
            Action::EtcdFault {
                fault,
                count,
                duration,
            } => {
                let f = etcd_fault(fault);
                self.etcd()?
                    .faults()
                    .add_at(now, f, *count, duration.map(|d| d.0));
            }
            Action::EtcdClearFaults(_) => self.etcd()?.faults().clear(),
            // A hung request here is one never answered (its caller timed out).
            Action::EtcdReleaseHung(_) => {}
            Action::EtcdExpireLease(t) => return self.expire_lease(t, now),
            Action::MasterRestart { relist } => self.restart_master(*relist, now)?,
            Action::MasterToken(tok) => {
                let token = Some(tok.clone()).filter(|t| !t.is_empty());
                self.master()?.core().gate().token.set(token);
            }
            Action::MasterFault {
                fault,
                count,
                duration,
            } => {
                let f = match fault {
                    MasterFault::HeartbeatStatus { status } => {
                        mock_master::Fault::HeartbeatStatus { status: *status }
                    }
                    MasterFault::Latency { ms } => mock_master::Fault::Latency { ms: *ms },
                };
                self.master()?
                    .core()
                    .gate()
                    .faults
                    .add_at(now, f, *count, duration.map(|d| d.0));
            }
            Action::MasterClearFaults(_) => self.master()?.core().gate().faults.clear(),
            Action::Link {
                link,
                instance,
                fault,
                duration,
                ..
            } => self.set_links(*link, instance, fault, *duration, now)?,
            Action::Load {
                instance,
                rps,
                duration,
                max_tokens,
            } => {
                // Routed by the master when no instance is named; the request body is
                // checked by instance i0's vLLM rules (every fake has the same).
                let t = instance.as_deref().unwrap_or("i0");
                let i = self
                    .targets(t)
                    .into_iter()
                    .next()
                    .ok_or("no such instance")?;
                let to = match instance {
                    Some(_) => NodeId::Vllm(node_index(i)),
                    None => NodeId::Master,
                };
                let load = {
                    let v = self.vllm(i)?;
                    Load::new(to, v, *rps, now + duration.0, "hello", *max_tokens)?
                };
                self.world.add_load(now, load);
            }
            Action::LoadOff(_) => self.world.end_loads(),
            Action::EtcdLoseData { reset_revision } => self.etcd()?.lose_data(*reset_revision, now),
            Action::EtcdKill(_) | Action::EtcdRestart(_) => {
                return Err(unsupported(action).unwrap_or_default())
            }
        }
        Ok(None)
    }

    fn start_sidecar(&mut self, i: usize, token: Option<String>) -> Result<(), String> {
        let running = self
            .world
            .sidecars()
            .get(i)
            .is_some_and(|s| s.exited().is_none())
            && self
                .instances
                .get(i)
                .is_some_and(|x| x.started && !x.flag_error);
        let inst = self.instances.get_mut(i).ok_or("no such instance")?;
        if running {
            return Err(format!("sidecar {} is already running", inst.name));
        }
        if let Some(t) = token {
            inst.token = Some(t);
        }
        self.spawn_sidecar(i);
        Ok(())
    }

    fn expire_lease(&mut self, t: &str, now: Duration) -> Result<Option<String>, String> {
        if t == "all" {
            self.etcd()?.core().expire_all();
            return Ok(None);
        }
        let prefix = format!(
            "{}XLLM:",
            crate::cluster::normalize_namespace(&self.namespace)
        );
        let (_, kvs) = self.etcd()?.list_prefix(prefix.as_bytes(), now)?;
        let mut expired = Vec::new();
        for i in self.targets(t) {
            let inst = self.instances.get(i).ok_or("no such instance")?;
            let lease = kvs
                .iter()
                .find(|kv| kv.key == inst.key.as_bytes())
                .map(|kv| kv.lease)
                .filter(|l| *l != 0);
            let Some(lease) = lease else {
                return Err(format!("{} has no key with a lease to expire", inst.name));
            };
            expired.push(self.etcd()?.core().expire_lease(lease).map(|l| l.id));
        }
        Ok(Some(format!("expired {expired:?}")))
    }

    /// The master process restarts: it drops its watch, forgets every instance, then
    /// lists etcd (applying the listing only if `relist`) and watches again, over its
    /// link, as mock-master does.
    fn restart_master(&mut self, relist: bool, now: Duration) -> Result<(), String> {
        self.master()?.restart(now, relist);
        Ok(())
    }

    fn set_links(
        &mut self,
        link: LinkKind,
        instance: &str,
        fault: &crate::proxy::LinkFault,
        duration: Option<crate::spec::Dur>,
        now: Duration,
    ) -> Result<(), String> {
        let fault: sim::LinkFault = serde_json::to_value(fault)
            .and_then(serde_json::from_value)
            .map_err(|e| format!("link fault: {e}"))?;
        let pairs: Vec<(NodeId, NodeId)> = match link {
            LinkKind::MasterEtcd => vec![(NodeId::Master, NodeId::Etcd)],
            _ => self
                .targets(instance)
                .into_iter()
                .map(|i| {
                    let me = NodeId::Sidecar(node_index(i));
                    let server = match link {
                        LinkKind::SidecarMaster => NodeId::Master,
                        LinkKind::SidecarVllm => NodeId::Vllm(node_index(i)),
                        _ => NodeId::Etcd,
                    };
                    (me, server)
                })
                .collect(),
        };
        for (me, server) in pairs {
            self.world.set_link(me, server, fault.clone());
            if let (Some(d), false) = (duration, fault == sim::LinkFault::Heal) {
                // Heal after the duration, unless something else replaced the fault.
                let set = fault.clone();
                self.world.at(now + d.0, move |w: &mut World| {
                    if w.link_fault(me, server) == set {
                        w.set_link(me, server, sim::LinkFault::Heal);
                    }
                });
            }
        }
        Ok(())
    }
}
