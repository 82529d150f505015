//! How one HTTP exchange with vLLM or the master ended, as its caller saw it: a value
//! without sockets, so that what the answer means is decided by pure functions
//! ([`super::vllm::classify_health`], [`super::vllm::classify_scrape`],
//! [`super::master::classify_heartbeat`]) that the reqwest driver and a simulator both
//! run.
//!
//! Who builds it: the reqwest clients from reqwest's results ([`super::http::read_body`]
//! reads a body into a [`Body`]); a simulator from its simulated exchange. The caller
//! enforces its timeout and its body cap, as a transport does: the classifying functions
//! only read what came.

use crate::prom::Format;

/// How an exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange {
    /// An answer came: its status, the text format its `Content-Type` names (if it has
    /// a readable one) and its body, as far as it was read.
    Answer {
        status: u16,
        format: Option<Format>,
        body: Body,
    },
    /// The exchange did not finish within the caller's timeout.
    TimedOut,
    /// No answer: connect refused, reset, TLS, redirect loop, … (the transport's own
    /// description, without the URL).
    Failed(String),
}

/// An answer's body, as far as the caller read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Read whole: these bytes.
    Bytes(Vec<u8>),
    /// Read whole, and known to be UTF-8 already (a simulated peer's page, which is a
    /// string before it is bytes): not checked again.
    Text(String),
    /// Longer than the cap (the cap given); reading stopped there.
    OverCap(usize),
    /// Reading failed part way (the connection, or a `Content-Encoding` that did not
    /// decode, or the caller's time for it ran out).
    Failed(ReadFailure),
    /// Not read: the status was all the caller needed.
    Unread,
}

/// Why a body read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFailure {
    /// The transport's description.
    pub message: String,
    /// The encoded body did not decode (corrupt gzip/deflate), as opposed to a failed
    /// connection.
    pub decode: bool,
}

impl Body {
    /// A body read whole, as a transport that enforces `cap` ends it: longer than `cap`
    /// bytes is [`Body::OverCap`], as [`super::http::read_capped`] stops.
    pub fn capped(bytes: Vec<u8>, cap: usize) -> Body {
        if bytes.len() > cap {
            Body::OverCap(cap)
        } else {
            Body::Bytes(bytes)
        }
    }

    /// The bytes read, when the body was read whole.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Body::Bytes(b) => Some(b),
            Body::Text(t) => Some(t.as_bytes()),
            Body::OverCap(_) | Body::Failed(_) | Body::Unread => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_past_the_cap_is_over_it_and_one_at_the_cap_is_whole() {
        assert_eq!(Body::capped(vec![b'a'; 5], 4), Body::OverCap(4));
        assert_eq!(Body::capped(vec![b'a'; 4], 4), Body::Bytes(vec![b'a'; 4]));
        assert_eq!(
            Body::capped(vec![b'a'; 4], 4).as_bytes(),
            Some(&b"aaaa"[..])
        );
        assert_eq!(Body::Text("ab".into()).as_bytes(), Some(&b"ab"[..]));
        assert_eq!(Body::Unread.as_bytes(), None);
    }
}
