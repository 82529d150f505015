//! Page-level rules of strict mode: metadata, family grouping, histogram and summary
//! structure, counter values, OpenMetrics `# EOF`.
//!
//! The lexer judges one line; these rules judge a line against what came before. They
//! follow the Prometheus exposition-format document (0.0.4: one group per metric, HELP
//! and TYPE at most once and before samples, `le="+Inf"` bucket equal to `_count`,
//! buckets and quantiles in increasing order) and the OpenMetrics 1.0 specification as
//! pinned down by its own parser test suite (type suffixes, no interleaving, timestamp
//! order, exemplar placement, `_sum`/`_count` pairing, negative buckets).
//!
//! State grows with the number of families and label sets on the page: bounded by the
//! input size.

use std::borrow::Cow;
use std::collections::HashSet;

use super::lexer::{is_metric_name, Comment, LineSample};
use super::number::parse_f64;

type Rule = Result<(), Cow<'static, str>>;

fn fail(msg: impl Into<Cow<'static, str>>) -> Rule {
    Err(msg.into())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    Unknown,
}

impl Kind {
    fn parse(s: &str, om: bool) -> Option<Kind> {
        Some(match s {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "summary" => Kind::Summary,
            "untyped" if !om => Kind::Unknown,
            "unknown" if om => Kind::Unknown,
            "gaugehistogram" if om => Kind::GaugeHistogram,
            "info" if om => Kind::Info,
            "stateset" if om => Kind::StateSet,
            _ => return None,
        })
    }

    /// Sample-name suffixes a family of this kind owns.
    fn suffixes(self, om: bool) -> &'static [&'static str] {
        match (self, om) {
            (Kind::Counter, true) => &["_total", "_created"],
            (Kind::Histogram, true) => &["_bucket", "_count", "_sum", "_created"],
            (Kind::Histogram, false) => &["_bucket", "_count", "_sum"],
            (Kind::GaugeHistogram, _) => &["_bucket", "_gcount", "_gsum"],
            (Kind::Summary, true) => &["", "_count", "_sum", "_created"],
            (Kind::Summary, false) => &["", "_count", "_sum"],
            (Kind::Info, _) => &["_info"],
            _ => &[""],
        }
    }
}

/// The structure of the metric (one label set) being read, checked when it ends.
#[derive(Debug, Default)]
struct Point {
    key: String,
    /// Some(None): samples without timestamps so far.
    ts: Option<Option<f64>>,
    last_le: Option<f64>,
    last_bucket: Option<f64>,
    inf_bucket: Option<f64>,
    any_bucket: bool,
    negative_bucket: bool,
    count: Option<f64>,
    sum: Option<f64>,
    last_quantile: Option<f64>,
}

#[derive(Debug)]
struct Family<'a> {
    name: Cow<'a, str>,
    kind: Kind,
    typed: bool,
    help: bool,
    unit: bool,
    samples: bool,
    point: Option<Point>,
    finished_points: HashSet<String>,
}

impl<'a> Family<'a> {
    fn new(name: Cow<'a, str>) -> Self {
        Family {
            name,
            kind: Kind::Unknown,
            typed: false,
            help: false,
            unit: false,
            samples: false,
            point: None,
            finished_points: HashSet::new(),
        }
    }

    /// The suffix by which `sample` belongs to this family, if it does.
    fn suffix_of(&self, sample: &str, om: bool) -> Option<&'static str> {
        let rest = sample.strip_prefix(&*self.name)?;
        self.kind.suffixes(om).iter().copied().find(|s| *s == rest)
    }

    fn owned_names(&self, om: bool) -> Vec<String> {
        self.kind
            .suffixes(om)
            .iter()
            .map(|s| format!("{}{}", self.name, s))
            .collect()
    }
}

pub(crate) struct Rules<'a> {
    om: bool,
    family: Option<Family<'a>>,
    family_names: HashSet<Cow<'a, str>>,
    /// Sample names owned by families already seen.
    claimed: HashSet<String>,
    /// Prometheus: names that already had HELP / TYPE.
    helped: HashSet<Cow<'a, str>>,
    typed: HashSet<Cow<'a, str>>,
    eof: bool,
}

