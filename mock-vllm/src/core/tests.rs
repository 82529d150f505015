//! The core alone, in virtual time: no server, no clock, no sleep.

use std::time::Duration;

use super::*;
use crate::config::Dialect;
use crate::stats::FinishReason;

const EPOCH: f64 = 1_700_000_000.0;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// No jitter, no slowdown: a 10-token prompt takes 2 + 10 x 1 = 12 ms to its first
/// token, then 10 ms per token.
fn cfg(dialect: Dialect) -> Config {
    Config {
        dialect,
        max_num_seqs: 2,
        max_waiting: 2,
        kv_capacity_tokens: 1000,
        jitter: 0.0,
        batch_slowdown: 0.0,
        prefill_overhead: ms(2),
        prefill_per_token: ms(1),
        inter_token_latency: ms(10),
        ..Config::default()
    }
}

fn req(prompt_tokens: u32, max_tokens: u32) -> Req {
    Req {
        prompt_tokens,
        prompt_hash: prompt_tokens as u64,
        max_tokens_param: Some(max_tokens),
        max_tokens,
        min_tokens: 0,
        ignore_eos: true,
        stream: false,
        include_usage: false,
        chat: false,
    }
}

fn page(core: &mut VllmCore, now: Duration) -> String {
    match core.metrics(now) {
        Answer::Reply(r) => {
            assert_eq!(r.status, 200);
            String::from_utf8(r.body.to_vec()).unwrap()
        }
        other => panic!("no page: {other:?}"),
    }
}

fn line<'a>(page: &'a str, prefix: &str) -> &'a str {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{page}"))
}

#[test]
fn an_admitted_request_shows_its_ttft_on_the_next_page() {
    let mut core = VllmCore::new(cfg(Dialect::Compact), EPOCH, ms(0)).unwrap();
    let Submitted::Accepted(id) = core.submit(ms(100), req(10, 3)) else {
        panic!("accepted")
    };
    assert_eq!(core.next_event_time(), Some(ms(112)));
    let before = page(&mut core, ms(111));
    assert!(line(&before, "vllm:time_to_first_token_seconds_count").ends_with(" 0.0"));
    let after = page(&mut core, ms(112));
    assert!(line(&after, "vllm:time_to_first_token_seconds_count").ends_with(" 1.0"));
    // 12 ms falls in the le="0.02" bucket, not in le="0.01".
    assert!(line(
        &after,
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.01\""
    )
    .ends_with(" 0.0"));
    assert!(line(
        &after,
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.02\""
    )
    .ends_with(" 1.0"));
    assert!(line(&after, "vllm:time_to_first_token_seconds_created").ends_with(" 1.7e+09"));
    // Two more tokens, 10 ms apart: done at 132 ms, two inter-token latencies.
    assert_eq!(core.next_event_time(), Some(ms(132)));
    assert_eq!(core.advance(ms(131)), vec![]);
    let done = core.advance(ms(500));
    let finished = End::Finished {
        reason: FinishReason::Length,
        output_tokens: 3,
    };
    assert_eq!(
        done,
        vec![Outcome {
            id,
            at: ms(132),
            end: finished
        }]
    );
    let last = page(&mut core, ms(500));
    assert!(line(&last, "vllm:inter_token_latency_seconds_count").ends_with(" 2.0"));
    assert_eq!(core.next_event_time(), None);
}

#[test]
fn full_slots_queue_then_reject_and_kv_usage_rises() {
    let mut core = VllmCore::new(cfg(Dialect::V0_11), EPOCH, ms(0)).unwrap();
    let accepted = |s| matches!(s, Submitted::Accepted(_));
    assert!(accepted(core.submit(ms(0), req(100, 100))));
    assert_eq!(core.engine_load(0), Some((1, 0, 200)));
    let p = page(&mut core, ms(0));
    assert_eq!(
        line(&p, "vllm:kv_cache_usage_perc{"),
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"mock-model\"} 0.2"
    );
    assert!(accepted(core.submit(ms(0), req(100, 100))));
    // Both slots taken: the next two wait, the one after is refused with 429.
    assert!(accepted(core.submit(ms(0), req(10, 10))));
    assert!(accepted(core.submit(ms(0), req(10, 10))));
    assert_eq!(core.submit(ms(0), req(10, 10)), Submitted::Failed(429));
    assert_eq!(core.engine_load(0), Some((2, 2, 400)));
    let p = page(&mut core, ms(1));
    assert!(line(&p, "vllm:num_requests_waiting{").ends_with(" 2.0"));
    assert!(line(&p, "vllm:num_requests_running{").ends_with(" 2.0"));
    // The first two end at 102 + 99 x 10 ms; the queued ones run then, and finish.
    let mut ends = Vec::new();
    while let Some(t) = core.next_event_time() {
        ends.extend(core.advance(t));
    }
    assert_eq!(ends.len(), 4);
    assert_eq!(ends[2].at, ms(1092 + 12 + 90));
    assert_eq!(core.engine_load(0), Some((0, 0, 0)));
    let p = page(&mut core, ms(5000));
    assert!(line(&p, "vllm:request_queue_time_seconds_count{").ends_with(" 4.0"));
    assert!(line(
        &p,
        "vllm:request_success_total{engine=\"0\",finished_reason=\"length\""
    )
    .ends_with(" 4.0"));
}

