//! What the `metrics_*` faults make of one scrape, decided and applied without a
//! socket or a clock: [`ScrapePlan::decide`] consumes the armed faults in a fixed order,
//! [`PageFaults::apply`] rewrites the page bytes. The `/metrics` handler
//! ([`crate::scrape`]) only delivers the result (hang, trickle, reset).

use bytes::Bytes;
use rand::Rng;

use crate::faults::Fault;

const GARBAGE: [&str; 6] = [
    "this is not a metric",
    "vllm:num_requests_waiting{model_name=\"broken 1.0",
    "}{ 12 34",
    "# TYPE",
    "vllm:garbage_without_value",
    "\u{1}\u{2}\u{3}binary junk\u{7f}",
];

/// Largest page `metrics_huge` will build.
const HUGE_CAP: usize = 256 * 1024 * 1024;

/// The outcome of one scrape, before any byte is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScrapePlan {
    /// `metrics_status`: this status and its reason phrase.
    Status(u16),
    /// `metrics_hang`: no answer.
    Hang,
    /// The page, with what happens to it.
    Page(PageFaults),
}

/// What happens to a page that is served.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageFaults {
    /// `metrics_stale`: serve the frozen page (freeze this one if none).
    pub stale: bool,
    /// `metrics_nonfinite`: render with NaN/±Inf gauges.
    pub nonfinite: bool,
    /// `metrics_garbage`: junk lines to insert.
    pub garbage: Option<usize>,
    /// `metrics_huge`: pad to at least this many bytes.
    pub huge: Option<usize>,
    /// `metrics_truncate`: cut after this many bytes; reset the connection if `true`.
    pub truncate: Option<(usize, bool)>,
    /// `metrics_slow`: deliver at this many bytes per second.
    pub slow: Option<u64>,
}

impl ScrapePlan {
    /// Decide one scrape. `fire(want)` consumes and answers the first armed fault that
    /// `want` accepts (as `FaultRegistry::fire` does); faults are asked for in the
    /// order they act, and one that cannot act any more (everything after a status or
    /// a hang, `slow` after a truncation) is not asked for, so it stays armed.
    pub fn decide(mut fire: impl FnMut(&dyn Fn(&Fault) -> bool) -> Option<Fault>) -> Self {
        if let Some(Fault::MetricsStatus { status }) =
            fire(&|f| matches!(f, Fault::MetricsStatus { .. }))
        {
            return ScrapePlan::Status(status);
        }
        if fire(&|f| matches!(f, Fault::MetricsHang)).is_some() {
            return ScrapePlan::Hang;
        }
        let mut p = PageFaults {
            stale: fire(&|f| matches!(f, Fault::MetricsStale)).is_some(),
            nonfinite: fire(&|f| matches!(f, Fault::MetricsNonfinite)).is_some(),
            ..PageFaults::default()
        };
        if let Some(Fault::MetricsGarbage { lines }) =
            fire(&|f| matches!(f, Fault::MetricsGarbage { .. }))
        {
            p.garbage = Some(lines);
        }
        if let Some(Fault::MetricsHuge { bytes }) =
            fire(&|f| matches!(f, Fault::MetricsHuge { .. }))
        {
            p.huge = Some(bytes);
        }
        if let Some(Fault::MetricsTruncate { at_bytes, abort }) =
            fire(&|f| matches!(f, Fault::MetricsTruncate { .. }))
        {
            p.truncate = Some((at_bytes, abort));
        } else if let Some(Fault::MetricsSlow { bytes_per_sec }) =
            fire(&|f| matches!(f, Fault::MetricsSlow { .. }))
        {
            p.slow = Some(bytes_per_sec);
        }
        ScrapePlan::Page(p)
    }
}

impl PageFaults {
    /// The bytes to send: junk inserted (seeded by `rng`), padded, cut.
    pub fn apply(&self, page: Bytes, rng: &mut impl Rng) -> Bytes {
        let mut page = page;
        if let Some(lines) = self.garbage {
            page = with_garbage(&page, lines.min(100_000), rng);
        }
        if let Some(bytes) = self.huge {
            page = padded(&page, bytes.min(HUGE_CAP));
        }
        if let Some((at, _)) = self.truncate {
            page = page.slice(..at.min(page.len()));
        }
        page
    }
}

