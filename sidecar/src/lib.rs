//! `vllm-sidecar`: registers one vLLM server with xllm-service and reports its load.
//!
//! vLLM cannot register itself in etcd, so this program runs beside it: it waits for
//! vLLM's `/health`, puts the instance key in etcd under a lease, keeps the lease alive,
//! scrapes vLLM's `/metrics` and posts heartbeats to the master.
//!
//! # Layout
//!
//! Data flows one way: `/metrics` bytes → [`prom`] (borrowed samples) → [`mapping`]
//! (interval state) → heartbeat body → master.
//!
//! - [`prom`]: the Prometheus / OpenMetrics text parser, lenient and strict:
//!   `prom::parse(text, format, mode)`.
//! - [`mapping`]: from a page to the heartbeat's load and latency metrics, with the
//!   state kept between scrapes: `Mapper::observe` (parsed page) or
//!   `Mapper::observe_text` (the scrape path, straight from the text).
//! - [`tools`]: the `parse` and `preview` subcommands.
//!
//! Registration is a separate concern: health probe → lease → etcd key.
//!
//! - [`config`]: the flags (the reference's names, env vars and defaults) validated into
//!   a `Config`: `Config::from_args`.
//! - [`lifecycle`]: the state machine that owns the registration and runs every periodic
//!   job on one worker thread: `Sidecar::new(config).run(shutdown)`.
//! - [`lease_guard`]: the lease's dead man's switch, refreshing it while the worker is
//!   stuck on a slow vLLM or master: `LeaseGuard::push`.
//! - [`etcd`]: etcd v3 JSON-gateway client (endpoints in order, auth, re-auth):
//!   `EtcdClient::lease_grant` / `lease_keepalive` / `lease_revoke` / `put`.
//! - [`instance`]: the key and `InstanceMetaInfo` value the master reads: `instance_key`.
//! - [`health`]: vLLM `/health` probe: `HealthProbe::is_healthy`.
//! - [`scrape`]: capped, timed `/metrics` read into a reused buffer → mapping straight
//!   from the text (a full parse only to count skipped lines, 1 scrape in 64):
//!   `Scraper::scrape`.
//! - [`heartbeat`]: the POST to the master and its answers: `HeartbeatClient::send`.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics` on `--admin-listen`: `admin::serve`.
//! - [`telemetry`]: the sidecar's own Prometheus metrics: `Telemetry::encode`.
//! - [`http`]: the blocking HTTP/1.1 keep-alive client every exchange goes through, one
//!   deadline per exchange: `Client::send` / `send_into`.
//! - [`mailbox`]: how the worker is told things (stop, a lease the guard lost), a queue
//!   with a deadline-bounded receive: `Mailbox::recv_until`.
//! - [`peers`]: the async clients of the three peers on reqwest, thin and decision-free:
//!   `peers::http::build_client`, `peers::etcd::EtcdClient`, `peers::vllm::VllmClient`,
//!   `peers::master::MasterClient`.
//! - [`backoff`], [`logging`], [`shutdown`]: small plumbing.
//!
//! The whole program: [`run`].

pub mod admin;
pub mod backoff;
pub mod config;
pub mod core;
pub mod etcd;
pub mod health;
pub mod heartbeat;
pub mod http;
pub mod instance;
pub mod lease_guard;
pub mod lifecycle;
pub mod logging;
pub mod mailbox;
pub mod mapping;
pub mod peers;
pub mod prom;
pub mod scrape;
pub mod shutdown;
pub mod telemetry;
pub mod tools;

use config::Config;
use shutdown::Shutdown;

/// Run the sidecar until `shutdown` fires; then revoke the lease (bounded) and return.
/// Serves the admin endpoint when configured; failing to bind it is the only error.
pub async fn run(config: Config, shutdown: Shutdown) -> std::io::Result<()> {
    tracing::info!(
        register_addr = %config.register_addr,
        backend_type = %config.backend_type,
        instance_type = %config.instance_type,
        "sidecar starting"
    );
    if config.etcd_username.is_empty() && !config.etcd_password.is_empty() {
        // The reference ignores a password without a user too; say so.
        tracing::warn!("--etcd-password is set but --etcd-username is empty: not authenticating");
    }
    let sidecar = lifecycle::Sidecar::new(config);
    let admin = match sidecar.config().admin_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let local = listener.local_addr()?;
            tracing::info!(addr = %local, "admin endpoint listening");
            println!("vllm-sidecar admin listening on {local}");
            let state = admin::AdminState {
                telemetry: sidecar.telemetry(),
                status: sidecar.status(),
            };
            Some(tokio::spawn(admin::serve(
                listener,
                state,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    sidecar.run(shutdown).await;
    if let Some(task) = admin {
        task.abort();
    }
    Ok(())
}
