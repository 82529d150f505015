//! The real `vllm-sidecar` binary: exit codes, signals, the admin endpoint, secrets in
//! logs. etcd, vLLM and the master are wiremock servers.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-sidecar");

fn run_to_exit(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["--no-such-flag"],
        &["--lease-ttl", "2", "--keepalive-interval", "2"],
        &["--instance-type", "UNKNOWN"],
        &["--vllm-url", "not-a-url"],
        &["--xllm-service-url", "ftp://x"],
        &["--etcd-endpoints", "http://bad host:1"],
        &["--lease-ttl", "six"],
        &["--admin-listen", "localhost"],
        &["--follow-master", "--master-http-port", "0"],
        &["--follow-master", "--master-http-port", "65536"],
        &["--follow-master", "--master-http-port", "http"],
        &["--follow-master", "--master-read-interval", "0"],
        &["--follow-master", "--master-read-interval", "-1"],
    ];
    for args in cases {
        let (code, stderr) = run_to_exit(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(stderr.starts_with("vllm-sidecar: "), "{stderr:?}");
    }
}

#[test]
fn a_bad_master_port_from_the_environment_exits_2_with_one_line() {
    for (var, value) in [
        ("XLLM_MASTER_HTTP_PORT", "99999"),
        ("XLLM_MASTER_READ_INTERVAL", "soon"),
        ("XLLM_FOLLOW_MASTER", "maybe"),
    ] {
        let out = Command::new(BIN)
            .env_remove("RUST_LOG")
            .env(var, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
        assert!(stderr.starts_with("vllm-sidecar: "), "{stderr:?}");
    }
}

#[test]
fn help_and_version_exit_0() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--etcd-endpoints",
        "--internal-token",
        "--admin-listen",
        "--lease-ttl",
    ] {
        assert!(help.contains(flag), "{flag} in --help");
    }
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn env_secrets_are_not_shown_in_help() {
    let out = Command::new(BIN)
        .arg("--help")
        .env("XLLM_INTERNAL_TOKEN", "tok-FROM-ENV")
        .env("ETCD_PASSWORD", "pw-FROM-ENV")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains("tok-FROM-ENV") && !help.contains("pw-FROM-ENV"));
}

struct Stubs {
    etcd: MockServer,
    vllm: MockServer,
    master: MockServer,
}

fn ok(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_string(body)
}

async fn mount(server: &MockServer, m: &str, p: &str, response: ResponseTemplate) {
    Mock::given(method(m))
        .and(path(p))
        .respond_with(response)
        .mount(server)
        .await;
}

