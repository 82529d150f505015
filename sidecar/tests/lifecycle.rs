//! The whole sidecar in-process against wiremock etcd, vLLM and master: registration,
//! keepalive, heartbeats and every answer the reference reacts to.

use std::time::Duration;

use serde_json::Value;
use sidecar::config::Config;
use sidecar::core::Status;
use sidecar::driver::Sidecar;
use sidecar::shutdown;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const METRICS: &str = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2.0\n# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n";

struct World {
    etcd: MockServer,
    vllm: MockServer,
    master: MockServer,
}

async fn mount(server: &MockServer, m: &str, p: &str, response: ResponseTemplate) {
    Mock::given(method(m))
        .and(path(p))
        .respond_with(response)
        .mount(server)
        .await;
}

fn ok(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_string(body)
}

async fn healthy_etcd(etcd: &MockServer) {
    mount(
        etcd,
        "POST",
        "/v3/lease/grant",
        ok(r#"{"ID":"11","TTL":"3"}"#),
    )
    .await;
    mount(etcd, "POST", "/v3/kv/put", ok(r#"{"header":{}}"#)).await;
    mount(
        etcd,
        "POST",
        "/v3/lease/keepalive",
        ok(r#"{"result":{"ID":"11","TTL":"3"}}"#),
    )
    .await;
    mount(etcd, "POST", "/v3/lease/revoke", ok(r#"{"header":{}}"#)).await;
}

async fn healthy_vllm(vllm: &MockServer) {
    mount(vllm, "GET", "/health", ResponseTemplate::new(200)).await;
    mount(
        vllm,
        "GET",
        "/v1/models",
        ok(r#"{"object":"list","data":[{"id":"m"}]}"#),
    )
    .await;
    mount(
        vllm,
        "GET",
        "/metrics",
        ok(METRICS).insert_header("content-type", "text/plain; version=0.0.4; charset=utf-8"),
    )
    .await;
}

impl World {
    async fn start(master_status: u16) -> World {
        let w = World {
            etcd: MockServer::start().await,
            vllm: MockServer::start().await,
            master: MockServer::start().await,
        };
        healthy_etcd(&w.etcd).await;
        healthy_vllm(&w.vllm).await;
        mount(
            &w.master,
            "POST",
            "/v1/internal/heartbeat",
            ResponseTemplate::new(master_status).set_body_string("{}"),
        )
        .await;
        w
    }

    fn config(&self, extra: &[&str]) -> Config {
        let mut flags = vec![
            "--etcd-endpoints".to_string(),
            self.etcd.uri(),
            "--vllm-url".into(),
            self.vllm.uri(),
            "--register-addr".into(),
            "127.0.0.1:18000".into(),
            "--xllm-service-url".into(),
            self.master.uri(),
            "--lease-ttl".into(),
            "3".into(),
            "--keepalive-interval".into(),
            "0.2".into(),
            "--heartbeat-interval".into(),
            "0.2".into(),
            "--health-timeout".into(),
            "1".into(),
            "--etcd-timeout".into(),
            "1".into(),
        ];
        flags.extend(extra.iter().map(|s| s.to_string()));
        Config::from_flags(flags).unwrap()
    }
}

struct Running {
    trigger: shutdown::Trigger,
    status: watch::Receiver<Status>,
    telemetry: std::sync::Arc<sidecar::telemetry::Telemetry>,
    task: JoinHandle<()>,
}

fn start(config: Config) -> Running {
    let sidecar = Sidecar::new(config).unwrap();
    let status = sidecar.status();
    let telemetry = sidecar.telemetry();
    let (trigger, listener) = shutdown::channel();
    let task = tokio::spawn(sidecar.run(listener));
    Running {
        trigger,
        status,
        telemetry,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.trigger.fire();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("sidecar stops")
            .unwrap();
    }

    fn incarnation(&self) -> Option<String> {
        self.status
            .borrow()
            .registration
            .as_ref()
            .map(|r| r.incarnation.clone())
    }
}

/// Poll `check` until it holds or the deadline passes.
async fn eventually<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > until {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn requests(server: &MockServer, p: &str) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.url.path() == p)
        .collect()
}

async fn count(server: &MockServer, p: &str) -> usize {
    requests(server, p).await.len()
}

fn json(r: &Request) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

/// The incarnations written by every put, in order.
async fn put_incarnations(etcd: &MockServer) -> Vec<String> {
    use base64::Engine;
    requests(etcd, "/v3/kv/put")
        .await
        .iter()
        .map(|r| {
            let value = json(r)["value"].as_str().unwrap().to_string();
            let raw = base64::engine::general_purpose::STANDARD
                .decode(value)
                .unwrap();
            let meta: Value = serde_json::from_slice(&raw).unwrap();
            meta["incarnation_id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test]
async fn registers_keeps_alive_heartbeats_and_revokes_on_shutdown() {
    let w = World::start(200).await;
    let run = start(w.config(&["--etcd-namespace", "ns"]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    eventually("two keepalives", Duration::from_secs(5), || async {
        count(&w.etcd, "/v3/lease/keepalive").await >= 2
    })
    .await;
    eventually("a heartbeat", Duration::from_secs(5), || async {
        count(&w.master, "/v1/internal/heartbeat").await >= 1
    })
    .await;

    let puts = requests(&w.etcd, "/v3/kv/put").await;
    assert_eq!(puts.len(), 1, "a keepalive does not rewrite the key");
    let put = json(&puts[0]);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = String::from_utf8(b64.decode(put["key"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(key, "/ns/XLLM:DEFAULT:127.0.0.1:18000");
    assert_eq!(put["lease"], "11");
    let meta: Value =
        serde_json::from_slice(&b64.decode(put["value"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(meta["name"], "127.0.0.1:18000");
    assert_eq!(meta["rpc_address"], "127.0.0.1:18000");
    assert_eq!(meta["type"], 0);
    assert_eq!(meta["backend_type"], "vllm");
    let incarnation = run.incarnation().unwrap();
    assert_eq!(meta["incarnation_id"], incarnation.as_str());
    assert!(incarnation.starts_with("vllm-"));

    let keepalive = json(&requests(&w.etcd, "/v3/lease/keepalive").await[0]);
    assert_eq!(keepalive["ID"], "11");

    let hb_request = &requests(&w.master, "/v1/internal/heartbeat").await[0];
    assert!(
        !hb_request.headers.contains_key("x-internal-token"),
        "no token configured"
    );
    let hb = json(hb_request);
    assert_eq!(hb["name"], "127.0.0.1:18000");
    assert_eq!(hb["incarnation_id"], incarnation.as_str());
    assert!(hb["load_metrics"]["waiting_requests_num"].is_u64(), "{hb}");
    assert!(
        hb["load_metrics"]["gpu_cache_usage_perc"].is_number(),
        "{hb}"
    );
    assert!(hb["latency_metrics"]["recent_max_ttft"].is_i64(), "{hb}");
    assert!(hb["latency_metrics"]["recent_max_tbt"].is_i64(), "{hb}");

    assert_eq!(count(&w.etcd, "/v3/lease/revoke").await, 0);
    run.stop().await;
    let revokes = requests(&w.etcd, "/v3/lease/revoke").await;
    assert_eq!(revokes.len(), 1);
    assert_eq!(json(&revokes[0])["ID"], "11");
}

#[tokio::test]
async fn heartbeat_carries_the_internal_token() {
    let w = World::start(200).await;
    let run = start(w.config(&["--internal-token", "s3cret"]));
    eventually("a heartbeat", Duration::from_secs(5), || async {
        count(&w.master, "/v1/internal/heartbeat").await >= 1
    })
    .await;
    let hb = &requests(&w.master, "/v1/internal/heartbeat").await[0];
    assert_eq!(hb.headers.get("x-internal-token").unwrap(), "s3cret");
    run.stop().await;
}

#[tokio::test]
async fn conflict_409_registers_again_with_a_new_incarnation() {
    let w = World::start(409).await;
    let run = start(w.config(&[]));
    eventually("a second registration", Duration::from_secs(5), || async {
        put_incarnations(&w.etcd).await.len() >= 2
    })
    .await;
    let incarnations = put_incarnations(&w.etcd).await;
    assert_ne!(incarnations[0], incarnations[1]);
    run.stop().await;
}

#[tokio::test]
async fn unauthorized_401_keeps_running_and_registered() {
    let w = World::start(401).await;
    let run = start(w.config(&["--internal-token", "wrong"]));
    eventually(
        "three rejected heartbeats",
        Duration::from_secs(10),
        || async { count(&w.master, "/v1/internal/heartbeat").await >= 3 },
    )
    .await;
    assert_eq!(
        put_incarnations(&w.etcd).await.len(),
        1,
        "401 does not re-register"
    );
    assert!(run.incarnation().is_some());
    assert!(!run.task.is_finished());
    assert!(run.telemetry.encode().contains("answer=\"unauthorized\""));
    run.stop().await;
}

/// An etcd that grants leases but answers every keepalive as for a dead lease (etcd's
/// answer then has no TTL).
async fn etcd_losing_every_lease(etcd: &MockServer, grant: &str) {
    etcd.reset().await;
    mount(etcd, "POST", "/v3/lease/grant", ok(grant)).await;
    mount(etcd, "POST", "/v3/kv/put", ok("{}")).await;
    let dead = ok(r#"{"result":{"header":{},"ID":"11"}}"#);
    mount(etcd, "POST", "/v3/lease/keepalive", dead).await;
    mount(etcd, "POST", "/v3/lease/revoke", ok("{}")).await;
}

#[tokio::test]
async fn lease_gone_ttl_0_registers_again() {
    let w = World::start(200).await;
    etcd_losing_every_lease(&w.etcd, r#"{"ID":"11","TTL":"3"}"#).await;
    let run = start(w.config(&[]));
    eventually("re-registrations", Duration::from_secs(5), || async {
        put_incarnations(&w.etcd).await.len() >= 3
    })
    .await;
    let incarnations = put_incarnations(&w.etcd).await;
    assert_ne!(incarnations[0], incarnations[1]);
    run.stop().await;
}

#[tokio::test]
async fn unhealthy_vllm_is_deregistered_after_the_threshold_and_comes_back() {
    let w = World::start(200).await;
    let run = start(w.config(&["--health-fail-threshold", "3"]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    let first = run.incarnation().unwrap();

    w.vllm.reset().await;
    mount(&w.vllm, "GET", "/health", ResponseTemplate::new(503)).await;
    eventually("revoked", Duration::from_secs(5), || async {
        count(&w.etcd, "/v3/lease/revoke").await >= 1
    })
    .await;
    assert!(run.incarnation().is_none());
    let failed_probes = count(&w.vllm, "/health").await;
    assert!(
        failed_probes >= 3,
        "revoked after {failed_probes} failed probes"
    );

    w.vllm.reset().await;
    healthy_vllm(&w.vllm).await;
    eventually("registered again", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    let second = run.incarnation().unwrap();
    assert_ne!(first, second, "a new incarnation after recovery");
    run.stop().await;
}

#[tokio::test]
async fn a_slow_health_never_delays_a_keepalive() {
    keepalives_continue_while_stuck_on(Slow::Health).await;
}

/// Which exchange a test makes slow.
enum Slow {
    Health,
    Scrape,
    Master,
}

/// Make one exchange answer only after `hang`, and wait until the sidecar is inside it.
/// Answers the server and path of the slow exchange.
async fn stall(w: &World, slow: Slow, hang: Duration) -> (&MockServer, &'static str) {
    let (server, p) = match slow {
        Slow::Health => {
            w.vllm.reset().await;
            healthy_vllm_except(&w.vllm, "/health").await;
            let answer = ResponseTemplate::new(200).set_delay(hang);
            mount(&w.vllm, "GET", "/health", answer).await;
            (&w.vllm, "/health")
        }
        Slow::Scrape => {
            w.vllm.reset().await;
            healthy_vllm_except(&w.vllm, "/metrics").await;
            mount(&w.vllm, "GET", "/metrics", ok(METRICS).set_delay(hang)).await;
            (&w.vllm, "/metrics")
        }
        Slow::Master => {
            w.master.reset().await;
            let answer = ok("{}").set_delay(hang);
            mount(&w.master, "POST", "/v1/internal/heartbeat", answer).await;
            (&w.master, "/v1/internal/heartbeat")
        }
    };
    eventually(
        "the slow exchange in flight",
        Duration::from_secs(2),
        || async { count(server, p).await >= 1 },
    )
    .await;
    (server, p)
}

/// Every command runs as its own task: while one hangs on a slow peer (4 s, within its
/// timeout), keepalives go out on their own schedule.
async fn keepalives_continue_while_stuck_on(slow: Slow) {
    let w = World::start(200).await;
    let run = start(w.config(&[
        "--health-timeout",
        "5",
        "--scrape-timeout",
        "5",
        "--health-fail-threshold",
        "100",
    ]));
    eventually(
        "registered and heartbeating",
        Duration::from_secs(5),
        || async {
            run.incarnation().is_some() && count(&w.master, "/v1/internal/heartbeat").await >= 1
        },
    )
    .await;
    let (server, p) = stall(&w, slow, Duration::from_secs(4)).await;
    let keepalives = count(&w.etcd, "/v3/lease/keepalive").await;
    let slow_calls = count(server, p).await;
    eventually(
        "keepalives while the slow exchange hangs",
        Duration::from_secs(3),
        || async { count(&w.etcd, "/v3/lease/keepalive").await >= keepalives + 4 },
    )
    .await;
    assert_eq!(
        count(server, p).await,
        slow_calls,
        "still inside the same exchange"
    );
    assert!(run.incarnation().is_some(), "still registered");
    run.stop().await;
}

/// vLLM as `healthy_vllm`, without the route `except` (mounted slow by the caller).
async fn healthy_vllm_except(vllm: &MockServer, except: &str) {
    if except != "/health" {
        mount(vllm, "GET", "/health", ResponseTemplate::new(200)).await;
    }
    mount(
        vllm,
        "GET",
        "/v1/models",
        ok(r#"{"object":"list","data":[{"id":"m"}]}"#),
    )
    .await;
    if except != "/metrics" {
        mount(vllm, "GET", "/metrics", ok(METRICS)).await;
    }
}

#[tokio::test]
async fn a_slow_metrics_never_delays_a_keepalive() {
    keepalives_continue_while_stuck_on(Slow::Scrape).await;
}

#[tokio::test]
async fn a_slow_master_never_delays_a_keepalive() {
    keepalives_continue_while_stuck_on(Slow::Master).await;
}

#[tokio::test]
async fn a_lease_lost_while_health_hangs_is_registered_again_at_once() {
    let w = World::start(200).await;
    let run = start(w.config(&["--health-timeout", "5", "--health-fail-threshold", "100"]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    let first = run.incarnation();
    // The probe hangs 2 s; meanwhile etcd forgets the lease (keepalive: no TTL).
    stall(&w, Slow::Health, Duration::from_secs(2)).await;
    etcd_losing_every_lease(&w.etcd, r#"{"ID":"12","TTL":"3"}"#).await;
    // The keepalive finds the lease gone; the sidecar registers again without waiting
    // for the hanging probe.
    eventually("registered again", Duration::from_secs(2), || async {
        run.incarnation()
            .is_some_and(|i| Some(&i) != first.as_ref())
            && count(&w.etcd, "/v3/kv/put").await >= 1
    })
    .await;
    assert!(run.telemetry.leases_lost.get() >= 1);
    run.stop().await;
}

#[tokio::test]
async fn shutdown_while_stuck_on_a_slow_scrape_still_revokes_at_once() {
    let w = World::start(200).await;
    let run = start(w.config(&["--scrape-timeout", "5", "--shutdown-timeout", "2"]));
    eventually(
        "registered and heartbeating",
        Duration::from_secs(5),
        || async {
            run.incarnation().is_some() && count(&w.master, "/v1/internal/heartbeat").await >= 1
        },
    )
    .await;
    stall(&w, Slow::Scrape, Duration::from_secs(4)).await;
    // The scrape hangs for seconds more; the revoke does not wait for it.
    run.stop().await;
    assert_eq!(count(&w.etcd, "/v3/lease/revoke").await, 1);
}

#[tokio::test]
async fn dropping_the_run_future_stops_every_job() {
    let w = World::start(200).await;
    let run = start(w.config(&[]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    // Not a shutdown: the future is dropped (a test that panics, a caller that gives up).
    // Nothing is revoked (the key expires with its lease), and nothing more is sent.
    run.task.abort();
    let _ = run.task.await;
    // An exchange already in flight may still land: let one period pass first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let health = count(&w.vllm, "/health").await;
    let keepalives = count(&w.etcd, "/v3/lease/keepalive").await;
    // Several keepalive periods (0.2 s) later, nothing new.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(count(&w.vllm, "/health").await, health);
    assert_eq!(count(&w.etcd, "/v3/lease/keepalive").await, keepalives);
}

#[tokio::test]
async fn keepalive_errors_shorter_than_the_ttl_keep_the_incarnation() {
    let w = World::start(200).await;
    let run = start(w.config(&[]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    let first = run.incarnation();
    // etcd fails every keepalive for about 1 s (TTL 3 s): retried, never re-registered.
    w.etcd.reset().await;
    mount(
        &w.etcd,
        "POST",
        "/v3/lease/keepalive",
        ResponseTemplate::new(503),
    )
    .await;
    mount(
        &w.etcd,
        "POST",
        "/v3/lease/grant",
        ok(r#"{"ID":"12","TTL":"3"}"#),
    )
    .await;
    mount(&w.etcd, "POST", "/v3/kv/put", ok("{}")).await;
    eventually("keepalive failures", Duration::from_secs(3), || async {
        run.telemetry.keepalive_failures.get() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.etcd.reset().await;
    healthy_etcd(&w.etcd).await;
    let ok_before = run.telemetry.keepalives.get();
    eventually("keepalives again", Duration::from_secs(3), || async {
        run.telemetry.keepalives.get() > ok_before
    })
    .await;
    assert_eq!(run.incarnation(), first);
    assert_eq!(
        count(&w.etcd, "/v3/lease/grant").await,
        0,
        "never re-registered"
    );
    assert_eq!(run.telemetry.leases_lost.get(), 0);
    run.stop().await;
}

#[tokio::test]
async fn drain_revokes_and_undrain_registers_again() {
    let w = World::start(200).await;
    let sidecar = Sidecar::new(w.config(&[])).unwrap();
    let requests = sidecar.requests();
    let status = sidecar.status();
    let (trigger, listener) = shutdown::channel();
    let task = tokio::spawn(sidecar.run(listener));
    let registered = || status.borrow().registration.is_some();
    eventually("registered", Duration::from_secs(5), || async {
        registered()
    })
    .await;
    requests.drain();
    eventually("revoked", Duration::from_secs(5), || async {
        count(&w.etcd, "/v3/lease/revoke").await == 1
    })
    .await;
    assert!(status.borrow().draining);
    // Stays deregistered while vLLM stays healthy.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!registered());
    assert_eq!(put_incarnations(&w.etcd).await.len(), 1);
    requests.undrain();
    eventually("registered again", Duration::from_secs(5), || async {
        registered()
    })
    .await;
    assert!(!status.borrow().draining);
    assert_eq!(put_incarnations(&w.etcd).await.len(), 2);
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_page_with_no_vllm_sample_sends_no_heartbeat() {
    let w = World::start(200).await;
    w.vllm.reset().await;
    healthy_vllm_except(&w.vllm, "/metrics").await;
    let html =
        ok("<html><body>502 Bad Gateway</body></html>").insert_header("content-type", "text/html");
    mount(&w.vllm, "GET", "/metrics", html).await;
    let run = start(w.config(&[]));
    eventually("scrape errors", Duration::from_secs(5), || async {
        run.telemetry.scrape_errors.get() >= 2
    })
    .await;
    assert!(run.incarnation().is_some());
    assert_eq!(count(&w.master, "/v1/internal/heartbeat").await, 0);
    run.stop().await;
}

#[tokio::test]
async fn etcd_failures_back_off_instead_of_hot_looping() {
    let w = World::start(200).await;
    w.etcd.reset().await;
    mount(
        &w.etcd,
        "POST",
        "/v3/lease/grant",
        ResponseTemplate::new(503),
    )
    .await;
    let run = start(w.config(&["--lease-ttl", "2"]));
    eventually("three failed grants", Duration::from_secs(10), || async {
        count(&w.etcd, "/v3/lease/grant").await >= 3
    })
    .await;
    // Backoff doubles from 0.2 s: 3 attempts need at least 0.1 + 0.2 s of waiting, and a
    // hot loop would have made hundreds by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attempts = count(&w.etcd, "/v3/lease/grant").await;
    assert!(attempts < 20, "{attempts} grants: not backing off");
    assert!(run.incarnation().is_none());
    // etcd comes back: registered.
    w.etcd.reset().await;
    healthy_etcd(&w.etcd).await;
    eventually(
        "registered after etcd recovers",
        Duration::from_secs(5),
        || async { run.incarnation().is_some() },
    )
    .await;
    run.stop().await;
}

#[tokio::test]
async fn shutdown_is_bounded_when_etcd_hangs() {
    let w = World::start(200).await;
    let run = start(w.config(&["--etcd-timeout", "30", "--shutdown-timeout", "0.5"]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    w.etcd.reset().await;
    Mock::given(method("POST"))
        .respond_with(ok("{}").set_delay(Duration::from_secs(60)))
        .mount(&w.etcd)
        .await;
    // `stop` fails the test if the sidecar is not done within 10 s (etcd would hang 60 s).
    run.stop().await;
    assert!(count(&w.etcd, "/v3/lease/revoke").await <= 1);
}

#[tokio::test]
async fn oversized_metrics_page_is_a_scrape_error_and_no_heartbeat() {
    let w = World::start(200).await;
    let run = start(w.config(&["--metrics-max-bytes", "64"]));
    eventually("a scrape error", Duration::from_secs(5), || async {
        run.telemetry
            .encode()
            .contains("vllm_sidecar_scrape_errors_total 1")
            || run
                .telemetry
                .encode()
                .contains("vllm_sidecar_scrape_errors_total 2")
    })
    .await;
    assert_eq!(count(&w.master, "/v1/internal/heartbeat").await, 0);
    assert!(
        run.incarnation().is_some(),
        "a failed scrape leaves the lease alone"
    );
    run.stop().await;
}

#[tokio::test]
async fn waits_for_health_before_registering() {
    let w = World::start(200).await;
    w.vllm.reset().await;
    mount(&w.vllm, "GET", "/health", ResponseTemplate::new(503)).await;
    let run = start(w.config(&[]));
    eventually("two failed gate probes", Duration::from_secs(5), || async {
        count(&w.vllm, "/health").await >= 2
    })
    .await;
    assert_eq!(
        count(&w.etcd, "/v3/lease/grant").await,
        0,
        "never registers before /health is up"
    );
    w.vllm.reset().await;
    healthy_vllm(&w.vllm).await;
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    run.stop().await;
}

#[tokio::test]
async fn registers_with_etcd_auth_and_sends_the_token() {
    let w = World::start(200).await;
    mount(
        &w.etcd,
        "POST",
        "/v3/auth/authenticate",
        ok(r#"{"token":"tok.9"}"#),
    )
    .await;
    let run = start(w.config(&["--etcd-username", "root", "--etcd-password", "pw"]));
    eventually("registered", Duration::from_secs(5), || async {
        run.incarnation().is_some()
    })
    .await;
    let auth = &requests(&w.etcd, "/v3/auth/authenticate").await[0];
    assert_eq!(
        json(auth),
        serde_json::json!({"name": "root", "password": "pw"})
    );
    let put = &requests(&w.etcd, "/v3/kv/put").await[0];
    assert_eq!(put.headers.get("authorization").unwrap(), "tok.9");
    run.stop().await;
    let revoke = &requests(&w.etcd, "/v3/lease/revoke").await[0];
    assert_eq!(revoke.headers.get("authorization").unwrap(), "tok.9");
}

#[tokio::test]
async fn master_errors_back_off_and_do_not_touch_the_lease() {
    let w = World::start(503).await;
    let run = start(w.config(&[]));
    eventually(
        "three failed heartbeats",
        Duration::from_secs(10),
        || async { count(&w.master, "/v1/internal/heartbeat").await >= 3 },
    )
    .await;
    assert_eq!(
        put_incarnations(&w.etcd).await.len(),
        1,
        "a 503 does not re-register"
    );
    assert!(run.telemetry.encode().contains("answer=\"other\""));
    run.stop().await;
}

#[tokio::test]
async fn conflicts_in_a_row_slow_down_re_registration() {
    let w = World::start(409).await;
    let run = start(w.config(&[]));
    // Note when each registration is seen (polled every 10 ms).
    let mut seen = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(15);
    while seen.len() < 6 {
        let puts = count(&w.etcd, "/v3/kv/put").await;
        while seen.len() < puts {
            seen.push(tokio::time::Instant::now());
        }
        assert!(
            tokio::time::Instant::now() < until,
            "only {} registrations",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Without backoff every gap would be one heartbeat interval (0.2 s); after the fourth
    // conflict in a row the wait is drawn from [0.8 s, 1.6 s].
    let last_gap = seen[5] - seen[4];
    assert!(last_gap >= Duration::from_millis(700), "gap {last_gap:?}");
    run.stop().await;
}
