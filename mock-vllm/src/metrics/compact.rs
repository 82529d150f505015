//! The compact page written straight from a [`Snapshot`], without the intermediate
//! [`crate::exposition::Family`] values: the same bytes as the generic path
//! (`vllm_v1::compact_families` then `render_text`), tested against it on random
//! snapshots.
//!
//! Everything on the page but the numbers is a function of the model name, the
//! engines' indices and the two histograms' bounds: written once into a [`Template`]
//! (kept per thread, shared by every core of the same model) as the text between two
//! numbers. A page is then the template's pieces with the numbers of this instant
//! between them, each number written by [`push_go_float`] as the generic path writes
//! it. A simulator renders this page at every scrape of thousands of instances; the
//! generic path built about twenty label strings and vectors per page and wrote every
//! label set again.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::{EngineView, Snapshot};
use crate::config::Dialect;
use crate::exposition::{escape_label, go_float, push_go_float};

const WAITING: &str = "vllm:num_requests_waiting";
const WAITING_HELP: &str = "Number of requests waiting to be processed.";
const KV: &str = "vllm:kv_cache_usage_perc";
const KV_HELP: &str = "KV-cache usage. 1 means 100 percent usage.";
const TTFT: &str = "vllm:time_to_first_token_seconds";
const TTFT_HELP: &str = "Histogram of time to first token in seconds.";
const ITL: &str = "vllm:inter_token_latency_seconds";
const ITL_HELP: &str = "Histogram of inter-token latency in seconds.";

/// Whether [`page_into`] writes the page of `s` (the compact dialect without the
/// process or HTTP families, which it never has when a core renders it).
pub(super) fn applies(s: &Snapshot) -> bool {
    s.dialect == Dialect::Compact && s.runtime.is_none() && s.http.is_none()
}

/// The compact page of `s` into `out` (cleared by the caller), for snapshots [`applies`]
/// accepts. Answers `false`, writing nothing, for a snapshot whose engines do not share
/// one pair of histogram bounds (no core makes one): the generic path writes those.
pub(super) fn page_into(s: &Snapshot, out: &mut String) -> bool {
    with_template(s, |t| t.write(s, out)).is_some()
}

/// The compact page of `s` in `memo` (which holds the last one this core wrote): kept
/// as it is when this page's numbers are its numbers (the same template and the same
/// numbers, bit for bit, are the same page: a page is the template with its numbers
/// between the pieces, nothing else), else written there. `false` as [`page_into`].
pub(super) fn page_into_memo(s: &Snapshot, memo: &mut PageMemo) -> bool {
    with_template(s, |t| t.write_memo(s, memo)).is_some()
}

/// The last compact page a core wrote, with what it was written from.
#[derive(Debug, Default)]
pub struct PageMemo {
    /// [`Template::id`] of its template (0: none yet).
    template: u64,
    /// Its numbers, as bits (NaN and -0.0 compared exactly).
    values: Vec<u64>,
    page: String,
}

impl PageMemo {
    /// The page kept.
    pub fn page(&self) -> &str {
        &self.page
    }
}

/// Template ids, unique in the process (a memo never mistakes a new template for an
/// old one freed at the same address).
static NEXT_TEMPLATE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The text of a page between its numbers, for one model, engine list and pair of
/// histogram bounds.
struct Template {
    /// Unique in the process, never 0.
    id: u64,
    model: String,
    engines: Vec<usize>,
    ttft_bounds: Arc<[f64]>,
    itl_bounds: Arc<[f64]>,
    /// The pieces, one after the other, each but the first preceded by `.0` (the end of
    /// a whole number, written with the piece after it).
    text: String,
    /// `text[ends[k-1] + 2..ends[k]]` is what precedes number `k` (`text[ends[k-1]..]`
    /// with that `.0`); the last piece follows the last number.
    ends: Vec<u32>,
}

