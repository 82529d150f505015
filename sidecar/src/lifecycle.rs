//! The sidecar's state machine: the only module that knows health, lease and heartbeat.
//!
//! One **worker thread** runs every periodic job, one after the other: it refreshes the
//! lease every keepalive period (at most TTL/3 apart), gates start-up on `/health`
//! (backoff from 1 s, doubling, capped at the lease TTL) and then probes it every
//! `--keepalive-interval`, and scrapes `/metrics` and posts a heartbeat every
//! `--heartbeat-interval` while registered and healthy (backing off on failures). It
//! registers when vLLM is healthy and nothing is registered (fresh incarnation each time,
//! jittered backoff on failure), re-registers when the lease is gone (TTL 0 or a keepalive
//! error) or the master answered 409, and revokes after `--health-fail-threshold` failed
//! probes in a row and on shutdown.
//!
//! A slow vLLM or master must never delay the lease, so the **lease guard**
//! ([`crate::lease_guard`]) stands by on a second thread: it sleeps on a timer the worker
//! pushes past its next keepalive at every refresh, and refreshes the lease itself if the
//! worker is late (stuck in an exchange that may take up to its timeout).
//!
//! Why threads and blocking I/O rather than tasks, and why one worker rather than one
//! thread per job: at steady state the sidecar makes the same four small exchanges per
//! cycle forever, and nearly all of its CPU is the cost of waking up for them. A thread
//! blocked in a socket read or a timed wait wakes once per answer or tick and runs only
//! its own code; the same exchanges through tokio's event loop measured about 1.3 to 1.6
//! times the CPU, and each extra thread woken per tick costs about as much again. The
//! async runtime is left with the admin endpoint and the signals, and is not woken at all
//! at steady state.
//!
//! Shutdown: [`Sidecar::run`] tells the worker to stop; an idle worker revokes the lease
//! and ends at once. If it is stuck on a slow vLLM or master, `run` revokes the lease
//! itself (through the guard's [`lease_guard::Revoker`]) so the key still disappears at
//! once. Either way `run` returns within `--shutdown-timeout`; if etcd hangs past that,
//! the key expires with the lease, and the abandoned calls end at their own timeouts.
//!
//! The periodic jobs run on one time grid (`epoch + k·period`), so jobs with the same
//! period fall due in the same wake-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::etcd::{EtcdClient, PendingKeepalive};
use crate::health::HealthProbe;
use crate::heartbeat::{Answer, HeartbeatBody, HeartbeatClient};
use crate::instance::{instance_key, InstanceMeta};
use crate::lease_guard::{self, LeaseGuard};
use crate::mailbox::Mailbox;
use crate::mapping::{Mapper, MapperConfig};
use crate::scrape::{PendingScrape, Scraper};
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
/// tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub registration: Option<Registration>,
    /// The last `/health` probe succeeded.
    pub healthy: bool,
}

/// What the worker is told.
#[derive(Debug)]
enum Event {
    /// The lease guard could not refresh this lease (it logged and counted why).
    LeaseLost(i64),
    Shutdown,
}

/// A configured sidecar, not yet running.
pub struct Sidecar {
    config: Arc<Config>,
    etcd: Arc<EtcdClient>,
    telemetry: Arc<Telemetry>,
    status_tx: watch::Sender<Status>,
}

