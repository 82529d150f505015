//! vLLM's `/metrics/` (with the trailing slash) is prometheus_client's own handler,
//! which picks the format from `Accept`: here the real one (`start_http_server`, the
//! same `choose_encoder` as the ASGI app vLLM mounts), serving vLLM's families. The
//! sidecar's scrape gets a page it reads; and the pages it would get with other
//! `Accept` values, OpenMetrics with names escaped by each of prometheus_client's
//! schemes, map to the same heartbeat. Skipped (with a message) without Python's
//! prometheus_client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sidecar::core::has_vllm_sample;
use sidecar::mapping::{LatencyStat, Mapper, MapperConfig};
use sidecar::peers::http::{build_client, Redirects};
use sidecar::peers::vllm::VllmClient;
use sidecar::prom::{self, Format, Mode};
use url::Url;

/// Two engines: 3 and 4 waiting, KV 0.25 and 0.75; TTFT observations per scrape
/// (`next` on stdin adds one of 0.5 s per engine).
const SERVER: &str = r#"
import sys
from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
r = CollectorRegistry()
L = ["model_name", "engine"]
w = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=r)
kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", L, registry=r)
ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
                 buckets=[0.1, 0.25, 0.5, 1.0], registry=r)
itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L,
                buckets=[0.01, 0.1], registry=r)
for e, (n, u) in enumerate([(3, 0.25), (4, 0.75)]):
    w.labels("m", str(e)).set(n)
    kv.labels("m", str(e)).set(u)
    ttft.labels("m", str(e)).observe(0.25)
    itl.labels("m", str(e)).observe(0.01)
server, _ = start_http_server(0, addr="127.0.0.1", registry=r)
print(server.server_port, flush=True)
for line in sys.stdin:
    for e in range(2):
        ttft.labels("m", str(e)).observe(0.5)
        itl.labels("m", str(e)).observe(0.05)
    print("ok", flush=True)
"#;

struct Exporter {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    port: u16,
}

impl Exporter {
    fn start() -> Option<Exporter> {
        let probe = Command::new("python3")
            .args(["-c", "import prometheus_client"])
            .output();
        if !matches!(probe, Ok(o) if o.status.success()) {
            eprintln!("SKIP: python3 with prometheus_client not available");
            return None;
        }
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap().trim().parse().unwrap();
        Some(Exporter { child, lines, port })
    }

    /// One more TTFT and inter-token observation per engine; back once recorded.
    fn next(&mut self) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"next\n").unwrap();
        stdin.flush().unwrap();
        assert_eq!(self.lines.next().unwrap().unwrap(), "ok");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics/", self.port)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A page fetched with `accept`, and its content type.
async fn fetch(url: &str, accept: &str) -> (String, String) {
    let resp = reqwest::Client::new()
        .get(url)
        .header("accept", accept)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    (resp.text().await.unwrap(), ct)
}

fn mapper() -> Mapper {
    Mapper::new(MapperConfig {
        latency_stat: LatencyStat::Avg,
        model: None,
    })
}

/// The heartbeat of two scrapes of `page_at` (before and after one more observation),
/// checked against what the registry holds.
fn check_two_scrapes(what: &str, first: &str, second: &str, format: Format) {
    for page in [first, second] {
        assert!(has_vllm_sample(page), "{what}: {page}");
        let parsed = prom::parse(page, format, Mode::Lenient).unwrap();
        assert_eq!(parsed.skipped_lines, 0, "{what}");
    }
    let mut m = mapper();
    let a = m.observe_text(first, format);
    assert_eq!(a.load_metrics.waiting_requests_num, 7, "{what}");
    assert_eq!(a.load_metrics.gpu_cache_usage_perc, 0.5, "{what}");
    let b = m.observe_text(second, format);
    assert_eq!(b.latency_metrics.recent_max_ttft, 500, "{what}");
    assert_eq!(b.latency_metrics.recent_max_tbt, 50, "{what}");
    // The parsed page maps the same.
    let mut m = mapper();
    m.observe(&prom::parse(first, format, Mode::Lenient).unwrap());
    let c = m.observe(&prom::parse(second, format, Mode::Lenient).unwrap());
    assert_eq!(c, b, "{what}");
}

#[tokio::test]
async fn the_sidecars_accept_gets_vllms_names_from_the_negotiating_handler() {
    let Some(mut exporter) = Exporter::start() else {
        return;
    };
    let client = VllmClient::new(
        build_client(Redirects::Follow).unwrap(),
        &Url::parse(&format!("http://127.0.0.1:{}", exporter.port)).unwrap(),
        Url::parse(&exporter.url()).unwrap(),
        Duration::from_secs(10),
        Duration::from_secs(10),
        1 << 20,
    );
    let first = client.fetch_metrics().await.unwrap();
    exporter.next();
    let second = client.fetch_metrics().await.unwrap();
    assert!(!first.openmetrics);
    assert!(
        first.text.contains("\nvllm:num_requests_waiting{"),
        "{}",
        first.text
    );
    check_two_scrapes("sidecar", &first.text, &second.text, Format::Prometheus);
}

#[tokio::test]
async fn escaped_openmetrics_pages_map_like_the_named_page() {
    let Some(mut exporter) = Exporter::start() else {
        return;
    };
    let url = exporter.url();
    let cases = [
        // What the sidecar asked for before: the first type the handler knows is
        // OpenMetrics, written with the default `underscores` escaping.
        (
            "text/plain;version=0.0.4;q=1.0, application/openmetrics-text;version=1.0.0;q=0.5, */*;q=0.1",
            "underscores",
            "\nvllm_num_requests_waiting{",
        ),
        (
            "application/openmetrics-text;version=1.0.0;escaping=dots",
            "dots",
            "\nvllm__num__requests__waiting{",
        ),
        (
            "application/openmetrics-text;version=1.0.0;escaping=values",
            "values",
            "\nU__vllm_3a_num__requests__waiting{",
        ),
    ];
    let mut firsts = Vec::new();
    for (accept, scheme, _) in cases {
        firsts.push(fetch(&url, accept).await);
        assert!(firsts.last().unwrap().1.ends_with(scheme), "{scheme}");
    }
    exporter.next();
    for ((accept, scheme, name), (first, ct)) in cases.into_iter().zip(firsts) {
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        assert!(first.contains(name), "{scheme}: {first}");
        let (second, _) = fetch(&url, accept).await;
        check_two_scrapes(scheme, &first, &second, Format::OpenMetrics);
    }
}
