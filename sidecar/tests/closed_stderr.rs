//! The real binary with a stderr nobody reads any more (a log collector gone, a closed
//! pipe): every log line fails with EPIPE, and the sidecar must go on registering,
//! refreshing and heartbeating, and on SIGTERM revoke its lease and exit 0 (a panic in the
//! log writer would exit 101 and leave the lease to expire).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-sidecar");

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

async fn count(server: &MockServer, p: &str) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == p)
        .count()
}

async fn eventually(what: &str, child: &mut Child, mut check: impl AsyncFnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !check().await {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the sidecar exited ({status}) while waiting for: {what}");
        }
        assert!(Instant::now() < until, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn closed_stderr_and_stdout_never_stop_the_sidecar() {
    let (etcd, vllm, master) = (
        MockServer::start().await,
        MockServer::start().await,
        MockServer::start().await,
    );
    mount(
        &etcd,
        "POST",
        "/v3/lease/grant",
        ok(r#"{"ID":"77","TTL":"5"}"#),
    )
    .await;
    mount(&etcd, "POST", "/v3/kv/put", ok("{}")).await;
    mount(
        &etcd,
        "POST",
        "/v3/lease/keepalive",
        ok(r#"{"result":{"ID":"77","TTL":"5"}}"#),
    )
    .await;
    mount(&etcd, "POST", "/v3/lease/revoke", ok("{}")).await;
    mount(&vllm, "GET", "/health", ResponseTemplate::new(200)).await;
    mount(
        &vllm,
        "GET",
        "/metrics",
        ok("vllm:num_requests_waiting 1\n"),
    )
    .await;
    // 401: the sidecar logs an error about the token on every heartbeat, so it keeps
    // writing to the closed stderr.
    mount(
        &master,
        "POST",
        "/v1/internal/heartbeat",
        ResponseTemplate::new(401),
    )
    .await;

    // The read end is closed before the sidecar starts: its first log line already fails.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = Command::new(BIN)
        .args([
            "--etcd-endpoints",
            &etcd.uri(),
            "--vllm-url",
            &vllm.uri(),
            "--xllm-service-url",
            &master.uri(),
            "--lease-ttl",
            "5",
            "--keepalive-interval",
            "0.2",
            "--heartbeat-interval",
            "0.2",
            "--log-level",
            "DEBUG",
            // Its address is printed on stdout, closed too.
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut child = Killed(child);

    eventually("registered", &mut child.0, async || {
        count(&etcd, "/v3/kv/put").await == 1
    })
    .await;
    eventually(
        "keepalives and heartbeats go on",
        &mut child.0,
        async || {
            count(&etcd, "/v3/lease/keepalive").await >= 3
                && count(&master, "/v1/internal/heartbeat").await >= 3
        },
    )
    .await;
    assert_eq!(count(&etcd, "/v3/lease/revoke").await, 0);

    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < until, "no exit within 10 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(count(&etcd, "/v3/lease/revoke").await, 1);
}

#[test]
fn a_flag_error_on_a_closed_stderr_still_exits_2() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(BIN)
        .args(["--lease-ttl", "soon"])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2), "{status}");
}
