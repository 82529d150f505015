//! Property tests of the decision core alone, in simulated time: a small world (an etcd
//! that keeps leases and one key, a vLLM whose health flips, a master that may answer
//! 409) answers every command after a random delay, with random outcomes, while random
//! outside events (etcd blackouts, drain, undrain, shutdown) happen. The harness checks
//! the invariants the sidecar promises after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sidecar::config::Config;
use sidecar::core::{Answer, Command, CommandId, Core, CoreConfig, Input, Registration};

const PAGE: &str = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2.0\nvllm:gpu_cache_usage_perc 0.25\n";
const END: Duration = Duration::from_secs(90);
const SLACK: Duration = Duration::from_millis(1);

/// Something from outside the sidecar, at a time.
#[derive(Debug, Clone, Copy)]
enum Outside {
    /// etcd answers nothing (every call times out) for this many ms.
    EtcdBlackout(u32),
    /// vLLM's /health fails for this many ms.
    VllmDown(u32),
    /// The master forgets the instance: its next heartbeat gets 409.
    MasterForgets,
    Drain,
    Undrain,
    Shutdown,
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    core_seed: u64,
    lease_ttl: i64,
    keepalive_ms: u64,
    heartbeat_ms: u64,
    threshold: u32,
    shutdown_ms: u64,
    events: Vec<(u32, Outside)>,
}

fn outside() -> impl Strategy<Value = Outside> {
    prop_oneof![
        3 => (100u32..15_000).prop_map(Outside::EtcdBlackout),
        2 => (100u32..10_000).prop_map(Outside::VllmDown),
        2 => Just(Outside::MasterForgets),
        1 => Just(Outside::Drain),
        1 => Just(Outside::Undrain),
        1 => Just(Outside::Shutdown),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::sample::select(vec![3i64, 6, 9]),
        prop::sample::select(vec![500u64, 1_000, 2_000]),
        prop::sample::select(vec![1_000u64, 3_000]),
        1u32..4,
        prop::sample::select(vec![1_000u64, 5_000]),
        prop::collection::vec((0u32..80_000, outside()), 0..12),
    )
        .prop_map(
            |(
                seed,
                core_seed,
                lease_ttl,
                keepalive_ms,
                heartbeat_ms,
                threshold,
                shutdown_ms,
                events,
            )| Case {
                seed,
                core_seed,
                lease_ttl,
                keepalive_ms,
                heartbeat_ms,
                threshold,
                shutdown_ms,
                events,
            },
        )
}

/// What happens next in the simulated world.
#[derive(Debug, Clone)]
enum Event {
    /// etcd / vLLM / the master acts on a command (its effect lands now).
    Process(CommandId, Command),
    /// The answer reaches the core.
    Deliver(CommandId, Answer),
    Outside(Outside),
    /// An outage ends.
    EtcdBack,
    VllmBack,
}

/// The simulated world and what the harness remembers to check the invariants.
struct World {
    rng: StdRng,
    now: Duration,
    queue: BTreeMap<(Duration, u64), Event>,
    seq: u64,
    etcd_down: u32,
    vllm_down: u32,
    master_forgets: bool,
    /// Live leases and when each expires.
    leases: BTreeMap<i64, Duration>,
    last_lease: i64,
    /// The instance key: (lease, incarnation).
    key: Option<(i64, String)>,
    /// Answers of puts not yet delivered.
    puts_in_flight: BTreeSet<CommandId>,
    /// Per lease: when it was last refreshed by a command sent (grant answer, keepalive).
    keepalive_sent: BTreeMap<i64, Duration>,
    shutdown_at: Option<(Duration, bool)>,
    exited_at: Option<Duration>,
    log: Vec<String>,
    /// The TTL etcd grants and refreshes to (the sidecar's --lease-ttl).
    ttl: i64,
}

impl World {
    fn new(seed: u64, ttl: i64) -> World {
        World {
            rng: StdRng::seed_from_u64(seed),
            now: Duration::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            etcd_down: 0,
            vllm_down: 0,
            master_forgets: false,
            leases: BTreeMap::new(),
            last_lease: 0,
            key: None,
            puts_in_flight: BTreeSet::new(),
            keepalive_sent: BTreeMap::new(),
            shutdown_at: None,
            exited_at: None,
            log: Vec::new(),
            ttl,
        }
    }

