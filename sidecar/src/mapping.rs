//! From a scraped page to the heartbeat's `load_metrics` and `latency_metrics`.
//!
//! `docs/contract.md` §5 fixes the reference mapping; this module implements it, with
//! two corrections where the reference is wrong (KV usage, broken counters):
//!
//! - `waiting_requests_num`: sum of `vllm:num_requests_waiting` over label sets.
//! - `gpu_cache_usage_perc`: `vllm:kv_cache_usage_perc` (newer engines), else the
//!   deprecated `vllm:gpu_cache_usage_perc`: the *mean* over label sets (engines),
//!   clamped to [0, 1]. The reference sums, which reads two engines at 0.5 as 1.0.
//! - `recent_max_ttft` / `recent_max_tbt` (ms) from `vllm:time_to_first_token_seconds`
//!   and `vllm:inter_token_latency_seconds` (else `vllm:time_per_output_token_seconds`),
//!   over the interval since the previous scrape: `avg` is the reference (Δsum/Δcount,
//!   truncated), `p50`/`p90`/`p99` interpolate in the interval's bucket deltas the way
//!   PromQL's `histogram_quantile` does, `max` is the upper bound of the highest bucket
//!   that grew (the last finite bound when only `+Inf` grew).
//!
//! Interval state is kept per series (label set without `le`), so one engine restarting
//! (its count or sum going down) only re-baselines that series instead of producing a
//! negative or huge number; a series seen for the first time is a baseline too. NaN and
//! infinite samples are ignored, and every output is finite and non-negative.
//!
//! Implausible intervals count as resets too. No request waits longer than
//! [`MAX_LATENCY_SECONDS`] (one hour) for a token, so a series whose `_sum` grew by more
//! than that per request of its `_count` growth (or by more than that with no request, or
//! by an amount that is not a finite number) holds a broken counter, not latency: a
//! `_sum` jumping to 1e300 would otherwise read as `i64::MAX` ms. Such a series adds
//! nothing to the interval and its values become the new baseline, as on a restart; the
//! other series still count. Any statistic still above the bound (only a bucket bound
//! above an hour can produce one) is reported as 0, the reference's answer for an
//! interval it cannot measure. So the master, which stores these as int64, only ever gets
//! 0..=3_600_000 ms; values below the bound are unchanged.
//!
//! Two entry points give the same answer: [`Mapper::observe`] on a parsed page and
//! [`Mapper::observe_text`], which lexes only the lines it needs (the scrape path's
//! fast path: most of a vLLM page is never tokenized).

use std::collections::HashMap;

use serde::Serialize;

use crate::prom::{self, Format, Labels, Page};

/// Which latency statistic the heartbeat reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LatencyStat {
    #[default]
    Avg,
    P50,
    P90,
    P99,
    Max,
}

#[derive(Clone, Debug, Default)]
pub struct MapperConfig {
    pub latency_stat: LatencyStat,
    /// Only samples whose `model_name` label equals this.
    pub model: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LoadMetrics {
    pub waiting_requests_num: u64,
    pub gpu_cache_usage_perc: f64,
}

/// Milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencyMetrics {
    pub recent_max_ttft: i64,
    pub recent_max_tbt: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HeartbeatMetrics {
    pub load_metrics: LoadMetrics,
    pub latency_metrics: LatencyMetrics,
}

/// The longest latency (time to first token, time between tokens) the mapping believes,
/// in seconds: intervals implying more are treated as counter resets (see the module
/// documentation).
pub const MAX_LATENCY_SECONDS: f64 = 3600.0;

pub const WAITING: &str = "vllm:num_requests_waiting";
pub const KV_USAGE: &str = "vllm:kv_cache_usage_perc";
pub const GPU_CACHE_USAGE: &str = "vllm:gpu_cache_usage_perc";
pub const TTFT: &str = "vllm:time_to_first_token_seconds";
pub const ITL: &str = "vllm:inter_token_latency_seconds";
pub const TPOT: &str = "vllm:time_per_output_token_seconds";
/// 0.33's sleep gauge: per engine, `sleep_state="awake"` is 0 while it sleeps.
pub const SLEEP_STATE: &str = "vllm:engine_sleep_state";

/// The histograms the mapping reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hist {
    Ttft = 0,
    Itl = 1,
    Tpot = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Bucket,
    Sum,
    Count,
}

