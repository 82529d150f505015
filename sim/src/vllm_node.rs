//! One fake vLLM: mock-vllm's own engines ([`mock_vllm::engine::Engine`]) and page
//! writer ([`mock_vllm::metrics::page`]) in a simulated shell.
//!
//! The shell does what mock-vllm's axum shell does, with virtual time: `/health` answers
//! 503 while the startup delay runs, then as its [`Health`] mode says (200, 503, or
//! never); `/metrics` takes a [`Snapshot`] of the engines at this instant (the shell's
//! `scrape::snapshot`, which is private to mock-vllm, mirrored field for field) and has
//! mock-vllm write the page. The `process_*` families of the full dialects show fixed
//! readings (no `/proc` of a simulated process), so pages are the same on every run.
//!
//! Not here yet: request load (mock-vllm's serving flow — admit, prefill, tokens, stats —
//! lives in its async handler, not in a clock-free core) and the `metrics_*` faults.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mock_kit::FaultRegistry;
use mock_vllm::engine::Engine;
use mock_vllm::metrics::{EngineView, Runtime, Snapshot};
use mock_vllm::process::ProcessView;
use mock_vllm::scrape_faults::{PageFaults, ScrapePlan};
use mock_vllm::stats::HttpStats;
use mock_vllm::{Config, Dialect, Fault, Health};
use rand::rngs::StdRng;

use crate::node::{NodeId, Reply, Request, Server};

/// Epoch seconds at virtual time zero: what `_created` stamps print.
pub const EPOCH_AT_START: f64 = 1_700_000_000.0;

/// A simulated mock-vllm.
pub struct VllmNode {
    cfg: Config,
    engines: Vec<Arc<Engine>>,
    http: HttpStats,
    health: Health,
    /// When the server (re)started, virtual time.
    started: Duration,
    scrapes: u64,
    /// Armed faults, fired as mock-vllm's shell fires them. Armed with a count only:
    /// mock-kit's registry reads the wall clock for durations, so a timed fault is
    /// removed by a scripted action at its virtual time instead.
    faults: FaultRegistry<Fault>,
    /// The frozen page while `metrics_stale` is armed.
    stale: Option<Bytes>,
}

impl VllmNode {
    /// A server with `cfg` started at `now`.
    pub fn new(cfg: Config, now: Duration) -> VllmNode {
        let created = EPOCH_AT_START + now.as_secs_f64();
        VllmNode {
            engines: (0..cfg.data_parallel)
                .map(|i| Engine::new(i, &cfg, created))
                .collect(),
            http: HttpStats::new(created),
            health: Health::Up,
            started: now,
            scrapes: 0,
            faults: FaultRegistry::new(),
            stale: None,
            cfg,
        }
    }

    /// mock-vllm's test defaults with `dialect`.
    pub fn with_dialect(dialect: Dialect, now: Duration) -> VllmNode {
        VllmNode::new(
            Config {
                dialect,
                ..Config::default()
            },
            now,
        )
    }

    /// Set what `/health` does (the control API's health modes).
    pub fn set_health(&mut self, health: Health) {
        self.health = health;
    }

    /// Arm `fault` for `count` uses (`None`: until removed); answers its id.
    pub fn add_fault(&mut self, fault: Fault, count: Option<u64>) -> u64 {
        self.faults.add(fault, count, None)
    }

    pub fn remove_fault(&mut self, id: u64) -> bool {
        self.faults.remove(id)
    }

    /// Pages written so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes
    }

    /// The page at `now`, as mock-vllm writes it: (text, OpenMetrics?).
    pub fn page(&self, now: Duration) -> (String, bool) {
        let (text, _) = mock_vllm::metrics::page(&self.snapshot(now));
        (text, self.cfg.dialect == Dialect::OpenMetrics)
    }

    /// `GET /metrics` as mock-vllm's `scrape` handler answers it: the faults decide,
    /// the page is written (or the frozen one reused), rewritten, and delivered.
    fn metrics(&mut self, now: Duration, rng: &mut StdRng) -> Option<Reply> {
        let faults = &self.faults;
        let plan = ScrapePlan::decide(|want| faults.fire(|f| want(f).then(|| f.clone())));
        let faults = match plan {
            ScrapePlan::Status(status) => {
                let text = format!("status {status}");
                return Some(Reply::Page {
                    status,
                    text,
                    openmetrics: false,
                });
            }
            ScrapePlan::Hang => return None,
            ScrapePlan::Page(faults) => faults,
        };
        self.scrapes += 1;
        let openmetrics = self.cfg.dialect == Dialect::OpenMetrics;
        let page = self.faulty_page(now, &faults, rng);
        let text = String::from_utf8_lossy(&page).into_owned();
        let reply = Reply::Page {
            status: 200,
            text,
            openmetrics,
        };
        Some(match (faults.truncate, faults.slow) {
            (Some((_, true)), _) => Reply::Reset,
            (None, Some(bps)) => Reply::Slow {
                after: Duration::from_secs_f64(page.len() as f64 / bps.max(1) as f64),
                reply: Box::new(reply),
            },
            _ => reply,
        })
    }

    fn faulty_page(&mut self, now: Duration, faults: &PageFaults, rng: &mut StdRng) -> Bytes {
        let mut snapshot = self.snapshot(now);
        snapshot.nonfinite = faults.nonfinite;
        let render = || Bytes::from(mock_vllm::metrics::page(&snapshot).0);
        let page = if faults.stale {
            self.stale.get_or_insert_with(render).clone()
        } else {
            self.stale = None;
            render()
        };
        faults.apply(page, rng)
    }

    fn snapshot(&self, now: Duration) -> Snapshot {
        let dialect = self.cfg.dialect;
        let engines = self
            .engines
            .iter()
            .map(|e| {
                let (running, waiting, kv_used) = e.snapshot();
                EngineView {
                    index: e.index,
                    running: running as f64,
                    waiting: waiting as f64,
                    kv: (kv_used as f64 / e.kv_capacity() as f64).min(1.0),
                    kv_capacity: e.kv_capacity(),
                    stats: e.stats().clone(),
                }
            })
            .collect();
        let extras = dialect.has_runtime_families();
        let runtime = extras.then(|| Runtime {
            process: ProcessView {
                vsize: 1.0e9,
                rss: 1.0e8,
                cpu_secs: now.saturating_sub(self.started).as_secs_f64() * 0.01,
                open_fds: 32.0,
                max_fds: 1_048_576.0,
            },
            start: EPOCH_AT_START + self.started.as_secs_f64(),
            cpu_base: 0.0,
        });
        Snapshot {
            dialect,
            model: self.cfg.model.clone(),
            engines,
            nonfinite: false,
            overrides: Vec::new(),
            runtime,
            http: extras.then(|| self.http.clone()),
        }
    }

    fn starting(&self, now: Duration) -> bool {
        now.saturating_sub(self.started) < self.cfg.startup_delay
    }
}