/// The page with `n` junk lines inserted at seeded line boundaries.
fn with_garbage(page: &[u8], n: usize, rng: &mut impl Rng) -> Bytes {
    let text = String::from_utf8_lossy(page);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for i in 0..n {
        // Never after `# EOF`: keep the junk inside the page.
        let limit = lines
            .len()
            .saturating_sub(usize::from(lines.last().is_some_and(|l| l == "# EOF")));
        let at = rng.gen_range(0..=limit);
        lines.insert(at, GARBAGE[i % GARBAGE.len()].to_string());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Bytes::from(out)
}

/// The page grown to at least `bytes` with a valid filler gauge family.
fn padded(page: &Bytes, bytes: usize) -> Bytes {
    if page.len() >= bytes {
        return page.clone();
    }
    let text = String::from_utf8_lossy(page);
    let (body, eof) = match text.strip_suffix("# EOF\n") {
        Some(b) => (b.to_string(), "# EOF\n"),
        None => (text.to_string(), ""),
    };
    let mut out = String::with_capacity(bytes + 128);
    out.push_str(&body);
    out.push_str(
        "# HELP mock_padding Filler series (metrics_huge fault).\n# TYPE mock_padding gauge\n",
    );
    let mut i = 0u64;
    let mut digits = itoa::Buffer::new();
    while out.len() + eof.len() < bytes {
        // `mock_padding{i="<i>"} 1.0`, without a `format!` per line.
        out.push_str("mock_padding{i=\"");
        out.push_str(digits.format(i));
        out.push_str("\"} 1.0\n");
        i += 1;
    }
    out.push_str(eof);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// Decide against a plain list of armed one-shot faults; answer what is left armed.
    fn decide(mut armed: Vec<Fault>) -> (ScrapePlan, Vec<Fault>) {
        let plan = ScrapePlan::decide(|want| {
            let at = armed.iter().position(want)?;
            Some(armed.remove(at))
        });
        (plan, armed)
    }

    #[test]
    fn faults_act_in_order_and_the_rest_stay_armed() {
        let garbage = Fault::MetricsGarbage { lines: 3 };
        let (plan, left) = decide(vec![garbage.clone(), Fault::MetricsStatus { status: 503 }]);
        assert_eq!(
            (plan, left),
            (ScrapePlan::Status(503), vec![garbage.clone()])
        );
        let (plan, left) = decide(vec![Fault::MetricsHang, Fault::MetricsStale]);
        assert_eq!((plan, left), (ScrapePlan::Hang, vec![Fault::MetricsStale]));
        let slow = Fault::MetricsSlow { bytes_per_sec: 10 };
        let cut = Fault::MetricsTruncate {
            at_bytes: 5,
            abort: true,
        };
        let (plan, left) = decide(vec![slow.clone(), cut, garbage, Fault::MetricsNonfinite]);
        let expected = PageFaults {
            nonfinite: true,
            garbage: Some(3),
            truncate: Some((5, true)),
            ..PageFaults::default()
        };
        assert_eq!((plan, left), (ScrapePlan::Page(expected), vec![slow]));
        assert_eq!(decide(vec![]).0, ScrapePlan::Page(PageFaults::default()));
    }

    #[test]
    fn padding_lines_are_numbered_in_order() {
        for (page, eof) in [
            ("a 1.0\n", ""),
            ("# TYPE a gauge\na 1.0\n# EOF\n", "# EOF\n"),
        ] {
            let out = padded(&Bytes::from(page), 5000);
            let mut want = page.strip_suffix(eof).unwrap_or(page).to_string();
            want.push_str("# HELP mock_padding Filler series (metrics_huge fault).\n# TYPE mock_padding gauge\n");
            let mut i = 0;
            while want.len() + eof.len() < 5000 {
                want.push_str(&format!("mock_padding{{i=\"{i}\"}} 1.0\n"));
                i += 1;
            }
            want.push_str(eof);
            assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        }
    }

    #[test]
    fn page_rewrites_are_seeded_and_keep_eof_last() {
        let page = Bytes::from_static(b"# TYPE a gauge\na 1.0\n# EOF\n");
        let faults = PageFaults {
            garbage: Some(4),
            huge: Some(200),
            ..PageFaults::default()
        };
        let once = faults.apply(page.clone(), &mut StdRng::seed_from_u64(7));
        let again = faults.apply(page.clone(), &mut StdRng::seed_from_u64(7));
        assert_eq!(once, again);
        let text = std::str::from_utf8(&once).unwrap();
        assert!(text.len() >= 200 && text.ends_with("\n# EOF\n"), "{text}");
        let junk = text.lines().filter(|l| GARBAGE.contains(l)).count();
        assert_eq!(junk, 4);
        let cut = PageFaults {
            truncate: Some((6, false)),
            ..PageFaults::default()
        };
        assert_eq!(cut.apply(page, &mut StdRng::seed_from_u64(7)), "# TYPE");
    }
}