/// What a sample name means to the mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Waiting,
    Kv,
    GpuKv,
    /// A `vllm:engine_sleep_state` sample (which state: its `sleep_state` label).
    Sleep,
    Hist(Hist, Part),
}

/// Classify a metric name; `buckets`: whether bucket samples are needed at all.
#[inline]
fn classify(name: &str, buckets: bool) -> Option<Target> {
    match name.strip_prefix("vllm:") {
        Some(rest) => classify_rest(rest, buckets),
        None => classify_escaped(name, buckets),
    }
}

/// [`classify`] of the name after `vllm:`.
#[inline]
fn classify_rest(rest: &str, buckets: bool) -> Option<Target> {
    let (hist, part) = match rest.as_bytes().first()? {
        b'n' if rest == &WAITING[5..] => return Some(Target::Waiting),
        b'k' if rest == &KV_USAGE[5..] => return Some(Target::Kv),
        b'g' if rest == &GPU_CACHE_USAGE[5..] => return Some(Target::GpuKv),
        b'e' if rest == &SLEEP_STATE[5..] => return Some(Target::Sleep),
        b't' | b'i' => {
            let (base, part) = if let Some(b) = rest.strip_suffix("_sum") {
                (b, Part::Sum)
            } else if let Some(b) = rest.strip_suffix("_count") {
                (b, Part::Count)
            } else if let Some(b) = rest.strip_suffix("_bucket") {
                if !buckets {
                    return None;
                }
                (b, Part::Bucket)
            } else {
                return None;
            };
            let hist = if base == &TTFT[5..] {
                Hist::Ttft
            } else if base == &ITL[5..] {
                Hist::Itl
            } else if base == &TPOT[5..] {
                Hist::Tpot
            } else {
                return None;
            };
            (hist, part)
        }
        _ => return None,
    };
    Some(Target::Hist(hist, part))
}

/// A name as prometheus_client 0.22 and later write it when a scraper's `Accept` asks
/// for (or defaults to) an escaping scheme, `vllm:` being outside the legacy character
/// set of OpenMetrics: `underscores` writes `vllm_num_requests_waiting`, `dots`
/// `vllm__num__requests__waiting` (every `_` doubled, the colon `__`) and `values`
/// `U__vllm_3a_num__requests__waiting`. Answers the part after `vllm:` as vLLM named it;
/// `None` for any other name. Cold: pages with vLLM's own names never get here.
#[cold]
fn unescape_vllm(name: &str) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    if let Some(rest) = name.strip_prefix("U__vllm_3a_") {
        return Some(Cow::Owned(rest.replace("__", "_")));
    }
    if let Some(rest) = name.strip_prefix("vllm__") {
        return Some(Cow::Owned(rest.replace("__", "_")));
    }
    name.strip_prefix("vllm_").map(Cow::Borrowed)
}

#[cold]
fn classify_escaped(name: &str, buckets: bool) -> Option<Target> {
    classify_rest(&unescape_vllm(name)?, buckets)
}

/// Whether a line (starting with a bare name) may hold a sample the mapping reads:
/// cheap prefix tests, never false for a line [`classify`] would accept.
#[inline]
fn may_match(line: &[u8], buckets: bool) -> bool {
    let Some(rest) = line.strip_prefix(b"vllm:") else {
        // Escaped vLLM names start `vllm_` or `U__`; other families are refused here,
        // without the call.
        return matches!(line.first(), Some(b'v' | b'U')) && may_match_escaped(line, buckets);
    };
    // Whole suffixes: a vLLM page also has a `_created` gauge per histogram.
    let hist = |base: &str| match line.strip_prefix(base.as_bytes()) {
        Some(after) => {
            after.starts_with(b"_sum")
                || after.starts_with(b"_count")
                || (buckets && after.starts_with(b"_bucket"))
        }
        None => false,
    };
    match rest.first() {
        Some(b'n') => line.starts_with(WAITING.as_bytes()),
        Some(b'k') => line.starts_with(KV_USAGE.as_bytes()),
        Some(b'g') => line.starts_with(GPU_CACHE_USAGE.as_bytes()),
        Some(b'e') => line.starts_with(SLEEP_STATE.as_bytes()),
        Some(b't') => hist(TTFT) || hist(TPOT),
        Some(b'i') => hist(ITL),
        _ => false,
    }
}

