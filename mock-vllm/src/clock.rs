//! The wall clock, in the one unit the pages use (`_created`, `created`, process start).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One instant on both clocks the fake keeps: monotonic for intervals, epoch seconds
/// for what pages and answers print. The state takes it as an argument; only the
/// serving shell reads it ([`Now::read`]); a simulation makes its own.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub instant: Instant,
    pub epoch: f64,
}

impl Now {
    /// The real clocks, now.
    pub fn read() -> Self {
        Now {
            instant: Instant::now(),
            epoch: epoch_secs(),
        }
    }
}

/// Wall clock as epoch seconds (0 before 1970).
pub fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
