//! The `mock-etcd` binary: prints the bound address first, serves, rejects bad flags.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn prints_its_address_and_serves_with_auth() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-etcd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--user",
            "root:pw",
            "--token-ttl",
            "60",
            "--no-control",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Killed(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    let line = tokio::time::timeout(Duration::from_secs(10), line)
        .await
        .unwrap()
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {line:?}"));
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let r = http
        .post(format!("http://{addr}/v3/kv/range"))
        .body(r#"{"key":"Zm9v"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("user name is empty"));
    let r = http
        .post(format!("http://{addr}/v3/auth/authenticate"))
        .body(r#"{"name":"root","password":"pw"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .get(format!("http://{addr}/_mock/state"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404, "--no-control");
    drop(child);
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        vec!["--listen", "nonsense"],
        vec!["--user", "nopassword"],
        vec!["--token-ttl", "-3"],
        vec!["--bogus"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mock-etcd"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("mock-etcd: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}
