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

use super::http::{content_format, describe, display_url, read_capped, BodyError};
use crate::prom::Format;

/// What the scrape asks for: the text format first, as Prometheus does. vLLM's
/// `/metrics/` (trailing slash) is prometheus_client's negotiating handler, which takes
/// the first type it knows in list order, ignoring q-values, and from 0.22 escapes
/// OpenMetrics names (`vllm_…`) unless told `escaping=allow-utf-8`: asking first for
/// text 1.0.0 with names as they are gets vLLM's names from it; older handlers skip that
/// entry (and answer the text or OpenMetrics they always did).
const ACCEPT: &str = "text/plain;version=1.0.0;escaping=allow-utf-8;q=1.0, text/plain;version=0.0.4;q=0.9, application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5, */*;q=0.1";

/// The body of `/health` is read only to reuse the connection: at most this much.
const HEALTH_BODY_CAP: usize = 64 * 1024;

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
    /// else why not.
    pub async fn probe_health(&self) -> Result<(), String> {
        let url = self.health_url.clone()?;
        let exchange = async {
            let mut response = self.http.get(url).send().await.map_err(|e| describe(&e))?;
            let status = response.status();
            // Read (bounded) so the connection can be reused.
            read_capped(&mut response, HEALTH_BODY_CAP)
                .await
                .map_err(|e| match e {
                    BodyError::TooLarge(cap) => format!("/health body larger than {cap} bytes"),
                    BodyError::Read(e) => describe(&e),
                })?;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("/health answered HTTP {}", status.as_u16()))
            }
        };
        tokio::time::timeout(self.health_timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "/health: no answer within {:?}",
                    self.health_timeout
                ))
            })
    }

    /// One `/metrics` page: decoded (gzip/deflate), capped at `metrics_max_bytes` while
    /// reading, the whole exchange within the scrape timeout.
    pub async fn fetch_metrics(&self) -> Result<MetricsPage, ScrapeError> {
        let exchange = async {
            let mut response = self
                .http
                .get(self.metrics_url.clone())
                .header(reqwest::header::ACCEPT, ACCEPT)
                .send()
                .await
                .map_err(|e| ScrapeError::Transport(describe(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(ScrapeError::Status(status.as_u16()));
            }
            let openmetrics = content_format(&response) == Some(Format::OpenMetrics);
            let body = read_capped(&mut response, self.metrics_max_bytes)
                .await
                .map_err(|e| match e {
                    BodyError::TooLarge(cap) => ScrapeError::TooLarge(cap),
                    BodyError::Read(e) if e.is_decode() => ScrapeError::Decode(describe(&e)),
                    BodyError::Read(e) => ScrapeError::Transport(describe(&e)),
                })?;
            let bytes = body.len();
            let text = String::from_utf8(body).map_err(|_| ScrapeError::NotUtf8)?;
            Ok(MetricsPage {
                text,
                openmetrics,
                bytes,
            })
        };
        tokio::time::timeout(self.scrape_timeout, exchange)
            .await
            .unwrap_or(Err(ScrapeError::Timeout))
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
