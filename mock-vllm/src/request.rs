//! Decoding a completions or chat body without building a JSON tree.
//!
//! A `serde_json::Value` of a 4 MB body made of half a million tiny objects takes
//! hundreds of MiB. Here the top-level object is read once: the fields the fake uses are
//! kept as borrowed raw JSON (no copy), every other field is skipped with
//! [`IgnoredAny`], and the prompt or the messages are folded into (tokens, hash) while
//! they stream by. No body under the cap costs much more than its own bytes.
//!
//! Duplicate keys keep the last value, as Python's `json` (and so vLLM) does.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::tokenizer::{count_tokens, CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_REPLY_PRIMER};

/// The top-level fields the fake reads, as raw JSON borrowed from the body.
#[derive(Default, Debug)]
pub(crate) struct Fields<'a> {
    pub model: Option<&'a RawValue>,
    pub prompt: Option<&'a RawValue>,
    pub messages: Option<&'a RawValue>,
    pub max_tokens: Option<&'a RawValue>,
    pub max_completion_tokens: Option<&'a RawValue>,
    pub n: Option<&'a RawValue>,
    pub min_tokens: Option<&'a RawValue>,
    pub stream: Option<&'a RawValue>,
    pub stream_options: Option<&'a RawValue>,
    pub ignore_eos: Option<&'a RawValue>,
}

/// Why a body is not a request at all.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Not JSON: the parser's message and column.
    Json(serde_json::Error),
    /// JSON, but not an object.
    NotObject,
}

/// The known fields of a JSON object body; everything else skipped, never stored.
pub(crate) fn fields(body: &[u8]) -> Result<Fields<'_>, BodyError> {
    let raw: &RawValue = serde_json::from_slice(body).map_err(BodyError::Json)?;
    if !raw.get().starts_with('{') {
        return Err(BodyError::NotObject);
    }
    serde_json::from_str::<FieldsSeed>(raw.get())
        .map(|f| f.0)
        .map_err(BodyError::Json)
}

/// Deserializes [`Fields`] from a JSON object (the raw text is already known valid).
struct FieldsSeed<'a>(Fields<'a>);

impl<'de> de::Deserialize<'de> for FieldsSeed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FieldsVisitor)
    }
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = FieldsSeed<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Fields::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "model" => &mut out.model,
                "prompt" => &mut out.prompt,
                "messages" => &mut out.messages,
                "max_tokens" => &mut out.max_tokens,
                "max_completion_tokens" => &mut out.max_completion_tokens,
                "n" => &mut out.n,
                "min_tokens" => &mut out.min_tokens,
                "stream" => &mut out.stream,
                "stream_options" => &mut out.stream_options,
                "ignore_eos" => &mut out.ignore_eos,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value::<&'de RawValue>()?);
        }
        Ok(FieldsSeed(out))
    }
}

/// Whether raw JSON is an array or an object (which is never decoded into a tree).
pub(crate) fn is_container(raw: &RawValue) -> bool {
    raw.get().starts_with(['[', '{'])
}

/// The value as pydantic's error would quote it: compact JSON, cut short when long.
pub(crate) fn quote(raw: &RawValue) -> String {
    const LIMIT: usize = 1024;
    let text = raw.get();
    if text.len() <= LIMIT {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
            return v.to_string();
        }
    }
    let mut end = LIMIT.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// FNV-1a, fed piece by piece (the prefix-cache key of a prompt).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf29ce484222325)
    }

    fn feed(&mut self, data: &[u8]) {
        for b in data {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x100000001b3);
        }
    }
}

/// What a completions `prompt` is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Prompt {
    /// One prompt: its tokens and hash.
    One { tokens: u32, hash: u64 },
    /// `[]` (or `[[]]`).
    Empty,
    /// A list the fake does not serve (several prompts, mixed items).
    Several,
    /// Neither a string nor a list; the offending value quoted.
    WrongType(String),
}

