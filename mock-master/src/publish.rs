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

use crate::pbjson::LoadMetrics;

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
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    let usage = v.get("gpu_cache_usage_perc")?.as_f64()?;
    Some(LoadMetrics {
        waiting_requests_num: v.get("waiting_requests_num")?.as_u64()?,
        // Narrowed back to the heartbeat's float.
        gpu_cache_usage_perc: usage as f32,
    })
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
}
