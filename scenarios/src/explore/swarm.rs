//! Swarm draws: each seed first picks which fault kinds are on and how hard each hits,
//! then its schedule is drawn from those alone.
//!
//! Why: a uniform draw over every kind gives every schedule the same average mix, so a
//! bug that needs many faults of one kind, or one kind with nothing else to mask it, is
//! rare (swarm testing, as in TigerBeetle's simulator and FoundationDB's workloads).
//! Drawing the mix per seed makes such corners common while the union over seeds still
//! covers every kind. The mix comes from a stream of its own, so a seed has the same
//! cluster under both draws, and it works for any list of kinds it is given.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How a sweep draws each schedule's faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Draw {
    /// Each seed draws a non-empty subset of the allowed kinds and their intensities
    /// ([`Mix`]), then its faults from those only.
    #[default]
    Swarm,
    /// Every fault picks its kind uniformly among all allowed kinds (summaries written
    /// before draws were selectable were drawn so).
    Uniform,
}

impl Draw {
    /// The older summaries' draw, for files that do not name one.
    pub fn legacy() -> Draw {
        Draw::Uniform
    }
}

// The flag's spelling, also serde's.
crate::capability::named!(Draw {
    Swarm => "swarm",
    Uniform => "uniform",
});

/// One enabled fault kind and how hard it hits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KindMix {
    /// The fault kind (a name of `generate::FAULT_KINDS`).
    pub kind: String,
    /// Its relative weight when a fault's kind is picked (1 to 10, log-uniform).
    pub weight: f64,
    /// Its faults' durations are multiplied by this (0.25 to 4, log-uniform; still
    /// clamped to the run).
    pub duration_scale: f64,
}

/// The kinds one seed draws from, and the schedule's fault rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// The enabled kinds, in the order they were allowed.
    pub kinds: Vec<KindMix>,
    /// The number of faults drawn is scaled by this (0.5 to 3, log-uniform).
    pub rate: f64,
}

/// Log-uniform in `[lo, hi]`, rounded to two decimals so a mix reads well in a file.
fn log_uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    let v = rng.gen_range(lo.ln()..=hi.ln()).exp();
    (v * 100.0).round() / 100.0
}

impl Mix {
    /// The mix of `seed` over the `allowed` kinds: a subset whose size is uniform in
    /// `1..=allowed.len()` (so one kind alone is as likely as all of them), each with a
    /// weight and a duration scale, and a fault rate. `None` when nothing is allowed.
    pub fn draw(seed: u64, allowed: &[String]) -> Option<Mix> {
        if allowed.is_empty() {
            return None;
        }
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7377_6172_6d2d_6d69);
        let n = rng.gen_range(1..=allowed.len());
        let mut picked: Vec<usize> = (0..allowed.len()).collect();
        picked.shuffle(&mut rng);
        picked.truncate(n);
        picked.sort_unstable();
        let kinds = picked
            .into_iter()
            .filter_map(|i| allowed.get(i))
            .map(|kind| KindMix {
                kind: kind.clone(),
                weight: log_uniform(&mut rng, 1.0, 10.0),
                duration_scale: log_uniform(&mut rng, 0.25, 4.0),
            })
            .collect();
        let rate = log_uniform(&mut rng, 0.5, 3.0);
        Some(Mix { kinds, rate })
    }

    /// A kind by weight.
    pub fn pick<'m>(&'m self, rng: &mut StdRng) -> Option<&'m KindMix> {
        self.kinds.choose_weighted(rng, |k| k.weight).ok()
    }

    /// The enabled kinds' names.
    pub fn kind_names(&self) -> Vec<&str> {
        self.kinds.iter().map(|k| k.kind.as_str()).collect()
    }

    /// One line for a file's header or a summary: `rate ×1.2; link ×3.1 (durations ×0.5), …`.
    pub fn describe(&self) -> String {
        let kinds: Vec<String> = self
            .kinds
            .iter()
            .map(|k| {
                format!(
                    "{} weight {} (durations ×{})",
                    k.kind, k.weight, k.duration_scale
                )
            })
            .collect();
        format!("fault rate ×{}; on: {}", self.rate, kinds.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_seed_is_a_mix_within_the_allowed_kinds() {
        let allowed = kinds(&["a", "b", "c", "d", "e"]);
        let mut sizes = [0usize; 6];
        for seed in 0..500 {
            let m = Mix::draw(seed, &allowed).unwrap();
            assert_eq!(Some(&m), Mix::draw(seed, &allowed).as_ref());
            assert!(!m.kinds.is_empty());
            assert!(m.kinds.iter().all(|k| allowed.contains(&k.kind)));
            assert!(m
                .kinds
                .iter()
                .all(|k| (1.0..=10.0).contains(&k.weight)
                    && (0.25..=4.0).contains(&k.duration_scale)));
            assert!((0.5..=3.0).contains(&m.rate));
            sizes[m.kinds.len()] += 1;
        }
        // Every subset size occurs, one kind alone about a fifth of the time.
        assert!(sizes[1..].iter().all(|n| *n > 60), "{sizes:?}");
        assert_eq!(Mix::draw(1, &[]), None);
    }

    #[test]
    fn any_list_of_kinds_works_and_weights_steer_the_pick() {
        let m = Mix {
            kinds: vec![
                KindMix {
                    kind: "heavy".into(),
                    weight: 9.0,
                    duration_scale: 1.0,
                },
                KindMix {
                    kind: "light".into(),
                    weight: 1.0,
                    duration_scale: 1.0,
                },
            ],
            rate: 1.0,
        };
        let mut rng = StdRng::seed_from_u64(3);
        let heavy = (0..1000)
            .filter(|_| m.pick(&mut rng).is_some_and(|k| k.kind == "heavy"))
            .count();
        assert!((850..=950).contains(&heavy), "{heavy}");
        let one = Mix::draw(7, &kinds(&["pause_sidecar"])).unwrap();
        assert_eq!(one.kind_names(), vec!["pause_sidecar"]);
    }
}
