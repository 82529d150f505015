//! vLLM's endpoints: `/health` (is the engine up), `/metrics` (its load, as a page of
//! text for the core to map), `/v1/models` and `/version` (the model name and the
//! release, for the log).
//!
//! Why thin: whether a page holds vLLM samples, how many failed probes make an engine
//! down, when to scrape: the core decides. Here each call is one GET, bounded in time as
//! a whole and in bytes while reading; redirects follow the client's policy
//! ([`super::http::Redirects::Follow`] for vLLM).

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::exchange::{Body, Exchange};
use super::http::{content_format, describe, display_url, read_body, read_capped};
use crate::prom::Format;

/// What the scrape asks for: the text format first, as Prometheus does. vLLM's
/// `/metrics/` (trailing slash) is prometheus_client's negotiating handler, which takes
/// the first type it knows in list order, ignoring q-values, and from 0.22 escapes
/// OpenMetrics names (`vllm_…`) unless told `escaping=allow-utf-8`: asking first for
/// text 1.0.0 with names as they are gets vLLM's names from it; older handlers skip that
/// entry (and answer the text or OpenMetrics they always did).
const ACCEPT: &str = "text/plain;version=1.0.0;escaping=allow-utf-8;q=1.0, text/plain;version=0.0.4;q=0.9, application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5, */*;q=0.1";

/// The body of `/health` is read only to reuse the connection: at most this much.
pub const HEALTH_BODY_CAP: usize = 64 * 1024;

/// `/v1/models` answers are small lists.
const MODELS_BODY_CAP: usize = 1024 * 1024;

/// One `/metrics` page as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsPage {
    pub text: String,
    /// `Content-Type` said OpenMetrics (else the Prometheus text format).
    pub openmetrics: bool,
    /// Bytes of the decoded page.
    pub bytes: usize,
}

/// Why a `/metrics` read gave no page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrapeError {
    /// No answer: connection refused, reset, TLS, redirect loop, …
    Transport(String),
    /// A non-2xx answer.
    Status(u16),
    /// The decoded page is longer than the cap (the cap given); reading stopped there.
    TooLarge(usize),
    /// The page is not UTF-8 text.
    NotUtf8,
    /// The exchange did not finish within the scrape timeout.
    Timeout,
    /// The `Content-Encoding` body did not decode (corrupt gzip/deflate).
    Decode(String),
}

impl ScrapeError {
    /// The reason label for the scrape-errors counter.
    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Transport(_) => "transport",
            ScrapeError::Status(_) => "status",
            ScrapeError::TooLarge(_) => "too_large",
            ScrapeError::NotUtf8 => "not_utf8",
            ScrapeError::Timeout => "timeout",
            ScrapeError::Decode(_) => "decode",
        }
    }
}

impl std::fmt::Display for ScrapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScrapeError::Transport(e) => write!(f, "GET /metrics failed: {e}"),
            ScrapeError::Status(s) => write!(f, "GET /metrics answered HTTP {s}"),
            ScrapeError::TooLarge(cap) => write!(f, "/metrics is larger than {cap} bytes"),
            ScrapeError::NotUtf8 => f.write_str("/metrics body is not UTF-8"),
            ScrapeError::Timeout => f.write_str("/metrics not read within the scrape timeout"),
            ScrapeError::Decode(e) => write!(f, "/metrics body did not decode: {e}"),
        }
    }
}

impl std::error::Error for ScrapeError {}

/// The client of one vLLM server.
#[derive(Clone)]
pub struct VllmClient {
    http: reqwest::Client,
    health_url: Result<Url, String>,
    models_url: Result<Url, String>,
    version_url: Result<Url, String>,
    metrics_url: Url,
    health_timeout: Duration,
    scrape_timeout: Duration,
    metrics_max_bytes: usize,
}

/// Shows the URLs without user name and password.
impl std::fmt::Debug for VllmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmClient")
            .field("health_url", &self.health_url.as_ref().map(display_url))
            .field("metrics_url", &display_url(&self.metrics_url))
            .field("health_timeout", &self.health_timeout)
            .field("scrape_timeout", &self.scrape_timeout)
            .field("metrics_max_bytes", &self.metrics_max_bytes)
            .finish()
    }
}

