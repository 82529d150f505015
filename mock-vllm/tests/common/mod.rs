//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mock_vllm::{Config, MockVllm};

pub async fn start(cfg: Config) -> MockVllm {
    mock_vllm::start(cfg, mock_kit::Events::none("vllm:test"))
        .await
        .unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub async fn scrape(url: &str) -> String {
    client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Sum of every sample of `name` (exact metric name, any labels) on a text page.
pub fn sample_sum(page: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in page.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let metric = head.split('{').next().unwrap_or("");
        if metric == name {
            let v: f64 = value.parse().unwrap();
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// Poll `cond` every 5 ms until it holds or `limit` passes.
pub async fn until<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// Run `script` with the page on stdin under the real Python `prometheus_client`.
/// `None` (and a message) when python3 or prometheus_client is missing.
pub fn python(script: &str, page: &str) -> Option<Result<String, String>> {
    let probe = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => {
            eprintln!("SKIP: python3 with prometheus_client not available");
            return None;
        }
    }
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() {
        Some(Ok(stdout))
    } else {
        Some(Err(String::from_utf8_lossy(&out.stderr).to_string()))
    }
}

/// Family names and types, sorted, as prometheus_client's text parser sees them.
pub const FAMILIES_TEXT: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(sys.stdin.read()))
print("\n".join(sorted(f.name + " " + f.type for f in fams)))
"#;

/// The same with the strict OpenMetrics parser.
pub const FAMILIES_OPENMETRICS: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(sys.stdin.read()))
print("\n".join(sorted(f.name + " " + f.type for f in fams)))
"#;

/// Parse the page with prometheus_client's OpenMetrics parser and write the families
/// back with its own OpenMetrics writer (names as they are: `allow-utf-8` escaping where
/// the version has it). A page written as prometheus_client writes it comes back whole.
pub const ROUNDTRIP_OPENMETRICS: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.openmetrics import exposition
fams = list(text_string_to_metric_families(sys.stdin.read()))
class Fams:
    def collect(self):
        return fams
try:
    out = exposition.generate_latest(Fams(), escaping="allow-utf-8")
except TypeError:
    out = exposition.generate_latest(Fams())
sys.stdout.write(out.decode())
"#;

/// The same through the Prometheus text parser and writer (format 0.0.4).
pub const ROUNDTRIP_TEXT: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import exposition
fams = list(text_string_to_metric_families(sys.stdin.read()))
class Fams:
    def collect(self):
        return fams
try:
    out = exposition.generate_latest(Fams(), escaping="allow-utf-8")
except TypeError:
    out = exposition.generate_latest(Fams())
sys.stdout.write(out.decode())
"#;

/// prometheus_client before 0.2x wrote exponents of 10 and more as `e+010`
/// (`{dot - 1}` after a literal 0), as on the real 0.10 page; newer ones write `e+10`.
/// Rewrite the old form so pages of either version compare.
pub fn new_exponents(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.find("e+0") {
        let after = &rest[at + 3..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at + 2]);
        if digits < 2 {
            out.push('0');
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

pub async fn complete(url: &str, body: serde_json::Value) -> reqwest::Response {
    client()
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
}
