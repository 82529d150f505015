//! The result of a sweep as JSON (`summary.json`): what was explored, what was found,
//! and the coverage; plus shards of the seed space and the merge of their summaries.
//!
//! Why JSON with seed ranges: a sweep split over a CI matrix or a Kubernetes Indexed Job
//! must merge into the same answer one machine would give. Shard `K/N` runs the seeds
//! `start + K + N·j`, so the shards of one sweep are disjoint and together cover it; a
//! summary lists the seeds it ran as ranges, and the merge checks that the shards agree
//! on what they searched (same parameters) before adding them up. Everything but
//! `timing` is a pure function of the seeds and the parameters, so two runs of one range
//! compare equal once their timings are set aside.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::coverage::Coverage;
use super::generate::Params;
use super::recovery_stats::RecoveryStats;
use super::schedule::Size;
use super::shrink::Violation;
use super::swarm::Mix;
use crate::report::esc;

/// `--shard K/N`: this process runs seeds `start + K + N·j`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// `K`: which shard, from 0.
    pub index: u64,
    /// `N`: how many shards the sweep is split into.
    pub count: u64,
}

impl Shard {
    /// The whole sweep as one shard (`0/1`).
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// The `j`-th seed of this shard.
    pub fn seed(&self, start: u64, j: u64) -> u64 {
        start
            .wrapping_add(self.index)
            .wrapping_add(self.count.wrapping_mul(j))
    }

    /// How many of the first `total` seeds of the sweep belong to this shard.
    pub fn len_of(&self, total: u64) -> u64 {
        total.saturating_sub(self.index).div_ceil(self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--shard `{s}`: write K/N with 0 <= K < N (e.g. 3/8)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u64 = k.trim().parse().map_err(|_| bad())?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// What a sweep searched: shards of one sweep must agree on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepParams {
    /// What its schedules were drawn from (its fields inline in the JSON).
    #[serde(flatten)]
    pub draws: Params,
    /// The bug planted in every simulated sidecar (`--planted-bug`), if any.
    pub planted_bug: Option<String>,
    /// The sweep's first seed (`--seed-start`).
    pub seed_start: u64,
}

/// One violation found, and its shrunk replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The seed whose schedule broke the invariant.
    pub seed: u64,
    /// The invariant broken, as the shrunk run broke it (its fields inline in the JSON).
    #[serde(flatten)]
    pub violation: Violation,
    /// The size of the schedule as drawn.
    pub original: Size,
    /// The size of the shrunk schedule.
    pub shrunk: Size,
    /// The shrunk scenario file, relative to the summary's directory.
    pub file: String,
    /// Runs the shrinker spent.
    pub shrink_runs: usize,
    /// With a planted bug: whether the shrunk schedule also fails (the same invariant)
    /// without it, i.e. the finding is not the planted bug's. `None`: no bug planted.
    #[serde(default)]
    pub fails_without_bug: Option<bool>,
    /// Under a swarm draw: the seed's enabled kinds and intensities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<Mix>,
}

/// A seed whose schedule could not be run (the runner skipped it or an action failed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// The seed.
    pub seed: u64,
    /// Why it could not be run.
    pub error: String,
}

/// Wall-clock figures: the only part of a summary that differs between two runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Wall time of the sweep, in ms (merged: the longest shard's).
    pub wall_ms: u64,
    /// Worker threads (merged: summed over the shards).
    pub jobs: usize,
    /// Schedules run per wall-clock minute (merged: summed over the shards).
    pub schedules_per_minute: f64,
    /// Wall time from the start until the first finding was shrunk and written (with a
    /// planted bug: the first that does not also fail without it).
    #[serde(default)]
    pub first_finding_ms: Option<u64>,
}

