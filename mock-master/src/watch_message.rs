//! One message of a watch stream, read straight from its text by streaming serde
//! visitors (no intermediate `Value` tree: the master reads a message for every write
//! under its prefix).
//!
//! The reading is lenient in the way a lookup in a parsed tree is: a field of the wrong
//! type counts as absent, a message that is not an object is an empty one, and
//! `result` (when present, whatever its type) is the message, else the top level is.
//! Only three things are errors: an `error` field, an event type other than `PUT` or
//! `DELETE`, and a key or value that is not base64 text (or null). Those are kept while
//! reading and judged afterwards in message order, so a bad field the message does not
//! use (the top level's, when `result` is present) is no error.
//!
//! Fields not read are skipped with the same parser the read ones go through, so every
//! text that is not JSON (a number out of range, a lone surrogate) is refused as a
//! JSON parser refuses it.

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::etcd_answer::{EtcdError, EventKind, KeyValue, WatchEvent, WatchResponse};

/// A watch message as read, before it is judged ([`WatchMessage::into_response`]).
#[derive(Debug, Default)]
pub struct WatchMessage {
    /// The `error` field, whatever its value.
    error: Option<Value>,
    /// The `result` field, when present.
    result: Option<Body>,
    /// The top level's own fields (the message when there is no `result`).
    top: Body,
}

impl WatchMessage {
    /// The response the message carries, or why it carries none.
    pub fn into_response(self) -> Result<WatchResponse, EtcdError> {
        if let Some(e) = self.error {
            return Err(EtcdError(format!("watch error: {e}")));
        }
        let body = self.result.unwrap_or(self.top);
        let mut events = Vec::with_capacity(body.events.len());
        for ev in body.events {
            events.push(WatchEvent {
                kind: ev.kind.map_err(EtcdError)?,
                kv: ev.kv.decoded()?,
                prev_kv: ev.prev_kv.map(RawKv::decoded).transpose()?,
            });
        }
        Ok(WatchResponse {
            revision: body.revision,
            created: body.created,
            canceled: body.canceled,
            compact_revision: body.compact_revision,
            cancel_reason: body.cancel_reason,
            events,
        })
    }
}

/// Read one watch message from `line`: a syntax error is serde_json's, worded as it
/// words it; anything else is the message's own error.
pub fn parse_watch_line(line: &str) -> Result<WatchResponse, String> {
    serde_json::from_str::<WatchMessage>(line)
        .map_err(|e| e.to_string())
        .and_then(|m| m.into_response().map_err(|e| e.0))
}

/// The fields of a response (the `result` object, or the top level).
#[derive(Debug, Default)]
struct Body {
    revision: i64,
    created: bool,
    canceled: bool,
    compact_revision: i64,
    cancel_reason: String,
    events: Vec<RawEvent>,
}

/// An event as read: its type, or the error an unknown one is.
#[derive(Debug)]
struct RawEvent {
    kind: Result<EventKind, String>,
    kv: RawKv,
    prev_kv: Option<RawKv>,
}

impl Default for RawEvent {
    fn default() -> Self {
        RawEvent {
            kind: Ok(EventKind::Put),
            kv: RawKv::default(),
            prev_kv: None,
        }
    }
}

/// A key-value as read: key and value decoded, or the error each is.
#[derive(Debug)]
struct RawKv {
    key: Result<Vec<u8>, String>,
    value: Result<Vec<u8>, String>,
    mod_revision: i64,
}

impl Default for RawKv {
    fn default() -> Self {
        RawKv {
            key: Ok(Vec::new()),
            value: Ok(Vec::new()),
            mod_revision: 0,
        }
    }
}

impl RawKv {
    /// The key-value, or the first of its errors (the key's before the value's).
    fn decoded(self) -> Result<KeyValue, EtcdError> {
        Ok(KeyValue {
            key: self.key.map_err(EtcdError)?,
            value: self.value.map_err(EtcdError)?,
            mod_revision: self.mod_revision,
        })
    }
}

