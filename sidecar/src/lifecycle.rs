//! The sidecar's state machine: the only module that knows health, lease and heartbeat.
//!
//! Three tasks, so a slow peer never starves another's timer:
//! - the **health task** gates start-up on `/health` (backoff from 1 s, doubling, capped
//!   at the lease TTL), then probes every `--keepalive-interval` and reports each result;
//! - the **heartbeat task** scrapes `/metrics` and posts heartbeats every
//!   `--heartbeat-interval` while registered and healthy, backing off on failures;
//! - the **lifecycle loop** (here) owns the registration. It refreshes the lease on its
//!   own timer (at most TTL/3 apart), whatever `/health` or `/metrics` are doing; it
//!   registers when vLLM is healthy and nothing is registered (fresh incarnation each
//!   time, jittered backoff on failure); it re-registers when the lease is gone (TTL 0 or
//!   a keepalive error) or the master answered 409; it revokes after
//!   `--health-fail-threshold` failed probes in a row and on shutdown (bounded by
//!   `--shutdown-timeout`, even if etcd hangs).
//!
//! The periodic jobs run on one time grid (`epoch + k·period`): their timers fire in the
//! same instant and their requests go out together, so the process wakes once per cycle
//! rather than once per job; at short intervals that is most of its CPU.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};

use crate::alarm::Alarm;
use crate::backoff::Backoff;
use crate::config::Config;
use crate::etcd::EtcdClient;
use crate::health::HealthProbe;
use crate::heartbeat::{Answer, HeartbeatBody, HeartbeatClient};
use crate::instance::{instance_key, new_incarnation, InstanceMeta};
use crate::mapping::{Mapper, MapperConfig};
use crate::scrape::Scraper;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// The instance as it is in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub key: String,
    pub lease: i64,
    pub incarnation: String,
}

/// What the sidecar currently believes; published on a watch channel (admin `/readyz`,
/// the heartbeat task, tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub registration: Option<Registration>,
    /// The last `/health` probe succeeded.
    pub healthy: bool,
}

/// What the other tasks tell the lifecycle loop.
#[derive(Debug)]
enum Event {
    Health(bool),
    Conflict(String),
}

/// One step the loop takes; computed by a select, then run cancellably.
enum Step {
    Shutdown,
    Health(bool),
    Conflict(String),
    Keepalive,
    Register,
}

/// A configured sidecar, not yet running.
pub struct Sidecar {
    config: Arc<Config>,
    http: crate::http::Client,
    etcd: Arc<EtcdClient>,
    telemetry: Arc<Telemetry>,
    status_tx: watch::Sender<Status>,
}

impl Sidecar {
    pub fn new(config: Config) -> Sidecar {
        let http = crate::http::client();
        let etcd = EtcdClient::new(
            http.clone(),
            config.etcd_endpoints.clone(),
            config.etcd_timeout,
            &config.etcd_username,
            config.etcd_password.clone(),
        );
        let (status_tx, _) = watch::channel(Status::default());
        Sidecar {
            config: Arc::new(config),
            http,
            etcd: Arc::new(etcd),
            telemetry: Arc::new(Telemetry::new()),
            status_tx,
        }
    }

    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.telemetry.clone()
    }

    pub fn status(&self) -> watch::Receiver<Status> {
        self.status_tx.subscribe()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Run until `shutdown` fires, then revoke the lease (bounded) and return.
    pub async fn run(self, shutdown: Shutdown) {
        let cfg = self.config.clone();
        let (events_tx, events_rx) = mpsc::channel(16);
        // One time grid for every periodic job, so the process wakes once for several.
        let epoch = Instant::now();
        let probe = HealthProbe::new(self.http.clone(), &cfg.vllm_url, cfg.health_timeout);

        let health = tokio::spawn(health_loop(
            probe.clone(),
            cfg.clone(),
            epoch,
            events_tx.clone(),
            shutdown.clone(),
        ));
        let mapper = Mapper::new(MapperConfig {
            latency_stat: cfg.latency_stat,
            model: cfg.model.clone(),
        });
        let scraper = Scraper::new(
            self.http.clone(),
            cfg.metrics_url.clone(),
            cfg.scrape_timeout,
            cfg.metrics_max_bytes,
            mapper,
        );
        let heartbeat_client = HeartbeatClient::new(
            self.http.clone(),
            cfg.heartbeat_url.clone(),
            cfg.internal_token.clone(),
            cfg.health_timeout,
        );
        let heartbeater = Heartbeater {
            scraper,
            client: heartbeat_client,
            events: events_tx,
            telemetry: self.telemetry.clone(),
        };
        let heartbeat = tokio::spawn(heartbeat_loop(
            heartbeater,
            cfg.clone(),
            epoch,
            self.status_tx.subscribe(),
            shutdown.clone(),
        ));

        let mut lifecycle = Lifecycle::new(
            cfg.clone(),
            self.etcd.clone(),
            probe,
            self.telemetry.clone(),
            self.status_tx.clone(),
        );
        lifecycle.run(events_rx, epoch, shutdown).await;
        abort(health);
        abort(heartbeat);

        match tokio::time::timeout(cfg.shutdown_timeout, lifecycle.revoke()).await {
            Ok(()) => tracing::info!("sidecar stopped"),
            Err(_) => tracing::warn!(
                timeout = ?cfg.shutdown_timeout,
                lease_ttl_s = cfg.lease_ttl,
                "lease revoke did not finish in time; the key expires with the lease"
            ),
        }
    }
}