/// `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What the sweep searched.
    pub params: SweepParams,
    /// The shards merged into this summary (one for a single run).
    pub shards: Vec<Shard>,
    /// The seeds run, as inclusive ranges, sorted.
    pub seeds: Vec<(u64, u64)>,
    /// Schedules run.
    pub schedules: u64,
    /// Simulated time over all schedules, and instance-time.
    pub simulated_ms: u64,
    /// Simulated time times instances, summed over all schedules, in ms.
    pub instance_ms: u64,
    /// Every violation found, by seed.
    pub findings: Vec<Finding>,
    /// Every seed that could not be run, by seed.
    pub errors: Vec<RunError>,
    /// Which fault kinds hit sidecars in which phases.
    pub coverage: Coverage,
    /// Recovery times per fault kind (virtual ms), and the runs behind the slowest.
    #[serde(default)]
    pub recovery: RecoveryStats,
    /// Under the swarm draw: fault kind → how many schedules had it on.
    #[serde(default)]
    pub kinds_on: BTreeMap<String, u64>,
    /// Wall-clock figures, the only part that differs between two runs of the same seeds.
    pub timing: Timing,
}

impl Summary {
    /// Add another shard's summary of the same sweep.
    pub fn merge(&mut self, other: &Summary) -> Result<(), String> {
        if self.params != other.params {
            let (a, b) = (&self.params, &other.params);
            return Err(format!("summaries of different sweeps: {a:?} vs {b:?}"));
        }
        self.shards.extend(other.shards.iter().copied());
        self.shards.sort_by_key(|s| (s.count, s.index));
        self.shards.dedup();
        self.seeds = ranges([expand(&self.seeds), expand(&other.seeds)].concat());
        self.schedules += other.schedules;
        self.simulated_ms += other.simulated_ms;
        self.instance_ms += other.instance_ms;
        self.findings.extend(other.findings.iter().cloned());
        self.findings.sort_by_key(|f| f.seed);
        self.errors.extend(other.errors.iter().cloned());
        self.errors.sort_by_key(|e| e.seed);
        self.coverage.merge(&other.coverage);
        self.recovery.merge(&other.recovery);
        for (k, n) in &other.kinds_on {
            *self.kinds_on.entry(k.clone()).or_default() += n;
        }
        self.timing.wall_ms = self.timing.wall_ms.max(other.timing.wall_ms);
        self.timing.jobs += other.timing.jobs;
        self.timing.schedules_per_minute += other.timing.schedules_per_minute;
        let firsts = [self.timing.first_finding_ms, other.timing.first_finding_ms];
        self.timing.first_finding_ms = firsts.into_iter().flatten().min();
        Ok(())
    }

    /// The table printed at the end of a sweep.
    pub fn table(&self, out_dir: &Path) -> String {
        let mut s = String::new();
        let hours = self.simulated_ms as f64 / 3_600_000.0;
        let ihours = self.instance_ms as f64 / 3_600_000.0;
        let _ = writeln!(
            s,
            "{} schedules ({hours:.1} simulated hours, {ihours:.0} instance-hours) in {:.1}s wall: {:.0} schedules/min; {} violation(s), {} error(s)",
            self.schedules,
            self.timing.wall_ms as f64 / 1000.0,
            self.timing.schedules_per_minute,
            self.findings.len(),
            self.errors.len()
        );
        if !self.kinds_on.is_empty() {
            let on: Vec<String> = self
                .kinds_on
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = writeln!(s, "swarm: schedules with each kind on: {}", on.join(", "));
        }
        if let Some(t) = self.timing.first_finding_ms {
            let _ = writeln!(
                s,
                "first finding shrunk and written {:.1}s after the start",
                t as f64 / 1000.0
            );
        }
        if !self.findings.is_empty() {
            let _ = writeln!(
                s,
                "\n{:>8}  {:28} {:34} {:34} FILE",
                "SEED", "INVARIANT", "ORIGINAL", "SHRUNK"
            );
            for f in &self.findings {
                let _ = writeln!(
                    s,
                    "{:>8}  {:28} {:34} {:34} {}",
                    f.seed,
                    f.violation.invariant,
                    f.original.to_string(),
                    f.shrunk.to_string(),
                    out_dir.join(&f.file).display()
                );
                if let Some(m) = &f.mix {
                    let _ = writeln!(s, "          kinds on: {}", m.kind_names().join(", "));
                }
                if f.fails_without_bug == Some(true) {
                    let _ = writeln!(s, "          (fails without the planted bug too)");
                }
            }
        }
        for e in self.errors.iter().take(5) {
            let _ = writeln!(s, "error: seed {}: {}", e.seed, e.error);
        }
        s
    }

