//! Command-line flags and the validated configuration the sidecar runs with.
//!
//! The flags, environment variables and defaults are the reference Python sidecar's
//! (docs/contract.md §6), so this binary replaces it without touching a deployment. Extra
//! flags only add; none changes a reference default. Validation happens once, here: the
//! rest of the crate works with a [`Config`] that cannot hold a bad URL or an impossible
//! timer.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use url::Url;

use crate::instance::InstanceType;
use crate::mapping::LatencyStat;

/// A value that must never reach a log line or an error message (tokens, passwords).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself: call only where it goes on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("\"<redacted>\"")
        }
    }
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The flags of `vllm-sidecar` (no subcommand). Names, env vars and defaults follow the
/// reference sidecar; the ones after `--log-level` are this implementation's additions.
#[derive(Clone, clap::Args)]
pub struct RunArgs {
    /// etcd endpoints, comma-separated; `http://`/`https://` kept, else `http://` added.
    #[arg(long, env = "ETCD_ENDPOINTS", default_value = "127.0.0.1:2379")]
    pub etcd_endpoints: String,
    /// Key namespace; must match the master's --etcd_namespace.
    #[arg(long, env = "ETCD_NAMESPACE", default_value = "")]
    pub etcd_namespace: String,
    /// etcd user; when set the sidecar authenticates and sends the token.
    #[arg(
        long,
        env = "ETCD_USERNAME",
        default_value = "",
        hide_env_values = true
    )]
    pub etcd_username: String,
    #[arg(
        long,
        env = "ETCD_PASSWORD",
        default_value = "",
        hide_env_values = true
    )]
    pub etcd_password: String,
    /// Seconds for one etcd request (per endpoint).
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub etcd_timeout: f64,
    /// Base URL of the local vLLM server.
    #[arg(long, default_value = "http://127.0.0.1:18000")]
    pub vllm_url: String,
    /// host:port the master dials, no scheme (default: derived from --vllm-url).
    #[arg(long)]
    pub register_addr: Option<String>,
    #[arg(long, default_value = "vllm")]
    pub backend_type: String,
    #[arg(long, value_enum, ignore_case = true, default_value = "DEFAULT")]
    pub instance_type: InstanceType,
    /// Prefix of the incarnation id.
    #[arg(long, default_value = "vllm")]
    pub instance_name: String,
    /// etcd lease TTL, seconds.
    #[arg(long, default_value_t = 6, allow_negative_numbers = true)]
    pub lease_ttl: i64,
    /// Seconds between health probes (and at most this between lease keepalives).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub keepalive_interval: f64,
    /// Seconds for one /health probe (also the /metrics scrape and heartbeat POST).
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub health_timeout: f64,
    /// Consecutive failed probes before the lease is revoked.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true)]
    pub health_fail_threshold: u32,
    /// Master HTTP base URL for /v1/internal/heartbeat.
    #[arg(long, default_value = "http://127.0.0.1:9998")]
    pub xllm_service_url: String,
    /// Sent as X-Internal-Token; must match the master's --internal_api_token.
    #[arg(
        long,
        env = "XLLM_INTERNAL_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    pub internal_token: String,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub heartbeat_interval: f64,
    /// vLLM Prometheus endpoint (default: --vllm-url followed by /metrics).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// DEBUG, INFO, WARNING, ERROR (RUST_LOG, when set, wins).
    #[arg(long, default_value = "INFO")]
    pub log_level: String,

    /// Log line format on stderr.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Serve /healthz, /readyz and /metrics (the sidecar's own) on this address.
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Largest /metrics body read, bytes; a larger page is a scrape error.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub metrics_max_bytes: usize,
    /// Seconds for the whole /metrics read (default: --health-timeout).
    #[arg(long, allow_negative_numbers = true)]
    pub scrape_timeout: Option<f64>,
    /// Only count samples whose model_name label equals this.
    #[arg(long)]
    pub model: Option<String>,
    /// Latency statistic reported as recent_max_ttft / recent_max_tbt.
    #[arg(long, value_enum, default_value = "avg")]
    pub latency_stat: LatencyStat,
    /// Seconds allowed for the final lease revoke on SIGTERM/SIGINT.
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true)]
    pub shutdown_timeout: f64,
    /// Stay registered while vLLM sleeps (vllm:engine_sleep_state awake = 0 on every
    /// engine); by default the instance is deregistered until it wakes.
    #[arg(long)]
    pub no_sleep_deregister: bool,
    /// Post heartbeats to the elected master named by the etcd key XLLM:SERVICE:MASTER
    /// under --etcd-namespace (host from the key; scheme, path and port from
    /// --xllm-service-url), falling back to --xllm-service-url while there is none. For
    /// several xllm-service replicas.
    /// (`XLLM_FOLLOW_MASTER` takes true/false, 1/0, yes/no, on/off.)
    #[arg(
        long,
        env = "XLLM_FOLLOW_MASTER",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub follow_master: bool,
    /// With --follow-master: the master's HTTP port, instead of --xllm-service-url's
    /// (the MASTER key names the RPC port).
    #[arg(long, env = "XLLM_MASTER_HTTP_PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub master_http_port: Option<u16>,
    /// With --follow-master: seconds between reads of the MASTER key while heartbeats
    /// are answered (they fail over sooner when heartbeats fail).
    #[arg(
        long,
        env = "XLLM_MASTER_READ_INTERVAL",
        default_value_t = 10.0,
        allow_negative_numbers = true
    )]
    pub master_read_interval: f64,
}

