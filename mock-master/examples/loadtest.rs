//! Heartbeat load test: many concurrent keep-alive clients on loopback against one
//! mock-master, bounded in count and time; prints heartbeats/s and latency percentiles.
//!
//! `cargo run --release -p mock-master --example loadtest [-- CLIENTS MAX_REQUESTS MAX_SECS]`
//!
//! It starts a real `etcd` (through `local-etcd`: temp data dir, loopback ports) so the
//! heartbeats hit registered instances (200 path: token check, protobuf-JSON parse,
//! registry update). Clients and server share the machine's cores, as they would on a
//! 2-core box. Each client is a raw HTTP/1.1 connection, so the client costs little.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const INSTANCES: usize = 64;
const TOKEN: &str = "loadtest-token";

async fn put(http: &reqwest::Client, etcd: &str, key: &str, value: &str) -> bool {
    http.post(format!("{etcd}/v3/kv/put"))
        .json(&serde_json::json!({"key": B64.encode(key), "value": B64.encode(value)}))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// One raw keep-alive client: send heartbeats until `deadline` or `budget` runs out.
async fn client(
    addr: SocketAddr,
    requests: Vec<Vec<u8>>,
    deadline: Instant,
    budget: usize,
) -> (Vec<u32>, usize) {
    let mut lat = Vec::with_capacity(budget.min(1 << 20));
    let mut errors = 0;
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return (lat, 1);
    };
    let _ = conn.set_nodelay(true);
    let mut buf = vec![0u8; 4096];
    let mut i = 0;
    while i < budget && Instant::now() < deadline {
        let req = &requests[i % requests.len()];
        let t = Instant::now();
        if conn.write_all(req).await.is_err() {
            errors += 1;
            break;
        }
        // Read one response: headers, then Content-Length bytes of body.
        let mut filled = 0;
        let complete = loop {
            match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf[filled..])).await
            {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break false,
                Ok(Ok(n)) => filled += n,
            }
            let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") else {
                if filled == buf.len() {
                    break false;
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if filled >= end + 4 + len {
                break head.starts_with("http/1.1 200");
            }
        };
        lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
        if !complete {
            errors += 1;
        }
        i += 1;
    }
    (lat, errors)
}

/// CPU seconds (user + system) this process used so far, from /proc (Linux); 0 elsewhere.
/// With clients and server in one process, requests per CPU second tells what the
/// machine could do with its cores to itself, even when other work shares them.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the ")" that closes the command name; utime and stime are 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Counted from field 3 (state) on; clock ticks are 100 per second on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[idx.min(sorted.len() - 1)]) / 1000.0
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let clients = args.first().copied().unwrap_or(64).clamp(1, 4096);
    let max_requests = args.get(1).copied().unwrap_or(600_000);
    let max_secs = args.get(2).copied().unwrap_or(15).clamp(1, 120);

    // A real etcd on loopback (see `local-etcd`), gone with this process.
    let started = tokio::task::spawn_blocking(local_etcd::Cluster::start_one).await;
    let etcd = match started.map_err(|e| e.to_string()) {
        Ok(Ok(etcd)) => etcd,
        Ok(Err(e)) => {
            eprintln!("loadtest: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("loadtest: {e}");
            std::process::exit(1);
        }
    };
    let etcd_url = etcd.url();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let t0 = Instant::now();
    while !put(&http, &etcd_url, "probe", "x").await {
        if t0.elapsed() > Duration::from_secs(10) {
            eprintln!("loadtest: etcd did not start");
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let names: Vec<String> = (0..INSTANCES)
        .map(|i| format!("10.1.{}.{}:8000", i / 250, i % 250))
        .collect();
    for n in &names {
        let v = serde_json::json!({"name": n, "rpc_address": n, "type": 0, "backend_type": "vllm",
            "incarnation_id": format!("{n}-inc"), "register_ts_ms": 1});
        put(
            &http,
            &etcd_url,
            &format!("XLLM:DEFAULT:{n}"),
            &v.to_string(),
        )
        .await;
    }
    let config = mock_master::Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        etcd_endpoints: vec![etcd_url.clone()],
        token: Some(TOKEN.to_string()),
        ..Default::default()
    };
    let master = mock_master::start(config, mock_kit::Events::none("master"))
        .await
        .unwrap();
    assert_eq!(
        master.instances().len(),
        INSTANCES,
        "instances not learned from etcd"
    );
    let addr = master.addr();

    let requests: Vec<Vec<u8>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let body = format!(
                r#"{{"name":"{n}","incarnation_id":"{n}-inc","load_metrics":{{"waiting_requests_num":{},"gpu_cache_usage_perc":0.{}}},"latency_metrics":{{"recent_max_ttft":120,"recent_max_tbt":15}}}}"#,
                i % 7,
                i % 10
            );
            format!(
                "POST /v1/internal/heartbeat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Internal-Token: {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .collect();

    // Warm-up: one second, not measured.
    let warm = Instant::now() + Duration::from_secs(1);
    let mut tasks = Vec::new();
    for c in 0..clients.min(16) {
        let mut reqs = requests.clone();
        reqs.rotate_left(c % requests.len());
        tasks.push(tokio::spawn(client(addr, reqs, warm, usize::MAX)));
    }
    for t in tasks {
        let _ = t.await;
    }
    master.reset();

    let per_client = max_requests.div_ceil(clients);
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(max_secs as u64);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut reqs = requests.clone();
        reqs.rotate_left(c % requests.len());
        tasks.push(tokio::spawn(client(addr, reqs, deadline, per_client)));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((lat, e)) = t.await {
            all.extend(lat);
            errors += e;
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu_seconds() - cpu_before;
    all.sort_unstable();
    let rate = all.len() as f64 / elapsed.as_secs_f64();
    println!(
        "clients={clients} requests={} errors={errors} elapsed={:.2}s rate={:.0}/s p50={:.3}ms p90={:.3}ms p99={:.3}ms max={:.3}ms cores={}",
        all.len(),
        elapsed.as_secs_f64(),
        rate,
        pct(&all, 0.50),
        pct(&all, 0.90),
        pct(&all, 0.99),
        pct(&all, 1.0),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
    println!(
        "cpu={cpu:.2}s ({:.2} cores busy of {:.1}s wall) => {:.0} heartbeats per CPU-second (clients + server)",
        cpu / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        if cpu > 0.0 { all.len() as f64 / cpu } else { 0.0 },
    );
    println!("master answers: {:?}", master.heartbeat_counts());
    master.stop().await;
    drop(etcd);
}
