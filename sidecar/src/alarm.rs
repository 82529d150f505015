//! The periodic jobs' alarm clock: one wake-up at the deadline, not two.
//!
//! Why not `tokio::time::sleep_until`: tokio's timer wheel keeps a deadline more than
//! 64 ms away in a coarser level, so the process wakes at the start of that level's 64 ms
//! slot, moves the timer down, and sleeps again until the deadline. Every tick of every
//! interval above 64 ms (all of the sidecar's: the defaults are seconds) costs two
//! wake-ups instead of one. At short intervals, wake-ups are most of the sidecar's CPU
//! time, and the second one was a measured ~8% of it.
//!
//! On Linux an [`Alarm`] is a `timerfd` watched by tokio's I/O driver: the kernel wakes
//! the process once, at the deadline. Elsewhere, or if the timerfd cannot be made, it
//! falls back to tokio's timer. Either way the deadline is a `tokio::time::Instant`.

use tokio::time::Instant;

/// A re-armable one-shot timer for one periodic job.
#[derive(Debug)]
pub struct Alarm {
    #[cfg(target_os = "linux")]
    timerfd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm::new()
    }
}

impl Alarm {
    /// Made inside a tokio runtime with I/O enabled, it uses a timerfd; otherwise tokio's
    /// timer.
    pub fn new() -> Alarm {
        Alarm {
            #[cfg(target_os = "linux")]
            timerfd: linux::create(),
        }
    }

    /// Return at `deadline` (at once if it has passed). Cancel-safe: dropping the future
    /// leaves the alarm ready for the next call.
    pub async fn sleep_until(&mut self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.timerfd {
            if linux::sleep_until(fd, deadline).await.is_ok() {
                return;
            }
        }
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::OwnedFd;

    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    use tokio::time::Instant;

    /// `None` outside a tokio runtime or when the kernel refuses a timerfd.
    pub fn create() -> Option<AsyncFd<OwnedFd>> {
        tokio::runtime::Handle::try_current().ok()?;
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .ok()?;
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open, and keeps the same
        // descriptor, until the AsyncFd is dropped.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
    }

    /// Arm the timerfd for the time left until `deadline`, then wait for it. A wake-up
    /// before the deadline (a stale expiry from an earlier, cancelled wait) re-arms.
    pub async fn sleep_until(fd: &AsyncFd<OwnedFd>, deadline: Instant) -> io::Result<()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let spec = Itimerspec {
                it_interval: Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: left.subsec_nanos().into(),
                },
            };
            timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
            loop {
                let mut guard = fd.readable().await?;
                let mut expirations = [0u8; 8];
                match rustix::io::read(fd.get_ref(), &mut expirations) {
                    // One-shot: nothing more to read until it is armed again.
                    Ok(_) => {
                        guard.clear_ready();
                        break;
                    }
                    Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wakes_at_the_deadline_not_before() {
        let mut alarm = Alarm::new();
        for ms in [0u64, 5, 70, 20] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            alarm.sleep_until(deadline).await;
            assert!(Instant::now() >= deadline, "woke before a {ms} ms deadline");
        }
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_the_alarm_usable() {
        let mut alarm = Alarm::new();
        // Armed for 30 ms, abandoned after 5: its expiry later must not end the next wait
        // early.
        let _ = tokio::time::timeout(
            Duration::from_millis(5),
            alarm.sleep_until(Instant::now() + Duration::from_millis(30)),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(40)).await;
        let deadline = Instant::now() + Duration::from_millis(50);
        alarm.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
    }
}