impl VllmClient {
    /// `/health` and `/v1/models` are under `vllm_url` (its path kept, as the reference
    /// appends to it); `metrics_url` is used as given.
    pub fn new(
        http: reqwest::Client,
        vllm_url: &Url,
        metrics_url: Url,
        health_timeout: Duration,
        scrape_timeout: Duration,
        metrics_max_bytes: usize,
    ) -> VllmClient {
        let base = vllm_url.as_str().trim_end_matches('/').to_string();
        let join = |path: &str| {
            Url::parse(&format!("{base}{path}")).map_err(|e| format!("{base}{path}: {e}"))
        };
        VllmClient {
            http,
            health_url: join("/health"),
            models_url: join("/v1/models"),
            version_url: join("/version"),
            metrics_url,
            health_timeout,
            scrape_timeout,
            metrics_max_bytes,
        }
    }

    /// `Ok` iff `/health` answered 2xx (body read, capped) within the health timeout;
    /// else why not ([`classify_health`]).
    pub async fn probe_health(&self) -> Result<(), String> {
        let url = self.health_url.clone()?;
        let exchange = async {
            let mut response = match self.http.get(url).send().await {
                Ok(response) => response,
                Err(e) => return Exchange::Failed(describe(&e)),
            };
            let status = response.status().as_u16();
            // Read (bounded) so the connection can be reused.
            let body = read_body(&mut response, HEALTH_BODY_CAP).await;
            Exchange::Answer {
                status,
                format: None,
                body,
            }
        };
        let exchange = tokio::time::timeout(self.health_timeout, exchange)
            .await
            .unwrap_or(Exchange::TimedOut);
        classify_health(exchange, self.health_timeout)
    }

    /// One `/metrics` page: decoded (gzip/deflate), capped at `metrics_max_bytes` while
    /// reading, the whole exchange within the scrape timeout ([`classify_scrape`]).
    pub async fn fetch_metrics(&self) -> Result<MetricsPage, ScrapeError> {
        let exchange = async {
            let request = self
                .http
                .get(self.metrics_url.clone())
                .header(reqwest::header::ACCEPT, ACCEPT);
            let mut response = match request.send().await {
                Ok(response) => response,
                Err(e) => return Exchange::Failed(describe(&e)),
            };
            let status = response.status();
            // A failed status is the whole answer: its body is not read.
            let body = if status.is_success() {
                read_body(&mut response, self.metrics_max_bytes).await
            } else {
                Body::Unread
            };
            Exchange::Answer {
                status: status.as_u16(),
                format: content_format(&response),
                body,
            }
        };
        let exchange = tokio::time::timeout(self.scrape_timeout, exchange)
            .await
            .unwrap_or(Exchange::TimedOut);
        classify_scrape(exchange)
    }

    /// The release from `/version` (`{"version": "0.33.0"}`), for the registration log
    /// line only; `None` on any failure (older servers and proxies may not have it).
    pub async fn served_version(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Version {
            version: String,
        }
        let body = self.small_get(self.version_url.clone().ok()?).await?;
        let v: Version = serde_json::from_slice(&body).ok()?;
        Some(v.version)
    }

    /// A small JSON answer's body (2xx only, capped), within the health timeout.
    async fn small_get(&self, url: Url) -> Option<Vec<u8>> {
        let exchange = async {
            let mut response = self.http.get(url).send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            read_capped(&mut response, MODELS_BODY_CAP).await.ok()
        };
        tokio::time::timeout(self.health_timeout, exchange)
            .await
            .ok()?
    }

    /// The first model id from `/v1/models`, for the registration log line only;
    /// `None` on any failure.
    pub async fn served_model(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Models {
            data: Vec<Model>,
        }
        #[derive(Deserialize)]
        struct Model {
            id: String,
        }
        let url = self.models_url.clone().ok()?;
        let exchange = async {
            let mut response = self.http.get(url).send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            read_capped(&mut response, MODELS_BODY_CAP).await.ok()
        };
        let body = tokio::time::timeout(self.health_timeout, exchange)
            .await
            .ok()??;
        let models: Models = serde_json::from_slice(&body).ok()?;
        models.data.into_iter().next().map(|m| m.id)
    }
}

/// What a `/health` exchange that ended as `exchange` says: `Ok` iff a 2xx came with its
/// body read (a body that could not be read is the failure, as the connection is then
/// not reusable); else the reason, for the log. `timeout`: the health timeout, named in
/// the message when it ran out.
pub fn classify_health(exchange: Exchange, timeout: Duration) -> Result<(), String> {
    let (status, body) = match exchange {
        Exchange::TimedOut => return Err(format!("/health: no answer within {timeout:?}")),
        Exchange::Failed(e) => return Err(e),
        Exchange::Answer { status, body, .. } => (status, body),
    };
    match body {
        Body::OverCap(cap) => return Err(format!("/health body larger than {cap} bytes")),
        Body::Failed(f) => return Err(f.message),
        Body::Bytes(_) | Body::Text(_) | Body::Unread => {}
    }
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(format!("/health answered HTTP {status}"))
    }
}

