//! The wall clock, in the one unit the pages use (`_created`, `created`, process start).

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall clock as epoch seconds (0 before 1970).
pub fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