fn abort(task: JoinHandle<()>) {
    task.abort();
}

struct Lifecycle {
    cfg: Arc<Config>,
    etcd: Arc<EtcdClient>,
    probe: HealthProbe,
    telemetry: Arc<Telemetry>,
    status: watch::Sender<Status>,
    key: String,
    /// Set as soon as a lease is granted (so a shutdown mid-registration still revokes it).
    lease: Option<i64>,
    /// Set once the key is put: registered.
    incarnation: Option<String>,
    healthy: bool,
    fails: u32,
    retry_at: Instant,
    backoff: Backoff,
    logged_model: bool,
}

impl Lifecycle {
    fn new(
        cfg: Arc<Config>,
        etcd: Arc<EtcdClient>,
        probe: HealthProbe,
        telemetry: Arc<Telemetry>,
        status: watch::Sender<Status>,
    ) -> Lifecycle {
        let key = instance_key(&cfg.etcd_namespace, cfg.instance_type, &cfg.register_addr);
        let base = cfg.keepalive_interval.min(Duration::from_secs(1));
        let backoff = Backoff::new(base, cfg.lease_ttl_duration().max(base));
        Lifecycle {
            cfg,
            etcd,
            probe,
            telemetry,
            status,
            key,
            lease: None,
            incarnation: None,
            healthy: false,
            fails: 0,
            retry_at: Instant::now(),
            backoff,
            logged_model: false,
        }
    }

    fn registered(&self) -> bool {
        self.lease.is_some() && self.incarnation.is_some()
    }

    async fn run(
        &mut self,
        mut events: mpsc::Receiver<Event>,
        epoch: Instant,
        mut shutdown: Shutdown,
    ) {
        let period = self.cfg.keepalive_period();
        let mut alarm = Alarm::new();
        let mut keepalive_at = on_grid(epoch, period, Instant::now() + period);
        loop {
            let want_register = !self.registered() && self.healthy;
            let step = tokio::select! {
                biased;
                _ = shutdown.wait() => Step::Shutdown,
                event = events.recv() => match event {
                    Some(Event::Health(ok)) => Step::Health(ok),
                    Some(Event::Conflict(incarnation)) => Step::Conflict(incarnation),
                    None => Step::Shutdown,
                },
                _ = alarm.sleep_until(keepalive_at), if self.registered() => {
                    keepalive_at = next_tick(epoch, period, keepalive_at);
                    Step::Keepalive
                }
                _ = sleep_until(self.retry_at), if want_register => Step::Register,
            };
            let work = async {
                match step {
                    Step::Shutdown => false,
                    Step::Health(ok) => {
                        self.on_health(ok).await;
                        true
                    }
                    Step::Conflict(incarnation) => {
                        self.on_conflict(incarnation).await;
                        true
                    }
                    Step::Keepalive => {
                        self.keepalive().await;
                        true
                    }
                    Step::Register => {
                        self.register(None).await;
                        if self.registered() {
                            keepalive_at = on_grid(epoch, period, Instant::now() + period / 2);
                        }
                        true
                    }
                }
            };
            let go_on = tokio::select! {
                biased;
                _ = shutdown.wait() => false,
                go_on = work => go_on,
            };
            if !go_on {
                return;
            }
        }
    }

