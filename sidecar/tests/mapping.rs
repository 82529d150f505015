//! The vLLM mapping: the reference's cases, the corrections, the interval statistics,
//! the fixtures (checked against numbers computed independently by gen_pages.py), and
//! properties over arbitrary scrape sequences.

#[path = "support/locate.rs"]
mod locate;
use locate::locate;

use proptest::prelude::*;
use sidecar::mapping::{HeartbeatMetrics, LatencyStat, Mapper, MapperConfig, MAX_LATENCY_SECONDS};
use sidecar::prom::{parse, Format, Mode};

fn mapper(stat: LatencyStat, model: Option<&str>) -> Mapper {
    Mapper::new(MapperConfig {
        latency_stat: stat,
        model: model.map(String::from),
    })
}

/// Observe through both entry points and insist they agree.
fn observe(m: &mut (Mapper, Mapper), text: &str) -> HeartbeatMetrics {
    let page = parse(text, Format::Prometheus, Mode::Lenient).unwrap();
    let a = m.0.observe(&page);
    let b = m.1.observe_text(text, Format::Prometheus);
    assert_eq!(a, b, "observe and observe_text disagree on:\n{text}");
    a
}

fn pair(stat: LatencyStat, model: Option<&str>) -> (Mapper, Mapper) {
    (mapper(stat, model), mapper(stat, model))
}

/// A TTFT histogram (seconds) with cumulative bucket counts for `les`.
fn ttft(labels: &str, les: &[(&str, f64)], sum: f64, count: f64) -> String {
    let mut s = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
    let sep = if labels.is_empty() { "" } else { "," };
    for (le, c) in les {
        s += &format!("vllm:time_to_first_token_seconds_bucket{{{labels}{sep}le=\"{le}\"}} {c}\n");
    }
    s += &format!("vllm:time_to_first_token_seconds_sum{{{labels}}} {sum}\n");
    s += &format!("vllm:time_to_first_token_seconds_count{{{labels}}} {count}\n");
    s
}

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(locate(rel)).unwrap()
}

#[test]
fn waiting_is_summed_over_label_sets() {
    let mut m = pair(LatencyStat::Avg, None);
    let page = "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} 3.0\n\
                vllm:num_requests_waiting{engine=\"1\",model_name=\"a\"} 4\n\
                vllm:num_requests_waiting{engine=\"0\",model_name=\"b\"} 1e1\n";
    assert_eq!(observe(&mut m, page).load_metrics.waiting_requests_num, 17);
}

#[test]
fn kv_usage_is_a_mean_clamped_and_prefers_the_new_name() {
    let mut m = pair(LatencyStat::Avg, None);
    let two = "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\nvllm:gpu_cache_usage_perc{engine=\"1\"} 0.5\n";
    assert_eq!(observe(&mut m, two).load_metrics.gpu_cache_usage_perc, 0.5);
    let sci = "vllm:gpu_cache_usage_perc{engine=\"0\"} 1.23e-04\n";
    assert_eq!(
        observe(&mut m, sci).load_metrics.gpu_cache_usage_perc,
        0.000123
    );
    let both = "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.25\n";
    assert_eq!(
        observe(&mut m, both).load_metrics.gpu_cache_usage_perc,
        0.25
    );
    let over = "vllm:kv_cache_usage_perc 1.5\n";
    assert_eq!(observe(&mut m, over).load_metrics.gpu_cache_usage_perc, 1.0);
    let under = "vllm:kv_cache_usage_perc -0.5\n";
    assert_eq!(
        observe(&mut m, under).load_metrics.gpu_cache_usage_perc,
        0.0
    );
    assert_eq!(observe(&mut m, "").load_metrics.gpu_cache_usage_perc, 0.0);
}

