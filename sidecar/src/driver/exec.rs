//! Running one command: the matching peer call, its answer as the core's [`Answer`],
//! sent back with the command's id. Each command is its own task; the only thing
//! measured here is how long the exchanges took (telemetry).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::answers;
use crate::config::Config;
use crate::core::{Answer, Command, CommandId, HeartbeatTarget};
use crate::peers::etcd::EtcdClient;
use crate::peers::http::{build_client_with_roots, trusted_roots, Redirects};
use crate::peers::master::MasterClient;
use crate::peers::vllm::VllmClient;
use crate::telemetry::Telemetry;

/// Where answers go.
pub type AnswerTx = UnboundedSender<(CommandId, Answer)>;

/// The three peers' clients (cheap to clone) and the telemetry the exchanges feed.
#[derive(Clone)]
pub struct Peers {
    etcd: EtcdClient,
    vllm: VllmClient,
    master: MasterClient,
    telemetry: Arc<Telemetry>,
}

impl Peers {
    /// vLLM's endpoints follow a few redirects; etcd and the master's POST never do. The
    /// CA bundle (often a 200 KB system file) is read and parsed once for both clients.
    pub fn new(config: &Config, telemetry: Arc<Telemetry>) -> Result<Peers, String> {
        let roots = trusted_roots()?;
        let follow = build_client_with_roots(Redirects::Follow, roots.clone())?;
        let never = build_client_with_roots(Redirects::Never, roots)?;
        Ok(Peers {
            etcd: EtcdClient::new(
                config.etcd_endpoints.clone(),
                config.etcd_username.clone(),
                config.etcd_password.clone(),
                config.etcd_timeout,
                never.clone(),
            )
            .with_failover_after(config.keepalive_period()),
            vllm: VllmClient::new(
                follow,
                &config.vllm_url,
                config.metrics_url.clone(),
                config.health_timeout,
                config.scrape_timeout,
                config.metrics_max_bytes,
            ),
            master: MasterClient::new(
                never,
                config.heartbeat_url.clone(),
                config.internal_token.clone(),
                config.health_timeout,
            ),
            telemetry,
        })
    }

    /// Run `command` as a task of its own; its answer (if it has one) goes to `answers`.
    pub fn spawn(&self, command: Command, answers: AnswerTx) {
        let peers = self.clone();
        tokio::spawn(async move {
            if let Some(answer) = peers.run(command).await {
                let _ = answers.send(answer);
            }
        });
    }

    async fn run(&self, command: Command) -> Option<(CommandId, Answer)> {
        Some(match command {
            Command::ProbeHealth { id } => (id, answers::health(self.vllm.probe_health().await)),
            Command::GrantLease { id, ttl } => {
                (id, answers::grant(self.etcd.lease_grant(ttl).await, ttl))
            }
            Command::PutKey {
                id,
                key,
                value,
                lease,
            } => (id, answers::put(self.etcd.put(&key, &value, lease).await)),
            Command::Keepalive { id, lease } => (
                id,
                answers::keepalive(self.etcd.lease_keepalive(lease).await),
            ),
            Command::Scrape { id } => (id, self.scrape().await),
            Command::PostHeartbeat { id, body, target } => (id, self.post(body, target).await),
            Command::ReadMasterKey { id, key } => {
                (id, answers::master_key(self.etcd.get(&key).await))
            }
            Command::Revoke { id, lease } => {
                (id, answers::revoke(self.etcd.lease_revoke(lease).await))
            }
            Command::LogServedModel => {
                let (model, version) =
                    tokio::join!(self.vllm.served_model(), self.vllm.served_version());
                let model = model.as_deref().unwrap_or("?");
                let vllm_version = version.as_deref().unwrap_or("?");
                tracing::info!(model, vllm_version, "vLLM healthy, registering");
                return None;
            }
            Command::Note(_) | Command::Exit { .. } => return None,
        })
    }

    async fn scrape(&self) -> Answer {
        let started = Instant::now();
        let page = self.vllm.fetch_metrics().await;
        let took = started.elapsed().as_secs_f64();
        self.telemetry.scrape_duration.observe(took);
        if page.is_ok() {
            self.telemetry.last_scrape_duration.set(took);
        }
        answers::scrape(page)
    }

    async fn post(&self, body: String, target: HeartbeatTarget) -> Answer {
        let started = Instant::now();
        let answer = match &target {
            HeartbeatTarget::Configured => self.master.post_heartbeat(body).await,
            HeartbeatTarget::Elected { url, .. } => self.master.post_heartbeat_to(url, body).await,
        };
        let took = started.elapsed().as_secs_f64();
        self.telemetry.heartbeat_duration.observe(took);
        if answer == Ok(200) {
            let now = SystemTime::now().duration_since(UNIX_EPOCH);
            let secs = now.map_or(0.0, |d| d.as_secs_f64());
            self.telemetry.last_heartbeat_success.set(secs);
        }
        answers::heartbeat(answer)
    }
}
