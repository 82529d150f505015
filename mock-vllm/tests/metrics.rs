//! Every dialect parses with the real prometheus_client, v0.10 has the families of the
//! real page, and the numbers follow what happened.

mod common;

use std::time::Duration;

use common::*;
use mock_vllm::{Config, Dialect, Waveform};
use serde_json::json;

async fn page_after_traffic(dialect: Dialect, dp: usize) -> (String, String) {
    let server = start(Config {
        dialect,
        data_parallel: dp,
        ..Config::default()
    })
    .await;
    let url = server.url();
    for max in [3, 5] {
        let r = complete(
            &url,
            json!({"prompt": "hello there world", "max_tokens": max}),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let resp = client().get(format!("{url}/metrics")).send().await.unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let page = resp.text().await.unwrap();
    server.stop().await;
    (page, ct)
}

#[tokio::test]
async fn v0_10_has_the_families_of_the_real_page() {
    let (page, ct) = page_after_traffic(Dialect::V0_10, 1).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    // The real page, kept in the repository beside the sidecar's parser fixtures.
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sidecar/fixtures/vllm-0.10-metrics.txt"
    ))
    .expect("fixture page");
    let Some(ours) = python(FAMILIES_TEXT, &page) else {
        return;
    };
    let theirs = python(FAMILIES_TEXT, &fixture).unwrap().unwrap();
    assert_eq!(ours.unwrap(), theirs);
    // Same bucket boundaries as the real page for the series the sidecar reads.
    for prefix in [
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
    ] {
        let les = |p: &str| -> Vec<String> {
            p.lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| {
                    l.split("le=\"")
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let ours = les(&page);
        assert!(!ours.is_empty(), "{prefix}");
        let fixture_les = les(&fixture);
        if !fixture_les.is_empty() {
            assert_eq!(ours, fixture_les, "{prefix}");
        }
    }
    assert_eq!(sample_sum(&page, "vllm:request_success_total"), Some(2.0));
    assert_eq!(
        sample_sum(&page, "vllm:time_to_first_token_seconds_count"),
        Some(2.0)
    );
    // Each request's first token comes with prefill; the rest are decode steps.
    assert_eq!(sample_sum(&page, "vllm:generation_tokens_total"), Some(8.0));
    assert_eq!(
        sample_sum(&page, "vllm:time_per_output_token_seconds_count"),
        Some(6.0)
    );
    // "hello there world": three 5-letter words, 2 tokens each.
    assert_eq!(sample_sum(&page, "vllm:prompt_tokens_total"), Some(12.0));
    assert!(
        page.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"mock-model\"} 0.0\n")
    );
    assert!(page.contains("# TYPE vllm:request_success_created gauge\n"));
}

#[tokio::test]
async fn v0_parses_and_has_no_engine_label_nor_created() {
    let (page, _) = page_after_traffic(Dialect::V0, 1).await;
    assert!(!page.contains("engine=\""));
    assert!(!page.contains("_created"));
    assert!(page.contains("vllm:gpu_cache_usage_perc{model_name=\"mock-model\"} 0.0\n"));
    assert!(page.contains("# TYPE vllm:time_per_output_token_seconds histogram\n"));
    assert!(!page.contains("vllm:kv_cache_usage_perc"));
    let Some(out) = python(FAMILIES_TEXT, &page) else {
        return;
    };
    let out = out.unwrap();
    assert!(out.contains("vllm:num_requests_swapped gauge"));
}

#[tokio::test]
async fn v0_11_renames_and_hides_the_old_kv_name() {
    let (page, _) = page_after_traffic(Dialect::V0_11, 2).await;
    // 0.11.0 hides the old KV families behind --show-hidden-metrics-for-version.
    for gone in ["vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache"] {
        assert!(!page.contains(gone), "{gone}");
    }
    for present in [
        "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"mock-model\"}",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        "# TYPE vllm:request_time_per_output_token_seconds histogram",
        // Still emitted by default in 0.11.0, marked deprecated.
        "# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.\n",
        "# TYPE vllm:time_per_output_token_seconds histogram",
        // 0.11's CacheConfig fields.
        "kv_cache_memory_bytes=\"None\"",
        "prefix_caching_hash_algo=\"sha256\"",
    ] {
        assert!(page.contains(present), "{present}");
    }
    // Two engines, requests balanced across both.
    assert_eq!(
        sample_sum(&page, "vllm:e2e_request_latency_seconds_count"),
        Some(2.0)
    );
    let Some(out) = python(FAMILIES_TEXT, &page) else {
        return;
    };
    assert!(out
        .unwrap()
        .contains("vllm:inter_token_latency_seconds histogram"));
}

#[tokio::test]
async fn openmetrics_passes_the_strict_parser() {
    let (page, ct) = page_after_traffic(Dialect::OpenMetrics, 1).await;
    assert_eq!(
        ct,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(page.ends_with("# EOF\n"));
    let Some(out) = python(FAMILIES_OPENMETRICS, &page) else {
        return;
    };
    let out = out.unwrap_or_else(|e| panic!("openmetrics parser rejected the page: {e}"));
    assert!(out.contains("vllm:num_requests_waiting gauge"));
    assert!(out.contains("vllm:request_success counter"));
    assert!(out.contains("vllm:time_to_first_token_seconds histogram"));
    // The whole v0.11 registry, as prometheus_client's OpenMetrics writer has it.
    for family in [
        "process_cpu_seconds counter",
        "process_resident_memory_bytes gauge",
        "python_gc_collections counter",
        "http_requests counter",
        "http_request_duration_seconds histogram",
    ] {
        assert!(out.contains(family), "{family}");
    }
    let (text_page, _) = page_after_traffic(Dialect::V0_11, 1).await;
    let text_families = python(FAMILIES_TEXT, &text_page).unwrap().unwrap();
    let without_created: Vec<&str> = text_families
        .lines()
        .filter(|l| !l.contains("_created "))
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), without_created);
    // `_created` right after each child's own samples, counts written as floats.
    assert!(page
        .contains("vllm:time_to_first_token_seconds_sum{engine=\"0\",model_name=\"mock-model\"} "));
    let lines: Vec<&str> = page.lines().collect();
    let sum_at = lines
        .iter()
        .position(|l| l.starts_with("vllm:time_to_first_token_seconds_sum{"))
        .unwrap();
    assert!(lines[sum_at + 1].starts_with("vllm:time_to_first_token_seconds_created{engine=\"0\""));
    assert!(page.contains("vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"mock-model\"} 2.0\n"));
    assert!(page.contains(
        "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"mock-model\"} 2.0\n"
    ));
}

