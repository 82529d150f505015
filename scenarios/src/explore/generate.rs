//! Seed → a random cluster and fault schedule.
//!
//! Why this shape: the search is only as good as the corners it can reach, so every
//! draw covers the whole valid range (timers within what the sidecar accepts, tokens on
//! and off, every metrics dialect, fault durations from a blip to several lease TTLs,
//! faults from the first second, while sidecars still wait for vLLM, to the end) and
//! the vocabulary is the scenario language's own actions. Only what the simulation
//! cannot run is left out (`sim_actions::unsupported` says why; a test checks that no
//! schedule needs it): `etcd_kill` / `etcd_restart` need a real 3-member cluster. Every
//! draw comes from `StdRng`s seeded by the seed alone, so a seed is a schedule, on every
//! machine.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::schedule::{dur, Fault, Schedule, Topo};
use super::swarm::{Draw, Mix};

/// Fault kinds the explorer draws from: the actions that start a fault (the actions
/// that end one, e.g. `vllm_restart` or `sidecar_start`, come with them), and `load`
/// (open-loop requests: not a fault, but what makes the metrics move).
pub const FAULT_KINDS: [&str; 19] = [
    "vllm_health",
    "vllm_fault",
    "vllm_crash",
    "vllm_counter_reset",
    "vllm_sleep",
    "etcd_fault",
    "etcd_expire_lease",
    "etcd_lose_data",
    "master_restart",
    "master_token",
    "master_fault",
    "link",
    "sidecar_kill",
    "sidecar_stop",
    "sidecar_drain",
    "pause",
    "throttle",
    "master_kill",
    "load",
];

/// The metrics dialects (`spec::Dialect` names), the newest first.
pub const DIALECTS: [&str; 7] = [
    "v0_34",
    "v0_33",
    "v0_11",
    "v0_10",
    "v0",
    "open_metrics",
    "compact",
];

/// What a sweep draws from (also a summary's record of it: the flags it was given).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Params {
    /// At most this many instances, at least half of it (`--instances`).
    pub max_instances: usize,
    /// Each schedule's simulated length, in ms (`--duration`).
    pub duration_ms: u64,
    /// Fault kinds allowed, a subset of [`FAULT_KINDS`] (`--faults`).
    pub faults: Vec<String>,
    /// One dialect for every schedule (`--dialect`); `None`: drawn per seed.
    pub dialect: Option<String>,
    /// How each schedule's faults are drawn from the allowed kinds (`--draw`); older
    /// summaries: uniform.
    #[serde(default = "Draw::legacy")]
    pub draw: Draw,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            max_instances: 5,
            duration_ms: 60_000,
            faults: FAULT_KINDS.iter().map(|s| s.to_string()).collect(),
            dialect: None,
            draw: Draw::default(),
        }
    }
}

/// Parse `--faults a,b,c` (names from [`FAULT_KINDS`]).
pub fn parse_fault_list(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !FAULT_KINDS.contains(&name) {
            return Err(format!(
                "--faults: unknown fault kind `{name}` (known: {})",
                FAULT_KINDS.join(", ")
            ));
        }
        if !out.iter().any(|x| x == name) {
            out.push(name.to_string());
        }
    }
    if out.is_empty() {
        return Err("--faults: name at least one fault kind".into());
    }
    Ok(out)
}

