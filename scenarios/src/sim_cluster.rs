//! The scenario's cluster in virtual time: the same topology as
//! [`crate::real_cluster`], built in the `sim` crate's [`World`] instead of processes and
//! sockets; its [`crate::cluster::Cluster`] verbs are in [`crate::sim_verbs`]. Nothing
//! here is async or shared: the play loop owns it and only the loop moves its time
//! ([`SimCluster::advance_to`]).
//!
//! Every sidecar is configured by the flags real mode gives the process
//! ([`crate::settings`]) and parsed by the sidecar's own flag parser. Its peers are
//! named by URL only for that parser: in the world, a sidecar's vLLM is node `Vllm(i)`,
//! etcd is `Etcd` and the master `Master`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sidecar::config::Config;
use sidecar::core::{AfterRevoke, Registration};
use sim::etcd_node::EtcdNode;
use sim::log::Record;
use sim::master_node::MasterNode;
use sim::vllm_node::VllmNode;
use sim::{EventLog, NodeId, World};

use crate::fakes_config::{etcd_config, incarnation_of, master_replica_config, vllm_config};
use crate::observe::{Cumulative, Incarnation, Incarnations, InstanceObs, Observations};
use crate::settings::{Peers, SidecarSettings};
use crate::sidecar::LOG_EVENT;
use crate::timeline::{Source, Timeline};
use crate::topology::{EtcdNeed, MasterTopology, Topology};

/// One instance: its names, its sidecar's settings and what the observer keeps.
#[derive(Default)]
pub(crate) struct SimInstance {
    pub(crate) name: String,
    pub(crate) register_addr: String,
    pub(crate) key: String,
    /// The token its sidecar sends (a `sidecar_start` may change it).
    pub(crate) token: Option<String>,
    /// The sidecar was started at least once (else it is not "exited", only absent).
    pub(crate) started: bool,
    /// Its key was seen in etcd at least once (registering again is re-registering).
    pub(crate) ever_registered: bool,
    /// The sidecar's flags were refused (the process would have exited 2 at once).
    pub(crate) flag_error: bool,
    /// What the refusal said (the process's last words).
    pub(crate) flag_message: Option<String>,
    pub(crate) counts: Cumulative,
    /// With several master replicas: its heartbeat answers at each replica (their sum
    /// is its count, whichever replica answered).
    pub(crate) replica_counts: Vec<Cumulative>,
    pub(crate) incarnations: Incarnations,
    /// The last etcd value observed and the incarnation read from it (a value changes
    /// once per registration; it is sampled every few tens of milliseconds).
    pub(crate) last_value: Option<(Vec<u8>, Incarnation)>,
    /// What the last sample held of it.
    pub(crate) last_obs: Option<Arc<InstanceObs>>,
    /// What `last_obs` was made from (see [`ObsKey`]).
    pub(crate) last_key: Option<ObsKey>,
}

/// Everything an instance's observation is made from, as compared between samples:
/// equal keys make an equal [`InstanceObs`], so the last one is answered again without
/// reading the master's counts and building it anew.
#[derive(Clone, PartialEq)]
pub(crate) struct ObsKey {
    /// The incarnation in etcd (the same shared id while the value is unchanged).
    pub(crate) etcd: Option<Incarnation>,
    /// The master's stamp of its entry (`Instances::get_with_rev`), if it has one;
    /// with several replicas, the stamps of every replica's entry and which one is
    /// viewed, folded into one number.
    pub(crate) master_rev: Option<u64>,
    pub(crate) running: bool,
    pub(crate) exit: Option<i32>,
}

impl SimInstance {
    /// `obs` as a sample holds it: the last sample's if that one is equal.
    pub(crate) fn shared(&mut self, obs: InstanceObs) -> Arc<InstanceObs> {
        match &self.last_obs {
            Some(last) if **last == obs => last.clone(),
            _ => self.last_obs.insert(Arc::new(obs)).clone(),
        }
    }

    /// The incarnation in etcd value `v` (parsed once per distinct value).
    pub(crate) fn incarnation_in(&mut self, v: &[u8]) -> Incarnation {
        match &self.last_value {
            Some((seen, inc)) if seen.as_slice() == v => inc.clone(),
            _ => {
                let inc = self
                    .incarnations
                    .intern(&incarnation_of(&String::from_utf8_lossy(v)));
                self.last_value = Some((v.to_vec(), inc.clone()));
                inc
            }
        }
    }
}

/// What etcd says of the master replicas: the replica the MASTER key names, and the
/// newest LOADMETRICS write's revision.
pub(crate) type ElectedInEtcd = (Option<usize>, Option<i64>);

