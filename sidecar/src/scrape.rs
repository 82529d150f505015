//! Scraping vLLM's `/metrics` into heartbeat metrics: a capped, time-bounded read, the
//! format chosen by `Content-Type`, then the mapping straight from the text.
//!
//! The mapping's text path (`Mapper::observe_text`) lexes only the few metrics a
//! heartbeat needs, which makes it a fraction of a full parse; the cost is that it cannot
//! tell how many lines of the page are malformed. So the full lenient parse runs on the
//! first scrape and then on every [`AUDIT_EVERY`]th one, only to count skipped lines: the
//! parse-errors counter still reveals a page vLLM writes wrongly, at a small share of the
//! work.

use std::time::{Duration, Instant};

use url::Url;

use crate::http::{Client, Error as HttpError, Pending, Request, Target};
use crate::mapping::{HeartbeatMetrics, Mapper};
use crate::prom::{self, Format, Mode};

/// Why a scrape gave no metrics.
#[derive(Debug)]
pub enum ScrapeError {
    Request(String),
    Status(u16),
    TimedOut(Duration),
    NotUtf8,
    Parse(String),
}

impl std::fmt::Display for ScrapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScrapeError::Request(e) => write!(f, "GET /metrics failed: {e}"),
            ScrapeError::Status(s) => write!(f, "GET /metrics answered HTTP {s}"),
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

/// One scrape in this many (and the first) also runs the full parse to count the lines
/// the lenient parser skips.
pub const AUDIT_EVERY: u64 = 64;

/// What the scrape asks for: the classic text format first, as Prometheus does.
const ACCEPT: &str =
    "text/plain;version=0.0.4;q=1.0, application/openmetrics-text;version=1.0.0;q=0.5, */*;q=0.1";

/// A body buffer grown past this (a huge page once) is not kept between scrapes.
const KEEP_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// One successful scrape.
#[derive(Debug, Clone, Copy)]
pub struct Scrape {
    pub metrics: HeartbeatMetrics,
    pub duration: Duration,
    /// Lines the lenient parser skipped; counted on audited scrapes only (the first and
    /// every [`AUDIT_EVERY`]th), 0 on the others.
    pub skipped_lines: usize,
}

/// A scrape whose request is sent, its page not read yet.
#[derive(Debug)]
pub struct PendingScrape {
    sent: Result<Pending, ScrapeError>,
    started: Instant,
}

fn request_error(e: HttpError) -> ScrapeError {
    match e {
        HttpError::TimedOut(t) => ScrapeError::TimedOut(t),
        e => ScrapeError::Request(e.to_string()),
    }
}

/// Scrapes one vLLM server; keeps the mapping's interval state between scrapes.
#[derive(Debug)]
pub struct Scraper {
    http: Client,
    target: Result<Target, String>,
    timeout: Duration,
    max_bytes: usize,
    mapper: Mapper,
    /// The body buffer, reused from one scrape to the next.
    body: Vec<u8>,
    /// Successful reads so far (decides the audited scrapes).
    reads: u64,
}

impl Scraper {
    pub fn new(
        http: Client,
        url: Url,
        timeout: Duration,
        max_bytes: usize,
        mapper: Mapper,
    ) -> Scraper {
        Scraper {
            http,
            target: Target::new(&url),
            timeout,
            max_bytes,
            mapper,
            body: Vec::new(),
            reads: 0,
        }
    }

    /// One scrape. Blocks for at most the scrape timeout.
    pub fn scrape(&mut self) -> Result<Scrape, ScrapeError> {
        let pending = self.start();
        self.finish(pending)
    }

    /// Send the request now; [`Scraper::finish`] reads and maps the page.
    pub fn start(&self) -> PendingScrape {
        let started = Instant::now();
        let sent = match &self.target {
            Ok(target) => {
                let request = Request::get(target).headers(&[("accept", ACCEPT)]);
                self.http
                    .start(request, self.max_bytes, self.timeout)
                    .map_err(request_error)
            }
            Err(e) => Err(ScrapeError::Request(e.clone())),
        };
        PendingScrape { sent, started }
    }

    /// Read the page a [`Scraper::start`] asked for, and map it. Blocks at most until the
    /// scrape's deadline.
    pub fn finish(&mut self, pending: PendingScrape) -> Result<Scrape, ScrapeError> {
        let mut body = std::mem::take(&mut self.body);
        let result = self.read_and_map(pending, &mut body);
        if body.capacity() <= KEEP_BUFFER_BYTES {
            self.body = body;
        }
        result
    }

    fn read_and_map(
        &mut self,
        pending: PendingScrape,
        body: &mut Vec<u8>,
    ) -> Result<Scrape, ScrapeError> {
        let started = pending.started;
        let head = pending.sent?.finish_into(body).map_err(request_error)?;
        if !head.is_success() {
            return Err(ScrapeError::Status(head.status));
        }
        let format = Format::from_content_type(&head.content_type);
        let text = std::str::from_utf8(body).map_err(|_| ScrapeError::NotUtf8)?;
        let audit = self.reads.is_multiple_of(AUDIT_EVERY);
        self.reads += 1;
        let skipped_lines = if audit {
            prom::parse(text, format, Mode::Lenient)
                .map_err(|e| ScrapeError::Parse(e.to_string()))?
                .skipped_lines
        } else {
            0
        };
        let metrics = self.mapper.observe_text(text, format);
        Ok(Scrape {
            metrics,
            duration: started.elapsed(),
            skipped_lines,
        })
    }
}
