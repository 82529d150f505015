//! The heartbeat body, decoded with protobuf's JSON rules.
//!
//! The real master parses `HeartbeatRequest` with protobuf's JSON parser, so this one
//! must accept and reject the same bodies: field names in snake_case or lowerCamelCase
//! (the same field twice, under either spelling, is an error), 64-bit integers as JSON
//! numbers or decimal strings (integral values only, in range), floats as numbers,
//! numeric strings or `"NaN"`/`"Infinity"`/`"-Infinity"`, `null` meaning "absent",
//! unknown fields ignored, any other type an error. Decoding is a streaming serde
//! visitor (no intermediate `Value`), which keeps heartbeats cheap.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// `LoadMetrics { uint64 waiting_requests_num = 1; float gpu_cache_usage_perc = 2; }`
///
/// Shown (state views, events) the way protobuf's JSON writes a float: a number, or
/// `"NaN"` / `"Infinity"` / `"-Infinity"`, never `null`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LoadMetrics {
    pub waiting_requests_num: u64,
    #[serde(serialize_with = "pb_float", deserialize_with = "pb_float_de")]
    pub gpu_cache_usage_perc: f32,
}

/// A `float` as protobuf's JSON writes it: non-finite values as their names.
pub fn float_json(v: f32) -> serde_json::Value {
    match non_finite_name(v) {
        Some(name) => serde_json::Value::from(name),
        None => serde_json::Value::from(v),
    }
}

/// `"NaN"`, `"Infinity"` or `"-Infinity"`; `None` for a finite value.
fn non_finite_name(v: f32) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v.is_infinite() {
        Some(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        None
    }
}

fn pb_float<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    match non_finite_name(*v) {
        Some(name) => s.serialize_str(name),
        None => s.serialize_f32(*v),
    }
}

fn pb_float_de<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    PbF32::deserialize(d).map(|f| f.0)
}

/// `LatencyMetrics { int64 recent_max_ttft = 1; int64 recent_max_tbt = 2; }` (ms)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LatencyMetrics {
    pub recent_max_ttft: i64,
    pub recent_max_tbt: i64,
}

/// `HeartbeatRequest`; `cache_event` is checked to be an object (or null) and dropped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeartbeatRequest {
    pub name: String,
    pub incarnation_id: String,
    pub load_metrics: LoadMetrics,
    pub latency_metrics: LatencyMetrics,
}

