//! Writing metric families byte-for-byte as Python's `prometheus_client` does (text
//! format 0.0.4), or as OpenMetrics 1.0 text.
//!
//! The intermediate [`Family`] is what `metrics.rs` builds from engine state; this module
//! only knows the two wire formats (both as prometheus_client writes them). Details copied from prometheus_client 0.x:
//! labels sorted by name, counters named `<name>_total`, `_created` samples moved into a
//! separate `<name>_created` gauge family after their family, histogram children written
//! as buckets, `_count`, `_sum`, floats by `floatToGoString` (Python `repr`, with the old
//! `e+0N` exponent for numbers of 7+ integer digits, e.g. `1.372014592e+010`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

/// A label set in declaration order.
pub type Labels = Vec<(&'static str, String)>;

/// One child of a family (one label set).
#[derive(Clone, Debug)]
pub enum Child {
    /// Counter or gauge value.
    Value {
        labels: Labels,
        value: f64,
        created: Option<f64>,
    },
    /// Histogram: upper bounds (without +Inf), cumulative counts per bound plus +Inf.
    Histogram {
        labels: Labels,
        bounds: std::sync::Arc<[f64]>,
        cumulative: Vec<f64>,
        count: f64,
        sum: f64,
        created: Option<f64>,
    },
    /// Summary without quantiles (what prometheus-fastapi-instrumentator exports).
    Summary {
        labels: Labels,
        count: f64,
        sum: f64,
        created: Option<f64>,
    },
}

/// A metric family: name (counters without `_total`), help, type, children in the
/// order they were created. Names and helps are mostly literals: borrowed, not copied
/// on every page.
#[derive(Clone, Debug)]
pub struct Family {
    pub name: Cow<'static, str>,
    pub help: Cow<'static, str>,
    pub kind: Kind,
    pub children: Vec<Child>,
}

impl Family {
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        help: impl Into<Cow<'static, str>>,
        kind: Kind,
    ) -> Self {
        Family {
            name: name.into(),
            help: help.into(),
            kind,
            children: Vec::new(),
        }
    }
}

/// Python `repr(float)`.
pub fn python_repr(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Shortest round-trip digits and decimal exponent, as Rust's `{:e}` gives them.
    let sci = format!("{:e}", d.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if d < 0.0 { "-" } else { "" };
    let decpt = exp + 1; // value = 0.DIGITS * 10^decpt
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(1);
        let m = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    if decpt <= 0 {
        format!("{sign}0.{}{}", "0".repeat((-decpt) as usize), digits)
    } else if decpt < n {
        let (a, b) = digits.split_at(decpt as usize);
        format!("{sign}{a}.{b}")
    } else {
        format!("{sign}{}{}.0", digits, "0".repeat((decpt - n) as usize))
    }
}

/// prometheus_client's `floatToGoString` (0.x, as on the vLLM 0.10 fixture page).
pub fn go_float(d: f64) -> String {
    if d == f64::INFINITY {
        return "+Inf".into();
    }
    if d == f64::NEG_INFINITY {
        return "-Inf".into();
    }
    if d.is_nan() {
        return "NaN".into();
    }
    let s = python_repr(d);
    if let Some(dot) = s.find('.') {
        if d > 0.0 && dot > 6 {
            let mantissa = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
            let mantissa = mantissa.trim_end_matches(['0', '.']);
            return format!("{mantissa}e+0{}", dot - 1);
        }
    }
    s
}

pub(crate) fn escape_label(v: &str, out: &mut String) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'\n' | b'"')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

fn escape_help(h: &str) -> std::borrow::Cow<'_, str> {
    if h.bytes().any(|b| matches!(b, b'\\' | b'\n')) {
        h.replace('\\', "\\\\").replace('\n', "\\n").into()
    } else {
        h.into()
    }
}

/// Buffers one render reuses for every line: a page writes thousands of lines and
/// would otherwise allocate several strings for each.
#[derive(Default)]
struct Scratch {
    /// The label set of the current child, `{...}`.
    labels: String,
    /// The family's `_created` lines (text format: written after the family).
    created: String,
    /// A histogram child's labels before and after `le`.
    before: String,
    after: String,
}

/// Label sets longer than this are sorted in a vector (none of the pages has one).
const LABELS_ON_STACK: usize = 32;

/// `f` of the labels sorted by name (stable: as `sort_by`), without allocating for the
/// label sets pages have.
fn with_sorted<R>(labels: &[(&str, String)], f: impl FnOnce(&[(&str, &str)]) -> R) -> R {
    let n = labels.len();
    if n > LABELS_ON_STACK {
        let mut all: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        return f(&all);
    }
    let mut buf = [("", ""); LABELS_ON_STACK];
    for (slot, (k, v)) in buf.iter_mut().zip(labels) {
        *slot = (k, v.as_str());
    }
    let all = buf.get_mut(..n).unwrap_or_default();
    // Insertion sort: stable, and the sets are short.
    for i in 1..all.len() {
        let mut j = i;
        while j > 0 && all[j - 1].0 > all[j].0 {
            all.swap(j - 1, j);
            j -= 1;
        }
    }
    f(all)
}