impl Sidecar {
    pub fn new(config: Config) -> Sidecar {
        // Each thread has its own HTTP client (and connections): no shared locks.
        let etcd = EtcdClient::new(
            crate::http::client(),
            config.etcd_endpoints.clone(),
            config.etcd_timeout,
            &config.etcd_username,
            config.etcd_password.clone(),
        );
        let (status_tx, _) = watch::channel(Status::default());
        Sidecar {
            config: Arc::new(config),
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

    /// Run until `shutdown` fires, then revoke the lease (bounded by
    /// `--shutdown-timeout`) and return.
    pub async fn run(self, mut shutdown: Shutdown) {
        let cfg = self.config.clone();
        let events = Mailbox::new();
        let guard = {
            let events = events.clone();
            LeaseGuard::start(
                self.etcd.clone(),
                self.telemetry.clone(),
                cfg.keepalive_period(),
                move |lease| events.send(Event::LeaseLost(lease)),
            )
        };
        let guard = match guard {
            Ok(guard) => guard,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the lease guard; stopping");
                return;
            }
        };
        // The worker's connections to vLLM and the master; etcd has its own client.
        let http = crate::http::client();
        let heartbeater = Heartbeater {
            scraper: Scraper::new(
                http.clone(),
                cfg.metrics_url.clone(),
                cfg.scrape_timeout,
                cfg.metrics_max_bytes,
                Mapper::new(MapperConfig {
                    latency_stat: cfg.latency_stat,
                    model: cfg.model.clone(),
                }),
            ),
            client: HeartbeatClient::new(
                http.clone(),
                cfg.heartbeat_url.clone(),
                cfg.internal_token.clone(),
                cfg.health_timeout,
            ),
            telemetry: self.telemetry.clone(),
        };
        let mut lifecycle = Lifecycle::new(
            cfg.clone(),
            self.etcd.clone(),
            HealthProbe::new(http, &cfg.vllm_url, cfg.health_timeout),
            self.telemetry.clone(),
            self.status_tx.clone(),
            guard,
        );
        let revoker = lifecycle.guard.revoker();
        let (done_tx, mut done_rx) = oneshot::channel();
        let worker = {
            let events = events.clone();
            spawn("sidecar", move || {
                lifecycle.run(heartbeater, &events);
                lifecycle.revoke();
                let _ = done_tx.send(());
            })
        };
        if worker.is_err() {
            tracing::error!("cannot start the worker thread; stopping");
            return;
        }
        // However `run` ends, even dropped half-way, the worker is told to stop.
        let _stop = StopOnDrop(events.clone());
        tokio::select! {
            _ = shutdown.wait() => events.send(Event::Shutdown),
            // It only ends when told to: a worker that died (a bug) ends the sidecar.
            _ = &mut done_rx => {
                tracing::error!("the worker thread ended on its own; stopping");
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + cfg.shutdown_timeout;
        // An idle worker revokes at once. One stuck on a slow vLLM or master cannot: the
        // lease is revoked from here instead, so the key still disappears at once.
        let mut finished = tokio::time::timeout(SHUTDOWN_GRACE, &mut done_rx)
            .await
            .is_ok();
        if !finished {
            let revoke = tokio::task::spawn_blocking(move || revoker.revoke());
            let _ = tokio::time::timeout_at(deadline, revoke).await;
            finished = tokio::time::timeout_at(deadline, done_rx).await.is_ok();
        }
        if finished {
            tracing::info!("sidecar stopped");
        } else {
            tracing::warn!(
                timeout = ?cfg.shutdown_timeout,
                lease_ttl_s = cfg.lease_ttl,
                "the worker did not stop in time; the lease was revoked for it if etcd answered"
            );
        }
    }
}

/// How long a shutdown waits for the worker before revoking the lease itself.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(100);

/// Tells the worker to stop when dropped.
struct StopOnDrop(Mailbox<Event>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.send(Event::Shutdown);
    }
}

/// Start a named thread; a refusal (no threads left) is logged and answered as `Err`.
fn spawn(name: &str, job: impl FnOnce() + Send + 'static) -> Result<(), ()> {
    match std::thread::Builder::new().name(name.into()).spawn(job) {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(thread = name, error = %e, "cannot start a thread");
            Err(())
        }
    }
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
    /// The keepalive grid and the next refresh due on it.
    epoch: Instant,
    period: Duration,
    keepalive_at: Instant,
    guard: LeaseGuard,
}

impl Lifecycle {
    fn new(
        cfg: Arc<Config>,
        etcd: Arc<EtcdClient>,
        probe: HealthProbe,
        telemetry: Arc<Telemetry>,
        status: watch::Sender<Status>,
        guard: LeaseGuard,
    ) -> Lifecycle {
        let key = instance_key(&cfg.etcd_namespace, cfg.instance_type, &cfg.register_addr);
        let period = cfg.keepalive_period();
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
            epoch: Instant::now(),
            period,
            keepalive_at: Instant::now(),
            guard,
        }
    }

