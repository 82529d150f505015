//! `vllm-sidecar`: registers one vLLM server with xllm-service and reports its load.
//!
//! vLLM cannot register itself in etcd, so this program runs beside it: it waits for
//! vLLM's `/health`, puts the instance key in etcd under a lease, keeps the lease alive,
//! scrapes vLLM's `/metrics` and posts heartbeats to the master.
//!
//! # Layout
//!
//! Deciding is separate from doing: a pure state machine decides, a thin driver does the
//! I/O.
//!
//! - [`core`]: every decision (probe, register, keep alive, re-register, scrape,
//!   heartbeat, revoke, drain, exit) as a state machine with no I/O, clock or global
//!   randomness, fed inputs at given times and answering commands:
//!   `Core::new(config, seed, now)`, `Core::handle(now, input)`, `Core::poll_command`,
//!   `Core::next_wakeup`. Also the heartbeat body (`HeartbeatBody`) and, with
//!   `--follow-master`, where heartbeats go (`HeartbeatTarget`, from the MASTER key).
//! - [`driver`]: runs the core on tokio, one task per command, answers back by id; logs
//!   and counts the core's notes: `Sidecar::new(config)?.run(shutdown)`.
//! - [`peers`]: the reqwest clients of etcd's JSON gateway, vLLM and the master:
//!   `EtcdClient`, `VllmClient`, `MasterClient`, built on `http::build_client`.
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
//! Around them:
//!
//! - [`config`]: the flags (the reference's names, env vars and defaults) validated into
//!   a `Config`: `Config::from_args`.
//! - [`instance`]: the key and `InstanceMetaInfo` value the master reads: `instance_key`.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`, `POST /drain`, `POST /undrain` on
//!   `--admin-listen`: `admin::serve`.
//! - [`telemetry`]: the sidecar's own Prometheus metrics: `Telemetry::encode`.
//! - [`backoff`], [`logging`], [`shutdown`]: small plumbing.
//!
//! The whole program: [`run`].

pub mod admin;
pub mod backoff;
pub mod config;
pub mod core;
pub mod driver;
pub mod instance;
pub mod logging;
pub mod mapping;
pub mod peers;
pub mod prom;
pub mod shutdown;
pub mod telemetry;
pub mod tools;

use std::io::Write as _;

use config::Config;
use shutdown::Shutdown;

/// Run the sidecar until `shutdown` fires; then revoke the lease (bounded) and return.
/// Serves the admin endpoint when configured. Failing to bind it, or to set up the HTTP
/// clients (a CA bundle that cannot be used), is the error.
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
    let sidecar = driver::Sidecar::new(config).map_err(std::io::Error::other)?;
    let admin = match sidecar.config().admin_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let local = listener.local_addr()?;
            tracing::info!(addr = %local, "admin endpoint listening");
            // Not `println!`: a closed stdout must not stop the sidecar.
            let _ = writeln!(std::io::stdout(), "vllm-sidecar admin listening on {local}");
            let state = admin::AdminState {
                telemetry: sidecar.telemetry(),
                status: sidecar.status(),
                liveness: sidecar.liveness(),
                requests: sidecar.requests(),
                token: sidecar.config().internal_token.clone(),
            };
            Some(tokio::spawn(admin::serve(
                listener,
                state,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let signals = tokio::spawn(driver::drain_on_signals(sidecar.requests()));
    sidecar.run(shutdown).await;
    tracing::info!("sidecar stopped");
    signals.abort();
    if let Some(task) = admin {
        task.abort();
    }
    Ok(())
}