impl Stubs {
    async fn start(master_status: u16, revoke: ResponseTemplate) -> Stubs {
        let s = Stubs {
            etcd: MockServer::start().await,
            vllm: MockServer::start().await,
            master: MockServer::start().await,
        };
        mount(
            &s.etcd,
            "POST",
            "/v3/lease/grant",
            ok(r#"{"ID":"77","TTL":"5"}"#),
        )
        .await;
        mount(&s.etcd, "POST", "/v3/kv/put", ok("{}")).await;
        mount(
            &s.etcd,
            "POST",
            "/v3/lease/keepalive",
            ok(r#"{"result":{"ID":"77","TTL":"5"}}"#),
        )
        .await;
        mount(&s.etcd, "POST", "/v3/lease/revoke", revoke).await;
        mount(&s.vllm, "GET", "/health", ResponseTemplate::new(200)).await;
        mount(
            &s.vllm,
            "GET",
            "/metrics",
            ok("vllm:num_requests_waiting 1\n"),
        )
        .await;
        mount(
            &s.master,
            "POST",
            "/v1/internal/heartbeat",
            ResponseTemplate::new(master_status),
        )
        .await;
        s
    }

    fn args(&self) -> Vec<String> {
        [
            "--etcd-endpoints",
            &self.etcd.uri(),
            "--vllm-url",
            &self.vllm.uri(),
            "--xllm-service-url",
            &self.master.uri(),
            "--lease-ttl",
            "5",
            "--keepalive-interval",
            "0.2",
            "--heartbeat-interval",
            "0.2",
            "--etcd-timeout",
            "30",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    async fn count(server: &MockServer, p: &str) -> usize {
        server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path() == p)
            .count()
    }
}

/// A running binary whose stderr is drained into memory (so it never blocks on a pipe).
struct Sidecar {
    child: Child,
    stderr: Arc<Mutex<String>>,
    stdout_lines: Arc<Mutex<Vec<String>>>,
}

impl Sidecar {
    fn spawn(args: &[String], envs: &[(&str, &str)]) -> Sidecar {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdout_lines = Arc::new(Mutex::new(Vec::new()));
        let out_pipe = child.stdout.take().unwrap();
        let lines = stdout_lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out_pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Sidecar {
            child,
            stderr,
            stdout_lines,
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The admin endpoint's base URL, from the line the binary prints on stdout.
    async fn admin_url(&self) -> String {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self.stdout_lines.lock().unwrap().iter().find_map(|l| {
                l.strip_prefix("vllm-sidecar admin listening on ")
                    .map(str::to_string)
            });
            if let Some(addr) = found {
                return format!("http://{addr}");
            }
            assert!(Instant::now() < until, "no admin address on stdout");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!(
                    "sidecar did not exit within {deadline:?}; stderr:\n{}",
                    self.stderr.lock().unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn eventually<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while !check().await {
        assert!(Instant::now() < until, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn sigterm_revokes_the_lease_and_exits_0() {
    let stubs = Stubs::start(200, ok("{}")).await;
    let mut sidecar = Sidecar::spawn(&stubs.args(), &[]);
    eventually("registered", Duration::from_secs(10), || async {
        Stubs::count(&stubs.etcd, "/v3/kv/put").await == 1
    })
    .await;
    assert_eq!(Stubs::count(&stubs.etcd, "/v3/lease/revoke").await, 0);
    sidecar.signal("TERM");
    let status = sidecar.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "stderr:\n{}",
        sidecar.stderr.lock().unwrap()
    );
    assert_eq!(Stubs::count(&stubs.etcd, "/v3/lease/revoke").await, 1);
}

#[tokio::test]
async fn sigint_also_revokes_and_exits_0() {
    let stubs = Stubs::start(200, ok("{}")).await;
    let mut sidecar = Sidecar::spawn(&stubs.args(), &[]);
    eventually("registered", Duration::from_secs(10), || async {
        Stubs::count(&stubs.etcd, "/v3/kv/put").await == 1
    })
    .await;
    sidecar.signal("INT");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
    assert_eq!(Stubs::count(&stubs.etcd, "/v3/lease/revoke").await, 1);
}

#[tokio::test]
async fn a_second_signal_exits_at_once_while_revoke_hangs() {
    let stubs = Stubs::start(200, ok("{}").set_delay(Duration::from_secs(60))).await;
    let mut args = stubs.args();
    args.extend(["--shutdown-timeout".to_string(), "60".to_string()]);
    let mut sidecar = Sidecar::spawn(&args, &[]);
    eventually("registered", Duration::from_secs(10), || async {
        Stubs::count(&stubs.etcd, "/v3/kv/put").await == 1
    })
    .await;
    sidecar.signal("TERM");
    eventually("revoke in flight", Duration::from_secs(10), || async {
        Stubs::count(&stubs.etcd, "/v3/lease/revoke").await == 1
    })
    .await;
    assert!(
        sidecar.child.try_wait().unwrap().is_none(),
        "still waiting for the revoke"
    );
    sidecar.signal("TERM");
    let status = sidecar.wait_exit(Duration::from_secs(10)).await;
    assert_ne!(status.code(), Some(0));
}

#[tokio::test]
async fn shutdown_timeout_bounds_a_hanging_revoke_and_exits_0() {
    let stubs = Stubs::start(200, ok("{}").set_delay(Duration::from_secs(60))).await;
    let mut args = stubs.args();
    args.extend(["--shutdown-timeout".to_string(), "0.5".to_string()]);
    let mut sidecar = Sidecar::spawn(&args, &[]);
    eventually("registered", Duration::from_secs(10), || async {
        Stubs::count(&stubs.etcd, "/v3/kv/put").await == 1
    })
    .await;
    sidecar.signal("TERM");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

#[tokio::test]
async fn admin_endpoint_serves_health_readiness_and_metrics() {
    let stubs = Stubs::start(200, ok("{}")).await;
    let mut args = stubs.args();
    args.extend(["--admin-listen".to_string(), "127.0.0.1:0".to_string()]);
    let mut sidecar = Sidecar::spawn(&args, &[]);
    let admin = sidecar.admin_url().await;
    let http = reqwest::Client::new();
    let healthz = http.get(format!("{admin}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200);
    eventually("ready", Duration::from_secs(10), || {
        let http = http.clone();
        let admin = admin.clone();
        async move {
            http.get(format!("{admin}/readyz"))
                .send()
                .await
                .unwrap()
                .status()
                == 200
        }
    })
    .await;
    let ready: serde_json::Value = http
        .get(format!("{admin}/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["registered"], true);
    assert!(ready["incarnation_id"]
        .as_str()
        .unwrap()
        .starts_with("vllm-"));
    assert!(ready["key"]
        .as_str()
        .unwrap()
        .starts_with("XLLM:DEFAULT:127.0.0.1:"));
    eventually("a heartbeat counted", Duration::from_secs(10), || {
        let http = http.clone();
        let admin = admin.clone();
        async move {
            let text = http
                .get(format!("{admin}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.contains("vllm_sidecar_heartbeats_total{answer=\"ok\"}")
        }
    })
    .await;
    let metrics = http
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "vllm_sidecar_registrations_total 1",
        "vllm_sidecar_keepalive_failures_total",
        "vllm_sidecar_scrape_errors_total",
        "vllm_sidecar_parse_errors_total",
        "vllm_sidecar_last_scrape_duration_seconds",
        "vllm_sidecar_lease_ttl_remaining_seconds",
        "vllm_sidecar_registered 1",
        "vllm_sidecar_last_heartbeat_success_timestamp_seconds",
        "vllm_sidecar_heartbeat_duration_seconds_bucket",
        "vllm_sidecar_scrape_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "{name} in\n{metrics}");
    }
    sidecar.signal("TERM");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

#[tokio::test]
async fn secrets_never_reach_the_logs() {
    let stubs = Stubs::start(401, ok("{}")).await;
    // etcd with auth: the token is echoed nowhere either.
    mount(
        &stubs.etcd,
        "POST",
        "/v3/auth/authenticate",
        ok(r#"{"token":"etcd-TOKEN-secret"}"#),
    )
    .await;
    let mut args = stubs.args();
    args.extend(
        [
            "--internal-token",
            "master-TOKEN-secret",
            "--etcd-username",
            "root",
            "--log-format",
            "json",
        ]
        .map(String::from),
    );
    let mut sidecar = Sidecar::spawn(
        &args,
        &[
            ("ETCD_PASSWORD", "etcd-PASSWORD-secret"),
            ("RUST_LOG", "trace"),
        ],
    );
    eventually("rejected heartbeats", Duration::from_secs(10), || async {
        Stubs::count(&stubs.master, "/v1/internal/heartbeat").await >= 2
    })
    .await;
    sidecar.signal("TERM");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
    // Let the drain thread finish.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let logs = sidecar.stderr.lock().unwrap().clone();
    assert!(
        logs.contains("internal-token"),
        "the 401 is logged:\n{logs}"
    );
    for secret in [
        "master-TOKEN-secret",
        "etcd-TOKEN-secret",
        "etcd-PASSWORD-secret",
    ] {
        assert!(!logs.contains(secret), "{secret} leaked into the logs");
    }
    // JSON lines.
    let first = logs.lines().next().unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_ok(),
        "{first}"
    );
}

#[tokio::test]
async fn sigusr1_drains_sigusr2_undrains_and_so_does_the_admin_endpoint() {
    let stubs = Stubs::start(200, ok("{}")).await;
    let mut args = stubs.args();
    args.extend(["--admin-listen".to_string(), "127.0.0.1:0".to_string()]);
    let mut sidecar = Sidecar::spawn(&args, &[]);
    let admin = sidecar.admin_url().await;
    let http = reqwest::Client::new();
    let puts = || Stubs::count(&stubs.etcd, "/v3/kv/put");
    let revokes = || Stubs::count(&stubs.etcd, "/v3/lease/revoke");
    eventually("registered", Duration::from_secs(10), || async {
        puts().await == 1
    })
    .await;

    sidecar.signal("USR1");
    eventually("revoked by the drain", Duration::from_secs(10), || async {
        revokes().await == 1
    })
    .await;
    let ready = http.get(format!("{admin}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(ready["state"], "draining");
    // Stays deregistered while vLLM stays healthy (several probe periods).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(puts().await, 1);

    sidecar.signal("USR2");
    eventually("registered again", Duration::from_secs(10), || async {
        puts().await == 2
    })
    .await;

    // The same through the admin endpoint, from loopback.
    let drain = http.post(format!("{admin}/drain")).send().await.unwrap();
    assert_eq!(drain.status(), 202);
    eventually("revoked again", Duration::from_secs(10), || async {
        revokes().await == 2
    })
    .await;
    let undrain = http.post(format!("{admin}/undrain")).send().await.unwrap();
    assert_eq!(undrain.status(), 202);
    eventually(
        "registered a third time",
        Duration::from_secs(10),
        || async { puts().await == 3 },
    )
    .await;
    sidecar.signal("TERM");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

#[tokio::test]
async fn a_followed_master_switch_is_logged_with_the_old_and_new_url() {
    let stubs = Stubs::start(200, ok("{}")).await;
    // XLLM:SERVICE:MASTER = 127.0.0.1:7777 (the master's RPC port).
    let master_key = ok(r#"{"kvs":[{"key":"eA==","value":"MTI3LjAuMC4xOjc3Nzc="}],"count":"1"}"#);
    mount(&stubs.etcd, "POST", "/v3/kv/range", master_key).await;
    let http_port = stubs.master.address().port().to_string();
    let mut args = stubs.args();
    // Nothing listens on the configured URL: only the key leads to the master.
    args.extend(["--xllm-service-url", "http://127.0.0.1:1"].map(String::from));
    args.extend(["--master-http-port", http_port.as_str()].map(String::from));
    let mut sidecar = Sidecar::spawn(&args, &[("XLLM_FOLLOW_MASTER", "on")]);
    eventually(
        "a heartbeat at the master",
        Duration::from_secs(10),
        || async { Stubs::count(&stubs.master, "/v1/internal/heartbeat").await > 0 },
    )
    .await;
    let new_url = format!("new_url=http://127.0.0.1:{http_port}/v1/internal/heartbeat");
    let logged = sidecar.stderr.lock().unwrap().clone();
    let line = logged
        .lines()
        .find(|l| l.contains("following the elected master"));
    let line = line.unwrap_or_else(|| panic!("no switch logged:\n{logged}"));
    assert!(
        line.contains("old_url=http://127.0.0.1:1/v1/internal/heartbeat"),
        "{line}"
    );
    assert!(line.contains(&new_url), "{line}");
    assert!(line.contains("master=127.0.0.1:7777"), "{line}");
    sidecar.signal("TERM");
    assert_eq!(
        sidecar.wait_exit(Duration::from_secs(10)).await.code(),
        Some(0)
    );
}
