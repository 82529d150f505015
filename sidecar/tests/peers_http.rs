//! `peers::http::build_client`: what every peer's client trusts (CA bundles from the
//! environment, as the reference's `requests` reads them), how it goes through a proxy
//! (`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`) and that it never sends a request twice.
//!
//! The environment is process-wide, so each environment case runs in a child process:
//! this test binary run again on one `#[ignore]`d child test, with only that child's
//! environment set. The parent holds the servers and counts what reached them.

#[path = "support/raw_http.rs"]
mod raw_http;
#[path = "support/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use raw_http::{answer, RawServer, Reply};
use sidecar::config::Secret;
use sidecar::peers::etcd::{EtcdClient, EtcdError};
use sidecar::peers::http::{build_client, build_client_with_roots, Redirects, CA_BUNDLE_VARS};
use url::Url;

/// Every variable that changes what a client trusts or where it connects.
const ENV_VARS: [&str; 11] = [
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// Run the child test `name` with exactly `env` (of [`ENV_VARS`]) set and `target` to
/// fetch; answers the line it printed after `RESULT: `.
fn child(name: &str, target: &str, env: &[(&str, String)]) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ]);
    for var in ENV_VARS {
        command.env_remove(var);
    }
    command.env("PEERS_HTTP_TARGET", target);
    for (var, value) in env {
        command.env(var, value);
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT: ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("child {name} printed no result: {stdout}"))
        .to_string()
}

/// The child: build a client from its environment, GET the target, print the outcome.
#[test]
#[ignore = "run by the parent tests in a child process with its own environment"]
fn child_get() {
    let Ok(target) = std::env::var("PEERS_HTTP_TARGET") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let client = build_client(Redirects::Follow).map_err(|e| format!("build: {e}"))?;
        let response = client
            .get(&target)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| format!("send: {}", sidecar::peers::http::describe(&e)))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| format!("body: {e}"))?;
        Ok::<_, String>(format!("{status} {body}"))
    });
    match result {
        Ok(line) => println!("RESULT: ok {line}"),
        Err(e) => println!("RESULT: err {e}"),
    }
}

/// An HTTPS server answering `ok` to every request, each connection on its own thread.
fn https_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = tls::server_config();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else {
                return;
            };
            let config = config.clone();
            std::thread::spawn(move || {
                tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let Some(mut stream) = tls::accept(&config, tcp) else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream
                            .write_all(reply)
                            .and_then(|_| stream.flush())
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    format!("https://127.0.0.1:{port}/health")
}

#[test]
fn ca_bundle_variables_decide_which_servers_are_trusted() {
    let url = https_server();
    let ca = fixture("ca.pem").display().to_string();
    // The built-in roots do not know the test CA.
    let result = child("child_get", &url, &[]);
    assert!(result.starts_with("err send: connect failed"), "{result}");
    assert!(result.contains("certificate"), "{result}");
    // Each variable, alone.
    for var in CA_BUNDLE_VARS {
        assert_eq!(
            child("child_get", &url, &[(var, ca.clone())]),
            "ok 200 ok",
            "{var}"
        );
    }
    // The first one set wins: a bundle without a certificate is an error naming the
    // variable and the file, even when a later variable names a good one.
    let key = fixture("leaf.key").display().to_string();
    let result = child(
        "child_get",
        &url,
        &[("REQUESTS_CA_BUNDLE", key), ("SSL_CERT_FILE", ca.clone())],
    );
    assert!(
        result.starts_with("err build: REQUESTS_CA_BUNDLE="),
        "{result}"
    );
    assert!(
        result.contains("leaf.key") && result.contains("no certificates"),
        "{result}"
    );
    let missing = fixture("missing.pem").display().to_string();
    let result = child("child_get", &url, &[("CURL_CA_BUNDLE", missing)]);
    assert!(
        result.contains("CURL_CA_BUNDLE") && result.contains("cannot read"),
        "{result}"
    );
    // The bundle replaces the built-in roots (as with `requests`): an empty variable is
    // unset.
    assert!(child("child_get", &url, &[("REQUESTS_CA_BUNDLE", String::new())]).starts_with("err"));
}

#[tokio::test]
async fn a_client_with_the_test_ca_as_roots_speaks_https() {
    let url = https_server();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls::ca()).unwrap();
    let client = build_client_with_roots(Redirects::Never, roots).unwrap();
    let response = client
        .get(&url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "ok");
}

/// A forward proxy that answers every request itself with `via-proxy` and keeps the
/// request lines it saw; and a target that answers `direct`.
async fn proxy_and_target() -> (RawServer, RawServer) {
    let proxy = RawServer::start(|_, request| {
        let line = String::from_utf8_lossy(request)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        Reply::Bytes(answer(
            "200 OK",
            &[],
            format!("via-proxy {line}").as_bytes(),
        ))
    })
    .await;
    let target = RawServer::start(|_, _| Reply::Bytes(answer("200 OK", &[], b"direct"))).await;
    (proxy, target)
}