/// The schedule of `seed`: its cluster, then its faults (under [`Draw::Swarm`], from the
/// seed's [`Mix`] only), then a quiet tail (see [`quiet_tail`]).
pub fn generate(seed: u64, p: &Params) -> Schedule {
    // A fixed tweak so explore's draws are not the simulation's own (same seed).
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6578_706c_6f72_6521);
    let mut topo = topology(&mut rng, p);
    topo.master_replicas = master_replicas(seed);
    let mix = match p.draw {
        Draw::Swarm => Mix::draw(seed, &p.faults),
        Draw::Uniform => None,
    };
    let max_faults = (p.duration_ms / 15_000).clamp(2, 40) as usize;
    let max_faults = match &mix {
        Some(m) => ((max_faults as f64 * m.rate).round() as usize).clamp(1, 120),
        None => max_faults,
    };
    let n = rng.gen_range(1..=max_faults);
    let mut faults: Vec<Fault> = Vec::new();
    let mut busy: Vec<(String, u64, u64)> = Vec::new();
    for _ in 0..n {
        // A few tries to place a fault that does not overlap one of its own group.
        for _ in 0..3 {
            if let Some(f) = fault(&mut rng, p, mix.as_ref(), &topo) {
                let group = group_of(&f);
                let overlaps = busy
                    .iter()
                    .any(|(g, a, b)| *g == group && f.at_ms <= *b && f.end_ms() >= *a);
                if group.is_empty() || !overlaps {
                    if !group.is_empty() {
                        busy.push((group, f.at_ms, f.end_ms()));
                    }
                    faults.push(f);
                    break;
                }
            }
        }
    }
    faults.sort_by_key(|f| f.at_ms);
    let mut schedule = Schedule {
        seed,
        topo,
        faults,
        duration_ms: p.duration_ms,
        mix,
    };
    etcd_access(seed, &mut schedule);
    schedule.duration_ms = quiet_tail(&schedule);
    schedule
}

/// The run's length: `--duration`, or longer so that it ends with a quiet period as long
/// as the recovery bound after the last fault ends (`crate::recovery`), in which every
/// instance must be back; rounded up to a second.
pub fn quiet_tail(s: &Schedule) -> u64 {
    let last_end = s.faults.iter().map(Fault::end_ms).max().unwrap_or(0);
    let t = &s.topo;
    let bound = crate::recovery::Timers {
        lease_ttl_ms: t.lease_ttl * 1000,
        keepalive_ms: t.keepalive_ms,
        heartbeat_ms: t.heartbeat_ms,
        health_timeout_ms: t.health_timeout_ms,
        etcd_timeout_ms: t.etcd_timeout_ms,
    }
    .bound_ms();
    s.duration_ms.max((last_end + bound).div_ceil(1000) * 1000)
}

/// How sidecars reach etcd: one to three endpoints (a link fault on the sidecar → etcd
/// link then hits one endpoint or all of them) and etcd auth on or off. Drawn from a
/// stream of its own, after everything else, so that adding these draws left every
/// other draw of a seed as it was.
fn etcd_access(seed: u64, s: &mut Schedule) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6574_6364_2d61_6363);
    s.topo.etcd_endpoints = match rng.gen_range(0..20) {
        0..=11 => 1,
        12..=16 => 2,
        _ => 3,
    };
    // Idle token TTLs from a blip to a minute, log-uniform: a short one expires between
    // a sidecar's calls, so it re-authenticates often.
    s.topo.etcd_token_ttl_ms = rng
        .gen_bool(0.25)
        .then(|| round(rng.gen_range(500f64.ln()..60_000f64.ln()).exp() as u64, 100));
    let endpoints = s.topo.etcd_endpoints;
    for f in &mut s.faults {
        let Some(link) = f.action.get_mut("link").and_then(Value::as_object_mut) else {
            continue;
        };
        let to_etcd = link.get("link").and_then(Value::as_str) == Some("sidecar_etcd");
        if to_etcd && endpoints > 1 && rng.gen_bool(0.8) {
            link.insert("endpoint".into(), json!(rng.gen_range(0..endpoints)));
        }
    }
}

/// A quarter of the clusters run three xllm-service replicas that elect a master (the
/// sidecars following it), drawn from a stream of its own.
fn master_replicas(seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6d61_7374_6572_7321);
    if rng.gen_bool(0.25) {
        3
    } else {
        1
    }
}

