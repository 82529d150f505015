//! The fake etcd: mock-etcd's own core ([`EtcdCore`]) as a node. Each sidecar call
//! arrives as the gateway path, JSON body and token the sidecar's client sends
//! ([`crate::node::Request::Etcd`]) and goes through [`EtcdCore::handle_json`] — the
//! same decoding, checks, store and answers as the HTTP shell — and its status and body
//! go back as they are. Leases expire when the core says they fall due
//! ([`EtcdCore::next_expiry`], [`EtcdCore::expire_due`]), at virtual times; auth's
//! simple tokens idle out in virtual time too. A watch stream's lines are pushed to
//! their reader ([`EtcdNode::watch`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mock_etcd::faults::FaultDecision;
use mock_etcd::{Config, EtcdCore, Fault, LineSink, WatchStream};
use mock_kit::FaultRegistry;
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
    /// Gateway faults, armed in virtual time (`add_at`) and picked per request path as
    /// mock-etcd's HTTP shell picks them.
    faults: FaultRegistry<Fault>,
    /// Readers whose streams etcd ended (lost data), not yet told.
    ended: Vec<NodeId>,
}

impl EtcdNode {
    /// mock-etcd with `config`, its token letters seeded with `seed`.
    pub fn new(config: Config, seed: u64) -> EtcdNode {
        EtcdNode {
            core: EtcdCore::new(config, EPOCH_MS_AT_START, seed),
            next: None,
            notes: Vec::new(),
            watches: Vec::new(),
            faults: FaultRegistry::new(),
            ended: Vec::new(),
        }
    }

    /// Lose every key, lease and watcher at `now`, as an etcd restarted without its
    /// data dir (`reset_revision`: back to revision 1); every stream ends.
    pub fn lose_data(&mut self, reset_revision: bool, now: Duration) {
        let epoch = EPOCH_MS_AT_START + u64::try_from(now.as_millis()).unwrap_or(0);
        self.core.lose_data(reset_revision, epoch);
        for (reader, _, _) in self.watches.drain(..) {
            if !self.ended.contains(&reader) {
                self.ended.push(reader);
            }
        }
        self.next = self.core.next_expiry();
    }

    /// The gateway faults (arm with `add_at(now, ..)`: the node's time is virtual).
    pub fn faults(&self) -> &FaultRegistry<Fault> {
        &self.faults
    }

    /// End `reader`'s watch streams (a master that restarts drops its watch).
    pub fn close_watches(&mut self, reader: NodeId) {
        self.watches.retain(|(r, stream, _)| {
            let gone = *r == reader;
            if gone {
                self.core.watch_close(stream);
            }
            !gone
        });
    }

    /// Every key under `prefix` and the store's revision: what a listing range reads,
    /// read at one instant from the store itself (the harness inspects; it is no client,
    /// so etcd auth does not apply).
    pub fn list_prefix(
        &self,
        prefix: &[u8],
    ) -> Result<(i64, Vec<mock_etcd::store::KeyValue>), String> {
        let data = self.core.data();
        Ok((data.rev, data.iter_prefix(prefix).cloned().collect()))
    }

    /// The newest mod revision of a key under `prefix` now, read in place (`None`: no
    /// key has the prefix).
    pub fn newest_under(&self, prefix: &[u8]) -> Option<i64> {
        let data = self.core.data();
        data.iter_prefix(prefix).map(|kv| kv.mod_revision).max()
    }

    /// The value stored under `key` now, read in place (what a one-key range returns).
    pub fn value(&self, key: &[u8]) -> Option<&[u8]> {
        self.core.data().get(key).map(|kv| kv.value.as_slice())
    }

    /// The store's revision now.
    pub fn revision(&self) -> i64 {
        self.core.data().rev
    }

    /// The keys written since revision `after`, oldest first, if the history holds
    /// exactly `writes` writes since (`None`: it holds fewer, because some were trimmed
    /// or the data was lost, so which keys changed is not known).
    pub fn keys_written_since(&self, after: i64, writes: u64) -> Option<Vec<&[u8]>> {
        let data = self.core.data();
        let n = usize::try_from(writes).ok()?;
        // The last `writes` events are all after `after`, and the one before them is not.
        if data.revision_before_last(n).is_some_and(|r| r > after) {
            return None;
        }
        data.last_events(n)?
            .map(|e| (e.revision() > after).then_some(e.kv.key.as_slice()))
            .collect()
    }