    fn at(&mut self, t: Duration, event: Event) {
        self.seq += 1;
        self.queue.insert((t, self.seq), event);
    }

    fn expire_leases(&mut self) {
        let now = self.now;
        self.leases.retain(|_, expiry| *expiry > now);
        if let Some((lease, _)) = &self.key {
            if !self.leases.contains_key(lease) {
                self.key = None;
            }
        }
    }

    /// A command goes out: it is acted on after a random delay, answered after another.
    fn send(&mut self, command: Command) {
        let id = match &command {
            Command::ProbeHealth { id }
            | Command::GrantLease { id, .. }
            | Command::PutKey { id, .. }
            | Command::Keepalive { id, .. }
            | Command::Scrape { id }
            | Command::PostHeartbeat { id, .. }
            | Command::Revoke { id, .. } => *id,
            _ => return,
        };
        let lag = Duration::from_millis(self.rng.gen_range(0..400));
        let t = self.now + lag;
        self.at(t, Event::Process(id, command));
    }

    /// The effect of a command on the world, and its answer after a further delay.
    fn process(&mut self, id: CommandId, command: Command) {
        let etcd_up = self.etcd_down == 0;
        let timeout = Duration::from_millis(1_000);
        let answer = match command {
            Command::ProbeHealth { .. } if self.vllm_down == 0 => Answer::HealthOk,
            Command::ProbeHealth { .. } => Answer::HealthFailed("503".into()),
            Command::GrantLease { ttl, .. } if etcd_up => {
                self.last_lease += 1;
                let ttl_d = Duration::from_secs(ttl.unsigned_abs());
                self.leases.insert(self.last_lease, self.now + ttl_d);
                Answer::LeaseGranted {
                    lease: self.last_lease,
                    ttl,
                }
            }
            Command::PutKey { lease, value, .. } if etcd_up => {
                if self.leases.contains_key(&lease) {
                    let meta: serde_json::Value = serde_json::from_str(&value).unwrap();
                    let inc = meta["incarnation_id"].as_str().unwrap().to_string();
                    self.key = Some((lease, inc));
                    Answer::PutDone
                } else {
                    Answer::PutFailed("lease not found".into())
                }
            }
            Command::Keepalive { lease, .. } if etcd_up => match self.leases.get_mut(&lease) {
                Some(expiry) => {
                    *expiry = self.now + Duration::from_secs(self.ttl.unsigned_abs());
                    Answer::KeepaliveTtl(self.ttl)
                }
                None if self.rng.gen_bool(0.5) => Answer::LeaseNotFound,
                None => Answer::KeepaliveTtl(0),
            },
            Command::Revoke { lease, .. } if etcd_up => {
                self.leases.remove(&lease);
                if matches!(&self.key, Some((l, _)) if *l == lease) {
                    self.key = None;
                }
                Answer::RevokeDone
            }
            Command::Scrape { .. } => match self.rng.gen_range(0..10) {
                0 => Answer::ScrapeFailed {
                    reason: "timeout".into(),
                    detail: "no page".into(),
                },
                1 => Answer::ScrapePage {
                    text: "<html>bad gateway</html>".into(),
                    openmetrics: false,
                },
                _ => Answer::ScrapePage {
                    text: PAGE.into(),
                    openmetrics: false,
                },
            },
            Command::PostHeartbeat { body, .. } => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                let inc = v["incarnation_id"].as_str().unwrap();
                let known = matches!(&self.key, Some((_, k)) if k == inc);
                if std::mem::take(&mut self.master_forgets) || !known {
                    Answer::HeartbeatStatus(409)
                } else if self.rng.gen_bool(0.1) {
                    Answer::HeartbeatFailed("connection reset".into())
                } else {
                    Answer::HeartbeatStatus(200)
                }
            }
            // etcd is down: every call times out.
            Command::GrantLease { .. } => Answer::GrantFailed("timeout".into()),
            Command::PutKey { .. } => Answer::PutFailed("timeout".into()),
            Command::Keepalive { .. } => Answer::KeepaliveFailed("timeout".into()),
            Command::Revoke { .. } => Answer::RevokeFailed("timeout".into()),
            _ => return,
        };
        let lag = if etcd_up {
            Duration::from_millis(self.rng.gen_range(0..400))
        } else {
            timeout
        };
        let t = self.now + lag;
        self.at(t, Event::Deliver(id, answer));
    }
}

