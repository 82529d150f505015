//! Jittered exponential backoff, so a sidecar fleet that lost etcd or the master does not
//! hammer it in lockstep when it comes back. The jitter comes from the caller's
//! generator (the core's seeded one), never from a global one.

use std::time::Duration;

use rand::Rng;

/// Delays grow `base, 2·base, 4·base, …` up to `max`; each is drawn uniformly from the
/// upper half of its step ("equal jitter"), so it never waits less than half the step and
/// two sidecars that failed together drift apart.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max: max.max(base),
            attempt: 0,
        }
    }

    /// The next delay to wait after a failure.
    pub fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let step = self.step();
        self.attempt = self.attempt.saturating_add(1);
        let half = step / 2;
        let jitter = rng.gen::<f64>();
        half + half.mul_f64(jitter)
    }

    /// The un-jittered step the next delay is drawn from.
    pub fn step(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Call after a success: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn grows_doubles_caps_and_resets() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let expected_steps = [100, 200, 400, 700, 700];
        for step in expected_steps {
            assert_eq!(b.step(), Duration::from_millis(step));
            let d = b.next_delay(&mut rng);
            assert!(
                d >= Duration::from_millis(step / 2),
                "{d:?} below half of {step}"
            );
            assert!(d <= Duration::from_millis(step), "{d:?} above {step}");
        }
        b.reset();
        assert_eq!(b.step(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_delays() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
            seen.insert(b.next_delay(&mut rng));
        }
        assert!(seen.len() > 1);
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..1000 {
            assert!(b.next_delay(&mut rng) <= Duration::from_secs(30));
        }
    }
}
