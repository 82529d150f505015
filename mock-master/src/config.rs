//! The master's configuration, with the real master's defaults, and the namespace rule of
//! docs/contract.md §1. Kept apart so that every module can read the configuration
//! without depending on the crate root.

use std::net::SocketAddr;
use std::time::Duration;

/// Everything the master can be configured with. `Default` holds the real master's
/// defaults. `Debug` shows whether a token is set, never the token.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub etcd_endpoints: Vec<String>,
    /// Normalized by [`crate::start`] (docs/contract.md §1): `foo` -> `/foo/`, `///` -> ``.
    pub etcd_namespace: String,
    /// `X-Internal-Token` heartbeats must carry; `None` (or empty) checks nothing.
    pub token: Option<String>,
    pub probe_attempts: u32,
    pub probe_timeout: Duration,
    pub probe_interval: Duration,
    /// LEASE_LOST without a heartbeat this long: SUSPECT.
    pub lease_lost_timeout: Duration,
    /// SUSPECT this long: deregistered.
    pub suspect_window: Duration,
    pub publish_interval: Duration,
    /// Serve the `/_mock/` control API.
    pub control: bool,
    /// Largest request body read (heartbeats and proxied requests); beyond it, 413.
    pub max_body_bytes: usize,
    /// Timeout of each etcd range/put/delete call (and of opening a watch).
    pub etcd_timeout: Duration,
    /// Timeout of a proxied request, first byte to last.
    pub upstream_timeout: Duration,
    /// etcd user to authenticate as (empty: etcd auth off, no token sent).
    pub etcd_username: String,
    /// Its password. Never logged; `Debug` shows only whether it is set.
    pub etcd_password: String,
    /// Replica mode: register `<ns>XLLM:SERVICE:<service_name>` and run for master
    /// (docs/contract.md, "Election"); only the elected replica publishes LOADMETRICS.
    /// Off: the single master of before, always publishing, writing no SERVICE key.
    pub elect: bool,
    /// `<ip>:<rpc port>`, the replica's name in etcd (xllm-service's is its local IP and
    /// its RPC port, 8889 by default; not the HTTP port serving heartbeats).
    pub service_name: String,
    /// TTL of the service and MASTER leases (whole seconds, at least 1; etcd's unit).
    pub election_ttl: Duration,
}

/// xllm-service's default `service_name`: loopback and its default RPC port.
pub const DEFAULT_SERVICE_NAME: &str = "127.0.0.1:8889";

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 9998)),
            etcd_endpoints: vec!["127.0.0.1:2379".to_string()],
            etcd_namespace: String::new(),
            token: None,
            probe_attempts: 2,
            probe_timeout: Duration::from_millis(1000),
            probe_interval: Duration::from_millis(100),
            lease_lost_timeout: Duration::from_millis(3000),
            suspect_window: Duration::from_secs(15),
            publish_interval: Duration::from_secs(3),
            control: true,
            max_body_bytes: 4 * 1024 * 1024,
            etcd_timeout: Duration::from_secs(3),
            upstream_timeout: Duration::from_secs(600),
            etcd_username: String::new(),
            etcd_password: String::new(),
            elect: false,
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            election_ttl: Duration::from_secs(3),
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("etcd_endpoints", &self.etcd_endpoints)
            .field("etcd_namespace", &self.etcd_namespace)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("probe_attempts", &self.probe_attempts)
            .field("probe_timeout", &self.probe_timeout)
            .field("probe_interval", &self.probe_interval)
            .field("lease_lost_timeout", &self.lease_lost_timeout)
            .field("suspect_window", &self.suspect_window)
            .field("publish_interval", &self.publish_interval)
            .field("control", &self.control)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("etcd_timeout", &self.etcd_timeout)
            .field("upstream_timeout", &self.upstream_timeout)
            .field("etcd_username", &self.etcd_username)
            .field(
                "etcd_password",
                &(!self.etcd_password.is_empty()).then_some("<set>"),
            )
            .field("elect", &self.elect)
            .field("service_name", &self.service_name)
            .field("election_ttl", &self.election_ttl)
            .finish()
    }
}

/// A service name as replica mode needs it: `<host>:<port>` with a port number, so it
/// can never be `MASTER` (the MASTER key's last part) nor empty.
pub fn check_service_name(name: &str) -> Result<String, String> {
    let port = name
        .rsplit_once(':')
        .map(|(host, port)| (host.is_empty(), port));
    match port {
        Some((false, p)) if p.parse::<u16>().is_ok() => Ok(name.to_string()),
        _ => Err(format!("{name:?} is not <host>:<port>")),
    }
}

/// Contract §1: `""` stays `""`; else strip every leading and trailing `/` and wrap
/// what is left as `/<rest>/`.
pub fn normalize_namespace(ns: &str) -> String {
    let rest = ns.trim_matches('/');
    if rest.is_empty() {
        String::new()
    } else {
        format!("/{rest}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let c = Config {
            token: Some("hunter2".into()),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"));
        assert!(shown.contains("<set>"));
    }

    #[test]
    fn debug_never_shows_the_etcd_password() {
        let c = Config {
            etcd_username: "root".into(),
            etcd_password: "s3cr3t-pw".into(),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t-pw"));
        assert!(shown.contains("root"));
        assert!(shown.contains("<set>"));
    }

    #[test]
    fn service_names_are_host_and_port() {
        assert!(check_service_name(DEFAULT_SERVICE_NAME).is_ok());
        for bad in ["", "MASTER", ":8889", "h:", "h:99999", "h"] {
            assert!(check_service_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespaces_normalize_as_the_contract_says() {
        assert_eq!(normalize_namespace(""), "");
        assert_eq!(normalize_namespace("foo"), "/foo/");
        assert_eq!(normalize_namespace("/a/b/"), "/a/b/");
        assert_eq!(normalize_namespace("///"), "");
    }
}
