//! Resource bounds of the real binary: a hostile body under the size cap must not cost
//! more memory than a few times its own size. Peak RSS (VmHWM) of the child process is
//! read before and after; this is a bound on memory, not on speed.

use std::process::Child;
use std::time::Duration;

#[path = "support/process.rs"]
mod process;

/// The child's peak resident set, in KiB, from /proc/PID/status.
fn peak_kib(child: &Child) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `{"prompt":"a","max_tokens":1,"junk":[{"a":0},{"a":0},...]}`: 500k tiny objects,
/// about 4 MB, under the 4 MiB cap.
fn hostile_body(path: &str) -> String {
    let head = if path.contains("chat") {
        r#"{"messages":[{"role":"user","content":"a"}],"max_tokens":1,"junk":["#
    } else {
        r#"{"prompt":"a","max_tokens":1,"junk":["#
    };
    let mut body = String::with_capacity(4_100_000);
    body.push_str(head);
    for i in 0..500_000 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(r#"{"a":0}"#);
    }
    body.push_str("]}");
    assert!(body.len() < 4 * 1024 * 1024);
    body
}

#[test]
fn unknown_fields_of_tiny_objects_cost_no_tree() {
    let vllm = process::start(&["--listen", "127.0.0.1:0", "--prefill-overhead-ms", "0"]);
    let url = format!("http://{}", vllm.addr);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let post = |path: &str, body: String| {
        let req = client
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body);
        rt.block_on(async { req.send().await.unwrap().status().as_u16() })
    };
    // Warm up every path first, so the baseline holds the server's own working set.
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let small = hostile_body(path).replace(r#"{"a":0},"#, "");
        assert_eq!(post(path, small), 200);
    }
    let before = peak_kib(&vllm.child);
    for path in ["/v1/completions", "/v1/chat/completions"] {
        for _ in 0..2 {
            assert_eq!(post(path, hostile_body(path)), 200, "{path}");
        }
    }
    let after = peak_kib(&vllm.child);
    let grown_mib = (after.saturating_sub(before)) as f64 / 1024.0;
    eprintln!("peak RSS {before} KiB -> {after} KiB (+{grown_mib:.1} MiB)");
    assert!(
        grown_mib < 24.0,
        "four 4 MB bodies grew the peak by {grown_mib:.1} MiB"
    );
}
