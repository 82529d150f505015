//! The gateway's JSON dialect (golang/protobuf `jsonpb` with original field names).
//!
//! Why a module of its own: every quirk a client can see lives here. 64-bit integers are
//! written as strings but read as strings or numbers; bytes are standard base64; zero
//! values are omitted when writing; unknown fields are ignored and an empty body is the
//! empty message when reading; enums are read by name or number.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::EtcdError;

/// The CORS headers etcd's gateway puts on every answer.
pub fn cors(h: &mut HeaderMap) {
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("accept, content-type, authorization"),
    );
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
    );
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
}

/// A successful unary answer: JSON body with the gateway's headers.
pub fn ok(body: String) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        "grpc-metadata-content-type",
        HeaderValue::from_static("application/grpc"),
    );
    cors(h);
    resp
}

/// The `header` of every response.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Header {
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub cluster_id: u64,
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub member_id: u64,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub revision: i64,
    #[serde(serialize_with = "ser_u64", skip_serializing_if = "is_zero_u64")]
    pub raft_term: u64,
}

impl Header {
    /// The short header of responses nested in a txn: only the revision.
    pub fn nested(revision: i64) -> Header {
        Header {
            cluster_id: 0,
            member_id: 0,
            revision,
            raft_term: 0,
        }
    }
}

pub fn is_zero(v: &i64) -> bool {
    *v == 0
}
pub fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
pub fn is_false(v: &bool) -> bool {
    !*v
}

pub fn ser_i64<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}
pub fn ser_u64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}
pub fn ser_b64<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&b64(v))
}
pub fn ser_b64_list<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|k| b64(k)))
}

pub fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(v)
}

/// Deserializers accepting what jsonpb accepts.
pub mod de {
    use super::*;

    /// int64: a JSON number or a string holding one; null is 0.
    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => Ok(0),
            serde_json::Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                        .map(|f| f as i64)
                })
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "json: cannot unmarshal number {n} into Go value of type int64"
                    ))
                }),
            serde_json::Value::String(s) => s.trim().parse::<i64>().map_err(|_| {
                let c = s.chars().next().unwrap_or('"');
                D::Error::custom(format!(
                    "invalid character '{c}' looking for beginning of value"
                ))
            }),
            other => Err(D::Error::custom(format!(
                "json: cannot unmarshal {} into Go value of type int64",
                go_kind(&other)
            ))),
        }
    }

    /// bytes: standard base64 (padding required, CR/LF ignored); null is empty.
    pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        // A visitor, not a `Value`: keys and values are the hot path of every request.
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a base64 string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Vec<u8>, E> {
                decode_b64(s).map_err(E::custom)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<u8>, E> {
                Ok(Vec::new())
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Vec<u8>, E> {
                Ok(Vec::new())
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Vec<u8>, E> {
                Err(E::custom(mismatch("bool")))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Vec<u8>, E> {
                Err(E::custom(mismatch("number")))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Vec<u8>, E> {
                Err(E::custom(mismatch("number")))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Vec<u8>, E> {
                Err(E::custom(mismatch("number")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Vec<u8>, A::Error> {
                Err(A::Error::custom(mismatch("array")))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Vec<u8>, A::Error> {
                Err(A::Error::custom(mismatch("object")))
            }
        }
        fn mismatch(kind: &str) -> String {
            format!("json: cannot unmarshal {kind} into Go value of type []uint8")
        }
        d.deserialize_any(V)
    }

    /// bool; null is false.
    pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => Ok(false),
            serde_json::Value::Bool(b) => Ok(b),
            other => Err(D::Error::custom(format!(
                "json: cannot unmarshal {} into Go value of type bool",
                go_kind(&other)
            ))),
        }
    }

    /// An enum by name (from `names`, index = value) or by number; null is 0.
    pub fn enum_of<'de, D: Deserializer<'de>>(
        d: D,
        type_name: &str,
        names: &[&str],
    ) -> Result<i32, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Null => Ok(0),
            serde_json::Value::Number(n) => n
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "json: cannot unmarshal number {n} into Go value of type int32"
                    ))
                }),
            serde_json::Value::String(s) => names
                .iter()
                .position(|n| *n == s)
                .map(|i| i as i32)
                .ok_or_else(|| {
                    D::Error::custom(format!("unknown value \"{s}\" for enum {type_name}"))
                }),
            other => Err(D::Error::custom(format!(
                "json: cannot unmarshal {} into Go value of type int32",
                go_kind(&other)
            ))),
        }
    }

    pub(crate) fn go_kind(v: &serde_json::Value) -> &'static str {
        match v {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "bool",
            serde_json::Value::Number(_) => "number",
            serde_json::Value::String(_) => "string",
            serde_json::Value::Array(_) => "array",
            serde_json::Value::Object(_) => "object",
        }
    }
}