    fn publish(&self) {
        let registration = match (self.lease, &self.incarnation) {
            (Some(lease), Some(incarnation)) => Some(Registration {
                key: self.key.clone(),
                lease,
                incarnation: incarnation.clone(),
            }),
            _ => None,
        };
        self.telemetry
            .registered
            .set(i64::from(registration.is_some()));
        let status = Status {
            registration,
            healthy: self.healthy,
        };
        self.status.send_if_modified(|current| {
            if *current == status {
                false
            } else {
                *current = status;
                true
            }
        });
    }

    async fn on_health(&mut self, ok: bool) {
        if ok {
            if self.fails > 0 {
                tracing::info!(failed_probes = self.fails, "vLLM healthy again");
            }
            self.fails = 0;
            self.healthy = true;
        } else {
            self.fails = self.fails.saturating_add(1);
            self.healthy = false;
            self.telemetry.health_probe_failures.inc();
            tracing::warn!(
                "vLLM health probe failed ({}/{})",
                self.fails,
                self.cfg.health_fail_threshold
            );
            if self.fails >= self.cfg.health_fail_threshold && self.lease.is_some() {
                tracing::error!("vLLM unhealthy, deregistering");
                self.revoke().await;
                self.retry_at = Instant::now();
                self.backoff.reset();
            }
        }
        self.publish();
    }

    async fn on_conflict(&mut self, incarnation: String) {
        if self.incarnation.as_deref() != Some(incarnation.as_str()) {
            return; // already replaced since that heartbeat
        }
        tracing::warn!(%incarnation, "heartbeat 409 (stale/unknown incarnation), re-registering");
        let old = self.lease.take();
        self.incarnation = None;
        self.publish();
        self.register(old).await;
    }

    /// Grant a lease and put the key with a fresh incarnation. `replacing` is a lease that
    /// is still alive and loses the key to the new one: revoked afterwards.
    async fn register(&mut self, replacing: Option<i64>) {
        if !self.logged_model {
            self.logged_model = true;
            let model = self.probe.served_model().await;
            tracing::info!(
                model = model.as_deref().unwrap_or("?"),
                "vLLM healthy, registering"
            );
        }
        let incarnation = new_incarnation(&self.cfg.instance_name);
        let lease = match self.etcd.lease_grant(self.cfg.lease_ttl).await {
            Ok(lease) => lease,
            Err(e) => return self.registration_failed(&e.to_string()),
        };
        self.lease = Some(lease);
        let meta = InstanceMeta::new(
            &self.cfg.register_addr,
            self.cfg.instance_type,
            &self.cfg.backend_type,
            &incarnation,
        );
        if let Err(e) = self.etcd.put(&self.key, &meta.to_json(), lease).await {
            // The granted lease holds nothing and expires by itself.
            self.lease = None;
            return self.registration_failed(&e.to_string());
        }
        tracing::info!(
            key = %self.key,
            %incarnation,
            lease,
            ttl_s = self.cfg.lease_ttl,
            "registered"
        );
        self.incarnation = Some(incarnation);
        self.backoff.reset();
        self.telemetry.registrations.inc();
        self.telemetry.lease_ttl_remaining.set(self.cfg.lease_ttl);
        self.publish();
        if let Some(old) = replacing.filter(|old| *old != lease) {
            if let Err(e) = self.etcd.lease_revoke(old).await {
                tracing::debug!(lease = old, error = %e, "revoking the replaced lease failed; it expires by itself");
            }
        }
    }

    fn registration_failed(&mut self, why: &str) {
        let delay = self.backoff.next_delay();
        self.retry_at = Instant::now() + delay;
        self.telemetry.registration_failures.inc();
        tracing::warn!(error = %why, retry_in = ?delay, "register failed, will retry");
        self.publish();
    }