/// The whole cluster of one scenario in virtual time.
pub struct SimCluster {
    pub(crate) world: World,
    pub(crate) timeline: Arc<Timeline>,
    pub(crate) topology: Topology,
    pub(crate) namespace: String,
    pub(crate) overrides: Vec<(String, String)>,
    pub(crate) instances: Vec<SimInstance>,
    pub(crate) global_counts: Cumulative,
    /// The last sample's view of the master replicas.
    pub(crate) masters: Arc<crate::observe::Masters>,
    /// The last sample's instances (each also an instance's `last_obs`).
    pub(crate) observed: Observations,
    /// Each master replica's settings (a killed one starts again with them).
    pub(crate) master_cfgs: Vec<mock_master::Config>,
    /// Each replica's heartbeat answers over the run (a restarted one carries on).
    pub(crate) replica_counts: Vec<Cumulative>,
    /// etcd's count of key-value writes at the last sample: unchanged, every instance's
    /// value in etcd is what the last sample read.
    pub(crate) etcd_writes: Option<u64>,
    /// Each master replica's counts of change (stamps, removals, unnamed 401s) when its
    /// entries were last looked at for changes ([`mock_master::Instances::changes`]).
    pub(crate) master_seen: Vec<(u64, u64, Option<u64>)>,
    /// etcd's count of writes when the MASTER and LOADMETRICS keys were last read, and
    /// what they showed (the elected replica, the newest LOADMETRICS revision).
    pub(crate) elected_seen: Option<(u64, ElectedInEtcd)>,
    /// The MASTER key, the LOADMETRICS prefix, and each replica's service name (what
    /// the MASTER key holds), in replica order.
    pub(crate) election_keys: (Vec<u8>, Vec<u8>, Vec<String>),
    /// Instance index by registered address (the name the master knows it by).
    pub(crate) addr_index: HashMap<String, usize>,
    /// The master replica whose view the last observation read.
    pub(crate) viewed: Option<usize>,
    /// Instance index by etcd key.
    pub(crate) key_index: HashMap<Vec<u8>, usize>,
    /// etcd's count of writes and its revision when its keys were last looked at for
    /// changes.
    pub(crate) etcd_seen: Option<(u64, i64)>,
    /// Instance index of each request the master routed, oldest first.
    pub(crate) routed: Vec<usize>,
}

/// Why a topology cannot run in virtual time, if it cannot.
pub fn unsupported(topo: &Topology) -> Option<String> {
    let real = matches!(topo.etcd, EtcdNeed::Real | EtcdNeed::Cluster3);
    real.then(|| "needs a real etcd (processes), which the simulation does not run".into())
}

impl SimCluster {
    /// Build the topology at virtual time zero; sidecars start if the topology says so.
    pub fn start(
        name: &str,
        topo: &Topology,
        seed: u64,
        overrides: &[(String, String)],
        timeline: Arc<Timeline>,
        record_events: bool,
    ) -> Result<SimCluster, String> {
        let namespace = format!("{}-{}", topo.namespace.trim_matches('/'), name);
        // A run whose timeline nobody reads (no report, no condition on events) only
        // counts the world's events: building them is most of a short run's cost.
        let log = match record_events {
            true => EventLog::recording(),
            false => EventLog::counting(),
        };
        let mut world = World::new(seed, log);
        if let Some(d) = topo.link_delay {
            world.set_link_delay(d.0);
        }
        let etcd = EtcdNode::new(etcd_config(topo), seed);
        world.add_server(NodeId::Etcd, Box::new(etcd));
        let master_cfgs: Vec<mock_master::Config> = (0..topo.master.replicas.max(1))
            .map(|k| master_replica_config(topo, &namespace, k))
            .collect();
        let mut instances = Vec::new();
        let (mut addr_index, mut key_index) = (HashMap::new(), HashMap::new());
        for i in 0..topo.instances {
            let spec = topo.instance(i);
            let register_addr = sim_addr(i);
            let key = topo.instance_key(&namespace, &register_addr);
            addr_index.insert(register_addr.clone(), i);
            key_index.insert(key.as_bytes().to_vec(), i);
            instances.push(SimInstance {
                key,
                name: spec.name,
                register_addr,
                token: spec.token,
                ..SimInstance::default()
            });
        }
        let (master_key, load_prefix) = Topology::election_keys(&namespace);
        let replicas = (0..topo.master.replicas).map(MasterTopology::service_name);
        let election_keys = (
            master_key.into_bytes(),
            load_prefix.into_bytes(),
            replicas.collect(),
        );
        let mut cluster = SimCluster {
            world,
            timeline,
            topology: topo.clone(),
            namespace,
            overrides: overrides.to_vec(),
            instances,
            global_counts: Cumulative::default(),
            masters: Arc::default(),
            observed: Observations::default(),
            master_cfgs,
            replica_counts: Vec::new(),
            etcd_writes: None,
            master_seen: Vec::new(),
            elected_seen: None,
            election_keys,
            addr_index,
            key_index,
            viewed: None,
            etcd_seen: None,
            routed: Vec::new(),
        };
        let mut hosts = BTreeMap::new();
        for k in 0..cluster.master_cfgs.len() {
            let id = NodeId::master(k);
            let master = cluster.new_master(k, Duration::ZERO);
            cluster.world.add_server(id, Box::new(master));
            hosts.insert(MasterTopology::replica_host(k), id);
        }
        if cluster.master_cfgs.len() > 1 {
            cluster.world.set_master_hosts(hosts);
        }
        // The stopped slots' configuration, the same for every instance: parsed once.
        let placeholder =
            Config::from_flags(["--register-addr", "10.0.0.0:8000"]).map_err(|e| e.to_string())?;
        for i in 0..cluster.instances.len() {
            let mut vllm = VllmNode::new(vllm_config(&cluster.topology, i, seed), Duration::ZERO)?;
            // Scenario clusters run little load: most scrapes find the page unchanged.
            vllm.keep_last_page();
            cluster
                .world
                .add_server(NodeId::Vllm(node_index(i)), Box::new(vllm));
            cluster.world.add_stopped_sidecar(&placeholder);
            if cluster.topology.instance(i).start_sidecar {
                cluster.spawn_sidecar(i);
            }
        }
        cluster.drain_records();
        Ok(cluster)
    }

