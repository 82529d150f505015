//! Keeping the registry in step with etcd: one range, then a watch, forever. The
//! rules of following (which events are new, what a cancel or a lower revision means,
//! what a key means for the table) are in [`crate::follow`]; this task owns the stream,
//! the backoff, pausing and the probes.
//!
//! On start (and on a master restart) the watcher lists `<ns>XLLM:` and registers every
//! instance key it finds, as the real master does in its `init()`; then it watches from
//! the listing's revision + 1 with `prev_kv`. When the stream breaks it re-opens the
//! watch from the revision after the last event it applied, so no event is lost, and it
//! skips events at or below that revision, so none is applied twice. If etcd compacted
//! that revision away, it re-lists and reconciles instead. Keys under the prefix that are
//! not instance keys (`XLLM:LOADMETRICS:…`, written by the master itself) are ignored.
//!
//! Revisions only grow, so a header revision lower than the highest one seen means etcd
//! lost its data and restarted from scratch: a watch from the old revision would wait for
//! a revision far in the future and miss every new registration. The watcher then
//! re-lists (keys gone take the delete path, new keys register) and watches from the
//! fresh revision + 1. A watch canceled for its auth token drops the token, so the
//! re-opened watch authenticates again.

use std::time::Duration;

use mock_kit::{Events, Shutdown};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use crate::etcd::{EtcdClient, WatchEvent};
use crate::follow::{self, Change, Cursor, Verdict};
use crate::metrics::Metrics;
use crate::probe::Prober;
use crate::registry::{ProbeTicket, Registry};

/// How long a watch stream may stay silent before it is re-opened.
const WATCH_IDLE: Duration = Duration::from_secs(120);
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Orders for the watcher task.
#[derive(Debug)]
pub enum Command {
    /// Forget every instance; if `relist`, re-learn them from a fresh range (else only
    /// from later PUTs). `done` fires once that is over.
    Restart {
        relist: bool,
        done: oneshot::Sender<()>,
    },
}

/// Everything the watcher task needs.
pub struct Watcher {
    pub etcd: EtcdClient,
    pub namespace: String,
    pub registry: Registry,
    pub prober: Prober,
    pub events: Events,
    pub metrics: std::sync::Arc<Metrics>,
    pub paused: watch::Receiver<bool>,
    pub commands: mpsc::Receiver<Command>,
    pub shutdown: Shutdown,
    /// Told once the first listing was applied (or failed).
    pub first_listing: Option<oneshot::Sender<()>>,
}

/// What the watcher does next.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// List first (`apply` false: only to learn the revision).
    List { apply: bool },
    /// Watch from the cursor.
    Watch,
}

impl Watcher {
    fn prefix(&self) -> Vec<u8> {
        format!("{}XLLM:", self.namespace).into_bytes()
    }

