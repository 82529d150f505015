//! The cluster a scenario runs on: how many instances, which etcd, the sidecars' and the
//! master's timers, per-instance overrides, and the instance names it defines.
//!
//! Its own module, below the scenario file ([`crate::spec`]) and the actions: both
//! clusters and every action family need the topology, and none of them needs the
//! steps of a scenario.

use serde::{Deserialize, Serialize};

use crate::dur::Dur;

/// Which etcd a scenario needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EtcdNeed {
    /// Whatever the runner was given (`--etcd`).
    #[default]
    Any,
    /// The in-process fake (its fault API is used).
    Fake,
    /// A real etcd (the Debian binary); skipped when it is not installed.
    Real,
    /// A real three-member cluster on loopback (members can be killed).
    Cluster3,
}

/// Metric dialect of the fake vLLM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// vLLM 0.x before 0.10.
    V0,
    /// vLLM 0.10.
    V0_10,
    /// vLLM 0.11.
    V0_11,
    /// vLLM 0.33.
    V0_33,
    /// The newest release imitated (docs/contract.md §4).
    #[default]
    V0_34,
    /// OpenMetrics 1.0 text, as a negotiating scraper gets it.
    OpenMetrics,
    /// Only the families the sidecar reads, as a v0.11 page writes them: small pages for
    /// big fleets.
    Compact,
}

/// A link of the cluster, as scenarios name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// A sidecar to etcd (one link per endpoint).
    SidecarEtcd,
    /// A sidecar to the master.
    SidecarMaster,
    /// A sidecar to its vLLM.
    SidecarVllm,
    /// The master to etcd.
    MasterEtcd,
}

/// A process of the cluster a pause or a throttle can stop, as scenarios name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    /// An instance's sidecar.
    Sidecar,
    /// An instance's vLLM.
    Vllm,
    /// The master.
    Master,
}

/// The cluster a scenario runs on. Intervals default short so the library runs fast.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topology {
    /// Instances (vLLM + sidecar pairs).
    pub instances: usize,
    /// Which etcd it needs.
    pub etcd: EtcdNeed,
    /// Etcd endpoints each sidecar is given (each through its own proxy link).
    pub etcd_endpoints: usize,
    /// Etcd user and password (fake etcd only): enables the auth flow.
    pub etcd_user: Option<String>,
    /// That user's password.
    pub etcd_password: Option<String>,
    /// Lifetime of an etcd auth token (fake etcd only).
    pub etcd_token_ttl: Option<Dur>,
    /// The etcd key namespace (a run adds its own suffix).
    pub namespace: String,
    /// The instances' type (`DEFAULT`, `PREFILL`, `DECODE`, `MIX`).
    pub instance_type: String,
    /// The sidecars' lease TTL (whole seconds).
    pub lease_ttl: u64,
    /// The sidecars' keepalive interval.
    pub keepalive_interval: Dur,
    /// The sidecars' heartbeat interval.
    pub heartbeat_interval: Dur,
    /// The sidecars' `/health` timeout.
    pub health_timeout: Dur,
    /// Failed probes in a row before a sidecar revokes its lease.
    pub health_fail_threshold: u32,
    /// The sidecars' etcd call timeout.
    pub etcd_timeout: Dur,
    /// The master's internal token, also given to every sidecar unless overridden.
    pub token: Option<String>,
    /// The fake vLLMs' metrics dialect.
    pub dialect: Dialect,
    /// Engines per fake vLLM.
    pub data_parallel: u32,
    /// Requests a fake vLLM runs at once.
    pub max_num_seqs: Option<u32>,
    /// A fake vLLM's KV cache, in tokens.
    pub kv_capacity_tokens: Option<u64>,
    /// vLLM takes this long before /health answers 200.
    pub vllm_startup_delay: Dur,
    /// Virtual time only: the one-way delay of a healthy simulated link (default
    /// 0.2 ms). Real links have the machine's own; faults add to it in both modes.
    pub link_delay: Option<Dur>,
    /// Start every sidecar at t=0 (false: the timeline starts them).
    pub start_sidecars: bool,
    /// Extra sidecar flags (appended for every instance).
    pub sidecar_args: Vec<String>,
    /// The fake master's timers.
    pub master: MasterTopology,
    /// Per-instance settings (`[[topology.instance]]`).
    #[serde(rename = "instance")]
    pub overrides: Vec<InstanceOverride>,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            instances: 1,
            etcd: EtcdNeed::Any,
            etcd_endpoints: 1,
            etcd_user: None,
            etcd_password: None,
            etcd_token_ttl: None,
            namespace: "scn".into(),
            instance_type: "DEFAULT".into(),
            lease_ttl: 3,
            keepalive_interval: Dur::ms(500),
            heartbeat_interval: Dur::ms(500),
            health_timeout: Dur::ms(1000),
            health_fail_threshold: 3,
            etcd_timeout: Dur::ms(1500),
            token: None,
            dialect: Dialect::default(),
            data_parallel: 1,
            max_num_seqs: None,
            kv_capacity_tokens: None,
            vllm_startup_delay: Dur::ms(0),
            link_delay: None,
            start_sidecars: true,
            sidecar_args: Vec::new(),
            master: MasterTopology::default(),
            overrides: Vec::new(),
        }
    }
}

