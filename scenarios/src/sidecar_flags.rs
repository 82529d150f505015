//! The flags a scenario gives each sidecar: one function for both modes, so a sidecar
//! in the simulation is configured by the very flags the real process gets (parsed by
//! the sidecar's own flag parser, `Config::from_flags`).

use crate::dur::Dur;
use crate::topology::Topology;

/// Where one sidecar's peers are (URLs the real mode's proxies listen on, or the
/// simulator's node names) and who it is.
pub struct Peers<'a> {
    /// Comma-separated etcd endpoint URLs.
    pub etcd: String,
    /// The vLLM URL (`--vllm-url`).
    pub vllm: String,
    /// The master's URL (`--xllm-service-url`).
    pub master: String,
    /// The etcd key namespace (`--etcd-namespace`).
    pub namespace: &'a str,
    /// The address the sidecar registers for its instance (`--register-addr`).
    pub register_addr: &'a str,
    /// The instance's name (`--instance-name`).
    pub instance_name: &'a str,
    /// The internal token it sends (`None` or `""`: none).
    pub token: Option<&'a str>,
}

/// The sidecar's flags: the topology's settings, then its `sidecar_args`, then the
/// runner's overrides (a deliberately wrong configuration), each replacing an earlier
/// value of the same flag.
pub fn sidecar_flags(
    topo: &Topology,
    peers: &Peers<'_>,
    overrides: &[(String, String)],
) -> Vec<String> {
    let secs = |d: Dur| d.secs_f64().to_string();
    let mut flags: Vec<(String, String)> = vec![
        ("--etcd-endpoints".into(), peers.etcd.clone()),
        ("--etcd-namespace".into(), peers.namespace.to_string()),
        ("--etcd-timeout".into(), secs(topo.etcd_timeout)),
        ("--vllm-url".into(), peers.vllm.clone()),
        ("--register-addr".into(), peers.register_addr.to_string()),
        ("--instance-type".into(), topo.instance_type.clone()),
        ("--instance-name".into(), peers.instance_name.to_string()),
        ("--lease-ttl".into(), topo.lease_ttl.to_string()),
        ("--keepalive-interval".into(), secs(topo.keepalive_interval)),
        ("--health-timeout".into(), secs(topo.health_timeout)),
        (
            "--health-fail-threshold".into(),
            topo.health_fail_threshold.to_string(),
        ),
        ("--xllm-service-url".into(), peers.master.clone()),
        ("--heartbeat-interval".into(), secs(topo.heartbeat_interval)),
        ("--log-format".into(), "json".into()),
        ("--log-level".into(), "INFO".into()),
        ("--model".into(), "mock-model".into()),
    ];
    if let Some(t) = peers.token.filter(|t| !t.is_empty()) {
        flags.push(("--internal-token".into(), t.to_string()));
    }
    if let (Some(u), Some(p)) = (&topo.etcd_user, &topo.etcd_password) {
        flags.push(("--etcd-username".into(), u.clone()));
        flags.push(("--etcd-password".into(), p.clone()));
    }
    let mut extra = topo.sidecar_args.iter();
    while let Some(f) = extra.next() {
        match f.split_once('=') {
            Some((k, v)) => set_flag(&mut flags, k, v),
            None => {
                let v = extra.next().cloned().unwrap_or_default();
                set_flag(&mut flags, f, &v)
            }
        }
    }
    for (k, v) in overrides {
        set_flag(&mut flags, k, v);
    }
    flags.into_iter().flat_map(|(k, v)| [k, v]).collect()
}

fn set_flag(flags: &mut Vec<(String, String)>, k: &str, v: &str) {
    match flags.iter_mut().find(|(f, _)| f == k) {
        Some(slot) => slot.1 = v.to_string(),
        None => flags.push((k.to_string(), v.to_string())),
    }
}
