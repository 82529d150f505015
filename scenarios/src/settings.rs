//! The settings the harness gives every sidecar, by their harness names, and how our
//! `vllm-sidecar` takes them (its flags). A profile ([`crate::profile`]) maps them to
//! another implementation's flags or environment variables; the simulation always
//! configures the sidecar's core by our flags, parsed by the sidecar's own parser.

use crate::dur::Dur;
use crate::topology::Topology;

/// One setting, by its harness name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Setting {
    /// etcd's client URLs, comma-separated, one per endpoint.
    EtcdEndpoints,
    /// The prefix of every key the sidecar writes.
    EtcdNamespace,
    /// How long one etcd call may take (s).
    EtcdTimeout,
    /// etcd's user, when the scenario turns auth on.
    EtcdUsername,
    /// That user's password.
    EtcdPassword,
    /// Where the instance's vLLM serves.
    VllmUrl,
    /// The address registered for the instance (the master's name for it).
    RegisterAddr,
    /// `DEFAULT`, `PREFILL`, `DECODE` or `MIX`.
    InstanceType,
    /// The instance's name in its registration.
    InstanceName,
    /// The lease's TTL (whole seconds).
    LeaseTtl,
    /// How often the lease is kept alive (s).
    KeepaliveInterval,
    /// How long one `/health` probe may take (s).
    HealthTimeout,
    /// Failed probes in a row before the lease is revoked.
    HealthFailThreshold,
    /// The master's base URL (our flag: `--xllm-service-url`).
    MasterUrl,
    /// How often a heartbeat is posted (s).
    HeartbeatInterval,
    /// The master's `X-Internal-Token`, when it has one.
    InternalToken,
    /// `json` (our extension).
    LogFormat,
    /// `INFO`.
    LogLevel,
    /// The served model's name (our extension; the fake serves `mock-model`).
    Model,
}

/// Every setting, in declaration order (the order our flags are given), with the name
/// profiles use and the flag our `vllm-sidecar` takes it by.
const TABLE: [(Setting, &str, &str); 19] = [
    (Setting::EtcdEndpoints, "etcd_endpoints", "--etcd-endpoints"),
    (Setting::EtcdNamespace, "etcd_namespace", "--etcd-namespace"),
    (Setting::EtcdTimeout, "etcd_timeout", "--etcd-timeout"),
    (Setting::EtcdUsername, "etcd_username", "--etcd-username"),
    (Setting::EtcdPassword, "etcd_password", "--etcd-password"),
    (Setting::VllmUrl, "vllm_url", "--vllm-url"),
    (Setting::RegisterAddr, "register_addr", "--register-addr"),
    (Setting::InstanceType, "instance_type", "--instance-type"),
    (Setting::InstanceName, "instance_name", "--instance-name"),
    (Setting::LeaseTtl, "lease_ttl", "--lease-ttl"),
    (
        Setting::KeepaliveInterval,
        "keepalive_interval",
        "--keepalive-interval",
    ),
    (Setting::HealthTimeout, "health_timeout", "--health-timeout"),
    (
        Setting::HealthFailThreshold,
        "health_fail_threshold",
        "--health-fail-threshold",
    ),
    (Setting::MasterUrl, "master_url", "--xllm-service-url"),
    (
        Setting::HeartbeatInterval,
        "heartbeat_interval",
        "--heartbeat-interval",
    ),
    (Setting::InternalToken, "internal_token", "--internal-token"),
    (Setting::LogFormat, "log_format", "--log-format"),
    (Setting::LogLevel, "log_level", "--log-level"),
    (Setting::Model, "model", "--model"),
];

impl Setting {
    /// Every setting, in the order our flags are given.
    pub fn all() -> impl Iterator<Item = Setting> {
        TABLE.iter().map(|(s, _, _)| *s)
    }

    /// The name profiles use (`lease_ttl`).
    pub fn name(self) -> &'static str {
        TABLE[self as usize].1
    }

    /// The flag our `vllm-sidecar` takes it by.
    pub fn our_flag(self) -> &'static str {
        TABLE[self as usize].2
    }

    /// The setting a profile names `name`.
    pub fn parse(name: &str) -> Option<Setting> {
        Setting::all().find(|s| s.name() == name)
    }

    /// The setting our flag `flag` gives, if it is one.
    pub fn of_our_flag(flag: &str) -> Option<Setting> {
        Setting::all().find(|s| s.our_flag() == flag)
    }
}

/// Where one sidecar's peers are (URLs the real mode's proxies listen on, or the
/// simulator's node names) and who it is.
pub struct Peers<'a> {
    /// Comma-separated etcd endpoint URLs.
    pub etcd: String,
    /// The vLLM URL.
    pub vllm: String,
    /// The master's URL.
    pub master: String,
    /// The etcd key namespace.
    pub namespace: &'a str,
    /// The address the sidecar registers for its instance.
    pub register_addr: &'a str,
    /// The instance's name.
    pub instance_name: &'a str,
    /// The internal token it sends (`None` or `""`: none).
    pub token: Option<&'a str>,
}

/// One sidecar's settings with their values, and the flags beyond them that the
/// scenario (`sidecar_args`) or the runner (a deliberately wrong configuration) add.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SidecarSettings {
    /// Each given setting with its value.
    pub values: Vec<(Setting, String)>,
    /// Flags no setting names, in our sidecar's words, as given.
    pub extra: Vec<(String, String)>,
}

