//! `/v3/watch`: one HTTP response stream carrying many watchers, as the gateway does.
//!
//! The request body is a stream of `{"create_request":..}`, `{"cancel_request":..}` and
//! `{"progress_request":{}}` objects; the response is one `{"result":WatchResponse}` line
//! per message. The rules are the core's ([`crate::core::EtcdCore::watch_json`]);
//! watchers are notified under the core lock, in revision order, into this stream's
//! [`Outbox`]. Each stream has a bounded backlog: a watcher that does
//! not read is not buffered forever but cancelled with `compact_revision` set to the first
//! revision it missed (what etcd answers a watcher that fell behind compaction), and the
//! stream ends; a client re-watches from that revision.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::sync::mpsc;

use crate::body::StreamReader;
use crate::codec;
use crate::core::WatchStream;
use crate::decode::Piece;
use crate::error::{code, EtcdError};
use crate::event::EtcdEvent;
use crate::outbox::Outbox;
use crate::state::Shared;
use crate::watchers::{line, WatchResponse};

/// How long a stream may take to send its first message before we answer anyway.
const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(5);

/// One open `/v3/watch` request.
struct Session {
    shared: Arc<Shared>,
    /// The core's side of the stream (its sink is `out`).
    ws: WatchStream,
    out: Outbox,
    rx: mpsc::Receiver<String>,
    reader: StreamReader,
    stop: mock_kit::Shutdown,
    done: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.core().watch_close(&self.ws);
        self.out.release();
    }
}

pub async fn watch(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let (out, rx) = Outbox::new(
        shared.config.watch_backlog,
        shared.config.watch_backlog_bytes,
        shared.watch_queued.clone(),
    );
    let now = shared.now();
    let ws = shared
        .core()
        .watch_open(crate::auth::token(&headers), Arc::new(out.clone()), now);
    let shared_max = shared.config.max_request_bytes * 2;
    let mut s = Session {
        stop: shared.stream_stop(),
        shared,
        ws,
        out,
        rx,
        reader: StreamReader::new(body, shared_max),
        done: false,
    };
    // The gateway answers a malformed first message with a plain error, not a stream.
    match tokio::time::timeout(FIRST_MESSAGE_WAIT, s.reader.next()).await {
        Ok(Some(Piece::Malformed(msg))) => return EtcdError::grpc(code::UNKNOWN, msg).untrailed(),
        Ok(Some(Piece::Message(v))) => {
            if let Err(msg) = s.handle(v) {
                return EtcdError::grpc(code::UNKNOWN, msg).untrailed();
            }
        }
        Ok(None) | Err(_) => {}
    }
    // Like the gateway, send the headers with the first response line, not before.
    let first = s.next_line().await;
    let stream = futures_util::stream::unfold((s, first), |(mut s, first)| async move {
        let l = match first {
            Some(l) => l,
            None => s.next_line().await?,
        };
        Some((Ok::<_, std::convert::Infallible>(l), (s, None)))
    });
    codec::stream_response(Body::from_stream(stream))
}

impl Session {
    async fn next_line(&mut self) -> Option<String> {
        loop {
            // A reset connection: end the stream so that its watchers are freed now.
            if self.reader.client_gone() {
                return None;
            }
            if let Ok(l) = self.rx.try_recv() {
                self.out.took(l.len());
                return Some(l);
            }
            if self.out.overflow.hit.load(Ordering::Acquire) && !self.done {
                self.done = true;
                return Some(self.overflow_lines());
            }
            if self.done {
                return None;
            }
            let reading = self.reader.is_open();
            let overflow = self.out.overflow.clone();
            let stop = self.stop.clone();
            let piece = tokio::select! {
                l = self.rx.recv() => {
                    if let Some(l) = &l {
                        self.out.took(l.len());
                    }
                    return l;
                }
                p = self.reader.next(), if reading => p,
                _ = overflow.wake.notified() => continue,
                _ = stop.wait() => return None,
            };
            match piece {
                Some(Piece::Message(v)) => {
                    if self.handle(v).is_err() {
                        self.reader.close();
                    }
                }
                // A reset connection: end the stream so its watchers are freed now.
                // The gateway stops reading requests but keeps the stream.
                Some(Piece::Malformed(_)) | None => self.reader.close(),
            }
        }
    }

    /// Final lines of an overflowed stream: each watcher cancelled as compacted.
    fn overflow_lines(&mut self) -> String {
        let missed = self.out.overflow.first_missed.load(Ordering::Acquire);
        let mut core = self.shared.core();
        let ids = core.watch_ids(self.ws.id());
        core.watch_close(&self.ws);
        let header = core.header();
        drop(core);
        self.shared.events.emit_event(&EtcdEvent::WatchOverflow {
            stream: self.ws.id(),
            first_missed: missed,
        });
        let mut out = String::new();
        let mut all = std::mem::take(&mut *crate::locking::lock(&self.out.overflow.ids));
        all.extend(ids);
        all.sort_unstable();
        all.dedup();
        for id in all {
            out.push_str(&line(&WatchResponse {
                header: Some(header),
                watch_id: id,
                canceled: true,
                compact_revision: missed,
                ..Default::default()
            }));
        }
        out
    }

    /// Serve one request object; Err if it does not decode.
    fn handle(&mut self, msg: Vec<u8>) -> Result<(), String> {
        self.shared.core().watch_json(&mut self.ws, &msg)
    }
}
