//! The mock cluster: etcd (fake, real, a real 3-member cluster, or an existing one), the
//! fake master's replicas, and N pairs of fake vLLM + real `vllm-sidecar` process —
//! every link between them through its own [`Proxy`], so any link can fail alone.
//!
//! ```text
//!   sidecar iN ──proxy──▶ etcd (one proxy per endpoint)     master k ──proxy──▶ etcd
//!   sidecar iN ──proxy──▶ master k (one proxy per replica)  master k ──direct─▶ vLLM (probes)
//!   sidecar iN ──proxy──▶ vLLM iN
//! ```
//!
//! Master replica `k` listens on `127.0.0.<k+1>` ([`MasterTopology::replica_host`]), and
//! instance `i`'s proxy to it on `127.0.0.<k+1>:P_i`, one port `P_i` for every replica.
//! The sidecar is configured with replica 0's proxy (`http://127.0.0.1:P_i`); a sidecar
//! that follows the MASTER key (`127.0.0.<k+1>:8889`) keeps the port and posts to
//! `127.0.0.<k+1>:P_i`, the proxy to replica `k`. Linux answers all of `127/8` on
//! loopback, so no address needs setting up.
//!
//! The observer reads etcd and the masters directly (never through a proxy) so link
//! faults never blind it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_kit::Shutdown;

use crate::cluster::{Cluster, Signal};
use crate::etcd_view::Gateway;
use crate::fakes_config::{etcd_config, incarnation_of, master_replica_config, vllm_config};
use crate::load::{LoadGen, Routed};
use crate::observe::{
    sum_counts, unnamed_401, Cumulative, Incarnations, InstanceObs, Observations, Sample,
};
use crate::profile::Profile;
use crate::proxy::Proxy;
use crate::real_etcd::RealEtcd;
use crate::settings::{Peers, SidecarSettings};
use crate::sidecar::SidecarProc;
use crate::timeline::{Source, Timeline};
use crate::topology::{EtcdNeed, MasterTopology, Topology};

/// Which etcd the runner was asked for (`--etcd`, `--etcd-cluster`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EtcdChoice {
    /// The in-process fake etcd (`--etcd fake`, the default).
    #[default]
    Fake,
    /// The Debian `etcd` binary on loopback, one member (`--etcd real`).
    Real,
    /// A real 3-member cluster for every scenario that takes any etcd.
    Real3,
    /// An existing etcd (its client URLs).
    Url(Vec<String>),
}

impl std::str::FromStr for EtcdChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fake" => Ok(EtcdChoice::Fake),
            "real" => Ok(EtcdChoice::Real),
            u if u.starts_with("http://") || u.starts_with("https://") => Ok(EtcdChoice::Url(
                u.split(',')
                    .map(|x| x.trim().trim_end_matches('/').to_string())
                    .collect(),
            )),
            other => Err(format!(
                "--etcd `{other}`: use fake, real or an http:// URL"
            )),
        }
    }
}

impl std::fmt::Display for EtcdChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdChoice::Fake => f.write_str("fake"),
            EtcdChoice::Real => f.write_str("real"),
            EtcdChoice::Real3 => f.write_str("real --etcd-cluster 3"),
            EtcdChoice::Url(u) => f.write_str(&u.join(",")),
        }
    }
}

/// What the etcd of one scenario run actually is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdKind {
    /// The in-process fake etcd, with its fault API.
    Fake,
    /// One real etcd member on loopback.
    Real,
    /// A real three-member cluster on loopback, whose members can be killed.
    Cluster3,
    /// An existing etcd the runner was pointed at (`--etcd <URL>`).
    External,
}

impl EtcdKind {
    /// Resolve the scenario's need against the runner's choice; `Err` is a skip reason.
    pub fn resolve(need: EtcdNeed, choice: &EtcdChoice) -> Result<EtcdKind, String> {
        // Real etcd, unless it cannot run here (why not is the skip reason).
        let real = |k: EtcdKind| local_etcd::unavailable().map_or(Ok(k), Err);
        match (need, choice) {
            (EtcdNeed::Fake, _) => Ok(EtcdKind::Fake),
            (EtcdNeed::Cluster3, _) => real(EtcdKind::Cluster3),
            (EtcdNeed::Real | EtcdNeed::Any, EtcdChoice::Url(_)) => Ok(EtcdKind::External),
            (EtcdNeed::Real | EtcdNeed::Any, EtcdChoice::Real3) => real(EtcdKind::Cluster3),
            (EtcdNeed::Real, _) | (EtcdNeed::Any, EtcdChoice::Real) => real(EtcdKind::Real),
            (EtcdNeed::Any, EtcdChoice::Fake) => Ok(EtcdKind::Fake),
        }
    }

