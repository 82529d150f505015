//! Recovery times over a sweep, per fault kind: their distribution and the runs behind
//! the slowest.
//!
//! Why an exact histogram and not a sketch: a recovery time is measured on the sample
//! grid (every 200 ms in explore) from an end on the 100 ms grid, so a kind has at most
//! a few hundred distinct values even over millions of runs. Counting each value keeps
//! every percentile exact, the JSON small, and a merge is adding counts, so the merge of
//! shards' summaries is exactly the distribution of the union. The slowest few are kept
//! with their seed, ordered by (time, seed, instance, fault) so that order does not
//! depend on which worker ran what.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::recovery::RecoveryCheck;

/// How many of the slowest recoveries a kind keeps.
pub const WORST_KEPT: usize = 5;

/// One of the slowest recoveries: where to find it again.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Slow {
    /// Time to recover, in virtual ms (first: the sort key, slowest last).
    pub ms: u64,
    /// The seed whose schedule it was.
    pub seed: u64,
    /// The instance.
    pub instance: String,
    /// The disturbance's label, and when it ended (`… at t=12.3s`).
    pub fault: String,
}

/// The recovery times of one fault kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindRecovery {
    /// Time to recover (virtual ms) → how many recoveries took it.
    pub counts: BTreeMap<u64, u64>,
    /// Recoveries judged that did not happen within their bound (each a finding).
    pub not_recovered: u64,
    /// The slowest recoveries, slowest first.
    pub slowest: Vec<Slow>,
}

impl KindRecovery {
    /// Recoveries counted.
    pub fn n(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The `q`-quantile (nearest rank), `q` in `[0, 1]`; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.n();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        self.counts.iter().find_map(|(ms, c)| {
            seen += c;
            (seen >= rank).then_some(*ms)
        })
    }

    fn keep_slowest(&mut self, more: impl IntoIterator<Item = Slow>) {
        self.slowest.extend(more);
        self.slowest
            .sort_by(|a, b| b.ms.cmp(&a.ms).then_with(|| a.cmp(b)));
        self.slowest.dedup();
        self.slowest.truncate(WORST_KEPT);
    }
}

/// Fault kind → its recovery times.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryStats(pub BTreeMap<String, KindRecovery>);

impl RecoveryStats {
    /// Add one run's recovery checks (seed `seed`).
    pub fn add(&mut self, seed: u64, checks: &[RecoveryCheck]) {
        for c in checks {
            let k = self.0.entry(c.kind.clone()).or_default();
            match c.time_to_recover_ms {
                Some(ms) => {
                    *k.counts.entry(ms).or_default() += 1;
                    let fault = format!("{} ended at t={} ms", c.fault, c.end_ms);
                    let slow = Slow {
                        ms,
                        seed,
                        instance: c.instance.clone(),
                        fault,
                    };
                    k.keep_slowest([slow]);
                }
                None => k.not_recovered += 1,
            }
        }
    }

    /// Add another sweep's (or shard's) stats: the result is the stats of the union.
    pub fn merge(&mut self, other: &RecoveryStats) {
        for (kind, o) in &other.0 {
            let k = self.0.entry(kind.clone()).or_default();
            for (ms, c) in &o.counts {
                *k.counts.entry(*ms).or_default() += c;
            }
            k.not_recovered += o.not_recovered;
            k.keep_slowest(o.slowest.iter().cloned());
        }
    }

    /// The table printed at the end of a sweep: per kind, p50 / p99 / max and the
    /// slowest run's seed.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:24} {:>8} {:>8} {:>8} {:>8} {:>6}  SLOWEST (seed, instance, fault)\n",
            "KIND", "N", "P50 ms", "P99 ms", "MAX ms", "LATE"
        );
        let show = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        for (kind, k) in &self.0 {
            let slowest = k
                .slowest
                .first()
                .map(|w| format!("seed {}, {}, {}", w.seed, w.instance, w.fault))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "{kind:24} {:>8} {:>8} {:>8} {:>8} {:>6}  {slowest}",
                k.n(),
                show(k.quantile(0.5)),
                show(k.quantile(0.99)),
                show(k.counts.keys().next_back().copied()),
                k.not_recovered
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: &str, instance: &str, ms: Option<u64>) -> RecoveryCheck {
        RecoveryCheck {
            fault: format!("{kind} {instance}"),
            kind: kind.into(),
            start_ms: 1000,
            end_ms: 2000,
            instance: instance.into(),
            bound_ms: 12_000,
            recovered_ms: ms.map(|m| 2000 + m),
            time_to_recover_ms: ms,
        }
    }

    fn stats(seed: u64, times: &[u64]) -> RecoveryStats {
        let mut s = RecoveryStats::default();
        let checks: Vec<RecoveryCheck> = times
            .iter()
            .enumerate()
            .map(|(i, t)| check("link", &format!("i{i}"), Some(*t)))
            .collect();
        s.add(seed, &checks);
        s
    }

    #[test]
    fn quantiles_are_exact_nearest_ranks() {
        let s = stats(1, &[100, 200, 200, 400, 1000]);
        let k = &s.0["link"];
        assert_eq!(k.quantile(0.5), Some(200));
        assert_eq!(k.quantile(0.99), Some(1000));
        assert_eq!(k.quantile(0.0), Some(100));
        assert_eq!(KindRecovery::default().quantile(0.5), None);
    }

    #[test]
    fn merging_gives_the_distribution_of_the_union() {
        let (a_times, b_times) = ([100u64, 300, 300, 5000], [200u64, 300, 9000, 100, 700, 800]);
        let mut merged = stats(1, &a_times);
        merged.merge(&stats(2, &b_times));
        // The union added in one go, from one seed per half as the shards had them.
        let mut whole = RecoveryStats::default();
        let halves = [(1, &a_times[..]), (2, &b_times[..])];
        for (seed, times) in halves {
            let checks: Vec<RecoveryCheck> = times
                .iter()
                .enumerate()
                .map(|(i, t)| check("link", &format!("i{i}"), Some(*t)))
                .collect();
            whole.add(seed, &checks);
        }
        assert_eq!(merged, whole);
        let k = &merged.0["link"];
        assert_eq!(k.n(), 10);
        assert_eq!(k.quantile(0.5), Some(300));
        assert_eq!(k.quantile(1.0), Some(9000));
        let slow: Vec<(u64, u64)> = k.slowest.iter().map(|w| (w.ms, w.seed)).collect();
        assert_eq!(
            slow,
            vec![(9000, 2), (5000, 1), (800, 2), (700, 2), (300, 1)]
        );
        // Merging in the other order gives the same.
        let mut other = stats(2, &b_times);
        other.merge(&stats(1, &a_times));
        assert_eq!(other, merged);
    }

    #[test]
    fn a_recovery_not_made_is_counted_apart() {
        let mut s = RecoveryStats::default();
        s.add(
            3,
            &[
                check("vllm_crash", "i0", None),
                check("vllm_crash", "i1", Some(400)),
            ],
        );
        let k = &s.0["vllm_crash"];
        assert_eq!((k.n(), k.not_recovered), (1, 1));
        assert!(s.table().contains("vllm_crash"));
    }
}