#[tokio::test]
async fn http_proxy_and_all_proxy_are_honoured() {
    let (proxy, target) = proxy_and_target().await;
    let url = target.url("/metrics");
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY"] {
        let before = proxy.requests();
        let result = tokio::task::spawn_blocking({
            let (url, proxy_url) = (url.clone(), proxy.url(""));
            move || child("child_get", &url, &[(var, proxy_url)])
        })
        .await
        .unwrap();
        // The proxy got the request in absolute form, for the target.
        assert_eq!(
            result,
            format!("ok 200 via-proxy GET {url} HTTP/1.1"),
            "{var}"
        );
        assert_eq!(proxy.requests(), before + 1, "{var}");
    }
    assert_eq!(target.requests(), 0);
}

#[tokio::test]
async fn no_proxy_is_honoured() {
    let (proxy, target) = proxy_and_target().await;
    let url = target.url("/metrics");
    for no_proxy in ["127.0.0.1", "localhost,127.0.0.0/8", "*"] {
        let result = tokio::task::spawn_blocking({
            let (url, proxy_url) = (url.clone(), proxy.url(""));
            move || {
                child(
                    "child_get",
                    &url,
                    &[
                        ("HTTP_PROXY", proxy_url),
                        ("NO_PROXY", no_proxy.to_string()),
                    ],
                )
            }
        })
        .await
        .unwrap();
        assert_eq!(result, "ok 200 direct", "NO_PROXY={no_proxy}");
    }
    assert_eq!(proxy.requests(), 0);
    assert_eq!(target.requests(), 3);
}

#[tokio::test]
async fn an_etcd_call_whose_connection_closes_before_the_answer_is_not_resent() {
    // One endpoint that reads the lease grant and hangs up: the grant may have happened,
    // so it must not be sent again (an orphan lease until its TTL).
    let server = RawServer::start(|_, _| Reply::Close).await;
    let etcd = EtcdClient::new(
        vec![Url::parse(&server.url("")).unwrap()],
        String::new(),
        Secret::default(),
        Duration::from_secs(5),
        build_client(Redirects::Never).unwrap(),
    );
    let err = etcd.lease_grant(6).await.unwrap_err();
    assert!(
        matches!(&err, EtcdError::Unavailable(m) if m.contains("/v3/lease/grant")),
        "{err}"
    );
    assert_eq!(server.requests(), 1);

    // On a reused connection too.
    let server = RawServer::start(|n, _| {
        if n == 0 {
            Reply::Bytes(answer(
                "200 OK",
                &["content-type: application/json"],
                br#"{"ID":"7","TTL":"6"}"#,
            ))
        } else {
            Reply::Close
        }
    })
    .await;
    let etcd = EtcdClient::new(
        vec![Url::parse(&server.url("")).unwrap()],
        String::new(),
        Secret::default(),
        Duration::from_secs(5),
        build_client(Redirects::Never).unwrap(),
    );
    assert_eq!(etcd.lease_grant(6).await, Ok(7));
    assert!(etcd.lease_grant(6).await.is_err());
    assert_eq!((server.requests(), server.connections()), (2, 1));
}

#[tokio::test]
async fn a_client_that_never_follows_redirects_takes_the_3xx_as_the_answer() {
    let server =
        RawServer::start(|_, _| Reply::Bytes(answer("302 Found", &["location: /elsewhere"], b"")))
            .await;
    let client = build_client(Redirects::Never).unwrap();
    let response = client.get(server.url("/x")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 302);
    assert_eq!(server.requests(), 1);
}

/// A CONNECT proxy: tunnels each connection to the host:port it names, counting them.
async fn connect_proxy() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounded: the head is at most 8 KiB, read a byte at a time so no tunnelled byte is
    // taken with it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tunnels = Arc::new(AtomicUsize::new(0));
    let count = tunnels.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let Some(authority) = line
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                else {
                    return;
                };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(authority).await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (url, tunnels)
}

#[tokio::test]
async fn https_proxy_tunnels_https_targets() {
    let target = https_server();
    let (proxy, tunnels) = connect_proxy().await;
    let ca = fixture("ca.pem").display().to_string();
    let result = tokio::task::spawn_blocking(move || {
        child(
            "child_get",
            &target,
            &[("HTTPS_PROXY", proxy), ("REQUESTS_CA_BUNDLE", ca)],
        )
    })
    .await
    .unwrap();
    // TLS end to end through the tunnel: the certificate is still checked against the CA.
    assert_eq!(result, "ok 200 ok");
    assert_eq!(tunnels.load(Ordering::SeqCst), 1);
}