/// A configuration error: printed as one line, exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn bad(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

/// Everything the sidecar needs, validated.
#[derive(Clone, Debug)]
pub struct Config {
    pub etcd_endpoints: Vec<Url>,
    pub etcd_namespace: String,
    pub etcd_username: String,
    pub etcd_password: Secret,
    pub etcd_timeout: Duration,
    pub vllm_url: Url,
    pub register_addr: String,
    pub backend_type: String,
    pub instance_type: InstanceType,
    pub instance_name: String,
    pub lease_ttl: i64,
    pub keepalive_interval: Duration,
    pub health_timeout: Duration,
    pub health_fail_threshold: u32,
    pub heartbeat_url: Url,
    pub internal_token: Secret,
    pub heartbeat_interval: Duration,
    pub metrics_url: Url,
    pub log_level: String,
    pub log_format: LogFormat,
    pub admin_listen: Option<SocketAddr>,
    pub metrics_max_bytes: usize,
    pub scrape_timeout: Duration,
    pub model: Option<String>,
    pub latency_stat: LatencyStat,
    pub shutdown_timeout: Duration,
    /// Deregister while vLLM reports every engine asleep.
    pub sleep_deregister: bool,
    /// Post heartbeats to the elected master (the MASTER key) instead of the URL.
    pub follow_master: bool,
    /// The elected master's HTTP port (default: the port of `heartbeat_url`).
    pub master_http_port: Option<u16>,
    /// Time between steady reads of the MASTER key.
    pub master_read_interval: Duration,
}

