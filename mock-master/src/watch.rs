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

use std::ops::ControlFlow;
use std::time::Duration;

use mock_kit::{Events, Shutdown};
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::Command as CoreCommand;
use crate::etcd::{EtcdClient, EventKind, WatchEvent, WatchResponse, WatchStream};
use crate::event::MasterEvent;
use crate::follow::Verdict;
use crate::metrics::Metrics;
use crate::probe::Prober;
use crate::registry::{instance_name, Registry};
use crate::watch_plan::{Position, WatchPlan, RESTART, WATCH_IDLE};

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
    /// While frozen, a message read waits to be applied (and a probe to be sent).
    pub freeze: mock_kit::Freeze,
    /// Told once the first listing was applied (or failed).
    pub first_listing: Option<oneshot::Sender<()>>,
}

/// Where the watcher's loop stands between steps.
struct Progress {
    /// The rules: list or watch, backoff, why the last stream ended.
    plan: WatchPlan,
    /// Told once the next listing is over (the first one, a restart).
    pending_done: Option<oneshot::Sender<()>>,
}

/// `Break`: shutdown, stop the task.
type Flow = ControlFlow<()>;

impl Watcher {
    fn prefix(&self) -> Vec<u8> {
        format!("{}XLLM:", self.namespace).into_bytes()
    }

    /// Run until shutdown.
    pub async fn run(mut self) {
        let mut p = Progress {
            plan: WatchPlan::new(),
            pending_done: self.first_listing.take(),
        };
        while !self.shutdown.is_triggered() {
            let flow = match p.plan.position() {
                Position::List { apply } => self.list_step(apply, &mut p).await,
                Position::Watch if *self.paused.borrow_and_update() => {
                    self.wait_paused(&mut p).await
                }
                Position::Watch => self.watch_step(&mut p).await,
            };
            if flow.is_break() {
                return;
            }
        }
    }

    /// Range the prefix; on failure back off and stay in `List`.
    async fn list_step(&mut self, apply: bool, p: &mut Progress) -> Flow {
        let listed = self.list(apply).await;
        if let Err(e) = &listed {
            tracing::warn!(error = %e, "etcd range failed");
            self.events.emit_event(&MasterEvent::EtcdError {
                op: "range",
                error: &e.to_string(),
            });
        }
        let wait = p.plan.listed(listed.is_ok());
        if let Some(done) = p.pending_done.take() {
            let _ = done.send(());
        }
        match wait {
            Some(d) => self.sleep(d).await,
            None => Flow::Continue(()),
        }
    }

    /// Paused: wait for a resume, a command or shutdown.
    async fn wait_paused(&mut self, p: &mut Progress) -> Flow {
        tokio::select! {
            _ = self.shutdown.wait() => return Flow::Break(()),
            changed = self.paused.changed() => if changed.is_err() { return Flow::Break(()); },
            cmd = self.commands.recv() => match cmd {
                Some(c) => self.command(c, p),
                None => return Flow::Break(()),
            },
        }
        Flow::Continue(())
    }

    /// Open a watch from the cursor and read it until it breaks or is interrupted;
    /// back off before the next one unless it was interrupted on purpose.
    async fn watch_step(&mut self, p: &mut Progress) -> Flow {
        let from = self.registry.watch_from();
        if let Some(reason) = p.plan.opening() {
            self.metrics.watch_reconnect();
            self.events.emit_event(&MasterEvent::WatchReconnect {
                from_revision: from,
                reason: &reason,
            });
            tracing::info!(from_revision = from, %reason, "re-opening etcd watch");
        }
        let stream = match self.etcd.watch(&self.prefix(), from, WATCH_IDLE).await {
            Ok(s) => s,
            Err(e) => {
                let wait = p.plan.open_failed(e.to_string());
                return self.sleep(wait).await;
            }
        };
        let reason = match self.read(stream, p).await {
            ControlFlow::Break(()) => return Flow::Break(()),
            ControlFlow::Continue(reason) => reason,
        };
        match p.plan.stream_ended(reason) {
            Some(wait) => self.sleep(wait).await,
            None => Flow::Continue(()),
        }
    }