impl<'a> Rules<'a> {
    pub(crate) fn new(om: bool) -> Self {
        Rules {
            om,
            family: None,
            family_names: HashSet::new(),
            claimed: HashSet::new(),
            helped: HashSet::new(),
            typed: HashSet::new(),
            eof: false,
        }
    }

    pub(crate) fn seen_eof(&self) -> bool {
        self.eof
    }

    pub(crate) fn comment(&mut self, c: Comment<'a>) -> Rule {
        match c {
            Comment::Other => Ok(()),
            Comment::Eof => {
                self.end_family()?;
                self.eof = true;
                Ok(())
            }
            Comment::Help { name, text } => {
                if !self.om && !self.helped.insert(name.clone()) {
                    return fail(format!("second HELP line for metric name {name:?}"));
                }
                let f = self.metadata_family(name, "HELP")?;
                if f.help {
                    return fail(format!("duplicate HELP line for {:?}", f.name));
                }
                // An empty OpenMetrics HELP counts as none, but is still a HELP line.
                f.help = true;
                let _ = text;
                Ok(())
            }
            Comment::Type { name, kind } => {
                if !self.om && !self.typed.insert(name.clone()) {
                    return fail(format!("second TYPE line for metric name {name:?}"));
                }
                let om = self.om;
                let Some(k) = Kind::parse(kind, om) else {
                    return fail(format!("unknown metric type {kind:?}"));
                };
                let f = self.metadata_family(name, "TYPE")?;
                if f.typed {
                    return fail(format!("duplicate TYPE line for {:?}", f.name));
                }
                f.typed = true;
                f.kind = k;
                if f.unit && matches!(k, Kind::Info | Kind::StateSet) {
                    return fail("UNIT is not allowed for info and stateset metrics");
                }
                let owned = f.owned_names(om);
                self.check_unclaimed(&owned)
            }
            Comment::Unit { name, unit } => {
                let f = self.metadata_family(name, "UNIT")?;
                if f.unit {
                    return fail(format!("duplicate UNIT line for {:?}", f.name));
                }
                f.unit = true;
                if !unit.is_empty() {
                    if !f
                        .name
                        .strip_suffix(unit)
                        .is_some_and(|rest| rest.ends_with('_'))
                    {
                        return fail(format!(
                            "metric name {:?} does not end with _{unit}",
                            f.name
                        ));
                    }
                    if matches!(f.kind, Kind::Info | Kind::StateSet) {
                        return fail("UNIT is not allowed for info and stateset metrics");
                    }
                }
                Ok(())
            }
        }
    }

    fn check_unclaimed(&self, names: &[String]) -> Rule {
        for n in names {
            if self.claimed.contains(n) {
                return fail(format!(
                    "metric name {n:?} clashes with an earlier metric family"
                ));
            }
        }
        Ok(())
    }

    /// The family a metadata line for `name` belongs to: the current one, or a new one.
    fn metadata_family(
        &mut self,
        name: Cow<'a, str>,
        what: &str,
    ) -> Result<&mut Family<'a>, Cow<'static, str>> {
        let same = self.family.as_ref().is_some_and(|f| f.name == name);
        if same {
            let samples = self.family.as_ref().is_some_and(|f| f.samples);
            if samples {
                return Err(format!("{what} line for {name:?} after its samples").into());
            }
        } else {
            self.end_family()?;
            if self.family_names.contains(&name) {
                return Err(format!(
                    "metric family {name:?} appears twice (families must not be interleaved)"
                )
                .into());
            }
            if self.om {
                self.check_unclaimed(&[name.to_string()])?;
            }
            self.family_names.insert(name.clone());
            self.family = Some(Family::new(name));
        }
        match self.family.as_mut() {
            Some(f) => Ok(f),
            None => Err("internal: no family".into()),
        }
    }

    /// Finish the current family: its last metric, then claim its names.
    fn end_family(&mut self) -> Rule {
        let om = self.om;
        if let Some(mut f) = self.family.take() {
            if let Some(p) = f.point.take() {
                end_point(&f, p, om)?;
            }
            if !f.typed || f.kind == Kind::Unknown {
                self.claimed.insert(f.name.to_string());
            }
            for n in f.owned_names(om) {
                self.claimed.insert(n);
            }
        }
        Ok(())
    }