    /// JUnit XML: one test case per finding, and one for the sweep.
    pub fn junit(&self) -> String {
        let mut s = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"scenarios-explore\" tests=\"{}\" failures=\"{}\" time=\"{:.3}\">\n",
            self.findings.len() + 1,
            self.findings.len(),
            self.timing.wall_ms as f64 / 1000.0
        );
        let _ = writeln!(
            s,
            "  <testcase classname=\"explore\" name=\"sweep of {} schedules\"/>",
            self.schedules
        );
        for f in &self.findings {
            let _ = writeln!(
                s,
                "  <testcase classname=\"explore\" name=\"seed {} {}\"><failure message=\"{}\">{}\nshrunk: {}\nreplay: cargo run -p scenarios -- run --sim {}</failure></testcase>",
                f.seed,
                esc(&f.violation.invariant),
                esc(&f.violation.detail),
                esc(&f.violation.detail),
                f.shrunk,
                esc(&f.file)
            );
        }
        s.push_str("</testsuite>\n");
        s
    }
}

/// Sorted, deduplicated seeds as inclusive ranges.
pub fn ranges(mut seeds: Vec<u64>) -> Vec<(u64, u64)> {
    seeds.sort_unstable();
    seeds.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for s in seeds {
        match out.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(s) => *hi = s,
            _ => out.push((s, s)),
        }
    }
    out
}

fn expand(r: &[(u64, u64)]) -> Vec<u64> {
    r.iter().flat_map(|(a, b)| *a..=*b).collect()
}