impl Config {
    /// Validate the flags. Every error names the flag it is about.
    pub fn from_args(args: RunArgs) -> Result<Config, ConfigError> {
        let etcd_endpoints = parse_etcd_endpoints(&args.etcd_endpoints)?;
        let vllm_url = parse_http_url("--vllm-url", &args.vllm_url)?;
        let register_addr = match args.register_addr {
            Some(addr) => addr,
            None => derive_register_addr(&args.vllm_url),
        };
        validate_register_addr(&register_addr)?;
        parse_http_url("--xllm-service-url", &args.xllm_service_url)?;
        let heartbeat_url = parse_http_url(
            "--xllm-service-url",
            &format!(
                "{}/v1/internal/heartbeat",
                args.xllm_service_url.trim_end_matches('/')
            ),
        )?;
        let metrics_url = match &args.metrics_url {
            Some(url) => parse_http_url("--metrics-url", url)?,
            None => parse_http_url(
                "--vllm-url",
                &format!("{}/metrics", args.vllm_url.trim_end_matches('/')),
            )?,
        };

        let etcd_timeout = seconds("--etcd-timeout", args.etcd_timeout)?;
        let keepalive_interval = seconds("--keepalive-interval", args.keepalive_interval)?;
        let health_timeout = seconds("--health-timeout", args.health_timeout)?;
        let heartbeat_interval = seconds("--heartbeat-interval", args.heartbeat_interval)?;
        let scrape_timeout = match args.scrape_timeout {
            Some(s) => seconds("--scrape-timeout", s)?,
            None => health_timeout,
        };
        let shutdown_timeout = seconds("--shutdown-timeout", args.shutdown_timeout)?;
        let master_read_interval = seconds("--master-read-interval", args.master_read_interval)?;

        if args.lease_ttl <= 0 {
            return Err(bad(format!(
                "--lease-ttl must be a positive number of seconds, got {}",
                args.lease_ttl
            )));
        }
        if (args.lease_ttl as f64) <= args.keepalive_interval {
            return Err(bad(format!(
                "--lease-ttl ({} s) must be greater than --keepalive-interval ({} s)",
                args.lease_ttl, args.keepalive_interval
            )));
        }
        if args.health_fail_threshold == 0 {
            return Err(bad("--health-fail-threshold must be at least 1"));
        }
        if args.metrics_max_bytes == 0 {
            return Err(bad("--metrics-max-bytes must be at least 1"));
        }

        Ok(Config {
            etcd_endpoints,
            etcd_namespace: args.etcd_namespace,
            etcd_username: args.etcd_username,
            etcd_password: Secret::new(args.etcd_password),
            etcd_timeout,
            vllm_url,
            register_addr,
            backend_type: args.backend_type,
            instance_type: args.instance_type,
            instance_name: args.instance_name,
            lease_ttl: args.lease_ttl,
            keepalive_interval,
            health_timeout,
            health_fail_threshold: args.health_fail_threshold,
            heartbeat_url,
            internal_token: Secret::new(args.internal_token),
            heartbeat_interval,
            metrics_url,
            log_level: args.log_level,
            log_format: args.log_format,
            admin_listen: args.admin_listen,
            metrics_max_bytes: args.metrics_max_bytes,
            scrape_timeout,
            model: args.model,
            latency_stat: args.latency_stat,
            shutdown_timeout,
            sleep_deregister: !args.no_sleep_deregister,
            follow_master: args.follow_master,
            master_http_port: args.master_http_port,
            master_read_interval,
        })
    }

    /// How often the lease is refreshed: the keepalive interval, but never more than a
    /// third of the TTL, so two lost keepalives in a row still leave the lease alive.
    pub fn keepalive_period(&self) -> Duration {
        let third = Duration::from_secs_f64(self.lease_ttl as f64 / 3.0);
        self.keepalive_interval.min(third)
    }
}

/// Only the run flags, for [`Config::from_flags`].
#[derive(clap::Parser)]
#[command(name = "vllm-sidecar", args_override_self = true)]
struct RunFlags {
    #[command(flatten)]
    run: RunArgs,
}

impl Config {
    /// Parse and validate run flags (no program name), e.g. from a test or a launcher.
    /// Environment variables apply as on the command line.
    pub fn from_flags<I, T>(flags: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let argv = std::iter::once(std::ffi::OsString::from("vllm-sidecar"))
            .chain(flags.into_iter().map(Into::into));
        let parsed = RunFlags::try_parse_from(argv).map_err(|e| {
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            bad(line.strip_prefix("error: ").unwrap_or(line))
        })?;
        Config::from_args(parsed.run)
    }
}

