//! The HTTP side of `/v3/lock/lock`: claim the lock, then wait until it is held.
//!
//! Why a module of its own: the waiting is the shell's (a socket, a task, a wake-up);
//! the rules are the core's ([`crate::lock`]). The waiter is woken by a watch on the
//! lock's prefix (every delete there may free it) and checks again under the core
//! lock, so no release is missed: a wake-up sent before the wait begins is kept by
//! [`Notify`]. A waiter whose client goes away (its request future dropped), or whose
//! streams are closed by a control call, deletes its key and stops watching.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::Notify;

use crate::body::read_body;
use crate::codec;
use crate::decode;
use crate::error::{code, EtcdError};
use crate::lock::{LockClaim, LockRequest};
use crate::state::Shared;
use crate::watchers::WatchSink;

/// Wakes the waiter on any change under the lock's prefix; never refuses a line.
struct Wake(Arc<Notify>);

impl WatchSink for Wake {
    fn send(&self, _line: String, _rev: i64) -> bool {
        self.0.notify_one();
        true
    }
}

/// A claim not yet held: dropped before it is, its key and watch go.
struct Waiting {
    shared: Arc<Shared>,
    claim: LockClaim,
    stream: u64,
    held: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut core = self.shared.core();
        core.lock_unwatch(self.stream);
        if !self.held {
            core.lock_abandon(&self.claim);
        }
    }
}

pub async fn lock(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let body = match read_body(&shared, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let req: LockRequest = match decode::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.untrailed(),
    };
    let token = crate::auth::token(&headers);
    let now = shared.now();
    let wake = Arc::new(Notify::new());
    let mut waiting = {
        let mut core = shared.core();
        let claim = match core.lock_claim(token, &req, now) {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        };
        let stream = core.lock_watch(&claim, Arc::new(Wake(wake.clone())));
        Waiting {
            shared: shared.clone(),
            claim,
            stream,
            held: false,
        }
    };
    let stop = shared.stream_stop();
    loop {
        if let Some(resp) = shared.core().lock_held(&waiting.claim) {
            waiting.held = true;
            return codec::ok(serde_json::to_string(&resp).unwrap_or_default());
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = stop.wait() => {
                let e = EtcdError::grpc(code::UNKNOWN, "context canceled");
                return e.into_response();
            }
        }
    }
}