    /// Run until shutdown.
    pub async fn run(mut self) {
        let mut pos = Position::List { apply: true };
        let mut pending_done = self.first_listing.take();
        let mut backoff = BACKOFF_START;
        let mut opened_before = false;
        let mut reason = String::from("start");
        let mut cursor = Cursor::default();
        loop {
            if self.shutdown.is_triggered() {
                return;
            }
            if let Position::List { apply } = pos {
                match self.list(apply).await {
                    Ok(rev) => {
                        cursor = Cursor::listed(rev);
                        pos = Position::Watch;
                        backoff = BACKOFF_START;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "etcd range failed");
                        self.events
                            .emit("etcd_error", json!({"op": "range", "error": e.to_string()}));
                    }
                }
                if let Some(done) = pending_done.take() {
                    let _ = done.send(());
                }
                if matches!(pos, Position::List { .. }) {
                    if self.sleep(&mut backoff).await {
                        return;
                    }
                    continue;
                }
            }
            if *self.paused.borrow_and_update() {
                tokio::select! {
                    _ = self.shutdown.wait() => return,
                    changed = self.paused.changed() => { if changed.is_err() { return; } }
                    cmd = self.commands.recv() => match cmd {
                        Some(c) => { (pos, pending_done) = self.command(c); }
                        None => return,
                    },
                }
                continue;
            }
            let Position::Watch = pos else { continue };
            let from = cursor.next();
            if opened_before {
                self.metrics.watch_reconnect();
                self.events.emit(
                    "watch_reconnect",
                    json!({"from_revision": from, "reason": reason}),
                );
                tracing::info!(from_revision = from, reason = %reason, "re-opening etcd watch");
            }
            let mut stream = match self.etcd.watch(&self.prefix(), from, WATCH_IDLE).await {
                Ok(s) => s,
                Err(e) => {
                    opened_before = true;
                    reason = format!("open failed: {e}");
                    if self.sleep(&mut backoff).await {
                        return;
                    }
                    continue;
                }
            };
            opened_before = true;
            // Read until the stream breaks or someone interrupts.
            reason = loop {
                tokio::select! {
                    _ = self.shutdown.wait() => return,
                    changed = self.paused.changed() => {
                        if changed.is_err() { return; }
                        if *self.paused.borrow_and_update() { break "paused".to_string(); }
                    }
                    cmd = self.commands.recv() => match cmd {
                        Some(c) => {
                            (pos, pending_done) = self.command(c);
                            break "master restart".to_string();
                        }
                        None => return,
                    },
                    msg = stream.next() => match msg {
                        Ok(Some(resp)) => {
                            backoff = BACKOFF_START;
                            match cursor.on_response(resp) {
                                Verdict::Events(evs) => self.apply(evs),
                                Verdict::RevisionReset { seen, revision } => {
                                    pos = Position::List { apply: true };
                                    let detail = json!({"seen_revision": seen, "revision": revision});
                                    tracing::warn!(seen_revision = seen, revision, "etcd revision went back (data loss?); re-listing");
                                    self.events.emit("etcd_revision_reset", detail);
                                    break format!("revision reset from {seen} to {revision}");
                                }
                                Verdict::AuthRefused { reason } => {
                                    self.etcd.invalidate_token(stream.token());
                                    self.events.emit("etcd_auth_refused", json!({"op": "watch"}));
                                    break format!("canceled: {reason}");
                                }
                                Verdict::Compacted { from, compact_revision } => {
                                    pos = Position::List { apply: true };
                                    let detail = json!({"from_revision": from, "compact_revision": compact_revision});
                                    self.events.emit("watch_compacted", detail);
                                    break format!("compacted at {compact_revision}");
                                }
                                Verdict::Canceled { reason } => break format!("canceled: {reason}"),
                            }
                        }
                        Ok(None) => break "stream ended".to_string(),
                        Err(e) => break e.to_string(),
                    },
                }
            };
            let interrupted = reason == "paused" || reason == "master restart";
            if !interrupted && matches!(pos, Position::Watch) && self.sleep(&mut backoff).await {
                return;
            }
        }
    }

    /// Carry out a command; answers the new position and who to tell when done.
    fn command(&mut self, cmd: Command) -> (Position, Option<oneshot::Sender<()>>) {
        match cmd {
            Command::Restart { relist, done } => {
                self.registry.forget_all();
                self.events.emit("restart", json!({"relist": relist}));
                (Position::List { apply: relist }, Some(done))
            }
        }
    }

    /// Sleep one backoff step (doubling it); true if shutdown came first.
    async fn sleep(&self, backoff: &mut Duration) -> bool {
        let d = *backoff;
        *backoff = (*backoff * 2).min(BACKOFF_MAX);
        tokio::select! {
            _ = self.shutdown.wait() => true,
            _ = tokio::time::sleep(d) => false,
        }
    }

    /// Range the prefix; if `apply`, reconcile the registry with it. Answers its revision.
    async fn list(&self, apply: bool) -> Result<i64, crate::etcd::EtcdError> {
        let listing = self.etcd.range_prefix(&self.prefix()).await?;
        if apply {
            let (found, bad) = follow::listed_instances(&self.namespace, &listing.kvs);
            for (name, e) in &bad {
                self.bad_value(name, e);
            }
            self.events.emit(
                "relist",
                json!({"revision": listing.revision, "instances": found.len()}),
            );
            for ticket in self.registry.reconcile(found) {
                self.spawn_probe(ticket);
            }
        }
        Ok(listing.revision)
    }

    fn bad_value(&self, name: &str, error: &str) {
        tracing::error!(name, error, "unparseable instance registration");
        self.events
            .emit("bad_registration", json!({"name": name, "error": error}));
    }

    /// Apply new events to the registry, in order.
    fn apply(&self, events: Vec<WatchEvent>) {
        for ev in &events {
            match follow::change(&self.namespace, ev) {
                None => {}
                Some(Change::Put { name, meta }) => {
                    self.metrics.watch_event("put");
                    match meta {
                        Ok(meta) => self.registry.apply_put(name, meta),
                        Err(e) => self.bad_value(name, &e),
                    }
                }
                Some(Change::Delete { name, deleted }) => {
                    self.metrics.watch_event("delete");
                    if let Some(ticket) = self.registry.apply_delete(name, deleted.as_deref()) {
                        self.spawn_probe(ticket);
                    }
                }
            }
        }
    }

    /// Probe in the background: the watch must not stall for up to 2 s per delete.
    fn spawn_probe(&self, ticket: ProbeTicket) {
        let prober = self.prober.clone();
        let registry = self.registry.clone();
        let metrics = self.metrics.clone();
        let events = self.events.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.wait() => {}
                healthy = prober.healthy(&ticket.name) => {
                    metrics.probe(healthy);
                    events.emit("probe", json!({"name": ticket.name, "incarnation": ticket.incarnation, "healthy": healthy}));
                    registry.apply_probe(&ticket, healthy);
                }
            }
        });
    }
}
