//! What the runner sees of the simulated cluster: every instance as etcd's and the
//! master's cores show it, read in place (never through a link), at every sample period
//! and at every event that changes it.
//!
//! An observation is rebuilt only where something it is made from changed: an
//! instance's etcd value, the master's entry (by its stamp), its sidecar's process. So a
//! sample taken at each such event costs the instances that event changed, not the
//! cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sim::etcd_node::EtcdNode;
use sim::master_node::MasterNode;
use sim::NodeId;

use crate::observe::{sum_counts, Cumulative, InstanceObs, Masters, Sample};
use crate::sim_cluster::{ElectedInEtcd, ObsKey, SimCluster, SimInstance};

/// What the last event may have changed of the observation.
enum Changed {
    /// Nothing.
    Nothing,
    /// These instances (their etcd keys, master entries or sidecars' processes), or
    /// none but the master replicas' view or its unnamed 401s.
    Instances(Vec<usize>),
    /// Anything: etcd's keys, entries gone from the master that it no longer names,
    /// the replicas.
    Any,
}

/// Every replica's stamp of `addr`'s entry and which replica is viewed, folded into one
/// number: it changes when any of them does.
fn fold_revs(nodes: &[Option<&MasterNode>], addr: &str, view: NodeId) -> u64 {
    let mut folded = nodes.len() as u64;
    for (k, node) in nodes.iter().enumerate() {
        let rev = node
            .and_then(|m| m.instances().get_with_rev(addr))
            .map_or(0, |(_, rev)| rev.wrapping_add(1));
        let viewed = u64::from(NodeId::master(k) == view);
        folded = folded
            .wrapping_mul(0x100_0000_01b3)
            .wrapping_add(rev.wrapping_mul(2).wrapping_add(viewed));
    }
    folded
}

/// An instance's heartbeat answers over the run at every replica, summed.
fn replicas_heartbeats(
    nodes: &[Option<&MasterNode>],
    inst: &mut SimInstance,
) -> Arc<BTreeMap<u16, u64>> {
    let none = BTreeMap::new();
    inst.replica_counts
        .resize_with(nodes.len(), Cumulative::default);
    let counts = nodes.iter().zip(inst.replica_counts.iter_mut());
    let totals: Vec<_> = counts
        .map(|(node, counts)| {
            let entry = node.and_then(|m| m.instances().get_with_rev(&inst.register_addr));
            let view = entry.map(|(v, _)| v);
            let now = view.map_or(&none, |v| v.heartbeats);
            counts.update(view.map(|v| v.incarnation), now)
        })
        .collect();
    Arc::new(sum_counts(totals.iter().map(|t| &**t)))
}

impl SimCluster {
    /// One observation of the whole cluster (read from the cores, never through a link).
    ///
    /// Every change is sampled when its event runs ([`SimCluster::next_change`]) or its
    /// verb ([`SimCluster::change_now`]), so once every instance was observed, the
    /// observation at a sample period is the last one at a later time: release builds
    /// answer that without reading the cores; debug builds read them and check that
    /// nothing changed unseen.
    pub fn observe(&mut self) -> Sample {
        let seen = self.observed.len() == self.instances.len();
        if seen && !cfg!(debug_assertions) {
            let (instances, masters) = (self.observed.clone(), self.masters.clone());
            let mut sample = Sample::new(self.now_ms(), instances, self.routed.len(), masters);
            sample.changed = Some(Vec::new());
            return sample;
        }
        let (sample, changed) = self.observe_only(None);
        debug_assert!(
            !seen || !changed,
            "t={} ms: the observation changed with no event or verb seen changing it",
            sample.t_ms
        );
        sample
    }

