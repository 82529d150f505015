//! The cluster verbs in real mode: each fake's control API, signals to the sidecar
//! processes, the links' TCP proxies, and the wall clock.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Arming, Cluster, DutyCycle, LinkSel, LoadSpec, Signal, Stoppable};
use crate::load::LoadGen;
use crate::observe::Sample;
use crate::proxy::{LinkFault, Proxy};
use crate::real_cluster::{io, Etcd, Instance, MasterReplica, RealCluster};
use crate::real_pause::{self, Switch};
use crate::timeline::{Source, Timeline};
use crate::topology::{LinkKind, Topology};

impl RealCluster {
    fn instance(&self, i: usize) -> Result<&Instance, String> {
        self.instances
            .get(i)
            .ok_or_else(|| format!("no instance {i}"))
    }

    /// The proxies a link selection names.
    fn proxies(&self, sel: &LinkSel) -> Vec<&Proxy> {
        fn picked(ps: &[Proxy], endpoint: Option<usize>) -> &[Proxy] {
            endpoint.map_or(ps, |e| ps.get(e..=e).unwrap_or_default())
        }
        if sel.link == LinkKind::MasterEtcd {
            return picked(&self.master_links, sel.endpoint).iter().collect();
        }
        let mut links = Vec::new();
        for x in sel.instances.iter().filter_map(|i| self.instances.get(*i)) {
            match sel.link {
                LinkKind::SidecarEtcd => links.extend(picked(&x.etcd_links, sel.endpoint)),
                // One link to "the master" however many replicas serve behind it.
                LinkKind::SidecarMaster => links.extend(&x.master_proxies),
                LinkKind::SidecarVllm => links.push(&x.vllm_link),
                LinkKind::MasterEtcd => {}
            }
        }
        links
    }

    fn replica(&mut self, k: usize) -> Result<&mut MasterReplica, String> {
        let n = self.masters.len();
        self.masters
            .get_mut(k)
            .ok_or_else(|| format!("no master replica {k} (the topology has {n})"))
    }

    /// The replica the master's callers meet: the elected one, else replica 0.
    fn serving_master(&self) -> Option<&mock_master::MockMaster> {
        let k = Cluster::elected_master(self).unwrap_or(0);
        self.masters.get(k).map(|m| &m.master)
    }

    /// Every running replica: what a service setting (token, faults) applies to.
    fn running_masters(&self) -> impl Iterator<Item = &mock_master::MockMaster> {
        self.masters.iter().filter(|m| m.running).map(|m| &m.master)
    }
}

impl Cluster for RealCluster {
    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    fn now_ms(&self) -> u64 {
        self.timeline.now()
    }

    async fn advance_to(&mut self, ms: u64) {
        let now = self.timeline.now();
        if ms > now {
            tokio::time::sleep(Duration::from_millis(ms - now)).await;
        }
    }

    async fn observe(&mut self) -> Sample {
        RealCluster::observe(self).await
    }

