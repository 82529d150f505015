//! What a LOADMETRICS round writes, decided without I/O: `<ns>XLLM:LOADMETRICS:<name>`
//! keys, their values, and which entries a round skips. [`crate::loadmetrics`] carries
//! the plan out against etcd.
//!
//! Each round deletes the entries of instances removed since the last round, then puts
//! `{"waiting_requests_num":N,"gpu_cache_usage_perc":F}` for every instance that sent
//! new metrics. What a round could not write is kept for the next one.
//!
//! # Non-finite usage
//!
//! Protobuf's JSON accepts `"NaN"`, `"Infinity"` and `"-Infinity"` for the `float`
//! `gpu_cache_usage_perc`, so the real master answers such a heartbeat 200 and stores
//! the value. It then writes LOADMETRICS with nlohmann::json, which dumps a non-finite
//! number as `null`; every reader of the prefix (the other xllm-service replicas,
//! `LoadMetrics::parse_from_json`) fails on that `null`, logs, and keeps the value it
//! had. This master never writes `null`: it skips the non-finite entry for that round
//! (event `loadmetrics_publish` lists it under `skipped`), which leaves every reader
//! exactly where the real master leaves it: on the last finite value, or on none.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::pbjson::LoadMetrics;
use crate::watch_message::Skip;

/// The key for `name`'s published load.
pub fn key(namespace: &str, name: &str) -> String {
    const INFIX: &str = "XLLM:LOADMETRICS:";
    let mut k = String::with_capacity(namespace.len() + INFIX.len() + name.len());
    k.push_str(namespace);
    k.push_str(INFIX);
    k.push_str(name);
    k
}

/// The instance a `<ns>XLLM:LOADMETRICS:<name>` key names (`None`: another key).
pub fn name_of<'k>(namespace: &str, key: &'k [u8]) -> Option<&'k str> {
    let rest = key.strip_prefix(namespace.as_bytes())?;
    let name = rest.strip_prefix(b"XLLM:LOADMETRICS:".as_slice())?;
    std::str::from_utf8(name).ok().filter(|n| !n.is_empty())
}

/// A published value read back (what a standby routes by); `None` when it is not an
/// object with a non-negative integer `waiting_requests_num` and a number
/// `gpu_cache_usage_perc`, as every reader of the prefix then keeps what it had.
pub fn parse_value(value: &[u8]) -> Option<LoadMetrics> {
    let read: ReadBack = serde_json::from_slice(value).ok()?;
    let usage = read.usage?.as_f64()?;
    Some(LoadMetrics {
        waiting_requests_num: read.waiting?.as_u64()?,
        // Narrowed back to the heartbeat's float.
        gpu_cache_usage_perc: usage as f32,
    })
}

/// A published value's two fields as a parsed JSON object holds them: each its last
/// occurrence, of any type. The other fields are parsed and dropped, so a text a JSON
/// parser refuses is refused, and a standby reads every value once, without building
/// the object.
#[derive(Default)]
struct ReadBack {
    usage: Option<Value>,
    waiting: Option<Value>,
}

impl<'de> Deserialize<'de> for ReadBack {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReadBack;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReadBack, A::Error> {
                let mut read = ReadBack::default();
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Usage => read.usage = Some(map.next_value()?),
                        Field::Waiting => read.waiting = Some(map.next_value()?),
                        Field::Other => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(read)
            }
        }
        d.deserialize_any(V)
    }
}