/// Each page is what prometheus_client itself would write: parsed and written back by
/// the real library (its parser and writer of that format), it comes back unchanged.
#[tokio::test]
async fn pages_survive_a_prometheus_client_round_trip() {
    for (dialect, script) in [
        (Dialect::V0, ROUNDTRIP_TEXT),
        (Dialect::V0_10, ROUNDTRIP_TEXT),
        (Dialect::V0_11, ROUNDTRIP_TEXT),
        (Dialect::V0_33, ROUNDTRIP_TEXT),
        (Dialect::V0_34, ROUNDTRIP_TEXT),
        (Dialect::OpenMetrics, ROUNDTRIP_OPENMETRICS),
        (Dialect::Compact, ROUNDTRIP_TEXT),
    ] {
        let engines = if dialect == Dialect::V0 { 1 } else { 2 };
        let (page, _) = page_after_traffic(dialect, engines).await;
        let Some(back) = python(script, &page) else {
            return;
        };
        let back = back.unwrap_or_else(|e| panic!("{dialect}: {e}"));
        let (ours, theirs) = (new_exponents(&page), new_exponents(&back));
        for (i, (a, b)) in ours.lines().zip(theirs.lines()).enumerate() {
            // The text parser drops a help text's trailing space (the instrumentator's
            // help texts end in one, on the real page too).
            assert_eq!(a.trim_end(), b.trim_end(), "{dialect}: line {}", i + 1);
        }
        assert_eq!(ours.lines().count(), theirs.lines().count(), "{dialect}");
    }
}