/// The names of the fields read anywhere in a message.
enum Name {
    Error,
    Result,
    Header,
    Revision,
    Created,
    Canceled,
    CompactRevision,
    CancelReason,
    Events,
    Type,
    Kv,
    PrevKv,
    Key,
    Value,
    ModRevision,
    Other,
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name, E> {
                Ok(match v {
                    "error" => Name::Error,
                    "result" => Name::Result,
                    "header" => Name::Header,
                    "revision" => Name::Revision,
                    "created" => Name::Created,
                    "canceled" => Name::Canceled,
                    "compact_revision" => Name::CompactRevision,
                    "cancel_reason" => Name::CancelReason,
                    "events" => Name::Events,
                    "type" => Name::Type,
                    "kv" => Name::Kv,
                    "prev_kv" => Name::PrevKv,
                    "key" => Name::Key,
                    "value" => Name::Value,
                    "mod_revision" => Name::ModRevision,
                    _ => Name::Other,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Visitor methods for values of the wrong type, each meaning `$absent`; `seq` and
/// `map` read their contents through, so the text is checked as JSON.
macro_rules! absent {
    ($absent:expr; $($kind:ident),*) => { $( absent!(@$kind $absent); )* };
    (@unit $a:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@bool $a:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@i64 $a:expr) => {
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@u64 $a:expr) => {
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@f64 $a:expr) => {
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@str $a:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($a)
        }
    };
    (@seq $a:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok($a)
        }
    };
    (@map $a:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<Skip, Skip>()?.is_some() {}
            Ok($a)
        }
    };
}

/// A lenient field's `Deserialize`: through `deserialize_any` with visitor `$v`.
macro_rules! read_any {
    ($t:ty, $v:expr) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any($v)
            }
        }
    };
}

/// A value not read: parsed as JSON (through `deserialize_any`, as a read value is)
/// and dropped.
pub(crate) struct Skip;

struct SkipV;

impl<'de> Visitor<'de> for SkipV {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    absent!(Skip; unit, bool, i64, u64, f64, str, seq, map);
}

read_any!(Skip, SkipV);

/// A boolean field: `None` for any other type.
struct Flag(Option<bool>);

struct FlagV;

impl<'de> Visitor<'de> for FlagV {
    type Value = Flag;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a boolean")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
        Ok(Flag(Some(v)))
    }
    absent!(Flag(None); unit, i64, u64, f64, str, seq, map);
}

read_any!(Flag, FlagV);

/// A 64-bit integer as the gateway writes it (a decimal string, or a number that is an
/// integer in range); `None` for anything else.
struct Int(Option<i64>);

struct IntV;

impl<'de> Visitor<'de> for IntV {
    type Value = Int;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 64-bit integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
        Ok(Int(Some(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
        Ok(Int(i64::try_from(v).ok()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Int, E> {
        Ok(Int(v.parse().ok()))
    }
    absent!(Int(None); unit, bool, f64, seq, map);
}

read_any!(Int, IntV);

/// A string field: `None` for any other type.
struct Text(Option<String>);

struct TextV;

impl<'de> Visitor<'de> for TextV {
    type Value = Text;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
        Ok(Text(Some(v.to_string())))
    }
    absent!(Text(None); unit, bool, i64, u64, f64, seq, map);
}

read_any!(Text, TextV);

/// An event's type: `PUT` (or absent, or not a string) or `DELETE`; another name is an
/// error.
struct Kind(Result<EventKind, String>);

struct KindV;

impl<'de> Visitor<'de> for KindV {
    type Value = Kind;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event type")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind(match v {
            "PUT" => Ok(EventKind::Put),
            "DELETE" => Ok(EventKind::Delete),
            other => Err(format!("unknown watch event type {other}")),
        }))
    }
    absent!(Kind(Ok(EventKind::Put)); unit, bool, i64, u64, f64, seq, map);
}

read_any!(Kind, KindV);

/// A key or value: base64 text decoded, null for none; anything else is an error that
/// names the field.
struct Bytes(Result<Vec<u8>, String>);