    pub(crate) fn sample(&mut self, line: &LineSample<'a>) -> Rule {
        if self.eof {
            return fail("sample after # EOF");
        }
        let s = &line.sample;
        if self.om && !is_metric_name(&s.name) {
            return fail(format!("invalid metric name {:?}", s.name));
        }
        let om = self.om;
        let suffix = match self.family.as_ref().and_then(|f| f.suffix_of(&s.name, om)) {
            Some(sfx) => sfx,
            None => {
                // A sample outside the current family starts an untyped one.
                self.end_family()?;
                let name = s.name.clone();
                if self.claimed.contains(&*name) || self.family_names.contains(&name) {
                    return fail(format!(
                        "samples of {name:?} are not grouped together (metric families must not be interleaved)"
                    ));
                }
                self.family_names.insert(name.clone());
                self.family = Some(Family::new(name));
                ""
            }
        };
        let Some(f) = self.family.as_mut() else {
            return fail("internal: no family");
        };
        f.samples = true;
        let kind = f.kind;
        let v = s.value;

        // Values that must be counts.
        let counter_like = match kind {
            Kind::Counter => suffix == "_total" || (!om && suffix.is_empty()),
            Kind::Histogram => matches!(suffix, "_bucket" | "_count") || (om && suffix == "_sum"),
            Kind::GaugeHistogram => matches!(suffix, "_bucket" | "_gcount"),
            Kind::Summary => matches!(suffix, "_count") || (om && suffix == "_sum"),
            _ => false,
        };
        if counter_like && (v < 0.0 || (om && v.is_nan())) {
            return fail(format!(
                "{} must not be negative{}",
                s.name,
                if om { " or NaN" } else { "" }
            ));
        }
        if kind == Kind::GaugeHistogram && suffix == "_gsum" && v.is_nan() {
            return fail(format!("{} must not be NaN", s.name));
        }
        if kind == Kind::Info && v != 1.0 {
            return fail("info metric values must be 1");
        }
        if kind == Kind::StateSet {
            if v != 0.0 && v != 1.0 {
                return fail("stateset values must be 0 or 1");
            }
            if s.labels.get(&f.name).is_none() {
                return fail(format!("stateset sample needs a label named {:?}", f.name));
            }
        }
        if line.exemplar {
            let ok = match kind {
                Kind::Counter => suffix == "_total",
                Kind::Histogram | Kind::GaugeHistogram => suffix == "_bucket",
                _ => false,
            };
            if !ok {
                return fail(
                    "exemplars are only allowed on counter _total and histogram _bucket samples",
                );
            }
        }

        // Which metric (label set, without le / quantile) this sample belongs to.
        let mut pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = s
            .labels
            .iter()
            .filter(|(n, _)| n != "le" && n != "quantile")
            .collect();
        pairs.sort();
        let mut key = String::new();
        for (n, v) in &pairs {
            key.push_str(n);
            key.push('\u{0}');
            key.push_str(v);
            key.push('\u{0}');
        }
        let new_point = f.point.as_ref().is_none_or(|p| p.key != key);
        if new_point {
            if let Some(p) = f.point.take() {
                let done_key = p.key.clone();
                end_point(f, p, om)?;
                f.finished_points.insert(done_key);
            }
            if f.finished_points.contains(&key) {
                return fail(format!(
                    "samples of {} with the same labels are not grouped together",
                    f.name
                ));
            }
            f.point = Some(Point {
                key,
                ..Point::default()
            });
        }
        let Some(p) = f.point.as_mut() else {
            return fail("internal: no point");
        };

        // Timestamps: all or none within a metric, and never going back (OpenMetrics).
        match (p.ts, line.ts_raw) {
            (None, t) => p.ts = Some(t),
            (Some(None), None) => {}
            (Some(Some(_)), None) | (Some(None), Some(_)) if om => {
                return fail("some samples of a metric have timestamps and some do not");
            }
            (Some(Some(prev)), Some(t)) if om && t < prev => {
                return fail("timestamps of a metric must not go backwards");
            }
            (Some(Some(prev)), Some(t)) => {
                if t > prev {
                    // A new point in time: bucket order starts over.
                    p.last_le = None;
                    p.last_bucket = None;
                    p.last_quantile = None;
                }
                p.ts = Some(Some(t));
            }
            _ => {}
        }

        match (kind, suffix) {
            (Kind::Histogram | Kind::GaugeHistogram, "_bucket") => {
                let Some(le_text) = s.labels.get("le") else {
                    return fail(format!("{} needs an \"le\" label", s.name));
                };
                let Some(le) = parse_f64(&le_text).filter(|x| !x.is_nan()) else {
                    return fail(format!("invalid le value {le_text:?}"));
                };
                if p.last_le.is_some_and(|prev| le <= prev) {
                    return fail(format!(
                        "buckets of {} are not in increasing order of le",
                        f.name
                    ));
                }
                if p.last_bucket.is_some_and(|prev| v < prev) {
                    return fail(format!("bucket counts of {} decrease", f.name));
                }
                p.last_le = Some(le);
                p.last_bucket = Some(v);
                p.any_bucket = true;
                if le < 0.0 {
                    p.negative_bucket = true;
                }
                let is_inf = if om {
                    le_text == "+Inf"
                } else {
                    le == f64::INFINITY
                };
                if is_inf {
                    p.inf_bucket = Some(v);
                }
            }
            (Kind::Histogram, "_count")
            | (Kind::GaugeHistogram, "_gcount")
            | (Kind::Summary, "_count") => {
                p.count = Some(v);
            }
            (Kind::Histogram, "_sum")
            | (Kind::GaugeHistogram, "_gsum")
            | (Kind::Summary, "_sum") => {
                p.sum = Some(v);
            }
            (Kind::Summary, "") => {
                let Some(q_text) = s.labels.get("quantile") else {
                    return fail(format!("{} needs a \"quantile\" label", s.name));
                };
                let Some(q) = parse_f64(&q_text).filter(|q| !q.is_nan()) else {
                    return fail(format!("invalid quantile {q_text:?}"));
                };
                if om && !(0.0..=1.0).contains(&q) {
                    return fail(format!("quantile {q_text:?} is not between 0 and 1"));
                }
                if om && v < 0.0 {
                    return fail("summary quantile values must not be negative");
                }
                if p.last_quantile.is_some_and(|prev| q <= prev) {
                    return fail(format!(
                        "quantiles of {} are not in increasing order",
                        f.name
                    ));
                }
                p.last_quantile = Some(q);
            }
            _ => {}
        }
        Ok(())
    }