/// A published value's field name.
enum Field {
    Usage,
    Waiting,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "gpu_cache_usage_perc" => Field::Usage,
                    "waiting_requests_num" => Field::Waiting,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A published value's fields in the order a `serde_json::Value` object writes them
/// (by name): the same bytes as the `json!` object, without building the map.
#[derive(serde::Serialize)]
struct Published {
    gpu_cache_usage_perc: f64,
    waiting_requests_num: u64,
}

/// The value published for `m` (a float field widened to double, as C++ does);
/// `None` when the usage is not finite (see the module docs): never a `null`.
pub fn value(m: &LoadMetrics) -> Option<String> {
    let usage = f64::from(m.gpu_cache_usage_perc);
    if !usage.is_finite() {
        return None;
    }
    let v = Published {
        gpu_cache_usage_perc: usage,
        waiting_requests_num: m.waiting_requests_num,
    };
    // Two numbers: writing them cannot fail.
    serde_json::to_string(&v).ok()
}

/// One round's writes, each list sorted by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Entries of removed instances: (name, key).
    pub deletes: Vec<(String, String)>,
    /// New load: (name, key, value, the metrics, to be put back if the write fails).
    pub puts: Vec<(String, String, String, LoadMetrics)>,
    /// Names whose load is not finite: not written this round (see the module docs).
    pub skipped: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.puts.is_empty() && self.skipped.is_empty()
    }
}