/// The fake master's timers (`docs/contract.md` §2 gives the defaults, 3 s / 15 s / 3 s;
/// scenarios shorten them).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MasterTopology {
    /// How long an instance whose key went stays LEASE_LOST before SUSPECT.
    pub lease_lost_timeout: Dur,
    /// How long a SUSPECT instance is kept before it is dropped.
    pub suspect_window: Dur,
    /// How often LOADMETRICS is published.
    pub publish_interval: Dur,
    /// The master's `/health` probe timeout.
    pub probe_timeout: Dur,
    /// Service replicas (1 to 5). Above 1 they elect one master through etcd as
    /// xllm-service's do (docs/contract.md, "Election"); replica `k` is named
    /// `127.0.0.<k+1>:8889` and heard on `127.0.0.<k+1>`.
    pub replicas: usize,
    /// The lease TTL of each replica's SERVICE and MASTER keys.
    pub election_ttl: Dur,
}

impl Default for MasterTopology {
    fn default() -> Self {
        MasterTopology {
            lease_lost_timeout: Dur::ms(3000),
            suspect_window: Dur::ms(15000),
            publish_interval: Dur::ms(1000),
            probe_timeout: Dur::ms(500),
            replicas: 1,
            election_ttl: Dur::ms(3000),
        }
    }
}

impl MasterTopology {
    /// Replica `k`'s host: each replica is heard on a loopback address of its own, so
    /// that the host in the MASTER key alone tells a following sidecar where to post.
    pub fn replica_host(k: usize) -> String {
        format!("127.0.0.{}", k + 1)
    }

    /// Replica `k`'s service name, the value of the MASTER key while it is master
    /// (its host and xllm-service's default RPC port).
    pub fn service_name(k: usize) -> String {
        format!("{}:8889", MasterTopology::replica_host(k))
    }

    /// The replica whose service name is `name`.
    pub fn replica_named(&self, name: &str) -> Option<usize> {
        (0..self.replicas).find(|&k| MasterTopology::service_name(k) == name)
    }
}

/// Settings of one instance that differ from the topology's.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceOverride {
    /// Instance name, `i0`, `i1`, …
    pub name: String,
    #[serde(default)]
    /// Its vLLM's dialect.
    pub dialect: Option<Dialect>,
    #[serde(default)]
    /// The token its sidecar sends (`""` for none), when it differs from the master's.
    pub token: Option<String>,
    #[serde(default)]
    /// Its vLLM's start-up delay.
    pub vllm_startup_delay: Option<Dur>,
    #[serde(default)]
    /// Whether its sidecar starts with the cluster.
    pub start_sidecar: Option<bool>,
    #[serde(default)]
    /// Its vLLM's engines.
    pub data_parallel: Option<u32>,
}

/// Which instance(s) an action touches.
pub type Target = String;

