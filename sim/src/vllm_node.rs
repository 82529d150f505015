//! One fake vLLM: mock-vllm's own virtual-time core ([`VllmCore`]: engines, scheduler,
//! latency model, health modes, crash/restart, `metrics_*` and `completion_*` faults,
//! the page of every dialect) as a node.
//!
//! The node only translates: `/health` and `/metrics` answers become [`Reply`] values
//! (a crashed server refuses, a hang never answers, a `metrics_truncate` with abort is
//! a reset after the body, `metrics_slow` an answer that takes the page's size / rate
//! longer); completions submitted by a load generator run in the core.
//!
//! The node asks the world for no timer: the core is advanced when it is next observed
//! (every entry point of [`VllmCore`] first runs the steps due at its `now`, in their
//! order, at their own times), so a step nobody can see yet costs no event. The state
//! any observer reads at `now` is the same as with a wake-up at every step: steps due
//! at `now` ran before the observation either way.
//!
//! For the same reason a load's requests are offered ([`VllmNode::offer`]) and handed
//! to the core, in order and each at its own time, only before the node is next used
//! (a page, a probe, a fault or mode set, the core lent out): a submission changes
//! nothing anyone sees before then, and draws only from the request's own generator.
//! The core then runs a few seconds of requests at once while its memory is in the
//! cache, instead of being fetched for every request (at 10,000 instances, nearly
//! every fetch was a cache miss).

use std::time::Duration;

use mock_vllm::core::{Answer, Delivery, Submitted, VllmCore};
use mock_vllm::validate::{Api, Req};
use mock_vllm::{Config, Dialect, Fault, Health};

use crate::node::{Body, NodeId, Reply, Request, Server};

/// Epoch seconds at virtual time zero: what `_created` stamps print.
pub const EPOCH_AT_START: f64 = 1_700_000_000.0;

thread_local! {
    /// The page buffer every vLLM node of this thread lends its core for a scrape: one
    /// warm buffer instead of one page-sized buffer per node.
    static PAGE: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) };
}

/// Offered requests kept at most before they are handed to the core anyway.
const PENDING_MAX: usize = 64;

/// A simulated mock-vllm.
pub struct VllmNode {
    /// Requests offered and not yet submitted, by time (first: the one field an offer
    /// touches).
    pending: Vec<(Duration, Req)>,
    core: VllmCore,
    scrapes: u64,
    /// Completions that ended, by kind of end, for reports.
    finished: u64,
    failed: u64,
}

impl VllmNode {
    /// A server with `cfg` started at `now`; an invalid config is the error.
    pub fn new(cfg: Config, now: Duration) -> Result<VllmNode, String> {
        Ok(VllmNode {
            pending: Vec::new(),
            core: VllmCore::new(cfg, EPOCH_AT_START, now)?,
            scrapes: 0,
            finished: 0,
            failed: 0,
        })
    }

    /// Keep the core's last compact page ([`VllmCore::keep_last_page`]): scrapes that
    /// find its numbers unchanged copy it. For runs with little load (a fault search).
    pub fn keep_last_page(&mut self) {
        self.core.keep_last_page();
    }

    /// mock-vllm's test defaults with `dialect` and `seed`.
    pub fn with_dialect(dialect: Dialect, seed: u64, now: Duration) -> VllmNode {
        let cfg = Config {
            dialect,
            seed,
            ..Config::default()
        };
        // The defaults are valid; a failure here is a mock-vllm bug.
        VllmNode::new(cfg, now)
            .unwrap_or_else(|e| panic!("mock-vllm's default config is invalid: {e}"))
    }

    /// The core, to inspect or to change (health mode, faults, crash, restart); the
    /// requests offered so far are submitted first.
    pub fn core(&mut self) -> &mut VllmCore {
        self.flush();
        &mut self.core
    }

    pub fn set_health(&mut self, health: Health) {
        self.flush();
        self.core.set_health(health);
    }

    /// Arm `fault` for `count` uses (`None`: until removed); answers its id. Only counts:
    /// a timed fault is removed by a scripted action at its virtual time.
    pub fn add_fault(&mut self, fault: Fault, count: Option<u64>) -> u64 {
        self.flush();
        self.core.faults().add(fault, count, None)
    }

    /// A load generator's request at `now`, submitted before the node is next used
    /// (see the module doc); `now` is never before an earlier offer's.
    pub fn offer(&mut self, now: Duration, req: Req) {
        self.pending.push((now, req));
        if self.pending.len() >= PENDING_MAX {
            self.flush();
        }
    }

