//! The mock cluster: etcd (fake, real, a real 3-member cluster, or an existing one), the
//! fake master, and N pairs of fake vLLM + real `vllm-sidecar` process — every link
//! between them through its own [`Proxy`], so any link can fail alone.
//!
//! ```text
//!   sidecar iN ──proxy──▶ etcd (one proxy per endpoint)     master ──proxy──▶ etcd
//!   sidecar iN ──proxy──▶ master                            master ──direct─▶ vLLM (probes)
//!   sidecar iN ──proxy──▶ vLLM iN
//! ```
//!
//! The observer reads etcd and the master directly (never through a proxy) so link faults
//! never blind it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_kit::Shutdown;

use crate::etcd_view::Gateway;
use crate::fakes_config::{etcd_config, incarnation_of, master_config, vllm_config};
use crate::load::{LoadGen, Routed};
use crate::observe::{attribute_unnamed_401, Cumulative, Incarnations, InstanceObs, Sample};
use crate::profile::Profile;
use crate::proxy::Proxy;
use crate::real_etcd::RealEtcd;
use crate::settings::{Peers, SidecarSettings};
use crate::sidecar::SidecarProc;
use crate::timeline::{Source, Timeline};
use crate::topology::{EtcdNeed, Topology};

/// Which etcd the runner was asked for (`--etcd`, `--etcd-cluster`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdChoice {
    /// The in-process fake etcd (`--etcd fake`, the default).
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
        let real_missing = crate::real_etcd::unavailable();
        let real = |k: EtcdKind| match &real_missing {
            Some(why) => Err(why.clone()),
            None => Ok(k),
        };
        match (need, choice) {
            (EtcdNeed::Fake, _) => Ok(EtcdKind::Fake),
            (EtcdNeed::Cluster3, _) => real(EtcdKind::Cluster3),
            (EtcdNeed::Real, EtcdChoice::Url(_)) | (EtcdNeed::Any, EtcdChoice::Url(_)) => {
                Ok(EtcdKind::External)
            }
            (EtcdNeed::Real, EtcdChoice::Real3) | (EtcdNeed::Any, EtcdChoice::Real3) => {
                real(EtcdKind::Cluster3)
            }
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
    pub(crate) master_link: Proxy,
    pub(crate) vllm_link: Proxy,
    pub(crate) sidecar: Option<SidecarProc>,
    token: Option<String>,
    counts: Cumulative,
    incarnations: Incarnations,
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
    namespace: String,
    pub(crate) etcd: Etcd,
    etcd_urls: Vec<String>,
    pub(crate) master: mock_master::MockMaster,
    pub(crate) master_links: Vec<Proxy>,
    pub(crate) instances: Vec<Instance>,
    gateway: Gateway,
    global_counts: Mutex<Cumulative>,
    pub(crate) load: Mutex<Vec<LoadGen>>,
    pub(crate) routed: Arc<Routed>,
    pub(crate) stop: Shutdown,
    /// The observer's last successful read of a real etcd.
    last_etcd: HashMap<String, String>,
    /// The last sample's view of the master replicas.
    masters: Arc<crate::observe::Masters>,
}