    /// The kind as reports name it: `fake`, `real`, `real 3-member cluster`, `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            EtcdKind::Fake => "fake",
            EtcdKind::Real => "real",
            EtcdKind::Cluster3 => "real 3-member cluster",
            EtcdKind::External => "external",
        }
    }
}

pub(crate) enum Etcd {
    Fake(mock_etcd::MockEtcd),
    Real(tokio::sync::Mutex<RealEtcd>),
    External,
}

/// Settings of the cluster beyond the scenario file.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Which etcd the runner was asked for.
    pub etcd: EtcdChoice,
    /// Which sidecar runs, and how it takes its settings.
    pub profile: Arc<Profile>,
    /// Flags that replace (or add to) every sidecar's flags: a deliberately wrong
    /// configuration for mutation tests.
    pub sidecar_overrides: Vec<(String, String)>,
}

pub(crate) struct Instance {
    pub(crate) name: String,
    pub(crate) register_addr: String,
    pub(crate) key: String,
    pub(crate) vllm: mock_vllm::MockVllm,
    pub(crate) etcd_links: Vec<Proxy>,
    /// One proxy per master replica, replica order, all on one port.
    pub(crate) master_proxies: Vec<Proxy>,
    pub(crate) vllm_link: Proxy,
    pub(crate) sidecar: Option<SidecarProc>,
    token: Option<String>,
    counts: ReplicaCounts,
    incarnations: Incarnations,
}

/// One instance's heartbeat answers over the run, as each master replica counted them.
#[derive(Debug, Clone)]
struct ReplicaCounts {
    counts: Vec<Cumulative>,
    /// What `counts` answered last, per replica.
    seen: Vec<Arc<BTreeMap<u16, u64>>>,
}

impl ReplicaCounts {
    fn new(replicas: usize) -> Self {
        ReplicaCounts {
            counts: vec![Cumulative::default(); replicas],
            seen: vec![Arc::default(); replicas],
        }
    }

    /// The answers over the run, given replica `k`'s view now (its incarnation and
    /// counts): with several replicas, the sum of each one's count as last seen, so the
    /// observer moving to another replica (and back) neither drops nor counts anything
    /// twice. One replica answers its [`Cumulative`] as it is.
    fn update(
        &mut self,
        k: usize,
        incarnation: Option<&str>,
        counts: &BTreeMap<u16, u64>,
    ) -> Arc<BTreeMap<u16, u64>> {
        let (Some(c), Some(seen)) = (self.counts.get_mut(k), self.seen.get_mut(k)) else {
            return Arc::default();
        };
        *seen = c.update(incarnation, counts);
        Arc::new(sum_counts(self.seen.iter().map(|c| &**c)))
    }
}

/// A running cluster for one scenario.
pub struct RealCluster {
    /// The run's merged event timeline.
    pub timeline: Arc<Timeline>,
    /// What the run's etcd actually is.
    pub kind: EtcdKind,
    pub(crate) seed: u64,
    pub(crate) topology: Topology,
    opts: ClusterOptions,
    /// The etcd key namespace of this run: the topology's, the scenario name and a
    /// per-run suffix.
    namespace: String,
    pub(crate) etcd: Etcd,
    etcd_urls: Vec<String>,
    /// The master's replicas, replica order (one when the topology elects nothing).
    pub(crate) masters: Vec<MasterReplica>,
    /// The masters' links to etcd (one per etcd endpoint), shared by every replica.
    pub(crate) master_links: Vec<Proxy>,
    pub(crate) instances: Vec<Instance>,
    gateway: Gateway,
    pub(crate) load: Mutex<Vec<LoadGen>>,
    pub(crate) routed: Arc<Routed>,
    pub(crate) stop: Shutdown,
    /// The observer's last successful read of a real etcd.
    /// (value, mod revision) by key.
    last_etcd: HashMap<String, (String, i64)>,
    /// The last sample's view of the master replicas.
    masters_seen: Arc<crate::observe::Masters>,
    /// The master token set by an action (`None`: none was, the topology's holds): a
    /// replica started again takes it, as a service configuration.
    pub(crate) master_token_set: Option<Option<String>>,
}