    /// The store's count of key-value writes (`Store::kv_writes`): unchanged, every
    /// [`EtcdNode::value`] reads as before.
    pub fn kv_writes(&self) -> u64 {
        self.core.data().kv_writes()
    }

    /// Open a watch stream for `reader` (with its auth token) and send it `create` (a `WatchRequest` as JSON,
    /// as the reader's client writes it); its answers go to `reader` as pushes.
    pub fn watch(
        &mut self,
        reader: NodeId,
        create: &[u8],
        token: Option<&str>,
        now: Duration,
    ) -> Result<(), String> {
        let sink = Arc::new(LineSink::default());
        let mut stream = self.core.watch_open(token, sink.clone(), now);
        self.core.watch_json(&mut stream, create)?;
        self.watches.push((reader, stream, sink));
        Ok(())
    }

    /// The core, to inspect it or apply a fault (expire a lease, lose data).
    pub fn core(&mut self) -> &mut EtcdCore {
        &mut self.core
    }

    /// The request acted on (past its faults).
    fn act(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        let reply = match request {
            Request::Etcd { path, body, token } => {
                let answer = self
                    .core
                    .handle_json(path, token.as_deref(), body.as_bytes(), now);
                Reply::Gateway {
                    status: answer.status,
                    body: answer.body,
                }
            }
            Request::WatchOpen { body, token } => {
                match self.watch(from, body.as_bytes(), token.as_deref(), now) {
                    Ok(()) => Reply::Status(200),
                    Err(e) => Reply::Gateway {
                        status: 400,
                        body: json!({ "error": e, "code": 3, "message": e })
                            .to_string()
                            .into_bytes(),
                    },
                }
            }
            Request::WatchClose => {
                self.close_watches(from);
                return Some(Reply::Status(200));
            }
            _ => return Some(Reply::Status(404)),
        };
        self.next = self.core.next_expiry();
        Some(reply)
    }
}

impl Server for EtcdNode {
    fn serve(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        let path = match request {
            Request::Etcd { path, .. } => *path,
            Request::WatchOpen { .. } => "/v3/watch",
            _ => return self.act(now, from, request),
        };
        let fault = self
            .faults
            .fire_at(now, |f| f.matches(path).then(|| f.clone()));
        if let Some(f) = &fault {
            self.notes.push(json!({ "fault": f, "path": path }));
        }
        match fault.as_ref().map(Fault::decision) {
            Some(FaultDecision::Fail(e)) => Some(Reply::Gateway {
                status: e.status.as_u16(),
                body: e.body().into_bytes(),
            }),
            // Held until the caller gives up (a release is not simulated).
            Some(FaultDecision::Hang) => None,
            // As the fake's fault layer: the request is acted on after the delay, if its
            // caller still waits then.
            Some(FaultDecision::Delay(after)) => Some(Reply::Deferred { after }),
            None => self.act(now, from, request),
        }
    }

    fn serve_deferred(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        self.act(now, from, request)
    }

    fn take_stream_ends(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.ended)
    }

    fn stream_readers(&self) -> Vec<NodeId> {
        let readers: BTreeSet<NodeId> = self.watches.iter().map(|w| w.0).collect();
        readers.into_iter().collect()
    }

    fn on_link_reset(&mut self, _now: Duration, peer: NodeId) {
        self.close_watches(peer);
    }

    fn next_wakeup(&self) -> Option<Duration> {
        self.next
    }

    fn on_timer(&mut self, now: Duration) {
        for lease in self.core.expire_due(now) {
            self.notes.push(json!({ "lease_expired": lease.id }));
        }
        self.next = self.core.next_expiry();
    }

    fn take_pushes(&mut self) -> Vec<(NodeId, String)> {
        self.watches
            .iter()
            .flat_map(|(reader, _, sink)| sink.drain().into_iter().map(|line| (*reader, line)))
            .collect()
    }

    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        std::mem::take(&mut self.notes)
    }
}
