//! Periodic jobs fall on one time grid (`k · period` since time zero), so jobs with the
//! same period fall due in the same wake-up and the driver wakes once for both.

use std::time::Duration;

/// The first grid point at or after `t`.
pub fn at_or_after(period: Duration, t: Duration) -> Duration {
    let period_ns = period.as_nanos().max(1);
    let k = t.as_nanos().div_ceil(period_ns);
    let ns = k.saturating_mul(period_ns);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// The first grid point strictly after `t`: never more than `period` away.
pub fn after(period: Duration, t: Duration) -> Duration {
    at_or_after(period, t + Duration::from_nanos(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_points_are_multiples_of_the_period() {
        let p = Duration::from_millis(200);
        let ms = Duration::from_millis;
        assert_eq!(at_or_after(p, ms(0)), ms(0));
        assert_eq!(at_or_after(p, ms(1)), ms(200));
        assert_eq!(at_or_after(p, ms(200)), ms(200));
        assert_eq!(at_or_after(p, ms(450)), ms(600));
        assert_eq!(after(p, ms(200)), ms(400));
        assert_eq!(after(p, ms(399)), ms(400));
    }
}