/// One master replica: its settings and its process (a fake run in-process).
pub(crate) struct MasterReplica {
    /// Its settings, with the address it was first bound to, so a killed replica starts
    /// again where the sidecars' proxies lead.
    cfg: mock_master::Config,
    pub(crate) master: mock_master::MockMaster,
    /// False once killed, until started again.
    pub(crate) running: bool,
    /// Its heartbeat answers over the run, by status: a process started again counts
    /// from 0, and this carries on from the killed one's count.
    counts: Cumulative,
    /// Fresh starts so far: names the process to `counts`, so the new one's counts are
    /// taken as new rather than as the old one's going down.
    generation: u64,
}

impl MasterReplica {
    /// Start a replica from `cfg` (port 0 in `cfg.listen`: any free port, kept after).
    async fn start(mut cfg: mock_master::Config, timeline: &Arc<Timeline>) -> Result<Self, String> {
        let master = mock_master::start(cfg.clone(), timeline.source(Source::Master))
            .await
            .map_err(io("starting fake master"))?;
        cfg.listen = master.addr();
        Ok(MasterReplica {
            cfg,
            master,
            running: true,
            counts: Cumulative::default(),
            generation: 0,
        })
    }

    /// Kill the process: it stops serving and renewing (its leases run out in etcd).
    pub(crate) async fn kill(&mut self) {
        self.master.stop().await;
        self.running = false;
    }

    /// Start a killed replica again on its address, with its settings (and the token
    /// now in force, if `token` says one was set since). The old listener is closed;
    /// the port is retried for a moment in case its socket is still being released.
    pub(crate) async fn start_again(
        &mut self,
        token: Option<Option<String>>,
        timeline: &Arc<Timeline>,
    ) -> Result<(), String> {
        if let Some(t) = token {
            self.cfg.token = t;
        }
        let (listen, mut tries) = (self.cfg.listen, 0);
        self.master = loop {
            match mock_master::start(self.cfg.clone(), timeline.source(Source::Master)).await {
                Ok(m) => break m,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 40 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(format!("starting master replica on {listen} again: {e}")),
            }
        };
        self.running = true;
        self.generation += 1;
        Ok(())
    }

    /// Its heartbeat answers over the run (a killed replica's stay as they were).
    fn counts(&mut self) -> Arc<BTreeMap<u16, u64>> {
        let generation = self.generation.to_string();
        let now = self.master.heartbeat_counts();
        self.counts.update(Some(&generation), &now)
    }
}

/// How many times a set of master proxies is bound again on another port when one of
/// the replicas' hosts has the first one's port taken.
const PROXY_PORT_TRIES: usize = 8;

/// What the cluster's proxies are made with: the seed of each, drawn in turn from the
/// run's seed, and the timeline their events go to.
struct Links<'a> {
    seed: u64,
    timeline: &'a Arc<Timeline>,
}