impl Case {
    fn config(&self) -> CoreConfig {
        let secs = |ms: u64| format!("{}", ms as f64 / 1000.0);
        let flags = [
            "--lease-ttl".to_string(),
            self.lease_ttl.to_string(),
            "--keepalive-interval".into(),
            secs(self.keepalive_ms),
            "--heartbeat-interval".into(),
            secs(self.heartbeat_ms),
            "--health-fail-threshold".into(),
            self.threshold.to_string(),
            "--shutdown-timeout".into(),
            secs(self.shutdown_ms),
        ];
        CoreConfig::from_config(&Config::from_flags(flags).unwrap(), 0)
    }
}

/// Run one case to its end (or the core's exit), checking the invariants after every
/// step; answers the command log, for the determinism check.
fn simulate(case: &Case) -> Result<Vec<String>, TestCaseError> {
    let cfg = case.config();
    let period = cfg.keepalive_period;
    let mut core = Core::new(cfg.clone(), case.core_seed, Duration::ZERO);
    let mut w = World::new(case.seed, case.lease_ttl);
    for (ms, o) in &case.events {
        w.at(Duration::from_millis(u64::from(*ms)), Event::Outside(*o));
    }
    take_commands(&mut core, &mut w)?;
    loop {
        let next_event = w.queue.keys().next().map(|(t, _)| *t);
        let wake = core.next_wakeup();
        let t = match (next_event, wake) {
            (Some(e), Some(c)) => e.min(c),
            (Some(e), None) => e,
            (None, Some(c)) => c,
            (None, None) => break,
        };
        if t > END {
            break;
        }
        w.now = t.max(w.now);
        w.expire_leases();
        let input = match w.queue.first_key_value().map(|(k, _)| *k) {
            Some(k) if k.0 <= w.now => match w.queue.remove(&k).unwrap() {
                Event::Process(id, command) => {
                    w.process(id, command);
                    None
                }
                Event::Deliver(id, answer) => {
                    on_deliver(&mut w, &core, id, &answer)?;
                    Some(Input::Answer(id, answer))
                }
                Event::Outside(o) => outside_event(&mut w, &core, o),
                Event::EtcdBack => {
                    w.etcd_down -= 1;
                    None
                }
                Event::VllmBack => {
                    w.vllm_down -= 1;
                    None
                }
            },
            _ => Some(Input::Timer),
        };
        if let Some(input) = input {
            w.log.push(format!("{:?} {input:?}", w.now));
            let conflict = matches!(input, Input::Answer(_, Answer::HeartbeatStatus(409)));
            let registered_before = core.status().registration.is_some();
            core.handle(w.now, input);
            let issued = take_commands(&mut core, &mut w)?;
            if conflict && registered_before && core.status().registration.is_none() {
                // A 409 for the current incarnation: a new one is on its way at once.
                let grant = issued
                    .iter()
                    .any(|c| matches!(c, Command::GrantLease { .. }));
                prop_assert!(grant, "409 without an immediate re-registration");
            }
        }
        check_invariants(&w, &core, period)?;
    }
    if let Some((at, _)) = w.shutdown_at {
        let exit = w.exited_at;
        let i = w
            .log
            .iter()
            .position(|l| l.ends_with(" Shutdown"))
            .unwrap_or(0);
        let tail = &w.log[i.saturating_sub(10)..(i + 20).min(w.log.len())];
        prop_assert!(
            exit.is_some(),
            "shut down at {at:?} but never exited: {tail:#?}"
        );
        let exit = exit.unwrap_or_default();
        prop_assert!(
            exit <= at + cfg.shutdown_timeout + SLACK,
            "exit at {exit:?} after shutdown at {at:?}"
        );
    }
    Ok(w.log)
}

fn outside_event(w: &mut World, core: &Core, o: Outside) -> Option<Input> {
    match o {
        Outside::EtcdBlackout(ms) => {
            w.etcd_down += 1;
            let t = w.now + Duration::from_millis(u64::from(ms));
            w.at(t, Event::EtcdBack);
            None
        }
        Outside::VllmDown(ms) => {
            w.vllm_down += 1;
            let t = w.now + Duration::from_millis(u64::from(ms));
            w.at(t, Event::VllmBack);
            None
        }
        Outside::MasterForgets => {
            w.master_forgets = true;
            None
        }
        Outside::Drain => Some(Input::Drain),
        Outside::Undrain => Some(Input::Undrain),
        Outside::Shutdown => {
            if w.shutdown_at.is_none() {
                let had_lease = core.registration().lease().is_some();
                w.shutdown_at = Some((w.now, had_lease));
            }
            Some(Input::Shutdown)
        }
    }
}

