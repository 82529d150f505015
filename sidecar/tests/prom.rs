//! The parser through its public API: the format's edge cases, and the fixtures.

#[path = "support/locate.rs"]
mod locate;
use locate::locate;

use std::borrow::Cow;

use sidecar::prom::{parse, Format, Mode, Page};

const P: Format = Format::Prometheus;
const OM: Format = Format::OpenMetrics;

fn strict(text: &str) -> Page<'_> {
    parse(text, P, Mode::Strict).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn strict_err(text: &str, format: Format) -> sidecar::prom::ParseError {
    match parse(text, format, Mode::Strict) {
        Ok(p) => panic!("accepted {text:?}: {p:?}"),
        Err(e) => e,
    }
}

fn lenient(text: &str) -> Page<'_> {
    parse(text, P, Mode::Lenient).unwrap()
}

fn fixture(rel: &str) -> String {
    let p = locate(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn label_escapes() {
    let p = strict("m{a=\"x\\\\y\",b=\"q\\\"\",c=\"l1\\nl2\"} 1\n");
    let l = p.samples[0].labels.to_vec();
    assert_eq!(l[0].1, "x\\y");
    assert_eq!(l[1].1, "q\"");
    assert_eq!(l[2].1, "l1\nl2");
    // Any other escape is invalid in 0.0.4 ...
    let e = strict_err("m{a=\"\\t\"} 1\n", P);
    assert_eq!(e.line, 1);
    assert!(e.message.contains("escape"), "{e}");
    // ... kept literally by the lenient path (as Prometheus' scrape does) ...
    assert_eq!(
        lenient("m{a=\"\\t\"} 1\n").samples[0]
            .labels
            .get("a")
            .as_deref(),
        Some("\\t")
    );
    // ... and allowed by OpenMetrics (`BS normal-char`).
    assert!(parse("m{a=\"\\t\"} 1\n# EOF\n", OM, Mode::Strict).is_ok());
}

#[test]
fn samples_borrow_from_the_page() {
    let text = "vllm:x{model_name=\"m\",e=\"a\\\"b\"} 1\n";
    let p = strict(text);
    let s = &p.samples[0];
    let range = text.as_ptr() as usize..text.as_ptr() as usize + text.len();
    assert!(matches!(s.name, Cow::Borrowed(_)));
    assert!(range.contains(&(s.name.as_ptr() as usize)));
    let (n, v) = s.labels.iter().next().unwrap();
    assert!(matches!((&n, &v), (Cow::Borrowed(_), Cow::Borrowed(_))));
    assert!(range.contains(&(v.as_ptr() as usize)));
    // Only the escaped value is copied.
    assert!(matches!(s.labels.get("e"), Some(Cow::Owned(ref o)) if o == "a\"b"));
}

#[test]
fn duplicate_label_names() {
    let e = strict_err("m{a=\"1\",b=\"2\",a=\"3\"} 1\n", P);
    assert!(e.message.contains("duplicate label name \"a\""), "{e}");
    assert!(strict_err("m{a=\"1\",a=\"1\"} 1\n# EOF\n", OM)
        .message
        .contains("duplicate"));
}

/// A line `m{l0="v",l1="v",...} 1` of `n` distinct labels, with label `l{k}` repeated
/// at position `at` when `repeat` is `Some((k, at))`; and the column (1-based) of the
/// repeat.
fn many_labels(n: usize, repeat: Option<(usize, usize)>, om: bool) -> (String, usize) {
    let mut line = String::from("m{");
    let mut col = 0;
    for i in 0..=n {
        if let Some((k, at)) = repeat {
            if i == at {
                col = line.len() + 1;
                line.push_str(&format!("l{k}=\"w\","));
            }
        }
        if i < n {
            line.push_str(&format!("l{i}=\"v\","));
        }
    }
    line.pop();
    line.push_str("} 1\n");
    if om {
        line.push_str("# EOF\n");
    }
    (line, col)
}

#[test]
fn duplicate_label_names_at_any_count_and_position() {
    for n in [1usize, 2, 7, 8, 9, 16, 17, 100, 10_000] {
        for (format, om) in [(P, false), (OM, true)] {
            let (ok, _) = many_labels(n, None, om);
            let page = parse(&ok, format, Mode::Strict).unwrap_or_else(|e| panic!("n {n}: {e}"));
            assert_eq!(page.samples[0].labels.len(), n);
            // The first, a middle and the last name, repeated right after it, in the
            // middle of the rest, and at the end.
            for k in [0, n / 2, n - 1] {
                for at in [k + 1, (k + 1 + n) / 2, n] {
                    let (bad, col) = many_labels(n, Some((k, at)), om);
                    let e = strict_err(&bad, format);
                    let want = format!("duplicate label name \"l{k}\" (column {col})");
                    assert!(e.message.starts_with(&want), "n {n} k {k} at {at}: {e}");
                    assert_eq!(e.line, 1);
                }
            }
        }
    }
    // Bare and quoted spellings of one name are the same name.
    let e = strict_err("m{a=\"1\",\"a\"=\"2\"} 1\n", P);
    assert!(e.message.contains("duplicate label name \"a\""), "{e}");
}

#[test]
fn lenient_skips_lines_with_a_repeated_label_name() {
    for n in [1usize, 2, 8, 9, 100, 10_000] {
        for (format, om) in [(P, false), (OM, true)] {
            for k in [0, n / 2, n - 1] {
                for at in [k + 1, n] {
                    let (bad, col) = many_labels(n, Some((k, at)), false);
                    let page = format!("a 1\n{bad}b 2\n{}", if om { "# EOF\n" } else { "" });
                    let p = parse(&page, format, Mode::Lenient).unwrap();
                    let names: Vec<&str> = p.samples.iter().map(|s| &*s.name).collect();
                    assert_eq!(names, ["a", "b"], "n {n} k {k} at {at}");
                    assert_eq!(p.skipped_lines, 1);
                    let e = p.first_skipped.unwrap();
                    assert_eq!(e.line, 2);
                    let want = format!("duplicate label name \"l{k}\" (column {col})");
                    assert!(e.message.starts_with(&want), "n {n} k {k} at {at}: {e}");
                }
            }
            // Without a repeat the line is read, every label once.
            let (ok, _) = many_labels(n, None, false);
            let p = parse(&ok, format, Mode::Lenient).unwrap();
            assert_eq!(p.samples[0].labels.len(), n);
        }
    }
    // Quoted and bare spellings, and (lenient only) escapes that unescape alike.
    for line in [
        "m{a=\"1\",\"a\"=\"2\"} 1",
        "m{\"a\\q\"=\"1\",\"a\\\\q\"=\"2\"} 1",
        "m{a = \"1\", a = \"2\"} 1",
    ] {
        let p = lenient(line);
        assert!(p.samples.is_empty(), "{line}");
        assert_eq!(p.skipped_lines, 1, "{line}");
    }
}

/// A million labels on one line: linear work (this took longer than two minutes when
/// every pair of names was compared). Only the answers are asserted, not the time.
#[test]
fn a_million_labels_on_one_line() {
    let n = 1_000_000;
    let (ok, _) = many_labels(n, None, false);
    assert_eq!(strict(&ok).samples.len(), 1);
    let (bad, col) = many_labels(n, Some((0, n)), false);
    let e = strict_err(&bad, P);
    assert!(
        e.message
            .starts_with(&format!("duplicate label name \"l0\" (column {col})")),
        "{e}"
    );
    let p = lenient(&bad);
    assert!(p.samples.is_empty());
    assert_eq!(p.skipped_lines, 1);
}

#[test]
fn empty_braces_and_trailing_commas() {
    assert_eq!(strict("m{} 1\n").samples[0].labels.len(), 0);
    assert!(parse("m{} 1\n# EOF\n", OM, Mode::Strict).is_ok());
    assert_eq!(strict("m{a=\"1\",} 1\n").samples[0].labels.len(), 1);
    assert!(strict_err("m{a=\"1\",} 1\n# EOF\n", OM)
        .message
        .contains("trailing comma"));
    assert!(strict_err("m{,} 1\n", P).message.contains("label name"));
}

#[test]
fn number_spellings() {
    let v = |s: &str| strict(&format!("m {s}\n")).samples[0].value;
    assert_eq!(v("1.23e-04"), 0.000123);
    assert_eq!(v(".5"), 0.5);
    assert_eq!(v("5."), 5.0);
    assert_eq!(v("1E+10"), 1e10);
    assert_eq!(v("-0.0").to_bits(), (-0.0f64).to_bits());
    assert_eq!(v("1.372014592e+010"), 13720145920.0);
    assert_eq!(v("14.040000000000001"), 14.040000000000001);
    for s in ["+Inf", "Inf", "inf", "+inf", "Infinity", "+infinity"] {
        assert_eq!(v(s), f64::INFINITY, "{s}");
    }
    for s in ["-Inf", "-inf", "-Infinity"] {
        assert_eq!(v(s), f64::NEG_INFINITY, "{s}");
    }
    for s in ["NaN", "nan", "NAN"] {
        assert!(v(s).is_nan(), "{s}");
    }
    for s in [
        "+NaN", "-NaN", "1_000", "0x10", "1e", "e1", "--1", "1.2.3", "∞", "true",
    ] {
        let e = strict_err(&format!("m {s}\n"), P);
        assert!(e.message.contains("invalid value"), "{s}: {e}");
    }
}

#[test]
fn timestamps() {
    assert_eq!(
        strict("m 1 1712345678901\n").samples[0].timestamp_ms,
        Some(1712345678901)
    );
    assert_eq!(strict("m 1 -5\n").samples[0].timestamp_ms, Some(-5));
    assert_eq!(
        strict("m 1 9223372036854775807\n").samples[0].timestamp_ms,
        Some(i64::MAX)
    );
    for bad in ["9223372036854775808", "1.5", "1e3", "NaN", "12a"] {
        let e = strict_err(&format!("m 1 {bad}\n"), P);
        assert!(e.message.contains("timestamp"), "{bad}: {e}");
    }
    assert!(strict_err("m 1 2 3\n", P)
        .message
        .contains("after the timestamp"));
    // OpenMetrics: float seconds.
    let p = parse("m 1 1520879607.789\n# EOF\n", OM, Mode::Strict).unwrap();
    assert_eq!(p.samples[0].timestamp_ms, Some(1520879607789));
}

#[test]
fn crlf_and_blank_lines() {
    let text = "# TYPE m gauge\r\nm 1\r\n\r\nm2{a=\"b\"} 2\r\n";
    let e = strict_err(text, P);
    assert_eq!(e.line, 1);
    assert!(e.message.contains("CRLF"), "{e}");
    let p = lenient(text);
    assert_eq!(p.samples.len(), 2);
    assert_eq!(p.skipped_lines, 0);
    assert_eq!(p.samples[1].value, 2.0);
    // Blank lines: fine in 0.0.4, not in OpenMetrics.
    assert_eq!(strict("\n\nm 1\n\n  \nn 2\n").samples.len(), 2);
    assert!(strict_err("m 1\n\n# EOF\n", OM)
        .message
        .contains("blank line"));
}

#[test]
fn help_and_type_rules() {
    assert!(
        strict("# HELP m Some \\\\ help \\n text\n# TYPE m gauge\nm 1\n")
            .samples
            .len()
            == 1
    );
    assert!(strict_err("# HELP m bad \\t escape\n", P)
        .message
        .contains("escape"));
    let e = strict_err("# HELP m a\n# HELP m b\nm 1\n", P);
    assert!(e.message.contains("second HELP"), "{e}");
    assert_eq!(e.line, 2);
    assert!(strict_err("# TYPE m gauge\n# TYPE m counter\n", P)
        .message
        .contains("TYPE"));
    let e = strict_err("m 1\n# TYPE m gauge\n", P);
    assert!(e.message.contains("after its samples"), "{e}");
    assert!(strict_err("# TYPE m histogramm\n", P)
        .message
        .contains("unknown metric type"));
    assert!(strict_err("# TYPE m unknown\n", P)
        .message
        .contains("unknown metric type"));
    assert!(parse("# TYPE m untyped\n", P, Mode::Strict).is_ok());
    assert!(strict_err("# TYPE m untyped\n# EOF\n", OM)
        .message
        .contains("unknown metric type"));
    // Plain comments are ignored in 0.0.4 and forbidden in OpenMetrics.
    assert!(strict("# just a comment\nm 1\n").samples.len() == 1);
    assert!(strict_err("# just a comment\n# EOF\n", OM)
        .message
        .contains("'#'"));
}

#[test]
fn grouping() {
    let e = strict_err("a 1\nb 1\na{x=\"y\"} 2\n", P);
    assert_eq!(e.line, 3);
    assert!(e.message.contains("not grouped"), "{e}");
    // A histogram's _bucket/_count/_sum are one family.
    let h =
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 1.5\n";
    assert_eq!(strict(h).samples.len(), 4);
    let e = strict_err(&format!("{h}other 1\nh_count 3\n"), P);
    assert!(e.message.contains("not grouped"), "{e}");
    // Label sets of one family may not interleave either.
    let e = strict_err(
        "# TYPE h histogram\nh_bucket{a=\"1\",le=\"+Inf\"} 1\nh_bucket{a=\"2\",le=\"+Inf\"} 1\nh_count{a=\"1\"} 1\n",
        P,
    );
    assert!(e.message.contains("same labels"), "{e}");
}

#[test]
fn histogram_rules() {
    let e = strict_err("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n", P);
    assert!(e.message.contains("+Inf"), "{e}");
    let e = strict_err(
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
        P,
    );
    assert!(e.message.contains("differs"), "{e}");
    let e = strict_err(
        "# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n",
        P,
    );
    assert!(e.message.contains("increasing order"), "{e}");
    let e = strict_err(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n",
        P,
    );
    assert!(e.message.contains("decrease"), "{e}");
    assert!(strict_err("# TYPE h histogram\nh_bucket 1\n", P)
        .message
        .contains("\"le\""));
    assert!(strict_err("# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", P)
        .message
        .contains("le"));
    // le spellings: any float spelling in 0.0.4; exactly "+Inf" in OpenMetrics.
    assert_eq!(
        strict("# TYPE h histogram\nh_bucket{le=\"1e-3\"} 0\nh_bucket{le=\"+inf\"} 0\n")
            .samples
            .len(),
        2
    );
    assert!(parse(
        "# TYPE h histogram\nh_bucket{le=\"+INF\"} 0\n# EOF\n",
        OM,
        Mode::Strict
    )
    .is_err());
    // Summaries: quantile label, increasing order.
    let e = strict_err(
        "# TYPE s summary\ns{quantile=\"0.9\"} 1\ns{quantile=\"0.5\"} 1\n",
        P,
    );
    assert!(e.message.contains("increasing"), "{e}");
    assert!(strict_err("# TYPE s summary\ns 1\n", P)
        .message
        .contains("quantile"));
}

#[test]
fn counters_never_negative() {
    assert!(strict_err("# TYPE c_total counter\nc_total -1\n", P)
        .message
        .contains("negative"));
    assert!(
        strict_err("# TYPE h histogram\nh_bucket{le=\"+Inf\"} -1\n", P)
            .message
            .contains("negative")
    );
    assert!(strict_err("# TYPE c counter\nc_total -1\n# EOF\n", OM)
        .message
        .contains("negative"));
    // A gauge may be negative.
    assert_eq!(strict("# TYPE g gauge\ng -1\n").samples[0].value, -1.0);
}

#[test]
fn openmetrics_unit_and_exemplars() {
    let ok = "# TYPE foo_seconds counter\n# UNIT foo_seconds seconds\n# HELP foo_seconds x\nfoo_seconds_total 1 # {trace_id=\"a\"} 0.5 1.5\n# EOF\n";
    let p = parse(ok, OM, Mode::Strict).unwrap();
    assert_eq!(p.samples.len(), 1);
    assert_eq!(p.samples[0].value, 1.0);
    assert!(
        strict_err("# TYPE foo counter\n# UNIT foo seconds\n# EOF\n", OM)
            .message
            .contains("_seconds")
    );
    assert!(strict_err("# TYPE g gauge\ng 1 # {a=\"b\"} 1\n# EOF\n", OM)
        .message
        .contains("exemplar"));
    // The scrape path ignores exemplars whatever they look like.
    let p = parse("g 1 # {a=\"b\"} 1\nh 2 # junk\n", OM, Mode::Lenient).unwrap();
    assert_eq!(p.samples.len(), 2);
}

#[test]
fn lenient_skips_and_counts() {
    let text = "good 1\nbad{ 2\nalso_good{a=\"b\"} 3\nbad value\n# comment\n\nlast 4";
    let p = lenient(text);
    assert_eq!(
        p.samples
            .iter()
            .map(|s| s.name.to_string())
            .collect::<Vec<_>>(),
        ["good", "also_good", "last"]
    );
    assert_eq!(p.skipped_lines, 2);
    let first = p.first_skipped.unwrap();
    assert_eq!(first.line, 2);
    // Strict stops at the first.
    assert_eq!(strict_err(text, P).line, 2);
}

#[test]
fn content_type_picks_the_format() {
    assert_eq!(
        Format::from_content_type("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        OM
    );
    assert_eq!(
        Format::from_content_type("Application/OpenMetrics-Text"),
        OM
    );
    assert_eq!(
        Format::from_content_type("text/plain; version=0.0.4; charset=utf-8"),
        P
    );
    assert_eq!(Format::from_content_type(""), P);
}

#[test]
fn real_vllm_page() {
    let text = fixture("fixtures/vllm-0.10-metrics.txt");
    let strict_page = parse(&text, P, Mode::Strict).unwrap();
    let page = lenient(&text);
    assert_eq!(page.samples.len(), 360);
    assert_eq!(strict_page.samples.len(), 360);
    assert_eq!(page.skipped_lines, 0);
    let get = |name: &str, label: Option<(&str, &str)>| {
        page.samples
            .iter()
            .find(|s| {
                s.name == name && label.is_none_or(|(k, v)| s.labels.get(k).as_deref() == Some(v))
            })
            .unwrap_or_else(|| panic!("{name}"))
            .value
    };
    assert_eq!(get("process_cpu_seconds_total", None), 14.040000000000001);
    assert_eq!(get("process_virtual_memory_bytes", None), 1.372014592e10);
    assert_eq!(
        get("vllm:gpu_cache_usage_perc", None),
        0.0011764705882353343
    );
    assert_eq!(get("vllm:kv_cache_usage_perc", None), 0.0011764705882353343);
    assert_eq!(get("vllm:time_to_first_token_seconds_count", None), 6.0);
    assert_eq!(
        get("vllm:time_to_first_token_seconds_sum", None),
        0.24629998207092285
    );
    assert_eq!(
        get(
            "vllm:time_to_first_token_seconds_bucket",
            Some(("le", "0.04"))
        ),
        4.0
    );
    assert_eq!(
        get(
            "vllm:time_per_output_token_seconds_bucket",
            Some(("le", "0.025"))
        ),
        1731.0
    );
    let info = page
        .samples
        .iter()
        .find(|s| s.name == "python_info")
        .unwrap();
    assert_eq!(info.labels.get("version").as_deref(), Some("3.12.3"));
    assert_eq!(info.labels.len(), 5);
    let waiting = page
        .samples
        .iter()
        .find(|s| s.name == "vllm:num_requests_waiting")
        .unwrap();
    assert_eq!(
        waiting.labels.get("model_name").as_deref(),
        Some("Qwen/Qwen3-4B-Instruct-2507-FP8")
    );
    assert_eq!(waiting.labels.get("engine").as_deref(), Some("0"));
}

#[test]
fn generated_pages() {
    for (file, samples) in [
        ("fixtures/multi-engine.prom", 1320),
        ("fixtures/multi-engine-next.prom", 1320),
        ("fixtures/large.prom", 7920),
        ("fixtures/escapes.prom", 240),
    ] {
        let text = fixture(file);
        assert_eq!(strict(&text).samples.len(), samples, "{file}");
        assert_eq!(lenient(&text).samples.len(), samples, "{file}");
    }
    let om = fixture("fixtures/multi-engine-next.om");
    let p = parse(&om, OM, Mode::Strict).unwrap();
    assert_eq!(p.samples.len(), 1320);
    // The OpenMetrics page has the same samples as the Prometheus one (minus the
    // _created gauges' name change) and the exemplars did not disturb the values.
    let prom = fixture("fixtures/multi-engine-next.prom");
    let pp = lenient(&prom);
    let total = |page: &Page<'_>, name: &str| -> f64 {
        page.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    };
    for name in [
        "vllm:prompt_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:num_requests_waiting",
    ] {
        assert_eq!(total(&p, name), total(&pp, name), "{name}");
        assert!(total(&p, name) > 0.0, "{name}");
    }
}

#[test]
fn escape_heavy_page() {
    let text = fixture("fixtures/escapes.prom");
    let p = strict(&text);
    let find = |path: &str| {
        p.samples
            .iter()
            .find(|s| s.labels.get("path").as_deref() == Some(path))
            .unwrap()
    };
    let s = find("C:\\Program Files\\vllm0");
    assert_eq!(s.labels.get("msg").as_deref(), Some("say \"hi\""));
    assert_eq!(s.labels.get("unicode").as_deref(), Some("Grüße 10€"));
    let s = find("/a/b3");
    assert_eq!(s.labels.get("msg").as_deref(), Some("line1\nline2"));
    assert_eq!(s.value, 103.5);
    let s = find("\\7");
    assert_eq!(s.labels.get("msg").as_deref(), Some("\""));
    assert_eq!(s.labels.get("unicode").as_deref(), Some("\n"));
    let s = find("trailing\\0");
    assert_eq!(s.labels.get("msg").as_deref(), Some("{not=\"labels\"}"));
    assert_eq!(s.labels.get("unicode").as_deref(), Some("a # b"));
    let s = find("\\n is not a newline5");
    assert_eq!(s.labels.get("msg").as_deref(), Some("mix \\ \" \n all"));
}
