//! Publishing LOADMETRICS every interval, as the real master does so that other
//! xllm-service replicas see the load it received: the timer and the etcd writes around
//! the decisions of [`crate::publish`]. What a round could not write is kept for the
//! next one.

use crate::event::MasterEvent;
use crate::state::AppState;

/// Run rounds until shutdown.
pub async fn run(s: AppState) {
    let period = crate::core::publish_period(s.config.publish_interval);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = s.shutdown.wait() => return,
            _ = ticker.tick() => {
                s.freeze.thawed().await;
                publish_once(&s).await
            }
        }
    }
}

/// One round: take what changed, plan it, write it; keep what failed for the next.
pub async fn publish_once(s: &AppState) {
    let plan = s.registry.publish_now();
    if plan.is_empty() {
        return;
    }
    let (mut failed_puts, mut failed_deletes) = (Vec::new(), Vec::new());
    let mut deleted = Vec::new();
    for (name, key) in &plan.deletes {
        let ok = s.etcd.delete(key.as_bytes()).await.is_ok();
        s.metrics.loadmetrics_write("delete", ok);
        if ok {
            deleted.push(name.clone());
        } else {
            failed_deletes.push(name.clone());
        }
    }
    let mut put = Vec::new();
    for (name, key, value, _) in &plan.puts {
        let ok = s.etcd.put(key.as_bytes(), value.as_bytes()).await.is_ok();
        s.metrics.loadmetrics_write("put", ok);
        if ok {
            put.push(name.clone());
        } else {
            failed_puts.push(name.clone());
        }
    }
    let failed = failed_puts.len() + failed_deletes.len();
    s.events.emit_event(&MasterEvent::LoadmetricsPublish {
        put: &put,
        deleted: &deleted,
        skipped: &plan.skipped,
        failed,
    });
    if failed > 0 {
        tracing::warn!(
            failed,
            "LOADMETRICS publish incomplete; retrying next round"
        );
        s.registry
            .publish_failed(&plan, &failed_puts, &failed_deletes);
    }
}
