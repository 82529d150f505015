//! The `parse` and `preview` subcommands, run as the real binary.

#[path = "support/locate.rs"]
mod locate;
use locate::locate;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vllm-sidecar"))
}

fn fixture(rel: &str) -> PathBuf {
    locate(rel)
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn parse_prints_one_json_object_per_sample() {
    let out = run(
        &["parse", "-"],
        Some("a{x=\"1\",y=\"q\\\"\"} 1.5 123\nb NaN\nc +Inf\nd -Inf\n"),
    );
    assert!(out.status.success());
    let v = json_lines(&out);
    assert_eq!(v.len(), 4);
    assert_eq!(
        v[0],
        serde_json::json!({"name":"a","labels":{"x":"1","y":"q\""},"value":1.5,"timestamp_ms":123})
    );
    assert_eq!(v[1]["value"], "NaN");
    assert_eq!(v[2]["value"], "+Inf");
    assert_eq!(v[3]["value"], "-Inf");
    assert_eq!(v[3]["timestamp_ms"], serde_json::Value::Null);
}

#[test]
fn parse_the_real_page() {
    let f = fixture("fixtures/vllm-0.10-metrics.txt");
    let out = run(&["parse", "--strict", f.to_str().unwrap()], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_lines(&out);
    assert_eq!(v.len(), 360);
    assert_eq!(v[0]["name"], "python_gc_objects_collected_total");
    assert_eq!(v[0]["value"], 58027.0);
}

#[test]
fn strict_failure_exits_1_with_the_line() {
    let page = "ok 1\nbad{x=\"1\" 2\n";
    let out = run(&["parse", "--strict", "-"], Some(page));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
    assert!(out.stdout.is_empty());
    // Lenient: exit 0, the good sample out, the bad line reported.
    let out = run(&["parse", "-"], Some(page));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_lines(&out).len(), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped 1"));
    // OpenMetrics strict wants # EOF.
    let out = run(
        &["parse", "--strict", "--format", "openmetrics", "-"],
        Some("a 1\n"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EOF"));
    let out = run(
        &["parse", "--strict", "--format", "openmetrics", "-"],
        Some("a 1\n# EOF\n"),
    );
    assert_eq!(out.status.code(), Some(0));
}

/// A label name given twice is a bad line in lenient mode too (Prometheus rejects the
/// sample, prometheus_client's parser the line): never a JSON object with a key twice.
#[test]
fn lenient_parse_skips_a_line_with_a_repeated_label_name() {
    let many: String = (0..100).map(|i| format!("l{i}=\"v\",")).collect();
    for dup in [
        "b{x=\"1\",x=\"2\"} 2".to_string(),
        "b{x=\"1\",y=\"2\",\"x\"=\"3\"} 2".to_string(),
        format!("b{{{many}l50=\"again\"}} 2"),
    ] {
        for format in ["prometheus", "openmetrics"] {
            let page = format!("a{{x=\"1\"}} 1\n{dup}\nc{{x=\"1\",y=\"2\"}} 3\n");
            let out = run(&["parse", "--format", format, "-"], Some(&page));
            assert_eq!(out.status.code(), Some(0));
            let stdout = String::from_utf8(out.stdout.clone()).unwrap();
            assert!(!stdout.contains("\"b\""), "{format} {dup}: {stdout}");
            let names: Vec<_> = json_lines(&out)
                .iter()
                .map(|v| v["name"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(names, ["a", "c"], "{format} {dup}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("skipped 1 bad line(s); first: line 2: duplicate label name"),
                "{format} {dup}: {err}"
            );
        }
    }
}

#[test]
fn unreadable_input_and_bad_flags_exit_2() {
    let out = run(&["parse", "/nonexistent/page.txt"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/page.txt"));
    let out = run(&["parse", "--format", "xml", "-"], Some(""));
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["preview", "--latency-stat", "p42", "x"], None);
    assert_eq!(out.status.code(), Some(2));
}

/// Through the binary: a `_sum` that jumps to 1e300 is an implausible interval, so
/// `recent_max_ttft` is 0 (read naively it would be `i64::MAX`).
#[test]
fn preview_treats_an_implausible_interval_as_a_reset() {
    let dir = std::env::temp_dir().join(format!("sidecar-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = |sum: &str, count: u32| {
        let n = "vllm:time_to_first_token_seconds";
        format!("{n}_bucket{{le=\"+Inf\"}} {count}\n{n}_sum {sum}\n{n}_count {count}\n")
    };
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let before = write("before.prom", page("5", 10));
    for (sum, count, want) in [
        ("1e300", 12, 0),
        ("6", 12, 500),
        ("3605", 11, 3_600_000),
        ("3605.5", 11, 0),
    ] {
        let after = write("after.prom", page(sum, count));
        let out = run(
            &[
                "preview",
                "--previous",
                before.to_str().unwrap(),
                after.to_str().unwrap(),
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["latency_metrics"]["recent_max_ttft"], want, "sum {sum}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn preview_from_files() {
    let first = fixture("fixtures/multi-engine.prom");
    let next = fixture("fixtures/multi-engine-next.prom");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("fixtures/expected.json")).unwrap())
            .unwrap();
    let out = run(
        &[
            "preview",
            "--previous",
            first.to_str().unwrap(),
            next.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["latency_metrics"]["recent_max_ttft"],
        expected["all"]["ttft_ms"]["avg"]
    );
    assert_eq!(
        v["latency_metrics"]["recent_max_tbt"],
        expected["all"]["tbt_ms"]["avg"]
    );
    assert_eq!(
        v["load_metrics"]["waiting_requests_num"],
        expected["all"]["waiting_requests_num"]
    );
    let model = "meta-llama/Llama-3.1-8B-Instruct";
    let out = run(
        &[
            "preview",
            "--latency-stat",
            "p90",
            "--model",
            model,
            "--previous",
            first.to_str().unwrap(),
            next.to_str().unwrap(),
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["latency_metrics"]["recent_max_ttft"],
        expected[model]["ttft_ms"]["p90"]
    );
    // Without --previous: the first scrape, latencies 0.
    let out = run(&["preview", next.to_str().unwrap()], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["latency_metrics"],
        serde_json::json!({"recent_max_ttft":0,"recent_max_tbt":0})
    );
}

#[tokio::test]
async fn preview_from_urls_uses_the_content_type_and_caps_the_body() {
    let server = MockServer::start().await;
    let first = std::fs::read_to_string(fixture("fixtures/multi-engine.prom")).unwrap();
    let next_om = std::fs::read_to_string(fixture("fixtures/multi-engine-next.om")).unwrap();
    Mock::given(method("GET"))
        .and(path("/first"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(first, "text/plain; version=0.0.4"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/next"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            next_om,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/down"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let uri = server.uri();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("fixtures/expected.json")).unwrap())
            .unwrap();
    let args = [
        "preview".to_string(),
        "--previous".into(),
        format!("{uri}/first"),
        format!("{uri}/next"),
    ];
    let out = tokio::task::spawn_blocking(move || {
        run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["latency_metrics"]["recent_max_ttft"],
        expected["all"]["ttft_ms"]["avg"]
    );

    let args = [
        "preview".to_string(),
        "--max-bytes".into(),
        "1000".into(),
        format!("{uri}/next"),
    ];
    let out = tokio::task::spawn_blocking(move || {
        run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 1000"));

    let args = ["preview".to_string(), format!("{uri}/down")];
    let out = tokio::task::spawn_blocking(move || {
        run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("503"));
}