    /// Instance `i`'s sidecar configuration: real mode's flags, the sidecar's parser.
    pub(crate) fn sidecar_config(&self, i: usize) -> Result<Config, String> {
        let inst = self.instances.get(i).ok_or("no such instance")?;
        let peers = Peers {
            // One URL per endpoint (`etcd.sim`, `etcd-1.sim`, ...): each is its own link
            // to the one simulated etcd (`NodeId::etcd_endpoint`).
            etcd: (0..self.topology.etcd_endpoints.max(1))
                .map(|k| match k {
                    0 => "http://etcd.sim:2379".to_string(),
                    k => format!("http://etcd-{k}.sim:2379"),
                })
                .collect::<Vec<_>>()
                .join(","),
            vllm: format!("http://vllm-{}.sim:8000", inst.name),
            master: "http://master.sim:9000".into(),
            namespace: &self.namespace,
            register_addr: &inst.register_addr,
            instance_name: &inst.name,
            token: inst.token.as_deref(),
        };
        let flags = SidecarSettings::new(&self.topology, &peers, &self.overrides).our_flags();
        Config::from_flags(flags).map_err(|e| format!("sidecar flags of {}: {e}", inst.name))
    }

    /// Instance `i`'s vLLM node.
    pub(crate) fn vllm(&mut self, i: usize) -> Result<&mut VllmNode, String> {
        self.world
            .server_as_mut::<VllmNode>(NodeId::Vllm(node_index(i)))
            .ok_or_else(|| format!("no vLLM node for instance {i}"))
    }

    pub(crate) fn etcd(&mut self) -> Result<&mut EtcdNode, String> {
        self.world
            .server_as_mut::<EtcdNode>(NodeId::Etcd)
            .ok_or_else(|| "no etcd node".to_string())
    }

    /// Master replica `k` as a new process at `now`, knowing where each instance's
    /// vLLM is.
    pub(crate) fn new_master(&self, k: usize, now: Duration) -> MasterNode {
        let cfg = self.master_cfgs.get(k).cloned().unwrap_or_default();
        let mut master = MasterNode::new(cfg, now);
        for (i, inst) in self.instances.iter().enumerate() {
            master.route(&inst.register_addr, NodeId::Vllm(node_index(i)));
        }
        master
    }

    /// Master replica `k`, while its process runs.
    fn replica(&self, k: usize) -> Option<&MasterNode> {
        self.world.server_as::<MasterNode>(NodeId::master(k))
    }

    /// The running replica that holds itself master (one replica: itself).
    pub(crate) fn elected_replica(&self) -> Option<usize> {
        if self.master_cfgs.len() < 2 {
            return Some(0);
        }
        (0..self.master_cfgs.len()).find(|&k| self.replica(k).is_some_and(MasterNode::is_master))
    }

    /// The replica whose view of the instances the observer reads: the elected one,
    /// else the first running one.
    pub(crate) fn view_replica(&self) -> Option<usize> {
        let running = |k: &usize| self.replica(*k).is_some();
        self.elected_replica()
            .or_else(|| (0..self.master_cfgs.len()).find(running))
    }