/// A completions `prompt`: a string, a list of token ids, or a one-element list of
/// either.
pub(crate) fn prompt(raw: &RawValue) -> Prompt {
    let mut d = serde_json::Deserializer::from_str(raw.get());
    match d.deserialize_any(PromptVisitor { top: true }) {
        Ok(Item::Text { tokens, hash }) => Prompt::One { tokens, hash },
        Ok(Item::Ids(ids)) if ids.count == 0 => Prompt::Empty,
        Ok(Item::Ids(ids)) if ids.all_ids => Prompt::One {
            tokens: ids.count.min(u32::MAX as u64) as u32,
            hash: ids.hash.0,
        },
        Ok(Item::Ids(_) | Item::List) => Prompt::Several,
        Ok(Item::Number | Item::Other) | Err(_) => Prompt::WrongType(quote(raw)),
        Ok(Item::Single(inner)) => match *inner {
            Item::Text { tokens, hash } => Prompt::One { tokens, hash },
            Item::Ids(ids) if ids.count == 0 => Prompt::Empty,
            Item::Ids(ids) if ids.all_ids => Prompt::One {
                tokens: ids.count.min(u32::MAX as u64) as u32,
                hash: ids.hash.0,
            },
            Item::Ids(_) | Item::List | Item::Single(_) => Prompt::Several,
            Item::Number | Item::Other => Prompt::WrongType(one_element(raw)),
        },
    }
}

/// The quoted element of a one-element list (for its type error).
fn one_element(raw: &RawValue) -> String {
    match serde_json::from_str::<[&RawValue; 1]>(raw.get()) {
        Ok([inner]) => quote(inner),
        Err(_) => quote(raw),
    }
}

/// A list seen as token ids: how many, whether all were ids, the hash of its compact
/// JSON text (`[1,2,3]`).
#[derive(Debug)]
struct Ids {
    count: u64,
    all_ids: bool,
    hash: Fnv,
}