    /// [`SimCluster::observe`] where only the instances `only` names may have changed
    /// since the last observation, in etcd or at the master (`None`: any may have); the
    /// others are as last observed. Also answers whether anything differs from the last
    /// observation.
    fn observe_only(&mut self, only: Option<Vec<usize>>) -> (Sample, bool) {
        let none = BTreeMap::new();
        let replicas = self.master_cfgs.len();
        // One master: its counts are the cluster's (`global` below), no replica's apart.
        let totals = match replicas {
            0 | 1 => Vec::new(),
            _ => self.replica_totals(),
        };
        let summed = (replicas > 1).then(|| sum_counts(totals.iter().map(|t| &**t)));
        let etcd = self.world.server_as::<EtcdNode>(NodeId::Etcd);
        self.viewed = self.view_replica();
        let view = NodeId::master(self.viewed.unwrap_or(0));
        let master = self.world.server_as::<MasterNode>(view);
        let global = match &summed {
            Some(all) => all,
            None => master.map_or(&none, |m| m.heartbeat_counts()),
        };
        self.global_counts.take(Some("master"), global);
        let nodes: Vec<Option<&MasterNode>> = match replicas {
            0 | 1 => Vec::new(),
            _ => (0..replicas)
                .map(|k| self.world.server_as::<MasterNode>(NodeId::master(k)))
                .collect(),
        };
        let unnamed_401 = self.global_counts.total_of(401);
        // etcd's keys unchanged since the last sample: each instance's value is as read.
        let writes = etcd.map(EtcdNode::kv_writes);
        let etcd_same = writes.is_some() && writes == self.etcd_writes;
        self.etcd_writes = writes;
        // Once every instance was observed, only those `only` names are built again; the
        // rest are the last observation's, shared.
        let seen = self.observed.len() == self.instances.len();
        let todo: Vec<usize> = match only.filter(|_| seen) {
            Some(mut only) => {
                only.sort_unstable();
                only.dedup();
                only
            }
            None => (0..self.instances.len()).collect(),
        };
        let mut out = Vec::with_capacity(todo.len());
        // The instances whose observations are not the last sample's.
        let mut moved = Vec::new();
        for i in todo {
            let Some(inst) = self.instances.get_mut(i) else {
                continue;
            };
            // Read in place: the observer runs at every sample of every run, so it
            // copies no key or view it can read where it is.
            let etcd = match (etcd_same, &inst.last_key) {
                (true, Some(k)) => k.etcd.clone(),
                _ => etcd
                    .and_then(|e| e.value(inst.key.as_bytes()))
                    .map(|v| inst.incarnation_in(v)),
            };
            inst.ever_registered |= etcd.is_some();
            let entry = master.and_then(|m| m.instances().get_with_rev(&inst.register_addr));
            let exit = match inst.flag_error {
                true => Some(2),
                false => self.world.sidecars().get(i).and_then(|s| s.exited()),
            }
            .filter(|_| inst.started);
            let running = inst.started && exit.is_none();
            let master_rev = match nodes.is_empty() {
                true => entry.map(|(_, rev)| rev),
                false => Some(fold_revs(&nodes, &inst.register_addr, view)),
            };
            let key = ObsKey {
                etcd,
                master_rev,
                running,
                exit,
            };
            let unchanged = inst.last_key.as_ref() == Some(&key);
            if let (true, false, Some(last)) = (unchanged, cfg!(debug_assertions), &inst.last_obs) {
                out.push((i, last.clone()));
                continue;
            }
            let view = entry.map(|(v, _)| v);
            let heartbeats = match nodes.is_empty() {
                true => inst.counts.update(
                    view.map(|v| v.incarnation),
                    view.map_or(&none, |v| v.heartbeats),
                ),
                false => replicas_heartbeats(&nodes, inst),
            };
            let view = view.map(|v| (v, inst.incarnations.intern(v.incarnation)));
            let obs = InstanceObs::from_views(key.etcd.clone(), view, heartbeats, running, exit);
            // Debug builds take this path every time and check that an unchanged key
            // made an unchanged observation.
            debug_assert!(
                !unchanged || inst.last_obs.as_deref().is_some_and(|l| same_obs(l, &obs)),
                "instance {i}: same key, another observation"
            );
            inst.last_key = Some(key);
            let before = inst.last_obs.as_ref().map(Arc::as_ptr);
            let obs = inst.shared(obs);
            if before != Some(Arc::as_ptr(&obs)) {
                moved.push(i as u32);
            }
            out.push((i, obs));
        }
        let last_unnamed = self.observed.unnamed_401;
        self.observed = match seen {
            true => self.observed.with(out),
            false => out.into_iter().map(|(_, o)| o).collect(),
        };
        // What `observe::unnamed_401` answers: once some sidecar ran, one always had.
        let ran = last_unnamed.is_some() || self.observed.iter().any(|o| o.ran());
        self.observed.unnamed_401 = unnamed_401.filter(|_| ran);
        let last_masters = self.masters.clone();
        // The master replicas as etcd and each replica show them (the heartbeats accepted:
        // with one master the cluster's count, with several each replica's).
        let one = totals
            .is_empty()
            .then(|| self.global_counts.total_of(200).unwrap_or(0));
        let each = totals.iter().map(|t| t.get(&200).copied().unwrap_or(0));
        let (elected, loadmetrics) = match replicas {
            0 | 1 => (None, None),
            _ => self.elected_in_etcd(),
        };
        let accepted = one.into_iter().chain(each);
        let masters = Masters::share(&mut self.masters, elected, accepted, loadmetrics);
        let changed = !moved.is_empty()
            || !Arc::ptr_eq(&last_masters, &masters)
            || self.observed.unnamed_401 != last_unnamed;
        let instances = self.observed.clone();
        let mut sample = Sample::new(self.now_ms(), instances, self.routed.len(), masters);
        sample.changed = seen.then_some(moved);
        (sample, changed)
    }

