//! Publishing `<ns>XLLM:LOADMETRICS:<name>` every interval, as the real master does so
//! that other xllm-service replicas see the load it received.
//!
//! Each round deletes the entries of instances removed since the last round, then puts
//! `{"waiting_requests_num":N,"gpu_cache_usage_perc":F}` for every instance that sent
//! new metrics. What a round could not write is kept for the next one.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::json;

use crate::pbjson::LoadMetrics;
use crate::server::AppState;

/// The key for `name`'s published load.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}XLLM:LOADMETRICS:{name}")
}

/// The value published for `m` (a float field widened to double, as C++ does).
pub fn value(m: &LoadMetrics) -> String {
    json!({
        "waiting_requests_num": m.waiting_requests_num,
        "gpu_cache_usage_perc": f64::from(m.gpu_cache_usage_perc),
    })
    .to_string()
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
    for (name, m) in updated {
        let ok = s
            .etcd
            .put(key(ns, &name).as_bytes(), value(&m).as_bytes())
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
    let failed = failed_updated.len() + failed_removed.len();
    s.events.emit(
        "loadmetrics_publish",
        json!({"put": put, "deleted": deleted, "failed": failed}),
    );
    if failed > 0 {
        tracing::warn!(
            failed,
            "LOADMETRICS publish incomplete; retrying next round"
        );
        s.registry.restore_publish(failed_updated, failed_removed);
    }
}