/// `all`, the default target of actions that may name one instance.
pub fn all_target() -> Target {
    "all".into()
}

/// The indices an action's target names among `count` instances: every one for `all`,
/// else the one so named (none if it does not exist).
pub fn target_indices(count: usize, target: &str) -> Vec<usize> {
    (0..count)
        .filter(|i| target == "all" || instance_name(*i) == target)
        .collect()
}

/// Instance `i`'s name: `i<i>`.
pub fn instance_name(i: usize) -> String {
    format!("i{i}")
}

/// One instance's settings: its `[[topology.instance]]` override where it has one, the
/// topology's default otherwise (the one place that lookup is made).
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceSpec {
    /// The instance's name (`i0`, ...).
    pub name: String,
    /// The internal token its sidecar sends at start.
    pub token: Option<String>,
    /// Its sidecar starts with the cluster.
    pub start_sidecar: bool,
    /// How long its vLLM takes to become healthy.
    pub vllm_startup_delay: Dur,
    /// Its vLLM's metrics dialect.
    pub dialect: Dialect,
    /// Its vLLM's engines.
    pub data_parallel: u32,
}

impl Topology {
    /// Instance `i`'s settings, overrides applied.
    pub fn instance(&self, i: usize) -> InstanceSpec {
        let name = instance_name(i);
        let o = self.overrides.iter().find(|o| o.name == name);
        InstanceSpec {
            token: o
                .and_then(|o| o.token.clone())
                .or_else(|| self.token.clone()),
            start_sidecar: o
                .and_then(|o| o.start_sidecar)
                .unwrap_or(self.start_sidecars),
            vllm_startup_delay: o
                .and_then(|o| o.vllm_startup_delay)
                .unwrap_or(self.vllm_startup_delay),
            dialect: o.and_then(|o| o.dialect).unwrap_or(self.dialect),
            data_parallel: o
                .and_then(|o| o.data_parallel)
                .unwrap_or(self.data_parallel),
            name,
        }
    }

    /// The etcd key an instance registered at `register_addr` is expected under, as the
    /// master reads keys (its namespace rule, not the sidecar's code).
    pub fn instance_key(&self, namespace: &str, register_addr: &str) -> String {
        let ns = mock_master::normalize_namespace(namespace);
        format!("{ns}XLLM:{}:{register_addr}", self.instance_type)
    }

    /// The MASTER key and the LOADMETRICS prefix under `namespace`, as the master
    /// replicas write them: where the observers read which replica is elected and its
    /// newest load write.
    pub fn election_keys(namespace: &str) -> (String, String) {
        let ns = mock_master::normalize_namespace(namespace);
        (
            format!("{ns}XLLM:SERVICE:MASTER"),
            format!("{ns}XLLM:LOADMETRICS:"),
        )
    }

    /// Every instance's name, in order.
    pub fn instance_names(&self) -> Vec<String> {
        (0..self.instances).map(instance_name).collect()
    }

    /// Instance `t` exists (or is `all`, where `allow_all`).
    pub fn check_target(&self, t: &str, allow_all: bool) -> Result<(), String> {
        if self.instance_names().iter().any(|n| n == t) || (allow_all && t == "all") {
            Ok(())
        } else {
            Err(format!(
                "instance `{t}` does not exist (topology has {} instance(s): i0..i{}{})",
                self.instances,
                self.instances.saturating_sub(1),
                if allow_all { ", or `all`" } else { "" }
            ))
        }
    }

    /// Etcd members: three for a real cluster, else one.
    pub fn etcd_members(&self) -> usize {
        match self.etcd {
            EtcdNeed::Cluster3 => 3,
            _ => 1,
        }
    }

    /// `what` needs the in-process fake etcd (its fault API).
    pub fn needs_fake_etcd(&self, what: &str) -> Result<(), String> {
        match self.etcd {
            EtcdNeed::Fake => Ok(()),
            _ => Err(format!(
                "`{what}` needs the fake etcd: set topology.etcd = \"fake\""
            )),
        }
    }
}