struct BytesV(&'static str);

impl<'de> Visitor<'de> for BytesV {
    type Value = Bytes;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("base64 text")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Bytes, E> {
        Ok(Bytes(Ok(Vec::new())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
        let field = self.0;
        let decoded = B64.decode(v);
        Ok(Bytes(
            decoded.map_err(|e| format!("bad base64 in {field}: {e}")),
        ))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Bytes, E> {
        Ok(self.not_a_string())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Bytes, E> {
        Ok(self.not_a_string())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Bytes, E> {
        Ok(self.not_a_string())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Bytes, E> {
        Ok(self.not_a_string())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Bytes, A::Error> {
        SkipV.visit_seq(seq)?;
        Ok(self.not_a_string())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Bytes, A::Error> {
        SkipV.visit_map(map)?;
        Ok(self.not_a_string())
    }
}

impl BytesV {
    fn not_a_string(&self) -> Bytes {
        Bytes(Err(format!("{} is not a string", self.0)))
    }
}

/// A key-value object; any other type is `None` (an absent key-value).
struct MaybeKv(Option<RawKv>);

struct KvV;

impl<'de> Visitor<'de> for KvV {
    type Value = MaybeKv;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key-value object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeKv, A::Error> {
        let mut kv = RawKv::default();
        while let Some(name) = map.next_key::<Name>()? {
            match name {
                Name::Key => kv.key = map.next_value_seed(BytesSeed("key"))?.0,
                Name::Value => kv.value = map.next_value_seed(BytesSeed("value"))?.0,
                Name::ModRevision => kv.mod_revision = map.next_value::<Int>()?.0.unwrap_or(0),
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(MaybeKv(Some(kv)))
    }
    absent!(MaybeKv(None); unit, bool, i64, u64, f64, str, seq);
}

read_any!(MaybeKv, KvV);

/// Reads [`Bytes`] for the field it names.
struct BytesSeed(&'static str);

impl<'de> de::DeserializeSeed<'de> for BytesSeed {
    type Value = Bytes;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Bytes, D::Error> {
        d.deserialize_any(BytesV(self.0))
    }
}

/// An event object; any other type is an event with nothing set (a `PUT` of an empty
/// key-value).
struct EventV;

impl<'de> Visitor<'de> for EventV {
    type Value = RawEvent;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEvent, A::Error> {
        let mut ev = RawEvent::default();
        while let Some(name) = map.next_key::<Name>()? {
            match name {
                Name::Type => ev.kind = map.next_value::<Kind>()?.0,
                Name::Kv => ev.kv = map.next_value::<MaybeKv>()?.0.unwrap_or_default(),
                Name::PrevKv => ev.prev_kv = map.next_value::<MaybeKv>()?.0,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(ev)
    }
    absent!(RawEvent::default(); unit, bool, i64, u64, f64, str, seq);
}

read_any!(RawEvent, EventV);

/// The `events` array; any other type is no events.
struct Events(Vec<RawEvent>);

struct EventsV;

impl<'de> Visitor<'de> for EventsV {
    type Value = Events;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Events, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(64));
        while let Some(ev) = seq.next_element::<RawEvent>()? {
            out.push(ev);
        }
        Ok(Events(out))
    }
    absent!(Events(Vec::new()); unit, bool, i64, u64, f64, str, map);
}

read_any!(Events, EventsV);

/// The `header` object's revision; 0 when absent or when the header is no object.
struct HeaderRevision(i64);

struct HeaderV;

impl<'de> Visitor<'de> for HeaderV {
    type Value = HeaderRevision;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a header object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderRevision, A::Error> {
        let mut revision = 0;
        while let Some(name) = map.next_key::<Name>()? {
            match name {
                Name::Revision => revision = map.next_value::<Int>()?.0.unwrap_or(0),
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(HeaderRevision(revision))
    }
    absent!(HeaderRevision(0); unit, bool, i64, u64, f64, str, seq);
}

read_any!(HeaderRevision, HeaderV);

impl Body {
    /// Read field `name` of a response into `self`; `false` if it is no field of one.
    fn read<'de, A: MapAccess<'de>>(&mut self, name: &Name, map: &mut A) -> Result<bool, A::Error> {
        match name {
            Name::Header => self.revision = map.next_value::<HeaderRevision>()?.0,
            Name::Created => self.created = map.next_value::<Flag>()?.0.unwrap_or(false),
            Name::Canceled => self.canceled = map.next_value::<Flag>()?.0.unwrap_or(false),
            Name::CompactRevision => {
                self.compact_revision = map.next_value::<Int>()?.0.unwrap_or(0)
            }
            Name::CancelReason => {
                self.cancel_reason = map.next_value::<Text>()?.0.unwrap_or_default()
            }
            Name::Events => self.events = map.next_value::<Events>()?.0,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A response object (`result`); any other type is an empty response.
struct BodyV;

impl<'de> Visitor<'de> for BodyV {
    type Value = Body;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a response object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut body = Body::default();
        while let Some(name) = map.next_key::<Name>()? {
            if !body.read(&name, &mut map)? {
                map.next_value::<Skip>()?;
            }
        }
        Ok(body)
    }
    absent!(Body::default(); unit, bool, i64, u64, f64, str, seq);
}

read_any!(Body, BodyV);

/// A whole message; any other type than an object is an empty response.
struct MessageV;

impl<'de> Visitor<'de> for MessageV {
    type Value = WatchMessage;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a watch message")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchMessage, A::Error> {
        let mut m = WatchMessage::default();
        while let Some(name) = map.next_key::<Name>()? {
            match name {
                Name::Error => m.error = Some(map.next_value::<Value>()?),
                Name::Result => m.result = Some(map.next_value::<Body>()?),
                other => {
                    if !m.top.read(&other, &mut map)? {
                        map.next_value::<Skip>()?;
                    }
                }
            }
        }
        Ok(m)
    }
    absent!(WatchMessage::default(); unit, bool, i64, u64, f64, str, seq);
}

read_any!(WatchMessage, MessageV);

/// Whether `text` is one JSON object, as a parser that builds it would accept it:
/// what the master's etcd client takes for an answer.
pub fn is_object(text: &[u8]) -> bool {
    serde_json::from_slice::<Object>(text).is_ok()
}

/// A JSON object, its contents read through and dropped; any other value is refused.
struct Object;

struct ObjectV;

impl<'de> Visitor<'de> for ObjectV {
    type Value = Object;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    absent!(Object; map);
}

read_any!(Object, ObjectV);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::parse_watch_message;
    use proptest::prelude::*;

    /// What reading `text` through a `Value` tree answers.
    fn through_tree(text: &str) -> Result<WatchResponse, String> {
        serde_json::from_str::<Value>(text)
            .map_err(|e| e.to_string())
            .and_then(|v| parse_watch_message(&v).map_err(|e| e.0))
    }

    /// JSON text shaped like watch messages (their field names, right and wrong types,
    /// the same key twice), as text so that duplicate keys can be written.
    fn json_text() -> impl Strategy<Value = String> {
        let names = prop::sample::select(vec![
            "error",
            "result",
            "header",
            "revision",
            "created",
            "canceled",
            "compact_revision",
            "cancel_reason",
            "events",
            "type",
            "kv",
            "prev_kv",
            "key",
            "value",
            "mod_revision",
            "lease",
            "x",
        ]);
        let leaf = prop_oneof![
            Just("null".to_string()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just("1.5".to_string()),
            Just("18446744073709551616".to_string()),
            any::<i64>().prop_map(|n| format!("\"{n}\"")),
            Just("\"PUT\"".to_string()),
            Just("\"DELETE\"".to_string()),
            Just("\"PATCH\"".to_string()),
            Just("\"WExMTTpERUZBVUxUOmE=\"".to_string()),
            Just("\"not base64!\"".to_string()),
            Just("\"a\\u00e9\\n\"".to_string()),
            Just("\"\"".to_string()),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((names.clone(), inner), 0..6).prop_map(|kv| {
                    let fields: Vec<String> =
                        kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Any text reads as the tree reading reads it: the same response or the same
        /// error.
        #[test]
        fn reads_as_the_tree_reads(text in json_text()) {
            prop_assert_eq!(parse_watch_line(&text), through_tree(&text));
        }

        /// An object is what parses to an object tree.
        #[test]
        fn objects_are_what_parse_to_object_trees(text in json_text()) {
            let tree = serde_json::from_str::<Value>(&text);
            prop_assert_eq!(is_object(text.as_bytes()), matches!(tree, Ok(Value::Object(_))));
        }
    }

    #[test]
    fn text_that_is_not_json_is_refused_with_the_parsers_words() {
        let cases = [
            "",
            "{",
            r#"{"result":{"events":[{"kv":{"key":"a"#,
            r#"{"x": 1e400}"#,
            r#"{"x": "\ud800"}"#,
            r#"{"result": {}} trailing"#,
            r#"{"result": nope}"#,
            r#"{1: 2}"#,
        ];
        for text in cases {
            assert!(!is_object(text.as_bytes()), "{text:?}");
            let read = parse_watch_line(text);
            assert!(read.is_err(), "{text:?} read as {read:?}");
            assert_eq!(read, through_tree(text), "{text:?}");
        }
    }

    #[test]
    fn wrong_types_read_as_absent_and_bad_fields_unused_are_no_error() {
        let cases = [
            "5",
            "[1, 2]",
            r#"{"result": null, "events": [{"type": "PATCH"}]}"#,
            r#"{"result": {"created": "yes", "header": [1], "events": {"a": 1}}}"#,
            r#"{"result": {"events": [3, {"type": 7, "kv": [1], "prev_kv": "x"}]}}"#,
            r#"{"header": {"revision": 5}, "header": {"x": 1}}"#,
        ];
        for text in cases {
            let read = parse_watch_line(text);
            assert!(read.is_ok(), "{text:?} read as {read:?}");
            assert_eq!(read, through_tree(text), "{text:?}");
        }
        let bad =
            r#"{"result": {"events": [{"type": "DELETE", "kv": {"key": 5, "value": "??"}}]}}"#;
        assert_eq!(
            parse_watch_line(bad),
            Err("key is not a string".to_string())
        );
    }
}
