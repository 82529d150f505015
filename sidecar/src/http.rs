//! The one HTTP client the sidecar uses for vLLM, etcd and the master, and the capped body
//! read every answer goes through: no peer can make the sidecar buffer without bound.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

/// A client with connection reuse (the reference reuses sessions too) and no proxy: the
/// sidecar talks to its own vLLM and to cluster-internal services only.
///
/// Requests carry no reqwest timeout of their own: every caller bounds the whole exchange
/// (send and body) with one `tokio::time::timeout`, so an exchange arms one timer, not
/// two (at short intervals, timer churn is a visible share of the sidecar's CPU).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(2)
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    TooLarge { limit: usize },
    Read(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge { limit } => write!(f, "body larger than {limit} bytes"),
            BodyError::Read(e) => write!(f, "reading body: {e}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Read the whole body, failing as soon as it passes `limit` bytes.
pub async fn read_capped(response: reqwest::Response, limit: usize) -> Result<Bytes, BodyError> {
    if let Some(len) = response.content_length() {
        if len > limit as u64 {
            return Err(BodyError::TooLarge { limit });
        }
    }
    let expected = response.content_length().unwrap_or(0).min(limit as u64);
    let mut buf = BytesMut::with_capacity(usize::try_from(expected).unwrap_or(0));
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Read the whole body into `buf` (cleared first), failing as soon as it passes `limit`
/// bytes. The buffer is the caller's, so a periodic read of the same page reuses one
/// allocation instead of a fresh one every time.
pub async fn read_capped_into(
    response: reqwest::Response,
    limit: usize,
    buf: &mut Vec<u8>,
) -> Result<(), BodyError> {
    buf.clear();
    if let Some(len) = response.content_length() {
        if len > limit as u64 {
            return Err(BodyError::TooLarge { limit });
        }
        buf.reserve(usize::try_from(len).unwrap_or(0));
    }
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(())
}

/// A transport error with its causes ("error sending request: connection refused"), and
/// without the URL (the caller names the peer).
pub fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut out = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// At most `max` characters of a peer's answer, for a log line.
pub fn snippet(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}
