//! The library in virtual time (`scenarios run --sim`): every scenario the simulation can
//! express passes, one that cannot is skipped with its reason, a seed replays to the same
//! `events.jsonl` byte for byte, and deliberately wrong sidecar configurations fail the
//! scenarios that check what they break (the mutation test of `library.rs`, here in
//! virtual time). The invariants are judged at every change of what is observed, so a
//! violation shorter than a sample period is found at the event that made it.

use scenarios::library;
use scenarios::report::{Outcome, Status};
use scenarios::run::RunOptions;
use scenarios::simrun::{run_many_sim, run_scenario_sim};
use scenarios::verdict::VerdictKind;

#[test]
fn every_expressible_scenario_passes_in_sim() {
    let list = library::builtin().expect("the built-in library parses");
    let outcomes = run_many_sim(&list, &RunOptions::default(), 2, false);
    assert_eq!(outcomes.len(), list.len());
    let mut failed = Vec::new();
    for o in &outcomes {
        match o.status {
            Status::Skipped => assert!(
                o.skip_reason.as_deref().is_some_and(|r| !r.is_empty()),
                "{} skipped without a reason",
                o.name
            ),
            Status::Passed => {}
            _ => failed.push(format!("{}:\n{}\n    re-run: {}", o.name, show(o), o.rerun)),
        }
    }
    assert!(failed.is_empty(), "failed in sim:\n{}", failed.join("\n"));
    let ran = outcomes
        .iter()
        .filter(|o| o.status == Status::Passed)
        .count();
    assert!(ran >= 34, "only {ran} scenarios ran in sim");
    let big = outcomes
        .iter()
        .find(|o| o.name == "many-instances")
        .expect("many-instances");
    assert_eq!(big.status, Status::Passed);
}

