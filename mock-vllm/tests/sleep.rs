//! Sleep mode as vLLM's dev-mode server answers it: `/sleep`, `/wake_up`,
//! `/is_sleeping`, FastAPI's 422 for a bad query, the sleep-state gauge, and a
//! completion sent while asleep queued until wake-up.

mod common;

use std::time::Duration;

use common::*;
use mock_vllm::{Config, Dialect};
use serde_json::{json, Value};

async fn post(url: &str, path: &str) -> (u16, Value) {
    let r = client().post(format!("{url}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn is_sleeping(url: &str) -> Value {
    client()
        .get(format!("{url}/is_sleeping"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn state_line(state: &str, value: &str) -> String {
    format!("vllm:engine_sleep_state{{engine=\"0\",model_name=\"mock-model\",sleep_state=\"{state}\"}} {value}\n")
}

#[tokio::test]
async fn a_level_outside_0_to_2_or_a_bad_mode_is_422_as_fastapi_answers() {
    let server = start(Config::default()).await;
    let url = server.url();
    let (status, body) = post(&url, "/sleep?level=3").await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({"detail": [{"type": "less_than_equal", "loc": ["query", "level"],
            "msg": "Input should be less than or equal to 2", "input": "3", "ctx": {"le": 2}}]})
    );
    let (status, body) = post(&url, "/sleep?level=-1").await;
    assert_eq!(
        (status, &body["detail"][0]["type"]),
        (422, &json!("greater_than_equal"))
    );
    let (status, body) = post(&url, "/sleep?level=deep").await;
    assert_eq!(
        (status, &body["detail"][0]["type"]),
        (422, &json!("int_parsing"))
    );
    let (status, body) = post(&url, "/sleep?level=1&mode=later").await;
    assert_eq!(
        (status, &body["detail"][0]["loc"]),
        (422, &json!(["query", "mode"]))
    );
    // Nothing of that put it to sleep.
    assert_eq!(is_sleeping(&url).await, json!({"is_sleeping": false}));
    server.stop().await;
}

#[tokio::test]
async fn a_sleeping_server_queues_completions_until_it_wakes() {
    let server = start(Config {
        dialect: Dialect::V0_33,
        ..Config::default()
    })
    .await;
    let url = server.url();
    assert!(scrape(&url).await.contains(&state_line("awake", "1.0")));
    let (status, body) = post(&url, "/sleep?level=1").await;
    assert_eq!(
        (status, body),
        (200, json!({"status": "sleeping", "level": 1}))
    );
    assert_eq!(is_sleeping(&url).await, json!({"is_sleeping": true}));
    // /health only says the engine is alive.
    let health = client().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let page = scrape(&url).await;
    assert!(page.contains(&state_line("awake", "0.0")), "{page}");
    assert!(
        page.contains(&state_line("weights_offloaded", "1.0")),
        "{page}"
    );
    assert!(page.contains(&state_line("discard_all", "0.0")), "{page}");

    let pending = tokio::spawn({
        let url = url.clone();
        async move {
            complete(&url, json!({"prompt": "hello", "max_tokens": 2}))
                .await
                .status()
                .as_u16()
        }
    });
    assert!(
        until(Duration::from_secs(5), || async {
            sample_sum(&scrape(&url).await, "vllm:num_requests_waiting") == Some(1.0)
        })
        .await
    );
    assert!(!pending.is_finished());
    let (status, body) = post(&url, "/wake_up").await;
    assert_eq!(
        (status, body),
        (200, json!({"status": "awake", "tags": null}))
    );
    assert_eq!(pending.await.unwrap(), 200);
    assert_eq!(is_sleeping(&url).await, json!({"is_sleeping": false}));
    let page = scrape(&url).await;
    assert!(page.contains(&state_line("awake", "1.0")), "{page}");
    assert_eq!(sample_sum(&page, "vllm:request_success_total"), Some(1.0));
    server.stop().await;
}

#[tokio::test]
async fn level_two_discards_all_and_wake_up_echoes_its_tags() {
    let server = start(Config {
        dialect: Dialect::V0_34,
        ..Config::default()
    })
    .await;
    let url = server.url();
    let (_, body) = post(&url, "/sleep?level=2").await;
    assert_eq!(body, json!({"status": "sleeping", "level": 2}));
    assert!(scrape(&url)
        .await
        .contains(&state_line("discard_all", "1.0")));
    let (_, body) = post(&url, "/wake_up?tags=weights&tags=kv_cache").await;
    assert_eq!(
        body,
        json!({"status": "awake", "tags": ["weights", "kv_cache"]})
    );
    server.stop().await;
}
