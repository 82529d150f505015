//! Test helpers: a real etcd on loopback, raw gateway calls, stub instances, polling.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use mock_kit::events::RingSink;
use mock_kit::{Event, EventSink, Events};
use serde_json::{json, Value};

/// A real etcd on loopback (see `local-etcd`). It dies with the test process, even a
/// killed one, and is killed on drop.
pub struct RealEtcd {
    pub url: String,
    _cluster: local_etcd::Cluster,
}

/// Start a fresh etcd; `None` (with a message) when the binary is missing.
pub async fn start_etcd() -> Option<RealEtcd> {
    start_etcd_with("").await
}

/// [`start_etcd`] with extra command-line flags (e.g. `--auth-token-ttl 1`).
pub async fn start_etcd_with(extra: &str) -> Option<RealEtcd> {
    if let Some(why) = local_etcd::unavailable() {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let opts = local_etcd::Options {
        args: extra.split_whitespace().map(String::from).collect(),
        tag: "mock-master-etcd".into(),
        ..Default::default()
    };
    let cluster = tokio::task::spawn_blocking(move || local_etcd::Cluster::start(opts))
        .await
        .expect("etcd start-up task")
        .unwrap_or_else(|e| panic!("{e}"));
    Some(RealEtcd {
        url: cluster.url(),
        _cluster: cluster,
    })
}

/// A unique namespace per test, so tests can share one etcd.
pub fn unique_ns(tag: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "/t{}-{}-{tag}/",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Poll `cond` every 20 ms until it holds or `limit` passes.
pub async fn poll<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Raw gateway calls, independent of the crate's own client.
#[derive(Clone)]
pub struct Gw {
    pub url: String,
    http: reqwest::Client,
}

impl Gw {
    pub fn new(url: &str) -> Self {
        Gw {
            url: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        }
    }

    pub async fn call(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path} answered {}", r.status());
        r.json().await.unwrap()
    }

    pub async fn put(&self, key: &str, value: &str) -> i64 {
        let v = self
            .call(
                "/v3/kv/put",
                json!({"key": B64.encode(key), "value": B64.encode(value)}),
            )
            .await;
        rev(&v)
    }

    pub async fn put_leased(&self, key: &str, value: &str, lease: i64) {
        self.call(
            "/v3/kv/put",
            json!({"key": B64.encode(key), "value": B64.encode(value), "lease": lease.to_string()}),
        )
        .await;
    }

    pub async fn delete(&self, key: &str) -> i64 {
        let v = self
            .call("/v3/kv/deleterange", json!({"key": B64.encode(key)}))
            .await;
        rev(&v)
    }

    pub async fn get(&self, key: &str) -> Option<String> {
        let v = self
            .call("/v3/kv/range", json!({"key": B64.encode(key)}))
            .await;
        let kv = v.get("kvs")?.as_array()?.first()?.clone();
        let raw = B64
            .decode(kv.get("value").and_then(Value::as_str).unwrap_or(""))
            .unwrap();
        Some(String::from_utf8(raw).unwrap())
    }

    pub async fn grant(&self, ttl: i64) -> i64 {
        let v = self
            .call("/v3/lease/grant", json!({"TTL": ttl.to_string()}))
            .await;
        v["ID"].as_str().unwrap().parse().unwrap()
    }

    pub async fn revoke(&self, lease: i64) {
        self.call("/v3/lease/revoke", json!({"ID": lease.to_string()}))
            .await;
    }

    pub async fn compact(&self, revision: i64) {
        self.call(
            "/v3/kv/compaction",
            json!({"revision": revision.to_string(), "physical": true}),
        )
        .await;
    }

    pub async fn revision(&self) -> i64 {
        rev(&self
            .call("/v3/kv/range", json!({"key": B64.encode("\0")}))
            .await)
    }
}

fn rev(v: &Value) -> i64 {
    v["header"]["revision"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The value the sidecar writes for an instance.
pub fn reg_value(name: &str, ty: i64, incarnation: &str) -> String {
    json!({"name": name, "rpc_address": name, "type": ty, "backend_type": "vllm",
           "incarnation_id": incarnation, "register_ts_ms": 1764400000000u64})
    .to_string()
}

pub fn key(ns: &str, prefix: &str, name: &str) -> String {
    format!("{ns}XLLM:{prefix}:{name}")
}

/// A stub vLLM instance: `/health` answers `health` (0: close the connection without
/// answering is not possible in axum, so use a real status), completions answer the
/// stub's name, and every request is counted.
#[derive(Clone)]
pub struct Stub {
    pub name: String,
    pub health: Arc<AtomicU16>,
    pub health_calls: Arc<AtomicUsize>,
    pub completions: Arc<AtomicUsize>,
    pub model: String,
    stop: mock_kit::Shutdown,
}

impl Stub {
    pub async fn start(model: &str) -> Stub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let name = listener.local_addr().unwrap().to_string();
        let stub = Stub {
            name,
            health: Arc::new(AtomicU16::new(200)),
            health_calls: Arc::new(AtomicUsize::new(0)),
            completions: Arc::new(AtomicUsize::new(0)),
            model: model.to_string(),
            stop: mock_kit::Shutdown::new(),
        };
        let app = Router::new()
            .route("/health", get(stub_health))
            .route("/v1/models", get(stub_models))
            .route("/v1/completions", post(stub_completion))
            .route("/v1/chat/completions", post(stub_completion))
            .with_state(stub.clone());
        mock_kit::serve::spawn(listener, app, stub.stop.clone()).unwrap();
        stub
    }

    pub fn set_health(&self, status: u16) {
        self.health.store(status, Ordering::SeqCst);
    }

    pub fn stop(&self) {
        self.stop.trigger();
    }
}

async fn stub_health(State(s): State<Stub>) -> impl IntoResponse {
    s.health_calls.fetch_add(1, Ordering::SeqCst);
    StatusCode::from_u16(s.health.load(Ordering::SeqCst)).unwrap()
}

async fn stub_models(State(s): State<Stub>) -> impl IntoResponse {
    axum::Json(
        json!({"object": "list", "data": [{"id": s.model, "object": "model", "owned_by": "vllm"}]}),
    )
}

async fn stub_completion(
    State(s): State<Stub>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    s.completions.fetch_add(1, Ordering::SeqCst);
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if req["stream"] == json!(true) {
        let name = s.name.clone();
        let chunks = (0..3).map(move |i| {
            Ok::<_, std::convert::Infallible>(format!(
                "data: {{\"served_by\":\"{name}\",\"i\":{i}}}\n\n"
            ))
        });
        let done = std::iter::once(Ok("data: [DONE]\n\n".to_string()));
        let stream = futures_util::stream::iter(chunks.chain(done));
        return (
            [("content-type", "text/event-stream")],
            axum::body::Body::from_stream(stream),
        )
            .into_response();
    }
    axum::Json(json!({"served_by": s.name, "echo": req})).into_response()
}

/// Events into a ring the test can read.
pub fn ring_events() -> (Events, Arc<RingSink>) {
    let ring = RingSink::new(100_000);
    (
        Events::new("master", Some(ring.clone() as Arc<dyn EventSink>)),
        ring,
    )
}

/// `state` events for `name`, as (from, to) pairs.
pub fn transitions(ring: &RingSink, name: &str) -> Vec<(String, String)> {
    ring.snapshot()
        .into_iter()
        .filter(|e: &Event| e.kind == "state" && e.detail["name"] == json!(name))
        .map(|e| {
            (
                e.detail["from"].as_str().unwrap_or("").to_string(),
                e.detail["to"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// POST a heartbeat; answers (status, body).
pub async fn beat(master: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{master}/v1/internal/heartbeat"))
        .timeout(Duration::from_secs(5))
        .json(&body);
    if let Some(t) = token {
        req = req.header("X-Internal-Token", t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    (status, r.json().await.unwrap())
}

pub fn hb(name: &str, incarnation: &str, waiting: u64, usage: f64) -> Value {
    json!({"name": name, "incarnation_id": incarnation,
           "load_metrics": {"waiting_requests_num": waiting, "gpu_cache_usage_perc": usage},
           "latency_metrics": {"recent_max_ttft": 12, "recent_max_tbt": 3}})
}

/// Short durations for tests.
pub fn fast_config(etcd_url: &str, ns: &str) -> mock_master::Config {
    mock_master::Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        etcd_endpoints: vec![etcd_url.to_string()],
        etcd_namespace: ns.to_string(),
        probe_attempts: 2,
        probe_timeout: Duration::from_millis(2000),
        probe_interval: Duration::from_millis(50),
        lease_lost_timeout: Duration::from_millis(400),
        suspect_window: Duration::from_millis(800),
        publish_interval: Duration::from_millis(100),
        ..Default::default()
    }
}

/// One etcd per test binary, shared through namespaces.
pub async fn shared_etcd() -> Option<&'static str> {
    static ETCD: OnceLock<Option<RealEtcd>> = OnceLock::new();
    static INIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _g = INIT.lock().await;
    if ETCD.get().is_none() {
        let e = start_etcd().await;
        let _ = ETCD.set(e);
    }
    ETCD.get().and_then(|e| e.as_ref()).map(|e| e.url.as_str())
}

/// A TCP proxy on loopback whose connections can be cut, and which can refuse new ones
/// for a while: a broken watch stream without touching etcd.
pub struct CutProxy {
    pub url: String,
    blocked: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(upstream: &str) -> CutProxy {
        let target = upstream.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let blocked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (b, c) = (blocked.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if b.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                c.lock().unwrap().push(task);
            }
        });
        CutProxy {
            url,
            blocked,
            conns,
            accept,
        }
    }

    /// Drop every open connection; refuse new ones while `block`.
    pub fn cut(&self, block: bool) {
        self.blocked.store(block, Ordering::SeqCst);
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    pub fn unblock(&self) {
        self.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut(true);
    }
}

/// The shared real etcd, or (when the binary is missing) a mock-etcd of this test's own.
pub enum TestEtcd {
    Real(&'static str),
    Mock(mock_etcd::MockEtcd),
}

impl TestEtcd {
    pub fn url(&self) -> String {
        match self {
            TestEtcd::Real(u) => u.to_string(),
            TestEtcd::Mock(m) => m.url(),
        }
    }
}

pub async fn any_etcd() -> TestEtcd {
    match shared_etcd().await {
        Some(u) => TestEtcd::Real(u),
        None => {
            eprintln!("no real etcd: running against mock-etcd instead");
            TestEtcd::Mock(
                mock_etcd::start(mock_etcd::Config::default(), Events::none("etcd"))
                    .await
                    .unwrap(),
            )
        }
    }
}
