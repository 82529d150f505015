//! Liveness that means something: `/healthz` fails when the driver loop has stopped
//! turning (no input handled for longer than its budget), not merely when the process
//! is gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the driver last made progress; cheap to clone and to touch.
#[derive(Debug, Clone)]
pub struct Liveness {
    start: Instant,
    /// Milliseconds since `start` at the last progress.
    last_ms: Arc<AtomicU64>,
    budget: Duration,
}

impl Liveness {
    pub fn new(budget: Duration) -> Liveness {
        Liveness {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            budget,
        }
    }

    /// The driver handled an input just now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the last progress.
    pub fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Progress within the budget.
    pub fn is_alive(&self) -> bool {
        self.idle() <= self.budget
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }
}
