//! Conformance: the OpenMetrics project's own parser suite, and the cases of Prometheus'
//! text parser tests (`model/textparse/promparse_test.go`, `openmetricsparse_test.go`
//! in prometheus/prometheus), restated here as facts about inputs and outputs.

use std::path::Path;

use sidecar::prom::{parse, Format, Mode};

fn suite_dir(kind: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openmetrics-suite")
        .join(kind)
}

fn cases(kind: &str) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(suite_dir(kind))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn openmetrics_suite_good_cases_parse() {
    let good = cases("good");
    assert!(good.len() >= 40);
    let mut failures = Vec::new();
    for (name, bytes) in &good {
        let text = std::str::from_utf8(bytes).expect("suite files are UTF-8");
        if let Err(e) = parse(text, Format::OpenMetrics, Mode::Strict) {
            failures.push(format!("{name}: {e}"));
        }
        // The lenient path takes every valid page whole.
        let page = parse(text, Format::OpenMetrics, Mode::Lenient).unwrap();
        assert_eq!(page.skipped_lines, 0, "{name}");
    }
    assert!(
        failures.is_empty(),
        "valid expositions rejected:\n{}",
        failures.join("\n")
    );
}

#[test]
fn openmetrics_suite_bad_cases_fail() {
    let bad = cases("bad");
    assert!(bad.len() >= 160);
    let mut accepted = Vec::new();
    for (name, bytes) in &bad {
        // Invalid UTF-8 would be rejected before parsing (the input is a &str).
        let Ok(text) = std::str::from_utf8(bytes) else {
            continue;
        };
        if parse(text, Format::OpenMetrics, Mode::Strict).is_ok() {
            accepted.push(name.clone());
        }
        // Lenient never fails and never panics.
        assert!(parse(text, Format::OpenMetrics, Mode::Lenient).is_ok());
    }
    assert!(
        accepted.is_empty(),
        "invalid expositions accepted: {accepted:?}"
    );
}

/// Facts from `TestPromParse` (promparse_test.go).
#[test]
fn prometheus_parser_cases() {
    let input = concat!(
        "# HELP go_gc_duration_seconds A summary of the GC invocation durations.\n",
        "# \tTYPE go_gc_duration_seconds summary\n",
        "go_gc_duration_seconds{quantile=\"0\"} 4.9351e-05\n",
        "go_gc_duration_seconds{quantile=\"0.25\",} 7.424100000000001e-05\n",
        "go_gc_duration_seconds{quantile=\"0.5\",a=\"b\"} 8.3835e-05\n",
        "go_gc_duration_seconds{quantile=\"0.8\", a=\"b\"} 8.3835e-05\n",
        "go_gc_duration_seconds{ quantile=\"0.9\", a=\"b\"} 8.3835e-05\n",
        "# Hrandom comment starting with prefix of HELP\n",
        "#\n",
        "wind_speed{A=\"2\",c=\"3\"} 12345\n",
        "# comment with escaped \\n newline\n",
        "# comment with escaped \\ escape character\n",
        "# HELP nohelp1\n",
        "# HELP nohelp2 \n",
        "go_gc_duration_seconds_count 99\n",
        "some:aggregate:rate5m{a_b=\"c\"}\t1\n",
        "# HELP go_goroutines Number of goroutines that currently exist.\n",
        "# TYPE go_goroutines gauge\n",
        "go_goroutines 33  \t123123\n",
        "_metric_starting_with_underscore 1\n",
        "testmetric{_label_starting_with_underscore=\"foo\"} 1\n",
        "testmetric{label=\"\\\"bar\\\"\"} 1\n",
        "# HELP metric foo\u{0}bar\n",
        "null_byte_metric{a=\"abc\u{0}\"} 1\n",
    );
    // Promparse does not check grouping; the format does ("all lines for a given metric
    // must be provided as one single group"), so strict refuses the page at the point
    // where go_gc_duration_seconds' family resumes after wind_speed.
    let err = parse(input, Format::Prometheus, Mode::Strict).unwrap_err();
    assert_eq!(err.line, 15, "{err}");
    assert!(err.message.contains("not grouped"), "{err}");
    {
        let mode = Mode::Lenient;
        let page =
            parse(input, Format::Prometheus, mode).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let got: Vec<_> = page
            .samples
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.labels.to_vec(),
                    s.value,
                    s.timestamp_ms,
                )
            })
            .collect();
        let l = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let want = vec![
            (
                "go_gc_duration_seconds".to_string(),
                l(&[("quantile", "0")]),
                4.9351e-05,
                None,
            ),
            (
                "go_gc_duration_seconds".into(),
                l(&[("quantile", "0.25")]),
                7.424100000000001e-05,
                None,
            ),
            (
                "go_gc_duration_seconds".into(),
                l(&[("quantile", "0.5"), ("a", "b")]),
                8.3835e-05,
                None,
            ),
            (
                "go_gc_duration_seconds".into(),
                l(&[("quantile", "0.8"), ("a", "b")]),
                8.3835e-05,
                None,
            ),
            (
                "go_gc_duration_seconds".into(),
                l(&[("quantile", "0.9"), ("a", "b")]),
                8.3835e-05,
                None,
            ),
            (
                "wind_speed".into(),
                l(&[("A", "2"), ("c", "3")]),
                12345.0,
                None,
            ),
            ("go_gc_duration_seconds_count".into(), vec![], 99.0, None),
            (
                "some:aggregate:rate5m".into(),
                l(&[("a_b", "c")]),
                1.0,
                None,
            ),
            ("go_goroutines".into(), vec![], 33.0, Some(123123)),
            ("_metric_starting_with_underscore".into(), vec![], 1.0, None),
            (
                "testmetric".into(),
                l(&[("_label_starting_with_underscore", "foo")]),
                1.0,
                None,
            ),
            ("testmetric".into(), l(&[("label", "\"bar\"")]), 1.0, None),
            (
                "null_byte_metric".into(),
                l(&[("a", "abc\u{0}")]),
                1.0,
                None,
            ),
        ];
        assert_eq!(got, want, "{mode:?}");
    }
}

