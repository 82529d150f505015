//! Reading requests as the gateway (golang/protobuf `jsonpb`) reads them.
//!
//! Why a module of its own: every quirk of the request side lives here. A body is first
//! scanned as Go's decoder scans it ([`crate::scan`]: syntax, depth, Go's wording), then
//! decoded straight into the typed request: int64 as a number or a string holding one
//! (never a float or an exponent: `5.0` is refused with the number as written); bytes
//! as standard base64; enums by name or number; a field by its original or camelCase
//! name; a repeated key keeps its last value; unknown fields are skipped without
//! building anything, so no body costs more memory than itself; an empty body is the
//! empty message.

use std::marker::PhantomData;

use base64::Engine;
use serde::de::{Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::error::EtcdError;
use crate::scan::{self, Scan, Scanner};

/// A request message: how each of its fields is read.
pub trait Message: Default {
    /// Decode the value of field `name` into `self`; false if the field is unknown.
    fn field<'de, A: MapAccess<'de>>(&mut self, name: &[u8], map: &mut A)
        -> Result<bool, A::Error>;
}

/// Implements [`Message`]: `b"name" | b"camelName" => field: WireType`, where the wire
/// type (from [`wire`]) is a newtype whose `.0` is the field's value.
#[macro_export]
macro_rules! message {
    ($ty:ty { $($($name:literal)|+ => $field:ident : $wire:ty),* $(,)? }) => {
        impl $crate::decode::Message for $ty {
            fn field<'de, A: serde::de::MapAccess<'de>>(
                &mut self,
                name: &[u8],
                map: &mut A,
            ) -> Result<bool, A::Error> {
                match name {
                    $( $($name)|+ => self.$field = map.next_value::<$wire>()?.0, )*
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }
    };
}

/// Parse one unary request body. An empty body is the empty message.
pub fn parse<T: Message>(body: &[u8]) -> Result<T, EtcdError> {
    let trimmed = body.trim_ascii();
    if trimmed.is_empty() {
        return Ok(T::default());
    }
    parse_value(trimmed).map_err(EtcdError::bad_json)
}

/// Parse one message, answering Go's wording on failure. Like Go's `json.Decoder`, only
/// the first value is read; whatever follows it is ignored.
pub fn parse_value<T: Message>(body: &[u8]) -> Result<T, String> {
    let end = scan::first_value(body)?;
    let body = &body[..end];
    match body.first() {
        Some(b'{') => {}
        Some(b'n') => return Ok(T::default()),
        Some(b'[') => return Err(top_level_mismatch("array")),
        Some(b'"') => return Err(top_level_mismatch("string")),
        Some(b't' | b'f') => return Err(top_level_mismatch("bool")),
        _ => return Err(top_level_mismatch("number")),
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    wire::Msg::<T>::deserialize(&mut de)
        .map(|m| m.0)
        .map_err(|e| strip_position(&e))
}

fn top_level_mismatch(kind: &str) -> String {
    format!("json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage")
}

fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Go's `base64.StdEncoding` with its error wording (CR and LF are skipped).
pub fn decode_b64(s: &[u8]) -> Result<Vec<u8>, String> {
    let cleaned: std::borrow::Cow<'_, [u8]> = if s.contains(&b'\r') || s.contains(&b'\n') {
        s.iter()
            .copied()
            .filter(|c| *c != b'\r' && *c != b'\n')
            .collect::<Vec<u8>>()
            .into()
    } else {
        s.into()
    };
    base64::engine::general_purpose::STANDARD
        .decode(&cleaned)
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            _ => format!(
                "illegal base64 data at input byte {}",
                cleaned.len().saturating_sub(1) / 4 * 4
            ),
        })
}

/// Go's name for the kind of a JSON value, from its first byte.
fn kind_of(text: &[u8]) -> &'static str {
    match text.first() {
        Some(b'n') => "null",
        Some(b't' | b'f') => "bool",
        Some(b'"') => "string",
        Some(b'[') => "array",
        Some(b'{') => "object",
        _ => "number",
    }
}

/// The field types of request messages, each read as jsonpb reads it.
pub mod wire {
    use super::*;

    /// A nested message (or the top-level one).
    pub struct Msg<T>(pub T);