    fn registered(&self) -> bool {
        self.lease.is_some() && self.incarnation.is_some()
    }

    /// The worker: the start-up gate, then every periodic job as it falls due, until
    /// told to stop.
    fn run(&mut self, mut heartbeater: Heartbeater, events: &Mailbox<Event>) {
        if !self.wait_for_health(events) {
            return;
        }
        self.on_health(true);
        // One grid for the probes and the keepalives (same period unless the TTL is
        // short), so they fall due in the same wake-up.
        self.epoch = Instant::now();
        let probe_period = self.cfg.keepalive_interval;
        let mut probe_at = on_grid(self.epoch, probe_period, Instant::now() + probe_period / 2);
        let mut beats = Heartbeats::new(self.cfg.heartbeat_interval, self.epoch);
        loop {
            beats.follow(self.incarnation.as_deref());
            let mut wake = probe_at.min(beats.next);
            if self.registered() {
                wake = wake.min(self.keepalive_at);
            } else if self.healthy {
                wake = wake.min(self.retry_at);
            }
            match events.recv_until(wake) {
                Some(Event::Shutdown) => return,
                Some(Event::LeaseLost(lease)) => {
                    if self.lease == Some(lease) {
                        self.lease_lost();
                    }
                    continue;
                }
                None => {}
            }
            // Every request due goes out before any answer is read, the keepalive first:
            // the answers then arrive together and one wake-up serves several exchanges.
            // The keepalive's answer is read last; until then the guard covers the lease.
            let now = Instant::now();
            let keepalive = (self.registered() && now >= self.keepalive_at)
                .then(|| {
                    self.keepalive_at = next_tick(self.epoch, self.period, self.keepalive_at);
                    self.start_keepalive()
                })
                .flatten();
            let probe = (now >= probe_at).then(|| {
                probe_at = next_tick(self.epoch, probe_period, probe_at);
                self.probe.start()
            });
            let beat = (now >= beats.next).then(|| {
                let registration = self.current_registration().filter(|_| self.healthy);
                let scrape = registration.as_ref().map(|_| heartbeater.scraper.start());
                (registration, scrape)
            });
            if !self.registered() && self.healthy && now >= self.retry_at {
                self.register(None);
            }
            if let Some(probe) = probe {
                self.on_health(probe.finish());
            }
            if let Some((registration, scrape)) = beat {
                // Only for the registration the scrape was started for, if it still stands.
                let standing = self.current_registration().filter(|_| self.healthy);
                let registration = registration.filter(|r| standing.as_ref() == Some(r));
                if let Some(conflict) =
                    beats.beat(&mut heartbeater, &self.cfg, registration, scrape)
                {
                    self.on_conflict(conflict);
                }
            }
            if let Some((lease, pending)) = keepalive {
                self.finish_keepalive(lease, pending);
            }
        }
    }

    /// Probe `/health` with a growing backoff until it answers; `false` when told to stop
    /// first.
    fn wait_for_health(&mut self, events: &Mailbox<Event>) -> bool {
        let cap = self.cfg.lease_ttl_duration();
        let mut wait = Duration::from_secs(1).min(cap);
        while !self.probe.is_healthy() {
            tracing::info!(url = %self.cfg.vllm_url, "waiting for vLLM to become healthy ...");
            let until = Instant::now() + wait;
            // Nothing is registered yet: only a stop matters.
            while let Some(event) = events.recv_until(until) {
                if let Event::Shutdown = event {
                    return false;
                }
            }
            wait = (wait * 2).min(cap);
        }
        true
    }

    fn current_registration(&self) -> Option<Registration> {
        match (self.lease, &self.incarnation) {
            (Some(lease), Some(incarnation)) => Some(Registration {
                key: self.key.clone(),
                lease,
                incarnation: incarnation.clone(),
            }),
            _ => None,
        }
    }