/// `go_gc_duration_seconds { quantile="1.0", a="b" }`: blanks around and inside braces.
#[test]
fn prometheus_blank_variants() {
    for line in [
        "m{ quantile=\"1.0\", a=\"b\" } 8.3835e-05\n",
        "m { quantile=\"1.0\", a=\"b\" } 8.3835e-05\n",
        "m { quantile= \"1.0\", a= \"b\", } 8.3835e-05\n",
        "m { quantile = \"1.0\", a = \"b\" } 8.3835e-05\n",
    ] {
        let p = parse(line, Format::Prometheus, Mode::Strict).unwrap();
        assert_eq!(p.samples[0].labels.get("a").as_deref(), Some("b"), "{line}");
    }
    // Promparse accepts a missing comma between labels ("appears to be unintended");
    // strict refuses it, lenient takes it.
    let line = "m { quantile = \"2.0\" a = \"b\" } 1\n";
    assert!(parse(line, Format::Prometheus, Mode::Strict).is_err());
    let p = parse(line, Format::Prometheus, Mode::Lenient).unwrap();
    assert_eq!(p.samples[0].labels.len(), 2);
}

/// `TestUTF8PromParse`: quoted names (the current 0.0.4 text also allows them).
#[test]
fn prometheus_quoted_utf8_names() {
    let input = concat!(
        "# HELP \"go.gc_duration_seconds\" A summary of the GC invocation durations.\n",
        "# \tTYPE \"go.gc_duration_seconds\" summary\n",
        "{\"go.gc_duration_seconds\",quantile=\"0\"} 4.9351e-05\n",
        "{\"go.gc_duration_seconds\",quantile=\"0.25\",} 7.424100000000001e-05\n",
        "{\"go.gc_duration_seconds_count\"} 99\n",
        "{ \"go.gc_duration_seconds\", quantile = \"1.0\", a = \"b\" } 8.3835e-05\n",
        "{\"Heizölrückstoßabdämpfung 10€ metric with \\\"interesting\\\" {character\\nchoices}\",\"strange©™\\n'quoted' \\\"name\\\"\"=\"6\"} 10.0\n",
    );
    let page = parse(input, Format::Prometheus, Mode::Strict).unwrap();
    assert_eq!(page.samples.len(), 5);
    assert_eq!(page.samples[0].name, "go.gc_duration_seconds");
    assert_eq!(page.samples[3].labels.get("a").as_deref(), Some("b"));
    assert_eq!(page.samples[2].name, "go.gc_duration_seconds_count");
    let last = &page.samples[4];
    assert_eq!(
        last.name,
        "Heizölrückstoßabdämpfung 10€ metric with \"interesting\" {character\nchoices}"
    );
    assert_eq!(
        last.labels.to_vec(),
        vec![("strange©™\n'quoted' \"name\"".to_string(), "6".to_string())]
    );
}

/// `TestPromParseErrors` and `TestPromNullByteHandling`: each input is an error.
#[test]
fn prometheus_parse_errors() {
    for input in [
        "a",
        "a{b='c'} 1\n",
        "a{b=\n",
        "a{\u{ff}=\"foo\"} 1\n",
        "{\"a\", \"b = \"c\"}",
        "{\"a\",b\\nc=\"d\"} 1",
        "a true\n",
        "something_weird{problem=\"",
        "empty_label_name{=\"\"} 0",
        "foo 1_2\n",
        "foo 0x1p-3\n",
        "foo 0x1P-3\n",
        "foo 0 1_2\n",
        "{a=\"ok\"} 1",
        "# TYPE #\n#EOF\n",
        "# HELP #\n#EOF\n",
        "a{b=\u{0}\"ssss\"} 1\n",
        "a{b=\"\u{0}",
        "a{b\u{0}=\"hiih\"}\t1",
        "a\u{0}{b=\"ddd\"} 1",
        "a 0 1\u{0}",
    ] {
        let err = parse(input, Format::Prometheus, Mode::Strict);
        assert!(err.is_err(), "accepted {input:?}");
        let lenient = parse(input, Format::Prometheus, Mode::Lenient).unwrap();
        assert!(
            lenient.samples.is_empty() || input.starts_with('#'),
            "{input:?}"
        );
    }
    // NUL inside a label value is fine.
    for input in [
        "null_byte_metric{a=\"abc\u{0}\"} 1",
        "a{b=\"\u{0}ss\"} 1\n",
        "a{b=\"\u{0}\"} 1\n",
    ] {
        assert!(
            parse(input, Format::Prometheus, Mode::Strict).is_ok(),
            "{input:?}"
        );
    }
}