/// Timers within the ranges the sidecar accepts (`lease_ttl > keepalive_interval`), as
/// operators set them: a keepalive a third to a sixth of the TTL.
fn topology(rng: &mut StdRng, p: &Params) -> Topo {
    let max = p.max_instances.max(1);
    let lease_ttl = rng.gen_range(2..=10u64);
    let keepalive_ms = round(lease_ttl * 1000 / rng.gen_range(3..=6u64), 100).max(200);
    Topo {
        instances: rng.gen_range(max.div_ceil(2)..=max),
        lease_ttl,
        keepalive_ms,
        heartbeat_ms: round(rng.gen_range(300..=3000), 100),
        health_timeout_ms: round(rng.gen_range(300..=3000), 100),
        health_fail_threshold: rng.gen_range(1..=5),
        etcd_timeout_ms: round(rng.gen_range(500..=3000), 100),
        token: rng.gen_bool(0.5).then(|| "tok-a".to_string()),
        dialect: match &p.dialect {
            Some(d) => d.clone(),
            None => DIALECTS.choose(rng).copied().unwrap_or(DIALECTS[0]).into(),
        },
        kv_capacity_tokens: rng
            .gen_bool(0.5)
            .then(|| round(rng.gen_range(7.0f64..14.0).exp() as u64, 100)),
        // 1 to 20 ms each way, log-uniform: a registration, a keepalive or a heartbeat
        // then takes long enough for a fault or another exchange to land in the middle.
        link_delay_ms: rng
            .gen_bool(0.7)
            .then(|| rng.gen_range(0.0f64..20f64.ln()).exp() as u64)
            .map(|ms| ms.max(1)),
        // Drawn by `etcd_access`, from its own stream.
        etcd_endpoints: 1,
        etcd_token_ttl_ms: None,
        master_replicas: 1,
    }
}

fn round(v: u64, to: u64) -> u64 {
    (v / to) * to
}

/// A duration from a blip to several TTLs, log-uniform, in 100 ms steps; times `scale`
/// (a swarm mix's), still at most `max_ms`.
fn fault_len(rng: &mut StdRng, max_ms: u64, scale: f64) -> u64 {
    let (lo, hi) = (200f64.ln(), (max_ms.max(300) as f64).ln());
    let len = round(rng.gen_range(lo..hi).exp() as u64, 100).max(100);
    if scale == 1.0 {
        return len;
    }
    round(((len as f64 * scale) as u64).min(max_ms.max(100)), 100).max(100)
}

/// Faults of one group must not overlap on one target (a second kill of a killed
/// sidecar is an error of the schedule, not of the system).
fn group_of(f: &Fault) -> String {
    let group = match f.kind() {
        "sidecar_kill" | "sidecar_stop" | "sidecar_drain" => "sidecar",
        "vllm_health" | "vllm_crash" | "vllm_sleep" => "vllm",
        // One stop at a time per process: a throttle's continue would end a pause.
        "pause" | "throttle" => match stopped_process(f) {
            Some("master") => return "stop:master".into(),
            Some(p) => p,
            None => return String::new(),
        },
        "master_token" => "token",
        "master_kill" => "master_kill",
        "etcd_fault" => "etcd_fault",
        _ => return String::new(),
    };
    let who: Vec<String> = f.instances().iter().map(|i| i.to_string()).collect();
    format!("{group}:{}", who.join(","))
}

