//! Where heartbeats go: the key the elected master holds, a master as that key names it,
//! the target the core chooses, and the settings of following (see [`super::follow`]
//! for when it reads and switches). Plain values, so the core's commands can carry them
//! without the follower's state.

use std::time::Duration;

use url::Url;

use crate::instance::normalize_namespace;

/// The key the elected master holds, for `namespace` (normalized as for the instance
/// key): `<namespace>XLLM:SERVICE:MASTER`.
pub fn master_key(namespace: &str) -> String {
    format!("{}XLLM:SERVICE:MASTER", normalize_namespace(namespace))
}

/// A master as the MASTER key names it: its `service_name`, `<host>:<rpc port>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MasterName {
    /// An IPv4 address, a DNS name, or an IPv6 address in brackets.
    pub host: String,
    /// The master's RPC port (not the port of its HTTP heartbeat endpoint).
    pub rpc_port: u16,
}

impl std::fmt::Display for MasterName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.rpc_port)
    }
}

impl MasterName {
    /// The MASTER key's value as a master's name; the error says why it is none.
    /// Surrounding whitespace is ignored.
    pub fn parse(value: &str) -> Result<MasterName, String> {
        let value = value.trim();
        let (host, port) = value
            .rsplit_once(':')
            .ok_or("not <host>:<port> (no port)")?;
        let rpc_port = match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(format!("the port {port:?} is not 1 to 65535")),
        };
        if let Some(inner) = host.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or("an unclosed [")?;
            inner
                .parse::<std::net::Ipv6Addr>()
                .map_err(|_| "not an IPv6 address inside the brackets")?;
        } else if host.is_empty() {
            return Err("the host is empty".into());
        } else if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        {
            return Err(format!("the host {host:?} is not an address or a name"));
        }
        Ok(MasterName {
            host: host.to_string(),
            rpc_port,
        })
    }
}

/// Where a heartbeat goes, as the core chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatTarget {
    /// `--xllm-service-url`: following is off, or no read named a master (yet).
    Configured,
    /// The master the MASTER key names, and the heartbeat URL made from it.
    Elected {
        /// The master, as the key names it.
        master: MasterName,
        /// `--xllm-service-url`'s heartbeat URL with the master's host (and
        /// `--master-http-port`, when given).
        url: Url,
    },
}

/// The settings of following (present only with `--follow-master`).
#[derive(Debug, Clone, PartialEq)]
pub struct FollowConfig {
    /// `<namespace>XLLM:SERVICE:MASTER`.
    pub master_key: String,
    /// The configured heartbeat URL (`--xllm-service-url` + `/v1/internal/heartbeat`).
    pub configured_url: Url,
    /// `--master-http-port`: the port to post to instead of the configured URL's.
    pub http_port: Option<u16>,
    /// `--master-read-interval`: time between steady reads.
    pub read_interval: Duration,
}

impl FollowConfig {
    /// The heartbeat URL for `master`: the configured one with its host (and port).
    pub fn url_for(&self, master: &MasterName) -> Result<Url, String> {
        let mut url = self.configured_url.clone();
        url.set_host(Some(&master.host))
            .map_err(|e| format!("the host {:?} is not usable in a URL: {e}", master.host))?;
        if let Some(port) = self.http_port {
            url.set_port(Some(port))
                .map_err(|()| "the URL cannot take a port".to_string())?;
        }
        Ok(url)
    }

    /// The URL heartbeats go to for `target`.
    pub fn url_of<'a>(&'a self, target: &'a HeartbeatTarget) -> &'a Url {
        match target {
            HeartbeatTarget::Configured => &self.configured_url,
            HeartbeatTarget::Elected { url, .. } => url,
        }
    }
}
