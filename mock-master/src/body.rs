//! The one capped reader of request bodies, and the guard that refuses a declared
//! oversized body on routes that never read one.
//!
//! Every route is capped at `Config::max_body_bytes`: a body that declares more in
//! `Content-Length` is refused before a byte of it is read; a chunked body is read at
//! most to the cap. Routes that read a body call [`read_capped`] (axum's `to_bytes`
//! over a length-limited body) at the point their checks allow (the heartbeat after its
//! token check). Routes that read none get [`refuse_declared`] as a layer; extractors
//! they do not own (the shared `/_mock/faults` routes) get axum's `DefaultBodyLimit`.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;

/// Why a body could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the cap (declared or read): 413.
    TooLarge,
    /// The connection failed mid-body: 400.
    Unreadable,
}

/// The `Content-Length` a request declares, if it is a number.
pub fn declared_len(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Does the request declare a body larger than `cap`?
pub fn declares_more_than(headers: &HeaderMap, cap: usize) -> bool {
    declared_len(headers).is_some_and(|n| n > cap as u64)
}

/// The whole body, at most `cap` bytes; reading stops at the first byte past it.
pub async fn read_capped(body: Body, cap: usize) -> Result<Bytes, BodyError> {
    axum::body::to_bytes(body, cap).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                return BodyError::TooLarge;
            }
            source = err.source();
        }
        BodyError::Unreadable
    })
}

/// What a guarded route group answers to an oversized body, in its own error shape.
#[derive(Clone, Copy)]
pub struct Guard {
    pub cap: usize,
    pub refusal: fn() -> Response,
}

/// Middleware: refuse a request whose declared body exceeds the cap, unread.
pub async fn refuse_declared(State(g): State<Guard>, req: Request, next: Next) -> Response {
    if declares_more_than(req.headers(), g.cap) {
        return (g.refusal)();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_up_to_the_cap_and_no_further() {
        assert_eq!(
            read_capped(Body::from("abcd"), 4).await,
            Ok(Bytes::from("abcd"))
        );
        assert_eq!(
            read_capped(Body::from("abcde"), 4).await,
            Err(BodyError::TooLarge)
        );
        // A stream that never ends is cut at the cap, not read to the end.
        let pulled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let p = pulled.clone();
        let endless = futures_util::stream::repeat_with(move || {
            p.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::io::Error>(Bytes::from_static(&[b'x'; 1024]))
        });
        let got = read_capped(Body::from_stream(endless), 64 * 1024).await;
        assert_eq!(got, Err(BodyError::TooLarge));
        assert!(pulled.load(std::sync::atomic::Ordering::Relaxed) <= 65);
    }

    #[tokio::test]
    async fn a_broken_body_is_unreadable_not_too_large() {
        let broken = futures_util::stream::iter([
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("reset")),
        ]);
        assert_eq!(
            read_capped(Body::from_stream(broken), 1024).await,
            Err(BodyError::Unreadable)
        );
    }

    #[test]
    fn declared_lengths() {
        let mut h = HeaderMap::new();
        assert!(!declares_more_than(&h, 10));
        h.insert(header::CONTENT_LENGTH, "11".parse().unwrap());
        assert!(declares_more_than(&h, 10));
        assert!(!declares_more_than(&h, 11));
    }
}