fn io<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
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
        let (etcd, targets): (Etcd, Vec<SocketAddr>) = match kind {
            EtcdKind::Fake => {
                let cfg = etcd_config(topo);
                let e = mock_etcd::start(cfg, timeline.source(Source::Etcd))
                    .await
                    .map_err(io("starting fake etcd"))?;
                let a = e.addr();
                (Etcd::Fake(e), vec![a])
            }
            EtcdKind::Real | EtcdKind::Cluster3 => {
                let n = if kind == EtcdKind::Cluster3 { 3 } else { 1 };
                let r = RealEtcd::start(n, timeline.source(Source::Etcd))
                    .await
                    .map_err(io("starting real etcd"))?;
                let a = r.client_addrs();
                (Etcd::Real(tokio::sync::Mutex::new(r)), a)
            }
            EtcdKind::External => {
                let EtcdChoice::Url(urls) = &opts.etcd else {
                    return Err("external etcd without a URL".into());
                };
                let a = urls
                    .iter()
                    .map(|u| addr_of(u))
                    .collect::<Result<Vec<_>, _>>()?;
                (Etcd::External, a)
            }
        };
        let etcd_urls: Vec<String> = targets.iter().map(|a| format!("http://{a}")).collect();
        let mut proxy_seed = seed.wrapping_mul(6364136223846793005);
        let mut next_seed = || {
            proxy_seed = proxy_seed.wrapping_add(1442695040888963407);
            proxy_seed
        };
        // Sidecars get `etcd_endpoints` endpoints; with several members, one per member.
        let endpoint_targets: Vec<SocketAddr> = if targets.len() > 1 {
            targets.clone()
        } else {
            targets
                .iter()
                .copied()
                .cycle()
                .take(topo.etcd_endpoints)
                .collect()
        };

        let mut master_links = Vec::new();
        for (k, t) in targets.iter().enumerate() {
            master_links.push(
                Proxy::start(
                    &format!("master->etcd#{k}"),
                    *t,
                    next_seed(),
                    timeline.source(Source::Link),
                )
                .await
                .map_err(io("proxy"))?,
            );
        }
        let master_cfg = mock_master::Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            etcd_endpoints: master_links.iter().map(|p| p.url()).collect(),
            ..master_config(topo, &namespace)
        };
        let master = mock_master::start(master_cfg, timeline.source(Source::Master))
            .await
            .map_err(io("starting fake master"))?;

        let mut instances = Vec::new();
        for (i, spec) in (0..topo.instances).map(|i| (i, topo.instance(i))) {
            let name = spec.name;
            let vcfg = vllm_config(topo, i, seed);
            let vllm = mock_vllm::start(vcfg, timeline.source(Source::Vllm(&name)))
                .await
                .map_err(io("starting fake vLLM"))?;
            let mut etcd_links = Vec::new();
            for (k, t) in endpoint_targets.iter().enumerate() {
                etcd_links.push(
                    Proxy::start(
                        &format!("{name}->etcd#{k}"),
                        *t,
                        next_seed(),
                        timeline.source(Source::Link),
                    )
                    .await
                    .map_err(io("proxy"))?,
                );
            }
            let master_link = Proxy::start(
                &format!("{name}->master"),
                master.addr(),
                next_seed(),
                timeline.source(Source::Link),
            )
            .await
            .map_err(io("proxy"))?;
            let vllm_link = Proxy::start(
                &format!("{name}->vllm"),
                vllm.addr(),
                next_seed(),
                timeline.source(Source::Link),
            )
            .await
            .map_err(io("proxy"))?;
            let register_addr = vllm.addr().to_string();
            instances.push(Instance {
                name,
                key: topo.instance_key(&namespace, &register_addr),
                register_addr,
                vllm,
                etcd_links,
                master_link,
                vllm_link,
                sidecar: None,
                token: spec.token,
                counts: Cumulative::default(),
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
            master,
            master_links,
            instances,
            global_counts: Mutex::new(Cumulative::default()),
            load: Mutex::new(Vec::new()),
            routed: Arc::new(Routed::default()),
            stop: Shutdown::new(),
            last_etcd: HashMap::new(),
            masters: Arc::default(),
        };
        let starts: Vec<usize> = (0..topo.instances)
            .filter(|i| topo.instance(*i).start_sidecar)
            .collect();
        if !starts.is_empty() {
            for i in starts {
                cluster.start_sidecar(i, None)?;
            }
        }
        Ok(cluster)
    }

    /// Instance `i`'s sidecar settings, overrides applied.
    fn sidecar_settings(&self, i: usize) -> Result<SidecarSettings, String> {
        let inst = self.instances.get(i).ok_or("no such instance")?;
        let etcd: Vec<String> = inst.etcd_links.iter().map(|p| p.url()).collect();
        let peers = Peers {
            etcd: etcd.join(","),
            vllm: inst.vllm_link.url(),
            master: inst.master_link.url(),
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
        if let Some(t) = token {
            if let Some(inst) = self.instances.get_mut(i) {
                inst.token = Some(t);
            }
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

    /// Each instance's registered address, topology order.
    pub fn addrs(&self) -> Vec<String> {
        self.instances
            .iter()
            .map(|x| x.register_addr.clone())
            .collect()
    }

    /// The etcd key namespace of this run: the topology's, the scenario name and a per-run suffix.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The instance index of each request the master routed, in completion order.
    pub fn routed(&self) -> Vec<usize> {
        self.routed.snapshot()
    }

    /// Every endpoint, for `scenarios up` and reports.
    pub fn endpoints(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("etcd".to_string(), self.etcd_urls.join(",")),
            (
                "etcd namespace".to_string(),
                mock_master::normalize_namespace(&self.namespace),
            ),
            ("master".to_string(), self.master.url()),
        ];
        for inst in &self.instances {
            v.push((format!("{} vLLM", inst.name), inst.vllm.url()));
            v.push((
                format!("{} vLLM (via proxy)", inst.name),
                inst.vllm_link.url(),
            ));
            v.push((
                format!("{} master (via proxy)", inst.name),
                inst.master_link.url(),
            ));
            v.push((
                format!("{} etcd (via proxy)", inst.name),
                inst.etcd_links
                    .iter()
                    .map(|p| p.url())
                    .collect::<Vec<_>>()
                    .join(","),
            ));
            v.push((format!("{} key", inst.name), inst.key.clone()));
        }
        v
    }

    /// One observation of the whole cluster.
    pub async fn observe(&mut self) -> Sample {
        let t_ms = self.timeline.now();
        let etcd_vals: HashMap<String, String> = match &self.etcd {
            Etcd::Fake(e) => self
                .instances
                .iter()
                .filter_map(|inst| e.get(&inst.key).map(|(v, _)| (inst.key.clone(), v)))
                .collect(),
            _ => {
                let prefix = format!("{}XLLM:", mock_master::normalize_namespace(&self.namespace));
                match self.gateway.range_prefix(&prefix).await {
                    Ok(kvs) => {
                        let m: HashMap<String, String> =
                            kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
                        self.last_etcd = m.clone();
                        m
                    }
                    // An unreadable etcd (killed member, overload) is not an empty one:
                    // keep the last view rather than report every key gone.
                    Err(e) => {
                        self.timeline
                            .source(Source::Observer)
                            .emit("etcd_read_failed", serde_json::json!({"error": e}));
                        self.last_etcd.clone()
                    }
                }
            }
        };
        let views: HashMap<String, mock_master::InstanceView> = self
            .master
            .instances()
            .into_iter()
            .map(|v| (v.name.clone(), v))
            .collect();
        let mut out = Vec::with_capacity(self.instances.len());
        for inst in &mut self.instances {
            let etcd = etcd_vals
                .get(&inst.key)
                .map(|v| inst.incarnations.intern(&incarnation_of(v)));
            let view = views.get(&inst.register_addr);
            let view = view.map(mock_master::InstanceView::borrowed);
            let heartbeats = inst.counts.update(
                view.map(|v| v.incarnation),
                view.map_or(&BTreeMap::new(), |v| v.heartbeats),
            );
            let (sidecar_running, sidecar_exit) = match &inst.sidecar {
                Some(p) => (p.running(), p.exit_code()),
                None => (false, None),
            };
            let view = view.map(|v| (v, inst.incarnations.intern(v.incarnation)));
            out.push(InstanceObs::from_views(
                etcd,
                view,
                heartbeats,
                sidecar_running,
                sidecar_exit,
            ));
        }
        // Answers the master could not attribute to an instance (401 has no name).
        let global = self.master.heartbeat_counts();
        let global = match self.global_counts.lock() {
            Ok(mut g) => g.update(Some("master"), &global),
            Err(p) => p.into_inner().update(Some("master"), &global),
        };
        attribute_unnamed_401(&mut out, &global);
        let next = crate::observe::Masters {
            elected: None,
            accepted: vec![global.get(&200).copied().unwrap_or(0)],
            loadmetrics_revision: None,
        };
        Sample {
            t_ms,
            instances: out.into_iter().map(Arc::new).collect(),
            routed: self.routed.len(),
            masters: crate::observe::Masters::share(&mut self.masters, next),
        }
    }

    /// Stop every load generator.
    pub(crate) fn stop_loads(&self) {
        let gens = match self.load.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for g in gens {
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
        for inst in &self.instances {
            if let Some(p) = inst.sidecar.as_ref() {
                p.kill_now();
            }
        }
        for inst in &mut self.instances {
            if let Some(p) = inst.sidecar.as_mut() {
                p.wait(Duration::from_secs(5)).await;
            }
        }
        let mut stops = Vec::new();
        for inst in &self.instances {
            inst.etcd_links.iter().for_each(Proxy::stop);
            inst.master_link.stop();
            inst.vllm_link.stop();
            let v = inst.vllm.clone();
            stops.push(tokio::spawn(async move { v.stop().await }));
        }
        for s in stops {
            let _ = s.await;
        }
        self.master_links.iter().for_each(Proxy::stop);
        self.master.stop().await;
        if let Etcd::Fake(e) = &self.etcd {
            e.stop().await;
        }
    }
}
