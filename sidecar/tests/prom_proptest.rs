//! Property tests of the parser: generated valid expositions come back exactly, and
//! garbage or mutated pages never panic.

use proptest::prelude::*;
use sidecar::prom::{parse, scan, Format, Mode, Page};

/// What a sample must parse to.
#[derive(Clone, Debug)]
struct Want {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    ts: Option<i64>,
}

/// A float and one of its spellings.
fn value() -> impl Strategy<Value = (f64, String)> {
    prop_oneof![
        Just((f64::NAN, "NaN".to_string())),
        Just((f64::NAN, "nan".to_string())),
        Just((f64::INFINITY, "+Inf".to_string())),
        Just((f64::INFINITY, "Inf".to_string())),
        Just((f64::INFINITY, "+infinity".to_string())),
        Just((f64::NEG_INFINITY, "-Inf".to_string())),
        Just((0.5, ".5".to_string())),
        Just((5.0, "5.".to_string())),
        Just((1e10, "1E+10".to_string())),
        Just((0.000123, "1.23e-04".to_string())),
        Just((-0.0, "-0".to_string())),
        any::<i32>().prop_map(|i| (i as f64, i.to_string())),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| (v, format!("{v}"))),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| (v, format!("{v:e}"))),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| (v, format!("{v:E}"))),
        (0u64..1_000_000, 0u32..6).prop_map(|(m, d)| {
            let s = format!(
                "{}.{:0>width$}",
                m / 10u64.pow(d),
                m % 10u64.pow(d),
                width = d as usize
            );
            (s.parse().unwrap(), s)
        }),
    ]
}

fn metric_name() -> impl Strategy<Value = String> {
    "[a-zA-Z_:][a-zA-Z0-9_:]{0,12}"
}

fn label_name() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_]{0,8}".prop_filter("reserved", |n| n != "le" && n != "quantile")
}