    async fn keepalive(&mut self) {
        let Some(lease) = self.lease else { return };
        match self.etcd.lease_keepalive(lease).await {
            Ok(ttl) if ttl > 0 => {
                self.telemetry.keepalives.inc();
                self.telemetry.lease_ttl_remaining.set(ttl);
                tracing::trace!(lease, ttl, "keepalive");
                return;
            }
            Ok(_) => {
                self.telemetry.leases_lost.inc();
                tracing::warn!(lease, "lease lost (ttl=0), re-registering");
            }
            Err(e) => {
                self.telemetry.keepalive_failures.inc();
                tracing::warn!(lease, error = %e, "keepalive failed, re-registering");
            }
        }
        self.lease = None;
        self.incarnation = None;
        self.telemetry.lease_ttl_remaining.set(0);
        self.retry_at = Instant::now();
        self.publish();
    }

    /// Revoke the lease, if any: the key disappears at once. On failure the lease still
    /// expires within its TTL.
    async fn revoke(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        self.incarnation = None;
        self.telemetry.lease_ttl_remaining.set(0);
        self.publish();
        match self.etcd.lease_revoke(lease).await {
            Ok(()) => {
                self.telemetry.deregistrations.inc();
                tracing::info!(key = %self.key, lease, "deregistered (lease revoked)");
            }
            Err(e) => tracing::warn!(
                lease,
                error = %e,
                "revoke failed (lease expires in <= {} s)",
                self.cfg.lease_ttl
            ),
        }
    }
}

/// Start-up gate, then one probe per `--keepalive-interval`, each reported.
async fn health_loop(
    probe: HealthProbe,
    cfg: Arc<Config>,
    epoch: Instant,
    events: mpsc::Sender<Event>,
    mut shutdown: Shutdown,
) {
    let cap = cfg.lease_ttl_duration();
    let mut wait = Duration::from_secs(1).min(cap);
    loop {
        if probe.is_healthy().await {
            break;
        }
        tracing::info!(url = %cfg.vllm_url, "waiting for vLLM to become healthy ...");
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = sleep(wait) => {}
        }
        wait = (wait * 2).min(cap);
    }
    if events.send(Event::Health(true)).await.is_err() {
        return;
    }
    let period = cfg.keepalive_interval;
    let mut alarm = Alarm::new();
    let mut at = on_grid(epoch, period, Instant::now() + period / 2);
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = alarm.sleep_until(at) => {}
        }
        at = next_tick(epoch, period, at);
        let ok = probe.is_healthy().await;
        if events.send(Event::Health(ok)).await.is_err() {
            return;
        }
    }
}

/// What one heartbeat needs: where to scrape, where to post, whom to tell.
struct Heartbeater {
    scraper: Scraper,
    client: HeartbeatClient,
    events: mpsc::Sender<Event>,
    telemetry: Arc<Telemetry>,
}

/// Scrape and post on the heartbeat cadence while registered and healthy.
async fn heartbeat_loop(
    mut heartbeater: Heartbeater,
    cfg: Arc<Config>,
    epoch: Instant,
    mut status: watch::Receiver<Status>,
    mut shutdown: Shutdown,
) {
    let interval = cfg.heartbeat_interval;
    let mut backoff = Backoff::new(interval, interval * 4);
    // Re-registrations caused by 409s in a row (a master that never sees our key, e.g. a
    // namespace mismatch) slow down instead of churning leases every heartbeat.
    let mut conflict_backoff = Backoff::new(interval, interval.max(Duration::from_secs(30)));
    let mut after_conflict = false;
    let mut next = Instant::now() + interval;
    let mut alarm = Alarm::new();
    let mut incarnation: Option<String> = None;
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            changed = status.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = status.borrow_and_update().registration.as_ref().map(|r| r.incarnation.clone());
                if now.is_some() && now != incarnation {
                    // Give the master time to see the new key before the first heartbeat.
                    incarnation = now;
                    backoff.reset();
                    next = if std::mem::take(&mut after_conflict) {
                        Instant::now() + conflict_backoff.next_delay().max(interval)
                    } else {
                        conflict_backoff.reset();
                        on_grid(epoch, interval, Instant::now() + interval / 2)
                    };
                }
                continue;
            }
            _ = alarm.sleep_until(next) => {}
        }
        let current = status.borrow().clone();
        let Some(registration) = current.registration.filter(|_| current.healthy) else {
            next = on_grid(epoch, interval, Instant::now() + interval / 2);
            continue;
        };
        next = match heartbeat_once(&mut heartbeater, &cfg, &registration).await {
            Outcome::Delivered => {
                backoff.reset();
                conflict_backoff.reset();
                on_grid(epoch, interval, Instant::now() + interval / 2)
            }
            Outcome::Conflict => {
                after_conflict = true;
                on_grid(epoch, interval, Instant::now() + interval / 2)
            }
            Outcome::Failed => Instant::now() + backoff.next_delay().max(interval / 2),
        };
    }
}