/// The round for what [`crate::instances::Instances::take_publish`] handed over.
pub fn plan(
    namespace: &str,
    updated: HashMap<String, LoadMetrics>,
    removed: HashSet<String>,
) -> Plan {
    let mut deletes: Vec<(String, String)> = removed
        .into_iter()
        .map(|name| {
            let k = key(namespace, &name);
            (name, k)
        })
        .collect();
    deletes.sort();
    let mut updated: Vec<(String, LoadMetrics)> = updated.into_iter().collect();
    updated.sort_by(|a, b| a.0.cmp(&b.0));
    let mut plan = Plan {
        deletes,
        ..Plan::default()
    };
    for (name, m) in updated {
        match value(&m) {
            Some(v) => {
                let k = key(namespace, &name);
                plan.puts.push((name, k, v, m));
            }
            None => plan.skipped.push(name),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_numbers_and_non_finite_is_not_published() {
        let m = |u: f32| LoadMetrics {
            waiting_requests_num: 3,
            gpu_cache_usage_perc: u,
        };
        let text = value(&m(0.1)).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        // 0.1f32 widened to double, as the C++ master writes it.
        assert_eq!(
            v,
            json!({"waiting_requests_num": 3, "gpu_cache_usage_perc": 0.10000000149011612})
        );
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(value(&m(bad)), None);
        }
    }

    #[test]
    fn values_are_the_bytes_of_the_json_object() {
        let mut x: f32 = 1.0e-9;
        let mut n = 0u64;
        while x < 1e30 {
            for u in [x, -x, x.round(), 0.0, -0.0, 0.1, 1.0] {
                let m = LoadMetrics {
                    waiting_requests_num: n,
                    gpu_cache_usage_perc: u,
                };
                let want = json!({
                    "waiting_requests_num": m.waiting_requests_num,
                    "gpu_cache_usage_perc": f64::from(u),
                })
                .to_string();
                assert_eq!(value(&m), Some(want));
            }
            x *= 1.7;
            n = n.wrapping_mul(31).wrapping_add(7) ^ (n >> 3);
        }
        assert_eq!(key("/ns/", "i0"), format!("/ns/XLLM:LOADMETRICS:i0"));
    }

    #[test]
    fn published_values_and_keys_read_back() {
        let m = LoadMetrics {
            waiting_requests_num: 7,
            gpu_cache_usage_perc: 0.25,
        };
        let text = value(&m).unwrap_or_default();
        assert_eq!(parse_value(text.as_bytes()), Some(m));
        assert_eq!(
            parse_value(br#"{"waiting_requests_num":-1,"gpu_cache_usage_perc":0}"#),
            None
        );
        assert_eq!(
            parse_value(br#"{"waiting_requests_num":1,"gpu_cache_usage_perc":null}"#),
            None
        );
        assert_eq!(parse_value(b"{"), None);
        assert_eq!(name_of("/ns/", key("/ns/", "h:1").as_bytes()), Some("h:1"));
        assert_eq!(name_of("/ns/", b"/ns/XLLM:LOADMETRICS:"), None);
        assert_eq!(name_of("/ns/", b"/ns/XLLM:DEFAULT:h:1"), None);
        assert_eq!(name_of("", b"/ns/XLLM:LOADMETRICS:h:1"), None);
    }

    #[test]
    fn a_round_deletes_puts_and_skips_in_name_order() {
        let m = |u: f32| LoadMetrics {
            waiting_requests_num: 1,
            gpu_cache_usage_perc: u,
        };
        let updated = HashMap::from([
            ("b".to_string(), m(0.5)),
            ("a".to_string(), m(0.25)),
            ("c".to_string(), m(f32::NAN)),
        ]);
        let removed = HashSet::from(["z".to_string(), "y".to_string()]);
        let p = plan("/ns/", updated, removed);
        assert_eq!(
            p.deletes,
            [
                ("y".to_string(), "/ns/XLLM:LOADMETRICS:y".to_string()),
                ("z".to_string(), "/ns/XLLM:LOADMETRICS:z".to_string())
            ]
        );
        let puts: Vec<(&str, &str)> = p
            .puts
            .iter()
            .map(|(n, k, _, _)| (n.as_str(), k.as_str()))
            .collect();
        assert_eq!(
            puts,
            [
                ("a", "/ns/XLLM:LOADMETRICS:a"),
                ("b", "/ns/XLLM:LOADMETRICS:b")
            ]
        );
        assert_eq!(p.skipped, ["c"]);
        assert!(plan("", HashMap::new(), HashSet::new()).is_empty());
    }

    /// The reading through a parsed tree, the oracle [`parse_value`] is held to.
    fn through_tree(value: &[u8]) -> Option<LoadMetrics> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        let usage = v.get("gpu_cache_usage_perc")?.as_f64()?;
        Some(LoadMetrics {
            waiting_requests_num: v.get("waiting_requests_num")?.as_u64()?,
            gpu_cache_usage_perc: usage as f32,
        })
    }

    /// Objects with the two fields (and others) of any type, the same key twice, nested
    /// values, escapes; and text that is no JSON.
    fn published_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let names = prop_oneof![
            3 => Just("\"waiting_requests_num\""),
            2 => Just("\"gpu_cache_usage_perc\""),
            1 => Just("\"gpu_cache_usage_\\u0070erc\""),
            1 => Just("\"x\""),
        ];
        let leaf = prop_oneof![
            8 => (0u64..5).prop_map(|n| n.to_string()),
            4 => (-1e6f64..1e6).prop_map(|x| format!("{x:?}")),
            1 => any::<f64>().prop_map(|x| format!("{x:?}")),
            1 => any::<u64>().prop_map(|n| n.to_string()),
            1 => any::<i64>().prop_map(|n| n.to_string()),
            1 => Just("null".to_string()),
            1 => any::<bool>().prop_map(|b| b.to_string()),
            1 => Just("1e400".to_string()),
            1 => Just("2.0".to_string()),
            1 => Just("\"7\"".to_string()),
            1 => Just("\"\\ud800\"".to_string()),
            1 => Just("{".to_string()),
        ];
        let array =
            prop::collection::vec(leaf.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(",")));
        let value = prop_oneof![6 => leaf, 1 => array];
        prop::collection::vec((names, value), 0..5).prop_map(|kv| {
            let fields: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("{{{}}}", fields.join(","))
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Any text reads as the tree reading reads it.
        #[test]
        fn values_read_back_as_the_tree_reads_them(text in published_text()) {
            proptest::prop_assert_eq!(parse_value(text.as_bytes()), through_tree(text.as_bytes()));
        }
    }

    #[test]
    fn a_value_read_back_takes_the_last_of_a_field_named_twice() {
        let text =
            br#"{"waiting_requests_num":"x","gpu_cache_usage_perc":1,"waiting_requests_num":4}"#;
        let read = parse_value(text);
        assert_eq!(read, through_tree(text));
        assert_eq!(read.map(|m| m.waiting_requests_num), Some(4));
        for not_json in [
            &b"[1]"[..],
            b"5",
            br#"{"x": 1e400, "waiting_requests_num": 1, "gpu_cache_usage_perc": 0}"#,
        ] {
            assert_eq!(parse_value(not_json), None);
        }
    }
}
