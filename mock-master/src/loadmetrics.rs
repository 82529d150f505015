//! Publishing `<ns>XLLM:LOADMETRICS:<name>` every interval, as the real master does so
//! that other xllm-service replicas see the load it received.
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
use std::time::Duration;

use serde_json::json;

use crate::pbjson::LoadMetrics;
use crate::state::AppState;

/// The key for `name`'s published load.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}XLLM:LOADMETRICS:{name}")
}

/// The value published for `m` (a float field widened to double, as C++ does);
/// `None` when the usage is not finite (see the module docs): never a `null`.
pub fn value(m: &LoadMetrics) -> Option<String> {
    let usage = f64::from(m.gpu_cache_usage_perc);
    usage.is_finite().then(|| {
        json!({
            "waiting_requests_num": m.waiting_requests_num,
            "gpu_cache_usage_perc": usage,
        })
        .to_string()
    })
}

/// Run rounds until shutdown.
pub async fn run(s: AppState) {
    let period = s.config.publish_interval.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = s.shutdown.wait() => return,
            _ = ticker.tick() => publish_once(&s).await,
        }
    }
}

/// One round.
pub async fn publish_once(s: &AppState) {
    let (updated, removed) = s.registry.take_publish();
    if updated.is_empty() && removed.is_empty() {
        return;
    }
    let ns = &s.config.etcd_namespace;
    let mut failed_removed = HashSet::new();
    let mut deleted = Vec::new();
    for name in removed {
        let ok = s.etcd.delete(key(ns, &name).as_bytes()).await.is_ok();
        s.metrics.loadmetrics_write("delete", ok);
        if ok {
            deleted.push(name);
        } else {
            failed_removed.insert(name);
        }
    }
    let mut failed_updated = HashMap::new();
    let mut put = Vec::new();
    let mut skipped = Vec::new();
    for (name, m) in updated {
        let Some(text) = value(&m) else {
            skipped.push(name);
            continue;
        };
        let ok = s
            .etcd
            .put(key(ns, &name).as_bytes(), text.as_bytes())
            .await
            .is_ok();
        s.metrics.loadmetrics_write("put", ok);
        if ok {
            put.push(name);
        } else {
            failed_updated.insert(name, m);
        }
    }
    put.sort();
    deleted.sort();
    skipped.sort();
    let failed = failed_updated.len() + failed_removed.len();
    s.events.emit(
        "loadmetrics_publish",
        json!({"put": put, "deleted": deleted, "skipped": skipped, "failed": failed}),
    );
    if failed > 0 {
        tracing::warn!(
            failed,
            "LOADMETRICS publish incomplete; retrying next round"
        );
        s.registry.restore_publish(failed_updated, failed_removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