/// The grid point after the tick `last` that is not already past: a job that overran
/// skips the ticks it missed instead of running them back to back.
fn next_tick(epoch: Instant, period: Duration, last: Instant) -> Instant {
    on_grid(epoch, period, (last + period).max(Instant::now()))
}

/// The first instant of the grid `epoch + k·period` at or after `not_before`.
fn on_grid(epoch: Instant, period: Duration, not_before: Instant) -> Instant {
    let period_ns = period.as_nanos().max(1);
    let elapsed_ns = not_before.saturating_duration_since(epoch).as_nanos();
    let k = elapsed_ns.div_ceil(period_ns);
    let offset = u64::try_from(k.saturating_mul(period_ns)).unwrap_or(u64::MAX);
    epoch + Duration::from_nanos(offset)
}

/// How one heartbeat went.
enum Outcome {
    Delivered,
    /// 409: the lifecycle loop was told to register again.
    Conflict,
    /// Retry with backoff.
    Failed,
}

/// One scrape + POST.
async fn heartbeat_once(h: &mut Heartbeater, cfg: &Config, registration: &Registration) -> Outcome {
    let Heartbeater {
        scraper,
        client,
        events,
        telemetry,
    } = h;
    let scrape = match scraper.scrape().await {
        Ok(scrape) => scrape,
        Err(e) => {
            if e.is_parse() {
                telemetry.parse_errors.inc();
            } else {
                telemetry.scrape_errors.inc();
            }
            tracing::warn!(error = %e, "metrics scrape failed; heartbeat skipped");
            return Outcome::Failed;
        }
    };
    telemetry
        .last_scrape_duration
        .set(scrape.duration.as_secs_f64());
    if scrape.skipped_lines > 0 {
        telemetry.parse_errors.inc_by(scrape.skipped_lines as u64);
    }
    let body = HeartbeatBody::new(
        &cfg.register_addr,
        &registration.incarnation,
        scrape.metrics,
    );
    match client.send(&body).await {
        Ok(answer) => {
            telemetry.heartbeat(answer.label());
            match answer {
                Answer::Ok => {
                    tracing::debug!(metrics = ?scrape.metrics, "heartbeat ok");
                    Outcome::Delivered
                }
                Answer::Conflict => {
                    let _ = events
                        .send(Event::Conflict(registration.incarnation.clone()))
                        .await;
                    Outcome::Conflict
                }
                Answer::Unauthorized => {
                    tracing::error!("heartbeat 401: the master rejected --internal-token");
                    Outcome::Failed
                }
                Answer::Other(status, text) => {
                    tracing::warn!(status, body = %text, "heartbeat answered HTTP {status}");
                    Outcome::Failed
                }
            }
        }
        Err(e) => {
            telemetry.heartbeat("error");
            tracing::warn!(error = %e, "heartbeat POST failed");
            Outcome::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_are_multiples_of_the_period_from_the_epoch() {
        let epoch = Instant::now();
        let p = Duration::from_millis(200);
        assert_eq!(on_grid(epoch, p, epoch), epoch);
        assert_eq!(
            on_grid(epoch, p, epoch + Duration::from_millis(1)),
            epoch + p
        );
        assert_eq!(on_grid(epoch, p, epoch + p), epoch + p);
        assert_eq!(
            on_grid(epoch, p, epoch + Duration::from_millis(450)),
            epoch + p * 3
        );
    }
}
