//! Reading an action: its one key picks the family, the family's own enum reads the rest.
//!
//! The TOML writes every action the same way, `action = { vllm_crash = "i0" }`, whatever
//! its family. Two small pieces of serde plumbing let [`super::Action`] keep that syntax
//! (and serde's "unknown variant, expected one of ..." listing every action) while each
//! family owns its enum: [`keys`] asks serde which keys an enum accepts, and [`rest`]
//! hands a family the entry whose key was already read.

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;

/// The keys (variant names) an externally tagged enum accepts, as serde names them.
pub fn keys<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut out: &'static [&'static str] = &[];
    // The probe only records what the enum asks for, then fails: nothing is read.
    let _ = T::deserialize(Probe(&mut out));
    out
}

struct Probe<'a>(&'a mut &'static [&'static str]);

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not an enum"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = variants;
        Err(de::Error::custom("probed"))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

/// A deserializer of the one-entry map `{ key = <the map's next value> }`: the entry
/// whose key the caller has already read, for an externally tagged enum to read.
pub fn rest<'de, M: MapAccess<'de>>(
    key: String,
    map: &mut M,
) -> MapAccessDeserializer<Rest<'_, M>> {
    MapAccessDeserializer::new(Rest {
        key: Some(key),
        map,
    })
}

pub struct Rest<'a, M> {
    key: Option<String>,
    map: &'a mut M,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for Rest<'_, M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, M::Error> {
        let key = self.key.take();
        let key = key.map(IntoDeserializer::<M::Error>::into_deserializer);
        key.map(|k| seed.deserialize(k)).transpose()
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, M::Error> {
        self.map.next_value_seed(seed)
    }
}
