//! The load model: slots, queue, 429, KV usage, data parallelism, and histograms that
//! count every completed request.

mod common;

use std::time::Duration;

use common::*;
use mock_vllm::Config;
use serde_json::json;

#[tokio::test]
async fn two_slots_ten_requests_queue_then_drain() {
    let server = start(Config {
        max_num_seqs: 2,
        inter_token_latency: Duration::from_millis(10),
        ..Config::default()
    })
    .await;
    let url = server.url();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let r = complete(&url, json!({"prompt": format!("request number {i}"), "max_tokens": 8, "ignore_eos": true})).await;
            assert_eq!(r.status(), 200);
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["usage"]["completion_tokens"], 8);
        }));
    }
    // While they run: the queue shows up on /metrics, never more than 2 running.
    let mut max_waiting = 0.0f64;
    let mut saw_queue = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let page = scrape(&url).await;
        let running = sample_sum(&page, "vllm:num_requests_running").unwrap();
        assert!(running <= 2.0, "running {running}");
        let waiting = sample_sum(&page, "vllm:num_requests_waiting").unwrap();
        max_waiting = max_waiting.max(waiting);
        if waiting >= 1.0 {
            saw_queue = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        saw_queue,
        "num_requests_waiting never rose (max {max_waiting})"
    );
    for t in tasks {
        t.await.unwrap();
    }
    let page = scrape(&url).await;
    assert_eq!(sample_sum(&page, "vllm:num_requests_waiting"), Some(0.0));
    assert_eq!(sample_sum(&page, "vllm:num_requests_running"), Some(0.0));
    for h in [
        "vllm:e2e_request_latency_seconds_count",
        "vllm:time_to_first_token_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:request_generation_tokens_count",
    ] {
        assert_eq!(sample_sum(&page, h), Some(10.0), "{h}");
    }
    assert_eq!(
        sample_sum(&page, "vllm:generation_tokens_total"),
        Some(80.0)
    );
    assert_eq!(
        sample_sum(&page, "vllm:time_per_output_token_seconds_count"),
        Some(70.0)
    );
    // Later requests waited: the queue time sum is real, not zero.
    assert!(sample_sum(&page, "vllm:request_queue_time_seconds_sum").unwrap() > 0.01);
    server.stop().await;
}

#[tokio::test]
async fn full_queue_answers_429() {
    let server = start(Config {
        max_num_seqs: 1,
        max_waiting: 1,
        inter_token_latency: Duration::from_millis(20),
        ..Config::default()
    })
    .await;
    let url = server.url();
    let long = |url: String| {
        tokio::spawn(async move {
            complete(
                &url,
                json!({"prompt": "x", "max_tokens": 20, "ignore_eos": true}),
            )
            .await
            .status()
        })
    };
    let a = long(url.clone());
    assert!(
        until(Duration::from_secs(5), || async {
            server.state()["engines"][0]["running"] == 1
        })
        .await
    );
    let b = long(url.clone());
    assert!(
        until(Duration::from_secs(5), || async {
            server.state()["engines"][0]["waiting"] == 1
        })
        .await
    );
    let r = complete(&url, json!({"prompt": "x", "max_tokens": 1})).await;
    assert_eq!(r.status(), 429);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["object"], "error");
    assert_eq!(body["code"], 429);
    assert_eq!(a.await.unwrap(), 200);
    assert_eq!(b.await.unwrap(), 200);
    assert_eq!(server.state()["engines"][0]["counters"]["rejected"], 1);
    server.stop().await;
}

#[tokio::test]
async fn kv_usage_is_tokens_held_over_capacity() {
    let server = start(Config {
        kv_capacity_tokens: 1000,
        inter_token_latency: Duration::from_millis(20),
        ..Config::default()
    })
    .await;
    let url = server.url();
    // 100 prompt tokens (400 chars in 4-char words) + 100 output tokens = 200 held.
    let prompt = "abcd ".repeat(100);
    let task = {
        let url = url.clone();
        tokio::spawn(async move {
            complete(
                &url,
                json!({"prompt": prompt, "max_tokens": 100, "ignore_eos": true}),
            )
            .await
            .status()
        })
    };
    let saw = until(Duration::from_secs(5), || {
        let url = url.clone();
        async move { sample_sum(&scrape(&url).await, "vllm:kv_cache_usage_perc") == Some(0.2) }
    })
    .await;
    assert!(saw, "kv usage never read 0.2");
    let page = scrape(&url).await;
    assert_eq!(sample_sum(&page, "vllm:gpu_cache_usage_perc"), Some(0.2));
    drop(task);
    server.stop().await;
}

#[tokio::test]
async fn client_gone_while_waiting_leaves_the_queue() {
    let server = start(Config {
        max_num_seqs: 1,
        inter_token_latency: Duration::from_millis(20),
        ..Config::default()
    })
    .await;
    let url = server.url();
    // Two long requests; once one runs and one waits, both clients hang up.
    let long = json!({"prompt": "x", "max_tokens": 50, "ignore_eos": true});
    let first = tokio::spawn({
        let (url, long) = (url.clone(), long.clone());
        async move { complete(&url, long).await }
    });
    let second = tokio::spawn({
        let (url, long) = (url.clone(), long.clone());
        async move { complete(&url, long).await }
    });
    let both = until(Duration::from_secs(5), || async {
        let s = server.state();
        s["engines"][0]["running"] == 1 && s["engines"][0]["waiting"] == 1
    })
    .await;
    assert!(both, "{}", server.state());
    first.abort();
    second.abort();
    let drained = until(Duration::from_secs(5), || async {
        let s = server.state();
        s["engines"][0]["running"] == 0 && s["engines"][0]["waiting"] == 0
    })
    .await;
    assert!(drained, "{}", server.state());
    let page = scrape(&url).await;
    // The running one is counted as aborted; the queued one just left the queue.
    assert!(
        page.contains("finished_reason=\"abort\",model_name=\"mock-model\"} 1.0"),
        "{page}"
    );
    server.stop().await;
}

#[tokio::test]
async fn data_parallel_engines_share_the_load() {
    let server = start(Config {
        data_parallel: 2,
        max_num_seqs: 1,
        inter_token_latency: Duration::from_millis(10),
        ..Config::default()
    })
    .await;
    let url = server.url();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            complete(
                &url,
                json!({"prompt": "x", "max_tokens": 5, "ignore_eos": true}),
            )
            .await
            .status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let page = scrape(&url).await;
    for e in ["0", "1"] {
        let needle = format!(
            "vllm:e2e_request_latency_seconds_count{{engine=\"{e}\",model_name=\"mock-model\"}} "
        );
        let line = page.lines().find(|l| l.starts_with(&needle)).unwrap();
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= 1.0, "engine {e} got {v}");
    }
    assert_eq!(
        sample_sum(&page, "vllm:e2e_request_latency_seconds_count"),
        Some(4.0)
    );
    server.stop().await;
}
