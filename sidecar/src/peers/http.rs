//! The one place reqwest clients are built, and the capped body read every peer uses.
//!
//! Why one place: what the sidecar trusts (CA bundles), how it reaches its peers
//! (proxies from the environment, redirects) and what it never does on its own (resend a
//! request) must be the same for etcd, vLLM and the master, and checked once.
//!
//! - TLS is rustls with the CAs from the bundle `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` or
//!   `SSL_CERT_FILE` names (the first set, as the reference's `requests` reads them; the
//!   bundle replaces the built-in roots, as with `requests`), else the webpki roots.
//! - `Content-Encoding: gzip` / `deflate` answers are decoded (a proxy may compress even
//!   unasked); proxies come from `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY` as
//!   reqwest reads them (read when the client is built), and `NO_PROXY=*` as curl does.
//! - No request is resent by reqwest: its retry policy is set to `never`. hyper's pool
//!   still takes another connection when a pooled one is found closed *before* any byte
//!   of the request was written (hyper-util's `retry_canceled_requests`, not settable
//!   through reqwest); a request whose bytes were written is never sent again.
//! - Answer heads are read leniently: bare-LF line ends, folded headers, non-UTF-8
//!   values, up to 100 headers (hyper's fixed limit); a malformed header line is skipped.
//! - Timeouts are the caller's, per request: nothing here has a default one.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::exchange::{Body, ReadFailure};

/// Hops a GET follows before giving up ([`Redirects::Follow`]).
pub const MAX_REDIRECTS: usize = 5;

/// The environment variables naming a PEM bundle of trusted CAs, in the order they are
/// read: the two the reference's `requests` honours, in its order, then OpenSSL's.
pub const CA_BUNDLE_VARS: [&str; 3] = ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"];

/// A CA bundle file larger than this is refused.
const MAX_CA_BUNDLE_BYTES: u64 = 16 * 1024 * 1024;

/// Whether a client follows redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Up to [`MAX_REDIRECTS`] hops (vLLM's `/health`, `/metrics`, `/v1/models`).
    Follow,
    /// A 3xx is the answer (POSTs, etcd).
    Never,
}

/// A client trusting the CA bundle the environment names (else the webpki roots). The
/// error names the variable and the file when the bundle cannot be used.
pub fn build_client(redirects: Redirects) -> Result<reqwest::Client, String> {
    build_client_with_roots(redirects, trusted_roots()?)
}

/// A client trusting exactly `roots` for `https://` (tests, private CAs).
pub fn build_client_with_roots(
    redirects: Redirects,
    roots: rustls::RootCertStore,
) -> Result<reqwest::Client, String> {
    let policy = match redirects {
        Redirects::Follow => reqwest::redirect::Policy::limited(MAX_REDIRECTS),
        Redirects::Never => reqwest::redirect::Policy::none(),
    };
    let mut builder = reqwest::Client::builder();
    if no_proxy_for_any_host() {
        builder = builder.no_proxy();
    }
    builder
        .use_preconfigured_tls(tls_config(roots)?)
        .redirect(policy)
        .retry(reqwest::retry::never())
        .gzip(true)
        .deflate(true)
        // Be lenient with answer heads as `requests` is: a folded or a malformed header
        // line costs that header, not the whole answer.
        .http1_allow_obsolete_multiline_headers_in_responses(true)
        .http1_ignore_invalid_headers_in_responses(true)
        // Idle pooled connections a peer may have closed meanwhile are not kept long.
        .pool_idle_timeout(Duration::from_secs(30))
        .user_agent(concat!("vllm-sidecar/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("building the HTTP client: {}", describe(&e)))
}

/// `NO_PROXY=*`: curl and `requests` then use no proxy at all; reqwest (hyper-util)
/// would still proxy IP-literal hosts such as `127.0.0.1`, the usual vLLM URL.
fn no_proxy_for_any_host() -> bool {
    ["NO_PROXY", "no_proxy"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|value| !value.trim().is_empty())
        .is_some_and(|value| value.trim() == "*")
}

/// The CAs an `https://` peer must chain to: the bundle a [`CA_BUNDLE_VARS`] variable
/// names, else the webpki roots.
pub fn trusted_roots() -> Result<rustls::RootCertStore, String> {
    for var in CA_BUNDLE_VARS {
        if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let path = std::path::PathBuf::from(path);
            return roots_from_pem_file(&path)
                .map_err(|e| format!("{var}={}: {e}", path.display()));
        }
    }
    let mut store = rustls::RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok(store)
}

/// Every certificate in a PEM file, as trust anchors; a file with none is an error.
pub fn roots_from_pem_file(path: &std::path::Path) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::Read;
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| format!("cannot read: {e}"))?;
    if pem.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(format!("larger than {MAX_CA_BUNDLE_BYTES} bytes"));
    }
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("bad CA certificate: {e}"))?;
    }
    if store.is_empty() {
        return Err("no certificates in it".into());
    }
    Ok(store)
}