/// Read the summaries under `dirs` (each a sweep's `--out`, or a directory of them) and
/// merge them; answers the merged summary and the files read.
pub fn merge_dirs(dirs: &[PathBuf]) -> Result<(Summary, Vec<PathBuf>), String> {
    let mut files = Vec::new();
    for d in dirs {
        let direct = d.join("summary.json");
        if direct.is_file() {
            files.push(direct);
            continue;
        }
        let entries =
            std::fs::read_dir(d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("summary.json"))
            .filter(|p| p.is_file())
            .collect();
        if found.is_empty() {
            return Err(format!(
                "no summary.json in {} or its subdirectories",
                d.display()
            ));
        }
        found.sort();
        files.extend(found);
    }
    let mut merged: Option<Summary> = None;
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        let mut s: Summary =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        // Findings' files are relative to their own summary: make them relative to the
        // merged one's parent by prefixing the shard directory.
        if let Some(dir) = f.parent() {
            for finding in &mut s.findings {
                finding.file = dir.join(&finding.file).display().to_string();
            }
        }
        match merged.as_mut() {
            None => merged = Some(s),
            Some(m) => m.merge(&s).map_err(|e| format!("{}: {e}", f.display()))?,
        }
    }
    merged
        .map(|m| (m, files))
        .ok_or_else(|| "no summaries to merge".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::swarm::Draw;

    fn summary(shard: Shard, seeds: &[u64]) -> Summary {
        let mut coverage = Coverage::default();
        coverage.add("link", "registered");
        Summary {
            params: SweepParams {
                draws: Params {
                    max_instances: 3,
                    duration_ms: 60_000,
                    faults: vec!["link".into()],
                    dialect: None,
                    draw: Draw::Swarm,
                },
                planted_bug: None,
                seed_start: 0,
            },
            shards: vec![shard],
            seeds: ranges(seeds.to_vec()),
            schedules: seeds.len() as u64,
            simulated_ms: 60_000 * seeds.len() as u64,
            instance_ms: 0,
            findings: Vec::new(),
            errors: Vec::new(),
            coverage,
            recovery: RecoveryStats::default(),
            kinds_on: BTreeMap::from([("link".to_string(), seeds.len() as u64)]),
            timing: Timing::default(),
        }
    }

    #[test]
    fn shards_split_the_seed_space_without_overlap() {
        let shards: Vec<Shard> = (0..3).map(|k| format!("{k}/3").parse().unwrap()).collect();
        let mut all: Vec<u64> = Vec::new();
        for s in &shards {
            all.extend((0..s.len_of(10)).map(|j| s.seed(100, j)));
        }
        all.sort_unstable();
        assert_eq!(all, (100..110).collect::<Vec<_>>());
        assert!("3/3".parse::<Shard>().is_err());
        assert!("1/0".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
    }

    #[test]
    fn merged_shards_equal_the_whole_sweep() {
        let mut a = summary("0/2".parse().unwrap(), &[0, 2, 4]);
        let b = summary("1/2".parse().unwrap(), &[1, 3, 5]);
        a.merge(&b).unwrap();
        assert_eq!(a.seeds, vec![(0, 5)]);
        assert_eq!(a.schedules, 6);
        assert_eq!(a.coverage.0["link"]["registered"], 2);
        assert_eq!(a.kinds_on["link"], 6);
        let mut other = summary(Shard::WHOLE, &[9]);
        other.params.draws.duration_ms = 1;
        assert!(a.merge(&other).is_err());
    }

    #[test]
    fn merged_recovery_times_are_those_of_the_union() {
        use crate::recovery::RecoveryCheck;
        let check = |kind: &str, ms: u64| RecoveryCheck {
            fault: kind.into(),
            kind: kind.into(),
            start_ms: 0,
            end_ms: 1000,
            instance: "i0".into(),
            bound_ms: 12_000,
            recovered_ms: Some(1000 + ms),
            time_to_recover_ms: Some(ms),
        };
        let runs: [(u64, Vec<RecoveryCheck>); 4] = [
            (0, vec![check("link", 400), check("vllm_crash", 1800)]),
            (1, vec![check("link", 9000)]),
            (2, vec![check("link", 400), check("link", 600)]),
            (3, vec![check("vllm_crash", 200)]),
        ];
        let mut a = summary("0/2".parse().unwrap(), &[0, 2]);
        let mut b = summary("1/2".parse().unwrap(), &[1, 3]);
        let mut whole = RecoveryStats::default();
        for (seed, checks) in &runs {
            let shard = if seed % 2 == 0 { &mut a } else { &mut b };
            shard.recovery.add(*seed, checks);
            whole.add(*seed, checks);
        }
        a.merge(&b).unwrap();
        assert_eq!(a.recovery, whole);
        let link = &a.recovery.0["link"];
        assert_eq!(
            (link.n(), link.quantile(0.5), link.quantile(0.99)),
            (4, Some(400), Some(9000))
        );
        assert_eq!(link.slowest[0].seed, 1);
        // Through JSON, as `explore merge` reads shards.
        let back: Summary = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back.recovery, whole);
    }

    #[test]
    fn a_summary_written_before_draws_and_recovery_reads_as_uniform_and_empty() {
        let mut v = serde_json::to_value(summary(Shard::WHOLE, &[1])).unwrap();
        v["params"].as_object_mut().unwrap().remove("draw");
        v.as_object_mut().unwrap().remove("recovery");
        v.as_object_mut().unwrap().remove("kinds_on");
        let old: Summary = serde_json::from_value(v).unwrap();
        assert_eq!(old.params.draws.draw, Draw::Uniform);
        assert!(old.recovery.0.is_empty());
    }

    #[test]
    fn merge_dirs_reads_shard_directories() {
        let root = std::env::temp_dir().join(format!("explore-merge-{}", std::process::id()));
        for (k, seeds) in [(0u64, [0u64, 2]), (1, [1, 3])] {
            let d = root.join(format!("shard-{k}"));
            std::fs::create_dir_all(&d).unwrap();
            let s = summary(Shard { index: k, count: 2 }, &seeds);
            std::fs::write(d.join("summary.json"), serde_json::to_string(&s).unwrap()).unwrap();
        }
        let (m, files) = merge_dirs(std::slice::from_ref(&root)).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(m.seeds, vec![(0, 3)]);
        assert_eq!(m.shards.len(), 2);
        std::fs::remove_dir_all(&root).unwrap();
        assert!(merge_dirs(&[root]).is_err());
    }

    #[test]
    fn ranges_compress_sorted_seeds() {
        assert_eq!(ranges(vec![5, 1, 2, 3, 9]), vec![(1, 3), (5, 5), (9, 9)]);
        assert_eq!(ranges(vec![]), vec![]);
    }
}
