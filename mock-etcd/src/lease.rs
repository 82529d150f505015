//! The lease API's HTTP side: the `/v3/lease/keepalive` stream and the expiry loop
//! (grant, revoke, timetolive and leases are unary calls, see [`crate::unary`]).
//!
//! Observed on etcd 3.4: a keepalive answers one `{"result":…}` line per request
//! object in the body and, for a lease that does not exist, omits `TTL`. Expiry is
//! checked every `expiry_tick` (the core expires what is due at the time it is given),
//! and a lease's keys are deleted in one revision.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;

use crate::body::StreamReader;
use crate::codec;
use crate::decode::{self, Piece};
use crate::error::{code, EtcdError};
use crate::event::EtcdEvent;
use crate::requests::IdRequest;
use crate::state::Shared;
use crate::store::Lease;

/// The keepalive stream: one answer line per request object, until the body ends.
pub async fn keepalive(State(shared): State<Arc<Shared>>, body: Body) -> Response {
    let mut ka = KeepAlive {
        stop: shared.stream_stop(),
        reader: StreamReader::new(body, shared.config.max_request_bytes * 2),
        shared,
    };
    // A malformed first message is a plain 500 error, as the gateway answers it.
    let first = match ka.reader.next().await {
        Some(Piece::Malformed(msg)) => return EtcdError::grpc(code::UNKNOWN, msg).untrailed(),
        Some(Piece::Message(v)) => match ka.answer(v) {
            Ok(line) => Some(line),
            Err(msg) => return EtcdError::grpc(code::UNKNOWN, msg).untrailed(),
        },
        None => None,
    };
    let stream = futures_util::stream::unfold((ka, first), |(mut ka, pending)| async move {
        if let Some(l) = pending {
            return Some((Ok::<_, std::convert::Infallible>(l), (ka, None)));
        }
        let stop = ka.stop.clone();
        let piece = tokio::select! {
            p = ka.reader.next() => p,
            _ = stop.wait() => None,
        };
        match piece {
            Some(Piece::Message(v)) => ka.answer(v).ok().map(|l| (Ok(l), (ka, None))),
            Some(Piece::Malformed(_)) | None => None,
        }
    });
    codec::stream_response(Body::from_stream(stream))
}

struct KeepAlive {
    shared: Arc<Shared>,
    reader: StreamReader,
    stop: mock_kit::Shutdown,
}

impl KeepAlive {
    /// The answer line to one request object; Err if it does not decode.
    fn answer(&mut self, msg: Vec<u8>) -> Result<String, String> {
        let req: IdRequest = decode::parse_value(&msg)?;
        let now = self.shared.now();
        let line = self.shared.core().keepalive(&req, now);
        Ok(line.line())
    }
}

/// Revoke due leases every tick until shutdown.
pub async fn run_expiry(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.config.expiry_tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.shutdown.wait() => return,
        }
        let now = shared.now();
        let gone = shared.core().expire_due(now);
        for l in gone {
            report_expired(&shared, &l, "ttl");
        }
    }
}

fn report_expired(shared: &Shared, l: &Lease, why: &str) {
    shared.events.emit_event(&EtcdEvent::LeaseExpired {
        id: l.id,
        keys: &l.keys,
        why,
    });
}

/// Expire one lease now (fault injection).
pub fn expire(shared: &Shared, id: i64) -> bool {
    let gone = shared.core().expire_lease(id);
    match gone {
        Some(l) => {
            report_expired(shared, &l, "forced");
            true
        }
        None => false,
    }
}

/// Expire every lease now (fault injection).
pub fn expire_all(shared: &Shared) {
    let gone = shared.core().expire_all();
    for l in gone {
        report_expired(shared, &l, "forced");
    }
}