#[test]
fn a_crash_fails_health_and_a_restart_starts_from_zero() {
    let cfg = Config {
        startup_delay: ms(1000),
        ..cfg(Dialect::Compact)
    };
    let mut core = VllmCore::new(cfg, EPOCH, ms(0)).unwrap();
    assert_eq!(core.health(ms(999)), Answer::Reply(503));
    assert_eq!(core.submit(ms(999), req(10, 3)), Submitted::Failed(503));
    assert_eq!(core.health(ms(1000)), Answer::Reply(200));
    core.submit(ms(1000), req(10, 3));
    let Submitted::Accepted(running) = core.submit(ms(1000), req(10, 300)) else {
        panic!()
    };
    core.advance(ms(1100));
    assert!(line(
        &page(&mut core, ms(1100)),
        "vllm:time_to_first_token_seconds_count"
    )
    .ends_with(" 2.0"));

    core.crash(ms(2000));
    assert_eq!(core.health(ms(2000)), Answer::Refused);
    assert_eq!(core.metrics(ms(2000)), Answer::Refused);
    assert_eq!(core.submit(ms(2000), req(10, 3)), Submitted::Refused);
    let reset = core.advance(ms(2000));
    assert_eq!(
        reset,
        vec![Outcome {
            id: running,
            at: ms(2000),
            end: End::Reset
        }]
    );
    assert_eq!(core.next_event_time(), None);

    core.restart(ms(5000));
    assert_eq!(core.health(ms(5000)), Answer::Reply(503));
    assert_eq!(core.health(ms(6000)), Answer::Reply(200));
    let p = page(&mut core, ms(6000));
    assert!(line(&p, "vllm:time_to_first_token_seconds_count").ends_with(" 0.0"));
    // New series, created at the restart (epoch + 5 s).
    assert!(
        line(&p, "vllm:time_to_first_token_seconds_created").ends_with(" 1.700000005e+09"),
        "{p}"
    );
    assert_eq!(core.engine_load(0), Some((0, 0, 0)));
}

#[test]
fn health_modes_and_metric_faults() {
    let mut core = VllmCore::new(cfg(Dialect::Compact), EPOCH, ms(0)).unwrap();
    core.set_health(Health::Down);
    assert_eq!(core.health(ms(1)), Answer::Reply(503));
    core.set_health(Health::Hang);
    assert_eq!(core.health(ms(1)), Answer::Hang);
    core.faults()
        .add(Fault::MetricsStatus { status: 500 }, Some(1), None);
    core.faults().add(
        Fault::MetricsTruncate {
            at_bytes: 10,
            abort: true,
        },
        Some(1),
        None,
    );
    let Answer::Reply(r) = core.metrics(ms(1)) else {
        panic!()
    };
    assert_eq!((r.status, r.body), (500, &b"Internal Server Error"[..]));
    let Answer::Reply(r) = core.metrics(ms(1)) else {
        panic!()
    };
    assert_eq!(
        (r.status, r.body.len(), r.delivery),
        (200, 10, Delivery::ResetAfterBody)
    );
    core.faults().add(Fault::MetricsHang, Some(1), None);
    assert_eq!(core.metrics(ms(1)), Answer::Hang);
    let whole = page(&mut core, ms(1));
    assert!(whole.starts_with("# HELP vllm:num_requests_waiting"));
}