/// What a `/metrics` exchange that ended as `exchange` says: the page, or why there is
/// none. A non-2xx status is the error whatever the body; a 2xx body must have been read
/// whole (the caller enforced its cap) and be UTF-8. An unread 2xx body reads as empty.
pub fn classify_scrape(exchange: Exchange) -> Result<MetricsPage, ScrapeError> {
    let (status, format, body) = match exchange {
        Exchange::TimedOut => return Err(ScrapeError::Timeout),
        Exchange::Failed(e) => return Err(ScrapeError::Transport(e)),
        Exchange::Answer {
            status,
            format,
            body,
        } => (status, format, body),
    };
    if !(200..300).contains(&status) {
        return Err(ScrapeError::Status(status));
    }
    let text = match body {
        Body::Text(text) => text,
        Body::Bytes(bytes) => String::from_utf8(bytes).map_err(|_| ScrapeError::NotUtf8)?,
        Body::Unread => String::new(),
        Body::OverCap(cap) => return Err(ScrapeError::TooLarge(cap)),
        Body::Failed(f) if f.decode => return Err(ScrapeError::Decode(f.message)),
        Body::Failed(f) => return Err(ScrapeError::Transport(f.message)),
    };
    Ok(MetricsPage {
        bytes: text.len(),
        text,
        openmetrics: format == Some(Format::OpenMetrics),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::exchange::ReadFailure;

    const T: Duration = Duration::from_secs(3);

    fn answer(status: u16, body: Body) -> Exchange {
        Exchange::Answer {
            status,
            format: None,
            body,
        }
    }

    fn failed(message: &str, decode: bool) -> Body {
        Body::Failed(ReadFailure {
            message: message.into(),
            decode,
        })
    }

    #[test]
    fn health_is_a_2xx_whose_body_was_read() {
        assert_eq!(classify_health(answer(200, Body::Bytes(vec![])), T), Ok(()));
        assert_eq!(classify_health(answer(299, Body::Unread), T), Ok(()));
        assert_eq!(
            classify_health(answer(503, Body::Bytes(vec![])), T),
            Err("/health answered HTTP 503".into())
        );
        assert_eq!(
            classify_health(answer(200, Body::OverCap(HEALTH_BODY_CAP)), T),
            Err(format!("/health body larger than {HEALTH_BODY_CAP} bytes"))
        );
        // A body that failed to read is the failure, even under a bad status.
        assert_eq!(
            classify_health(answer(500, failed("body read failed", false)), T),
            Err("body read failed".into())
        );
    }

    #[test]
    fn health_without_an_answer_says_why() {
        assert_eq!(
            classify_health(Exchange::TimedOut, T),
            Err("/health: no answer within 3s".into())
        );
        assert_eq!(
            classify_health(Exchange::Failed("connect failed: refused".into()), T),
            Err("connect failed: refused".into())
        );
    }

    #[test]
    fn a_scrape_page_is_utf8_text_of_a_2xx_with_the_format_named() {
        let page = classify_scrape(Exchange::Answer {
            status: 200,
            format: Some(Format::OpenMetrics),
            body: Body::Bytes(b"a 1\n".to_vec()),
        });
        assert_eq!(
            page,
            Ok(MetricsPage {
                text: "a 1\n".into(),
                openmetrics: true,
                bytes: 4
            })
        );
        let page = classify_scrape(answer(200, Body::Text("b 2\n".into())));
        assert_eq!(
            page.map(|p| (p.text, p.openmetrics)),
            Ok(("b 2\n".into(), false))
        );
        assert_eq!(
            classify_scrape(answer(200, Body::Bytes(vec![0xff, 0xfe]))),
            Err(ScrapeError::NotUtf8)
        );
    }

    #[test]
    fn scrape_errors_are_typed_by_what_went_wrong() {
        let cases = [
            (Exchange::TimedOut, ScrapeError::Timeout),
            (
                Exchange::Failed("x".into()),
                ScrapeError::Transport("x".into()),
            ),
            (answer(404, Body::Unread), ScrapeError::Status(404)),
            // The status decides before the body does.
            (answer(500, Body::OverCap(10)), ScrapeError::Status(500)),
            (answer(200, Body::OverCap(10)), ScrapeError::TooLarge(10)),
            (
                answer(200, failed("gz", true)),
                ScrapeError::Decode("gz".into()),
            ),
            (
                answer(200, failed("rst", false)),
                ScrapeError::Transport("rst".into()),
            ),
        ];
        for (exchange, want) in cases {
            assert_eq!(classify_scrape(exchange.clone()), Err(want), "{exchange:?}");
        }
    }
}