/// `{a="1",b="2"}` sorted by name (prometheus_client sorts in both formats) into `buf`
/// (cleared first); empty without labels.
fn label_str_into(buf: &mut String, labels: &[(&str, String)]) {
    buf.clear();
    if labels.is_empty() {
        return;
    }
    with_sorted(labels, |sorted| {
        buf.push('{');
        for (i, (k, v)) in sorted.iter().enumerate() {
            if i > 0 {
                buf.push(',');
            }
            buf.push_str(k);
            buf.push_str("=\"");
            escape_label(v, buf);
            buf.push('"');
        }
        buf.push('}');
    });
}

fn line(out: &mut String, name: &str, suffix: &str, labels: &str, value: f64) {
    out.push_str(name);
    out.push_str(suffix);
    out.push_str(labels);
    out.push(' ');
    push_go_float(out, value);
    out.push('\n');
}

/// [`go_float`] appended to `out`. Pages are mostly small counts and bucket bounds:
/// whole numbers below 1e6 are an integer and `.0`;
/// for `1e-4 <= |d| < 1e6` (and zero) Python's `repr` is Rust's shortest round-trip
/// `Display` plus `.0` for whole numbers, and `floatToGoString` leaves it alone, so
/// those are written without an intermediate string.
pub fn push_go_float(out: &mut String, d: f64) {
    let a = d.abs();
    // `as` saturates and maps NaN to 0, which then compares unequal to `d`.
    let whole = a < 1e6 && (d as i64) as f64 == d;
    if whole && !(d == 0.0 && d.is_sign_negative()) {
        // Whole numbers (counts, most of a page): integer digits, no float formatting.
        push_whole(out, d as i64);
    } else if d == 0.0 || (1e-4..1e6).contains(&a) {
        let start = out.len();
        let _ = write!(out, "{d}");
        if !out.as_bytes()[start..].contains(&b'.') {
            out.push_str(".0");
        }
    } else {
        // Mostly `_created` stamps and process readings: the same few values on every
        // page, remembered per thread (bounded).
        SLOW_FLOATS.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(text) = m.get(&d.to_bits()) {
                out.push_str(text);
                return;
            }
            let text = go_float(d);
            out.push_str(&text);
            if m.len() >= SLOW_FLOATS_KEPT {
                m.clear();
            }
            m.insert(d.to_bits(), text.into());
        });
    }
}

/// `v` as decimal digits and `.0` (what `{v}.0` writes), without the formatting
/// machinery: most numbers of a page go through here.
fn push_whole(out: &mut String, v: i64) {
    out.push_str(itoa::Buffer::new().format(v));
    out.push_str(".0");
}

/// Most slow-path floats a thread remembers.
const SLOW_FLOATS_KEPT: usize = 1 << 16;

thread_local! {
    static SLOW_FLOATS: RefCell<HashMap<u64, Box<str>>> = RefCell::new(HashMap::new());
}

/// Prometheus text format 0.0.4 as prometheus_client's `generate_latest` writes it.
pub fn render_text(families: &[Family], out: &mut String) {
    with_scratch(|sc| {
        for f in families {
            text_family(f, out, sc);
        }
    });
}

thread_local! {
    /// The line buffers of the renders on this thread (kept, so that they keep their
    /// capacity from page to page).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `f` with this thread's line buffers (fresh ones if they are in use already).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut sc) => f(&mut sc),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// One family in the text format: header, children, then its `_created` family.
fn text_family(f: &Family, out: &mut String, sc: &mut Scratch) {
    let help = text_header(f, out);
    sc.created.clear();
    for c in &f.children {
        let created = child_samples(f, c, out, sc);
        if let Some(t) = created {
            line(&mut sc.created, &f.name, "_created", &sc.labels, t);
        }
    }
    if !sc.created.is_empty() {
        header_lines(out, &f.name, "_created", &help, "gauge");
        out.push_str(&sc.created);
    }
}

/// A family's `# HELP` and `# TYPE` lines in the text format; answers its escaped help.
fn text_header<'f>(f: &'f Family, out: &mut String) -> std::borrow::Cow<'f, str> {
    let (suffix, ty) = match f.kind {
        Kind::Counter => ("_total", "counter"),
        Kind::Gauge => ("", "gauge"),
        Kind::Histogram => ("", "histogram"),
        Kind::Summary => ("", "summary"),
    };
    let help = escape_help(&f.help);
    header_lines(out, &f.name, suffix, &help, ty);
    help
}

