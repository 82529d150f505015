//! The thin binary: first stdout line, flags, the token from the environment.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mock-master");

#[tokio::test]
async fn prints_its_address_first_and_takes_the_token_from_env() {
    let etcd = mock_etcd::start(mock_etcd::Config::default(), mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--etcd-endpoints",
            &etcd.url(),
            "--etcd-namespace",
            "ns",
        ])
        .args([
            "--probe-attempts",
            "1",
            "--suspect-window-ms",
            "500",
            "--publish-interval-ms",
            "100",
        ])
        .env("XLLM_INTERNAL_API_TOKEN", "from-env")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(20), line)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("first line names the address");
    let url = format!("http://{addr}");
    let http = reqwest::Client::new();
    let state: serde_json::Value = http
        .get(format!("{url}/_mock/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["namespace"], "/ns/");
    assert_eq!(state["token_set"], true);
    let hb = serde_json::json!({"name": "a:1", "incarnation_id": "x"});
    let r = http
        .post(format!("{url}/v1/internal/heartbeat"))
        .json(&hb)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = http
        .post(format!("{url}/v1/internal/heartbeat"))
        .header("X-Internal-Token", "from-env")
        .json(&hb)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let _ = child.kill();
    let _ = child.wait();
    etcd.stop().await;
}

#[test]
fn a_flag_error_exits_2_with_one_line() {
    for args in [
        vec!["--listen", "nowhere"],
        vec!["--probe-attempts", "-1"],
        vec!["--bogus"],
        vec!["--elect", "--service-name", "MASTER"],
        vec!["--service-name", "127.0.0.1:99999"],
        vec!["--election-ttl-secs", "0"],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("mock-master: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[tokio::test]
async fn authenticates_to_etcd_with_flags_and_env_and_never_logs_the_password() {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    let cfg = mock_etcd::Config {
        users: vec![("root".into(), "pw-from-env".into())],
        ..Default::default()
    };
    let etcd = mock_etcd::start(cfg, mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let auth: serde_json::Value = http
        .post(format!("{}/v3/auth/authenticate", etcd.url()))
        .json(&serde_json::json!({"name": "root", "password": "pw-from-env"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let value = serde_json::json!({"name": "127.0.0.1:9", "rpc_address": "127.0.0.1:9", "type": 0,
        "incarnation_id": "i1", "register_ts_ms": 1});
    let r = http
        .post(format!("{}/v3/kv/put", etcd.url()))
        .header("Authorization", auth["token"].as_str().unwrap())
        .json(
            &serde_json::json!({"key": B64.encode("XLLM:DEFAULT:127.0.0.1:9"),
            "value": B64.encode(value.to_string())}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let dir = std::env::temp_dir().join(format!("mock-master-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--etcd-endpoints", &etcd.url()])
        .args(["--etcd-username", "root"])
        .env("ETCD_PASSWORD", "pw-from-env")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(20), line)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let state: serde_json::Value = http
        .get(format!("http://{addr}/_mock/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        state["instances"].to_string().contains("127.0.0.1:9"),
        "the authenticated first listing found nothing: {state}"
    );
    assert!(logged.contains("authenticated to etcd"), "{logged}");
    assert!(!logged.contains("pw-from-env"), "{logged}");
    etcd.stop().await;
}

/// SIGTERM (a supervisor's stop) and SIGINT (Ctrl-C) both stop the server gracefully:
/// exit code 0, within a few seconds, even when sent as soon as the address is printed.
#[tokio::test]
async fn sigterm_and_sigint_stop_it_gracefully_with_code_0() {
    use tokio::io::AsyncBufReadExt;
    let etcd = mock_etcd::start(mock_etcd::Config::default(), mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    for signal in ["-TERM", "-INT"] {
        let mut child = tokio::process::Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--etcd-endpoints", &etcd.url()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the address within 20 s")
            .unwrap()
            .unwrap_or_default();
        assert!(line.starts_with("listening on "), "{line}");
        let pid = child.id().unwrap().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running 10 s after kill {signal}"))
            .unwrap();
        assert_eq!(status.code(), Some(0), "after kill {signal}: {status}");
    }
    etcd.stop().await;
}