/// [`may_match`] for a line whose name is not spelled `vllm:`: its name, unescaped,
/// classified (only lines of an escaped vLLM page get past the first byte test).
#[cold]
fn may_match_escaped(line: &[u8], buckets: bool) -> bool {
    let end = line
        .iter()
        .position(|b| matches!(b, b'{' | b' ' | b'\t'))
        .unwrap_or(line.len());
    match std::str::from_utf8(line.get(..end).unwrap_or_default()) {
        Ok(name) => classify_escaped(name, buckets).is_some(),
        Err(_) => false,
    }
}

/// One series' cumulative values in one scrape.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    sum: Option<f64>,
    count: Option<f64>,
    /// `(le, cumulative count)`, sorted by `le` when the scrape ends.
    buckets: Vec<(f64, f64)>,
}

impl Snapshot {
    fn clear(&mut self) {
        self.sum = None;
        self.count = None;
        self.buckets.clear();
    }
}

#[derive(Debug, Default)]
struct Series {
    /// Its labels without `le`.
    key: String,
    prev: Option<Snapshot>,
    cur: Snapshot,
    seen: bool,
}

/// Interval state of one histogram family: series keyed by their labels without `le`.
#[derive(Debug, Default)]
struct HistState {
    /// In the order first seen, so an interval adds its series up in the same order on
    /// every run (a `HashMap`'s order, and with it the rounding, changed per process).
    series: Vec<Series>,
    /// Key → position in `series`.
    index: HashMap<String, usize>,
    any_seen: bool,
}

/// Where one line goes: everything the mapping derives from its label text.
#[derive(Clone, Copy, Debug)]
struct Placement {
    /// A histogram line's position in its [`HistState::series`].
    series: usize,
    /// The bucket's bound (`le`), when it has a usable one.
    le: Option<f64>,
    /// The line passes the `--model` filter.
    model_ok: bool,
    /// A sleep-state line of the `awake` state.
    awake: bool,
}

/// The previous scrape's lines the mapping read, in page order, with where each went.
///
/// An exporter writes the same label sets in the same order on every scrape, so a line
/// with the same name and label text as the one at the cursor goes where it went last
/// time: no label walk, key or hash lookup per line (those dominate the mapping's cost at
/// `p99`, which reads every bucket line, and under `--model`, which would look the label
/// up on every line). The first line that differs ends the replay for the rest of the
/// scrape, which then records itself; every answer is the same either way. It holds at
/// most the lines of one page.
#[derive(Debug, Default)]
struct Replay {
    lines: Vec<ReplayLine>,
    /// Lines of this scrape matched so far; `None` once one differed.
    cursor: Option<usize>,
}

#[derive(Debug)]
struct ReplayLine {
    target: Target,
    labels: Box<str>,
    place: Placement,
}

impl Replay {
    fn begin(&mut self) {
        self.cursor = Some(0);
    }

    /// Where this line went last scrape, if the scrape so far is the same.
    #[inline]
    fn next(&mut self, target: Target, labels: &str) -> Option<Placement> {
        let at = self.cursor?;
        match self.lines.get(at) {
            Some(l) if l.target == target && *l.labels == *labels => {
                self.cursor = Some(at + 1);
                Some(l.place)
            }
            _ => {
                self.lines.truncate(at);
                self.cursor = None;
                None
            }
        }
    }

    /// A line placed the long way (after [`Replay::next`] answered `None`).
    fn record(&mut self, target: Target, labels: &str, place: Placement) {
        self.lines.push(ReplayLine {
            target,
            labels: labels.into(),
            place,
        });
    }

    /// Close the scrape: a page shorter than the last loses the tail.
    fn end(&mut self) {
        if let Some(at) = self.cursor.take() {
            self.lines.truncate(at);
        }
    }
}

/// What one interval of one histogram family adds up to.
#[derive(Debug, Default)]
struct Interval {
    sum: f64,
    count: f64,
    /// `(le, cumulative delta)` summed over series with the same bounds.
    buckets: Vec<(f64, f64)>,
}

