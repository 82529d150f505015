//! One test per fault, plus health, startup delay, crash and restart.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mock_vllm::{Config, Fault, Health};
use serde_json::json;

async fn arm(url: &str, body: serde_json::Value) {
    let r = client()
        .post(format!("{url}/_mock/faults"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["id"].as_u64().is_some());
}

/// The exchange failed: no answer at all, or a body that breaks off.
async fn broken(r: reqwest::Result<reqwest::Response>) -> bool {
    match r {
        Err(_) => true,
        Ok(r) => r.bytes().await.is_err(),
    }
}

fn quick() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

#[tokio::test]
async fn metrics_status_then_back() {
    let s = start(Config::default()).await;
    arm(
        &s.url(),
        json!({"kind": "metrics_status", "status": 500, "count": 1}),
    )
    .await;
    let r = client()
        .get(format!("{}/metrics", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let r = client()
        .get(format!("{}/metrics", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn metrics_hang_times_out_the_client() {
    let s = start(Config::default()).await;
    s.faults().add(Fault::MetricsHang, Some(1), None);
    let err = quick()
        .get(format!("{}/metrics", s.url()))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(
        quick()
            .get(format!("{}/metrics", s.url()))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    s.stop().await;
}

#[tokio::test]
async fn metrics_slow_trickles() {
    let s = start(Config::default()).await;
    let full = scrape(&s.url()).await.len();
    // The whole page in ~4 slices of 50 ms: at least 150 ms.
    s.faults().add(
        Fault::MetricsSlow {
            bytes_per_sec: (full as u64) * 5,
        },
        Some(1),
        None,
    );
    let t = Instant::now();
    let body = client()
        .get(format!("{}/metrics", s.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    assert!(body.contains("vllm:num_requests_waiting"));
    s.stop().await;
}

#[tokio::test]
async fn metrics_truncate_clean_and_abort() {
    let s = start(Config::default()).await;
    s.faults().add(
        Fault::MetricsTruncate {
            at_bytes: 100,
            abort: false,
        },
        Some(1),
        None,
    );
    let body = client()
        .get(format!("{}/metrics", s.url()))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), 100);
    s.faults().add(
        Fault::MetricsTruncate {
            at_bytes: 100,
            abort: true,
        },
        Some(1),
        None,
    );
    let r = client().get(format!("{}/metrics", s.url())).send().await;
    assert!(broken(r).await, "an aborted body must fail to read");
    s.stop().await;
}

#[tokio::test]
async fn metrics_garbage_breaks_the_parser() {
    let s = start(Config::default()).await;
    s.faults()
        .add(Fault::MetricsGarbage { lines: 3 }, Some(1), None);
    let page = scrape(&s.url()).await;
    assert!(
        page.lines()
            .filter(|l| l.contains("not a metric")
                || l.contains("}{ 12 34")
                || l.contains("broken 1.0"))
            .count()
            == 3
    );
    if let Some(r) = python(FAMILIES_TEXT, &page) {
        assert!(r.is_err(), "prometheus_client accepted garbage");
    }
    s.stop().await;
}

#[tokio::test]
async fn metrics_nonfinite_values() {
    let s = start(Config::default()).await;
    s.faults().add(Fault::MetricsNonfinite, Some(1), None);
    let page = scrape(&s.url()).await;
    assert!(
        page.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"mock-model\"} NaN\n")
    );
    assert!(
        page.contains("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"mock-model\"} +Inf\n")
    );
    if let Some(r) = python(FAMILIES_TEXT, &page) {
        r.unwrap();
    }
    s.stop().await;
}

#[tokio::test]
async fn metrics_huge_is_big_and_valid() {
    let s = start(Config::default()).await;
    s.faults()
        .add(Fault::MetricsHuge { bytes: 1_000_000 }, Some(1), None);
    let page = scrape(&s.url()).await;
    assert!(page.len() >= 1_000_000);
    if let Some(r) = python(FAMILIES_TEXT, &page) {
        assert!(r.unwrap().contains("mock_padding gauge"));
    }
    s.stop().await;
}

#[tokio::test]
async fn metrics_stale_freezes_the_page() {
    let s = start(Config::default()).await;
    let url = s.url();
    let id = s.faults().add(Fault::MetricsStale, None, None);
    let frozen = scrape(&url).await;
    complete(&url, json!({"prompt": "a", "max_tokens": 2})).await;
    assert_eq!(scrape(&url).await, frozen);
    assert!(s.faults().remove(id));
    let fresh = scrape(&url).await;
    assert_eq!(
        sample_sum(&fresh, "vllm:generation_tokens_total"),
        Some(2.0)
    );
    s.stop().await;
}

#[tokio::test]
async fn completion_fail_fraction() {
    let s = start(Config {
        seed: 7,
        ..Config::default()
    })
    .await;
    let url = s.url();
    arm(
        &url,
        json!({"kind": "completion_fail", "fraction": 1.0, "status": 503, "count": 2}),
    )
    .await;
    for _ in 0..2 {
        let r = complete(&url, json!({"prompt": "a", "max_tokens": 1})).await;
        assert_eq!(r.status(), 503);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["code"], 503);
    }
    assert_eq!(
        complete(&url, json!({"prompt": "a", "max_tokens": 1}))
            .await
            .status(),
        200
    );
    // Half of 200: some fail, some pass (seeded).
    s.faults().add(
        Fault::CompletionFail {
            fraction: 0.5,
            status: 500,
        },
        None,
        None,
    );
    let mut failed = 0;
    for _ in 0..200 {
        if complete(&url, json!({"prompt": "a", "max_tokens": 1}))
            .await
            .status()
            == 500
        {
            failed += 1;
        }
    }
    assert!((50..150).contains(&failed), "{failed}");
    s.stop().await;
}

#[tokio::test]
async fn completion_hang_holds_a_running_slot() {
    let s = start(Config::default()).await;
    s.faults().add(Fault::CompletionHang, Some(1), None);
    let url = s.url();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "a", "max_tokens": 1}))
        .send();
    let (resp, running) = tokio::join!(r, async {
        until(Duration::from_secs(2), || async {
            s.state()["engines"][0]["running"] == 1
        })
        .await
    });
    assert!(resp.unwrap_err().is_timeout());
    assert!(running);
    assert!(
        until(Duration::from_secs(2), || async {
            s.state()["engines"][0]["running"] == 0
        })
        .await
    );
    s.stop().await;
}

#[tokio::test]
async fn completion_drop_mid_stream() {
    let s = start(Config::default()).await;
    s.faults()
        .add(Fault::CompletionDrop { after_tokens: 3 }, Some(1), None);
    let url = s.url();
    let post = |body: serde_json::Value| {
        client()
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .send()
    };
    let r =
        post(json!({"prompt": "a", "max_tokens": 10, "stream": true, "ignore_eos": true})).await;
    assert!(broken(r).await, "the stream must break");
    // Non-streaming: the body breaks too.
    s.faults()
        .add(Fault::CompletionDrop { after_tokens: 3 }, Some(1), None);
    let r = post(json!({"prompt": "a", "max_tokens": 10, "ignore_eos": true})).await;
    assert!(broken(r).await);
    let page = scrape(&s.url()).await;
    assert!(page.contains("finished_reason=\"abort\",model_name=\"mock-model\"} 2.0"));
    s.stop().await;
}

#[tokio::test]
async fn health_modes_and_startup_delay() {
    let s = start(Config {
        startup_delay: Duration::from_millis(800),
        ..Config::default()
    })
    .await;
    let url = s.url();
    let health = |c: reqwest::Client, url: String| async move {
        c.get(format!("{url}/health")).send().await
    };
    assert_eq!(health(client(), url.clone()).await.unwrap().status(), 503);
    assert_eq!(complete(&url, json!({"prompt": "a"})).await.status(), 503);
    assert!(
        until(Duration::from_secs(3), || async {
            health(client(), url.clone()).await.unwrap().status() == 200
        })
        .await
    );
    let r = client()
        .post(format!("{url}/_mock/health"))
        .json(&json!({"mode": "down"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(health(client(), url.clone()).await.unwrap().status(), 503);
    s.set_health(Health::Hang);
    assert!(health(quick(), url.clone()).await.unwrap_err().is_timeout());
    s.set_health(Health::Up);
    let r = health(client(), url.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "");
    s.stop().await;
}

#[tokio::test]
async fn crash_resets_connections_and_restart_comes_back_fresh() {
    let s = start(Config::default()).await;
    let url = s.url();
    let c = client();
    assert_eq!(
        complete(&url, json!({"prompt": "a", "max_tokens": 2}))
            .await
            .status(),
        200
    );
    // A keep-alive connection is open in `c`'s pool; after the crash it must not answer.
    assert_eq!(
        c.get(format!("{url}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    s.crash().await;
    assert!(c.get(format!("{url}/health")).send().await.is_err());
    assert!(client().get(format!("{url}/health")).send().await.is_err());
    s.restart().await.unwrap();
    assert_eq!(s.addr().to_string(), url.trim_start_matches("http://"));
    assert_eq!(
        client()
            .get(format!("{url}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let page = scrape(&url).await;
    assert_eq!(sample_sum(&page, "vllm:generation_tokens_total"), Some(0.0));
    // Through the control API, with a scheduled restart.
    let r = client()
        .post(format!("{url}/_mock/crash"))
        .json(&json!({"restart_after_ms": 100}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert!(until(Duration::from_secs(3), || async { !s.is_listening() }).await);
    assert!(
        until(Duration::from_secs(3), || async {
            client()
                .get(format!("{url}/health"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await
    );
    s.stop().await;
}

#[tokio::test]
async fn control_state_reset_and_no_control() {
    let s = start(Config::default()).await;
    let url = s.url();
    s.faults().add(Fault::MetricsHang, None, None);
    s.set_health(Health::Down);
    let st: serde_json::Value = client()
        .get(format!("{url}/_mock/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(st["health"], "down");
    assert_eq!(st["faults"][0]["kind"], "metrics_hang");
    assert_eq!(st["engines"][0]["running"], 0);
    let r = client()
        .post(format!("{url}/_mock/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(
        client()
            .get(format!("{url}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client()
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    s.stop().await;

    let s = start(Config {
        control: false,
        ..Config::default()
    })
    .await;
    let r = client()
        .get(format!("{}/_mock/state", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    s.stop().await;
}

#[tokio::test]
async fn events_report_requests_health_and_faults() {
    let ring = mock_kit::events::RingSink::new(100);
    let events = mock_kit::Events::new(
        "vllm:test",
        Some(ring.clone() as std::sync::Arc<dyn mock_kit::EventSink>),
    );
    let s = mock_vllm::start(Config::default(), events).await.unwrap();
    let url = s.url();
    complete(&url, json!({"prompt": "a", "max_tokens": 1})).await;
    s.set_health(Health::Down);
    s.faults()
        .add(Fault::MetricsStatus { status: 500 }, Some(1), None);
    let _ = client().get(format!("{url}/metrics")).send().await.unwrap();
    let got = ring.snapshot();
    let has = |kind: &str, pred: &dyn Fn(&serde_json::Value) -> bool| {
        got.iter().any(|e| e.kind == kind && pred(&e.detail))
    };
    assert!(has("request", &|d| d["path"] == "/v1/completions"
        && d["status"] == 200));
    assert!(has("request", &|d| d["path"] == "/metrics"
        && d["status"] == 500));
    assert!(has("health", &|d| d["mode"] == "down"));
    assert!(has("fault", &|d| d["fault"]["kind"] == "metrics_status"));
    assert!(got.iter().all(|e| e.source == "vllm:test"));
    s.stop().await;
}