impl HeartbeatRequest {
    /// Decode a body; `Err` means "invalid heartbeat json" (400).
    pub fn from_json(body: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// [`HeartbeatRequest::from_json`] of text: the same result for the same bytes.
    pub fn from_json_str(body: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(body)
    }
}

/// Marks each field seen once; a second sighting (either spelling) is an error.
fn once<E: de::Error>(seen: &mut u8, bit: u8, field: &'static str) -> Result<(), E> {
    if *seen & bit != 0 {
        return Err(E::custom(format_args!("field {field} given twice")));
    }
    *seen |= bit;
    Ok(())
}

impl<'de> Deserialize<'de> for HeartbeatRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HeartbeatRequest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a HeartbeatRequest object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = HeartbeatRequest::default();
                let mut seen = 0u8;
                while let Some(key) = map.next_key::<Key>()? {
                    match key.0.as_ref() {
                        "name" => {
                            once(&mut seen, 1, "name")?;
                            out.name = map.next_value::<PbString>()?.0;
                        }
                        "incarnation_id" | "incarnationId" => {
                            once(&mut seen, 2, "incarnation_id")?;
                            out.incarnation_id = map.next_value::<PbString>()?.0;
                        }
                        "load_metrics" | "loadMetrics" => {
                            once(&mut seen, 4, "load_metrics")?;
                            out.load_metrics = map
                                .next_value::<PbMessage<LoadMetrics>>()?
                                .0
                                .unwrap_or_default();
                        }
                        "latency_metrics" | "latencyMetrics" => {
                            once(&mut seen, 8, "latency_metrics")?;
                            out.latency_metrics = map
                                .next_value::<PbMessage<LatencyMetrics>>()?
                                .0
                                .unwrap_or_default();
                        }
                        "cache_event" | "cacheEvent" => {
                            once(&mut seen, 16, "cache_event")?;
                            map.next_value::<AnyObject>()?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON object key, borrowed when the input allows it.
struct Key<'a>(std::borrow::Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A message-typed field: an object, or null (absent).
struct PbMessage<T>(Option<T>);

/// Decoding of the two small messages, field by field.
trait PbFields: Default {
    /// Consume the value of `key`; unknown keys are skipped.
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        seen: &mut u8,
        map: &mut A,
    ) -> Result<(), A::Error>;
}

impl PbFields for LoadMetrics {
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        seen: &mut u8,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "waiting_requests_num" | "waitingRequestsNum" => {
                once(seen, 1, "waiting_requests_num")?;
                self.waiting_requests_num = map.next_value::<PbU64>()?.0;
            }
            "gpu_cache_usage_perc" | "gpuCacheUsagePerc" => {
                once(seen, 2, "gpu_cache_usage_perc")?;
                self.gpu_cache_usage_perc = map.next_value::<PbF32>()?.0;
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl PbFields for LatencyMetrics {
    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        seen: &mut u8,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "recent_max_ttft" | "recentMaxTtft" => {
                once(seen, 1, "recent_max_ttft")?;
                self.recent_max_ttft = map.next_value::<PbI64>()?.0;
            }
            "recent_max_tbt" | "recentMaxTbt" => {
                once(seen, 2, "recent_max_tbt")?;
                self.recent_max_tbt = map.next_value::<PbI64>()?.0;
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl<'de, T: PbFields> Deserialize<'de> for PbMessage<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: PbFields> Visitor<'de> for V<T> {
            type Value = PbMessage<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PbMessage(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = T::default();
                let mut seen = 0u8;
                while let Some(key) = map.next_key::<Key>()? {
                    out.field(&key.0, &mut seen, &mut map)?;
                }
                Ok(PbMessage(Some(out)))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A message whose contents the master does not need here (`KvCacheEvent`).
struct AnyObject;

impl<'de> Deserialize<'de> for AnyObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(AnyObject)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(AnyObject)
            }
        }
        d.deserialize_any(V)
    }
}

/// A `string` field: a JSON string, or null ("").
struct PbString(String);

impl<'de> Deserialize<'de> for PbString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PbString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PbString(String::new()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(PbString(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(PbString(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Is `s` written like a JSON number (so `"inf"`, `" 1"`, `"0x10"` and `"+1"` are not)?
fn looks_numeric(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    digits.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
}

/// 2^64 and 2^63 as f64: the first values out of range.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// An integral float in `[lo, hi)`.
fn integral(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v.fract() == 0.0 && v >= lo && v < hi
}

/// A `uint64` field.
struct PbU64(u64);

impl<'de> Deserialize<'de> for PbU64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PbU64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an unsigned 64-bit integer (number or string)")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PbU64(0))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(PbU64(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(PbU64)
                    .map_err(|_| E::custom("negative uint64"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                if integral(v, 0.0, TWO_POW_64) {
                    Ok(PbU64(v as u64))
                } else {
                    Err(E::custom("uint64 out of range or not an integer"))
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                if !looks_numeric(s) {
                    return Err(E::custom("uint64 string is not a number"));
                }
                if let Ok(v) = s.parse::<u64>() {
                    return Ok(PbU64(v));
                }
                let f: f64 = s
                    .parse()
                    .map_err(|_| E::custom("uint64 string is not a number"))?;
                self.visit_f64(f)
            }
        }
        d.deserialize_any(V)
    }
}

/// An `int64` field.
struct PbI64(i64);

impl<'de> Deserialize<'de> for PbI64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PbI64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a signed 64-bit integer (number or string)")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PbI64(0))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(PbI64)
                    .map_err(|_| E::custom("int64 out of range"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(PbI64(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                if integral(v, -TWO_POW_63, TWO_POW_63) {
                    Ok(PbI64(v as i64))
                } else {
                    Err(E::custom("int64 out of range or not an integer"))
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                if !looks_numeric(s) {
                    return Err(E::custom("int64 string is not a number"));
                }
                if let Ok(v) = s.parse::<i64>() {
                    return Ok(PbI64(v));
                }
                let f: f64 = s
                    .parse()
                    .map_err(|_| E::custom("int64 string is not a number"))?;
                self.visit_f64(f)
            }
        }
        d.deserialize_any(V)
    }
}

/// A `float` field.
struct PbF32(f32);

fn to_f32<E: de::Error>(v: f64) -> Result<PbF32, E> {
    if v.is_finite() && v.abs() > f32::MAX as f64 {
        return Err(E::custom("float out of range"));
    }
    Ok(PbF32(v as f32))
}

impl<'de> Deserialize<'de> for PbF32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PbF32;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a float (number, numeric string, \"NaN\", \"Infinity\" or \"-Infinity\")",
                )
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PbF32(0.0))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                to_f32(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                to_f32(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                to_f32(v)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                match s {
                    "NaN" => Ok(PbF32(f32::NAN)),
                    "Infinity" => Ok(PbF32(f32::INFINITY)),
                    "-Infinity" => Ok(PbF32(f32::NEG_INFINITY)),
                    _ if looks_numeric(s) => {
                        let v: f64 = s
                            .parse()
                            .map_err(|_| E::custom("float string is not a number"))?;
                        to_f32(v)
                    }
                    _ => Err(E::custom("float string is not a number")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<HeartbeatRequest, serde_json::Error> {
        HeartbeatRequest::from_json(s.as_bytes())
    }

    #[test]
    fn snake_and_camel_case() {
        let a = parse(r#"{"name":"n","incarnation_id":"i","load_metrics":{"waiting_requests_num":3,"gpu_cache_usage_perc":0.5},"latency_metrics":{"recent_max_ttft":7,"recent_max_tbt":8}}"#).unwrap();
        let b = parse(r#"{"name":"n","incarnationId":"i","loadMetrics":{"waitingRequestsNum":"3","gpuCacheUsagePerc":"0.5"},"latencyMetrics":{"recentMaxTtft":"7","recentMaxTbt":8}}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.load_metrics.waiting_requests_num, 3);
        assert_eq!(a.latency_metrics.recent_max_tbt, 8);
    }

    #[test]
    fn absent_and_null_are_zero_unknown_ignored() {
        let r = parse(r#"{"name":"n","load_metrics":null,"extra":{"deep":[1,2]},"cache_event":{"stored_cache":["x"]}}"#).unwrap();
        assert_eq!(r.incarnation_id, "");
        assert_eq!(r.load_metrics, LoadMetrics::default());
        assert_eq!(parse("{}").unwrap(), HeartbeatRequest::default());
    }

    #[test]
    fn integers_big_and_exponent() {
        let r = parse(r#"{"load_metrics":{"waiting_requests_num":"18446744073709551615"},"latency_metrics":{"recent_max_ttft":1e3,"recent_max_tbt":"-5"}}"#).unwrap();
        assert_eq!(r.load_metrics.waiting_requests_num, u64::MAX);
        assert_eq!(r.latency_metrics.recent_max_ttft, 1000);
        assert_eq!(r.latency_metrics.recent_max_tbt, -5);
    }

    #[test]
    fn floats_special_strings() {
        let r = parse(r#"{"load_metrics":{"gpu_cache_usage_perc":"NaN"}}"#).unwrap();
        assert!(r.load_metrics.gpu_cache_usage_perc.is_nan());
        let r = parse(r#"{"load_metrics":{"gpu_cache_usage_perc":"-Infinity"}}"#).unwrap();
        assert_eq!(r.load_metrics.gpu_cache_usage_perc, f32::NEG_INFINITY);
        let r = parse(r#"{"load_metrics":{"gpu_cache_usage_perc":1.23e-4}}"#).unwrap();
        assert!((r.load_metrics.gpu_cache_usage_perc - 0.000123).abs() < 1e-9);
    }

    #[test]
    fn views_write_non_finite_floats_by_name_never_null() {
        for (v, shown) in [
            (f32::NAN, r#""NaN""#),
            (f32::INFINITY, r#""Infinity""#),
            (f32::NEG_INFINITY, r#""-Infinity""#),
            (0.25, "0.25"),
        ] {
            let m = LoadMetrics {
                waiting_requests_num: 1,
                gpu_cache_usage_perc: v,
            };
            let text = serde_json::to_string(&m).unwrap();
            assert_eq!(
                text,
                format!(r#"{{"waiting_requests_num":1,"gpu_cache_usage_perc":{shown}}}"#)
            );
            assert_eq!(float_json(v).to_string(), shown);
            let back: LoadMetrics = serde_json::from_str(&text).unwrap();
            assert_eq!(back.gpu_cache_usage_perc.to_bits(), v.to_bits());
        }
    }

    #[test]
    fn wrong_types_are_rejected() {
        for bad in [
            r#"[]"#,
            r#"null"#,
            r#""x""#,
            r#"{"name":5}"#,
            r#"{"name":true}"#,
            r#"{"incarnation_id":["a"]}"#,
            r#"{"load_metrics":5}"#,
            r#"{"load_metrics":{"waiting_requests_num":-1}}"#,
            r#"{"load_metrics":{"waiting_requests_num":1.5}}"#,
            r#"{"load_metrics":{"waiting_requests_num":"abc"}}"#,
            r#"{"load_metrics":{"waiting_requests_num":true}}"#,
            r#"{"load_metrics":{"waiting_requests_num":18446744073709551616}}"#,
            r#"{"load_metrics":{"gpu_cache_usage_perc":"inf"}}"#,
            r#"{"load_metrics":{"gpu_cache_usage_perc":1e39}}"#,
            r#"{"load_metrics":{"gpu_cache_usage_perc":{}}}"#,
            r#"{"latency_metrics":{"recent_max_ttft":"9223372036854775808"}}"#,
            r#"{"cache_event":7}"#,
            r#"{"name":"a","name":"b"}"#,
            r#"{"incarnation_id":"a","incarnationId":"b"}"#,
            r#"{"name":"a""#,
            r#"{"name":"a"} x"#,
            "",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Render `v` as a JSON number or as a string, as protobuf's JSON allows.
        fn either(v: String, as_string: bool) -> String {
            if as_string {
                format!("\"{v}\"")
            } else {
                v
            }
        }

        proptest! {
            #[test]
            fn any_encoding_of_the_same_values_decodes_the_same(
                waiting in any::<u64>(),
                usage in -1.0e30f32..1.0e30f32,
                ttft in any::<i64>(),
                tbt in any::<i64>(),
                camel in any::<bool>(),
                strings in any::<[bool; 4]>(),
            ) {
                let (lm, w, g, lat, t1, t2, inc) = if camel {
                    ("loadMetrics", "waitingRequestsNum", "gpuCacheUsagePerc", "latencyMetrics", "recentMaxTtft", "recentMaxTbt", "incarnationId")
                } else {
                    ("load_metrics", "waiting_requests_num", "gpu_cache_usage_perc", "latency_metrics", "recent_max_ttft", "recent_max_tbt", "incarnation_id")
                };
                let body = format!(
                    r#"{{"name":"n","{inc}":"i","{lm}":{{"{w}":{},"{g}":{}}},"{lat}":{{"{t1}":{},"{t2}":{}}}}}"#,
                    either(waiting.to_string(), strings[0]),
                    either(format!("{usage:e}"), strings[1]),
                    either(ttft.to_string(), strings[2]),
                    either(tbt.to_string(), strings[3]),
                );
                let r = HeartbeatRequest::from_json(body.as_bytes()).unwrap();
                prop_assert_eq!(r.incarnation_id.as_str(), "i");
                prop_assert_eq!(r.load_metrics.waiting_requests_num, waiting);
                // As protobuf does: the decimal text to double, then to float.
                let expected = format!("{usage:e}").parse::<f64>().unwrap() as f32;
                prop_assert_eq!(r.load_metrics.gpu_cache_usage_perc, expected);
                prop_assert_eq!(r.latency_metrics.recent_max_ttft, ttft);
                prop_assert_eq!(r.latency_metrics.recent_max_tbt, tbt);
            }

            #[test]
            fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
                let _ = HeartbeatRequest::from_json(&body);
            }
        }
    }
}