    impl<'de, T: Message> Deserialize<'de> for Msg<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T>(PhantomData<T>);
            impl<'de, T: Message> Visitor<'de> for V<T> {
                type Value = Msg<T>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Msg<T>, A::Error> {
                    let mut out = T::default();
                    while let Some(Key(k)) = map.next_key::<Key>()? {
                        if !out.field(&k, &mut map)? {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(Msg(out))
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Msg<T>, E> {
                    Ok(Msg(T::default()))
                }
                fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Msg<T>, E> {
                    Err(E::custom(top_level_mismatch("bool")))
                }
                fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Msg<T>, E> {
                    Err(E::custom(top_level_mismatch("number")))
                }
                fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Msg<T>, E> {
                    Err(E::custom(top_level_mismatch("number")))
                }
                fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Msg<T>, E> {
                    Err(E::custom(top_level_mismatch("number")))
                }
                fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Msg<T>, E> {
                    Err(E::custom(top_level_mismatch("string")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Msg<T>, A::Error> {
                    Err(A::Error::custom(top_level_mismatch("array")))
                }
            }
            d.deserialize_any(V(PhantomData))
        }
    }

    /// An object key as raw bytes (Go does not require them to be UTF-8).
    struct Key(Vec<u8>);

    impl<'de> Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Key;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a key")
                }
                fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Key, E> {
                    Ok(Key(b.to_vec()))
                }
                fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key, E> {
                    Ok(Key(s.as_bytes().to_vec()))
                }
            }
            d.deserialize_bytes(V)
        }
    }

    /// A nested message field; null or absent is None.
    pub struct Nested<T>(pub Option<T>);