impl Server for VllmNode {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn serve(
        &mut self,
        now: Duration,
        _: NodeId,
        request: &Request,
        rng: &mut StdRng,
    ) -> Option<Reply> {
        match request {
            Request::Health if self.starting(now) => Some(Reply::Status(503)),
            Request::Health => match self.health {
                Health::Up => Some(Reply::Status(200)),
                Health::Down => Some(Reply::Status(503)),
                Health::Hang => None,
            },
            Request::Metrics => self.metrics(now, rng),
            // Not a vLLM endpoint: what axum answers for an unknown route.
            Request::Etcd(_) | Request::Heartbeat { .. } => Some(Reply::Status(404)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn health_follows_startup_delay_and_mode() {
        let cfg = Config {
            startup_delay: Duration::from_secs(2),
            ..Config::default()
        };
        let mut v = VllmNode::new(cfg, Duration::ZERO);
        let mut rng = StdRng::seed_from_u64(0);
        let mut at = |v: &mut VllmNode, s| {
            v.serve(
                Duration::from_secs(s),
                NodeId::Sidecar(0),
                &Request::Health,
                &mut rng,
            )
        };
        assert_eq!(at(&mut v, 1), Some(Reply::Status(503)));
        assert_eq!(at(&mut v, 2), Some(Reply::Status(200)));
        v.set_health(Health::Hang);
        assert_eq!(at(&mut v, 3), None);
        v.set_health(Health::Down);
        assert_eq!(at(&mut v, 4), Some(Reply::Status(503)));
    }

    #[test]
    fn metric_faults_act_as_mock_vllms_shell_makes_them() {
        let mut v = VllmNode::with_dialect(Dialect::Compact, Duration::ZERO);
        let mut rng = StdRng::seed_from_u64(0);
        let s = Duration::from_secs(1);
        let mut scrape =
            |v: &mut VllmNode| v.serve(s, NodeId::Sidecar(0), &Request::Metrics, &mut rng);
        v.add_fault(Fault::MetricsStatus { status: 500 }, Some(1));
        assert!(matches!(
            scrape(&mut v),
            Some(Reply::Page { status: 500, .. })
        ));
        v.add_fault(Fault::MetricsHang, Some(1));
        assert_eq!(scrape(&mut v), None);
        v.add_fault(
            Fault::MetricsTruncate {
                at_bytes: 10,
                abort: true,
            },
            Some(1),
        );
        assert_eq!(scrape(&mut v), Some(Reply::Reset));
        v.add_fault(
            Fault::MetricsTruncate {
                at_bytes: 10,
                abort: false,
            },
            Some(1),
        );
        let Some(Reply::Page { text, .. }) = scrape(&mut v) else {
            panic!()
        };
        assert_eq!(text.len(), 10);
        v.add_fault(Fault::MetricsSlow { bytes_per_sec: 100 }, Some(1));
        let Some(Reply::Slow { after, .. }) = scrape(&mut v) else {
            panic!()
        };
        assert!(after > Duration::from_secs(10), "{after:?}");
        v.add_fault(Fault::MetricsGarbage { lines: 3 }, Some(1));
        let Some(Reply::Page { text: junk, .. }) = scrape(&mut v) else {
            panic!()
        };
        let Some(Reply::Page { text: clean, .. }) = scrape(&mut v) else {
            panic!()
        };
        assert_eq!(junk.lines().count(), clean.lines().count() + 3);
    }

    #[test]
    fn pages_are_mock_vllms_and_the_same_at_the_same_instant() {
        let v = VllmNode::with_dialect(Dialect::Compact, Duration::ZERO);
        let (a, om) = v.page(Duration::from_secs(5));
        assert!(!om);
        assert!(a.contains("vllm:num_requests_waiting{"), "{a}");
        assert_eq!(a, v.page(Duration::from_secs(5)).0);
        let full = VllmNode::with_dialect(Dialect::V0_10, Duration::ZERO);
        assert!(full.page(Duration::from_secs(5)).0.len() > 4 * a.len());
    }
}
