//! How a topology configures the fakes, the same in both modes: the fake etcd, the
//! fake master, and each instance's fake vLLM (its dialect, engines, start-up delay and
//! a seed of its own).

use std::time::Duration;

use crate::topology::{self, Topology};

/// The fake etcd's settings: leases of 1 s and more, the topology's user and token TTL.
pub fn etcd_config(topo: &Topology) -> mock_etcd::Config {
    let mut cfg = mock_etcd::Config {
        min_lease_ttl: 1,
        ..mock_etcd::Config::default()
    };
    if let (Some(u), Some(p)) = (&topo.etcd_user, &topo.etcd_password) {
        cfg.users = vec![(u.clone(), p.clone())];
    }
    if let Some(ttl) = topo.etcd_token_ttl {
        cfg.token_ttl = ttl.0;
    }
    cfg
}

/// Master replica `k`'s settings for a run in `namespace` (real mode adds its address
/// and its etcd endpoints), electing through etcd when the topology has several replicas.
pub fn master_replica_config(topo: &Topology, namespace: &str, k: usize) -> mock_master::Config {
    let m = &topo.master;
    mock_master::Config {
        elect: m.replicas > 1,
        service_name: topology::MasterTopology::service_name(k),
        election_ttl: m.election_ttl.0,
        etcd_namespace: namespace.to_string(),
        token: topo.token.clone().filter(|t| !t.is_empty()),
        probe_timeout: m.probe_timeout.0,
        lease_lost_timeout: m.lease_lost_timeout.0,
        suspect_window: m.suspect_window.0,
        publish_interval: m.publish_interval.0,
        etcd_timeout: Duration::from_secs(2),
        upstream_timeout: Duration::from_secs(30),
        etcd_username: topo.etcd_user.clone().unwrap_or_default(),
        etcd_password: topo.etcd_password.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// Instance `i`'s fake vLLM settings: the topology's, its per-instance overrides, and a
/// seed of its own.
pub fn vllm_config(topo: &Topology, i: usize, seed: u64) -> mock_vllm::Config {
    let spec = topo.instance(i);
    let mut cfg = mock_vllm::Config {
        seed: seed.wrapping_add(i as u64),
        dialect: vllm_dialect(spec.dialect),
        data_parallel: spec.data_parallel.max(1) as usize,
        startup_delay: spec.vllm_startup_delay.0,
        ..Default::default()
    };
    if let Some(n) = topo.max_num_seqs {
        cfg.max_num_seqs = n.max(1) as usize;
    }
    if let Some(k) = topo.kv_capacity_tokens {
        cfg.kv_capacity_tokens = k.max(1);
    }
    cfg
}

/// A topology's metrics dialect as the fake vLLM's own.
pub fn vllm_dialect(d: topology::Dialect) -> mock_vllm::Dialect {
    match d {
        topology::Dialect::V0 => mock_vllm::Dialect::V0,
        topology::Dialect::V0_10 => mock_vllm::Dialect::V0_10,
        topology::Dialect::V0_11 => mock_vllm::Dialect::V0_11,
        topology::Dialect::V0_33 => mock_vllm::Dialect::V0_33,
        topology::Dialect::V0_34 => mock_vllm::Dialect::V0_34,
        topology::Dialect::OpenMetrics => mock_vllm::Dialect::OpenMetrics,
        topology::Dialect::Compact => mock_vllm::Dialect::Compact,
    }
}

/// The incarnation id in an etcd value (a placeholder naming the value when it has none).
pub fn incarnation_of(value: &str) -> String {
    let v: Option<serde_json::Value> = serde_json::from_str(value).ok();
    match v.as_ref().and_then(|v| v.get("incarnation_id")?.as_str()) {
        Some(id) => id.to_string(),
        None => format!(
            "<no incarnation: {}>",
            value.chars().take(60).collect::<String>()
        ),
    }
}