fn tls_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The client speaks HTTP/1.1 only (reqwest's http2 feature is off).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Why a body read stopped.
#[derive(Debug)]
pub enum BodyError {
    /// The body is longer than the cap (the cap given); nothing past it was read.
    TooLarge(usize),
    /// The connection failed, or the encoded body did not decode.
    Read(reqwest::Error),
}

/// The whole (decoded) body, read chunk by chunk and stopped as soon as it passes `cap`
/// bytes: a server sending forever costs at most `cap` bytes and one chunk. The caller
/// bounds the time.
pub async fn read_capped(
    response: &mut reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, BodyError> {
    // A declared length past the cap is refused before reading (when not re-encoded).
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(BodyError::TooLarge(cap));
    }
    // Sized once from the declared length (a page arrives in many chunks).
    let declared = response.content_length().unwrap_or(0);
    let mut body = Vec::with_capacity(usize::try_from(declared).unwrap_or(cap).min(cap));
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > cap {
            return Err(BodyError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// [`read_capped`] as a transport-neutral [`Body`]: what the answer-classifying
/// functions read.
pub async fn read_body(response: &mut reqwest::Response, cap: usize) -> Body {
    match read_capped(response, cap).await {
        Ok(bytes) => Body::Bytes(bytes),
        Err(BodyError::TooLarge(cap)) => Body::OverCap(cap),
        Err(BodyError::Read(e)) => Body::Failed(ReadFailure {
            message: describe(&e),
            decode: e.is_decode(),
        }),
    }
}

/// The text format an answer's `Content-Type` names, if it has a readable one.
pub fn content_format(response: &reqwest::Response) -> Option<crate::prom::Format> {
    let value = response.headers().get(reqwest::header::CONTENT_TYPE)?;
    value
        .to_str()
        .ok()
        .map(crate::prom::Format::from_content_type)
}

/// A reqwest error with its causes (reqwest's own message alone hides why: "error
/// sending request"), without the URL: callers name the peer themselves, and a URL may
/// carry credentials.
pub fn describe(error: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut causes = Vec::new();
    let mut cause = error.source();
    while let Some(e) = cause {
        causes.push(e.to_string());
        cause = e.source();
    }
    describe_failure(FailureClass::of(error), causes.iter().map(String::as_str))
}

/// What kind of failure ended an exchange: the first words of [`describe`]'s text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    TimedOut,
    Connect,
    Redirect,
    Decode,
    Body,
    Request,
}

impl FailureClass {
    fn of(error: &reqwest::Error) -> FailureClass {
        if error.is_timeout() {
            FailureClass::TimedOut
        } else if error.is_connect() {
            FailureClass::Connect
        } else if error.is_redirect() {
            FailureClass::Redirect
        } else if error.is_decode() {
            FailureClass::Decode
        } else if error.is_body() {
            FailureClass::Body
        } else {
            FailureClass::Request
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            FailureClass::TimedOut => "timed out",
            FailureClass::Connect => "connect failed",
            FailureClass::Redirect => "redirect refused",
            FailureClass::Decode => "body did not decode",
            FailureClass::Body => "body read failed",
            FailureClass::Request => "request failed",
        }
    }
}

/// A failure of `class` with its `causes` (outermost first) as [`describe`] writes it:
/// `class: cause: cause`, a cause the text already ends with not repeated. A simulated
/// transport words its failures with it.
pub fn describe_failure<'a>(
    class: FailureClass,
    causes: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut text = class.text().to_string();
    for part in causes {
        if !text.ends_with(part) {
            text.push_str(": ");
            text.push_str(part);
        }
    }
    text
}

/// A URL for messages: without user name and password.
pub fn display_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// A short, printable excerpt of a body for a log line.
pub fn excerpt(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > max_chars {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_its_class_then_each_new_cause() {
        assert_eq!(describe_failure(FailureClass::TimedOut, []), "timed out");
        assert_eq!(
            describe_failure(FailureClass::Connect, ["tcp connect error", "refused"]),
            "connect failed: tcp connect error: refused"
        );
        // A cause the text already ends with is not said twice.
        assert_eq!(
            describe_failure(FailureClass::Request, ["reset", "reset", "eof"]),
            "request failed: reset: eof"
        );
    }
}