fn label_value() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('\\'),
            Just('"'),
            Just('\n'),
            Just('{'),
            Just('}'),
            Just('#'),
            Just(','),
            Just('='),
            Just(' '),
            Just('é'),
            Just('€'),
            Just('😀'),
            Just('\u{0}'),
            prop::char::range('a', 'z'),
        ],
        0..12,
    )
    .prop_map(|c| c.into_iter().collect())
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_set() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::btree_map(label_name(), label_value(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

type LabelSet = Vec<(String, String)>;

#[derive(Clone, Debug)]
enum Family {
    Gauge {
        sets: Vec<(LabelSet, (f64, String), Option<i64>)>,
    },
    Counter {
        sets: Vec<(Vec<(String, String)>, u32)>,
    },
    Histogram {
        sets: Vec<(LabelSet, Vec<u32>, f64)>,
    },
}

fn family() -> impl Strategy<Value = Family> {
    prop_oneof![
        prop::collection::vec((label_set(), value(), prop::option::of(any::<i64>())), 1..4)
            .prop_map(|sets| Family::Gauge { sets }),
        prop::collection::vec((label_set(), any::<u32>()), 1..3)
            .prop_map(|sets| Family::Counter { sets }),
        prop::collection::vec(
            (
                label_set(),
                prop::collection::vec(0u32..50, 0..5),
                0.0f64..1e6
            ),
            1..3
        )
        .prop_map(|sets| Family::Histogram { sets }),
    ]
}

/// Page layout choices.
#[derive(Clone, Debug)]
struct Style {
    crlf: Vec<bool>,
    blank: Vec<bool>,
    comment: Vec<bool>,
    spaced: Vec<bool>,
    help: Vec<Option<String>>,
}

fn style() -> impl Strategy<Value = Style> {
    (
        prop::collection::vec(prop::bool::weighted(0.05), 64),
        prop::collection::vec(prop::bool::weighted(0.1), 64),
        prop::collection::vec(prop::bool::weighted(0.1), 64),
        prop::collection::vec(any::<bool>(), 64),
        prop::collection::vec(prop::option::of("[ -~é€]{0,20}"), 16),
    )
        .prop_map(|(crlf, blank, comment, spaced, help)| Style {
            crlf,
            blank,
            comment,
            spaced,
            help,
        })
}

fn dedup_sets<T: Clone>(sets: &[(Vec<(String, String)>, T)]) -> Vec<(Vec<(String, String)>, T)> {
    let mut seen = std::collections::HashSet::new();
    sets.iter()
        .filter(|(l, _)| seen.insert(l.clone()))
        .cloned()
        .collect()
}

/// Render families as a Prometheus 0.0.4 page; answers the page, the samples it holds
/// and the 1-based line of the first CRLF, if any.
fn render(fams: &[(String, Family)], st: &Style) -> (String, Vec<Want>, Option<usize>) {
    let mut out = String::new();
    let mut want = Vec::new();
    let mut n = 0usize;
    let mut lines = 0usize;
    let mut first_crlf = None;
    let mut line = |out: &mut String, text: &str, n: &mut usize| {
        let i = *n % 64;
        *n += 1;
        if st.blank[i] {
            out.push('\n');
            lines += 1;
        }
        if st.comment[i] {
            out.push_str("# c a plain comment, HELP TYPE\n");
            lines += 1;
        }
        out.push_str(text);
        lines += 1;
        if st.crlf[i] {
            out.push('\r');
            first_crlf.get_or_insert(lines);
        }
        out.push('\n');
    };
    let labels_text = |labels: &[(String, String)], extra: Option<&str>, spaced: bool| {
        let mut parts: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        if let Some(le) = extra {
            parts.push(format!("le=\"{le}\""));
        }
        if parts.is_empty() {
            return if spaced {
                String::new()
            } else {
                "{}".to_string()
            };
        }
        if spaced {
            format!(" {{ {} }}", parts.join(", "))
        } else {
            format!("{{{}}}", parts.join(","))
        }
    };
    for (fi, (name, fam)) in fams.iter().enumerate() {
        if let Some(h) = &st.help[fi % 16] {
            let h = h.replace('\\', "\\\\");
            line(&mut out, &format!("# HELP {name} {h}"), &mut n);
        }
        match fam {
            Family::Gauge { sets } => {
                line(&mut out, &format!("# TYPE {name} gauge"), &mut n);
                let sets: Vec<_> = dedup_sets(
                    &sets
                        .iter()
                        .map(|(l, v, t)| (l.clone(), (v.clone(), *t)))
                        .collect::<Vec<_>>(),
                );
                for (labels, ((v, spelled), ts)) in sets {
                    let spaced = st.spaced[n % 64];
                    let ts_text = ts
                        .map(|t| format!("{}{t}", if spaced { "\t" } else { " " }))
                        .unwrap_or_default();
                    line(
                        &mut out,
                        &format!(
                            "{name}{} {spelled}{ts_text}",
                            labels_text(&labels, None, spaced)
                        ),
                        &mut n,
                    );
                    want.push(Want {
                        name: name.clone(),
                        labels,
                        value: v,
                        ts,
                    });
                }
            }
            Family::Counter { sets } => {
                line(&mut out, &format!("# TYPE {name} counter"), &mut n);
                for (labels, v) in dedup_sets(sets) {
                    let spaced = st.spaced[n % 64];
                    line(
                        &mut out,
                        &format!("{name}{} {v}", labels_text(&labels, None, spaced)),
                        &mut n,
                    );
                    want.push(Want {
                        name: name.clone(),
                        labels,
                        value: v as f64,
                        ts: None,
                    });
                }
            }
            Family::Histogram { sets } => {
                line(&mut out, &format!("# TYPE {name} histogram"), &mut n);
                let sets: Vec<_> = dedup_sets(
                    &sets
                        .iter()
                        .map(|(l, b, s)| (l.clone(), (b.clone(), *s)))
                        .collect::<Vec<_>>(),
                );
                for (labels, (incs, sum)) in sets {
                    let mut cum = 0u64;
                    for (i, inc) in incs.iter().enumerate() {
                        cum += *inc as u64;
                        let le = format!("{}", (i + 1) as f64 * 0.25);
                        let spaced = st.spaced[n % 64];
                        line(
                            &mut out,
                            &format!(
                                "{name}_bucket{} {cum}",
                                labels_text(&labels, Some(&le), spaced)
                            ),
                            &mut n,
                        );
                        let mut l = labels.clone();
                        l.push(("le".into(), le));
                        want.push(Want {
                            name: format!("{name}_bucket"),
                            labels: l,
                            value: cum as f64,
                            ts: None,
                        });
                    }
                    line(
                        &mut out,
                        &format!(
                            "{name}_bucket{} {cum}",
                            labels_text(&labels, Some("+Inf"), false)
                        ),
                        &mut n,
                    );
                    let mut l = labels.clone();
                    l.push(("le".into(), "+Inf".into()));
                    want.push(Want {
                        name: format!("{name}_bucket"),
                        labels: l,
                        value: cum as f64,
                        ts: None,
                    });
                    line(
                        &mut out,
                        &format!("{name}_sum{} {sum}", labels_text(&labels, None, false)),
                        &mut n,
                    );
                    want.push(Want {
                        name: format!("{name}_sum"),
                        labels: labels.clone(),
                        value: sum,
                        ts: None,
                    });
                    line(
                        &mut out,
                        &format!("{name}_count{} {cum}", labels_text(&labels, None, false)),
                        &mut n,
                    );
                    want.push(Want {
                        name: format!("{name}_count"),
                        labels,
                        value: cum as f64,
                        ts: None,
                    });
                }
            }
        }
    }
    (out, want, first_crlf)
}

fn check(page: &Page<'_>, want: &[Want]) -> Result<(), TestCaseError> {
    prop_assert_eq!(page.samples.len(), want.len());
    for (got, w) in page.samples.iter().zip(want) {
        prop_assert_eq!(&*got.name, w.name.as_str());
        prop_assert_eq!(got.labels.to_vec(), w.labels.clone());
        prop_assert!(
            got.value.to_bits() == w.value.to_bits() || (got.value.is_nan() && w.value.is_nan()),
            "{} != {}",
            got.value,
            w.value
        );
        prop_assert_eq!(got.timestamp_ms, w.ts);
    }
    Ok(())
}

fn families() -> impl Strategy<Value = Vec<(String, Family)>> {
    prop::collection::vec((metric_name(), family()), 0..6).prop_map(|fams| {
        // Unique family names whose histogram suffixes cannot collide either.
        fams.into_iter()
            .enumerate()
            .map(|(i, (n, f))| (format!("{n}_f{i}"), f))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn valid_pages_come_back_exactly(fams in families(), st in style()) {
        let (text, want, crlf) = render(&fams, &st);
        let page = parse(&text, Format::Prometheus, Mode::Lenient).unwrap();
        prop_assert_eq!(page.skipped_lines, 0, "{:?}", page.first_skipped);
        check(&page, &want)?;
        match (parse(&text, Format::Prometheus, Mode::Strict), crlf) {
            (Ok(strict), None) => check(&strict, &want)?,
            (Err(e), Some(line)) => {
                prop_assert_eq!(e.line, line);
                prop_assert!(e.message.contains("CRLF"));
            }
            (Ok(_), Some(line)) => prop_assert!(false, "CRLF on line {} accepted", line),
            (Err(e), None) => prop_assert!(false, "strict refused a valid page: {}\n{}", e, text),
        }
        // The filtered scan sees the same samples.
        let mut scanned = Vec::new();
        scan(&text, Format::Prometheus, |_| true, |s| scanned.push(s));
        // (Debug, not ==: NaN values are on purpose.)
        prop_assert_eq!(format!("{scanned:?}"), format!("{:?}", page.samples));
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let page = parse(&text, format, Mode::Lenient).unwrap();
            prop_assert!(page.samples.len() + page.skipped_lines <= text.lines().count() + 1);
            let _ = parse(&text, format, Mode::Strict);
        }
    }

    #[test]
    fn mutated_pages_never_panic(fams in families(), st in style(),
                                 edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8)) {
        let (text, _, _) = render(&fams, &st);
        let mut bytes = text.into_bytes();
        for (at, byte, op) in edits {
            let i = if bytes.is_empty() { 0 } else { at.index(bytes.len()) };
            match op {
                0 if !bytes.is_empty() => bytes[i] = byte,
                1 => bytes.insert(i, [b'"', b'\\', b'{', b'}', b'\n', b' ', b',', b'=', b'#'][byte as usize % 9]),
                _ if !bytes.is_empty() => { bytes.remove(i); }
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let page = parse(&text, format, Mode::Lenient).unwrap();
            for s in &page.samples {
                let _ = s.labels.to_vec();
            }
            let _ = parse(&text, format, Mode::Strict);
        }
    }
}
