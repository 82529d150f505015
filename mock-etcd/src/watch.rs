//! `/v3/watch`: one HTTP response stream carrying many watchers, as the gateway does.
//!
//! The request body is a stream of `{"create_request":..}`, `{"cancel_request":..}` and
//! `{"progress_request":{}}` objects; the response is one `{"result":WatchResponse}` line
//! per message. Watchers live in a [`Registry`] beside the store so they are notified under the
//! store lock, in revision order. Each stream has a bounded backlog: a watcher that does
//! not read is not buffered forever but cancelled with `compact_revision` set to the first
//! revision it missed (what etcd answers a watcher that fell behind compaction), and the
//! stream ends; a client re-watches from that revision.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use crate::body::StreamReader;
use crate::codec;
use crate::decode::{self, Piece};
use crate::error::{code, EtcdError};
use crate::requests::{CreateRequest, WatchRequest};
use crate::state::Shared;
use crate::watchers::{line, Outbox, Overflow, Stream, WatchResponse};

/// How long a stream may take to send its first message before we answer anyway.
const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(5);

/// One open `/v3/watch` request.
struct Session {
    shared: Arc<Shared>,
    stream: u64,
    out: Outbox,
    rx: mpsc::Receiver<String>,
    reader: StreamReader,
    /// Auth outcome for this stream's token, checked once per create.
    auth: Result<(), EtcdError>,
    next_id: i64,
    stop: mock_kit::Shutdown,
    done: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.store().watchers.drop_stream(self.stream);
    }
}

pub async fn watch(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let auth = crate::auth::watch_access(&shared, &headers);
    let (tx, rx) = mpsc::channel(shared.config.watch_backlog.max(1));
    let stream = shared.store().watchers.new_stream();
    let shared_max = shared.config.max_request_bytes * 2;
    let mut s = Session {
        stop: shared.stream_stop(),
        shared,
        stream,
        out: Outbox {
            tx,
            overflow: Arc::new(Overflow::default()),
        },
        rx,
        reader: StreamReader::new(body, shared_max),
        auth,
        next_id: 0,
        done: false,
    };
    // The gateway answers a malformed first message with a plain error, not a stream.
    match tokio::time::timeout(FIRST_MESSAGE_WAIT, s.reader.next()).await {
        Ok(Some(Piece::Malformed(msg))) => {
            return EtcdError::grpc(code::UNKNOWN, msg).into_response()
        }
        Ok(Some(Piece::Message(v))) => {
            if let Err(msg) = s.handle(v) {
                return EtcdError::grpc(code::UNKNOWN, msg).into_response();
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
                l = self.rx.recv() => return l,
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
        let mut store = self.shared.store();
        let ids = store.watchers.ids_of(self.stream);
        store.watchers.drop_stream(self.stream);
        let header = self.shared.header(store.rev);
        drop(store);
        self.shared.events.emit(
            "watch_overflow",
            serde_json::json!({ "stream": self.stream, "first_missed": missed }),
        );
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
        let req: WatchRequest = decode::parse_value(&msg)?;
        if let Some(c) = req.create_request {
            self.create(c);
        } else if let Some(c) = req.cancel_request {
            self.cancel(c.watch_id);
        } else if req.progress_request.is_some() {
            self.progress();
        }
        Ok(())
    }

    fn create(&mut self, c: CreateRequest) {
        let mut store = self.shared.store();
        let rev = store.rev;
        let header = self.shared.header(rev);
        if let Err(e) = &self.auth {
            let reason = format!(
                "rpc error: code = {} desc = {}",
                grpc_code_name(e.code),
                e.message
            );
            let resp = WatchResponse {
                header: Some(header),
                watch_id: -1,
                created: true,
                canceled: true,
                cancel_reason: &reason,
                ..Default::default()
            };
            self.out.send(line(&resp), rev);
            return;
        }
        let data = &mut *store;
        crate::watchers::create(
            &data.store,
            &mut data.watchers,
            Stream {
                id: self.stream,
                next_id: &mut self.next_id,
                out: &self.out,
            },
            c,
        );
    }

    fn cancel(&mut self, id: i64) {
        let mut store = self.shared.store();
        let data = &mut *store;
        data.watchers
            .cancel(data.store.rev, self.stream, id, &self.out);
    }

    fn progress(&mut self) {
        let store = self.shared.store();
        store.watchers.progress(store.rev, &self.out);
    }
}

/// Go's `codes.Code.String()`.
pub fn grpc_code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        _ => "Unauthenticated",
    }
}