#[test]
fn nan_and_inf_are_dropped() {
    let mut m = pair(LatencyStat::Avg, None);
    let page = "vllm:num_requests_waiting{engine=\"0\"} NaN\nvllm:num_requests_waiting{engine=\"1\"} +Inf\n\
                vllm:num_requests_waiting{engine=\"2\"} 2\nvllm:kv_cache_usage_perc{engine=\"0\"} NaN\n\
                vllm:kv_cache_usage_perc{engine=\"1\"} 0.4\n";
    let h = observe(&mut m, page);
    assert_eq!(h.load_metrics.waiting_requests_num, 2);
    assert_eq!(h.load_metrics.gpu_cache_usage_perc, 0.4);
}

#[test]
fn interval_average_and_no_growth() {
    let mut m = pair(LatencyStat::Avg, None);
    // First scrape: no baseline.
    let h = observe(&mut m, &ttft("", &[("+Inf", 10.0)], 5.0, 10.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 0);
    // 4 more requests, 1.0 s more: 250 ms.
    let h = observe(&mut m, &ttft("", &[("+Inf", 14.0)], 6.0, 14.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 250);
    // Truncated, not rounded: 3 requests, 0.5 s → 166.67 ms → 166.
    let h = observe(&mut m, &ttft("", &[("+Inf", 17.0)], 6.5, 17.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 166);
    // No growth: 0.
    let h = observe(&mut m, &ttft("", &[("+Inf", 17.0)], 6.5, 17.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 0);
}

#[test]
fn counter_reset_starts_a_new_baseline() {
    let mut m = pair(LatencyStat::Avg, None);
    observe(&mut m, &ttft("", &[("+Inf", 100.0)], 50.0, 100.0));
    // vLLM restarted: counters went down. No negative or huge number.
    let h = observe(&mut m, &ttft("", &[("+Inf", 2.0)], 0.2, 2.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 0);
    // The next interval is measured from the new baseline: 2 requests, 0.6 s → 300 ms.
    let h = observe(&mut m, &ttft("", &[("+Inf", 4.0)], 0.8, 4.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 300);
    // Only the sum going down is a reset too.
    let h = observe(&mut m, &ttft("", &[("+Inf", 5.0)], 0.1, 5.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 0);
}

/// TTFT of two engines: `(bucket +Inf = count, sum, count)` each, as text.
fn two_engines(e0: (f64, &str), e1: (f64, &str)) -> String {
    let mut p = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
    for (e, (c, s)) in [(0, e0), (1, e1)] {
        p +=
            &format!("vllm:time_to_first_token_seconds_bucket{{engine=\"{e}\",le=\"+Inf\"}} {c}\n");
        p += &format!("vllm:time_to_first_token_seconds_sum{{engine=\"{e}\"}} {s}\n");
        p += &format!("vllm:time_to_first_token_seconds_count{{engine=\"{e}\"}} {c}\n");
    }
    p
}

#[test]
fn an_implausible_interval_is_a_reset() {
    let ttft_ms = |m: &mut (Mapper, Mapper), c: f64, s: &str| {
        let page =
            ttft("", &[("+Inf", c)], 0.0, c).replace("_sum{} 0\n", &format!("_sum{{}} {s}\n"));
        assert!(page.contains(&format!("_sum{{}} {s}\n")), "{page}");
        observe(m, &page).latency_metrics.recent_max_ttft
    };
    let mut m = pair(LatencyStat::Avg, None);
    assert_eq!(ttft_ms(&mut m, 10.0, "5"), 0);
    // The sum jumps to 1e300: read naively, `i64::MAX` ms; an implausible interval.
    assert_eq!(ttft_ms(&mut m, 12.0, "1e300"), 0);
    // That was the new baseline: 1e300 + 1 is 1e300, so no time passed.
    assert_eq!(ttft_ms(&mut m, 14.0, "1e300"), 0);
    // Back to sane values: the sum went down, a reset; then measured again.
    assert_eq!(ttft_ms(&mut m, 16.0, "8"), 0);
    assert_eq!(ttft_ms(&mut m, 20.0, "9"), 250);
    // The bound itself is believed; a little more is not.
    assert_eq!(ttft_ms(&mut m, 21.0, "3609"), 3_600_000);
    assert_eq!(ttft_ms(&mut m, 22.0, "7209.5"), 0);
    assert_eq!(ttft_ms(&mut m, 24.0, "7210.5"), 500);
    // A sum that grows with no request: at most one request's worth is believed
    // (a scrape can see a sum before its count), which alone is 0 (no count growth).
    assert_eq!(ttft_ms(&mut m, 24.0, "10810.5"), 0);
    assert_eq!(ttft_ms(&mut m, 26.0, "10811.5"), 500);
    // NaN and infinite sums are dropped samples: no interval and no panic; the page
    // has no usable sum, so the next one is only a baseline.
    for (c, bad) in [(28.0, "NaN"), (30.0, "+Inf"), (32.0, "-Inf")] {
        assert_eq!(ttft_ms(&mut m, c, bad), 0, "{bad}");
    }
    assert_eq!(ttft_ms(&mut m, 34.0, "-1"), 0);
    assert_eq!(ttft_ms(&mut m, 36.0, "-0.75"), 125);
    // A negative delta is a reset.
    assert_eq!(ttft_ms(&mut m, 38.0, "-5"), 0);
    assert_eq!(ttft_ms(&mut m, 40.0, "-4.5"), 250);
    // A difference too large for a float: -1e308 to 1e308 is +inf.
    assert_eq!(ttft_ms(&mut m, 42.0, "-1e308"), 0);
    assert_eq!(ttft_ms(&mut m, 44.0, "1e308"), 0);
    assert_eq!(ttft_ms(&mut m, 46.0, "1e308"), 0);
}

#[test]
fn an_implausible_engine_does_not_spoil_the_others() {
    // Engine 1's sum jumps, without and with requests; engine 0 saw 10 requests at
    // 0.1 s each, and that is the answer.
    for c1 in [100.0, 110.0] {
        let mut m = pair(LatencyStat::Avg, None);
        observe(&mut m, &two_engines((100.0, "10"), (100.0, "10")));
        let h = observe(&mut m, &two_engines((110.0, "11"), (c1, "1e300")));
        assert_eq!(h.latency_metrics.recent_max_ttft, 100, "{c1}");
    }
}

#[test]
fn bucket_statistics_above_the_bound_are_0() {
    let page = |bound: &str, cum: [f64; 3]| {
        ttft(
            "",
            &[("0.5", cum[0]), (bound, cum[1]), ("+Inf", cum[2])],
            0.0,
            cum[2],
        )
    };
    for (bound, want_max) in [
        ("3600", 3_600_000),
        ("2560", 2_560_000),
        ("1e300", 0),
        ("7200", 0),
    ] {
        for stat in [LatencyStat::Max, LatencyStat::P99] {
            let mut m = pair(stat, None);
            observe(&mut m, &page(bound, [1.0, 1.0, 1.0]));
            let h = observe(&mut m, &page(bound, [1.0, 3.0, 3.0]));
            let got = h.latency_metrics.recent_max_ttft;
            if want_max == 0 {
                assert_eq!(got, 0, "{stat:?} le {bound}");
            } else {
                assert!(got > 0 && got <= want_max, "{stat:?} le {bound}: {got}");
            }
            assert!(got as f64 <= MAX_LATENCY_SECONDS * 1000.0);
        }
    }
}

#[test]
fn tbt_follows_the_same_rule() {
    let itl = |sum: &str, count: f64| {
        let name = "vllm:inter_token_latency_seconds";
        format!("{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}\n")
    };
    let mut m = pair(LatencyStat::Avg, None);
    observe(&mut m, &itl("1", 10.0));
    assert_eq!(
        observe(&mut m, &itl("1e300", 20.0))
            .latency_metrics
            .recent_max_tbt,
        0
    );
    assert_eq!(
        observe(&mut m, &itl("2", 30.0))
            .latency_metrics
            .recent_max_tbt,
        0
    );
    assert_eq!(
        observe(&mut m, &itl("2.5", 40.0))
            .latency_metrics
            .recent_max_tbt,
        50
    );
}

#[test]
fn one_engine_restarting_does_not_spoil_the_others() {
    let mut m = pair(LatencyStat::Avg, None);
    let page = |c0: f64, s0: f64, c1: f64, s1: f64| {
        let mut p = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
        for (e, c, s) in [(0, c0, s0), (1, c1, s1)] {
            p += &format!(
                "vllm:time_to_first_token_seconds_bucket{{engine=\"{e}\",le=\"+Inf\"}} {c}\n"
            );
            p += &format!("vllm:time_to_first_token_seconds_sum{{engine=\"{e}\"}} {s}\n");
            p += &format!("vllm:time_to_first_token_seconds_count{{engine=\"{e}\"}} {c}\n");
        }
        p
    };
    observe(&mut m, &page(100.0, 10.0, 100.0, 10.0));
    // Engine 1 restarted (100 → 1); engine 0 saw 10 requests at 0.1 s each.
    let h = observe(&mut m, &page(110.0, 11.0, 1.0, 5.0));
    assert_eq!(h.latency_metrics.recent_max_ttft, 100);
}

#[test]
fn tbt_prefers_inter_token_latency() {
    let hist = |name: &str, sum: f64, count: f64| {
        format!("{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}\n")
    };
    let mut m = pair(LatencyStat::Avg, None);
    let both = |k: f64| {
        hist("vllm:inter_token_latency_seconds", 0.01 * k, k)
            + &hist("vllm:time_per_output_token_seconds", 0.05 * k, k)
    };
    observe(&mut m, &both(10.0));
    assert_eq!(
        observe(&mut m, &both(20.0)).latency_metrics.recent_max_tbt,
        10
    );
    let mut m = pair(LatencyStat::Avg, None);
    let tpot = |k: f64| hist("vllm:time_per_output_token_seconds", 0.05 * k, k);
    observe(&mut m, &tpot(10.0));
    assert_eq!(
        observe(&mut m, &tpot(20.0)).latency_metrics.recent_max_tbt,
        50
    );
}

#[test]
fn model_filter() {
    let page = |k: f64| {
        format!(
            "vllm:num_requests_waiting{{model_name=\"a\"}} 1\nvllm:num_requests_waiting{{model_name=\"b\"}} 2\n\
             vllm:num_requests_waiting 4\nvllm:kv_cache_usage_perc{{model_name=\"a\"}} 0.2\n\
             vllm:kv_cache_usage_perc{{model_name=\"b\"}} 0.8\n{}{}",
            ttft("model_name=\"a\"", &[("+Inf", k)], 0.1 * k, k),
            ttft("model_name=\"b\"", &[("+Inf", k)], 0.3 * k, k).replace("# TYPE vllm:time_to_first_token_seconds histogram\n", ""),
        )
    };
    let mut all = pair(LatencyStat::Avg, None);
    let mut a = pair(LatencyStat::Avg, Some("a"));
    let mut b = pair(LatencyStat::Avg, Some("b"));
    let mut none = pair(LatencyStat::Avg, Some("c"));
    for m in [&mut all, &mut a, &mut b, &mut none] {
        observe(m, &page(10.0));
    }
    let h = observe(&mut all, &page(20.0));
    assert_eq!(
        (
            h.load_metrics.waiting_requests_num,
            h.latency_metrics.recent_max_ttft
        ),
        (7, 200)
    );
    assert_eq!(h.load_metrics.gpu_cache_usage_perc, 0.5);
    let h = observe(&mut a, &page(20.0));
    assert_eq!(
        (
            h.load_metrics.waiting_requests_num,
            h.latency_metrics.recent_max_ttft
        ),
        (1, 100)
    );
    assert_eq!(h.load_metrics.gpu_cache_usage_perc, 0.2);
    let h = observe(&mut b, &page(20.0));
    assert_eq!(
        (
            h.load_metrics.waiting_requests_num,
            h.latency_metrics.recent_max_ttft
        ),
        (2, 300)
    );
    assert_eq!(observe(&mut none, &page(20.0)), HeartbeatMetrics::default());
}

#[test]
fn bucket_statistics() {
    let les = ["0.1", "0.2", "0.4", "0.8", "+Inf"];
    let page = |cum: [f64; 5]| {
        let b: Vec<(&str, f64)> = les.iter().copied().zip(cum).collect();
        ttft("", &b, 0.0, cum[4])
    };
    let run = |stat, before: [f64; 5], after: [f64; 5]| {
        let mut m = pair(stat, None);
        observe(&mut m, &page(before));
        observe(&mut m, &page(after))
            .latency_metrics
            .recent_max_ttft
    };
    let before = [10.0, 10.0, 10.0, 10.0, 10.0];
    // Interval: 4 in (0, 0.1], 4 in (0.1, 0.2], 2 in (0.2, 0.4].
    let after = [14.0, 18.0, 20.0, 20.0, 20.0];
    assert_eq!(run(LatencyStat::P50, before, after), 125); // rank 5: 0.1 + 0.1 * 1/4
    assert_eq!(run(LatencyStat::P90, before, after), 300); // rank 9: 0.2 + 0.2 * 1/2
    assert_eq!(run(LatencyStat::P99, before, after), 390); // rank 9.9: 0.2 + 0.2 * 1.9/2
    assert_eq!(run(LatencyStat::Max, before, after), 400);
    // Only +Inf grew: the last finite bound.
    let inf_only = [10.0, 10.0, 10.0, 10.0, 13.0];
    assert_eq!(run(LatencyStat::Max, before, inf_only), 800);
    assert_eq!(run(LatencyStat::P50, before, inf_only), 800);
    // Nothing grew: 0.
    assert_eq!(run(LatencyStat::Max, before, before), 0);
    assert_eq!(run(LatencyStat::P99, before, before), 0);
    // First bucket only: interpolated from 0.
    assert_eq!(
        run(LatencyStat::P50, before, [14.0, 14.0, 14.0, 14.0, 14.0]),
        50
    );
    // Buckets going down are a reset.
    assert_eq!(run(LatencyStat::Max, after, before), 0);
}

#[test]
fn fixtures_match_the_independent_computation() {
    let expected: serde_json::Value =
        serde_json::from_str(&fixture("fixtures/expected.json")).unwrap();
    let first = fixture("fixtures/multi-engine.prom");
    let next = fixture("fixtures/multi-engine-next.prom");
    let stats = [
        ("avg", LatencyStat::Avg),
        ("p50", LatencyStat::P50),
        ("p90", LatencyStat::P90),
        ("p99", LatencyStat::P99),
        ("max", LatencyStat::Max),
    ];
    for (key, want) in expected.as_object().unwrap() {
        let model = if key == "all" {
            None
        } else {
            Some(key.as_str())
        };
        for (stat_name, stat) in stats {
            let mut m = pair(stat, model);
            let h0 = observe(&mut m, &first);
            assert_eq!(h0.latency_metrics.recent_max_ttft, 0);
            let h = observe(&mut m, &next);
            assert_eq!(
                h.latency_metrics.recent_max_ttft,
                want["ttft_ms"][stat_name].as_i64().unwrap(),
                "{key} {stat_name}"
            );
            assert_eq!(
                h.latency_metrics.recent_max_tbt,
                want["tbt_ms"][stat_name].as_i64().unwrap(),
                "{key} {stat_name}"
            );
            assert_eq!(
                h.load_metrics.waiting_requests_num,
                want["waiting_requests_num"].as_u64().unwrap()
            );
            assert_eq!(
                h.load_metrics.gpu_cache_usage_perc,
                want["gpu_cache_usage_perc"].as_f64().unwrap()
            );
            assert!(h.latency_metrics.recent_max_ttft > 0);
        }
    }
    // The OpenMetrics rendering of the second page maps the same (format from
    // Content-Type in the sidecar).
    let om = fixture("fixtures/multi-engine-next.om");
    let mut a = mapper(LatencyStat::P90, None);
    let mut b = mapper(LatencyStat::P90, None);
    a.observe_text(&first, Format::Prometheus);
    b.observe_text(&first, Format::Prometheus);
    let via_om = a.observe_text(&om, Format::OpenMetrics);
    let via_prom = b.observe(&parse(&next, Format::Prometheus, Mode::Lenient).unwrap());
    assert_eq!(via_om, via_prom);
}

#[test]
fn real_page() {
    let text = fixture("fixtures/vllm-0.10-metrics.txt");
    let mut m = pair(LatencyStat::Avg, None);
    let h = observe(&mut m, &text);
    assert_eq!(h.load_metrics.waiting_requests_num, 0);
    assert_eq!(h.load_metrics.gpu_cache_usage_perc, 0.0011764705882353343);
    assert_eq!(h.latency_metrics, Default::default());
    // The same page again: counts did not grow.
    assert_eq!(observe(&mut m, &text).latency_metrics.recent_max_ttft, 0);
    // Two more TTFT observations (0.5 s in all) on top of the real page: 250 ms.
    let grown = text
        .replace("vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"Qwen/Qwen3-4B-Instruct-2507-FP8\"} 6.0",
                 "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"Qwen/Qwen3-4B-Instruct-2507-FP8\"} 8.0")
        .replace("} 0.24629998207092285", "} 0.74629998207092285");
    assert_ne!(grown, text);
    assert_eq!(observe(&mut m, &grown).latency_metrics.recent_max_ttft, 250);
}

/// Arbitrary pages of the metrics the mapping reads, with hostile values.
fn page_strategy() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("NaN".to_string()),
        Just("+Inf".to_string()),
        Just("-Inf".to_string()),
        Just("1e308".to_string()),
        Just("-1e308".to_string()),
        (-1e6f64..1e6).prop_map(|v| format!("{v}")),
        (0u32..1000).prop_map(|v| format!("{v}")),
    ];
    let name = prop_oneof![
        Just("vllm:num_requests_waiting"),
        Just("vllm:kv_cache_usage_perc"),
        Just("vllm:gpu_cache_usage_perc"),
        Just("vllm:time_to_first_token_seconds_sum"),
        Just("vllm:time_to_first_token_seconds_count"),
        Just("vllm:time_to_first_token_seconds_bucket"),
        Just("vllm:inter_token_latency_seconds_sum"),
        Just("vllm:inter_token_latency_seconds_count"),
        Just("vllm:inter_token_latency_seconds_bucket"),
        Just("vllm:time_per_output_token_seconds_bucket"),
        Just("vllm:time_per_output_token_seconds_count"),
        Just("other_metric"),
    ];
    let le = prop_oneof![
        Just("0.1"),
        Just("1"),
        Just("+Inf"),
        Just("NaN"),
        Just("-5"),
        Just("x")
    ];
    let line = (name, 0u8..3, prop_oneof![Just("a"), Just("b")], le, value).prop_map(
        |(n, e, model, le, v)| {
            format!("{n}{{engine=\"{e}\",model_name=\"{model}\",le=\"{le}\"}} {v}\n")
        },
    );
    prop::collection::vec(line, 0..40).prop_map(|lines| lines.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn output_is_finite_and_non_negative(pages in prop::collection::vec(page_strategy(), 1..6),
                                         stat in prop_oneof![Just(LatencyStat::Avg), Just(LatencyStat::P50),
                                                             Just(LatencyStat::P99), Just(LatencyStat::Max)],
                                         filter in prop_oneof![Just(None), Just(Some("a"))]) {
        let mut m = pair(stat, filter);
        for p in &pages {
            let h = observe(&mut m, p);
            let bound = (MAX_LATENCY_SECONDS * 1000.0) as i64;
            prop_assert!((0..=bound).contains(&h.latency_metrics.recent_max_ttft));
            prop_assert!((0..=bound).contains(&h.latency_metrics.recent_max_tbt));
            let kv = h.load_metrics.gpu_cache_usage_perc;
            prop_assert!(kv.is_finite() && (0.0..=1.0).contains(&kv));
        }
    }
}

/// Histogram and gauge lines of a few series; each scrape of a sequence writes some of
/// them, from a rotating start, with fresh values and, per line, one of two spellings
/// of the same labels. Values grow from scrape to scrape, as counters do; whole
/// numbers keep every sum exact, so the order series are added up in does not matter.
fn scrape_sequence() -> impl Strategy<Value = Vec<String>> {
    let name = prop_oneof![
        Just("vllm:num_requests_waiting"),
        Just("vllm:kv_cache_usage_perc"),
        Just("vllm:time_to_first_token_seconds_sum"),
        Just("vllm:time_to_first_token_seconds_count"),
        Just("vllm:time_to_first_token_seconds_bucket"),
        Just("vllm:inter_token_latency_seconds_sum"),
        Just("vllm:inter_token_latency_seconds_count"),
        Just("vllm:inter_token_latency_seconds_bucket"),
    ];
    let shape = (name, 0u8..4, prop_oneof![Just("a"), Just("b")], 0usize..3);
    let shapes = prop::collection::vec(shape, 1..30);
    // Mostly the same lines as last time, so that much is replayed.
    let line = (
        prop::bool::weighted(0.9),
        0u32..500,
        prop::bool::weighted(0.1),
    );
    let start = prop_oneof![4 => Just(0usize), 1 => 0usize..30];
    let scrape = (start, prop::collection::vec(line, 30));
    (shapes, prop::collection::vec(scrape, 2..7)).prop_map(|(shapes, scrapes)| {
        scrapes
            .into_iter()
            .enumerate()
            .map(|(k, (start, lines))| {
                let mut page = String::new();
                let at = start % shapes.len();
                let order = shapes[at..].iter().chain(&shapes[..at]);
                for ((n, e, model, le), (keep, v, spaced)) in order.zip(lines) {
                    if !keep {
                        continue;
                    }
                    let sep = if spaced { ", " } else { "," };
                    let le = ["0.1", "1", "+Inf"][*le];
                    let v = v as usize + 1000 * k;
                    page += &format!(
                        "{n}{{engine=\"{e}\"{sep}model_name=\"{model}\"{sep}le=\"{le}\"}} {v}\n"
                    );
                }
                page
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// A scrape's answer depends on that scrape and the one before it only: a mapper that
    /// has seen the whole sequence (and replays the previous scrape's lines where they
    /// are spelled the same) answers what a new mapper answers given the two, the first
    /// spelled with a trailing comma in every label set so that nothing is replayed.
    #[test]
    fn answer_depends_on_the_last_two_scrapes_only(
        pages in scrape_sequence(),
        stat in prop_oneof![Just(LatencyStat::Avg), Just(LatencyStat::P90), Just(LatencyStat::Max)],
        filter in prop_oneof![Just(None), Just(Some("a"))],
    ) {
        let mut long = pair(stat, filter);
        let mut before: Option<&String> = None;
        for page in &pages {
            let mut fresh = pair(stat, filter);
            if let Some(prev) = before {
                observe(&mut fresh, &prev.replace("\"} ", "\",} "));
            }
            prop_assert_eq!(observe(&mut long, page), observe(&mut fresh, page), "page:\n{}", page);
            before = Some(page);
        }
    }
}

/// An engine that leaves the page takes its series with it; the engines after it on the
/// page are still counted on the scrapes that follow.
#[test]
fn series_after_a_vanished_one_still_count() {
    let page = |k: f64, engines: &[u8]| {
        let mut s = String::new();
        for e in engines {
            s += &format!(
                "vllm:time_to_first_token_seconds_sum{{engine=\"{e}\"}} {}\n",
                k * 0.1
            );
            s += &format!("vllm:time_to_first_token_seconds_count{{engine=\"{e}\"}} {k}\n");
        }
        s
    };
    let mut m = pair(LatencyStat::Avg, None);
    observe(&mut m, &page(1.0, &[0, 1, 2]));
    observe(&mut m, &page(2.0, &[0, 2]));
    // Engine 2 alone grows: 10 requests, 1 s.
    let next = page(2.0, &[0]) + &page(12.0, &[2]);
    assert_eq!(observe(&mut m, &next).latency_metrics.recent_max_ttft, 100);
    // And again.
    let next = page(2.0, &[0]) + &page(22.0, &[2]);
    assert_eq!(observe(&mut m, &next).latency_metrics.recent_max_ttft, 100);
}
