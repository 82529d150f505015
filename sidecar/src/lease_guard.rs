//! The lease's dead man's switch: keeps the lease alive while the sidecar's worker thread
//! is stuck in a slow exchange with vLLM or the master.
//!
//! Why: all periodic jobs (keepalive, health probe, scrape, heartbeat) run one after the
//! other on one thread, because at steady state the sidecar's CPU is almost all the cost
//! of waking threads up, and one thread wakes once per tick. But a `/health` or
//! `/metrics` that hangs up to its timeout must never let the lease expire. So a second
//! thread sleeps on a timer that the worker pushes past its next keepalive every time it
//! refreshes the lease. At steady state the guard never wakes. If the worker misses a
//! keepalive (by a small grace), the guard refreshes the lease itself, every period, until
//! the worker is back and pushes the timer again.
//!
//! On Linux the timer is a `timerfd`: re-arming it is one system call that does not wake
//! the guard. Elsewhere it is a condition variable, and the guard wakes once per pushed
//! deadline to look at the new one: correct, only less frugal.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::etcd::EtcdClient;
use crate::telemetry::Telemetry;

/// How a refresh went wrong: the lease must be registered again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// etcd answered TTL 0: the lease is gone.
    Expired,
    /// The keepalive failed on every endpoint.
    Failed,
}

/// Refresh `lease` once, with its telemetry and log lines.
pub fn refresh(etcd: &EtcdClient, telemetry: &Telemetry, lease: i64) -> Result<i64, Lost> {
    record(telemetry, lease, etcd.lease_keepalive(lease))
}

/// What a keepalive's answer means, counted and logged; the worker and the guard both
/// read their answers through this.
pub fn record(
    telemetry: &Telemetry,
    lease: i64,
    answer: Result<i64, crate::etcd::EtcdError>,
) -> Result<i64, Lost> {
    match answer {
        Ok(ttl) if ttl > 0 => {
            telemetry.keepalives.inc();
            telemetry.lease_ttl_remaining.set(ttl);
            tracing::trace!(lease, ttl, "keepalive");
            Ok(ttl)
        }
        Ok(_) => {
            telemetry.leases_lost.inc();
            tracing::warn!(lease, "lease lost (ttl=0), re-registering");
            Err(Lost::Expired)
        }
        Err(e) => {
            telemetry.keepalive_failures.inc();
            tracing::warn!(lease, error = %e, "keepalive failed, re-registering");
            Err(Lost::Failed)
        }
    }
}

/// What the guard is told by the worker.
#[derive(Debug, Default)]
struct State {
    /// The lease to keep alive; `None` while nothing is registered.
    lease: Option<i64>,
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    timer: Timer,
    etcd: Arc<EtcdClient>,
}

/// The worker's handle on the guard thread. Dropping it stops the thread.
pub struct LeaseGuard {
    shared: Arc<Shared>,
}

impl LeaseGuard {
    /// Start the guard thread. It refreshes through `etcd` every `period` while it has to,
    /// and calls `lost` with the lease when a refresh fails (the worker then registers
    /// again).
    pub fn start(
        etcd: Arc<EtcdClient>,
        telemetry: Arc<Telemetry>,
        period: Duration,
        lost: impl Fn(i64) + Send + 'static,
    ) -> std::io::Result<LeaseGuard> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            timer: Timer::new()?,
            etcd,
        });
        let guard = shared.clone();
        std::thread::Builder::new()
            .name("lease-guard".into())
            .spawn(move || guard_loop(&guard, &telemetry, period, lost))?;
        Ok(LeaseGuard { shared })
    }

    /// A handle that can revoke the guarded lease from another thread: at shutdown,
    /// when the worker is stuck on a slow peer and cannot do it in time.
    pub fn revoker(&self) -> Revoker {
        Revoker {
            shared: self.shared.clone(),
        }
    }

    /// Guard `lease` from now on (`None`: nothing to guard).
    pub fn watch(&self, lease: Option<i64>) {
        self.state().lease = lease;
        if lease.is_none() {
            self.shared.timer.disarm();
        }
    }

    /// The worker refreshed the lease: the guard steps in only if the next refresh has
    /// not happened by `deadline`.
    pub fn push(&self, deadline: Instant) {
        self.shared.timer.arm(deadline);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.state().stopping = true;
        self.shared.timer.arm(Instant::now());
    }
}

/// Revokes the guarded lease on behalf of a busy worker: see [`LeaseGuard::revoker`].
pub struct Revoker {
    shared: Arc<Shared>,
}

