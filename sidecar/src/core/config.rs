//! What the core needs to know, drawn from the validated [`Config`]: identities, periods
//! and limits. No sockets or secrets: those are the driver's. The one URL is the
//! heartbeat URL, only when following the elected master: the core rewrites its host.

use std::time::Duration;

use super::target::{master_key, FollowConfig};
use crate::config::Config;
use crate::instance::{instance_key, InstanceType};
use crate::mapping::MapperConfig;

/// The core's settings. [`CoreConfig::from_config`] builds them from the flags.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// The instance key in etcd.
    pub key: String,
    /// `host:port` the master dials (the value's `name` and `rpc_address`).
    pub register_addr: String,
    /// The key's prefix and the value's `type`.
    pub instance_type: InstanceType,
    /// The value's `backend_type`.
    pub backend_type: String,
    /// Prefix of incarnation ids.
    pub instance_name: String,
    /// Seconds asked for at every lease grant.
    pub lease_ttl: i64,
    /// Time between `/health` probes after start-up.
    pub probe_interval: Duration,
    /// Time between keepalives: the probe interval, never more than TTL/3.
    pub keepalive_period: Duration,
    /// Time between heartbeat cycles (scrape, then post).
    pub heartbeat_interval: Duration,
    /// Failed probes in a row that revoke the lease.
    pub health_fail_threshold: u32,
    /// Longest wait for the final revoke before exiting anyway.
    pub shutdown_timeout: Duration,
    /// Deregister while the page says every engine sleeps; register again on waking.
    pub sleep_deregister: bool,
    /// How a page becomes the heartbeat's metrics (`--latency-stat`, `--model`).
    pub mapper: MapperConfig,
    /// Wall-clock milliseconds since the Unix epoch at core time zero; the only wall
    /// time the core knows, used for `register_ts_ms` (`unix_ms_at_start + now`).
    pub unix_ms_at_start: u64,
    /// `--follow-master`: heartbeats go to the master the MASTER key names.
    pub follow: Option<FollowConfig>,
}

impl CoreConfig {
    /// The settings for `config`; `unix_ms_at_start` is the wall clock when the core's
    /// time is zero.
    pub fn from_config(config: &Config, unix_ms_at_start: u64) -> CoreConfig {
        CoreConfig {
            key: instance_key(
                &config.etcd_namespace,
                config.instance_type,
                &config.register_addr,
            ),
            register_addr: config.register_addr.clone(),
            instance_type: config.instance_type,
            backend_type: config.backend_type.clone(),
            instance_name: config.instance_name.clone(),
            lease_ttl: config.lease_ttl,
            probe_interval: config.keepalive_interval,
            keepalive_period: config.keepalive_period(),
            heartbeat_interval: config.heartbeat_interval,
            health_fail_threshold: config.health_fail_threshold,
            shutdown_timeout: config.shutdown_timeout,
            sleep_deregister: config.sleep_deregister,
            mapper: MapperConfig {
                latency_stat: config.latency_stat,
                model: config.model.clone(),
            },
            unix_ms_at_start,
            follow: config.follow_master.then(|| FollowConfig {
                master_key: master_key(&config.etcd_namespace),
                configured_url: config.heartbeat_url.clone(),
                http_port: config.master_http_port,
                read_interval: config.master_read_interval,
            }),
        }
    }

    /// The lease TTL as a duration.
    pub fn lease_ttl_duration(&self) -> Duration {
        Duration::from_secs(self.lease_ttl.unsigned_abs())
    }

    /// The longest the core ever sleeps between wake-ups: the longest of its periods,
    /// counting the start-up probe backoff (capped at the TTL).
    pub fn longest_period(&self) -> Duration {
        self.probe_interval
            .max(self.heartbeat_interval)
            .max(self.keepalive_period)
            .max(self.lease_ttl_duration())
    }
}
