//! The fake etcd: mock-etcd's own core ([`EtcdCore`]) as a node. Each sidecar call
//! arrives as the gateway path and JSON body the sidecar's client sends
//! ([`crate::node::EtcdRequest::wire`]) and goes through [`EtcdCore::handle_json`] — the
//! same decoding, checks, store and answers as the HTTP shell — and its status and body
//! go back as they are. Leases expire when the core says they fall due
//! ([`EtcdCore::next_expiry`], [`EtcdCore::expire_due`]), at virtual times.

use std::sync::Arc;
use std::time::Duration;

use mock_etcd::{Config, EtcdCore, LineSink, WatchStream};
use rand::rngs::StdRng;
use serde_json::json;

use crate::node::{NodeId, Reply, Request, Server};

/// Wall-clock milliseconds at virtual time zero (mock-etcd starts its lease IDs there).
pub const EPOCH_MS_AT_START: u64 = 1_700_000_000_000;

/// A simulated mock-etcd.
pub struct EtcdNode {
    core: EtcdCore,
    /// The core's next lease deadline, kept because asking for it needs `&mut`.
    next: Option<Duration>,
    notes: Vec<serde_json::Value>,
    /// Open watch streams: who reads them, the stream, and its sink.
    watches: Vec<(NodeId, WatchStream, Arc<LineSink>)>,
}

impl EtcdNode {
    /// mock-etcd with `config`, its token letters seeded with `seed`.
    pub fn new(config: Config, seed: u64) -> EtcdNode {
        EtcdNode {
            core: EtcdCore::new(config, EPOCH_MS_AT_START, seed),
            next: None,
            notes: Vec::new(),
            watches: Vec::new(),
        }
    }

    /// Open a watch stream for `reader` and send it `create` (a `WatchRequest` as JSON,
    /// as the reader's client writes it); its answers go to `reader` as pushes.
    pub fn watch(&mut self, reader: NodeId, create: &[u8], now: Duration) -> Result<(), String> {
        let sink = Arc::new(LineSink::default());
        let mut stream = self.core.watch_open(None, sink.clone(), now);
        self.core.watch_json(&mut stream, create)?;
        self.watches.push((reader, stream, sink));
        Ok(())
    }

    /// The core, to inspect it or apply a fault (expire a lease, lose data).
    pub fn core(&mut self) -> &mut EtcdCore {
        &mut self.core
    }

    fn refresh_next(&mut self) {
        self.next = self.core.next_expiry();
    }
}

impl Server for EtcdNode {
    fn serve(
        &mut self,
        now: Duration,
        _: NodeId,
        request: &Request,
        _: &mut StdRng,
    ) -> Option<Reply> {
        let reply = match request {
            Request::Etcd(call) => {
                let (path, body) = call.wire();
                let answer = self.core.handle_json(path, None, body.as_bytes(), now);
                Reply::Gateway {
                    status: answer.status,
                    body: answer.body,
                }
            }
            _ => Reply::Status(404),
        };
        self.refresh_next();
        Some(reply)
    }

    fn next_wakeup(&self) -> Option<Duration> {
        self.next
    }

    fn on_timer(&mut self, now: Duration) {
        for lease in self.core.expire_due(now) {
            self.notes.push(json!({ "lease_expired": lease.id }));
        }
        self.refresh_next();
    }

    fn take_pushes(&mut self) -> Vec<(NodeId, String)> {
        let mut out = Vec::new();
        for (reader, _, sink) in &self.watches {
            out.extend(sink.drain().into_iter().map(|line| (*reader, line)));
        }
        out
    }

    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        std::mem::take(&mut self.notes)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}