impl Revoker {
    /// Stop guarding the lease and revoke it; answers the lease revoked, if any. Blocks
    /// for up to the etcd timeout per endpoint. The worker's own revoke afterwards finds
    /// the lease gone, which counts as revoked.
    pub fn revoke(&self) -> Option<i64> {
        let lease = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lease
            .take()?;
        match self.shared.etcd.lease_revoke(lease) {
            Ok(()) => tracing::info!(lease, "lease revoked for the busy worker"),
            Err(e) => {
                tracing::warn!(lease, error = %e, "revoking the lease failed; it expires with its TTL")
            }
        }
        Some(lease)
    }
}

fn guard_loop(shared: &Shared, telemetry: &Telemetry, period: Duration, lost: impl Fn(i64)) {
    loop {
        shared.timer.wait();
        let lease = {
            let state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.stopping {
                return;
            }
            state.lease
        };
        let Some(lease) = lease else { continue };
        tracing::debug!(
            lease,
            "the worker missed a keepalive (busy); the guard refreshes the lease"
        );
        match refresh(&shared.etcd, telemetry, lease) {
            // Keep going until the worker is back and pushes the timer past this.
            Ok(_) => shared.timer.arm(Instant::now() + period),
            Err(_) => {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.lease == Some(lease) {
                    state.lease = None;
                }
                drop(state);
                lost(lease);
            }
        }
    }
}

#[cfg(target_os = "linux")]
use linux::Timer;
#[cfg(not(target_os = "linux"))]
use portable::Timer;

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::time::{Duration, Instant};

    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };

    /// A one-shot `timerfd`; the guard blocks reading it.
    pub struct Timer {
        fd: OwnedFd,
    }

    impl Timer {
        pub fn new() -> io::Result<Timer> {
            let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC)?;
            Ok(Timer { fd })
        }

        /// Fire at `at` (at once if it has passed); replaces any earlier setting.
        pub fn arm(&self, at: Instant) {
            // Zero would disarm: the soonest expiry is 1 ns.
            let left = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            self.set(left);
        }

        pub fn disarm(&self) {
            self.set(Duration::ZERO);
        }

        fn set(&self, value: Duration) {
            let spec = Itimerspec {
                it_interval: Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: Timespec {
                    tv_sec: i64::try_from(value.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(value.subsec_nanos()),
                },
            };
            if let Err(e) = timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec) {
                tracing::error!(error = %e, "cannot set the lease guard's timer");
            }
        }

        /// Block until the timer fires.
        pub fn wait(&self) {
            let mut expirations = [0u8; 8];
            loop {
                match rustix::io::read(&self.fd, &mut expirations) {
                    Ok(_) => return,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        // Cannot happen with a valid timerfd; do not spin if it does.
                        tracing::error!(error = %e, "cannot read the lease guard's timer");
                        std::thread::sleep(Duration::from_secs(1));
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod portable {
    use std::sync::{Condvar, Mutex, PoisonError};
    use std::time::Instant;

    /// A deadline behind a condition variable.
    pub struct Timer {
        deadline: Mutex<Option<Instant>>,
        changed: Condvar,
    }

    impl Timer {
        pub fn new() -> std::io::Result<Timer> {
            Ok(Timer {
                deadline: Mutex::new(None),
                changed: Condvar::new(),
            })
        }

        pub fn arm(&self, at: Instant) {
            let mut deadline = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
            // A later deadline is found when the earlier one passes: no wake-up now.
            let sooner = deadline.is_none_or(|d| at < d);
            *deadline = Some(at);
            if sooner {
                self.changed.notify_one();
            }
        }

        pub fn disarm(&self) {
            *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }

        pub fn wait(&self) {
            let mut deadline = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                deadline = match *deadline {
                    None => self
                        .changed
                        .wait(deadline)
                        .unwrap_or_else(PoisonError::into_inner),
                    Some(at) if Instant::now() >= at => {
                        *deadline = None;
                        return;
                    }
                    Some(at) => {
                        self.changed
                            .wait_timeout(deadline, at.saturating_duration_since(Instant::now()))
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_deadline_replaces_the_earlier_one() {
        let timer = Timer::new().unwrap();
        let start = Instant::now();
        timer.arm(start + Duration::from_millis(30));
        timer.arm(start + Duration::from_millis(120));
        timer.wait();
        assert!(Instant::now() >= start + Duration::from_millis(120));
    }

    #[test]
    fn a_disarmed_timer_waits_until_it_is_armed_again() {
        let timer = Arc::new(Timer::new().unwrap());
        timer.arm(Instant::now() + Duration::from_millis(10));
        timer.disarm();
        let waiter = {
            let timer = timer.clone();
            std::thread::spawn(move || {
                timer.wait();
                Instant::now()
            })
        };
        // Long enough for the disarmed deadline to have fired, were it still set.
        std::thread::sleep(Duration::from_millis(60));
        let armed = Instant::now();
        timer.arm(armed + Duration::from_millis(10));
        assert!(waiter.join().unwrap() >= armed);
    }
}