/// Go's `base64.StdEncoding` with its error wording.
pub fn decode_b64(s: &str) -> Result<Vec<u8>, String> {
    let cleaned: std::borrow::Cow<'_, str> = if s.contains(['\r', '\n']) {
        s.chars()
            .filter(|c| *c != '\r' && *c != '\n')
            .collect::<String>()
            .into()
    } else {
        s.into()
    };
    base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            _ => format!(
                "illegal base64 data at input byte {}",
                cleaned.len().saturating_sub(1) / 4 * 4
            ),
        })
}

/// Parse one request message. An empty body is the empty message, as the gateway reads it.
pub fn parse<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, EtcdError> {
    let trimmed = body.trim_ascii();
    if trimmed.is_empty() {
        return Ok(T::default());
    }
    parse_value(trimmed).map_err(EtcdError::bad_json)
}

/// Parse a message, answering Go's wording on failure.
pub fn parse_value<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, String> {
    match body.first() {
        Some(b'{') => {}
        Some(b'n') if body == b"null" => return Ok(T::default()),
        Some(b'[') => return Err(top_level_mismatch("array")),
        Some(b'"') => return Err(top_level_mismatch("string")),
        Some(b't' | b'f') => return Err(top_level_mismatch("bool")),
        Some(b'-' | b'0'..=b'9') => return Err(top_level_mismatch("number")),
        _ => {}
    }
    // Like Go's json.Decoder, read the first value and ignore whatever follows it.
    let mut de = serde_json::Deserializer::from_slice(body);
    T::deserialize(&mut de).map_err(|e| go_message(&e, body))
}

fn top_level_mismatch(kind: &str) -> String {
    format!("json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage")
}

/// Turn a serde_json error into encoding/json's wording where the two can be matched.
fn go_message(e: &serde_json::Error, body: &[u8]) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => "unexpected EOF".to_string(),
        Category::Syntax => go_syntax(body).unwrap_or_else(|| strip_position(e)),
        Category::Data | Category::Io => strip_position(e),
    }
}

fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A small re-implementation of encoding/json's scanner, only to word syntax errors
/// the way Go does ("invalid character 'b' looking for beginning of object key string").
fn go_syntax(body: &[u8]) -> Option<String> {
    #[derive(Clone, Copy)]
    enum Ctx {
        Obj,
        Arr,
    }
    let mut stack: Vec<Ctx> = Vec::new();
    let mut i = 0;
    let n = body.len();
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let bad = |c: u8, ctx: &str| {
        let shown = if c == b'\'' {
            "'\\''".to_string()
        } else if c == b'"' {
            "'\"'".to_string()
        } else if c.is_ascii_graphic() {
            format!("'{}'", c as char)
        } else {
            format!("'\\x{:02x}'", c)
        };
        Some(format!("invalid character {shown} {ctx}"))
    };
    // States: expecting a value, expecting a key (or '}' when first), after key, after value.
    #[derive(PartialEq, Clone, Copy)]
    enum St {
        Value,
        FirstValueOrEnd,
        Key,
        FirstKeyOrEnd,
        Colon,
        After,
    }
    let mut st = St::Value;
    while i < n {
        let c = body[i];
        if ws(c) {
            i += 1;
            continue;
        }
        match st {
            St::Value | St::FirstValueOrEnd => {
                if st == St::FirstValueOrEnd && c == b']' {
                    stack.pop();
                    i += 1;
                    st = St::After;
                    continue;
                }
                match c {
                    b'{' => {
                        stack.push(Ctx::Obj);
                        st = St::FirstKeyOrEnd;
                        i += 1;
                    }
                    b'[' => {
                        stack.push(Ctx::Arr);
                        st = St::FirstValueOrEnd;
                        i += 1;
                    }
                    b'"' => {
                        i = skip_string(body, i)?;
                        st = St::After;
                    }
                    b'-' | b'0'..=b'9' => {
                        i += 1;
                        while i < n
                            && matches!(body[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                        {
                            i += 1;
                        }
                        st = St::After;
                    }
                    b't' | b'f' | b'n' => {
                        let word: &[u8] = match c {
                            b't' => b"true",
                            b'f' => b"false",
                            _ => b"null",
                        };
                        for (k, w) in word.iter().enumerate() {
                            match body.get(i + k) {
                                Some(x) if x == w => {}
                                Some(x) => {
                                    let what = match c {
                                        b't' => "in literal true (expecting '",
                                        b'f' => "in literal false (expecting '",
                                        _ => "in literal null (expecting '",
                                    };
                                    return bad(*x, &format!("{what}{}')", *w as char));
                                }
                                None => return None,
                            }
                        }
                        i += word.len();
                        st = St::After;
                    }
                    _ => return bad(c, "looking for beginning of value"),
                }
            }
            St::Key | St::FirstKeyOrEnd => {
                if st == St::FirstKeyOrEnd && c == b'}' {
                    stack.pop();
                    i += 1;
                    st = St::After;
                    continue;
                }
                if c != b'"' {
                    return bad(c, "looking for beginning of object key string");
                }
                i = skip_string(body, i)?;
                st = St::Colon;
            }
            St::Colon => {
                if c != b':' {
                    return bad(c, "after object key");
                }
                i += 1;
                st = St::Value;
            }
            St::After => match stack.last() {
                None => return bad(c, "after top-level value"),
                Some(Ctx::Obj) => match c {
                    b',' => {
                        i += 1;
                        st = St::Key;
                    }
                    b'}' => {
                        stack.pop();
                        i += 1;
                    }
                    _ => return bad(c, "after object key:value pair"),
                },
                Some(Ctx::Arr) => match c {
                    b',' => {
                        i += 1;
                        st = St::Value;
                    }
                    b']' => {
                        stack.pop();
                        i += 1;
                    }
                    _ => return bad(c, "after array element"),
                },
            },
        }
    }
    None
}

/// Index just past the closing quote of the string starting at `start`, if it closes.
fn skip_string(body: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Splits a streamed request body into its JSON messages as they arrive.
#[derive(Default)]
pub struct MessageSplitter {
    buf: Vec<u8>,
}

/// One item out of a streamed body.
pub enum Piece {
    Message(serde_json::Value),
    Malformed(String),
}

impl MessageSplitter {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message, if one is buffered; `Malformed` stops the stream.
    pub fn next(&mut self, at_eof: bool) -> Option<Piece> {
        let start = self.buf.iter().position(|c| !c.is_ascii_whitespace())?;
        let mut it = serde_json::Deserializer::from_slice(&self.buf[start..])
            .into_iter::<serde_json::Value>();
        match it.next()? {
            Ok(v) => {
                let used = start + it.byte_offset();
                self.buf.drain(..used);
                Some(Piece::Message(v))
            }
            Err(e) if e.is_eof() && !at_eof => None,
            Err(e) => {
                let body = self.buf[start..].to_vec();
                self.buf.clear();
                Some(Piece::Malformed(go_message(&e, &body)))
            }
        }
    }
}

/// Decode one streamed message into a request type.
pub fn from_value<T: DeserializeOwned + Default>(v: serde_json::Value) -> Result<T, String> {
    match &v {
        serde_json::Value::Object(_) => serde_json::from_value(v).map_err(|e| strip_position(&e)),
        serde_json::Value::Null => Ok(T::default()),
        other => Err(top_level_mismatch(de::go_kind(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Default, Debug)]
    #[serde(default)]
    struct R {
        #[serde(deserialize_with = "de::bytes")]
        key: Vec<u8>,
        #[serde(deserialize_with = "de::i64")]
        limit: i64,
    }

    #[test]
    fn int64_as_string_or_number_and_go_errors() {
        let r: R = parse(br#"{"key":"Zm9v","limit":"5"}"#).unwrap();
        assert_eq!((r.key.as_slice(), r.limit), (&b"foo"[..], 5));
        let r: R = parse(br#"{"limit":7,"other":1}"#).unwrap();
        assert_eq!(r.limit, 7);
        let r: R = parse(b"").unwrap();
        assert_eq!(r.limit, 0);
        let e = parse::<R>(b"{bad").unwrap_err();
        assert_eq!(
            e.message,
            "invalid character 'b' looking for beginning of object key string"
        );
        assert_eq!((e.status.as_u16(), e.code), (400, 3));
        assert_eq!(
            parse::<R>(b"[]").unwrap_err().message,
            "json: cannot unmarshal array into Go value of type map[string]json.RawMessage"
        );
        assert_eq!(
            parse::<R>(br#"{"key":"!!!"}"#).unwrap_err().message,
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            parse::<R>(br#"{"key":5}"#).unwrap_err().message,
            "json: cannot unmarshal number into Go value of type []uint8"
        );
    }

    proptest::proptest! {
        /// Whatever arrives, parsing answers (an error or a message), never panics.
        #[test]
        fn parsing_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
                                text in "[{}\\[\\]\":,0-9a-z ]{0,40}") {
            let _ = parse::<R>(&body);
            let _ = parse::<R>(text.as_bytes());
            let _ = go_syntax(text.as_bytes());
            let mut s = MessageSplitter::default();
            s.push(text.as_bytes());
            while let Some(Piece::Message(_)) = s.next(true) {}
        }
    }

    #[test]
    fn splitter_waits_for_complete_messages() {
        let mut s = MessageSplitter::default();
        s.push(br#"{"ID":1} {"ID""#);
        assert!(matches!(s.next(false), Some(Piece::Message(_))));
        assert!(s.next(false).is_none());
        s.push(br#":2}"#);
        assert!(matches!(s.next(false), Some(Piece::Message(_))));
        assert!(s.next(true).is_none());
        s.push(b"{bad}");
        assert!(matches!(s.next(false), Some(Piece::Malformed(_))));
    }
}
