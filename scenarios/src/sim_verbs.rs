//! The cluster verbs in virtual time: each fake's core in its simulated node, the
//! sidecar cores' inputs, the world's simulated links, and the world's clock.
//!
//! A fault with a duration is armed by count in the fakes' cores and removed by a
//! scripted event at its end, as the real fakes' registries expire it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sidecar::core::Input;
use sim::load::Load;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{NodeId, World};

use crate::cluster::{Arming, Cluster, DutyCycle, LinkSel, LoadSpec, Signal, Stoppable};
use crate::observe::Sample;
use crate::proxy::LinkFault;
use crate::sim_cluster::{node_index, SimCluster};
use crate::timeline::Timeline;
use crate::topology::LinkKind;
use crate::topology::Topology;

impl SimCluster {
    /// `f` on every running master replica (a token or a fault is the service's
    /// setting, so every replica has it).
    fn each_master(&mut self, mut f: impl FnMut(&mut MasterNode)) {
        for k in 0..self.master_cfgs.len() {
            if let Some(m) = self.world.server_as_mut::<MasterNode>(NodeId::master(k)) {
                f(m);
            }
        }
    }

    /// The (client, server) node pairs a link selection names.
    fn link_pairs(&self, sel: &LinkSel) -> Vec<(NodeId, NodeId)> {
        if sel.link == LinkKind::MasterEtcd {
            return vec![(NodeId::Master, NodeId::Etcd)];
        }
        // A sidecar's etcd link is one per endpoint: the one named, or all of them.
        let endpoints: Vec<usize> = match sel.endpoint {
            Some(e) => vec![e],
            None => (0..self.topology.etcd_endpoints.max(1)).collect(),
        };
        let mut pairs = Vec::new();
        for &i in &sel.instances {
            let me = NodeId::Sidecar(node_index(i));
            match sel.link {
                LinkKind::SidecarMaster => pairs.push((me, NodeId::Master)),
                LinkKind::SidecarVllm => pairs.push((me, NodeId::Vllm(node_index(i)))),
                _ => pairs.extend(endpoints.iter().map(|&k| (me, NodeId::etcd_endpoint(k)))),
            }
        }
        pairs
    }
}

impl Cluster for SimCluster {
    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    fn now_ms(&self) -> u64 {
        SimCluster::now_ms(self)
    }

    async fn advance_to(&mut self, ms: u64) {
        SimCluster::advance_to(self, ms)
    }

    async fn observe(&mut self) -> Sample {
        SimCluster::observe(self)
    }

    async fn next_change(&mut self, ms: u64) -> Option<Sample> {
        SimCluster::next_change(self, ms)
    }

    async fn change_now(&mut self) -> Option<Sample> {
        SimCluster::change_now(self)
    }