/// One random fault: of an allowed kind picked uniformly, or of the mix's kinds by weight.
fn fault(rng: &mut StdRng, p: &Params, mix: Option<&Mix>, topo: &Topo) -> Option<Fault> {
    let (kind, scale) = match mix {
        Some(m) => m.pick(rng).map(|k| (k.kind.clone(), k.duration_scale))?,
        None => (p.faults.choose(rng)?.clone(), 1.0),
    };
    let at_ms = round(rng.gen_range(0..p.duration_ms * 9 / 10 + 1), 100);
    let len = fault_len(rng, (p.duration_ms - at_ms).min(30_000), scale);
    let end_at = at_ms + len;
    let inst = format!("i{}", rng.gen_range(0..topo.instances));
    let d = dur(len);
    let with_end = |action: Value, end: Value| Fault {
        at_ms,
        action,
        end: Some((end_at, end)),
    };
    let plain = |action: Value| Fault {
        at_ms,
        action,
        end: None,
    };
    Some(match kind.as_str() {
        "vllm_health" => {
            let health = if rng.gen_bool(0.7) { "down" } else { "hang" };
            with_end(
                json!({"vllm_health": {"instance": inst, "health": health}}),
                json!({"vllm_health": {"instance": inst, "health": "up"}}),
            )
        }
        "vllm_fault" => plain(
            json!({"vllm_fault": {"instance": inst, "fault": vllm_fault(rng), "duration": d}}),
        ),
        "vllm_crash" => with_end(json!({"vllm_crash": inst}), json!({"vllm_restart": inst})),
        "vllm_counter_reset" => plain(json!({"vllm_counter_reset": inst})),
        "vllm_sleep" => {
            let level = rng.gen_range(0..=2u8);
            with_end(
                json!({"vllm_sleep": {"instance": inst, "level": level}}),
                json!({"vllm_wake": inst}),
            )
        }
        "etcd_fault" => etcd_fault(rng, at_ms, end_at, &d),
        "etcd_expire_lease" => plain(json!({"etcd_expire_lease": or_all(rng, 0.15, inst)})),
        "etcd_lose_data" => plain(json!({"etcd_lose_data": {"reset_revision": rng.gen_bool(0.5)}})),
        "master_restart" => plain(json!({"master_restart": {"relist": rng.gen_bool(0.5)}})),
        "master_token" => {
            let back = topo.token.clone().unwrap_or_default();
            let rotate = back.is_empty() || rng.gen_bool(0.7);
            let new = if rotate { "tok-b" } else { "" };
            with_end(json!({"master_token": new}), json!({"master_token": back}))
        }
        "master_fault" => plain(master_fault(rng, &d)),
        "link" => plain(link(rng, inst, &d)),
        "load" => plain(load(rng, inst, &d)),
        "sidecar_kill" | "sidecar_stop" => with_end(
            json!({ kind.as_str(): inst }),
            json!({"sidecar_start": {"instance": inst}}),
        ),
        "sidecar_drain" => with_end(
            json!({"sidecar_drain": inst}),
            json!({"sidecar_undrain": inst}),
        ),
        "master_kill" if topo.master_replicas < 2 => return None,
        "master_kill" => {
            let k = rng.gen_range(0..topo.master_replicas);
            with_end(
                json!({"master_kill": k}),
                json!({"master_restart": {"replica": k, "relist": true}}),
            )
        }
        "pause" => {
            plain(json!({"pause": {"process": stoppable(rng), "instance": inst, "duration": d}}))
        }
        "throttle" => plain(throttle(rng, inst, &d)),
        _ => return None,
    })
}

/// `all` with probability `p`, else `inst`.
fn or_all(rng: &mut StdRng, p: f64, inst: String) -> String {
    if rng.gen_bool(p) {
        "all".into()
    } else {
        inst
    }
}

/// Which process a pause or a throttle stops: mostly a sidecar (whose lease is at
/// stake), else its vLLM or the master.
fn stoppable(rng: &mut StdRng) -> &'static str {
    match rng.gen_range(0..20) {
        0..=11 => "sidecar",
        12..=16 => "vllm",
        _ => "master",
    }
}

/// The process a pause or a throttle names.
fn stopped_process(f: &Fault) -> Option<&str> {
    let (_, body) = f.action.as_object()?.iter().next()?;
    body.get("process")?.as_str()
}

/// A throttle for `d`: a period from 200 ms to 4 s (log-uniform), running a twentieth
/// to a half of it (at least 10 ms).
fn throttle(rng: &mut StdRng, inst: String, d: &str) -> Value {
    let period = rng.gen_range(200f64.ln()..4000f64.ln()).exp() as u64;
    let run = ((period as f64) * rng.gen_range(0.05..0.5)) as u64;
    json!({"throttle": {
        "process": stoppable(rng),
        "instance": inst,
        "duration": d,
        "run": dur(run.max(10)),
        "period": dur(period.max(20)),
    }})
}

/// A fault of the master's heartbeat endpoint for `d`: an error status or latency.
fn master_fault(rng: &mut StdRng, d: &str) -> Value {
    let fault = if rng.gen_bool(0.6) {
        let status = *[500u16, 503, 409, 404].choose(rng).unwrap_or(&503);
        json!({"heartbeat_status": {"status": status}})
    } else {
        json!({"latency": {"ms": rng.gen_range(50..=4000u64)}})
    };
    json!({"master_fault": {"fault": fault, "duration": d}})
}

