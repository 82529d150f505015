//! Reading request bodies: one capped, time-bounded reader for unary calls and a
//! message reader for the streamed ones (keepalive, watch).
//!
//! Why a module of its own: every handler reads its body the same way, and the caps are
//! where hostile input stops. A unary body is read whole up to 4x `--max-request-bytes`
//! (base64 and JSON make a message ~4/3 larger than its protobuf) and refused past it
//! with gRPC's "received message larger than max", without buffering the rest (it is
//! read and dropped, up to a bound, so the refusal reaches the client).

use std::time::Duration;

use axum::body::{Body, Bytes};

use crate::decode::{MessageSplitter, Piece};
use crate::error::EtcdError;
use crate::size;
use crate::state::Shared;

/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a body past its cap is read and thrown away before the refusal is sent:
/// a server that answers with the request still unread closes a connection whose unread
/// bytes make the kernel reset it, and the reset can take the answer with it.
const DRAIN_MAX: usize = 64 * 1024 * 1024;

/// Read a unary request body, capped and time-bounded.
pub async fn read_body(shared: &Shared, body: Body) -> Result<Bytes, EtcdError> {
    let cap = size::body_cap(&shared.config);
    match tokio::time::timeout(BODY_TIMEOUT, read_capped(body, cap)).await {
        Ok(Ok(Some(bytes))) => Ok(bytes),
        Ok(Ok(None)) => Err(size::body_too_large(&shared.config)),
        Ok(Err(e)) => Err(EtcdError::bad_json(format!("reading body: {e}"))),
        Err(_) => Err(EtcdError::bad_json("unexpected EOF")),
    }
}

/// The body if it is at most `cap` bytes; `None` if it is longer, once the rest (up to
/// [`DRAIN_MAX`]) was read and dropped, never kept.
async fn read_capped(body: Body, cap: usize) -> Result<Option<Bytes>, axum::Error> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        seen = seen.saturating_add(chunk.len());
        if seen <= cap {
            kept.extend_from_slice(&chunk);
        } else if seen > DRAIN_MAX {
            return Ok(None);
        }
    }
    Ok((seen <= cap).then(|| Bytes::from(kept)))
}

/// Reads the request objects of a streamed body (keepalive, watch) as they arrive.
pub struct StreamReader {
    body: Option<axum::body::BodyDataStream>,
    splitter: MessageSplitter,
    max: usize,
    /// The body failed rather than ended: the client is gone (a reset connection).
    broken: bool,
}

impl StreamReader {
    pub fn new(body: Body, max: usize) -> Self {
        StreamReader {
            body: Some(body.into_data_stream()),
            splitter: Default::default(),
            max,
            broken: false,
        }
    }

    /// True once reading the body failed: the connection is gone, so should the stream.
    /// (A body that simply ends is a client done sending; its stream stays open.)
    pub fn client_gone(&self) -> bool {
        self.broken
    }

    pub fn is_open(&self) -> bool {
        self.body.is_some()
    }

    /// Stop reading requests (the response stream may go on).
    pub fn close(&mut self) {
        self.body = None;
    }

    /// The next request object; None once the body has ended.
    pub async fn next(&mut self) -> Option<Piece> {
        use futures_util::StreamExt;
        loop {
            if let Some(p) = self.splitter.next(self.body.is_none()) {
                return Some(p);
            }
            let body = self.body.as_mut()?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    self.splitter.push(&chunk);
                    if self.splitter.buffered() > self.max {
                        self.body = None;
                        return Some(Piece::Malformed(format!(
                            "grpc: received message larger than max ({} vs. {})",
                            self.splitter.buffered(),
                            self.max
                        )));
                    }
                }
                Some(Err(_)) => {
                    self.broken = true;
                    self.body = None;
                }
                None => self.body = None,
            }
        }
    }
}