    /// Each replica's heartbeat answers by status over the run (a restarted replica's
    /// count carries on), in replica order.
    fn replica_totals(&mut self) -> Vec<Arc<BTreeMap<u16, u64>>> {
        let replicas = self.master_cfgs.len();
        self.replica_counts
            .resize_with(replicas, Cumulative::default);
        let none = BTreeMap::new();
        let world = &self.world;
        self.replica_counts
            .iter_mut()
            .enumerate()
            .map(|(k, c)| {
                let counts = world
                    .server_as::<MasterNode>(NodeId::master(k))
                    .map_or(&none, |m| m.heartbeat_counts());
                c.update(Some("replica"), counts)
            })
            .collect()
    }

    /// The replica the MASTER key names, and the newest LOADMETRICS write's revision
    /// (read again only when etcd's keys changed).
    fn elected_in_etcd(&mut self) -> ElectedInEtcd {
        let Some(etcd) = self.world.server_as::<EtcdNode>(NodeId::Etcd) else {
            return (None, None);
        };
        let writes = etcd.kv_writes();
        if let Some((seen, elected)) = self.elected_seen {
            if seen == writes {
                return elected;
            }
        }
        let (master_key, loadmetrics_prefix, replicas) = &self.election_keys;
        let elected = etcd
            .value(master_key)
            .and_then(|v| replicas.iter().position(|name| name.as_bytes() == v));
        let loadmetrics = etcd.newest_under(loadmetrics_prefix);
        self.elected_seen = Some((writes, (elected, loadmetrics)));
        (elected, loadmetrics)
    }

    /// Run the world event by event up to `until_ms`, and answer the observation at the
    /// first event that changes it (`None`: none did; time then stands at the last
    /// event run, and [`SimCluster::advance_to`] takes it the rest of the way). The
    /// sample names that event: its number in the run ([`sim::World::events`]).
    pub fn next_change(&mut self, until_ms: u64) -> Option<Sample> {
        let until = Duration::from_millis(until_ms);
        while self.world.step_due(until) {
            let only = match self.changed_by_step() {
                Changed::Nothing => continue,
                Changed::Instances(i) => Some(i),
                Changed::Any => None,
            };
            self.timeline.set_now(self.now_ms());
            self.drain_records();
            self.take_routed();
            let (mut sample, changed) = self.observe_only(only);
            if changed {
                sample.event = Some(self.world.events());
                return Some(sample);
            }
        }
        None
    }

    /// The observation now if it differs from the last one (after an action: a verb
    /// may change what is observed without an event).
    pub fn change_now(&mut self) -> Option<Sample> {
        let (mut sample, changed) = self.observe_only(None);
        sample.event = Some(self.world.events());
        changed.then_some(sample)
    }