/// Keeps the previous scrape's counters to compute interval statistics.
#[derive(Debug, Default)]
pub struct Mapper {
    config: MapperConfig,
    hists: [HistState; 3],
    replay: Replay,
    /// Reused between scrapes for series keys.
    key: String,
    /// What the last page said of sleep mode (see [`Mapper::engines_asleep`]).
    asleep: Option<bool>,
}

/// Per-scrape gauges.
#[derive(Default)]
struct Gauges {
    waiting: f64,
    kv: (f64, u32),
    gpu_kv: (f64, u32),
    /// `awake` samples seen, and how many of them said awake (not 0).
    awake: (u32, u32),
}

impl Mapper {
    pub fn new(config: MapperConfig) -> Self {
        Mapper {
            config,
            ..Mapper::default()
        }
    }

    pub fn config(&self) -> &MapperConfig {
        &self.config
    }

    /// Map one parsed scrape.
    pub fn observe(&mut self, page: &Page<'_>) -> HeartbeatMetrics {
        let buckets = self.config.latency_stat != LatencyStat::Avg;
        self.begin();
        let mut g = Gauges::default();
        for s in &page.samples {
            if let Some(t) = classify(&s.name, buckets) {
                self.feed(&mut g, t, &s.labels, s.value);
            }
        }
        self.end(g)
    }

    /// Map one scrape straight from its text: the same result as
    /// `observe(&prom::parse(text, format, Mode::Lenient)?)`, lexing only the lines of
    /// the metrics above.
    pub fn observe_text(&mut self, text: &str, format: Format) -> HeartbeatMetrics {
        let buckets = self.config.latency_stat != LatencyStat::Avg;
        self.begin();
        let mut g = Gauges::default();
        prom::scan(
            text,
            format,
            |line| may_match(line.as_bytes(), buckets),
            |s| {
                if let Some(t) = classify(&s.name, buckets) {
                    self.feed(&mut g, t, &s.labels, s.value);
                }
            },
        );
        self.end(g)
    }

    fn begin(&mut self) {
        self.replay.begin();
        for h in &mut self.hists {
            h.any_seen = false;
            for s in &mut h.series {
                s.seen = false;
                s.cur.clear();
            }
        }
    }

    #[inline]
    fn feed(&mut self, g: &mut Gauges, target: Target, labels: &Labels<'_>, value: f64) {
        if !value.is_finite() {
            return;
        }
        let place = match self.replay.next(target, labels.raw()) {
            Some(place) => place,
            None => {
                let place = self.place(target, labels);
                self.replay.record(target, labels.raw(), place);
                place
            }
        };
        if !place.model_ok {
            return;
        }
        match target {
            Target::Waiting => {
                if value >= 0.0 {
                    g.waiting += value;
                }
            }
            Target::Kv => {
                g.kv.0 += value;
                g.kv.1 += 1;
            }
            Target::GpuKv => {
                g.gpu_kv.0 += value;
                g.gpu_kv.1 += 1;
            }
            Target::Sleep => {
                if place.awake {
                    g.awake.0 += 1;
                    g.awake.1 += u32::from(value != 0.0);
                }
            }
            Target::Hist(hist, part) => {
                let state = &mut self.hists[hist as usize];
                let Some(series) = state.series.get_mut(place.series) else {
                    return;
                };
                series.seen = true;
                state.any_seen = true;
                match part {
                    Part::Sum => series.cur.sum = Some(value),
                    Part::Count => series.cur.count = Some(value),
                    // A bucket without a usable bound cannot be placed: ignore it.
                    Part::Bucket => {
                        if let Some(le) = place.le {
                            series.cur.buckets.push((le, value));
                        }
                    }
                }
            }
        }
    }