    fn routed(&self) -> Cow<'_, [usize]> {
        Cow::Borrowed(&self.routed)
    }

    fn addrs(&self) -> Vec<String> {
        let addrs = self.instances.iter().map(|x| x.register_addr.clone());
        addrs.collect()
    }

    fn sidecar_phases(&self, instances: &[usize]) -> BTreeMap<String, String> {
        instances
            .iter()
            .filter_map(|&i| Some((self.instances.get(i)?.name.clone(), self.phase(i).into())))
            .collect()
    }

    fn sidecar_output(&self, i: usize) -> Vec<String> {
        let inst = self.instances.get(i).filter(|x| x.flag_error);
        let said = inst.and_then(|x| x.flag_message.as_ref());
        said.map(|m| vec![format!("stderr: {m}")])
            .unwrap_or_default()
    }

    fn settle(&mut self) {
        let now = self.world.now();
        self.world.at(now, |_| {});
        self.world.run_until(now);
        self.drain_records();
    }

    fn sidecar_start(&mut self, i: usize, token: Option<String>) -> Result<(), String> {
        let running = self.phase(i) != "not_running";
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

    fn sidecar_signal(&mut self, i: usize, signal: Signal) -> Result<(), String> {
        let now = self.world.now();
        let index = node_index(i);
        match signal {
            Signal::Kill => self.world.kill_sidecar(index),
            Signal::Term => self.world.input_at(now, index, Input::Shutdown),
            Signal::Drain => self.world.input_at(now, index, Input::Drain),
            Signal::Undrain => self.world.input_at(now, index, Input::Undrain),
        }
        Ok(())
    }

    fn vllm_health(&mut self, i: usize, health: mock_vllm::Health) -> Result<(), String> {
        self.vllm(i)?.set_health(health);
        Ok(())
    }

    fn vllm_fault(&mut self, i: usize, f: mock_vllm::Fault, arm: Arming) -> Result<(), String> {
        let now = self.world.now();
        let id = self.vllm(i)?.add_fault(f, arm.count);
        if let Some(d) = arm.lasting {
            let node = NodeId::Vllm(node_index(i));
            self.world.at(now + d, move |w: &mut World| {
                if let Some(v) = w.server_as_mut::<VllmNode>(node) {
                    v.core().faults().remove(id);
                }
            });
        }
        Ok(())
    }

    fn vllm_clear_faults(&mut self, i: usize) -> Result<(), String> {
        self.vllm(i)?.core().faults().clear();
        Ok(())
    }

    async fn vllm_crash(&mut self, i: usize) -> Result<(), String> {
        let now = self.world.now();
        self.vllm(i)?.core().crash(now);
        Ok(())
    }

    async fn vllm_restart(&mut self, i: usize) -> Result<(), String> {
        self.world.end_pause(NodeId::Vllm(node_index(i)));
        let now = self.world.now();
        self.vllm(i)?.core().restart(now);
        Ok(())
    }

    fn vllm_counter_reset(&mut self, i: usize) -> Result<(), String> {
        let now = self.world.now();
        self.vllm(i)?.core().counter_reset(now);
        Ok(())
    }

    fn vllm_sleep(&mut self, i: usize, level: u8) -> Result<(), String> {
        let now = self.world.now();
        self.vllm(i)?.core().sleep(now, level);
        Ok(())
    }

    fn vllm_wake(&mut self, i: usize) -> Result<(), String> {
        let now = self.world.now();
        self.vllm(i)?.core().wake(now);
        Ok(())
    }

    fn etcd_fault(&mut self, f: mock_etcd::Fault, arm: Arming) -> Result<(), String> {
        let now = self.world.now();
        self.etcd()?.faults().add_at(now, f, arm.count, arm.lasting);
        Ok(())
    }

    fn etcd_clear_faults(&mut self) -> Result<(), String> {
        self.etcd()?.faults().clear();
        Ok(())
    }

    /// A hung request here is one never answered: its caller timed out already.
    fn etcd_release_hung(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn etcd_expire_lease(&mut self, i: usize) -> Result<i64, String> {
        let prefix = format!("{}XLLM:", mock_master::normalize_namespace(&self.namespace));
        let (_, kvs) = self.etcd()?.list_prefix(prefix.as_bytes())?;
        let inst = self.instances.get(i).ok_or("no such instance")?;
        let lease = kvs
            .iter()
            .find(|kv| kv.key == inst.key.as_bytes())
            .map(|kv| kv.lease)
            .filter(|l| *l != 0)
            .ok_or_else(|| format!("{} has no key with a lease to expire", inst.name))?;
        self.etcd()?.core().expire_lease(lease);
        Ok(lease)
    }

    fn etcd_expire_all_leases(&mut self) -> Result<(), String> {
        self.etcd()?.core().expire_all();
        Ok(())
    }

    fn etcd_lose_data(&mut self, reset_revision: bool) -> Result<(), String> {
        let now = self.world.now();
        self.etcd()?.lose_data(reset_revision, now);
        Ok(())
    }

    async fn etcd_member(&mut self, _which: &str, _up: bool) -> Result<usize, String> {
        Err("etcd_kill / etcd_restart need real etcd members (processes)".into())
    }

    /// The master process restarts: it drops its watch, forgets every instance, then
    /// lists etcd (applying the listing only if `relist`) and watches again, over its
    /// link, as mock-master does.
    async fn master_kill(&mut self, k: usize) -> Result<(), String> {
        if k >= self.master_cfgs.len() {
            return Err(format!("no master replica {k}"));
        }
        self.world.kill_server(NodeId::master(k));
        Ok(())
    }

    fn elected_master(&self) -> Option<usize> {
        self.elected_replica()
    }

    async fn master_restart(&mut self, k: usize, relist: bool) -> Result<(), String> {
        if k >= self.master_cfgs.len() {
            return Err(format!("no master replica {k}"));
        }
        let id = NodeId::master(k);
        self.world.end_pause(id);
        let now = self.world.now();
        match self.world.server_as_mut::<MasterNode>(id) {
            Some(m) => m.restart(now, relist),
            // Killed: a new process in its slot registers and runs for master.
            None => {
                let master = self.new_master(k, now);
                self.world.start_server(id, Box::new(master));
            }
        }
        Ok(())
    }

    fn master_token(&mut self, token: Option<String>) -> Result<(), String> {
        self.each_master(|m| m.core().gate().token.set(token.clone()));
        Ok(())
    }

    fn master_fault(&mut self, f: mock_master::Fault, arm: Arming) -> Result<(), String> {
        let now = self.world.now();
        self.each_master(|m| {
            let faults = &m.core().gate().faults;
            faults.add_at(now, f.clone(), arm.count, arm.lasting);
        });
        Ok(())
    }

    fn master_clear_faults(&mut self) -> Result<(), String> {
        self.each_master(|m| m.core().gate().faults.clear());
        Ok(())
    }

    async fn link_fault(
        &mut self,
        sel: &LinkSel,
        fault: &LinkFault,
        heal_after: Option<Duration>,
    ) -> Result<(), String> {
        let now = self.world.now();
        for (me, server) in self.link_pairs(sel) {
            self.world.set_link(me, server, fault.clone());
            if let Some(d) = heal_after {
                let set = fault.clone();
                self.world.at(now + d, move |w: &mut World| {
                    if w.link_fault(me, server) == set {
                        w.set_link(me, server, sim::LinkFault::Heal);
                    }
                });
            }
        }
        Ok(())
    }

    fn pause(
        &mut self,
        node: Stoppable,
        lasting: Duration,
        duty: Option<DutyCycle>,
    ) -> Result<(), String> {
        let id = match node {
            Stoppable::Sidecar(i) => NodeId::Sidecar(node_index(i)),
            Stoppable::Vllm(i) => NodeId::Vllm(node_index(i)),
            Stoppable::Master => NodeId::master(self.elected_replica().unwrap_or(0)),
        };
        let now = self.world.now();
        match duty {
            None => self.world.pause_at(now, id, lasting),
            Some(d) => self.world.throttle_at(now, id, lasting, d.run, d.period),
        }
        Ok(())
    }

    /// Routed load's request bodies are checked by instance i0's vLLM rules (every fake
    /// has the same).
    fn load_start(&mut self, load: LoadSpec) -> Result<(), String> {
        let now = self.world.now();
        let to = load
            .instance
            .map_or(NodeId::Master, |i| NodeId::Vllm(node_index(i)));
        let v = self.vllm(load.instance.unwrap_or(0))?;
        let until = now + load.duration;
        let l = Load::new(to, v, load.rps, until, "hello", load.max_tokens)?;
        self.world.add_load(now, l);
        Ok(())
    }

    fn load_off(&mut self) {
        self.world.end_loads();
    }
}