/// `# HELP <name><suffix> <help>` and `# TYPE <name><suffix> <ty>`.
fn header_lines(out: &mut String, name: &str, suffix: &str, help: &str, ty: &str) {
    for (what, text) in [("# HELP ", help), ("# TYPE ", ty)] {
        out.push_str(what);
        out.push_str(name);
        out.push_str(suffix);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
}

/// The text format as prometheus_client writes a `MultiProcessCollector`'s merge: the
/// same headers, no `_created` samples, and each histogram series as `_sum`, its
/// buckets, then `_count` (the order the merge builds its samples in).
pub fn render_text_without_created(families: &[&Family], out: &mut String) {
    with_scratch(|sc| {
        for f in families {
            text_header(f, out);
            for c in &f.children {
                merged_child(f, c, out, sc);
            }
        }
    });
}

fn merged_child(f: &Family, c: &Child, out: &mut String, sc: &mut Scratch) {
    match c {
        Child::Histogram {
            labels,
            bounds,
            cumulative,
            count,
            sum,
            ..
        } => {
            label_str_into(&mut sc.labels, labels);
            line(out, &f.name, "_sum", &sc.labels, *sum);
            histogram_lines_in(out, sc, &f.name, labels, bounds, cumulative);
            label_str_into(&mut sc.labels, labels);
            line(out, &f.name, "_count", &sc.labels, *count);
        }
        _ => {
            child_samples(f, c, out, sc);
        }
    }
}

/// A child's own samples (the same in both formats); leaves its label set in
/// `sc.labels` and answers its `_created` stamp.
fn child_samples(f: &Family, c: &Child, out: &mut String, sc: &mut Scratch) -> Option<f64> {
    match c {
        Child::Value {
            labels,
            value,
            created,
        } => {
            label_str_into(&mut sc.labels, labels);
            let suffix = if f.kind == Kind::Counter {
                "_total"
            } else {
                ""
            };
            line(out, &f.name, suffix, &sc.labels, *value);
            *created
        }
        Child::Histogram {
            labels,
            bounds,
            cumulative,
            count,
            sum,
            created,
        } => {
            histogram_lines_in(out, sc, &f.name, labels, bounds, cumulative);
            label_str_into(&mut sc.labels, labels);
            line(out, &f.name, "_count", &sc.labels, *count);
            line(out, &f.name, "_sum", &sc.labels, *sum);
            *created
        }
        Child::Summary {
            labels,
            count,
            sum,
            created,
        } => {
            label_str_into(&mut sc.labels, labels);
            line(out, &f.name, "_count", &sc.labels, *count);
            line(out, &f.name, "_sum", &sc.labels, *sum);
            *created
        }
    }
}

/// OpenMetrics 1.0 text as prometheus_client's `openmetrics.exposition.generate_latest`
/// writes it (names left as they are, as before its 0.22 name escaping and as with
/// `escaping="allow-utf-8"` since): `# HELP`/`# TYPE` with the bare family name, labels
/// sorted, every value by `floatToGoString` (counts too: `1.0`), and each child's
/// `_created` right after that child's own samples, then `# EOF`.
pub fn render_openmetrics(families: &[Family], out: &mut String) {
    with_scratch(|sc| openmetrics_families(families, out, sc));
    out.push_str("# EOF\n");
}

fn openmetrics_families(families: &[Family], out: &mut String, sc: &mut Scratch) {
    for f in families {
        let ty = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        };
        let help = escape_help(&f.help).replace('"', "\\\"");
        let _ = writeln!(out, "# HELP {} {help}", f.name);
        let _ = writeln!(out, "# TYPE {} {ty}", f.name);
        for c in &f.children {
            if let Some(t) = child_samples(f, c, out, sc) {
                line(out, &f.name, "_created", &sc.labels, t);
            }
        }
    }
}

/// The `_bucket` lines of one histogram child, `le` sorted among the labels (the
/// other labels are sorted and joined once, `le` written between them).
#[cfg(test)]
fn histogram_lines(
    out: &mut String,
    name: &str,
    labels: &Labels,
    bounds: &[f64],
    cumulative: &[f64],
) {
    histogram_lines_in(
        out,
        &mut Scratch::default(),
        name,
        labels,
        bounds,
        cumulative,
    );
}