impl Links<'_> {
    /// A proxy named `name` on `listen` (port 0: any free port), forwarding to `target`.
    async fn open(
        &mut self,
        name: &str,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> std::io::Result<Proxy> {
        self.seed = self.seed.wrapping_add(1442695040888963407);
        let events = self.timeline.source(Source::Link);
        Proxy::start(name, listen, target, self.seed, events).await
    }

    /// A proxy on loopback named `name`, forwarding to `target`.
    async fn link(&mut self, name: &str, target: SocketAddr) -> Result<Proxy, String> {
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        self.open(name, listen, target).await.map_err(io("proxy"))
    }

    /// `from`'s links to etcd: one proxy `<from>->etcd#<k>` to each endpoint `k`.
    async fn etcd(&mut self, from: &str, targets: &[SocketAddr]) -> Result<Vec<Proxy>, String> {
        let mut out = Vec::with_capacity(targets.len());
        for (k, t) in targets.iter().enumerate() {
            out.push(self.link(&format!("{from}->etcd#{k}"), *t).await?);
        }
        Ok(out)
    }

    /// Instance `name`'s proxies to each master replica (`targets`, replica order):
    /// replica 0's on `127.0.0.1` at a free port, each other's on its host at the same
    /// port.
    async fn masters(&mut self, name: &str, targets: &[SocketAddr]) -> Result<Vec<Proxy>, String> {
        let mut last = String::from("no master replicas");
        'tries: for _ in 0..PROXY_PORT_TRIES {
            let mut out: Vec<Proxy> = Vec::with_capacity(targets.len());
            for (k, t) in targets.iter().enumerate() {
                let label = match targets.len() {
                    1 => format!("{name}->master"),
                    _ => format!("{name}->master#{k}"),
                };
                let port = out.first().map_or(0, |p| p.addr().port());
                let listen = SocketAddr::new(replica_ip(k)?, port);
                match self.open(&label, listen, *t).await {
                    Ok(p) => out.push(p),
                    Err(e) => {
                        out.iter().for_each(Proxy::stop);
                        last = format!("proxy on {listen}: {e}");
                        continue 'tries;
                    }
                }
            }
            return Ok(out);
        }
        Err(last)
    }
}

/// Master replica `k`'s loopback host ([`MasterTopology::replica_host`]).
fn replica_ip(k: usize) -> Result<std::net::IpAddr, String> {
    MasterTopology::replica_host(k)
        .parse()
        .map_err(|e| format!("master replica {k}'s host: {e}"))
}

/// The URLs of `proxies`, comma-separated.
fn urls(proxies: &[Proxy]) -> String {
    proxies.iter().map(Proxy::url).collect::<Vec<_>>().join(",")
}

/// An error as a message that says what was being done: `<what>: <error>`.
pub(crate) fn io<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn addr_of(url: &str) -> Result<SocketAddr, String> {
    let hostport = url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or("");
    use std::net::ToSocketAddrs;
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("cannot resolve etcd endpoint `{url}`"))
}