#[test]
fn same_seed_same_timeline() {
    let run = || {
        let cfg = Config {
            jitter: 0.2,
            batch_slowdown: 0.5,
            data_parallel: 2,
            max_waiting: 100,
            seed: 7,
            ..cfg(Dialect::Compact)
        };
        let mut core = VllmCore::new(cfg, EPOCH, ms(0)).unwrap();
        let mut ends = Vec::new();
        for i in 0..50u64 {
            let mut r = req(20, 64);
            r.ignore_eos = false;
            core.submit(ms(i * 7), r);
            ends.extend(core.advance(ms(i * 7)));
        }
        while let Some(t) = core.next_event_time() {
            ends.extend(core.advance(t));
        }
        (ends, page(&mut core, ms(100_000)))
    };
    let (a, pa) = run();
    assert_eq!(a.len(), 50);
    assert_eq!((a, pa.clone()), run());
    // Both engines served.
    assert!(pa.contains("vllm:time_to_first_token_seconds_count{engine=\"1\""));
    assert!(!line(&pa, "vllm:time_to_first_token_seconds_count{engine=\"1\"").ends_with(" 0.0"));
}

#[test]
fn counter_reset_zeroes_counters_but_keeps_requests_in_flight() {
    let mut core = VllmCore::new(cfg(Dialect::V0_10), EPOCH, ms(0)).unwrap();
    core.submit(ms(0), req(10, 3));
    let Submitted::Accepted(long) = core.submit(ms(0), req(10, 500)) else {
        panic!()
    };
    core.advance(ms(100));
    let p = page(&mut core, ms(100));
    assert!(line(&p, "vllm:time_to_first_token_seconds_count{").ends_with(" 2.0"));
    assert!(p.contains("\nprocess_start_time_seconds 1.7e+09\n"), "{p}");
    core.counter_reset(ms(3000));
    let p = page(&mut core, ms(3000));
    assert!(line(&p, "vllm:time_to_first_token_seconds_count{").ends_with(" 0.0"));
    assert!(line(&p, "vllm:num_requests_running{").ends_with(" 1.0"));
    assert!(
        p.contains("\nprocess_start_time_seconds 1.700000003e+09\n"),
        "{p}"
    );
    let ends = core.advance(ms(60_000));
    assert_eq!(ends.iter().map(|o| o.id).collect::<Vec<_>>(), vec![long]);
    let p = page(&mut core, ms(60_000));
    assert!(line(&p, "vllm:e2e_request_latency_seconds_count{").ends_with(" 1.0"));
}

#[test]
fn completion_faults_fail_hang_and_drop() {
    let mut core = VllmCore::new(cfg(Dialect::V0_11), EPOCH, ms(0)).unwrap();
    let f = core.faults();
    f.add(
        Fault::CompletionFail {
            fraction: 1.0,
            status: 500,
        },
        Some(1),
        None,
    );
    f.add(Fault::CompletionHang, Some(1), None);
    assert_eq!(core.submit(ms(0), req(10, 3)), Submitted::Failed(500));
    // The hung request holds its slot and never ends.
    let Submitted::Accepted(_) = core.submit(ms(0), req(10, 3)) else {
        panic!()
    };
    assert_eq!(core.next_event_time(), None);
    assert_eq!(core.engine_load(0), Some((1, 0, 13)));
    core.faults()
        .add(Fault::CompletionDrop { after_tokens: 2 }, Some(1), None);
    let Submitted::Accepted(dropped) = core.submit(ms(0), req(10, 5)) else {
        panic!()
    };
    // First token at 12 ms, the second 10 ms later, then the reset.
    let ends = core.advance(ms(1000));
    assert_eq!(
        ends,
        vec![Outcome {
            id: dropped,
            at: ms(22),
            end: End::Dropped
        }]
    );
    let p = page(&mut core, ms(1000));
    assert!(line(
        &p,
        "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\""
    )
    .ends_with(" 1.0"));
    assert_eq!(core.engine_load(0), Some((1, 0, 13)));
}

#[test]
fn a_sleeping_core_queues_arrivals_and_starts_them_on_wake() {
    let mut core = VllmCore::new(cfg(Dialect::V0_33), EPOCH, ms(0)).unwrap();
    core.sleep(ms(10), 1);
    assert!(core.is_sleeping());
    let Submitted::Accepted(id) = core.submit(ms(100), req(10, 3)) else {
        panic!("accepted")
    };
    // Queued, nothing scheduled while asleep.
    assert_eq!(core.next_event_time(), None);
    let asleep = page(&mut core, ms(200));
    assert!(line(&asleep, "vllm:num_requests_waiting{").ends_with(" 1.0"));
    assert!(line(
        &asleep,
        "vllm:engine_sleep_state{engine=\"0\",model_name=\"mock-model\",sleep_state=\"awake\"}"
    )
    .ends_with(" 0.0"));
    core.wake(ms(1000));
    assert!(!core.is_sleeping());
    // First token 12 ms after the wake, then two more 10 ms apart.
    assert_eq!(core.next_event_time(), Some(ms(1012)));
    let done = core.advance(ms(2000));
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].id, done[0].at), (id, ms(1032)));
}