impl SidecarSettings {
    /// The topology's settings for one sidecar, then its `sidecar_args`, then the
    /// runner's overrides, each replacing an earlier value of the same setting (a flag
    /// of ours names the setting; any other flag is kept as an extra).
    pub fn new(topo: &Topology, peers: &Peers<'_>, overrides: &[(String, String)]) -> Self {
        let secs = |d: Dur| d.0.as_secs_f64().to_string();
        let mut values: Vec<(Setting, String)> = vec![
            (Setting::EtcdEndpoints, peers.etcd.clone()),
            (Setting::EtcdNamespace, peers.namespace.to_string()),
            (Setting::EtcdTimeout, secs(topo.etcd_timeout)),
            (Setting::VllmUrl, peers.vllm.clone()),
            (Setting::RegisterAddr, peers.register_addr.to_string()),
            (Setting::InstanceType, topo.instance_type.clone()),
            (Setting::InstanceName, peers.instance_name.to_string()),
            (Setting::LeaseTtl, topo.lease_ttl.to_string()),
            (Setting::KeepaliveInterval, secs(topo.keepalive_interval)),
            (Setting::HealthTimeout, secs(topo.health_timeout)),
            (
                Setting::HealthFailThreshold,
                topo.health_fail_threshold.to_string(),
            ),
            (Setting::MasterUrl, peers.master.clone()),
            (Setting::HeartbeatInterval, secs(topo.heartbeat_interval)),
            (Setting::LogFormat, "json".into()),
            (Setting::LogLevel, "INFO".into()),
            (Setting::Model, "mock-model".into()),
        ];
        if let Some(t) = peers.token.filter(|t| !t.is_empty()) {
            values.push((Setting::InternalToken, t.to_string()));
        }
        if let (Some(u), Some(p)) = (&topo.etcd_user, &topo.etcd_password) {
            values.push((Setting::EtcdUsername, u.clone()));
            values.push((Setting::EtcdPassword, p.clone()));
        }
        let mut s = SidecarSettings {
            values,
            extra: Vec::new(),
        };
        let mut args = topo.sidecar_args.iter().peekable();
        while let Some(f) = args.next() {
            match f.split_once('=') {
                Some((k, v)) => s.set(k, v),
                // A flag followed by another flag, or by nothing, is a switch
                // (`--follow-master`): it takes no value.
                None if args.peek().is_none_or(|next| next.starts_with("--")) => s.set(f, ""),
                None => s.set(f, &args.next().cloned().unwrap_or_default()),
            }
        }
        for (k, v) in overrides {
            s.set(k, v);
        }
        s
    }

    /// Set our flag `flag` to `v`: its setting if it names one, else an extra flag (an
    /// extra flag with an empty value is a switch, given alone).
    fn set(&mut self, flag: &str, v: &str) {
        let v = v.to_string();
        match Setting::of_our_flag(flag) {
            Some(setting) => match self.values.iter_mut().find(|(s, _)| *s == setting) {
                Some(slot) => slot.1 = v,
                None => self.values.push((setting, v)),
            },
            None => match self.extra.iter_mut().find(|(f, _)| f == flag) {
                Some(slot) => slot.1 = v,
                None => self.extra.push((flag.to_string(), v)),
            },
        }
    }

    /// The command-line arguments our `vllm-sidecar` takes for these settings.
    pub fn our_flags(&self) -> Vec<String> {
        let named = self.values.iter();
        let named = named.flat_map(|(s, v)| [s.our_flag().to_string(), v.clone()]);
        named.chain(self.extra_args()).collect()
    }

    /// The extra flags as arguments: a flag alone when its value is empty (a switch),
    /// else the flag and its value.
    pub(crate) fn extra_args(&self) -> impl Iterator<Item = String> + '_ {
        self.extra.iter().flat_map(|(flag, v)| {
            let value = Some(v).filter(|v| !v.is_empty());
            std::iter::once(flag).chain(value).cloned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_declaration_order() {
        for (i, s) in Setting::all().enumerate() {
            assert_eq!(s as usize, i, "{s:?}");
        }
        assert_eq!(
            Setting::of_our_flag("--xllm-service-url"),
            Some(Setting::MasterUrl)
        );
        assert_eq!(Setting::parse("lease_ttl"), Some(Setting::LeaseTtl));
    }

    #[test]
    fn a_flag_before_another_flag_is_a_switch() {
        let topo = Topology {
            sidecar_args: [
                "--follow-master",
                "--master-read-interval",
                "2",
                "--x=1",
                "--last",
            ]
            .map(String::from)
            .to_vec(),
            ..Topology::default()
        };
        let peers = Peers {
            etcd: "http://127.0.0.1:1".into(),
            vllm: "http://127.0.0.1:2".into(),
            master: "http://127.0.0.1:3".into(),
            namespace: "ns/",
            register_addr: "127.0.0.1:2",
            instance_name: "i0",
            token: None,
        };
        let s = SidecarSettings::new(&topo, &peers, &[]);
        let extra: Vec<(&str, &str)> = s
            .extra
            .iter()
            .map(|(f, v)| (f.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            extra,
            [
                ("--follow-master", ""),
                ("--master-read-interval", "2"),
                ("--x", "1"),
                ("--last", "")
            ]
        );
        let flags = s.our_flags();
        let tail: Vec<&str> = flags.iter().map(String::as_str).rev().take(6).collect();
        assert_eq!(
            tail,
            [
                "--last",
                "1",
                "--x",
                "2",
                "--master-read-interval",
                "--follow-master"
            ]
        );
    }
}
