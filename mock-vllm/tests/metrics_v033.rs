//! The 0.33 and 0.34 pages against the pages those releases' own metrics code writes
//! (`tests/fixtures/gen_vllm_pages.py` runs the wheel's `loggers.py` under
//! prometheus_client): the same `vllm:` families in the same order, with the same help
//! texts, types and samples (names and label sets, buckets included), in one process
//! and in the multiprocess layout of several data-parallel engines.

mod common;

use common::*;
use mock_vllm::{Config, Dialect};
use serde_json::json;

/// Every `vllm:` family as prometheus_client's text parser reads it: a header line
/// (name, type, help), then one line per sample (name and sorted labels, no value).
const SHAPE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    if not f.name.startswith("vllm:"):
        continue
    print("FAMILY", f.name, f.type, repr(f.documentation))
    for s in f.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print("  ", s.name, labels)
"#;

async fn page(dialect: Dialect, dp: usize) -> (String, String) {
    let server = start(Config {
        dialect,
        data_parallel: dp,
        ..Config::default()
    })
    .await;
    let url = server.url();
    // One request per engine (each goes to the least loaded).
    for _ in 0..dp {
        let r = complete(
            &url,
            json!({"prompt": "hello there world", "max_tokens": 4}),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let resp = client().get(format!("{url}/metrics")).send().await.unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let text = resp.text().await.unwrap();
    server.stop().await;
    (text, ct)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The shapes of both pages, compared family by family (so a failure names the first
/// family that differs).
fn same_families(dialect: Dialect, ours: &str, theirs: &str) {
    let Some(a) = python(SHAPE, ours) else {
        return;
    };
    let a = a.unwrap();
    let b = python(SHAPE, theirs).unwrap().unwrap();
    let split = |s: &str| -> Vec<String> {
        s.split("FAMILY ")
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (fa, fb) = (split(&a), split(&b));
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x, y, "{dialect}");
    }
    assert_eq!(fa.len(), fb.len(), "{dialect}: family count");
    assert!(fa.len() > 30, "{dialect}: {}", fa.len());
}

#[tokio::test]
async fn one_engine_pages_are_the_releases_pages() {
    for (dialect, file) in [
        (Dialect::V0_33, "vllm-0.33-metrics.txt"),
        (Dialect::V0_34, "vllm-0.34-metrics.txt"),
    ] {
        let (text, ct) = page(dialect, 1).await;
        assert_eq!(ct, "text/plain; version=1.0.0; charset=utf-8");
        same_families(dialect, &text, &fixture(file));
        assert!(text.contains("\nprocess_start_time_seconds "), "{dialect}");
        assert!(text.contains("_created{"), "{dialect}");
        assert!(!text.contains("vllm:gpu_cache_usage_perc"));
        assert!(!text.contains("vllm:time_per_output_token_seconds"));
    }
}

#[tokio::test]
async fn data_parallel_pages_use_the_multiprocess_layout() {
    for (dialect, file) in [
        (Dialect::V0_33, "vllm-0.33-multiprocess.txt"),
        (Dialect::V0_34, "vllm-0.34-multiprocess.txt"),
    ] {
        let (text, ct) = page(dialect, 2).await;
        assert_eq!(ct, "text/plain; version=1.0.0; charset=utf-8");
        same_families(dialect, &text, &fixture(file));
        assert!(!text.contains("_created"), "{dialect}");
        assert!(!text.contains("process_"), "{dialect}");
        assert!(!text.contains("python_"), "{dialect}");
        // Grouped by type: once a type's group ends it does not come back.
        let mut seen: Vec<&str> = Vec::new();
        for ty in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let ty = ty.rsplit(' ').next().unwrap();
            if seen.last() != Some(&ty) {
                assert!(!seen.contains(&ty), "{dialect}: {ty} twice");
                seen.push(ty);
            }
        }
        assert_eq!(
            seen,
            ["counter", "gauge", "histogram", "summary"],
            "{dialect}"
        );
    }
}

#[tokio::test]
async fn the_new_families_follow_the_load_model() {
    let server = start(Config {
        dialect: Dialect::V0_33,
        max_num_seqs: 1,
        max_waiting: 1,
        ..Config::default()
    })
    .await;
    let url = server.url();
    // One runs, one waits, the third finds the queue full.
    let slow = json!({"prompt": "hello there world", "max_tokens": 400, "ignore_eos": true});
    let a = tokio::spawn(complete_owned(url.clone(), slow.clone()));
    assert!(
        until(std::time::Duration::from_secs(5), || async {
            sample_sum(&scrape(&url).await, "vllm:num_requests_running") == Some(1.0)
        })
        .await
    );
    let b = tokio::spawn(complete_owned(url.clone(), slow.clone()));
    assert!(
        until(std::time::Duration::from_secs(5), || async {
            sample_sum(&scrape(&url).await, "vllm:num_requests_waiting") == Some(1.0)
        })
        .await
    );
    let refused = complete(&url, slow.clone()).await;
    assert_eq!(refused.status(), 429);
    let text = scrape(&url).await;
    let capacity = "vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"mock-model\",reason=\"capacity\"} 1.0\n";
    assert!(text.contains(capacity), "{text}");
    let rejected = "vllm:admission_rejections_total{model_name=\"mock-model\",reason=\"max_num_queued_reqs\"} 1.0\n";
    assert!(text.contains(rejected), "{text}");
    let awake = "vllm:engine_sleep_state{engine=\"0\",model_name=\"mock-model\",sleep_state=\"awake\"} 1.0\n";
    assert!(text.contains(awake), "{text}");
    for h in [a, b] {
        assert_eq!(h.await.unwrap(), 200);
    }
    let text = scrape(&url).await;
    assert_eq!(
        sample_sum(&text, "vllm:request_num_preemptions_count"),
        Some(2.0)
    );
    assert_eq!(
        sample_sum(&text, "vllm:request_prefill_kv_computed_tokens_count"),
        Some(2.0)
    );
    // Prompt tokens by source add up to the prompt tokens.
    assert_eq!(
        sample_sum(&text, "vllm:prompt_tokens_by_source_total"),
        sample_sum(&text, "vllm:prompt_tokens_total")
    );
    server.stop().await;
}

async fn complete_owned(url: String, body: serde_json::Value) -> u16 {
    complete(&url, body).await.status().as_u16()
}

#[tokio::test]
async fn every_new_page_survives_a_prometheus_client_round_trip() {
    for (dialect, dp) in [
        (Dialect::V0_33, 1),
        (Dialect::V0_33, 2),
        (Dialect::V0_34, 1),
        (Dialect::V0_34, 3),
    ] {
        let (text, _) = page(dialect, dp).await;
        let Some(out) = python(FAMILIES_TEXT, &text) else {
            return;
        };
        let out = out.unwrap_or_else(|e| panic!("{dialect} x{dp}: {e}"));
        assert!(out.contains("vllm:num_requests_waiting gauge"), "{out}");
    }
}

#[tokio::test]
async fn version_names_the_release_of_the_dialect() {
    for (dialect, version) in [
        (Dialect::V0_33, "0.33.0"),
        (Dialect::V0_34, "0.34.0"),
        (Dialect::V0_11, "0.11.0"),
    ] {
        let server = start(Config {
            dialect,
            ..Config::default()
        })
        .await;
        let v: serde_json::Value = client()
            .get(format!("{}/version", server.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v, json!({"version": version}), "{dialect}");
        server.stop().await;
    }
}