/// Facts from `TestOpenMetricsParse` (openmetricsparse_test.go): exemplars, UNIT,
/// float timestamps in seconds, `# EOF`.
#[test]
fn openmetrics_parser_cases() {
    let input = concat!(
        "# HELP go_gc_duration_seconds A summary of the GC invocation durations.\n",
        "# TYPE go_gc_duration_seconds summary\n",
        "# UNIT go_gc_duration_seconds seconds\n",
        "go_gc_duration_seconds{quantile=\"0\"} 4.9351e-05\n",
        "go_gc_duration_seconds{quantile=\"0.25\"} 7.424100000000001e-05\n",
        "go_gc_duration_seconds{quantile=\"0.5\",a=\"b\"} 8.3835e-05\n",
        "# HELP nohelp1 \n",
        "# HELP help2 escape \\ \\n \\\\ \\\" \\x chars\n",
        "# UNIT nounit \n",
        "go_gc_duration_seconds{quantile=\"1.0\",a=\"b\"} 8.3835e-05\n",
        "go_gc_duration_seconds_count 99\n",
        "some:aggregate:rate5m{a_b=\"c\"} 1\n",
        "# HELP go_goroutines Number of goroutines that currently exist.\n",
        "# TYPE go_goroutines gauge\n",
        "go_goroutines 33 123.123\n",
        "# TYPE hh histogram\n",
        "hh_bucket{le=\"+Inf\"} 1\n",
        "# TYPE gh gaugehistogram\n",
        "gh_bucket{le=\"+Inf\"} 1\n",
        "# TYPE hhh histogram\n",
        "hhh_bucket{le=\"+Inf\"} 1 # {id=\"histogram-bucket-test\"} 4\n",
        "hhh_count 1 # {id=\"histogram-count-test\"} 4\n",
        "# EOF\n",
    );
    // As in the Prometheus case, the Go test interleaves a family (line 10 resumes
    // go_gc_duration_seconds after nohelp1/nounit): strict refuses that.
    let err = parse(input, Format::OpenMetrics, Mode::Strict).unwrap_err();
    assert_eq!(err.line, 10, "{err}");
    let lenient = parse(input, Format::OpenMetrics, Mode::Lenient).unwrap();
    assert_eq!(lenient.samples.len(), 11);
    assert_eq!(lenient.skipped_lines, 0);
    let gor = lenient
        .samples
        .iter()
        .find(|s| s.name == "go_goroutines")
        .unwrap();
    assert_eq!(gor.value, 33.0);
    assert_eq!(gor.timestamp_ms, Some(123_123));

    // Exemplars: on histogram buckets yes, on _count no (OpenMetrics 1.0).
    let tail = |extra: &str| {
        format!(
            "# TYPE hhh histogram\nhhh_bucket{{le=\"+Inf\"}} 1 # {{id=\"histogram-bucket-test\"}} 4\n{extra}# EOF\n"
        )
    };
    assert!(parse(&tail(""), Format::OpenMetrics, Mode::Strict).is_ok());
    let err = parse(
        &tail("hhh_count 1 # {id=\"histogram-count-test\"} 4\n"),
        Format::OpenMetrics,
        Mode::Strict,
    )
    .unwrap_err();
    assert!(err.message.contains("exemplar"), "{err}");
    assert_eq!(err.line, 3);
}

#[test]
fn openmetrics_eof_rules() {
    assert!(parse("a 1\n", Format::OpenMetrics, Mode::Strict).is_err());
    assert!(parse("a 1\n# EOF", Format::OpenMetrics, Mode::Strict).is_ok());
    assert!(parse("a 1\n# EOF\n", Format::OpenMetrics, Mode::Strict).is_ok());
    let e = parse("a 1\n# EOF\n\n", Format::OpenMetrics, Mode::Strict).unwrap_err();
    assert_eq!(e.line, 3);
    // Lenient: stops at # EOF, counts what follows.
    let p = parse("a 1\n# EOF\nb 2\n", Format::OpenMetrics, Mode::Lenient).unwrap();
    assert_eq!(p.samples.len(), 1);
    assert_eq!(p.skipped_lines, 1);
}