    /// End of input.
    pub(crate) fn finish(&mut self) -> Rule {
        self.end_family()?;
        if self.om && !self.eof {
            return fail("missing # EOF at the end");
        }
        Ok(())
    }
}

/// The checks that need a whole metric (label set) of a histogram family.
fn end_point(f: &Family<'_>, p: Point, om: bool) -> Rule {
    match f.kind {
        Kind::Histogram | Kind::GaugeHistogram => {
            let gauge = f.kind == Kind::GaugeHistogram;
            let (count, sum) = if gauge {
                ("_gcount", "_gsum")
            } else {
                ("_count", "_sum")
            };
            let Some(inf) = p.inf_bucket else {
                if p.any_bucket || om {
                    return fail(format!("histogram {} has no le=\"+Inf\" bucket", f.name));
                }
                return Ok(());
            };
            if let Some(c) = p.count {
                if c != inf {
                    return fail(format!(
                        "{}{count} ({c}) differs from its +Inf bucket ({inf})",
                        f.name
                    ));
                }
            }
            if om {
                if p.count.is_some() != p.sum.is_some() {
                    return fail(format!(
                        "{}: {sum} and {count} must both be present or both absent",
                        f.name
                    ));
                }
                if let Some(s) = p.sum {
                    if !gauge && p.negative_bucket {
                        return fail(format!(
                            "histogram {} has negative buckets and a {sum}",
                            f.name
                        ));
                    }
                    if s < 0.0 && !p.negative_bucket {
                        return fail(format!(
                            "{}{sum} is negative without negative buckets",
                            f.name
                        ));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