    fn routed(&self) -> Cow<'_, [usize]> {
        Cow::Owned(self.routed.snapshot())
    }

    fn addrs(&self) -> Vec<String> {
        let addrs = self.instances.iter().map(|x| x.register_addr.clone());
        addrs.collect()
    }

    fn sidecar_output(&self, i: usize) -> Vec<String> {
        let proc = self.instances.get(i).and_then(|x| x.sidecar.as_ref());
        proc.map(|p| p.last_lines()).unwrap_or_default()
    }

    fn sidecar_start(&mut self, i: usize, token: Option<String>) -> Result<(), String> {
        self.start_sidecar(i, token)
    }

    fn sidecar_signal(&mut self, i: usize, signal: Signal) -> Result<(), String> {
        if let Some(p) = self.instance(i)?.sidecar.as_ref() {
            p.send(signal);
        }
        Ok(())
    }

    fn vllm_health(&mut self, i: usize, health: mock_vllm::Health) -> Result<(), String> {
        self.instance(i).map(|x| x.vllm.set_health(health))
    }

    fn vllm_fault(&mut self, i: usize, f: mock_vllm::Fault, arm: Arming) -> Result<(), String> {
        let vllm = &self.instance(i)?.vllm;
        vllm.faults().add(f, arm.count, arm.lasting);
        Ok(())
    }

    fn vllm_clear_faults(&mut self, i: usize) -> Result<(), String> {
        self.instance(i).map(|x| x.vllm.faults().clear())
    }

    async fn vllm_crash(&mut self, i: usize) -> Result<(), String> {
        self.instance(i)?.vllm.crash().await;
        Ok(())
    }

    async fn vllm_restart(&mut self, i: usize) -> Result<(), String> {
        let vllm = &self.instance(i)?.vllm;
        vllm.restart().await.map_err(io("restarting vLLM"))
    }

    fn vllm_counter_reset(&mut self, i: usize) -> Result<(), String> {
        self.instance(i).map(|x| x.vllm.counter_reset())
    }

    fn vllm_sleep(&mut self, i: usize, level: u8) -> Result<(), String> {
        self.instance(i).map(|x| x.vllm.sleep(level))
    }

    fn vllm_wake(&mut self, i: usize) -> Result<(), String> {
        self.instance(i).map(|x| x.vllm.wake())
    }

    fn etcd_fault(&mut self, f: mock_etcd::Fault, arm: Arming) -> Result<(), String> {
        self.fake_etcd()?.faults().add(f, arm.count, arm.lasting);
        Ok(())
    }

    fn etcd_clear_faults(&mut self) -> Result<(), String> {
        let e = self.fake_etcd()?;
        e.faults().clear();
        e.release_hung();
        Ok(())
    }

    fn etcd_release_hung(&mut self) -> Result<(), String> {
        self.fake_etcd().map(|e| e.release_hung())
    }

    fn etcd_expire_lease(&mut self, i: usize) -> Result<i64, String> {
        let x = self.instance(i)?;
        let e = self.fake_etcd()?;
        match e.get(&x.key) {
            Some((_, lease)) if lease != 0 => {
                e.expire_lease(lease);
                Ok(lease)
            }
            _ => Err(format!("{} has no key with a lease to expire", x.name)),
        }
    }

    fn etcd_expire_all_leases(&mut self) -> Result<(), String> {
        self.fake_etcd().map(|e| e.expire_all_leases())
    }

    fn etcd_lose_data(&mut self, reset_revision: bool) -> Result<(), String> {
        self.fake_etcd().map(|e| e.lose_data(reset_revision))
    }

    async fn etcd_member(&mut self, which: &str, up: bool) -> Result<usize, String> {
        let Etcd::Real(r) = &self.etcd else {
            return Err("etcd_kill / etcd_restart need real etcd".into());
        };
        let mut members = r.lock().await;
        let (done, doing) = match up {
            false => (members.kill(which).await, "killing"),
            true => (members.restart(which).await, "restarting"),
        };
        done.map_err(io(&format!("{doing} etcd member")))
    }

    async fn master_restart(&mut self, k: usize, relist: bool) -> Result<(), String> {
        let token = self.master_token_set.clone();
        let timeline = self.timeline.clone();
        let m = self.replica(k)?;
        if m.running {
            // A restart thaws a paused fake: it is a new process.
            m.master.restart_with(relist).await;
            return Ok(());
        }
        // A killed replica is a new process on its old address: it lists etcd as every
        // master does at start, so `relist` is what it does anyway.
        m.start_again(token, &timeline).await
    }

    async fn master_kill(&mut self, k: usize) -> Result<(), String> {
        let m = self.replica(k)?;
        if !m.running {
            return Err(format!("master replica {k} is not running"));
        }
        m.kill().await;
        Ok(())
    }

    fn elected_master(&self) -> Option<usize> {
        // A single replica elects nothing and holds itself master while it runs.
        self.masters
            .iter()
            .position(|m| m.running && m.master.is_master())
    }

    fn master_token(&mut self, token: Option<String>) -> Result<(), String> {
        self.running_masters()
            .for_each(|m| m.set_token(token.clone()));
        self.master_token_set = Some(token);
        Ok(())
    }

    fn master_fault(&mut self, f: mock_master::Fault, arm: Arming) -> Result<(), String> {
        for m in self.running_masters() {
            m.faults().add(f.clone(), arm.count, arm.lasting);
        }
        Ok(())
    }

    fn master_clear_faults(&mut self) -> Result<(), String> {
        self.running_masters().for_each(|m| m.faults().clear());
        Ok(())
    }

    async fn link_fault(
        &mut self,
        sel: &LinkSel,
        fault: &LinkFault,
        heal_after: Option<Duration>,
    ) -> Result<(), String> {
        let links = self.proxies(sel);
        for p in &links {
            p.set(fault.clone()).await.map_err(io("link"))?;
        }
        let Some(d) = heal_after else {
            return Ok(());
        };
        let owned: Vec<Proxy> = links.into_iter().cloned().collect();
        let fault = fault.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.wait() => {}
                _ = tokio::time::sleep(d) => {
                    for p in owned {
                        p.heal_if(&fault).await;
                    }
                }
            }
        });
        Ok(())
    }

    fn pause(
        &mut self,
        node: Stoppable,
        lasting: Duration,
        duty: Option<DutyCycle>,
    ) -> Result<(), String> {
        let switch = match node {
            Stoppable::Sidecar(i) => match self.instance(i)?.sidecar.as_ref() {
                Some(p) => Switch::Process(p.pauser().ok_or("the sidecar has no pid")?),
                None => return Ok(()),
            },
            Stoppable::Vllm(i) => Switch::Fake(self.instance(i)?.vllm.freeze().clone()),
            Stoppable::Master => match self.serving_master() {
                Some(m) => Switch::Fake(m.freeze().clone()),
                None => return Ok(()),
            },
        };
        real_pause::spawn(switch, lasting, duty, self.stop.clone());
        Ok(())
    }

    fn load_start(&mut self, load: LoadSpec) -> Result<(), String> {
        let url = match load.instance {
            Some(i) => self.instance(i)?.vllm.url(),
            None => self.serving_master().ok_or("no master replica")?.url(),
        };
        let route = (self.addrs(), self.routed.clone());
        let gen = LoadGen::start(
            url,
            load.instance.is_none().then_some(route),
            load.rps,
            load.duration,
            load.max_tokens,
            self.seed ^ self.timeline.now(),
            self.timeline.source(Source::Load),
        );
        crate::lock(&self.load).push(gen);
        Ok(())
    }

    fn load_off(&mut self) {
        self.stop_loads();
    }
}