#[tokio::test]
async fn gauge_overrides_follow_the_waveform() {
    let server = start(Config::default()).await;
    let url = server.url();
    server.override_gauge(
        "vllm:num_requests_waiting",
        Waveform::Constant { value: 7.0 },
    );
    let page = scrape(&url).await;
    assert_eq!(sample_sum(&page, "vllm:num_requests_waiting"), Some(7.0));
    // Square wave through the control API: both levels show up over two periods.
    let r = client()
        .post(format!("{url}/_mock/gauges"))
        .json(&json!({"name": "vllm:kv_cache_usage_perc", "waveform": {"kind": "square", "low": 0.25, "high": 0.75, "period_ms": 40}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let ok = until(Duration::from_secs(5), || {
        let url = url.clone();
        let seen = seen.clone();
        async move {
            let v = sample_sum(&scrape(&url).await, "vllm:kv_cache_usage_perc").unwrap();
            let mut s = seen.lock().unwrap();
            s.insert((v * 100.0) as i64);
            s.contains(&25) && s.contains(&75)
        }
    })
    .await;
    assert!(ok, "saw {seen:?}");
    let r = client()
        .delete(format!("{url}/_mock/gauges"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let page = scrape(&url).await;
    assert_eq!(sample_sum(&page, "vllm:num_requests_waiting"), Some(0.0));
    server.stop().await;
}

#[tokio::test]
async fn counter_reset_zeroes_counters_and_moves_created() {
    let server = start(Config::default()).await;
    let url = server.url();
    complete(&url, json!({"prompt": "a b c", "max_tokens": 4})).await;
    let before = scrape(&url).await;
    assert_eq!(
        sample_sum(&before, "vllm:generation_tokens_total"),
        Some(4.0)
    );
    let created_before = sample_sum(&before, "vllm:generation_tokens_created").unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = client()
        .post(format!("{url}/_mock/counter_reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let after = scrape(&url).await;
    assert_eq!(
        sample_sum(&after, "vllm:generation_tokens_total"),
        Some(0.0)
    );
    assert_eq!(
        sample_sum(&after, "vllm:e2e_request_latency_seconds_count"),
        Some(0.0)
    );
    assert!(sample_sum(&after, "vllm:generation_tokens_created").unwrap() > created_before);
    // To a scraper it looks like a new process.
    let start = |p: &str| sample_sum(p, "process_start_time_seconds").unwrap();
    assert!(
        start(&after) > start(&before),
        "{} {}",
        start(&before),
        start(&after)
    );
    server.stop().await;
}

/// The lines of `families` on a text page, sample values cut off.
fn shape(page: &str, families: &[&str]) -> Vec<String> {
    let ours = |name: &str| {
        families
            .iter()
            .any(|f| name == *f || name.strip_prefix(f).is_some_and(|r| r.starts_with('_')))
    };
    page.lines()
        .filter(|l| {
            let name = match l.strip_prefix("# ") {
                Some(c) => c.split(' ').nth(1).unwrap_or(""),
                None => l.split(['{', ' ']).next().unwrap_or(""),
            };
            ours(name)
        })
        .map(|l| match l.starts_with('#') {
            true => l.to_string(),
            false => l.rsplit_once(' ').unwrap().0.to_string(),
        })
        .collect()
}

/// The compact page is the sidecar's four families of a v0.11 page, line for line, and
/// nothing else; prometheus_client's parser reads it.
#[tokio::test]
async fn compact_has_only_what_the_sidecar_reads() {
    const READ: [&str; 4] = [
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
    ];
    let (page, ct) = page_after_traffic(Dialect::Compact, 2).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    let (full, _) = page_after_traffic(Dialect::V0_11, 2).await;
    assert_eq!(shape(&page, &READ), shape(&full, &READ));
    assert_eq!(shape(&page, &READ).len(), page.lines().count(), "{page}");
    eprintln!(
        "compact {} bytes, v0.11 {} bytes (2 engines)",
        page.len(),
        full.len()
    );
    assert_eq!(
        sample_sum(&page, "vllm:time_to_first_token_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample_sum(&page, "vllm:inter_token_latency_seconds_count"),
        Some(6.0)
    );
    assert!(page.contains("# TYPE vllm:inter_token_latency_seconds_created gauge\n"));
    let Some(out) = python(FAMILIES_TEXT, &page) else {
        return;
    };
    assert_eq!(
        out.unwrap(),
        "vllm:inter_token_latency_seconds histogram\n\
         vllm:inter_token_latency_seconds_created gauge\n\
         vllm:kv_cache_usage_perc gauge\n\
         vllm:num_requests_waiting gauge\n\
         vllm:time_to_first_token_seconds histogram\n\
         vllm:time_to_first_token_seconds_created gauge\n"
    );
}