    /// Start instance `i`'s sidecar process now with its current flags; flags its
    /// parser refuses make it exit 2 at once, as the binary does (logged as it logs).
    pub(crate) fn spawn_sidecar(&mut self, i: usize) {
        let config = self.sidecar_config(i);
        let Some(inst) = self.instances.get_mut(i) else {
            return;
        };
        inst.started = true;
        match config {
            Ok(config) => {
                inst.flag_error = false;
                self.world.restart_sidecar(node_index(i), &config);
            }
            Err(e) => {
                inst.flag_error = true;
                inst.flag_message = Some(e.clone());
                let detail = serde_json::json!({ "message": e, "exit": 2 });
                self.world.note(&format!("sidecar/{i}"), "note", detail);
            }
        }
    }

    /// Virtual milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.world.now().as_millis()).unwrap_or(u64::MAX)
    }

    /// Run the world up to `ms`; its events join the timeline.
    pub fn advance_to(&mut self, ms: u64) {
        let to = Duration::from_millis(ms).max(self.world.now());
        self.world.run_until(to);
        self.timeline.set_now(self.now_ms());
        self.drain_records();
        self.take_routed();
    }

    /// The master's new routing decisions, as instance indices.
    pub(crate) fn take_routed(&mut self) {
        let Some(m) = self.world.server_as::<MasterNode>(NodeId::Master) else {
            return;
        };
        let new = m.routed().get(self.routed.len()..).unwrap_or(&[]);
        self.routed.extend(new.iter().filter_map(|n| match n {
            NodeId::Vllm(i) => Some(*i as usize),
            _ => None,
        }));
    }

    /// Move the world's events into the timeline, named as real mode names sources.
    pub(crate) fn drain_records(&mut self) {
        use mock_kit::EventSink;
        for r in self.world.take_records() {
            let at_ms = u64::try_from(r.at.as_millis()).unwrap_or(u64::MAX);
            let (source, kind, detail) = self.translate(r);
            self.timeline
                .emit(mock_kit::Event::at(at_ms, source, kind, detail));
        }
    }

    /// A record as a timeline event: source names as in real mode (`sidecar:i0`,
    /// `vllm:i0`, `etcd`, `master`, `link`); a server's note `{kind: detail}` becomes an
    /// event of that kind; a sidecar's note becomes a `log` event.
    fn translate(&self, r: Record) -> (String, String, Value) {
        let name_of = |i: &str| -> String {
            i.parse::<usize>()
                .ok()
                .and_then(|i| self.instances.get(i))
                .map_or_else(|| i.to_string(), |x| x.name.clone())
        };
        let source = match r.node.split_once('/') {
            Some(("sidecar", i)) => Source::Sidecar(&name_of(i)).to_string(),
            Some(("vllm", i)) => Source::Vllm(&name_of(i)).to_string(),
            _ if r.node == "links" => Source::Link.to_string(),
            _ => r.node.clone(),
        };
        let (kind, detail) = match (r.kind.as_str(), r.detail) {
            ("note", Value::Object(map)) if map.len() == 1 => map
                .into_iter()
                .next()
                .unwrap_or_else(|| ("note".to_string(), Value::Null)),
            ("note", d) if r.node.starts_with("sidecar/") => (LOG_EVENT.to_string(), d),
            (k, d) => (k.to_string(), d),
        };
        (source, kind, detail)
    }

    /// What instance `i`'s sidecar is doing, for the coverage of a fault search.
    pub fn phase(&self, i: usize) -> &'static str {
        let (Some(node), Some(inst)) = (self.world.sidecars().get(i), self.instances.get(i)) else {
            return "not_running";
        };
        if !inst.started || inst.flag_error || node.exited().is_some() {
            return "not_running";
        }
        if self.world.is_paused(node.id()) {
            return "paused";
        }
        let again = |replacing: bool| {
            if replacing || inst.ever_registered {
                "re_registering"
            } else {
                "registering"
            }
        };
        match node.registration() {
            Registration::Registered(_) => "registered",
            Registration::Granting { replacing, .. } | Registration::Putting { replacing, .. } => {
                again(replacing.is_some())
            }
            Registration::Revoking { then, .. } => match then {
                AfterRevoke::Exit { .. } => "shutting_down",
                AfterRevoke::Drain => "draining",
                AfterRevoke::Asleep => "asleep",
                AfterRevoke::Register => "re_registering",
            },
            Registration::Drained => "draining",
            Registration::Asleep => "asleep",
            Registration::Exited => "shutting_down",
            Registration::Unregistered { .. } => {
                if node.core().status().healthy {
                    again(false)
                } else {
                    "waiting_for_health"
                }
            }
        }
    }
}

/// Instance `i`'s address as the master and etcd know it (never dialled).
fn sim_addr(i: usize) -> String {
    let [.., a, b, c] = i.to_be_bytes();
    format!("10.{a}.{b}.{c}:8000")
}

/// The world's node index of instance `i`.
pub(crate) fn node_index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
