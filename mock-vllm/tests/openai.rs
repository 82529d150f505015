//! The OpenAI surface: vLLM's shapes, SSE, usage accounting, errors, limits.

mod common;

use common::*;
use mock_vllm::{Config, Dialect};
use serde_json::{json, Value};

#[tokio::test]
async fn models_and_version_shapes() {
    let s = start(Config {
        model: "org/Model-7B".into(),
        ..Config::default()
    })
    .await;
    let body = client()
        .get(format!("{}/v1/models", s.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        body.starts_with(
            r#"{"object":"list","data":[{"id":"org/Model-7B","object":"model","created":"#
        ),
        "{body}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    let m = &v["data"][0];
    assert_eq!(m["owned_by"], "vllm");
    assert_eq!(m["root"], "org/Model-7B");
    assert!(m["parent"].is_null());
    assert_eq!(m["max_model_len"], 8192);
    assert_eq!(m["permission"][0]["object"], "model_permission");
    let v: Value = client()
        .get(format!("{}/version", s.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["version"], "0.10.1.1");
    s.stop().await;
}

#[tokio::test]
async fn completion_usage_counts_prompt_and_honours_max_tokens() {
    let s = start(Config::default()).await;
    let r = complete(&s.url(), json!({"model": "mock-model", "prompt": "one two three fourfive", "max_tokens": 7, "ignore_eos": true})).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    // one(1) two(1) three(2) fourfive(2)
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 6, "total_tokens": 13, "completion_tokens": 7, "prompt_tokens_details": null})
    );
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        mock_vllm::tokenizer::count_tokens(v["choices"][0]["text"].as_str().unwrap()),
        7
    );
    // Token ids count one each; without ignore_eos the natural length may stop earlier.
    let v: Value = complete(&s.url(), json!({"prompt": [1, 2, 3], "max_tokens": 500}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((16..=64).contains(&n), "{n}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    s.stop().await;
}

#[tokio::test]
async fn chat_non_streaming_and_streaming() {
    let s = start(Config::default()).await;
    let url = format!("{}/v1/chat/completions", s.url());
    let msgs = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hello"}]}]);
    let v: Value = client()
        .post(&url)
        .json(&json!({"messages": msgs, "max_tokens": 4, "ignore_eos": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    // 2 messages * 4 + "be brief"(1+2) + "hello"(2) + 2 primer.
    assert_eq!(v["usage"]["prompt_tokens"], 15);
    assert_eq!(v["usage"]["completion_tokens"], 4);

    let r = client()
        .post(&url)
        .json(&json!({"messages": msgs, "max_tokens": 5, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(events.iter().all(|e| e.starts_with("data: ")));
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(&e["data: ".len()..]).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let content: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .skip(1)
        .collect();
    assert_eq!(content.len(), 5);
    assert_eq!(content[4]["choices"][0]["finish_reason"], "length");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    s.stop().await;
}

#[tokio::test]
async fn completion_streaming_without_usage() {
    let s = start(Config::default()).await;
    let r = complete(
        &s.url(),
        json!({"prompt": "hi", "max_tokens": 3, "stream": true, "ignore_eos": true}),
    )
    .await;
    let text = r.text().await.unwrap();
    let data: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(data.len(), 4, "{text}");
    let last: Value = serde_json::from_str(&data[2]["data: ".len()..]).unwrap();
    assert_eq!(last["object"], "text_completion");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(last.get("usage").is_none());
    s.stop().await;
}

async fn error_of(url: &str, path: &str, body: &str) -> (u16, Value) {
    let r = client()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn malformed_requests_get_vllm_errors() {
    let s = start(Config {
        max_body_bytes: 10_000,
        ..Config::default()
    })
    .await;
    let url = s.url();
    for (path, body) in [
        ("/v1/completions", "{not json"),
        ("/v1/completions", "[]"),
        ("/v1/completions", r#"{"max_tokens": 3}"#),
        ("/v1/completions", r#"{"prompt": "a", "max_tokens": 0}"#),
        ("/v1/completions", r#"{"prompt": "a", "max_tokens": "x"}"#),
        ("/v1/completions", r#"{"prompt": "a", "max_tokens": 9000}"#),
        (
            "/v1/completions",
            r#"{"prompt": "a", "stream_options": {"include_usage": true}}"#,
        ),
        ("/v1/completions", r#"{"prompt": "a", "n": 2}"#),
        ("/v1/chat/completions", r#"{"messages": []}"#),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"content": "x"}]}"#,
        ),
    ] {
        let (status, v) = error_of(&url, path, body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(v["object"], "error", "{body}");
        assert_eq!(v["type"], "BadRequestError");
        assert_eq!(v["code"], 400);
        assert!(v["param"].is_null());
        assert!(!v["message"].as_str().unwrap().is_empty());
    }
    let (status, v) = error_of(
        &url,
        "/v1/completions",
        r#"{"model": "nope", "prompt": "a"}"#,
    )
    .await;
    assert_eq!(
        (status, v["type"].as_str().unwrap()),
        (404, "NotFoundError")
    );
    let big = format!(r#"{{"prompt": "{}"}}"#, "a".repeat(20_000));
    let (status, v) = error_of(&url, "/v1/completions", &big).await;
    assert_eq!(status, 413);
    assert_eq!(v["object"], "error");
    // Nothing was scheduled by any of that.
    assert_eq!(s.state()["engines"][0]["counters"]["requests_finished"], 0);
    s.stop().await;
}

#[tokio::test]
async fn newer_dialects_nest_errors() {
    let s = start(Config {
        dialect: Dialect::V0_11,
        ..Config::default()
    })
    .await;
    let (status, v) = error_of(
        &s.url(),
        "/v1/completions",
        r#"{"prompt": "a", "max_tokens": 0}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert_eq!(v["error"]["code"], 400);
    s.stop().await;
}

/// `SamplingParams` words the value it received, whatever it is.
#[tokio::test]
async fn sampling_errors_quote_the_value_sent() {
    let s = start(Config::default()).await;
    let url = s.url();
    for (body, message) in [
        (
            r#"{"prompt": "a", "max_tokens": -1}"#,
            "max_tokens must be at least 1, got -1.",
        ),
        (
            r#"{"prompt": "a", "max_tokens": 0}"#,
            "max_tokens must be at least 1, got 0.",
        ),
        (
            r#"{"prompt": "a", "n": -1}"#,
            "n must be at least 1, got -1.",
        ),
        (r#"{"prompt": "a", "n": 0}"#, "n must be at least 1, got 0."),
        (
            r#"{"prompt": "a", "min_tokens": -2}"#,
            "min_tokens must be greater than or equal to 0, got -2.",
        ),
    ] {
        let (status, v) = error_of(&url, "/v1/completions", body).await;
        assert_eq!(
            (status, v["message"].as_str()),
            (400, Some(message)),
            "{body}"
        );
    }
    let (status, v) = error_of(
        &url,
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -7}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(v["message"], "max_tokens must be at least 1, got -7.");
    s.stop().await;
}

/// vLLM counts an empty model name as the served model.
#[tokio::test]
async fn an_empty_model_name_is_the_served_model() {
    let s = start(Config::default()).await;
    let r = complete(
        &s.url(),
        json!({"model": "", "prompt": "a", "max_tokens": 2}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["model"], "mock-model");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    s.stop().await;
}

/// Send raw bytes, read until the server closes (or 5 s), answer what came back.
async fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        conn.read_to_end(&mut got),
    )
    .await;
    assert!(read.is_ok(), "the server kept the connection open");
    String::from_utf8_lossy(&got).into_owned()
}

/// A chunked body with a chunk-size line that is not hex: uvicorn (vLLM) answers 400
/// and closes; the size cap (413) is for bodies that are well-formed but too big.
#[tokio::test]
async fn a_bad_chunk_size_is_a_bad_request() {
    let s = start(Config::default()).await;
    let answer = raw_exchange(
        s.addr(),
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          transfer-encoding: chunked\r\n\r\nzz\r\n{\"prompt\": \"a\"}\r\n0\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.ends_with("Invalid HTTP request received."),
        "{answer}"
    );
    // A well-formed chunked body still goes through.
    let answer = raw_exchange(
        s.addr(),
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          transfer-encoding: chunked\r\nconnection: close\r\n\r\n\
          20\r\n{\"prompt\": \"a\", \"max_tokens\": 1}\r\n0\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    s.stop().await;
}
