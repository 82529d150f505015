//! The thin binary: prints its address first, exits 2 on a bad flag.

use std::process::Command;

#[path = "support/process.rs"]
mod process;

#[test]
fn prints_address_and_serves() {
    let vllm = process::start(&[
        "--listen",
        "127.0.0.1:0",
        "--model",
        "m",
        "--metrics-dialect",
        "v0.11",
    ]);
    let addr = &vllm.addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        let c = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .unwrap();
        c.get(format!("http://{addr}/health"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 200);
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        &["--metrics-dialect", "v9"][..],
        &["--max-num-seqs", "0"][..],
        &["--listen", "nope"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mock-vllm"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// `--metrics-dialect compact` serves the compact page.
#[test]
fn compact_dialect_from_the_command_line() {
    let vllm = process::start(&["--listen", "127.0.0.1:0", "--metrics-dialect", "compact"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let page = rt.block_on(async {
        let c = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .unwrap();
        let url = format!("http://{}/metrics", vllm.addr);
        c.get(url).send().await.unwrap().text().await.unwrap()
    });
    let types: Vec<&str> = page.lines().filter(|l| l.starts_with("# TYPE")).collect();
    assert_eq!(
        types,
        [
            "# TYPE vllm:num_requests_waiting gauge",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            "# TYPE vllm:time_to_first_token_seconds_created gauge",
            "# TYPE vllm:inter_token_latency_seconds histogram",
            "# TYPE vllm:inter_token_latency_seconds_created gauge",
        ]
    );
}