    /// Where a line goes, from its labels: the `--model` filter and, for a histogram
    /// line, the series (created when new) and the bound.
    fn place(&mut self, target: Target, labels: &Labels<'_>) -> Placement {
        let model_ok = match &self.config.model {
            Some(model) => labels.get("model_name").as_deref() == Some(model.as_str()),
            None => true,
        };
        let (hist, part) = match target {
            Target::Hist(hist, part) if model_ok => (hist, part),
            _ => {
                let awake = target == Target::Sleep
                    && labels.get("sleep_state").as_deref() == Some("awake");
                return Placement {
                    series: 0,
                    le: None,
                    model_ok,
                    awake,
                };
            }
        };
        let mut le = None;
        self.key.clear();
        for (n, v) in labels.iter() {
            if n == "le" {
                le = Some(v);
                continue;
            }
            self.key.push_str(&n);
            self.key.push('\u{0}');
            self.key.push_str(&v);
            self.key.push('\u{0}');
        }
        let state = &mut self.hists[hist as usize];
        let series = match state.index.get(self.key.as_str()) {
            Some(&at) => at,
            None => {
                state.index.insert(self.key.clone(), state.series.len());
                state.series.push(Series {
                    key: self.key.clone(),
                    ..Series::default()
                });
                state.series.len() - 1
            }
        };
        let le = match part {
            Part::Bucket => le.and_then(|l| prom::parse_f64(&l)).filter(|l| !l.is_nan()),
            _ => None,
        };
        Placement {
            series,
            le,
            model_ok: true,
            awake: false,
        }
    }

    /// Whether the last page said every engine sleeps: `Some(true)` when it had
    /// `vllm:engine_sleep_state{sleep_state="awake"}` samples and all were 0,
    /// `Some(false)` when one was not, `None` on a page without them (releases before
    /// 0.33, or only other engines' samples under `--model`).
    pub fn engines_asleep(&self) -> Option<bool> {
        self.asleep
    }

    fn end(&mut self, g: Gauges) -> HeartbeatMetrics {
        self.asleep = (g.awake.0 > 0).then_some(g.awake.1 == 0);
        let stat = self.config.latency_stat;
        let kv = if g.kv.1 > 0 { g.kv } else { g.gpu_kv };
        let usage = if kv.1 > 0 { kv.0 / kv.1 as f64 } else { 0.0 };
        let usage = if usage.is_finite() {
            usage.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.replay.end();
        let mut forgot = false;
        for h in &mut self.hists {
            forgot |= h.forget_unseen();
        }
        if forgot {
            // The replay's positions point into the old lists.
            self.replay.lines.clear();
        }
        let mut ttft = self.hists[Hist::Ttft as usize].interval();
        let itl = self.hists[Hist::Itl as usize].interval();
        let tpot = self.hists[Hist::Tpot as usize].interval();
        let mut tbt = if self.hists[Hist::Itl as usize].any_seen {
            itl
        } else {
            tpot
        };
        HeartbeatMetrics {
            load_metrics: LoadMetrics {
                waiting_requests_num: if g.waiting.is_finite() {
                    g.waiting as u64
                } else {
                    0
                },
                gpu_cache_usage_perc: usage,
            },
            latency_metrics: LatencyMetrics {
                recent_max_ttft: to_ms(ttft.statistic(stat)),
                recent_max_tbt: to_ms(tbt.statistic(stat)),
            },
        }
    }
}

/// Seconds to whole milliseconds, truncated; anything not finite, not positive or above
/// [`MAX_LATENCY_SECONDS`] is 0 (never more than 3_600_000).
fn to_ms(seconds: f64) -> i64 {
    if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_LATENCY_SECONDS {
        (seconds * 1000.0) as i64
    } else {
        0
    }
}

impl HistState {
    /// Forget the series not on this page; whether there were any.
    fn forget_unseen(&mut self) -> bool {
        if self.series.iter().all(|s| s.seen) {
            return false;
        }
        self.series.retain(|s| s.seen);
        self.index.clear();
        for (at, s) in self.series.iter().enumerate() {
            self.index.insert(s.key.clone(), at);
        }
        true
    }