impl RealCluster {
    /// Start everything the scenario's topology asks for. Sidecars start if the topology
    /// says so.
    pub async fn start(
        name: &str,
        topo: &Topology,
        seed: u64,
        kind: EtcdKind,
        opts: ClusterOptions,
        timeline: Arc<Timeline>,
    ) -> Result<RealCluster, String> {
        // A unique namespace per run: runs sharing an external etcd never see each other.
        let namespace = format!(
            "{}-{}-{:x}",
            topo.namespace.trim_matches('/'),
            name,
            seed ^ (timeline.t0_ms() << 8) ^ u64::from(std::process::id())
        );
        let (targets, etcd): (Vec<SocketAddr>, Etcd) = match kind {
            EtcdKind::Fake => {
                let e = mock_etcd::start(etcd_config(topo), timeline.source(Source::Etcd))
                    .await
                    .map_err(io("starting fake etcd"))?;
                (vec![e.addr()], Etcd::Fake(e))
            }
            EtcdKind::Real | EtcdKind::Cluster3 => {
                let n = if kind == EtcdKind::Cluster3 { 3 } else { 1 };
                let r = RealEtcd::start(n, timeline.source(Source::Etcd))
                    .await
                    .map_err(io("starting real etcd"))?;
                (r.client_addrs(), Etcd::Real(tokio::sync::Mutex::new(r)))
            }
            EtcdKind::External => {
                let EtcdChoice::Url(urls) = &opts.etcd else {
                    return Err("external etcd without a URL".into());
                };
                let addrs = urls.iter().map(|u| addr_of(u));
                (addrs.collect::<Result<_, _>>()?, Etcd::External)
            }
        };
        let etcd_urls: Vec<String> = targets.iter().map(|a| format!("http://{a}")).collect();
        let mut links = Links {
            seed: seed.wrapping_mul(6364136223846793005),
            timeline: &timeline,
        };
        // Sidecars get `etcd_endpoints` endpoints; with several members, one per member.
        let endpoints = match targets.len() {
            1 => topo.etcd_endpoints,
            members => members,
        };
        let endpoint_targets: Vec<SocketAddr> =
            targets.iter().copied().cycle().take(endpoints).collect();

        let master_links = links.etcd("master", &targets).await?;
        // Replica 0 first: with several, it is the likeliest to win the first election.
        let mut masters = Vec::new();
        for k in 0..topo.master.replicas.max(1) {
            let cfg = mock_master::Config {
                listen: SocketAddr::new(replica_ip(k)?, 0),
                etcd_endpoints: master_links.iter().map(|p| p.url()).collect(),
                ..master_replica_config(topo, &namespace, k)
            };
            masters.push(MasterReplica::start(cfg, &timeline).await?);
        }
        let master_addrs: Vec<SocketAddr> = masters.iter().map(|m| m.master.addr()).collect();

        let mut instances = Vec::new();
        for (i, spec) in (0..topo.instances).map(|i| (i, topo.instance(i))) {
            let name = spec.name;
            let events = timeline.source(Source::Vllm(&name));
            let vllm = mock_vllm::start(vllm_config(topo, i, seed), events)
                .await
                .map_err(io("starting fake vLLM"))?;
            let etcd_links = links.etcd(&name, &endpoint_targets).await?;
            let master_proxies = links.masters(&name, &master_addrs).await?;
            let vllm_link = links.link(&format!("{name}->vllm"), vllm.addr()).await?;
            let register_addr = vllm.addr().to_string();
            instances.push(Instance {
                name,
                key: topo.instance_key(&namespace, &register_addr),
                register_addr,
                vllm,
                etcd_links,
                master_proxies,
                vllm_link,
                sidecar: None,
                token: spec.token,
                counts: ReplicaCounts::new(master_addrs.len()),
                incarnations: Incarnations::default(),
            });
        }
        let mut cluster = RealCluster {
            timeline,
            kind,
            seed,
            topology: topo.clone(),
            opts,
            namespace,
            etcd,
            gateway: Gateway::new(etcd_urls.clone()),
            etcd_urls,
            masters,
            master_links,
            instances,
            load: Mutex::new(Vec::new()),
            routed: Arc::new(Routed::default()),
            stop: Shutdown::new(),
            last_etcd: HashMap::new(),
            masters_seen: Arc::default(),
            master_token_set: None,
        };
        for i in (0..topo.instances).filter(|i| topo.instance(*i).start_sidecar) {
            cluster.start_sidecar(i, None)?;
        }
        Ok(cluster)
    }

    /// Instance `i`'s sidecar settings, overrides applied.
    fn sidecar_settings(&self, i: usize) -> Result<SidecarSettings, String> {
        let inst = self.instances.get(i).ok_or("no such instance")?;
        let peers = Peers {
            etcd: urls(&inst.etcd_links),
            vllm: inst.vllm_link.url(),
            master: inst
                .master_proxies
                .first()
                .map(Proxy::url)
                .ok_or("no master proxy")?,
            namespace: &self.namespace,
            register_addr: &inst.register_addr,
            instance_name: &inst.name,
            token: inst.token.as_deref(),
        };
        let overrides = &self.opts.sidecar_overrides;
        Ok(SidecarSettings::new(&self.topology, &peers, overrides))
    }

    /// Start instance `i`'s sidecar as the profile says (with another token, if given).
    pub(crate) fn start_sidecar(&mut self, i: usize, token: Option<String>) -> Result<(), String> {
        if let (Some(t), Some(inst)) = (token, self.instances.get_mut(i)) {
            inst.token = Some(t);
        }
        let launch = self.opts.profile.launch(&self.sidecar_settings(i)?)?;
        let inst = self.instances.get_mut(i).ok_or("no such instance")?;
        if inst.sidecar.as_ref().is_some_and(SidecarProc::running) {
            return Err(format!("sidecar {} is already running", inst.name));
        }
        let events = self.timeline.source(Source::Sidecar(&inst.name));
        let proc = SidecarProc::spawn(&launch, events)
            .map_err(|e| format!("spawning {}: {e}", launch.program.display()))?;
        inst.sidecar = Some(proc);
        Ok(())
    }

