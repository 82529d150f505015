//! Memory on hostile bodies: a few MB of tiny JSON objects (in an unknown field, or as
//! txn ops) must cost the fake about the body's size, not a tree of it. Runs the
//! `mock-etcd` binary as a child and reads its peak RSS (`VmHWM`) before and after.
//! A resource bound, not a speed assert.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Allowed growth of the peak RSS over all the bodies below (each about 3 MB).
const BOUND_KIB: u64 = 16 * 1024;

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Peak resident set of a process, in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// `{"create_request":{"key":"Zm9v"},"x":[{},{},…]}` of about `bytes` bytes.
fn tiny_objects(prefix: &str, suffix: &str, bytes: usize) -> String {
    let n = bytes.saturating_sub(prefix.len() + suffix.len()) / 3;
    let mut s = String::with_capacity(bytes + 8);
    s.push_str(prefix);
    for i in 0..n {
        s.push_str(if i == 0 { "{}" } else { ",{}" });
    }
    s.push_str(suffix);
    s
}

async fn start() -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-etcd"))
        .args(["--listen", "127.0.0.1:0", "--no-control"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Killed(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(10), line)
        .await
        .expect("address within 10 s")
        .unwrap()
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("address line");
    (child, format!("http://{addr}"))
}

/// Post a watch body and wait (bounded) for its first answer line.
async fn watch_first_line(http: &reqwest::Client, url: &str, body: String) -> String {
    let mut resp = http
        .post(format!("{url}/v3/watch"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while !got.contains(&b'\n') {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(c))) => got.extend_from_slice(&c),
            other => panic!("no watch answer: {other:?}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_object_bodies_cost_about_their_size() {
    let (child, url) = start().await;
    let pid = child.0.id();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Warm up every path once with small bodies, so the baseline holds the runtime.
    let small = r#"{"create_request":{"key":"Zm9v"},"x":[{}]}"#.to_string();
    watch_first_line(&http, &url, small).await;
    for (path, body) in [
        ("/v3/kv/range", r#"{"key":"Zm9v","x":[{}]}"#),
        ("/v3/kv/txn", r#"{"success":[{}]}"#),
    ] {
        http.post(format!("{url}{path}"))
            .body(body)
            .send()
            .await
            .unwrap();
    }
    let before = vm_hwm_kib(pid);

    // 3 MB of `{}` in an unknown field of a watch message (the stream cap is 3 MiB).
    let body = tiny_objects(r#"{"create_request":{"key":"Zm9v"},"x":["#, "]}", 3_000_000);
    let first = watch_first_line(&http, &url, body).await;
    assert!(first.contains(r#""created":true"#), "{first}");
    // The same in a unary range, and as a million empty txn ops.
    let body = tiny_objects(r#"{"key":"Zm9v","x":["#, "]}", 3_000_000);
    let r = http
        .post(format!("{url}/v3/kv/range"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = tiny_objects(r#"{"success":["#, "]}", 3_000_000);
    let r = http
        .post(format!("{url}/v3/kv/txn"))
        .body(body)
        .send()
        .await
        .unwrap();
    // As etcd: two protobuf bytes per empty op stay under gRPC's limit, then the count.
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("too many operations"), "{text}");

    let after = vm_hwm_kib(pid);
    let grown = after.saturating_sub(before);
    println!("peak RSS {before} KiB -> {after} KiB (+{grown} KiB)");
    assert!(
        grown < BOUND_KIB,
        "peak RSS grew by {grown} KiB (bound {BOUND_KIB} KiB): {before} -> {after}"
    );
}
