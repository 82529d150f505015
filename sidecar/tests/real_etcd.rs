//! End to end against a real etcd 3.4 on loopback, with a tiny axum vLLM and master:
//! the real binary registers, keeps the lease, deregisters an unhealthy vLLM, comes back
//! with a new incarnation, revokes on SIGTERM and expires on SIGKILL. Skipped (with a
//! message) where `etcd` is not installed; CI installs it.

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use sidecar::peers::etcd::{EtcdClient, EtcdError};
use sidecar::peers::http::{build_client, Redirects};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-sidecar");

/// A real etcd on loopback (see `local-etcd`), one member; killed on drop.
struct Etcd {
    cluster: local_etcd::Cluster,
    url: String,
}

impl Etcd {
    fn start() -> Option<Etcd> {
        if let Some(why) = local_etcd::unavailable() {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let cluster = local_etcd::Cluster::start(local_etcd::Options {
            tag: "sidecar-etcd".into(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let url = cluster.url();
        Some(Etcd { cluster, url })
    }

    fn restart(&mut self) {
        self.cluster.restart(0).unwrap_or_else(|e| panic!("{e}"));
    }

    fn post(&self, path: &str, body: Value, token: Option<&str>) -> (u16, Value) {
        http("POST", &format!("{}{path}", self.url), Some(&body), token).expect("etcd answers")
    }

    /// The instance value at `key`, if present.
    fn get(&self, key: &str) -> Option<Value> {
        let (_, answer) = self.post("/v3/kv/range", json!({"key": B64.encode(key)}), None);
        let kv = answer.get("kvs")?.as_array()?.first()?.clone();
        let raw = B64.decode(kv.get("value")?.as_str()?).ok()?;
        let mut meta: Value = serde_json::from_slice(&raw).ok()?;
        meta["_lease"] = kv.get("lease").cloned().unwrap_or(Value::Null);
        Some(meta)
    }
}

/// One HTTP call from sync test code (each on a throwaway runtime); `None` when there is
/// no answer.
fn http(
    method: &str,
    url: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> Option<(u16, Value)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .ok()?;
        let mut request = if method == "GET" {
            client.get(url)
        } else {
            client.post(url)
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(token) = token {
            request = request.header("Authorization", token);
        }
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.ok()?;
        Some((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    })
}

/// The stub vLLM (switchable `/health`) and master (records heartbeats), on one runtime
/// thread of their own.
#[derive(Clone, Default)]
struct Stubs {
    healthy: Arc<AtomicBool>,
    heartbeats: Arc<Mutex<Vec<Value>>>,
}

const METRICS: &str =
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 3.0\n";

async fn health(State(s): State<Stubs>) -> StatusCode {
    if s.healthy.load(Ordering::SeqCst) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn heartbeat(
    State(s): State<Stubs>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let mut body = body;
    body["_token"] = json!(headers
        .get("x-internal-token")
        .and_then(|v| v.to_str().ok()));
    s.heartbeats.lock().unwrap().push(body);
    Json(json!({"ok": true}))
}

impl Stubs {
    fn start() -> (Stubs, u16, u16) {
        let stubs = Stubs::default();
        stubs.healthy.store(true, Ordering::SeqCst);
        let vllm = StdListener::bind("127.0.0.1:0").unwrap();
        let master = StdListener::bind("127.0.0.1:0").unwrap();
        let (vllm_port, master_port) = (
            vllm.local_addr().unwrap().port(),
            master.local_addr().unwrap().port(),
        );
        vllm.set_nonblocking(true).unwrap();
        master.set_nonblocking(true).unwrap();
        let state = stubs.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let vllm_app = Router::new()
                    .route("/health", get(health))
                    .route("/metrics", get(|| async { METRICS }))
                    .route(
                        "/v1/models",
                        get(|| async { Json(json!({"object":"list","data":[{"id":"m"}]})) }),
                    )
                    .with_state(state.clone());
                let master_app = Router::new()
                    .route("/v1/internal/heartbeat", post(heartbeat))
                    .with_state(state);
                let vllm = tokio::net::TcpListener::from_std(vllm).unwrap();
                let master = tokio::net::TcpListener::from_std(master).unwrap();
                tokio::spawn(async move { axum::serve(master, master_app).await });
                let _ = axum::serve(vllm, vllm_app).await;
            });
        });
        (stubs, vllm_port, master_port)
    }
}

struct Sidecar(Child);

impl Sidecar {
    fn spawn(etcd: &Etcd, vllm_port: u16, master_port: u16, ttl: &str, extra: &[&str]) -> Sidecar {
        let child = Command::new(BIN)
            .args([
                "--etcd-endpoints",
                &etcd.url,
                "--vllm-url",
                &format!("http://127.0.0.1:{vllm_port}"),
                "--xllm-service-url",
                &format!("http://127.0.0.1:{master_port}"),
                "--lease-ttl",
                ttl,
                "--keepalive-interval",
                "0.3",
                "--heartbeat-interval",
                "0.3",
                "--health-fail-threshold",
                "2",
                "--health-timeout",
                "1",
            ])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Sidecar(child)
    }

    fn signal(&self, name: &str) {
        assert!(Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.0.id().to_string())
            .status()
            .unwrap()
            .success());
    }

    fn wait_exit(&mut self, deadline: Duration) -> Option<i32> {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < until, "sidecar did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn eventually<T>(what: &str, deadline: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < until, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn lifecycle_against_real_etcd() {
    let Some(etcd) = Etcd::start() else { return };
    let (stubs, vllm_port, master_port) = Stubs::start();
    let key = format!("/ns/XLLM:PREFILL:127.0.0.1:{vllm_port}");
    let mut sidecar = Sidecar::spawn(
        &etcd,
        vllm_port,
        master_port,
        "5",
        &[
            "--etcd-namespace",
            "ns",
            "--instance-type",
            "PREFILL",
            "--internal-token",
            "tok",
        ],
    );

    // Registered, with a lease.
    let meta = eventually("registered", Duration::from_secs(10), || etcd.get(&key));
    assert_eq!(meta["name"], format!("127.0.0.1:{vllm_port}"));
    assert_eq!(meta["rpc_address"], format!("127.0.0.1:{vllm_port}"));
    assert_eq!(meta["type"], 1);
    assert_eq!(meta["backend_type"], "vllm");
    assert!(meta["_lease"].as_str().is_some_and(|l| l != "0"), "{meta}");
    let first = meta["incarnation_id"].as_str().unwrap().to_string();

    // Heartbeats for that incarnation, with the token.
    let hb = eventually("a heartbeat", Duration::from_secs(10), || {
        stubs.heartbeats.lock().unwrap().first().cloned()
    });
    assert_eq!(hb["incarnation_id"], first.as_str());
    assert_eq!(hb["name"], format!("127.0.0.1:{vllm_port}"));
    assert_eq!(hb["_token"], "tok");

    // Kept alive: the key outlives its TTL with the same incarnation, never rewritten.
    let (_, ttl_answer) = etcd.post(
        "/v3/lease/timetolive",
        json!({"ID": meta["_lease"].clone()}),
        None,
    );
    let granted: i64 = ttl_answer["grantedTTL"].as_str().unwrap().parse().unwrap();
    assert_eq!(granted, 5);
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let now = etcd.get(&key).expect("key kept alive past its TTL");
        assert_eq!(now["incarnation_id"], first.as_str());
        std::thread::sleep(Duration::from_millis(250));
    }

    // vLLM dies: deregistered (revoked, long before the TTL would run out).
    stubs.healthy.store(false, Ordering::SeqCst);
    eventually("deregistered", Duration::from_secs(4), || {
        etcd.get(&key).is_none().then_some(())
    });

    // vLLM recovers: registered again with a new incarnation.
    stubs.healthy.store(true, Ordering::SeqCst);
    let again = eventually("registered again", Duration::from_secs(10), || {
        etcd.get(&key)
    });
    let second = again["incarnation_id"].as_str().unwrap().to_string();
    assert_ne!(first, second);

    // SIGTERM: the key goes at once (well inside the 5 s TTL), exit 0.
    let before = Instant::now();
    sidecar.signal("TERM");
    eventually("key revoked on SIGTERM", Duration::from_secs(2), || {
        etcd.get(&key).is_none().then_some(())
    });
    assert!(before.elapsed() < Duration::from_secs(4));
    assert_eq!(sidecar.wait_exit(Duration::from_secs(5)), Some(0));
}

#[test]
fn sigkill_leaves_the_key_to_expire_within_the_ttl() {
    let Some(etcd) = Etcd::start() else { return };
    let (_stubs, vllm_port, master_port) = Stubs::start();
    let key = format!("XLLM:DEFAULT:127.0.0.1:{vllm_port}");
    let mut sidecar = Sidecar::spawn(&etcd, vllm_port, master_port, "3", &[]);
    eventually("registered", Duration::from_secs(10), || etcd.get(&key));
    sidecar.signal("KILL");
    let _ = sidecar.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    // Still there right after the kill (no revoke happened)...
    assert!(etcd.get(&key).is_some(), "a killed sidecar cannot revoke");
    // ...and gone once the TTL runs out (plus etcd's expiry check slack).
    eventually("key expired", Duration::from_secs(3 + 3), || {
        etcd.get(&key).is_none().then_some(())
    });
    assert!(killed.elapsed() <= Duration::from_secs(6));
}

#[test]
fn etcd_auth_and_reauthentication_after_an_etcd_restart() {
    let Some(mut etcd) = Etcd::start() else {
        return;
    };
    // Enable auth: a root user with the root role.
    assert_eq!(
        etcd.post(
            "/v3/auth/user/add",
            json!({"name":"root","password":"rootpw"}),
            None
        )
        .0,
        200
    );
    assert_eq!(
        etcd.post(
            "/v3/auth/user/grant",
            json!({"user":"root","role":"root"}),
            None
        )
        .0,
        200
    );
    assert_eq!(etcd.post("/v3/auth/enable", json!({}), None).0, 200);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = etcd_client(&etcd.url, "rootpw");
    let lease = rt.block_on(client.lease_grant(5)).unwrap();
    rt.block_on(client.put("k", "v1", lease)).unwrap();
    assert_eq!(rt.block_on(client.get("k")).unwrap().as_deref(), Some("v1"));
    // Without a token, real etcd refuses a put (what the sidecar must authenticate for).
    let (status, answer) = etcd.post(
        "/v3/kv/put",
        json!({"key": B64.encode("k"), "value": B64.encode("x")}),
        None,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("user name is empty"));

    // A restart forgets every simple token: the next call is rejected with code 16 and
    // the client authenticates again by itself.
    etcd.restart();
    let (status, answer) = etcd.post(
        "/v3/kv/put",
        json!({"key": B64.encode("k"), "value": B64.encode("x")}),
        Some("stale.1"),
    );
    assert_eq!(status, 401);
    assert_eq!(answer["code"], 16);
    // Let the client's runtime see the old connection close (the sidecar's runs all the
    // time; this test's only inside block_on): a POST is never resent on its own.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    rt.block_on(client.put("k", "v2", 0)).unwrap();
    assert_eq!(rt.block_on(client.get("k")).unwrap().as_deref(), Some("v2"));

    // Wrong password: an auth error, not a hang or a panic.
    let wrong = etcd_client(&etcd.url, "nope");
    let err = rt.block_on(wrong.put("k", "v3", 0)).unwrap_err();
    assert!(matches!(err, EtcdError::AuthRejected(_)), "{err}");
}

fn etcd_client(url: &str, password: &str) -> EtcdClient {
    EtcdClient::new(
        vec![reqwest::Url::parse(url).unwrap()],
        "root".into(),
        sidecar::config::Secret::new(password),
        Duration::from_secs(3),
        build_client(Redirects::Never).unwrap(),
    )
}