    /// Every endpoint, for `scenarios up` and reports.
    pub fn endpoints(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("etcd".to_string(), self.etcd_urls.join(",")),
            (
                "etcd namespace".to_string(),
                mock_master::normalize_namespace(&self.namespace),
            ),
        ];
        match self.masters.as_slice() {
            [one] => v.push(("master".to_string(), one.master.url())),
            several => {
                for (k, m) in several.iter().enumerate() {
                    v.push((format!("master replica {k}"), m.master.url()));
                }
            }
        }
        for inst in &self.instances {
            let name = &inst.name;
            v.extend([
                (format!("{name} vLLM"), inst.vllm.url()),
                (format!("{name} vLLM (via proxy)"), inst.vllm_link.url()),
                (
                    format!("{name} master (via proxy)"),
                    urls(&inst.master_proxies),
                ),
                (format!("{name} etcd (via proxy)"), urls(&inst.etcd_links)),
                (format!("{name} key"), inst.key.clone()),
            ]);
        }
        v
    }

    /// One observation of the whole cluster. Instances are seen as the elected running
    /// master replica sees them (else the first running one); with several replicas,
    /// which is elected comes from the MASTER key in etcd, and each replica's accepted
    /// heartbeats from that replica.
    pub async fn observe(&mut self) -> Sample {
        let t_ms = self.timeline.now();
        let several = self.masters.len() > 1;
        let ns = mock_master::normalize_namespace(&self.namespace);
        let (master_key, load_prefix) = Topology::election_keys(&self.namespace);
        if !matches!(self.etcd, Etcd::Fake(_)) {
            match self.gateway.range_prefix(&format!("{ns}XLLM:")).await {
                Ok(kvs) => {
                    let kvs = kvs.into_iter();
                    self.last_etcd = kvs
                        .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
                        .collect();
                }
                // An unreadable etcd (killed member, overload) is not an empty one:
                // keep the last view rather than report every key gone.
                Err(e) => self
                    .timeline
                    .source(Source::Observer)
                    .emit("etcd_read_failed", serde_json::json!({"error": e})),
            }
        }
        // A key's value as etcd holds it (as last read, for a real one).
        let (etcd, last_etcd) = (&self.etcd, &self.last_etcd);
        let etcd_value = |key: &str| match etcd {
            Etcd::Fake(e) => e.get(key).map(|(v, _)| v),
            _ => last_etcd.get(key).map(|(v, _)| v.clone()),
        };
        // The MASTER key's value and the newest LOADMETRICS write (several replicas only:
        // one master elects nothing, and its observation stays as it always was).
        let (master_value, load_rev) = match etcd {
            _ if !several => (None, None),
            Etcd::Fake(e) => (etcd_value(&master_key), e.max_mod_revision(&load_prefix)),
            _ => {
                let loads = last_etcd
                    .iter()
                    .filter(|(k, _)| k.starts_with(&load_prefix));
                let newest = loads.map(|(_, (_, rev))| *rev).max();
                (etcd_value(&master_key), newest)
            }
        };
        let watched =
            Cluster::elected_master(self).or_else(|| self.masters.iter().position(|m| m.running));
        let views: HashMap<String, mock_master::InstanceView> = watched
            .and_then(|k| self.masters.get(k))
            .map(|m| m.master.instances())
            .unwrap_or_default()
            .into_iter()
            .map(|v| (v.name.clone(), v))
            .collect();
        let mut out = Vec::with_capacity(self.instances.len());
        for inst in &mut self.instances {
            let etcd = etcd_value(&inst.key).map(|v| inst.incarnations.intern(&incarnation_of(&v)));
            let view = views.get(&inst.register_addr);
            let view = view.map(mock_master::InstanceView::borrowed);
            let heartbeats = inst.counts.update(
                watched.unwrap_or(0),
                view.map(|v| v.incarnation),
                view.map_or(&BTreeMap::new(), |v| v.heartbeats),
            );
            let sidecar = inst.sidecar.as_ref();
            let view = view.map(|v| (v, inst.incarnations.intern(v.incarnation)));
            out.push(InstanceObs::from_views(
                etcd,
                view,
                heartbeats,
                sidecar.is_some_and(SidecarProc::running),
                sidecar.and_then(SidecarProc::exit_code),
            ));
        }
        // Each replica's answers over the run; their sum holds the answers no replica
        // could attribute to an instance (401 has no name).
        let per_replica: Vec<Arc<BTreeMap<u16, u64>>> =
            self.masters.iter_mut().map(MasterReplica::counts).collect();
        let unnamed_401 = unnamed_401(&out, &sum_counts(per_replica.iter().map(|c| &**c)));
        let elected = master_value.and_then(|v| self.topology.master.replica_named(&v));
        let accepted = per_replica
            .iter()
            .map(|c| c.get(&200).copied().unwrap_or(0));
        let last = &mut self.masters_seen;
        let masters = crate::observe::Masters::share(last, elected, accepted, load_rev);
        let mut instances: Observations = out.into_iter().map(Arc::new).collect();
        instances.unnamed_401 = unnamed_401;
        Sample::new(t_ms, instances, self.routed.len(), masters)
    }

    /// Stop every load generator.
    pub(crate) fn stop_loads(&self) {
        for g in std::mem::take(&mut *crate::lock(&self.load)) {
            g.stop();
        }
    }

    /// The fake etcd, for the actions that need its fault API.
    pub(crate) fn fake_etcd(&self) -> Result<&mock_etcd::MockEtcd, String> {
        match &self.etcd {
            Etcd::Fake(e) => Ok(e),
            _ => Err("this action needs the fake etcd".into()),
        }
    }

    /// Stop everything: sidecars killed (their graceful path is tested by actions), fakes
    /// stopped, proxies closed, real etcd killed.
    pub async fn shutdown(mut self) {
        self.stop.trigger();
        self.stop_loads();
        for p in self.instances.iter().filter_map(|x| x.sidecar.as_ref()) {
            p.send(Signal::Kill);
        }
        for p in self.instances.iter_mut().filter_map(|x| x.sidecar.as_mut()) {
            p.wait(Duration::from_secs(5)).await;
        }
        let mut stops = Vec::new();
        for inst in &self.instances {
            inst.etcd_links.iter().for_each(Proxy::stop);
            inst.master_proxies.iter().for_each(Proxy::stop);
            inst.vllm_link.stop();
            let v = inst.vllm.clone();
            stops.push(tokio::spawn(async move { v.stop().await }));
        }
        for s in stops {
            let _ = s.await;
        }
        self.master_links.iter().for_each(Proxy::stop);
        for m in self.masters.iter().filter(|m| m.running) {
            m.master.stop().await;
        }
        if let Etcd::Fake(e) = &self.etcd {
            e.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(u16, u64)]) -> BTreeMap<u16, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn moving_to_another_replica_and_back_counts_each_answer_once() {
        let mut c = ReplicaCounts::new(3);
        assert_eq!(
            *c.update(0, Some("a"), &counts(&[(200, 5)])),
            counts(&[(200, 5)])
        );
        // Replica 1 took over: its own count for the same incarnation is added.
        assert_eq!(
            *c.update(1, Some("a"), &counts(&[(200, 2)])),
            counts(&[(200, 7)])
        );
        assert_eq!(
            *c.update(1, Some("a"), &counts(&[(200, 4), (409, 1)])),
            counts(&[(200, 9), (409, 1)])
        );
        // Back to replica 0, which accepted nothing more meanwhile.
        assert_eq!(
            *c.update(0, Some("a"), &counts(&[(200, 5)])),
            counts(&[(200, 9), (409, 1)])
        );
        // No such replica: nothing.
        assert!(c.update(7, Some("a"), &counts(&[(200, 1)])).is_empty());
    }

    #[test]
    fn one_replica_is_its_cumulative_count() {
        let mut c = ReplicaCounts::new(1);
        let mut plain = Cumulative::default();
        for (inc, n) in [("a", 3), ("a", 4), ("b", 1), ("b", 2)] {
            let now = counts(&[(200, n)]);
            assert_eq!(c.update(0, Some(inc), &now), plain.update(Some(inc), &now));
        }
    }

    #[test]
    fn sums_add_up_by_status() {
        let a = Arc::new(counts(&[(200, 1), (409, 2)]));
        let b = Arc::new(counts(&[(200, 3)]));
        assert_eq!(sum_counts([&*a, &*b]), counts(&[(200, 4), (409, 2)]));
    }
}
