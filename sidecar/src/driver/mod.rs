//! The production driver: runs the decision core ([`crate::core`]) in real time on tokio,
//! with the reqwest clients of [`crate::peers`].
//!
//! It decides nothing. It hands the core the time since it started, sleeps until the
//! core's next wake-up, runs every command as a task of its own (so a slow `/health`,
//! `/metrics` or master never delays a keepalive) and hands each answer back with its
//! command's id. Notes become log lines and counters (`notes.rs`). Outside requests
//! (shutdown, drain, undrain) become inputs. It returns when the core says exit.

pub mod answers;
mod exec;
mod liveness;
mod notes;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::Config;
use crate::core::{Command, Core, CoreConfig, Input, Status};
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

pub use exec::Peers;
pub use liveness::Liveness;

/// Drain and undrain requests from outside (signals, the admin endpoint).
#[derive(Debug, Clone)]
pub struct Requests(mpsc::UnboundedSender<Input>);

impl Requests {
    pub fn drain(&self) {
        let _ = self.0.send(Input::Drain);
    }

    pub fn undrain(&self) {
        let _ = self.0.send(Input::Undrain);
    }
}

/// A configured sidecar, not yet running.
pub struct Sidecar {
    config: Arc<Config>,
    peers: Peers,
    telemetry: Arc<Telemetry>,
    status: watch::Sender<Status>,
    liveness: Liveness,
    requests: (Requests, mpsc::UnboundedReceiver<Input>),
}

impl Sidecar {
    /// The clients are built here; a TLS setup that cannot load (a bad CA bundle) is
    /// the error.
    pub fn new(config: Config) -> Result<Sidecar, String> {
        let telemetry = Arc::new(Telemetry::new());
        let peers = Peers::new(&config, telemetry.clone())?;
        let (tx, rx) = mpsc::unbounded_channel();
        let liveness = Liveness::new(liveness_budget(&config));
        Ok(Sidecar {
            config: Arc::new(config),
            peers,
            telemetry,
            status: watch::channel(Status::default()).0,
            liveness,
            requests: (Requests(tx), rx),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.telemetry.clone()
    }

    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    pub fn requests(&self) -> Requests {
        self.requests.0.clone()
    }

    pub fn liveness(&self) -> Liveness {
        self.liveness.clone()
    }

    /// Run until the core exits: after `shutdown` fires, once the lease is revoked or
    /// `--shutdown-timeout` has passed.
    pub async fn run(self, mut shutdown: Shutdown) {
        let Sidecar {
            config,
            peers,
            telemetry,
            status,
            liveness,
            requests: (_keep_open, mut requests),
        } = self;
        let start = Instant::now();
        let seed = rand::random::<u64>();
        tracing::debug!(seed, "decision core seeded");
        let core_config = CoreConfig::from_config(&config, unix_ms_now());
        let mut core = Core::new(core_config, seed, Duration::ZERO);
        let (answers_tx, mut answers) = mpsc::unbounded_channel();
        let mut shutdown_sent = false;
        // One timer for the whole run, moved only when the core's wake-up moves (most
        // inputs are answers that leave it where it was).
        let timer = tokio::time::sleep_until(start);
        tokio::pin!(timer);
        loop {
            while let Some(command) = core.poll_command() {
                match command {
                    Command::Exit { .. } => return,
                    Command::Note(note) => notes::record(&telemetry, &note),
                    command => peers.spawn(command, answers_tx.clone()),
                }
            }
            publish(&status, &telemetry, core.status());
            liveness.touch();
            // `None` only once the core has exited, which returned above.
            let wake = core.next_wakeup().map(|at| start + at);
            if let Some(at) = wake.filter(|at| *at != timer.deadline()) {
                timer.as_mut().reset(at);
            }
            let input = tokio::select! {
                Some((id, answer)) = answers.recv() => Input::Answer(id, answer),
                Some(request) = requests.recv() => request,
                _ = shutdown.wait(), if !shutdown_sent => {
                    shutdown_sent = true;
                    Input::Shutdown
                }
                _ = &mut timer, if wake.is_some() => Input::Timer,
            };
            core.handle(start.elapsed(), input);
        }
    }
}

fn publish(tx: &watch::Sender<Status>, telemetry: &Telemetry, status: Status) {
    telemetry
        .registered
        .set(i64::from(status.registration.is_some()));
    tx.send_if_modified(|current| {
        let changed = *current != status;
        if changed {
            *current = status;
        }
        changed
    });
}

/// `/healthz` fails when the driver made no progress for longer than this: twice the
/// longest period plus the longest timeout.
fn liveness_budget(config: &Config) -> Duration {
    let periods = CoreConfig::from_config(config, 0).longest_period();
    let timeout = config
        .health_timeout
        .max(config.scrape_timeout)
        .max(config.etcd_timeout);
    periods * 2 + timeout
}

fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Turn SIGUSR1 into a drain request and SIGUSR2 into an undrain, for as long as the
/// process runs.
#[cfg(unix)]
pub async fn drain_on_signals(requests: Requests) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::warn!("cannot listen for SIGUSR1/SIGUSR2: drain only via the admin endpoint");
        return;
    };
    loop {
        tokio::select! {
            _ = usr1.recv() => requests.drain(),
            _ = usr2.recv() => requests.undrain(),
        }
    }
}

#[cfg(not(unix))]
pub async fn drain_on_signals(_requests: Requests) {}