    /// Close the scrape (after [`HistState::forget_unseen`]): add up the interval of
    /// every series that has a baseline, then make this scrape the baseline.
    fn interval(&mut self) -> Interval {
        let mut out = Interval::default();
        for s in &mut self.series {
            let cur = &mut s.cur;
            if !cur.buckets.windows(2).all(|w| w[0].0 <= w[1].0) {
                cur.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            if let Some(prev) = &s.prev {
                add_delta(&mut out, prev, cur);
            }
            match &mut s.prev {
                Some(prev) => {
                    prev.sum = cur.sum;
                    prev.count = cur.count;
                    prev.buckets.clear();
                    prev.buckets.extend_from_slice(&cur.buckets);
                }
                None => s.prev = Some(cur.clone()),
            }
        }
        out
    }
}

/// Add one series' interval to `out`, unless it went backwards (a restart) or implies
/// a latency above [`MAX_LATENCY_SECONDS`] (a broken counter): then the new values are
/// only a baseline.
fn add_delta(out: &mut Interval, prev: &Snapshot, cur: &Snapshot) {
    if let (Some(s0), Some(c0), Some(s1), Some(c1)) = (prev.sum, prev.count, cur.sum, cur.count) {
        if s1 < s0 || c1 < c0 {
            return;
        }
        let (sum, count) = (s1 - s0, c1 - c0);
        if !plausible(sum, count) {
            return;
        }
        out.sum += sum;
        out.count += count;
    } else if prev.count.zip(cur.count).is_some_and(|(c0, c1)| c1 < c0)
        || prev.sum.zip(cur.sum).is_some_and(|(s0, s1)| s1 < s0)
    {
        return;
    }
    let same_bounds = prev.buckets.len() == cur.buckets.len()
        && prev
            .buckets
            .iter()
            .zip(&cur.buckets)
            .all(|(a, b)| a.0 == b.0);
    if !same_bounds
        || prev
            .buckets
            .iter()
            .zip(&cur.buckets)
            .any(|(a, b)| b.1 < a.1)
    {
        return;
    }
    for (a, b) in prev.buckets.iter().zip(&cur.buckets) {
        let d = b.1 - a.1;
        match out.buckets.iter_mut().find(|(le, _)| *le == b.0) {
            Some(slot) => slot.1 += d,
            None => out.buckets.push((b.0, d)),
        }
    }
}

/// Whether a series' interval (`sum` seconds over `count` requests, both not negative)
/// can be latency: finite, and at most [`MAX_LATENCY_SECONDS`] per request (or in all,
/// when the count did not grow: a scrape may see a sum before its count).
fn plausible(sum: f64, count: f64) -> bool {
    sum.is_finite() && count.is_finite() && sum <= MAX_LATENCY_SECONDS * count.max(1.0)
}

impl Interval {
    /// The statistic, in seconds (0 when nothing was observed in the interval).
    fn statistic(&mut self, stat: LatencyStat) -> f64 {
        match stat {
            LatencyStat::Avg => {
                if self.count > 0.0 {
                    self.sum / self.count
                } else {
                    0.0
                }
            }
            LatencyStat::P50 => self.quantile(0.5),
            LatencyStat::P90 => self.quantile(0.9),
            LatencyStat::P99 => self.quantile(0.99),
            LatencyStat::Max => self.max(),
        }
    }

    fn sorted_buckets(&mut self) -> &[(f64, f64)] {
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        &self.buckets
    }

    /// `histogram_quantile`: linear interpolation inside the bucket holding the rank;
    /// the `+Inf` bucket answers the last finite bound.
    fn quantile(&mut self, q: f64) -> f64 {
        let b = self.sorted_buckets();
        let Some(&(_, total)) = b.last() else {
            return 0.0;
        };
        if total <= 0.0 {
            return 0.0;
        }
        let rank = q * total;
        let mut lower_le = 0.0;
        let mut lower_count = 0.0;
        for (i, &(le, cum)) in b.iter().enumerate() {
            if cum >= rank {
                if le == f64::INFINITY {
                    return last_finite(b);
                }
                if i == 0 && le <= 0.0 {
                    return le;
                }
                let width = cum - lower_count;
                if width <= 0.0 {
                    return le;
                }
                return lower_le + (le - lower_le) * (rank - lower_count) / width;
            }
            lower_le = le;
            lower_count = cum;
        }
        last_finite(b)
    }

    /// Upper bound of the highest bucket that grew.
    fn max(&mut self) -> f64 {
        let b = self.sorted_buckets();
        let mut below = 0.0;
        let mut highest = None;
        for &(le, cum) in b {
            if cum > below {
                highest = Some(le);
            }
            below = below.max(cum);
        }
        match highest {
            Some(le) if le == f64::INFINITY => last_finite(b),
            Some(le) => le,
            None => 0.0,
        }
    }
}

fn last_finite(b: &[(f64, f64)]) -> f64 {
    b.iter()
        .rev()
        .map(|x| x.0)
        .find(|le| le.is_finite())
        .unwrap_or(0.0)
}
