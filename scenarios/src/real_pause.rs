//! Pauses and throttles in real mode: a sidecar process is stopped with `SIGSTOP` and
//! continued with `SIGCONT`; a fake run in-process is frozen at its edges
//! ([`mock_kit::freeze`]). Each pause runs as a task of its own on the wall clock, and
//! whatever ends it (its time, or the run stopping) leaves the process running.

use std::time::Duration;

use mock_kit::{Freeze, Shutdown};
use tokio::time::{sleep_until, Instant};

use crate::cluster::DutyCycle;
use crate::sidecar::Pauser;

/// What stops one process.
pub(crate) enum Switch {
    /// A sidecar process (its group).
    Process(Pauser),
    /// A fake run in-process.
    Fake(Freeze),
}

impl Switch {
    fn set(&self, stopped: bool) {
        match self {
            Switch::Process(p) => p.set(stopped),
            Switch::Fake(f) => f.set(stopped),
        }
    }
}

/// Stop the process behind `switch` for `lasting` (throttled by `duty` instead, if
/// given: running first in each period, then stopped for the rest), in a task; the
/// process runs again at the end, or as soon as `stop` fires.
pub(crate) fn spawn(switch: Switch, lasting: Duration, duty: Option<DutyCycle>, stop: Shutdown) {
    tokio::spawn(async move {
        let start = Instant::now();
        let end = start + lasting;
        let plan = async {
            let Some(d) = duty.filter(|d| d.run < d.period) else {
                if duty.is_none() {
                    switch.set(true);
                    sleep_until(end).await;
                }
                return;
            };
            let mut cycle = start;
            while cycle + d.run < end {
                sleep_until(cycle + d.run).await;
                switch.set(true);
                sleep_until((cycle + d.period).min(end)).await;
                switch.set(false);
                cycle += d.period;
            }
        };
        tokio::select! {
            _ = stop.wait() => {}
            _ = plan => {}
        }
        switch.set(false);
    });
}