/// Open-loop completions for `d`, on one instance's vLLM or routed by the master.
fn load(rng: &mut StdRng, inst: String, d: &str) -> Value {
    let max_tokens = rng.gen_range(16..=512u32);
    let mut load =
        json!({"rps": rng.gen_range(1..=60u32), "duration": d, "max_tokens": max_tokens});
    if rng.gen_bool(0.5) {
        load["instance"] = Value::String(inst);
    }
    json!({ "load": load })
}

fn vllm_fault(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..8) {
        0 => json!({"metrics_status": {"status": *[500u16, 503, 404].choose(rng).unwrap_or(&500)}}),
        1 => json!("metrics_hang"),
        2 => json!({"metrics_slow": {"bytes_per_sec": rng.gen_range(512..=65_536u64)}}),
        3 => json!({"metrics_truncate": {"at_bytes": rng.gen_range(10..=4000u64)}}),
        4 => json!({"metrics_garbage": {"lines": rng.gen_range(1..=50u32)}}),
        5 => json!("metrics_nonfinite"),
        6 => json!({"metrics_huge": {"bytes": rng.gen_range(1u64 << 20..=64u64 << 20)}}),
        _ => json!("metrics_stale"),
    }
}

/// etcd gateway faults on one path, a prefix, or every path; a hang is released at its
/// end.
fn etcd_fault(rng: &mut StdRng, at_ms: u64, end_at: u64, d: &str) -> Fault {
    const PATHS: [&str; 7] = [
        "/v3/lease/grant",
        "/v3/lease/keepalive",
        "/v3/kv/put",
        "/v3/lease/revoke",
        "/v3/watch",
        "/v3/lease/*",
        "*",
    ];
    let path = PATHS.choose(rng).copied().unwrap_or("*");
    let (fault, hang) = match rng.gen_range(0..3) {
        0 => (
            json!({"fail": {"path": path, "status": *[503u16, 500, 404].choose(rng).unwrap_or(&503)}}),
            false,
        ),
        1 => (
            json!({"latency": {"path": path, "ms": rng.gen_range(50..=5000u64)}}),
            false,
        ),
        _ => (json!({"hang": {"path": path}}), true),
    };
    Fault {
        at_ms,
        action: json!({"etcd_fault": {"fault": fault, "duration": d}}),
        end: hang.then(|| (end_at, json!({"etcd_release_hung": true}))),
    }
}