/// Templates kept per thread (a simulator's cores mostly share one).
const TEMPLATES_KEPT: usize = 16;

thread_local! {
    static TEMPLATES: RefCell<Vec<Rc<Template>>> = const { RefCell::new(Vec::new()) };
    /// The numbers of the page being written (kept for their capacity).
    static VALUES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// `f` of the template that fits `s` (made and kept if new); `None` if none can.
fn with_template<R>(s: &Snapshot, f: impl FnOnce(&Template) -> R) -> Option<R> {
    let (ttft, itl) = bounds(s);
    let known = TEMPLATES.with(|c| c.borrow().iter().find(|t| t.fits(s, ttft, itl)).cloned());
    let t = match known {
        Some(t) => t,
        None => {
            let t = Template::new(s, ttft, itl);
            if !t.fits(s, ttft, itl) {
                return None;
            }
            let t = Rc::new(t);
            TEMPLATES.with(|c| {
                let mut c = c.borrow_mut();
                if c.len() >= TEMPLATES_KEPT {
                    c.clear();
                }
                c.push(t.clone());
            });
            t
        }
    };
    Some(f(&t))
}

/// A histogram's bucket bounds, if there is an engine to read them from.
type Bounds<'a> = Option<&'a Arc<[f64]>>;

/// The histograms' bounds of the first engine (every engine of a core has the same;
/// [`Template::fits`] checks them all).
fn bounds(s: &Snapshot) -> (Bounds<'_>, Bounds<'_>) {
    let e = s.engines.first();
    (
        e.map(|e| &e.stats.h_ttft.bounds),
        e.map(|e| &e.stats.h_itl.bounds),
    )
}

fn same(a: &Arc<[f64]>, b: &Arc<[f64]>) -> bool {
    Arc::ptr_eq(a, b) || a[..] == b[..]
}

impl Template {
    fn fits(&self, s: &Snapshot, ttft: Bounds<'_>, itl: Bounds<'_>) -> bool {
        self.model == s.model
            && self.engines.len() == s.engines.len()
            && self
                .engines
                .iter()
                .zip(&s.engines)
                .all(|(i, e)| *i == e.index)
            && s.engines.iter().all(|e| {
                same(&e.stats.h_ttft.bounds, &self.ttft_bounds)
                    && same(&e.stats.h_itl.bounds, &self.itl_bounds)
                    && e.stats.h_ttft.counts.len() == self.ttft_bounds.len() + 1
                    && e.stats.h_itl.counts.len() == self.itl_bounds.len() + 1
            })
            && ttft.is_none_or(|b| same(b, &self.ttft_bounds))
            && itl.is_none_or(|b| same(b, &self.itl_bounds))
    }

    fn new(s: &Snapshot, ttft: Bounds<'_>, itl: Bounds<'_>) -> Template {
        let mut b = Builder::default();
        // `{engine="0",model_name="m"}`: prometheus_client sorts labels by name.
        let mut model = String::new();
        escape_label(&s.model, &mut model);
        let labels: Vec<String> = s
            .engines
            .iter()
            .map(|e| format!("{{engine=\"{}\",model_name=\"{model}\"}}", e.index))
            .collect();
        for (name, help) in [(WAITING, WAITING_HELP), (KV, KV_HELP)] {
            b.header(name, help, "gauge");
            for l in &labels {
                b.text.push_str(name);
                b.text.push_str(l);
                b.text.push(' ');
                b.number();
                b.text.push('\n');
            }
        }
        let empty: Arc<[f64]> = Arc::from(Vec::new());
        let ttft = ttft.cloned().unwrap_or_else(|| empty.clone());
        let itl = itl.cloned().unwrap_or(empty);
        for (name, help, bounds) in [(TTFT, TTFT_HELP, &ttft), (ITL, ITL_HELP, &itl)] {
            b.header(name, help, "histogram");
            let les: Vec<String> = bounds.iter().map(|v| go_float(*v)).collect();
            for (e, l) in s.engines.iter().zip(&labels) {
                for i in 0..=bounds.len() {
                    b.text.push_str(name);
                    b.text.push_str("_bucket{engine=\"");
                    b.text.push_str(&e.index.to_string());
                    b.text.push_str("\",le=\"");
                    b.text.push_str(les.get(i).map_or("+Inf", String::as_str));
                    b.text.push_str("\",model_name=\"");
                    b.text.push_str(&model);
                    b.text.push_str("\"} ");
                    b.number();
                    b.text.push('\n');
                }
                for suffix in ["_count", "_sum"] {
                    b.text.push_str(name);
                    b.text.push_str(suffix);
                    b.text.push_str(l);
                    b.text.push(' ');
                    b.number();
                    b.text.push('\n');
                }
            }
            // Every child has a `_created` stamp (a V1 engine), so the family has one
            // as soon as it has a child.
            if !labels.is_empty() {
                let created = format!("{name}_created");
                b.header(&created, help, "gauge");
                for l in &labels {
                    b.text.push_str(&created);
                    b.text.push_str(l);
                    b.text.push(' ');
                    b.number();
                    b.text.push('\n');
                }
            }
        }
        Template {
            id: NEXT_TEMPLATE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            model: s.model.clone(),
            engines: s.engines.iter().map(|e| e.index).collect(),
            ttft_bounds: ttft,
            itl_bounds: itl,
            text: b.text,
            ends: b.ends,
        }
    }

    /// The page of `s` (which this template [`fits`](Template::fits)) into `out`.
    fn write(&self, s: &Snapshot, out: &mut String) {
        VALUES.with(|v| match v.try_borrow_mut() {
            Ok(mut v) => self.write_with(s, out, &mut v),
            Err(_) => self.write_with(s, out, &mut Vec::new()),
        });
    }

    /// The page of `s` in `memo`: kept when its numbers are this page's, else written.
    fn write_memo(&self, s: &Snapshot, memo: &mut PageMemo) {
        VALUES.with(|v| match v.try_borrow_mut() {
            Ok(mut v) => self.write_memo_with(s, memo, &mut v),
            Err(_) => self.write_memo_with(s, memo, &mut Vec::new()),
        });
    }

    fn write_memo_with(&self, s: &Snapshot, memo: &mut PageMemo, values: &mut Vec<f64>) {
        values.clear();
        self.values(s, values);
        let same = memo.template == self.id
            && memo.values.len() == values.len()
            && memo
                .values
                .iter()
                .zip(values.iter())
                .all(|(m, v)| *m == v.to_bits());
        if same {
            return;
        }
        memo.page.clear();
        self.write_values(values, &mut memo.page);
        memo.template = self.id;
        memo.values.clear();
        memo.values.extend(values.iter().map(|v| v.to_bits()));
    }

    fn write_with(&self, s: &Snapshot, out: &mut String, values: &mut Vec<f64>) {
        values.clear();
        self.values(s, values);
        self.write_values(values, out);
    }

    /// The pieces with `values` between them.
    fn write_values(&self, values: &[f64], out: &mut String) {
        out.reserve(self.text.len() + 12 * values.len());
        // Where the next piece starts: with the `.0` before it after a whole number.
        let mut start = 0usize;
        for (end, v) in self.ends.iter().zip(values.iter()) {
            let end = *end as usize;
            out.push_str(self.text.get(start..end).unwrap_or_default());
            start = if push_number(out, *v) { end } else { end + 2 };
        }
        out.push_str(self.text.get(start..).unwrap_or_default());
    }

    /// The page's numbers in page order, as the generic path computes them.
    fn values(&self, s: &Snapshot, v: &mut Vec<f64>) {
        let gauge = |v: &mut Vec<f64>, name: &str, value: fn(&EngineView) -> f64, bad: f64| {
            let forced = s.overrides.iter().find(|(n, _)| n == name).map(|(_, x)| *x);
            for e in &s.engines {
                v.push(if s.nonfinite {
                    bad
                } else {
                    forced.unwrap_or_else(|| value(e))
                });
            }
        };
        gauge(v, WAITING, |e| e.waiting, f64::NAN);
        gauge(v, KV, |e| e.kv, f64::INFINITY);
        for ttft in [true, false] {
            for e in &s.engines {
                let h = if ttft {
                    &e.stats.h_ttft
                } else {
                    &e.stats.h_itl
                };
                let mut acc = 0u64;
                for c in &h.counts {
                    acc += c;
                    v.push(acc as f64);
                }
                v.push(h.count as f64);
                // Both families are `_seconds`: the non-finite fault makes their sums NaN.
                v.push(if s.nonfinite { f64::NAN } else { h.sum });
            }
            for e in &s.engines {
                v.push(e.stats.created);
            }
        }
    }
}

/// [`push_go_float`], but a whole number from 0 to 999,999 (the counts: most of the
/// page) is written as its digits only, and answers `true`: its `.0` is still to be
/// written.
fn push_number(out: &mut String, v: f64) -> bool {
    // For doubles with the sign bit clear, the bits order as the values do: this is
    // `0.0 <= v < 1e6` without -0.0 and NaN.
    if v.to_bits() < 1e6f64.to_bits() {
        let n = v as u32;
        if f64::from(n) == v {
            out.push_str(itoa::Buffer::new().format(n));
            return true;
        }
    }
    push_go_float(out, v);
    false
}

/// A template being written: the text, and where each number goes.
#[derive(Default)]
struct Builder {
    text: String,
    ends: Vec<u32>,
}

impl Builder {
    /// A number goes here (the `.0` after it is a whole number's).
    fn number(&mut self) {
        self.ends.push(self.text.len() as u32);
        self.text.push_str(".0");
    }

    fn header(&mut self, name: &str, help: &str, ty: &str) {
        for (what, text) in [("# HELP ", help), ("# TYPE ", ty)] {
            self.text.push_str(what);
            self.text.push_str(name);
            self.text.push(' ');
            self.text.push_str(text);
            self.text.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::render_text;
    use crate::stats::{Buckets, EngineStats};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The generic path's page of `s`.
    fn generic(s: &Snapshot) -> String {
        let mut fams = Vec::new();
        super::super::vllm_v1::compact_families(s, &mut fams);
        let mut out = String::new();
        render_text(&fams, &mut out);
        out
    }

    fn snapshot(rng: &mut StdRng) -> Snapshot {
        let buckets = Buckets::shared(Dialect::Compact, 8192);
        let fresh = Buckets::for_dialect(Dialect::Compact, 8192);
        let n = rng.gen_range(0..4usize);
        let engines = (0..n)
            .map(|i| {
                let b = if rng.gen_bool(0.5) { &buckets } else { &fresh };
                let created = match rng.gen_range(0..4) {
                    0 => 1_700_000_000.0,
                    1 => 1_700_000_000.0 + rng.gen_range(0.0..1e5),
                    2 => rng.gen_range(0.0..10.0),
                    _ => 1e16 * rng.gen_range(1.0..9.0),
                };
                let mut stats = EngineStats::new(b, created);
                for _ in 0..rng.gen_range(0..50) {
                    let t = rng.gen_range(0.0..3000.0f64).powf(rng.gen_range(0.1..1.0));
                    stats.h_ttft.observe_n(t, rng.gen_range(1..3));
                    stats.h_itl.observe(t / 7.0);
                }
                if rng.gen_bool(0.1) {
                    stats.h_ttft.observe_n(0.5, 3_000_000);
                    stats.h_itl.sum = -0.0;
                }
                EngineView {
                    index: if rng.gen_bool(0.8) {
                        i
                    } else {
                        rng.gen_range(0..20)
                    },
                    running: rng.gen_range(0..5) as f64,
                    waiting: match rng.gen_range(0..4) {
                        0 => 0.0,
                        1 => rng.gen_range(0..100) as f64,
                        2 => rng.gen_range(0.0..1e7),
                        _ => 5e6,
                    },
                    kv: rng.gen_range(0.0..1.0),
                    kv_capacity: 1600,
                    stats,
                }
            })
            .collect();
        let model = ["mock-model", "m", "a\"b\\c\nd", "", "é-model"][rng.gen_range(0..5)];
        let mut overrides = Vec::new();
        for name in [KV, WAITING, "vllm:other"] {
            if rng.gen_bool(0.2) {
                overrides.push((name.to_string(), rng.gen_range(-2.0..2.0)));
            }
        }
        Snapshot {
            dialect: Dialect::Compact,
            model: model.into(),
            max_model_len: 8192,
            engines,
            nonfinite: rng.gen_bool(0.15),
            overrides,
            runtime: None,
            http: None,
        }
    }

    #[test]
    fn the_compact_page_is_the_generic_page() {
        let mut rng = StdRng::seed_from_u64(1);
        for round in 0..3000 {
            let s = snapshot(&mut rng);
            assert!(applies(&s));
            let mut out = String::from("left over");
            out.clear();
            page_into(&s, &mut out);
            assert_eq!(out, generic(&s), "round {round}: {s:?}");
            // Twice: the second page comes from the kept template.
            let mut again = String::new();
            page_into(&s, &mut again);
            assert_eq!(again, out);
        }
    }

    #[test]
    fn a_kept_page_is_the_page_written_again() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut memo = PageMemo::default();
        let mut s = snapshot(&mut rng);
        let mut copied = 0;
        for round in 0..3000 {
            // Mostly the same core scraped again, sometimes with one number moved
            // (sign and NaN flips included), sometimes another snapshot altogether.
            match rng.gen_range(0..6) {
                0 => s = snapshot(&mut rng),
                1 => s.nonfinite = !s.nonfinite,
                2 => {
                    if let Some(e) = s.engines.first_mut() {
                        e.waiting = [0.0, -0.0, f64::NAN, 1.0][rng.gen_range(0..4)];
                    }
                }
                3 => {
                    if let Some(e) = s.engines.last_mut() {
                        e.stats.h_itl.observe(rng.gen_range(0.0..1.0));
                    }
                }
                _ => {}
            }
            let same = memo.template != 0 && {
                let mut v = Vec::new();
                with_template(&s, |t| t.values(&s, &mut v));
                memo.values
                    .iter()
                    .copied()
                    .eq(v.iter().map(|x| x.to_bits()))
            };
            copied += usize::from(same);
            assert!(page_into_memo(&s, &mut memo));
            assert_eq!(memo.page(), generic(&s), "round {round}: {s:?}");
        }
        assert!(copied > 1000, "{copied}");
    }

    #[test]
    fn numbers_are_written_as_push_go_float_writes_them() {
        let mut values: Vec<f64> = (0..1_000_100).map(f64::from).collect();
        values.extend([
            -0.0,
            -1.0,
            0.5,
            999_999.5,
            1e6,
            1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            4_294_967_296.0,
        ]);
        let (mut a, mut b) = (String::new(), String::new());
        for v in values {
            a.clear();
            b.clear();
            if push_number(&mut a, v) {
                a.push_str(".0");
            }
            push_go_float(&mut b, v);
            assert_eq!(a, b, "{v}");
        }
    }

    #[test]
    fn page_into_takes_this_path_only_for_compact_snapshots() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut s = snapshot(&mut rng);
        s.http = Some(crate::stats::HttpStats::new(1.0));
        assert!(!applies(&s));
        s.http = None;
        s.dialect = Dialect::V0_11;
        assert!(!applies(&s));
    }
}