fn seconds(flag: &str, value: f64) -> Result<Duration, ConfigError> {
    if !value.is_finite() || value <= 0.0 || value > 86_400.0 {
        return Err(bad(format!(
            "{flag} must be a number of seconds in (0, 86400], got {value}"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

fn parse_http_url(flag: &str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value).map_err(|e| bad(format!("{flag}: invalid URL {value:?}: {e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(bad(format!(
            "{flag}: URL {value:?} must start with http:// or https://"
        )));
    }
    if url.host_str().unwrap_or_default().is_empty() {
        return Err(bad(format!("{flag}: URL {value:?} has no host")));
    }
    Ok(url)
}

/// The reference's rule: split on commas, keep an explicit scheme, else add `http://`.
pub fn parse_etcd_endpoints(value: &str) -> Result<Vec<Url>, ConfigError> {
    let mut endpoints = Vec::new();
    for raw in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let raw = raw.trim_end_matches('/');
        let with_scheme = if raw.starts_with("http://") || raw.starts_with("https://") {
            raw.to_string()
        } else {
            format!("http://{raw}")
        };
        let url = parse_http_url("--etcd-endpoints", &with_scheme)?;
        if url.path() != "/" {
            return Err(bad(format!(
                "--etcd-endpoints: endpoint {raw:?} must not have a path"
            )));
        }
        endpoints.push(url);
    }
    if endpoints.is_empty() {
        return Err(bad("--etcd-endpoints: at least one endpoint is required"));
    }
    Ok(endpoints)
}

/// The reference's derivation: drop the scheme and everything from the first `/`. Two
/// corrections: user info (`user:pw@`) never reaches the etcd key, and a URL without a
/// port gets its scheme's default one (80 or 443, the port the URL itself is served on),
/// so the name is always `host:port`. An IPv6 host keeps its brackets:
/// `http://[::1]:18000/` gives `[::1]:18000`.
pub fn derive_register_addr(vllm_url: &str) -> String {
    let (scheme, rest) = vllm_url.split_once("://").unwrap_or(("", vllm_url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host_port)| host_port);
    if split_host_port(host_port).is_some() {
        return host_port.to_string();
    }
    match scheme.to_ascii_lowercase().as_str() {
        "http" => format!("{host_port}:80"),
        "https" => format!("{host_port}:443"),
        _ => host_port.to_string(),
    }
}

/// `host` and `port` of `host:port` or `[v6]:port`, if it has that shape (the host is
/// not checked here).
fn split_host_port(addr: &str) -> Option<(&str, &str)> {
    let (host, port) = addr.rsplit_once(':')?;
    let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (is_port && (!host.starts_with('[') || host.ends_with(']'))).then_some((host, port))
}

/// `host:port` (a name or an IPv4 address) or `[IPv6]:port`, as the master dials it in
/// `http://<addr>/health`. An IPv6 address without brackets is refused: its last `:`
/// cannot be told from the port's.
fn validate_register_addr(addr: &str) -> Result<(), ConfigError> {
    let shape = |why: &str| {
        bad(format!(
            "--register-addr must be host:port or [IPv6]:port with no scheme or path ({why}), got {addr:?}"
        ))
    };
    if addr.is_empty() {
        return Err(bad("--register-addr is empty"));
    }
    if addr.contains("://") || addr.contains(['/', '?', '#', '@']) {
        return Err(shape("a scheme, path or user is not allowed"));
    }
    if addr.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(shape("no spaces"));
    }
    let needs_brackets = "an IPv6 address needs brackets: [ADDRESS]:PORT";
    if addr.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(shape(needs_brackets));
    }
    let Some((host, port)) = split_host_port(addr) else {
        return Err(shape("the port is missing"));
    };
    if !matches!(port.parse::<u16>(), Ok(1..)) {
        return Err(shape("the port must be 1 to 65535"));
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').unwrap_or(inner);
        if inner.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(shape("not an IPv6 address inside the brackets"));
        }
    } else if host.contains(':') {
        return Err(shape(needs_brackets));
    } else if host.is_empty() || host.contains(['[', ']']) {
        return Err(shape("the host is missing or malformed"));
    }
    Ok(())
}
