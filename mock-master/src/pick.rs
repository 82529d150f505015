//! Which instance a request goes to, decided without I/O: the routable instance with
//! the fewest waiting requests by its latest heartbeat, then the lowest KV-cache usage,
//! then round robin among the ties (the cursor is an argument). An instance that has
//! not sent a heartbeat yet counts as idle; a non-finite usage counts as full.

use std::cmp::Ordering;

use crate::pbjson::LoadMetrics;

/// Order key of one candidate: (waiting, usage); lower is better.
fn load_key(load: &Option<LoadMetrics>) -> (u64, f32) {
    match load {
        None => (0, 0.0),
        Some(m) => {
            let usage = if m.gpu_cache_usage_perc.is_finite() {
                m.gpu_cache_usage_perc
            } else {
                1.0
            };
            (m.waiting_requests_num, usage)
        }
    }
}

/// Index of the least-loaded candidate; `cursor` breaks ties round robin.
pub fn pick(candidates: &[(String, Option<LoadMetrics>)], cursor: u64) -> Option<usize> {
    let best = candidates.iter().map(|(_, l)| load_key(l)).min_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal))
    })?;
    let ties: Vec<usize> = candidates
        .iter()
        .enumerate()
        .filter(|(_, (_, l))| load_key(l) == best)
        .map(|(i, _)| i)
        .collect();
    let n = u64::try_from(ties.len()).ok().filter(|n| *n > 0)?;
    ties.get(usize::try_from(cursor % n).ok()?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, waiting: u64, usage: f32) -> (String, Option<LoadMetrics>) {
        (
            name.to_string(),
            Some(LoadMetrics {
                waiting_requests_num: waiting,
                gpu_cache_usage_perc: usage,
            }),
        )
    }

    #[test]
    fn fewest_waiting_then_usage_then_round_robin() {
        assert_eq!(pick(&[], 0), None);
        assert_eq!(pick(&[c("a", 3, 0.0), c("b", 1, 0.9)], 0), Some(1));
        assert_eq!(pick(&[c("a", 1, 0.5), c("b", 1, 0.2)], 0), Some(1));
        let tie = [c("a", 1, 0.2), c("b", 1, 0.2), c("c", 5, 0.0)];
        assert_eq!(pick(&tie, 0), Some(0));
        assert_eq!(pick(&tie, 1), Some(1));
        assert_eq!(pick(&tie, 2), Some(0));
        assert_eq!(pick(&[c("a", 0, f32::NAN), c("b", 0, 0.9)], 0), Some(1));
        assert_eq!(pick(&[("a".into(), None), c("b", 0, 0.1)], 0), Some(0));
    }
}