    fn publish(&self) {
        let registration = self.current_registration();
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

    fn on_health(&mut self, ok: bool) {
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
                self.revoke();
                self.retry_at = Instant::now();
                self.backoff.reset();
            }
        }
        self.publish();
    }

    fn on_conflict(&mut self, incarnation: String) {
        if self.incarnation.as_deref() != Some(incarnation.as_str()) {
            return; // already replaced since that heartbeat
        }
        tracing::warn!(%incarnation, "heartbeat 409 (stale/unknown incarnation), re-registering");
        let old = self.forget_registration();
        self.register(old);
    }

    /// Grant a lease and put the key with a fresh incarnation. `replacing` is a lease that
    /// is still alive and loses the key to the new one: revoked afterwards.
    fn register(&mut self, replacing: Option<i64>) {
        if !self.logged_model {
            self.logged_model = true;
            let model = self.probe.served_model();
            tracing::info!(
                model = model.as_deref().unwrap_or("?"),
                "vLLM healthy, registering"
            );
        }
        let incarnation = format!(
            "{}-{:012x}",
            self.cfg.instance_name,
            rand::random::<u64>() & 0xffff_ffff_ffff
        );
        let lease = match self.etcd.lease_grant(self.cfg.lease_ttl) {
            Ok(lease) => lease,
            Err(e) => return self.registration_failed(&e.to_string()),
        };
        self.lease = Some(lease);
        let meta = InstanceMeta::new(
            &self.cfg.register_addr,
            self.cfg.instance_type,
            &self.cfg.backend_type,
            &incarnation,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        );
        if let Err(e) = self.etcd.put(&self.key, &meta.to_json(), lease) {
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
        self.keepalive_at = on_grid(self.epoch, self.period, Instant::now() + self.period / 2);
        self.guard.watch(Some(lease));
        self.guard.push(self.keepalive_at + self.grace());
        self.backoff.reset();
        self.telemetry.registrations.inc();
        self.telemetry.lease_ttl_remaining.set(self.cfg.lease_ttl);
        self.publish();
        if let Some(old) = replacing.filter(|old| *old != lease) {
            if let Err(e) = self.etcd.lease_revoke(old) {
                tracing::debug!(lease = old, error = %e, "revoking the replaced lease failed; it expires by itself");
            }
        }
    }

    fn registration_failed(&mut self, why: &str) {
        let delay = self.backoff.next_delay(&mut rand::thread_rng());
        self.retry_at = Instant::now() + delay;
        self.telemetry.registration_failures.inc();
        tracing::warn!(error = %why, retry_in = ?delay, "register failed, will retry");
        self.publish();
    }

    /// Send the lease's keepalive; the guard now stands by until the next one is due.
    fn start_keepalive(&self) -> Option<(i64, PendingKeepalive)> {
        let lease = self.lease?;
        let pending = self.etcd.start_keepalive(lease);
        self.guard.push(self.keepalive_at + self.grace());
        Some((lease, pending))
    }

    /// Read a keepalive's answer; a lease lost meanwhile for another reason is left alone.
    fn finish_keepalive(&mut self, lease: i64, pending: PendingKeepalive) {
        let answer = self.etcd.finish_keepalive(pending);
        if self.lease != Some(lease) {
            return;
        }
        if lease_guard::record(&self.telemetry, lease, answer).is_err() {
            self.lease_lost();
        }
    }

    /// How late the worker's keepalive may be before the guard refreshes the lease.
    fn grace(&self) -> Duration {
        (self.period / 8).min(Duration::from_millis(250))
    }

    /// The lease is gone (TTL 0 or a failed refresh): register again at once.
    fn lease_lost(&mut self) {
        self.telemetry.lease_ttl_remaining.set(0);
        self.retry_at = Instant::now();
        self.forget_registration();
    }

    /// Forget the registration (what becomes of its lease is the caller's business): the
    /// guard stops watching it and the status says unregistered. Answers the lease.
    fn forget_registration(&mut self) -> Option<i64> {
        let lease = self.lease.take();
        self.incarnation = None;
        self.guard.watch(None);
        self.publish();
        lease
    }

    /// Revoke the lease, if any: the key disappears at once. On failure the lease still
    /// expires within its TTL.
    fn revoke(&mut self) {
        let Some(lease) = self.lease else {
            return;
        };
        self.telemetry.lease_ttl_remaining.set(0);
        self.forget_registration();
        match self.etcd.lease_revoke(lease) {
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

/// What one heartbeat needs: where to scrape, where to post, whom to tell.
struct Heartbeater {
    scraper: Scraper,
    client: HeartbeatClient,
    telemetry: Arc<Telemetry>,
}

/// The heartbeat schedule: on the heartbeat grid while registered and healthy, backing
/// off on failures and after 409s in a row.
struct Heartbeats {
    interval: Duration,
    epoch: Instant,
    /// When the next heartbeat is due.
    next: Instant,
    backoff: Backoff,
    /// Re-registrations caused by 409s in a row (a master that never sees our key, e.g.
    /// a namespace mismatch) slow down instead of churning leases every heartbeat.
    conflict_backoff: Backoff,
    after_conflict: bool,
    /// The incarnation the schedule was last set up for.
    incarnation: Option<String>,
}

impl Heartbeats {
    fn new(interval: Duration, epoch: Instant) -> Heartbeats {
        Heartbeats {
            interval,
            epoch,
            next: Instant::now() + interval,
            backoff: Backoff::new(interval, interval * 4),
            conflict_backoff: Backoff::new(interval, interval.max(Duration::from_secs(30))),
            after_conflict: false,
            incarnation: None,
        }
    }

    /// The next grid point at least half an interval away.
    fn on_grid(&self) -> Instant {
        on_grid(
            self.epoch,
            self.interval,
            Instant::now() + self.interval / 2,
        )
    }

    /// Follow the registration: a new incarnation gives the master time to see the new
    /// key before its first heartbeat.
    fn follow(&mut self, incarnation: Option<&str>) {
        if incarnation.is_none() || incarnation == self.incarnation.as_deref() {
            return;
        }
        self.incarnation = incarnation.map(str::to_string);
        self.backoff.reset();
        self.next = if std::mem::take(&mut self.after_conflict) {
            Instant::now()
                + self
                    .conflict_backoff
                    .next_delay(&mut rand::thread_rng())
                    .max(self.interval)
        } else {
            self.conflict_backoff.reset();
            self.on_grid()
        };
    }

    /// One heartbeat for `registration` (none: not registered and healthy), from the
    /// scrape started for it, then the next one scheduled. Answers the incarnation the
    /// master did not know (409): it must be registered again.
    fn beat(
        &mut self,
        h: &mut Heartbeater,
        cfg: &Config,
        registration: Option<Registration>,
        scrape: Option<PendingScrape>,
    ) -> Option<String> {
        let Some(registration) = registration else {
            self.next = self.on_grid();
            return None;
        };
        let scrape = scrape.unwrap_or_else(|| h.scraper.start());
        let (next, conflict) = match heartbeat_once(h, cfg, &registration, scrape) {
            Outcome::Delivered => {
                self.backoff.reset();
                self.conflict_backoff.reset();
                (self.on_grid(), None)
            }
            Outcome::Conflict => {
                self.after_conflict = true;
                (self.on_grid(), Some(registration.incarnation))
            }
            Outcome::Failed => (
                Instant::now()
                    + self
                        .backoff
                        .next_delay(&mut rand::thread_rng())
                        .max(self.interval / 2),
                None,
            ),
        };
        self.next = next;
        conflict
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
    /// 409: the worker must register again.
    Conflict,
    /// Retry with backoff.
    Failed,
}

/// Read the scrape, then POST the heartbeat.
fn heartbeat_once(
    h: &mut Heartbeater,
    cfg: &Config,
    registration: &Registration,
    scrape: PendingScrape,
) -> Outcome {
    let Heartbeater {
        scraper,
        client,
        telemetry,
    } = h;
    let scrape = match scraper.finish(scrape) {
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
    match client.send(&body) {
        Ok(answer) => {
            telemetry.heartbeat(answer.label());
            match answer {
                Answer::Ok => {
                    tracing::debug!(metrics = ?scrape.metrics, "heartbeat ok");
                    Outcome::Delivered
                }
                Answer::Conflict => Outcome::Conflict,
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