    /// Submit the requests offered so far, in order, each at its time.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        for (at, req) in pending.drain(..) {
            self.submit_now(at, req);
        }
        self.pending = pending;
    }

    /// Submit one completion at `now` (after those offered before it).
    pub fn submit(&mut self, now: Duration, req: Req) -> Submitted {
        self.flush();
        self.submit_now(now, req)
    }

    fn submit_now(&mut self, now: Duration, req: Req) -> Submitted {
        self.advance_core(now);
        let s = self.core.submit(now, req);
        if matches!(s, Submitted::Failed(_) | Submitted::Refused) {
            self.failed += 1;
        }
        s
    }

    /// The served model's name.
    pub fn model(&self) -> &str {
        &self.core.config().model
    }

    /// mock-vllm's request rules: a body to a request, or vLLM's error.
    pub fn parse(&self, api: Api, body: &[u8]) -> Result<Req, mock_vllm::error::ApiError> {
        self.core.parse(api, body)
    }

    /// Pages served so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes
    }

    /// Completions finished and failed up to `now`.
    pub fn completions(&mut self, now: Duration) -> (u64, u64) {
        self.advance(now);
        (self.finished, self.failed)
    }

    /// Submit what was offered, run the core's steps due up to `now` and count the
    /// requests that ended.
    pub fn advance(&mut self, now: Duration) {
        self.flush();
        self.advance_core(now);
    }

    fn advance_core(&mut self, now: Duration) {
        self.finished += self.core.advance_drain(now).len() as u64;
    }

    /// A scrape, rendered into this thread's page buffer (lent to the core for it).
    fn metrics(&mut self, now: Duration) -> Option<Reply> {
        let buf = self.core.lend_page_buffer(PAGE.with(|p| p.take()));
        let reply = self.metrics_in_core(now);
        PAGE.with(|p| p.replace(self.core.lend_page_buffer(buf)));
        reply
    }

    fn metrics_in_core(&mut self, now: Duration) -> Option<Reply> {
        let reply = match self.core.metrics(now) {
            Answer::Refused => return Some(Reply::Refused),
            Answer::Hang => return None,
            Answer::Reply(r) => r,
        };
        self.scrapes += 1;
        let body = match (reply.text, reply.rewritten) {
            (Some(text), _) => Body::Text(text.to_owned()),
            (None, Some(bytes)) => Body::Bytes(bytes),
            (None, None) => Body::Bytes(bytes::Bytes::copy_from_slice(reply.body)),
        };
        let page = Reply::Page {
            status: reply.status,
            content_type: reply.content_type.into(),
            body,
        };
        Some(match reply.delivery {
            Delivery::Whole => page,
            Delivery::ResetAfterBody => Reply::Reset,
            Delivery::Trickle { bytes_per_sec } => Reply::Slow {
                after: Duration::from_secs_f64(
                    reply.body.len() as f64 / bytes_per_sec.max(1) as f64,
                ),
                reply: Box::new(page),
            },
        })
    }
}

impl Server for VllmNode {
    fn serve(&mut self, now: Duration, _: NodeId, request: &Request) -> Option<Reply> {
        self.advance(now);
        match request {
            Request::Health => match self.core.health(now) {
                Answer::Refused => Some(Reply::Refused),
                Answer::Hang => None,
                Answer::Reply(status) => Some(Reply::Status(status)),
            },
            Request::Metrics => self.metrics(now),
            // Not a vLLM endpoint: what axum answers for an unknown route.
            _ => Some(Reply::Status(404)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(v: &mut VllmNode, s: u64, r: Request) -> Option<Reply> {
        v.serve(Duration::from_secs(s), NodeId::Sidecar(0), &r)
    }

    #[test]
    fn health_follows_startup_delay_mode_and_crash() {
        let cfg = Config {
            startup_delay: Duration::from_secs(2),
            ..Config::default()
        };
        let mut v = VllmNode::new(cfg, Duration::ZERO).unwrap();
        assert_eq!(serve(&mut v, 1, Request::Health), Some(Reply::Status(503)));
        assert_eq!(serve(&mut v, 2, Request::Health), Some(Reply::Status(200)));
        v.set_health(Health::Hang);
        assert_eq!(serve(&mut v, 3, Request::Health), None);
        v.set_health(Health::Down);
        assert_eq!(serve(&mut v, 4, Request::Health), Some(Reply::Status(503)));
        v.core().crash(Duration::from_secs(5));
        assert_eq!(serve(&mut v, 5, Request::Health), Some(Reply::Refused));
    }

    #[test]
    fn metric_faults_become_replies() {
        let mut v = VllmNode::with_dialect(Dialect::Compact, 0, Duration::ZERO);
        v.add_fault(Fault::MetricsStatus { status: 500 }, Some(1));
        assert!(matches!(
            serve(&mut v, 1, Request::Metrics),
            Some(Reply::Page { status: 500, .. })
        ));
        v.add_fault(Fault::MetricsHang, Some(1));
        assert_eq!(serve(&mut v, 1, Request::Metrics), None);
        v.add_fault(
            Fault::MetricsTruncate {
                at_bytes: 10,
                abort: true,
            },
            Some(1),
        );
        assert_eq!(serve(&mut v, 1, Request::Metrics), Some(Reply::Reset));
        v.add_fault(Fault::MetricsSlow { bytes_per_sec: 100 }, Some(1));
        let Some(Reply::Slow { after, .. }) = serve(&mut v, 1, Request::Metrics) else {
            panic!("a slow page")
        };
        assert!(after > Duration::from_secs(10), "{after:?}");
        let Some(Reply::Page {
            body, content_type, ..
        }) = serve(&mut v, 1, Request::Metrics)
        else {
            panic!("a page")
        };
        assert!(body
            .into_text()
            .unwrap()
            .contains("vllm:num_requests_waiting{"));
        assert!(content_type.starts_with("text/plain"));
        assert_eq!(v.scrapes(), 4);
    }
}
