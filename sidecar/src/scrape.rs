//! Scraping vLLM's `/metrics` into heartbeat metrics: a capped, time-bounded read, the
//! format chosen by `Content-Type`, then the parser and the mapping.

use std::time::{Duration, Instant};

use reqwest::Url;

use crate::http::{read_capped, BodyError};
use crate::mapping::{HeartbeatMetrics, Mapper};
use crate::prom::{self, Format, Mode};

/// Why a scrape gave no metrics.
#[derive(Debug)]
pub enum ScrapeError {
    Request(String),
    Status(u16),
    Body(BodyError),
    TimedOut(Duration),
    NotUtf8,
    Parse(String),
}

impl std::fmt::Display for ScrapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScrapeError::Request(e) => write!(f, "GET /metrics failed: {e}"),
            ScrapeError::Status(s) => write!(f, "GET /metrics answered HTTP {s}"),
            ScrapeError::Body(e) => write!(f, "/metrics body: {e}"),
            ScrapeError::TimedOut(t) => write!(f, "/metrics not read within {t:?}"),
            ScrapeError::NotUtf8 => write!(f, "/metrics body is not UTF-8"),
            ScrapeError::Parse(e) => write!(f, "/metrics did not parse: {e}"),
        }
    }
}

impl std::error::Error for ScrapeError {}

impl ScrapeError {
    /// A parse error (the page arrived but made no sense) as opposed to a transport one.
    pub fn is_parse(&self) -> bool {
        matches!(self, ScrapeError::NotUtf8 | ScrapeError::Parse(_))
    }
}

/// One successful scrape.
#[derive(Debug, Clone, Copy)]
pub struct Scrape {
    pub metrics: HeartbeatMetrics,
    pub duration: Duration,
    /// Lines the lenient parser skipped.
    pub skipped_lines: usize,
}

/// Scrapes one vLLM server; keeps the mapping's interval state between scrapes.
#[derive(Debug)]
pub struct Scraper {
    http: reqwest::Client,
    url: Url,
    timeout: Duration,
    max_bytes: usize,
    mapper: Mapper,
}

impl Scraper {
    pub fn new(
        http: reqwest::Client,
        url: Url,
        timeout: Duration,
        max_bytes: usize,
        mapper: Mapper,
    ) -> Scraper {
        Scraper {
            http,
            url,
            timeout,
            max_bytes,
            mapper,
        }
    }

    pub async fn scrape(&mut self) -> Result<Scrape, ScrapeError> {
        let started = Instant::now();
        let fetch = async {
            let response = self
                .http
                .get(self.url.clone())
                .header(reqwest::header::ACCEPT, "text/plain;version=0.0.4;q=1.0, application/openmetrics-text;version=1.0.0;q=0.5, */*;q=0.1")
                .timeout(self.timeout)
                .send()
                .await
                .map_err(|e| ScrapeError::Request(crate::http::describe(e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(ScrapeError::Status(status.as_u16()));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = read_capped(response, self.max_bytes)
                .await
                .map_err(ScrapeError::Body)?;
            Ok((Format::from_content_type(&content_type), body))
        };
        let (format, body) = tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| ScrapeError::TimedOut(self.timeout))??;
        let text = std::str::from_utf8(&body).map_err(|_| ScrapeError::NotUtf8)?;
        let page = prom::parse(text, format, Mode::Lenient)
            .map_err(|e| ScrapeError::Parse(e.to_string()))?;
        let metrics = self.mapper.observe(&page);
        Ok(Scrape {
            metrics,
            duration: started.elapsed(),
            skipped_lines: page.skipped_lines,
        })
    }
}