/// [`histogram_lines`] with the render's buffers.
fn histogram_lines_in(
    out: &mut String,
    sc: &mut Scratch,
    name: &str,
    labels: &Labels,
    bounds: &[f64],
    cumulative: &[f64],
) {
    // `before` is `<name>_bucket{` and `a="1",` per label sorting before `le`, then
    // `le="`; `after` is `"`, `,z="2"` per label after `le`, then `} `: each bucket line
    // is `before`, its bound, `after` and its count.
    let (before, after) = (&mut sc.before, &mut sc.after);
    before.clear();
    after.clear();
    before.push_str(name);
    before.push_str("_bucket{");
    after.push('"');
    with_sorted(labels, |sorted| {
        for (k, v) in sorted {
            let after_le = *k > "le";
            let side = if after_le { &mut *after } else { &mut *before };
            if after_le {
                side.push(',');
            }
            side.push_str(k);
            side.push_str("=\"");
            escape_label(v, side);
            side.push('"');
            if !after_le {
                side.push(',');
            }
        }
    });
    before.push_str("le=\"");
    after.push_str("} ");
    with_les(bounds, |les| {
        for (i, v) in cumulative.iter().enumerate() {
            out.push_str(before);
            out.push_str(les.get(i).map_or("+Inf", String::as_str));
            out.push_str(after);
            push_go_float(out, *v);
            out.push('\n');
        }
    });
}

/// Bucket bounds and their `le` texts.
type LeMemo = Vec<(Box<[f64]>, Rc<[String]>)>;

thread_local! {
    /// The `le` texts of the bucket lists written on this thread. There are a handful
    /// (one per histogram kind and release) and every page repeats them.
    static LES: RefCell<LeMemo> = const { RefCell::new(Vec::new()) };
}

/// Most lists a thread remembers (more are formatted, and the memory starts over).
const LES_KEPT: usize = 64;

/// `f` of the `le` texts of `bounds` (without `+Inf`), formatted once per thread.
fn with_les<R>(bounds: &[f64], f: impl FnOnce(&[String]) -> R) -> R {
    let known = LES.with(|c| {
        c.borrow()
            .iter()
            .find(|(b, _)| **b == *bounds)
            .map(|(_, les)| les.clone())
    });
    let les = known.unwrap_or_else(|| {
        let les: Rc<[String]> = bounds.iter().map(|b| go_float(*b)).collect();
        LES.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= LES_KEPT {
                c.clear();
            }
            c.push((bounds.into(), les.clone()));
        });
        les
    });
    f(&les)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_repr_matches() {
        for (v, s) in [
            (4.0, "4.0"),
            (0.000123, "0.000123"),
            (1.23e-5, "1.23e-05"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e300, "1.5e+300"),
            (-2.5, "-2.5"),
            (14.040000000000001, "14.040000000000001"),
            (0.0011764705882353343, "0.0011764705882353343"),
            (1771042457.421372, "1771042457.421372"),
        ] {
            assert_eq!(python_repr(v), s, "{v}");
        }
    }

    #[test]
    fn go_float_matches_fixture() {
        assert_eq!(go_float(13720145920.0), "1.372014592e+010");
        assert_eq!(go_float(1109622784.0), "1.109622784e+09");
        assert_eq!(go_float(1771042382.34), "1.77104238234e+09");
        assert_eq!(go_float(1771042457.4207425), "1.7710424574207425e+09");
        assert_eq!(go_float(1000000.0), "1e+06");
        assert_eq!(go_float(65535.0), "65535.0");
        assert_eq!(go_float(f64::INFINITY), "+Inf");
        assert_eq!(go_float(f64::NAN), "NaN");
        assert_eq!(go_float(-1e7), "-10000000.0");
    }

    #[test]
    fn the_fast_float_path_writes_what_go_float_writes() {
        let mut values = vec![
            0.0,
            -0.0,
            1e-4,
            9.99e-5,
            999_999.0,
            1e6,
            0.001,
            2560.0,
            -3.5,
            1.0 / 3.0,
        ];
        let mut x: f64 = 1.234_567e-6;
        while x < 1e9 {
            values.extend([x, -x, x.round(), (x * 7.0).floor() + 0.5]);
            x *= 1.37;
        }
        for v in values {
            // Twice: the second one of a slow-path value comes from the memo.
            let mut out = String::from("x");
            push_go_float(&mut out, v);
            push_go_float(&mut out, v);
            assert_eq!(out, format!("x{0}{0}", go_float(v)), "{v}");
        }
    }

    #[test]
    fn bucket_labels_sort_le_among_the_others() {
        let labels: Labels = vec![("model_name", "m".into()), ("engine", "0".into())];
        let mut out = String::new();
        histogram_lines(&mut out, "h", &labels, &[0.5], &[1.0, 2.0]);
        assert_eq!(
            out,
            "h_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 1.0\nh_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 2.0\n"
        );
        let mut out = String::new();
        histogram_lines(&mut out, "h", &vec![], &[], &[3.0]);
        assert_eq!(out, "h_bucket{le=\"+Inf\"} 3.0\n");
    }
}
