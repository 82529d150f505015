//! Coverage: which fault kinds hit the sidecar in which of its phases, with counts.
//!
//! Why: a sweep that finds nothing says little unless it shows where it looked. The
//! matrix (fault kind × the sidecar's phase when the fault hit: waiting for health,
//! registering, registered, re-registering, draining, shutting down, stopped by a pause
//! or a throttle, not running) tells a user which corners the search reached and which
//! it never did (a zero cell), so they can steer it with `--faults` or a longer
//! `--duration`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The sidecar phases, in the order the table shows them.
pub const PHASES: [&str; 9] = [
    "waiting_for_health",
    "registering",
    "registered",
    "re_registering",
    "draining",
    "asleep",
    "shutting_down",
    "paused",
    "not_running",
];

/// Counts by fault kind, then by phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage(pub BTreeMap<String, BTreeMap<String, u64>>);

impl Coverage {
    /// A fault of `kind` hit a sidecar in `phase`.
    pub fn add(&mut self, kind: &str, phase: &str) {
        let row = self.0.entry(kind.to_string()).or_default();
        *row.entry(phase.to_string()).or_default() += 1;
    }

    /// Add another coverage's counts to these (merging shards).
    pub fn merge(&mut self, other: &Coverage) {
        for (kind, row) in &other.0 {
            let mine = self.0.entry(kind.clone()).or_default();
            for (phase, n) in row {
                *mine.entry(phase.clone()).or_default() += n;
            }
        }
    }

    /// The matrix as a text table (a column per phase, also for phases never seen, so
    /// the gaps show).
    pub fn table(&self) -> String {
        let mut phases: Vec<String> = PHASES.iter().map(|p| p.to_string()).collect();
        for p in self.0.values().flat_map(|row| row.keys()) {
            if !phases.contains(p) {
                phases.push(p.clone());
            }
        }
        let width = self.0.keys().map(String::len).max().unwrap_or(4).max(10);
        let mut s = format!("{:width$}", "fault");
        for p in &phases {
            let _ = write!(s, " {:>w$}", p, w = p.len().max(6));
        }
        s.push('\n');
        for (kind, row) in &self.0 {
            let _ = write!(s, "{kind:width$}");
            for p in &phases {
                let n = row.get(p).copied().unwrap_or(0);
                let _ = write!(s, " {:>w$}", n, w = p.len().max(6));
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_merge_and_every_phase_has_a_column() {
        let mut a = Coverage::default();
        a.add("link", "registered");
        a.add("link", "registered");
        let mut b = Coverage::default();
        b.add("link", "not_running");
        b.add("vllm_crash", "registering");
        a.merge(&b);
        assert_eq!(a.0["link"]["registered"], 2);
        assert_eq!(a.0["link"]["not_running"], 1);
        assert_eq!(a.0["vllm_crash"]["registering"], 1);
        let t = a.table();
        assert!(t.lines().next().unwrap().contains("shutting_down"), "{t}");
        assert_eq!(t.lines().count(), 3);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Coverage>(&json).unwrap(), a);
    }
}