    /// Read until the stream breaks or someone interrupts; answers why it stopped.
    async fn read(&mut self, mut stream: WatchStream, p: &mut Progress) -> ControlFlow<(), String> {
        loop {
            tokio::select! {
                _ = self.shutdown.wait() => return ControlFlow::Break(()),
                changed = self.paused.changed() => {
                    if changed.is_err() { return ControlFlow::Break(()); }
                    if *self.paused.borrow_and_update() {
                        return ControlFlow::Continue(crate::watch_plan::PAUSED.to_string());
                    }
                }
                cmd = self.commands.recv() => match cmd {
                    Some(c) => {
                        self.command(c, p);
                        return ControlFlow::Continue(RESTART.to_string());
                    }
                    None => return ControlFlow::Break(()),
                },
                msg = stream.next() => match msg {
                    Ok(Some(resp)) => {
                        tokio::select! {
                            _ = self.shutdown.wait() => return ControlFlow::Break(()),
                            _ = self.freeze.thawed() => {}
                        }
                        if let Some(reason) = self.on_message(resp, &stream, p) {
                            return ControlFlow::Continue(reason);
                        }
                    }
                    Ok(None) => return ControlFlow::Continue("stream ended".to_string()),
                    Err(e) => return ControlFlow::Continue(e.to_string()),
                },
            }
        }
    }

    /// One message, through the core; answers why the stream must end, if it must.
    fn on_message(
        &self,
        resp: WatchResponse,
        stream: &WatchStream,
        p: &mut Progress,
    ) -> Option<String> {
        let (verdict, probes) = self.registry.on_watch_response(resp);
        self.spawn_probes(probes);
        match &verdict {
            Verdict::Events(evs) => self.count(evs),
            Verdict::RevisionReset { seen, revision } => {
                tracing::warn!(
                    seen_revision = seen,
                    revision,
                    "etcd revision went back (data loss?); re-listing"
                );
                self.events.emit_event(&MasterEvent::EtcdRevisionReset {
                    seen: *seen,
                    revision: *revision,
                });
            }
            Verdict::AuthRefused { .. } => {
                self.etcd.invalidate_token(stream.token());
                self.events
                    .emit_event(&MasterEvent::EtcdAuthRefused { op: "watch" });
            }
            Verdict::Compacted {
                from,
                compact_revision,
            } => {
                self.events.emit_event(&MasterEvent::WatchCompacted {
                    from: *from,
                    compact_revision: *compact_revision,
                });
            }
            Verdict::Canceled { .. } => {}
        }
        p.plan.on_message(&verdict)
    }

    /// Carry out a command: the new position and who to tell when it is done.
    fn command(&mut self, cmd: Command, p: &mut Progress) {
        match cmd {
            Command::Restart { relist, done } => {
                self.registry.forget_all();
                self.events.emit_event(&MasterEvent::Restart { relist });
                p.plan.restart(relist);
                p.pending_done = Some(done);
            }
        }
    }

    /// Sleep `d` (a backoff step); `Break` if shutdown came first.
    async fn sleep(&self, d: Duration) -> Flow {
        tokio::select! {
            _ = self.shutdown.wait() => Flow::Break(()),
            _ = tokio::time::sleep(d) => Flow::Continue(()),
        }
    }

    /// Range the prefix; if `apply`, reconcile the core with it; either way the watch
    /// goes on from its revision + 1.
    async fn list(&self, apply: bool) -> Result<(), crate::etcd::EtcdError> {
        let listing = self.etcd.range_prefix(&self.prefix()).await?;
        if apply {
            let (found, probes) = self.registry.on_listing(listing.revision, &listing.kvs);
            self.events.emit_event(&MasterEvent::Relist {
                revision: listing.revision,
                instances: found,
            });
            self.spawn_probes(probes);
        } else {
            self.registry.listed_at(listing.revision);
        }
        Ok(())
    }

    /// Count the instance events the core applied, by kind.
    fn count(&self, events: &[WatchEvent]) {
        for ev in events {
            if instance_name(&self.namespace, &ev.kv.key).is_some() {
                self.metrics.watch_event(match ev.kind {
                    EventKind::Put => "put",
                    EventKind::Delete => "delete",
                });
            }
        }
    }

    /// Carry out the core's probe commands in the background (the watch must not stall
    /// for up to 2 s per delete): each attempt at its time, its outcome fed back, the
    /// next attempt the core asks for carried out in turn.
    fn spawn_probes(&self, commands: Vec<CoreCommand>) {
        for first in commands {
            let prober = self.prober.clone();
            let registry = self.registry.clone();
            let shutdown = self.shutdown.clone();
            let freeze = self.freeze.clone();
            tokio::spawn(async move {
                let mut next = Some(first);
                while let Some(CoreCommand::Probe {
                    id,
                    name,
                    url,
                    attempt,
                    at,
                    timeout,
                }) = next.take()
                {
                    let wait = at.saturating_sub(registry.now());
                    let ok = tokio::select! {
                        _ = shutdown.wait() => return,
                        ok = async {
                            tokio::time::sleep(wait).await;
                            freeze.thawed().await;
                            prober.attempt(&name, &url, attempt, timeout).await
                        } => ok,
                    };
                    next = registry.on_probe_result(id, ok).into_iter().next();
                }
            });
        }
    }
}