    impl<'de, T: Message> Deserialize<'de> for Nested<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(Nested(Option::<Msg<T>>::deserialize(d)?.map(|m| m.0)))
        }
    }

    /// A boxed nested message field (a txn inside a txn).
    pub struct Boxed<T>(pub Option<Box<T>>);

    impl<'de, T: Message> Deserialize<'de> for Boxed<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(Boxed(Nested::<T>::deserialize(d)?.0.map(Box::new)))
        }
    }

    /// The protobuf size of one entry of a repeated field, tag and length included.
    pub trait WireSize {
        fn wire_size(&self) -> usize;
    }

    /// The entries of a repeated field that are kept, and the protobuf size of those
    /// that were not (see [`List`]). Reads as a slice.
    #[derive(Debug, Clone)]
    pub struct Capped<T> {
        items: Vec<T>,
        dropped_bytes: usize,
    }

    impl<T> Default for Capped<T> {
        fn default() -> Self {
            Capped {
                items: Vec::new(),
                dropped_bytes: 0,
            }
        }
    }

    impl<T> Capped<T> {
        /// Protobuf bytes of the entries that were decoded but not kept.
        pub fn dropped_bytes(&self) -> usize {
            self.dropped_bytes
        }
    }

    /// A list built by the fake itself (e.g. the txn a lock runs): every entry kept.
    impl<T> From<Vec<T>> for Capped<T> {
        fn from(items: Vec<T>) -> Self {
            Capped {
                items,
                dropped_bytes: 0,
            }
        }
    }

    impl<T> std::ops::Deref for Capped<T> {
        type Target = [T];
        fn deref(&self) -> &[T] {
            &self.items
        }
    }

    impl<'a, T> IntoIterator for &'a Capped<T> {
        type Item = &'a T;
        type IntoIter = std::slice::Iter<'a, T>;
        fn into_iter(self) -> Self::IntoIter {
            self.items.iter()
        }
    }

    /// A repeated message field; null is empty, a null entry is skipped. Entries past
    /// `CAP` are decoded (so their errors are Go's) and sized (so the size limits see the
    /// whole message) but not kept: a body of a million tiny objects costs nothing, and
    /// `CAP` is above any count the fake accepts.
    pub struct List<T, const CAP: usize>(pub Capped<T>);

    impl<'de, T: Message + WireSize, const CAP: usize> Deserialize<'de> for List<T, CAP> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T, const CAP: usize>(PhantomData<T>);
            impl<'de, T: Message + WireSize, const CAP: usize> Visitor<'de> for V<T, CAP> {
                type Value = List<T, CAP>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an array")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                    let mut out = Capped::default();
                    while let Some(m) = seq.next_element::<Option<Msg<T>>>()? {
                        match m {
                            Some(Msg(m)) if out.items.len() < CAP => out.items.push(m),
                            Some(Msg(m)) => out.dropped_bytes += m.wire_size(),
                            None => {}
                        }
                    }
                    Ok(List(out))
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                    Ok(List(Capped::default()))
                }
                fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
                    Err(A::Error::custom(
                        "json: cannot unmarshal object into Go value of type []json.RawMessage",
                    ))
                }
            }
            d.deserialize_any(V(PhantomData))
        }
    }

    /// The raw text of a value, for the checks that need it as written.
    fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<&'de [u8], D::Error> {
        Ok(<&'de RawValue>::deserialize(d)?.get().as_bytes())
    }

    /// The text of an integer field as written: a string is unquoted without
    /// unescaping; null is None. A value that is not a number is refused in Go's words.
    fn int_text<'de, D: Deserializer<'de>>(d: D, go: &str) -> Result<Option<String>, D::Error> {
        let text = raw(d)?;
        let text = match text {
            [b'"', inner @ .., b'"'] => {
                scan::check_valid(inner).map_err(D::Error::custom)?;
                inner.trim_ascii()
            }
            [b'n', ..] => return Ok(None),
            t => t,
        };
        match kind_of(text) {
            "number" => Ok(Some(String::from_utf8_lossy(text).into_owned())),
            kind => Err(D::Error::custom(format!(
                "json: cannot unmarshal {kind} into Go value of type {go}"
            ))),
        }
    }

    /// int64: a number or a string holding one, as written; null is 0. A float or an
    /// exponent is refused with the number as written: Go unmarshals the text into an
    /// int64. A string is unquoted without unescaping and read the same way.
    pub struct I64(pub i64);

    impl<'de> Deserialize<'de> for I64 {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let Some(s) = int_text(d, "int64")? else {
                return Ok(I64(0));
            };
            s.parse::<i64>().map(I64).map_err(|_| {
                D::Error::custom(format!(
                    "json: cannot unmarshal number {s} into Go value of type int64"
                ))
            })
        }
    }

    /// uint64 (member IDs), read as int64 is.
    pub struct U64(pub u64);

    impl<'de> Deserialize<'de> for U64 {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let Some(s) = int_text(d, "uint64")? else {
                return Ok(U64(0));
            };
            s.parse::<u64>().map(U64).map_err(|_| {
                D::Error::custom(format!(
                    "json: cannot unmarshal number {s} into Go value of type uint64"
                ))
            })
        }
    }

    /// bool; null is false.
    pub struct Bool(pub bool);

    impl<'de> Deserialize<'de> for Bool {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = raw(d)?;
            match text {
                b"true" => Ok(Bool(true)),
                b"false" | b"null" => Ok(Bool(false)),
                t => Err(D::Error::custom(format!(
                    "json: cannot unmarshal {} into Go value of type bool",
                    kind_of(t)
                ))),
            }
        }
    }

    /// string (user names, passwords); null is empty.
    pub struct Str(pub String);

    impl<'de> Deserialize<'de> for Str {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Str;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Str, E> {
                    Ok(Str(s.to_string()))
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Str, E> {
                    Ok(Str(String::new()))
                }
                fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Str, E> {
                    Err(E::custom(mismatch("bool", "string")))
                }
                fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Str, E> {
                    Err(E::custom(mismatch("number", "string")))
                }
                fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Str, E> {
                    Err(E::custom(mismatch("number", "string")))
                }
                fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Str, E> {
                    Err(E::custom(mismatch("number", "string")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Str, A::Error> {
                    Err(A::Error::custom(mismatch("array", "string")))
                }
                fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Str, A::Error> {
                    Err(A::Error::custom(mismatch("object", "string")))
                }
            }
            d.deserialize_any(V)
        }
    }

    fn mismatch(kind: &str, go_type: &str) -> String {
        format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
    }

    /// bytes: standard base64 (padding required, CR/LF ignored); null is empty.
    pub struct Bytes(pub Vec<u8>);

    impl<'de> Deserialize<'de> for Bytes {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            // A visitor over the raw string: keys and values are the hot path.
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Bytes;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a base64 string")
                }
                fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Bytes, E> {
                    decode_b64(s.as_bytes()).map(Bytes).map_err(E::custom)
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Bytes, E> {
                    Ok(Bytes(Vec::new()))
                }
                fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Bytes, E> {
                    Err(E::custom(mismatch("bool", "[]uint8")))
                }
                fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Bytes, E> {
                    Err(E::custom(mismatch("number", "[]uint8")))
                }
                fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Bytes, E> {
                    Err(E::custom(mismatch("number", "[]uint8")))
                }
                fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Bytes, E> {
                    Err(E::custom(mismatch("number", "[]uint8")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Bytes, A::Error> {
                    Err(A::Error::custom(mismatch("array", "[]uint8")))
                }
                fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Bytes, A::Error> {
                    Err(A::Error::custom(mismatch("object", "[]uint8")))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// A protobuf enum's Go type name and value names (index = number).
    pub trait EnumType {
        const GO_TYPE: &'static str;
        const NAMES: &'static [&'static str];
    }

    /// An enum by name or number, as written; null is 0.
    pub struct Enum<E>(pub i32, PhantomData<E>);

    impl<'de, E: EnumType> Deserialize<'de> for Enum<E> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = raw(d)?;
            let go = E::GO_TYPE;
            match kind_of(text) {
                "null" => Ok(Enum(0, PhantomData)),
                "number" => {
                    let s = String::from_utf8_lossy(text);
                    s.parse::<i32>().map(|v| Enum(v, PhantomData)).map_err(|_| {
                        D::Error::custom(format!(
                            "json: cannot unmarshal number {s} into Go value of type {go}"
                        ))
                    })
                }
                "string" => {
                    let name: String = serde_json::from_slice(text).map_err(D::Error::custom)?;
                    E::NAMES
                        .iter()
                        .position(|n| *n == name)
                        .map(|i| Enum(i as i32, PhantomData))
                        .ok_or_else(|| {
                            D::Error::custom(format!("unknown value \"{name}\" for enum {go}"))
                        })
                }
                kind => Err(D::Error::custom(mismatch(kind, go))),
            }
        }
    }

    /// A repeated enum field; null is empty.
    pub struct Enums<E>(pub Vec<i32>, PhantomData<E>);

    impl<'de, E: EnumType> Deserialize<'de> for Enums<E> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let v = Option::<Vec<Enum<E>>>::deserialize(d)?.unwrap_or_default();
            Ok(Enums(v.into_iter().map(|e| e.0).collect(), PhantomData))
        }
    }

    /// A message with no fields we read (`progress_request`): present or not.
    #[derive(Default, Debug)]
    pub struct Empty;

    impl Message for Empty {
        fn field<'de, A: MapAccess<'de>>(&mut self, _: &[u8], _: &mut A) -> Result<bool, A::Error> {
            Ok(false)
        }
    }
}

/// Splits a streamed request body into its JSON messages as they arrive, keeping only
/// the bytes of the message being received.
#[derive(Default)]
pub struct MessageSplitter {
    buf: Vec<u8>,
    scanner: Scanner,
}

/// One item out of a streamed body: a message's bytes, or why the stream stops.
pub enum Piece {
    Message(Vec<u8>),
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
        let start = self.buf.iter().position(|c| !c.is_ascii_whitespace());
        match start {
            None => {
                self.buf.clear();
                self.scanner = Scanner::default();
                return None;
            }
            Some(0) => {}
            Some(s) => {
                // Only whitespace was scanned so far: restart at the message.
                self.buf.drain(..s);
                self.scanner = Scanner::default();
            }
        }
        match self.scanner.feed(&self.buf, at_eof) {
            Scan::Complete(end) => {
                let msg: Vec<u8> = self.buf.drain(..end).collect();
                self.scanner = Scanner::default();
                Some(Piece::Message(msg))
            }
            Scan::Incomplete if !at_eof => None,
            Scan::Incomplete => {
                self.buf.clear();
                Some(Piece::Malformed("unexpected EOF".to_string()))
            }
            Scan::Error(e) => {
                self.buf.clear();
                self.scanner = Scanner::default();
                Some(Piece::Malformed(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wire::*;
    use super::*;

    #[derive(Default, Debug)]
    struct R {
        key: Vec<u8>,
        limit: i64,
    }
    crate::message!(R { b"key" => key: Bytes, b"limit" => limit: I64 });

    #[test]
    fn int64_as_string_or_number_and_go_errors() {
        let r: R = parse(br#"{"key":"Zm9v","limit":"5"}"#).unwrap();
        assert_eq!((r.key.as_slice(), r.limit), (&b"foo"[..], 5));
        let r: R = parse(br#"{"limit":7,"other":[1,{"a":[]}]}"#).unwrap();
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

    #[test]
    fn floats_exponents_and_repeated_keys_as_go() {
        for n in [
            "5.0",
            "1e2",
            "1E+02",
            "-5.50",
            "100000000000000000000",
            "\"1.0\"",
        ] {
            let body = format!(r#"{{"limit":{n}}}"#);
            let shown = n.trim_matches('"');
            assert_eq!(
                parse::<R>(body.as_bytes()).unwrap_err().message,
                format!("json: cannot unmarshal number {shown} into Go value of type int64")
            );
        }
        assert_eq!(parse::<R>(br#"{"limit":-0}"#).unwrap().limit, 0);
        assert_eq!(parse::<R>(br#"{"limit":" 7"}"#).unwrap().limit, 7);
        assert_eq!(
            parse::<R>(br#"{"limit":"1 2"}"#).unwrap_err().message,
            "invalid character '2' after top-level value"
        );
        let r: R = parse(br#"{"limit":1,"key":"YQ==","limit":2,"key":"Yg=="}"#).unwrap();
        assert_eq!((r.key.as_slice(), r.limit), (&b"b"[..], 2));
    }

    proptest::proptest! {
        /// Whatever arrives, parsing answers (an error or a message), never panics.
        #[test]
        fn parsing_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
                                text in "[{}\\[\\]\":,0-9a-z .eE+-]{0,40}") {
            let _ = parse::<R>(&body);
            let _ = parse::<R>(text.as_bytes());
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
