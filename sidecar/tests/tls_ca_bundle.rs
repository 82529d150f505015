//! `https://` peers signed by a private CA, trusted through the environment variables the
//! reference's `requests` reads (`REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`) or OpenSSL's
//! (`SSL_CERT_FILE`).
//!
//! Its own test binary with one test: the variables are process-wide, and every other
//! TLS test relies on their absence.

#[path = "support/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use sidecar::http::{client, Error, Request, Target};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// An HTTPS server answering every request on every connection with `ok`, each
/// connection on a thread of its own.
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
                // No thread outlives the test by much, whatever the client does.
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
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream
                            .write_all(answer)
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

fn get(url: &str) -> Result<Vec<u8>, Error> {
    let target = Target::parse(url).unwrap();
    // A new client each time: the TLS set-up (and so the roots) is read on first use.
    let response = client().send(Request::get(&target), 1024, Duration::from_secs(5))?;
    assert_eq!(response.head.status, 200);
    Ok(response.body)
}

#[test]
fn ca_bundle_variables_decide_which_servers_are_trusted() {
    let url = https_server();
    for var in sidecar::http::CA_BUNDLE_VARS {
        std::env::remove_var(var);
    }

    // The built-in roots do not know the test CA.
    let err = get(&url).unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");

    // The reference's variable.
    std::env::set_var("REQUESTS_CA_BUNDLE", fixture("ca.pem"));
    assert_eq!(get(&url).unwrap(), b"ok");
    std::env::remove_var("REQUESTS_CA_BUNDLE");

    // curl's, which requests also reads.
    std::env::set_var("CURL_CA_BUNDLE", fixture("ca.pem"));
    assert_eq!(get(&url).unwrap(), b"ok");
    std::env::remove_var("CURL_CA_BUNDLE");

    // OpenSSL's.
    std::env::set_var("SSL_CERT_FILE", fixture("ca.pem"));
    assert_eq!(get(&url).unwrap(), b"ok");

    // The first one set wins: a bundle without the test CA (its leaf's key, no
    // certificate at all) is an error naming the variable and the file.
    std::env::set_var("REQUESTS_CA_BUNDLE", fixture("leaf.key"));
    let err = get(&url).unwrap_err().to_string();
    assert!(
        err.contains("REQUESTS_CA_BUNDLE") && err.contains("leaf.key"),
        "{err}"
    );
    assert!(err.contains("no certificates"), "{err}");

    // A file that is not there.
    std::env::set_var("REQUESTS_CA_BUNDLE", fixture("missing.pem"));
    let err = get(&url).unwrap_err().to_string();
    assert!(err.contains("cannot read"), "{err}");

    for var in sidecar::http::CA_BUNDLE_VARS {
        std::env::remove_var(var);
    }
}