    /// What the event just run may have changed, from the nodes it ran and the counts
    /// of change etcd and the master keep.
    fn changed_by_step(&mut self) -> Changed {
        // Which replica's view is read changes with the replicas' own roles.
        let several = self.master_cfgs.len() > 1;
        if several && self.view_replica() != self.viewed {
            return Changed::Any;
        }
        let mut changed = Vec::new();
        // Something but the instances may have changed (the replicas' view, the unnamed
        // 401s).
        let mut observe = false;
        let mut k = 0;
        while let Some(&id) = self.world.stepped().get(k) {
            k += 1;
            let step = match id {
                NodeId::Sidecar(i) => {
                    let i = i as usize;
                    let exit = self.world.sidecars().get(i).and_then(|s| s.exited());
                    let seen = self.instances.get(i).and_then(|x| x.last_key.as_ref());
                    if seen.is_none_or(|k| k.exit.is_none() && exit.is_some()) {
                        changed.push(i);
                    }
                    continue;
                }
                NodeId::Etcd => self.etcd_changes(),
                NodeId::Master => self.master_changes(0),
                NodeId::MasterReplica(k) => self.master_changes(k as usize),
                _ => continue,
            };
            match step {
                Changed::Instances(i) => {
                    observe = true;
                    changed.extend(i);
                }
                Changed::Any => return Changed::Any,
                Changed::Nothing => {}
            }
        }
        Changed::of(changed, observe)
    }

    /// The instances whose etcd keys were written since the last look (none but the
    /// MASTER and LOADMETRICS keys: the replicas' view, which is observed anyway).
    fn etcd_changes(&mut self) -> Changed {
        let Some(etcd) = self.world.server_as::<EtcdNode>(NodeId::Etcd) else {
            return Changed::Any;
        };
        let now = (etcd.kv_writes(), etcd.revision());
        let Some((writes, revision)) = self.etcd_seen.replace(now) else {
            return Changed::Any;
        };
        if writes == now.0 {
            return Changed::Nothing;
        }
        let Some(keys) = etcd.keys_written_since(revision, now.0.saturating_sub(writes)) else {
            return Changed::Any;
        };
        let mut changed: Vec<usize> = Vec::new();
        let mut others = false;
        for key in keys {
            match self.key_index.get(key) {
                Some(&i) => changed.push(i),
                None => others = true,
            }
        }
        // Where only the replicas' view may have changed, it is observed with no instance.
        Changed::of(changed, others && self.master_cfgs.len() > 1)
    }

    /// Master replica `k`'s entries changed since the last look, as instances (none, if
    /// only its unnamed 401s did).
    fn master_changes(&mut self, k: usize) -> Changed {
        let Some(m) = self.world.server_as::<MasterNode>(NodeId::master(k)) else {
            return Changed::Any;
        };
        if self.master_seen.len() <= k {
            self.master_seen.resize(k + 1, (0, 0, None));
        }
        let (changes, removals) = m.instances().changes();
        let unnamed = m.heartbeat_counts().get(&401).copied();
        let Some(seen) = self.master_seen.get_mut(k) else {
            return Changed::Any;
        };
        let (seen_changes, seen_removals, seen_unnamed) = *seen;
        if (changes, removals, unnamed) == (seen_changes, seen_removals, seen_unnamed) {
            return Changed::Nothing;
        }
        *seen = (changes, removals, unnamed);
        // Counts that went back are a new process's.
        if changes < seen_changes {
            return Changed::Any;
        }
        let Some(removed) = m.instances().removed_since(seen_removals) else {
            return Changed::Any;
        };
        let (index, entries) = (&self.addr_index, m.instances());
        let instance = |name: &str| index.get(name).copied();
        let mut changed: Vec<usize> = match changes - seen_changes {
            0 => Vec::new(),
            // Most steps: one heartbeat, one entry stamped.
            1 => instance(entries.last_changed()).into_iter().collect(),
            _ => entries
                .changed_since(seen_changes)
                .filter_map(instance)
                .collect(),
        };
        changed.extend(removed.filter_map(instance));
        // New unnamed 401s are observed even with no instance changed.
        Changed::of(changed, unnamed != seen_unnamed)
    }
}

impl Changed {
    /// `instances`, or nothing if it names none and nothing else is to be observed.
    fn of(instances: Vec<usize>, observe_anyway: bool) -> Changed {
        match instances.is_empty() && !observe_anyway {
            true => Changed::Nothing,
            false => Changed::Instances(instances),
        }
    }
}

/// `a` and `b` hold the same values (a NaN equal to itself).
fn same_obs(a: &InstanceObs, b: &InstanceObs) -> bool {
    let bits = |o: &InstanceObs| o.gpu_cache.map(f64::to_bits);
    let rest = |o: &InstanceObs| InstanceObs {
        gpu_cache: None,
        ..o.clone()
    };
    bits(a) == bits(b) && rest(a) == rest(b)
}