/// A fault on one link kind: latency, bandwidth, blackhole, reset, refuse or a one-way
/// partition, healed after `d`.
fn link(rng: &mut StdRng, inst: String, d: &str) -> Value {
    let kind = *[
        "sidecar_etcd",
        "sidecar_master",
        "sidecar_vllm",
        "master_etcd",
    ]
    .choose(rng)
    .unwrap_or(&"sidecar_etcd");
    let fault = match rng.gen_range(0..7) {
        0 => {
            json!({"latency": {"ms": rng.gen_range(20..=3000u64), "jitter_ms": rng.gen_range(0..=500u64)}})
        }
        1 => json!({"bandwidth": {"bytes_per_sec": rng.gen_range(1000..=200_000u64)}}),
        2 => json!("blackhole"),
        3 => json!("reset"),
        4 => json!("refuse"),
        5 => json!({"partition": {"direction": "to_target"}}),
        _ => json!({"partition": {"direction": "from_target"}}),
    };
    let who = or_all(rng, 0.1, inst);
    json!({"link": {"link": kind, "instance": who, "fault": fault, "duration": d}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Scenario;

    #[test]
    fn a_seed_is_a_schedule() {
        let p = Params::default();
        assert_eq!(generate(42, &p), generate(42, &p));
        assert_ne!(generate(42, &p), generate(43, &p));
    }

    #[test]
    fn every_schedule_parses_and_stays_in_range() {
        let p = Params {
            max_instances: 6,
            duration_ms: 120_000,
            ..Params::default()
        };
        let mut kinds = std::collections::BTreeSet::new();
        let (mut several, mut auth, mut one_endpoint) = (0, 0, 0);
        for seed in 0..300 {
            let s = generate(seed, &p);
            several += usize::from(s.topo.etcd_endpoints > 1);
            auth += usize::from(s.topo.etcd_token_ttl_ms.is_some());
            for f in &s.faults {
                if let Some(e) = f.action.pointer("/link/endpoint").and_then(Value::as_u64) {
                    assert!((e as usize) < s.topo.etcd_endpoints, "{f:?}");
                    one_endpoint += 1;
                }
            }
            assert!((3..=6).contains(&s.topo.instances));
            assert!(s.topo.keepalive_ms < s.topo.lease_ttl * 1000);
            assert!(!s.faults.is_empty());
            for f in &s.faults {
                kinds.insert(f.kind().to_string());
                assert!(f.at_ms < p.duration_ms);
                assert!(f.instances().iter().all(|i| *i < s.topo.instances));
            }
            let text = s.to_toml("d", &[]);
            let sc = Scenario::parse("x.toml", &text)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
            assert_eq!(crate::simrun::unsupported(&sc), None, "{text}");
        }
        assert_eq!(kinds.len(), FAULT_KINDS.len(), "{kinds:?}");
        assert!(
            several > 60 && auth > 40 && one_endpoint > 0,
            "{several} {auth} {one_endpoint}"
        );
    }

    #[test]
    fn etcd_access_reaches_the_scenario_and_shrinks_to_one_endpoint() {
        let p = Params::default();
        let seed = (0..500)
            .find(|&seed| {
                let s = generate(seed, &p);
                s.topo.etcd_token_ttl_ms.is_some()
                    && s.faults
                        .iter()
                        .any(|f| f.action.pointer("/link/endpoint").is_some())
            })
            .expect("a schedule with auth and a one-endpoint link fault");
        let s = generate(seed, &p);
        let sc = Scenario::parse("x.toml", &s.to_toml("d", &[])).unwrap();
        assert_eq!(sc.topology.etcd_endpoints, s.topo.etcd_endpoints);
        assert_eq!(
            sc.topology.etcd_user.as_deref(),
            Some(super::super::schedule::ETCD_USER)
        );
        let one = s.single_etcd_endpoint();
        assert_eq!(one.topo.etcd_endpoints, 1);
        assert!(one
            .faults
            .iter()
            .all(|f| f.action.pointer("/link/endpoint").is_none()));
        assert_eq!(one.faults.len(), s.faults.len());
        Scenario::parse("x.toml", &one.to_toml("d", &[])).unwrap();
    }

    #[test]
    fn a_swarm_seed_draws_only_its_mix_and_ends_quiet() {
        let p = Params {
            draw: Draw::Swarm,
            ..Params::default()
        };
        let (mut alone, mut many_of_one) = (0, 0);
        for seed in 0..300 {
            let s = generate(seed, &p);
            assert_eq!(s, generate(seed, &p));
            let mix = s.mix.clone().expect("a swarm schedule records its mix");
            let on = mix.kind_names();
            assert!(s.faults.iter().all(|f| on.contains(&f.kind())), "{s:?}");
            alone += usize::from(on.len() == 1);
            many_of_one += usize::from(on.len() == 1 && s.faults.len() >= 5);
            let last = s.faults.iter().map(Fault::end_ms).max().unwrap_or(0);
            assert!(
                s.duration_ms >= p.duration_ms && s.duration_ms > last,
                "{s:?}"
            );
            assert_eq!(quiet_tail(&s), s.duration_ms);
        }
        assert!(alone > 5 && many_of_one > 0, "{alone} {many_of_one}");
        // The same seed's cluster under both draws; no mix under the uniform one.
        let u = generate(
            7,
            &Params {
                draw: Draw::Uniform,
                ..Params::default()
            },
        );
        assert_eq!(u.topo, generate(7, &p).topo);
        assert_eq!(u.mix, None);
    }

    #[test]
    fn the_fault_list_limits_the_kinds() {
        let p = Params {
            faults: parse_fault_list("link, vllm_crash").unwrap(),
            ..Params::default()
        };
        for seed in 0..50 {
            for f in generate(seed, &p).faults {
                assert!(["link", "vllm_crash"].contains(&f.kind()), "{f:?}");
            }
        }
        assert!(parse_fault_list("link,nope").unwrap_err().contains("nope"));
        assert!(parse_fault_list("").is_err());
    }
}