/// Bookkeeping when an answer reaches the core.
fn on_deliver(
    w: &mut World,
    core: &Core,
    id: CommandId,
    answer: &Answer,
) -> Result<(), TestCaseError> {
    w.puts_in_flight.remove(&id);
    if let Answer::LeaseGranted { lease, .. } = answer {
        // The grant refreshed it: the keepalive clock of this lease starts now.
        w.keepalive_sent.insert(*lease, w.now);
    }
    let _ = core;
    Ok(())
}

/// Everything the core issued, sent into the world; checks made at issue time.
fn take_commands(core: &mut Core, w: &mut World) -> Result<Vec<Command>, TestCaseError> {
    let mut issued = Vec::new();
    while let Some(command) = core.poll_command() {
        w.log.push(format!("{:?} -> {command:?}", w.now));
        match &command {
            Command::PutKey { id, .. } => {
                prop_assert!(w.puts_in_flight.is_empty(), "two puts of the key in flight");
                w.puts_in_flight.insert(*id);
            }
            Command::Keepalive { lease, .. } => {
                w.keepalive_sent.insert(*lease, w.now);
            }
            Command::PostHeartbeat { body, .. } => {
                let status = core.status();
                prop_assert!(status.healthy, "heartbeat while the last probe failed");
                let current = status.registration.map(|r| r.incarnation);
                prop_assert!(current.is_some(), "heartbeat while not registered");
                let current = current.unwrap_or_default();
                let field = format!("\"incarnation_id\":\"{current}\"");
                prop_assert!(body.contains(&field), "heartbeat for another incarnation");
            }
            Command::Revoke { .. } => {}
            Command::Exit { .. } => w.exited_at = Some(w.now),
            _ => {}
        }
        issued.push(command.clone());
        w.send(command);
    }
    if let Some((at, true)) = w.shutdown_at {
        if at == w.now && w.exited_at.is_none() {
            let revoking = matches!(core.registration(), Registration::Revoking { .. });
            prop_assert!(revoking, "shutdown with a lease but no revoke");
        }
    }
    Ok(issued)
}

fn check_invariants(w: &World, core: &Core, period: Duration) -> Result<(), TestCaseError> {
    if let Registration::Registered(lease) = core.registration() {
        // The key, if in etcd, is on the lease the core believes holds it.
        if let Some((on, _)) = &w.key {
            prop_assert_eq!(*on, lease.id, "the key is on another lease than the core's");
        }
        // Keepalives at most a period (<= TTL/3) apart while registered.
        let last = w.keepalive_sent.get(&lease.id).copied().unwrap_or_default();
        prop_assert!(
            w.now <= last + period + SLACK,
            "no keepalive of lease {} since {:?}, now {:?}",
            lease.id,
            last,
            w.now
        );
        prop_assert!(period <= Duration::from_secs(lease.ttl.unsigned_abs()) / 3 + SLACK);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_in_random_runs(case in case()) {
        simulate(&case)?;
    }

    #[test]
    fn same_seed_and_inputs_give_the_same_commands(case in case()) {
        let first = simulate(&case)?;
        let second = simulate(&case)?;
        prop_assert_eq!(first, second);
    }
}

/// An etcd blackout shorter than the lease's remaining TTL keeps one incarnation.
#[test]
fn a_short_etcd_blackout_keeps_the_incarnation() {
    let case = Case {
        seed: 1,
        core_seed: 2,
        lease_ttl: 6,
        keepalive_ms: 2_000,
        heartbeat_ms: 3_000,
        threshold: 3,
        shutdown_ms: 5_000,
        events: vec![
            (20_000, Outside::EtcdBlackout(2_000)),
            (40_000, Outside::EtcdBlackout(3_500)),
        ],
    };
    let log = simulate(&case).unwrap();
    let grants = log.iter().filter(|l| l.contains("-> GrantLease")).count();
    assert_eq!(grants, 1, "{log:#?}");
}