impl fmt::Debug for Fnv {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One prompt value or list item, folded.
#[derive(Debug)]
enum Item {
    Text {
        tokens: u32,
        hash: u64,
    },
    Number,
    /// A list (of ids if `all_ids`).
    Ids(Ids),
    /// The top-level list had exactly one non-number element.
    Single(Box<Item>),
    /// A top-level list of several items that are not all ids.
    List,
    Other,
}

/// Folds a prompt (`top`) or an element of one.
struct PromptVisitor {
    top: bool,
}

impl<'de> DeserializeSeed<'de> for PromptVisitor {
    type Value = Item;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Item, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a prompt")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Item, E> {
        let mut h = Fnv::new();
        h.feed(s.as_bytes());
        Ok(Item::Text {
            tokens: count_tokens(s),
            hash: h.0,
        })
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Item, E> {
        Ok(Item::Number)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Item, E> {
        Ok(Item::Number)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Item, E> {
        Ok(Item::Number)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Item::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        let mut ids = Ids {
            count: 0,
            all_ids: true,
            hash: Fnv::new(),
        };
        ids.hash.feed(b"[");
        // At the top, the first element is looked at closely: a one-element list of a
        // prompt is that prompt. Deeper, elements only need to be ids.
        let mut first = None;
        while let Some(id) = seq.next_element_seed(IdSeed {
            keep: self.top && ids.count == 0,
        })? {
            if ids.count > 0 {
                ids.hash.feed(b",");
            }
            match id {
                Elem::Id(n) => ids.hash.feed(n.to_string().as_bytes()),
                Elem::Kept(item) => {
                    ids.all_ids = false;
                    first = Some(item);
                }
                Elem::Number | Elem::Other => ids.all_ids = false,
            }
            ids.count += 1;
        }
        ids.hash.feed(b"]");
        Ok(match first {
            Some(item) if ids.count == 1 => Item::Single(Box::new(item)),
            _ if ids.count > 1 && !ids.all_ids => Item::List,
            _ => Item::Ids(ids),
        })
    }
}

/// One list element: a token id, another number, a prompt kept whole (the first
/// element at the top), or anything else (skipped).
enum Elem {
    Id(u64),
    Number,
    Kept(Item),
    Other,
}

struct IdSeed {
    keep: bool,
}

impl<'de> DeserializeSeed<'de> for IdSeed {
    type Value = Elem;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Elem, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdSeed {
    type Value = Elem;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a token id")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Elem, E> {
        Ok(Elem::Id(n))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Elem, E> {
        Ok(Elem::Number)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Elem, E> {
        Ok(Elem::Number)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Elem, E> {
        match self.keep {
            true => PromptVisitor { top: false }.visit_str(s).map(Elem::Kept),
            false => Ok(Elem::Other),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Elem, E> {
        Ok(self.other(Item::Other))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Elem, E> {
        Ok(self.other(Item::Other))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Elem, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(self.other(Item::Other))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Elem, A::Error> {
        if self.keep {
            return PromptVisitor { top: false }.visit_seq(seq).map(Elem::Kept);
        }
        IgnoredAny.visit_seq(seq)?;
        Ok(Elem::Other)
    }
}

impl IdSeed {
    fn other(&self, item: Item) -> Elem {
        if self.keep {
            Elem::Kept(item)
        } else {
            Elem::Other
        }
    }
}

/// What chat `messages` come to under the mock template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Messages {
    Ok {
        tokens: u32,
        hash: u64,
    },
    NotAList,
    Empty,
    /// Message `i` has no string `role`.
    MissingRole(usize),
    /// Message `i` has a content part without a string `text`.
    NonTextPart(usize),
    /// A `content` that is neither null, a string nor a list: quoted.
    ContentType(String),
}

/// Chat `messages`: tokens (4 per message, words of the content, 2 for the reply
/// header) and a hash of roles and contents.
pub(crate) fn messages(raw: &RawValue) -> Messages {
    if !raw.get().starts_with('[') {
        return Messages::NotAList;
    }
    let mut d = serde_json::Deserializer::from_str(raw.get());
    match d.deserialize_seq(MessagesVisitor) {
        Ok(m) => m,
        Err(_) => Messages::NotAList,
    }
}

struct MessagesVisitor;

impl<'de> Visitor<'de> for MessagesVisitor {
    type Value = Messages;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
        let mut tokens: u64 = CHAT_TOKENS_REPLY_PRIMER as u64;
        let mut hash = Fnv::new();
        let mut failed = None;
        let mut i = 0;
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            if failed.is_some() {
                continue;
            }
            // Anything but an object is a message without a role.
            let m = in_object(raw, MessageVisitor).unwrap_or_default();
            match m.fold(i, &mut hash) {
                Ok(t) => tokens += t,
                Err(e) => failed = Some(e),
            }
            i += 1;
        }
        Ok(match failed {
            Some(e) => e,
            None if i == 0 => Messages::Empty,
            None => Messages::Ok {
                tokens: tokens.min(u32::MAX as u64) as u32,
                hash: hash.0,
            },
        })
    }
}

/// One message: its role and its content as text, other fields skipped.
#[derive(Default)]
struct Message {
    role: Option<String>,
    content: Content,
}

#[derive(Default)]
enum Content {
    #[default]
    Absent,
    Text(String),
    /// A part without a string `text`.
    NonTextPart,
    WrongType(String),
}

impl Message {
    /// Tokens of message `i`, its role and content fed to the hash.
    fn fold(self, i: usize, hash: &mut Fnv) -> Result<u64, Messages> {
        let role = self.role.ok_or(Messages::MissingRole(i))?;
        let content = match self.content {
            Content::Absent => String::new(),
            Content::Text(t) => t,
            Content::NonTextPart => return Err(Messages::NonTextPart(i)),
            Content::WrongType(q) => return Err(Messages::ContentType(q)),
        };
        hash.feed(role.as_bytes());
        hash.feed(b"\x01");
        hash.feed(content.as_bytes());
        hash.feed(b"\x02");
        let words = if content.trim().is_empty() {
            0
        } else {
            count_tokens(&content) as u64
        };
        Ok(CHAT_TOKENS_PER_MESSAGE as u64 + words)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut m = Message::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "role" => m.role = map.next_value::<&'de RawValue>().map(string_of)?,
                "content" => m.content = content_of(map.next_value::<&'de RawValue>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
}

/// A JSON string's text; `None` for anything else.
fn string_of(raw: &RawValue) -> Option<String> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<String>(raw.get()).ok()
}

/// A message `content`: null, a string, or text parts joined (each followed by a space).
fn content_of(raw: &RawValue) -> Content {
    let text = raw.get();
    if text == "null" {
        return Content::Absent;
    }
    if text.starts_with('"') {
        return string_of(raw).map_or(Content::WrongType(quote(raw)), Content::Text);
    }
    if !text.starts_with('[') {
        return Content::WrongType(quote(raw));
    }
    let mut d = serde_json::Deserializer::from_str(text);
    match d.deserialize_seq(PartsVisitor) {
        Ok(Some(joined)) => Content::Text(joined),
        Ok(None) => Content::NonTextPart,
        Err(_) => Content::WrongType(quote(raw)),
    }
}

/// Content parts, streamed: their texts joined (each followed by a space), or `None`
/// when a part has no string `text`.
struct PartsVisitor;

impl<'de> Visitor<'de> for PartsVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of content parts")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        let mut joined = Some(String::new());
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            match (&mut joined, member(raw, "text").and_then(string_of)) {
                (Some(j), Some(t)) => {
                    j.push_str(&t);
                    j.push(' ');
                }
                _ => joined = None,
            }
        }
        Ok(joined)
    }
}

/// The value of `key` in an object (the last one if repeated), other members skipped.
pub(crate) fn member<'a>(raw: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    in_object(raw, MemberVisitor(key)).flatten()
}

struct MemberVisitor<'k>(&'k str);

impl<'de> Visitor<'de> for MemberVisitor<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == self.0 {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Runs `visitor` over `raw` when it is an object; `None` for anything else.
fn in_object<'de, V: Visitor<'de>>(raw: &'de RawValue, visitor: V) -> Option<V::Value> {
    if !raw.get().starts_with('{') {
        return None;
    }
    let mut d = serde_json::Deserializer::from_str(raw.get());
    d.deserialize_map(visitor).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> &RawValue {
        serde_json::from_str(s).unwrap()
    }

    fn fnv(s: &str) -> u64 {
        let mut h = Fnv::new();
        h.feed(s.as_bytes());
        h.0
    }

    #[test]
    fn fields_skip_unknown_and_keep_the_last_duplicate() {
        let body = br#"{"junk": [{"a": 1}, [2]], "n": 1, "model": "a", "model": "b"}"#;
        let f = fields(body).unwrap();
        assert_eq!(f.model.unwrap().get(), r#""b""#);
        assert_eq!(f.n.unwrap().get(), "1");
        assert!(f.prompt.is_none());
        assert!(matches!(fields(b"[1]"), Err(BodyError::NotObject)));
        assert!(matches!(fields(b"{not json"), Err(BodyError::Json(_))));
    }

    #[test]
    fn prompts() {
        let one = |tokens, text: &str| Prompt::One {
            tokens,
            hash: fnv(text),
        };
        assert_eq!(prompt(raw(r#""hello there""#)), one(4, "hello there"));
        assert_eq!(prompt(raw(r#"["hello there"]"#)), one(4, "hello there"));
        assert_eq!(prompt(raw("[1, 2, 3]")), one(3, "[1,2,3]"));
        assert_eq!(prompt(raw("[[1, 2, 3]]")), one(3, "[1,2,3]"));
        assert_eq!(prompt(raw("[7]")), one(1, "[7]"));
        assert_eq!(prompt(raw("[]")), Prompt::Empty);
        assert_eq!(prompt(raw("[[]]")), Prompt::Empty);
        assert_eq!(prompt(raw(r#"["a", "b"]"#)), Prompt::Several);
        assert_eq!(prompt(raw("[[1], [2]]")), Prompt::Several);
        assert_eq!(prompt(raw("[1, -2]")), Prompt::Several);
        assert_eq!(prompt(raw(r#"[["a"]]"#)), Prompt::Several);
        assert_eq!(prompt(raw("5")), Prompt::WrongType("5".into()));
        assert_eq!(
            prompt(raw(r#"{"a": 1}"#)),
            Prompt::WrongType(r#"{"a":1}"#.into())
        );
        assert_eq!(prompt(raw("[null]")), Prompt::WrongType("null".into()));
    }

    #[test]
    fn chat_messages() {
        let m = messages(raw(
            r#"[{"role": "user", "content": "abcd efghi", "name": {"x": [1]}},
                {"role": "system", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null}]"#,
        ));
        let hash = fnv("user\u{1}abcd efghi\u{2}system\u{1}hi \u{2}assistant\u{1}\u{2}");
        // 2 + (4 + 3) + (4 + 1) + 4
        assert_eq!(m, Messages::Ok { tokens: 18, hash });
        assert_eq!(messages(raw("[]")), Messages::Empty);
        assert_eq!(messages(raw(r#"{"a": 1}"#)), Messages::NotAList);
        assert_eq!(
            messages(raw(r#"[{"role": "u"}, {"content": "x"}]"#)),
            Messages::MissingRole(1)
        );
        assert_eq!(
            messages(raw(r#"[{"role": "u", "content": [{"image_url": "x"}]}]"#)),
            Messages::NonTextPart(0)
        );
        assert_eq!(
            messages(raw(r#"[{"role": "u", "content": 5}]"#)),
            Messages::ContentType("5".into())
        );
    }
}