fn events_of(name: &str, seed: u64) -> Vec<u8> {
    let l = library::load(&[name.to_string()])
        .expect("built-in")
        .remove(0);
    let dir = std::env::temp_dir().join(format!(
        "scenarios-sim-{}-{name}-{seed}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let opts = RunOptions {
        seed: Some(seed),
        report_dir: Some(dir.clone()),
        ..RunOptions::default()
    };
    let o = run_scenario_sim(&l.scenario, &l.file, &opts);
    assert_eq!(o.status, Status::Passed, "{}", show(&o));
    let bytes = std::fs::read(dir.join(name).join("events.jsonl")).expect("events.jsonl");
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn a_seed_replays_to_the_same_events_byte_for_byte() {
    for name in ["partition-short", "master-restart", "metrics-counter-reset"] {
        let a = events_of(name, 7);
        let b = events_of(name, 7);
        assert!(a.len() > 1000, "{name}: events.jsonl has {} bytes", a.len());
        assert!(
            a == b,
            "{name}: two runs with seed 7 wrote different events"
        );
        let c = events_of(name, 8);
        assert!(a != c, "{name}: seeds 7 and 8 wrote the same events");
    }
}

fn run_mutated(name: &str, overrides: &[(&str, &str)]) -> Outcome {
    let l = library::load(&[name.to_string()])
        .expect("built-in")
        .remove(0);
    let opts = RunOptions {
        sidecar_overrides: overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..RunOptions::default()
    };
    run_scenario_sim(&l.scenario, &l.file, &opts)
}

fn failed_on(o: &Outcome, needle: &str) -> bool {
    o.failures()
        .any(|v| v.name.contains(needle) || v.detail.contains(needle))
}

fn show(o: &Outcome) -> String {
    o.failures()
        .map(|v| format!("    {} {}: {}", v.kind, v.name, v.detail))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The same wrong configurations as the real-mode mutation test, the same verdicts.
#[test]
fn mutated_sidecars_fail_their_scenarios_in_sim() {
    let threshold = run_mutated("vllm-dies", &[("--health-fail-threshold", "1000")]);
    assert_eq!(threshold.status, Status::Failed);
    assert!(
        failed_on(&threshold, "key revoked after 3 failed probes"),
        "{}",
        show(&threshold)
    );

    let ttl = run_mutated("sigkill", &[("--lease-ttl", "30")]);
    assert_eq!(ttl.status, Status::Failed);
    assert!(failed_on(&ttl, "key gone within TTL"), "{}", show(&ttl));

    let token = run_mutated("token-rotation", &[("--internal-token", "not-the-token")]);
    assert_eq!(token.status, Status::Failed);
    assert!(
        failed_on(&token, "heartbeat(s) accepted"),
        "{}",
        show(&token)
    );

    // Refused flags: the sidecar "exits 2" at once, so nothing becomes ACTIVE; the
    // first failing verdict says so, with the parser's message.
    let keepalive = run_mutated("happy-path", &[("--keepalive-interval", "5")]);
    assert_eq!(keepalive.status, Status::Failed);
    let first = keepalive.failures().next().expect("a failure");
    assert_eq!(first.kind, VerdictKind::Exit, "{}", show(&keepalive));
    assert!(
        first.detail.contains("exited with code 2")
            && first
                .detail
                .contains("must be greater than --keepalive-interval"),
        "{}",
        show(&keepalive)
    );
    assert!(
        keepalive
            .failures()
            .any(|v| v.kind == VerdictKind::Await && v.detail.contains("ACTIVE")),
        "{}",
        show(&keepalive)
    );
}

/// Beyond real mode's 500: the same file runs in sim, and real mode declines it.
#[test]
fn more_instances_than_real_mode_allows_run_in_sim() {
    let text = r#"
name = "six-hundred"
description = "600 instances register and heartbeat"
[topology]
instances = 600
dialect = "compact"
[[step]]
await = { all_active = true }
within = "20s"
"#;
    let sc = scenarios::spec::Scenario::parse("six-hundred.toml", text).expect("parses");
    let o = run_scenario_sim(&sc, "six-hundred.toml", &RunOptions::default());
    assert_eq!(o.status, Status::Passed, "{}", show(&o));
    let real = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(scenarios::run::run_scenario(
            &sc,
            "six-hundred.toml",
            &RunOptions::default(),
            None,
        ));
    assert_eq!(real.status, Status::Skipped);
    assert!(real.skip_reason.is_some_and(|r| r.contains("--sim")));
}

/// `link_delay` slows every simulated exchange: the key is in etcd once a health probe
/// and a grant made their round trips and the put its way in (five one-way delays).
#[test]
fn a_link_delay_slows_every_exchange() {
    let registered_at = |delay: &str| {
        let text = format!(
            "name = \"slow-links\"\ndescription = \"d\"\n[topology]\nlink_delay = \"{delay}\"\n[[step]]\nawait = {{ registered = \"i0\" }}\nwithin = \"5s\"\n"
        );
        let sc = scenarios::spec::Scenario::parse("slow-links.toml", &text).expect("parses");
        let o = run_scenario_sim(&sc, "slow-links.toml", &RunOptions::default());
        assert_eq!(o.status, Status::Passed, "{}", show(&o));
        o.samples
            .iter()
            .find(|s| s.instances[0].etcd.is_some())
            .map(|s| s.t_ms)
            .expect("registered")
    };
    assert!(registered_at("0.2ms") < 100);
    let slow = registered_at("100ms");
    assert!(slow >= 500, "registered at {slow} ms");
}

/// With the sidecar's own defaults (TTL 6 s, keepalives every 2 s), a throttled sidecar
/// keeps its lease as long as each stop is shorter than the lease's margin: running
/// 100 ms in every 400 ms (a quarter of a CPU) down to 100 ms in every 4 s (1/40); at
/// 100 ms in 8 s each stop outlasts the TTL and the lease is lost.
#[test]
fn a_throttled_sidecar_keeps_its_lease_down_to_a_fortieth_of_a_cpu() {
    let run = |period: &str| {
        let text = format!(
            r#"
name = "throttled"
description = "throttled for a minute with the sidecar's default timers"
[topology]
lease_ttl = 6
keepalive_interval = "2s"
heartbeat_interval = "3s"
health_timeout = "3s"
[[step]]
await = {{ all_active = true }}
within = "5s"
[[step]]
at = "5s"
action = {{ throttle = {{ process = "sidecar", instance = "i0", duration = "60s", run = "100ms", period = "{period}" }} }}
[[step]]
at = "5s"
await = {{ registered = "i0" }}
within = "1s"
hold = "60s"
[[step]]
await = {{ incarnations = {{ instance = "i0", at_most = 1 }} }}
within = "1s"
"#
        );
        let sc = scenarios::spec::Scenario::parse("throttled.toml", &text).expect("parses");
        let o = run_scenario_sim(&sc, "throttled.toml", &RunOptions::default());
        eprintln!("run 100ms in every {period}: {:?}\n{}", o.status, show(&o));
        o
    };
    for period in ["400ms", "1s", "2s", "4s"] {
        let o = run(period);
        assert_eq!(
            o.status,
            Status::Passed,
            "100ms in every {period}:\n{}",
            show(&o)
        );
    }
    let o = run("8s");
    assert!(
        failed_on(&o, "held, then stopped holding"),
        "a 7.9 s stop must outlast a 6 s lease:\n{}",
        show(&o)
    );
}

/// A shell whose clock stops while the process is stopped (it counts its own ticks)
/// trusts a keepalive answer older than the TTL after a long pause: the library's
/// long-pause scenario catches the dead incarnation's heartbeats; the short pause and
/// a correct clock pass.
#[test]
fn a_clock_that_stops_while_paused_fails_the_long_pause_scenario() {
    let run = |name: &str, planted_bug| {
        let l = library::load(&[name.to_string()])
            .expect("built-in")
            .remove(0);
        let opts = RunOptions {
            planted_bug,
            ..RunOptions::default()
        };
        run_scenario_sim(&l.scenario, &l.file, &opts)
    };
    let bug = Some(sim::planted::PlantedBug::ClockStopsWhilePaused);
    let long = run("sidecar-paused-past-lease", bug);
    assert!(
        failed_on(&long, "no_stale_heartbeat_accepted"),
        "{}",
        show(&long)
    );
    let short = run("sidecar-paused-within-lease", bug);
    assert_eq!(short.status, Status::Passed, "{}", show(&short));
    let correct = run("sidecar-paused-past-lease", None);
    assert_eq!(correct.status, Status::Passed, "{}", show(&correct));
}

/// Three replicas, replica 0 killed and started again as a standby: sidecars posting
/// to the one configured URL (replica 0) are answered 200 by a standby whose numbers
/// never reach routing, which `heartbeats_to_elected_master` calls out; sidecars that
/// follow the MASTER key pass.
#[test]
fn heartbeats_to_a_standby_are_found_and_following_avoids_them() {
    let run = |args: &str| {
        let text = format!(
            r#"
name = "standby"
description = "replica 0 killed and back as a standby"
[topology]
instances = 2
sidecar_args = [{args}]
[topology.master]
replicas = 3
[[step]]
await = {{ all_active = true }}
within = "8s"
[[step]]
action = {{ master_kill = 0 }}
[[step]]
await = {{ new_master = true }}
within = "6s"
[[step]]
action = {{ master_restart = {{ replica = 0 }} }}
[[step]]
at = "25s"
await = {{ all_active = true }}
within = "5s"
"#
        );
        let sc = scenarios::spec::Scenario::parse("standby.toml", &text).expect("parses");
        run_scenario_sim(&sc, "standby.toml", &RunOptions::default())
    };
    let fixed = run("");
    assert!(
        failed_on(&fixed, "heartbeats_to_elected_master"),
        "{}",
        show(&fixed)
    );
    let following = run(r#""--follow-master", "--master-read-interval", "2""#);
    assert_eq!(following.status, Status::Passed, "{}", show(&following));
}

/// One instance loaded for a second, its sidecar reporting the KV cache usage as a
/// percentage: the master stores an impossible usage only while the load runs, and
/// never at a sample period 10 s apart.
const SCENARIO: &str = r#"
name = "short-load"
description = "a second of load between two samples"
[topology]
instances = 1
heartbeat_interval = "200ms"
max_num_seqs = 4
kv_capacity_tokens = 2000
[[step]]
at = "3s"
action = { load = { instance = "i0", rps = 200, duration = "1s", max_tokens = 64 } }
[[step]]
at = "12s"
await = { all_active = true }
within = "5s"
"#;

#[test]
fn a_violation_shorter_than_a_sample_period_is_found_at_its_event() {
    let sc = scenarios::spec::Scenario::parse("short-load.toml", SCENARIO).expect("parses");
    let dir = std::env::temp_dir().join(format!("every-change-{}", std::process::id()));
    let opts = RunOptions {
        planted_bug: Some(sim::planted::PlantedBug::CacheUsageAsPercent),
        sample_period: Some(std::time::Duration::from_secs(10)),
        report_dir: Some(dir.clone()),
        ..RunOptions::default()
    };
    let o = run_scenario_sim(&sc, "short-load.toml", &opts);
    let events = std::fs::read_to_string(dir.join("short-load").join("events.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
    let events = events.expect("events.jsonl written");
    assert_eq!(o.status, Status::Failed);
    let v = o
        .verdicts
        .iter()
        .find(|v| v.name == "heartbeats_sane")
        .expect("heartbeats_sane judged");
    assert!(!v.passed, "{v:?}");
    let t = v.first_violation_ms.expect("a time");
    assert!(v.first_violation_event.is_some(), "{v:?}");
    assert!((3000..5000).contains(&t), "found at {t} ms: {v:?}");
    // At the sample periods the usage was sane: sampling alone would not have seen it.
    let periodic = o.samples.iter().filter(|s| s.event.is_none());
    for s in periodic {
        let usage = s.instances.get(0).and_then(|x| x.gpu_cache);
        assert!(usage.is_none_or(|u| u <= 1.0), "t={}: {usage:?}", s.t_ms);
    }
    // The violating event is a heartbeat the master accepted at that very millisecond.
    let accepted_then = events.lines().any(|l| {
        let e: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
        e["t_ms"] == t
            && e["source"] == "master"
            && e["kind"] == "heartbeat"
            && e["detail"]["status"] == 200
    });
    assert!(accepted_then, "no heartbeat accepted at t={t} ms");
}

/// A keepalive sent just as the sidecar is stopped is answered while it is stopped; the
/// answer comes in when it continues, long after the lease's TTL. It is no refresh of
/// the time since: the sidecar gives that lease up and registers anew, and the master
/// accepts no heartbeat of the old incarnation (found by `explore`, seed 112, once
/// the invariants were judged at every change).
#[test]
fn a_keepalive_answer_held_by_a_pause_refreshes_nothing() {
    let text = r#"
name = "held-keepalive"
description = "a pause past the lease with a keepalive in flight"
seed = 112
[topology]
instances = 1
lease_ttl = 10
link_delay = "3ms"
[[step]]
at = "5s"
action = { pause = { duration = "22200ms", instance = "i0", process = "sidecar" } }
[[step]]
at = "30s"
await = { all_active = true }
within = "5s"
"#;
    let sc = scenarios::spec::Scenario::parse("held-keepalive.toml", text).expect("parses");
    let o = run_scenario_sim(&sc, "held-keepalive.toml", &RunOptions::default());
    assert_eq!(o.status, Status::Passed, "{}", show(&o));
}
