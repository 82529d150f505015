//! How long an engine takes, as a function of how full its batch is: the prefill of a
//! prompt and the gap between two output tokens, with seeded jitter; and the pretend
//! prefix cache. Pure values (no clock, no lock) shared by the serving engine
//! ([`crate::engine`]) and the virtual-time core ([`crate::core`]).

use std::collections::BTreeSet;
use std::time::Duration;

use rand::distributions::{Distribution, Uniform};
use rand::Rng;

use crate::config::Config;

/// The latency model of one engine (from [`Config`]).
#[derive(Clone, Debug)]
pub struct Latency {
    max_num_seqs: usize,
    prefill_overhead: f64,
    prefill_per_token: f64,
    inter_token_latency: f64,
    jitter: f64,
    /// `1 - jitter ..= 1 + jitter`, set up once: what `gen_range` sets up at every draw
    /// (the same scale and offset, so the same values from the same generator).
    factor: Option<Uniform<f64>>,
    batch_slowdown: f64,
}

impl Latency {
    pub fn new(cfg: &Config) -> Self {
        Latency {
            max_num_seqs: cfg.max_num_seqs.max(1),
            prefill_overhead: cfg.prefill_overhead.as_secs_f64(),
            prefill_per_token: cfg.prefill_per_token.as_secs_f64(),
            inter_token_latency: cfg.inter_token_latency.as_secs_f64(),
            jitter: cfg.jitter,
            factor: jitter_factor(cfg.jitter),
            batch_slowdown: cfg.batch_slowdown,
        }
    }

    /// How much slower than an idle engine a step is with `running` requests.
    fn slowdown(&self, running: usize) -> f64 {
        1.0 + self.batch_slowdown * (running as f64 / self.max_num_seqs as f64).min(1.0)
    }

    fn jittered(&self, base: f64, rng: &mut impl Rng) -> f64 {
        if let Some(factor) = &self.factor {
            base * factor.sample(rng)
        } else if self.jitter > 0.0 {
            base * rng.gen_range(1.0 - self.jitter..=1.0 + self.jitter)
        } else {
            base
        }
    }

    /// Time from being scheduled to the first token, `running` requests in the batch.
    pub fn prefill_time(&self, running: usize, prompt_tokens: u32, rng: &mut impl Rng) -> Duration {
        let base = self.prefill_overhead + self.prefill_per_token * prompt_tokens as f64;
        secs(self.jittered(base * self.slowdown(running), rng))
    }

    /// Time from one output token to the next, `running` requests in the batch.
    pub fn inter_token_time(&self, running: usize, rng: &mut impl Rng) -> Duration {
        secs(self.inter_token_secs(running, rng))
    }

    /// [`Latency::inter_token_time`] in seconds (a simulator sums many of them and
    /// makes one `Duration` of the total).
    pub fn inter_token_secs(&self, running: usize, rng: &mut impl Rng) -> f64 {
        let base = self.inter_token_latency * self.slowdown(running);
        self.jittered(base, rng).max(0.0)
    }
}

/// The jitter factor's distribution, when `gen_range` could draw from it (else the
/// draw is left to `gen_range`, with its own checks).
fn jitter_factor(jitter: f64) -> Option<Uniform<f64>> {
    let (lo, hi) = (1.0 - jitter, 1.0 + jitter);
    (jitter > 0.0 && lo.is_finite() && hi.is_finite() && lo <= hi)
        .then(|| Uniform::new_inclusive(lo, hi))
}

/// Seconds as a `Duration` (negative as zero, too large as `Duration::MAX`).
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// A pretend prefix cache: remembers prompt hashes, bounded, forgets everything when
/// full. Ordered, not hashed: a lookup per request, usually among a few hashes.
#[derive(Debug, Default)]
pub struct PrefixMemory {
    seen: BTreeSet<u64>,
    /// The hash of the last lookup: in `seen` (it was found or put there, and a clear
    /// always puts the new hash back), so a repeated prompt is answered without a walk.
    last: Option<u64>,
}

/// Prompt hashes remembered before the memory is cleared.
const PREFIX_MEMORY: usize = 4096;

impl PrefixMemory {
    /// Whether a prompt with this hash was seen before (and remember it).
    pub fn lookup(&mut self, prompt_hash: u64) -> bool {
        if self.last == Some(prompt_hash) {
            return true;
        }
        self.last = Some(prompt_hash);
        if self.seen.contains(&prompt_hash) {
            return true;
        }
        if self.seen.len() >= PREFIX_MEMORY {
            self.seen.clear();
        }
        self.seen.insert(prompt_hash);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn a_full_batch_is_slower_by_batch_slowdown() {
        let cfg = Config {
            jitter: 0.0,
            batch_slowdown: 0.5,
            max_num_seqs: 4,
            inter_token_latency: Duration::from_millis(10),
            prefill_overhead: Duration::from_millis(2),
            prefill_per_token: Duration::from_millis(1),
            ..Config::default()
        };
        let l = Latency::new(&cfg);
        let rng = &mut StdRng::seed_from_u64(0);
        assert_eq!(l.inter_token_time(0, rng), Duration::from_millis(10));
        assert_eq!(l.inter_token_time(4, rng), Duration::from_millis(15));
        assert_eq!(l.prefill_time(0, 8, rng), Duration::from_millis(10));
        let mut p = PrefixMemory::default();
        assert!(!p.lookup(7));
        assert!(p.lookup(7));
    }

    /// The shortcut for a repeated hash answers what the set alone answers, across
    /// the clear at capacity.
    #[test]
    fn prefix_memory_answers_as_a_bounded_set() {
        use rand::Rng;
        let mut rng = StdRng::seed_from_u64(3);
        let mut p = PrefixMemory::default();
        let mut reference = std::collections::HashSet::new();
        for _ in 0..30_000 {
            let h = if rng.gen_bool(0.5) {
                7
            } else {
                rng.gen_range(0..6_000u64)
            };
            let expected = reference.contains(&h) || {
                if reference.len() >= PREFIX_MEMORY {
                    reference.clear();
                }
                reference.insert(h);
                false
            };
            assert_eq!(p.lookup(h), expected);
        }
    }

    /// The factor set up once draws what `gen_range` draws, value for value.
    #[test]
    fn jitter_draws_are_gen_ranges_draws() {
        use rand::Rng;
        for jitter in [0.1, 0.25, 0.5, 1.0, 1e-9] {
            let factor = jitter_factor(jitter).unwrap();
            let (mut a, mut b) = (StdRng::seed_from_u64(11), StdRng::seed_from_u64(11));
            for _ in 0..10_000 {
                let x: f64 = factor.sample(&mut a);
                let y: f64 = b.gen_range(1.0 - jitter..=1.0 + jitter);
                assert_eq!(x.to_bits(), y.to_bits());
            }
        }
    }
}
