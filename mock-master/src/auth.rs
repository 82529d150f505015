//! The internal API token (`X-Internal-Token`), rotatable at run time.
//!
//! Compared in constant time so an attacker cannot learn it byte by byte from answer
//! timings, and never logged or shown (state views say only whether one is set).
//!
//! A header sent more than once is read as the real master's HTTP server (brpc) reads
//! it: the values joined by `,`. Two copies of the right token are then `tok,tok`, which
//! matches nothing: an ambiguous header is refused (401), never resolved by picking one.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use axum::http::HeaderMap;

/// The header the master checks.
pub const HEADER: &str = "x-internal-token";

/// What the request presents as its token: `None` without the header; one value as
/// is; several joined the way brpc joins a repeated header (a `,` before each value
/// unless what came before is empty).
pub fn presented(headers: &HeaderMap) -> Option<Cow<'_, [u8]>> {
    join(headers.get_all(HEADER).iter().map(|v| v.as_bytes()))
}

/// The header's values, in order, joined as brpc joins them (see [`presented`]);
/// `None` when there is none.
pub fn join<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Option<Cow<'a, [u8]>> {
    let first = values.next()?;
    let Some(second) = values.next() else {
        return Some(Cow::Borrowed(first));
    };
    let mut joined = first.to_vec();
    for v in std::iter::once(second).chain(values) {
        if !joined.is_empty() {
            joined.push(b',');
        }
        joined.extend_from_slice(v);
    }
    Some(Cow::Owned(joined))
}

/// The current token; `None` means heartbeats are not checked at all.
#[derive(Clone, Default)]
pub struct Token(Arc<RwLock<Option<Arc<[u8]>>>>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(set: {})", self.is_set())
    }
}

impl Token {
    pub fn new(token: Option<String>) -> Self {
        let t = Token::default();
        t.set(token);
        t
    }

    /// Replace the token; an empty string counts as no token (as an empty flag does).
    pub fn set(&self, token: Option<String>) {
        let value = token
            .filter(|t| !t.is_empty())
            .map(|t| Arc::from(t.into_bytes()));
        match self.0.write() {
            Ok(mut g) => *g = value,
            Err(p) => *p.into_inner() = value,
        }
    }

    fn current(&self) -> Option<Arc<[u8]>> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn is_set(&self) -> bool {
        self.current().is_some()
    }

    /// Does a request carrying `presented` (the header's bytes, if any) pass?
    pub fn admits(&self, presented: Option<&[u8]>) -> bool {
        // Compared under the read lock: no reference-count traffic per request.
        let check = |t: &Option<Arc<[u8]>>| match t {
            None => true,
            Some(expected) => presented.is_some_and(|p| constant_time_eq(expected, p)),
        };
        match self.0.read() {
            Ok(g) => check(&g),
            Err(p) => check(&p.into_inner()),
        }
    }
}

/// Equal bytes, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"\0"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn repeated_headers_are_joined_as_brpc_does() {
        use axum::http::HeaderValue;
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.append(HEADER, HeaderValue::from_static("tok"));
        assert_eq!(presented(&h).as_deref(), Some(&b"tok"[..]));
        h.append(HEADER, HeaderValue::from_static("tok"));
        assert_eq!(presented(&h).as_deref(), Some(&b"tok,tok"[..]));
        let t = Token::new(Some("tok".into()));
        assert!(!t.admits(presented(&h).as_deref()));
        let mut h = HeaderMap::new();
        h.append(HEADER, HeaderValue::from_static(""));
        h.append(HEADER, HeaderValue::from_static("tok"));
        h.append(HEADER, HeaderValue::from_static(""));
        assert_eq!(presented(&h).as_deref(), Some(&b"tok,"[..]));
    }

    #[test]
    fn no_token_admits_all_and_empty_means_none() {
        let t = Token::new(None);
        assert!(t.admits(None));
        t.set(Some(String::new()));
        assert!(t.admits(None));
        t.set(Some("s".into()));
        assert!(!t.admits(None));
        assert!(!t.admits(Some(b"x")));
        assert!(t.admits(Some(b"s")));
        assert_eq!(format!("{t:?}"), "Token(set: true)");
    }
}
