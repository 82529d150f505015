//! The fleet benchmark: N sidecars with the defaults (TTL 6 s, keepalive
//! 2 s, heartbeat 3 s), each with its mock-vllm under steady open-loop load, one
//! mock-etcd, one mock-master watching it; one random fault every few simulated seconds
//! and the fleet invariants checked every simulated second.
//! Reports simulated instance-hours per wall minute and per CPU minute, peak memory
//! (VmHWM) and the invariant violations found. Measures; asserts nothing about speed.
//!
//! ```text
//! cargo run --release -p sim --example fleet -- \
//!     [INSTANCES] [SIM_SECONDS] [DIALECT] [PART] [RPS] [LOG] [FAULT_EVERY_S] [CHECKS]
//! ```
//!
//! DIALECT is mock-vllm's (`compact`, `v0.10`, ...); PART is `fleet`, `page` or `both`
//! (the default), to profile one part alone, or `pages`: a digest of the pages of every
//! dialect (a renderer that changes must keep it); RPS the completions per second on each
//! vLLM (default 2); LOG is `count` (the default: events counted, no line built),
//! `digest` (every line written as JSON and digested, as the determinism tests do) or
//! `both`; FAULT_EVERY_S the simulated seconds between two faults (default 5, 0: none);
//! CHECKS the instances whose invariants are checked per simulated second (default 250).
//!
//! The faults (seeded, drawn from the example's own generator so that the cluster's
//! draws stay the world's): a vLLM's health down for 10 s, garbage lines in 3 pages, a
//! page that hangs, a blackhole on a sidecar → etcd link for 4 s, an instance's lease
//! expired in etcd, a sidecar killed and started again 2 s later, and (one draw in 40)
//! the master restarting and re-listing etcd.
//!
//! The invariants, read from the cores (never through a link), each instance checked
//! every `max(1, N/CHECKS)` simulated seconds (a rotating slice, so that the checks cost
//! about the same per simulated second at any fleet size):
//! - one key: etcd holds at most one instance key for the instance's name, whatever its
//!   type prefix (the whole listing, once a simulated minute);
//! - single incarnation: when the master tracks the instance (not SUSPECT) and etcd holds
//!   its key, the incarnations match; a difference is a violation when two checks at
//!   least 1.5 s apart (the scenarios' `incarnation_grace`, the watch's way to the
//!   master) see the same one;
//! - no stale heartbeat accepted: the master's count of accepted (200) heartbeats for the
//!   instance does not grow between two checks while the master tracks an incarnation
//!   that etcd had replaced more than the grace before the first of them.
//!
//! Checks are excused for 1.5 s + 3 s after a master restart, as the scenarios' verdicts
//! excuse a master that was restarted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mock_master::InstanceState;
use mock_vllm::{Dialect, Fault, Health};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sidecar::config::Config;
use sidecar::core::{CoreConfig, HeartbeatBody};
use sidecar::mapping::Mapper;
use sidecar::prom::Format;
use sim::etcd_node::EtcdNode;
use sim::load::Load;
use sim::master_node::MasterNode;
use sim::node::Server;
use sim::vllm_node::VllmNode;
use sim::{EventLog, LinkFault, NodeId, Reply, Request, World};

/// The scenarios' `incarnation_grace`.
const GRACE: Duration = Duration::from_millis(1500);
/// How long after a master restart its lag is excused (grace + 3 s, as the verdicts).
const MASTER_EXCUSE: Duration = Duration::from_millis(4500);

struct Args {
    n: u32,
    secs: u64,
    dialect: Dialect,
    rps: f64,
    fault_every: u64,
    /// Instances checked per simulated second (at least each one every N/CHECKS s).
    checks: u32,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let a = Args {
        n: arg(0).and_then(|a| a.parse().ok()).unwrap_or(1000),
        secs: arg(1).and_then(|a| a.parse().ok()).unwrap_or(3600),
        dialect: arg(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(Dialect::Compact),
        rps: arg(4).and_then(|a| a.parse().ok()).unwrap_or(2.0),
        fault_every: arg(6).and_then(|a| a.parse().ok()).unwrap_or(5),
        checks: arg(7).and_then(|a| a.parse().ok()).unwrap_or(250),
    };
    let part = arg(3).unwrap_or("both");
    let log = arg(5).unwrap_or("count");
    if part == "pages" {
        page_digests();
        return;
    }
    if part != "page" {
        if log == "digest" || log == "both" {
            fleet(&a, EventLog::digest_only());
        }
        if log != "digest" {
            fleet(&a, EventLog::counting());
        }
    }
    if part != "fleet" {
        page_path(a.dialect);
    }
    println!("peak RSS (VmHWM): {}", vm_hwm());
}

fn fleet(a: &Args, log: EventLog) {
    let started = Instant::now();
    let cpu_start = cpu_secs();
    let mut world = build(a, log);
    let built = started.elapsed();
    let mut faults = Faults::new(a);
    let mut checker = Checker::new(a.n, a.checks);
    let mut check_time = Duration::ZERO;
    for s in 1..=a.secs {
        let now = Duration::from_secs(s);
        faults.inject_until(&mut world, now);
        world.run_until(now);
        let t = Instant::now();
        checker.check(&mut world, faults.master_restarted);
        check_time += t.elapsed();
    }
    let wall = started.elapsed();
    let cpu = cpu_secs() - cpu_start;
    report(a, &world, &faults, &checker, wall, cpu, built, check_time);
}

fn build(a: &Args, log: EventLog) -> World {
    let mut world = World::new(1, log);
    let etcd = EtcdNode::new(mock_etcd::Config::default(), 1);
    world.add_server(NodeId::Etcd, Box::new(etcd));
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    for i in 0..a.n {
        master.route(&addr(i), NodeId::Vllm(i));
    }
    world.add_server(NodeId::Master, Box::new(master));
    for i in 0..a.n {
        let vllm = VllmNode::with_dialect(a.dialect, u64::from(i), Duration::ZERO);
        let until = Duration::from_secs(a.secs);
        if a.rps > 0.0 {
            let load =
                Load::new(NodeId::Vllm(i), &vllm, a.rps, until, "hello fleet", 32).expect("load");
            world.add_load(Duration::ZERO, load);
        }
        world.add_server(NodeId::Vllm(i), Box::new(vllm));
        world.add_sidecar(&config(i));
    }
    world
}

#[allow(clippy::too_many_arguments)]
fn report(
    a: &Args,
    world: &World,
    faults: &Faults,
    checker: &Checker,
    wall: Duration,
    cpu: f64,
    built: Duration,
    check_time: Duration,
) {
    let (n, secs, dialect) = (a.n, a.secs, a.dialect);
    let instance_hours = f64::from(n) * secs as f64 / 3600.0;
    let registered = world
        .sidecars()
        .iter()
        .filter(|s| s.core().status().registration.is_some())
        .count();
    let active = world
        .server_as::<MasterNode>(NodeId::Master)
        .map_or(0, |m| m.instances().views(world.now()).len());
    println!("fleet: {registered} sidecars registered, {active} instances known to the master at the end");
    println!(
        "fleet: {} faults injected {:?}; {} instance checks, violations {:?}",
        faults.count, faults.by_kind, checker.checked, checker.violations
    );
    for v in &checker.first {
        println!("  violation: {v}");
    }
    println!(
        "fleet: {n} instances x {secs} simulated s ({dialect}, {} rps): {:.2} s wall, {cpu:.2} s CPU ({:.2} s to build, {:.2} s checking invariants), {} events, {} log lines (digest {:016x}); {:.0} instance-hours per wall minute, {:.0} per CPU minute",
        a.rps,
        wall.as_secs_f64(),
        built.as_secs_f64(),
        check_time.as_secs_f64(),
        world.events(),
        world.log().lines(),
        world.log().digest(),
        instance_hours / (wall.as_secs_f64() / 60.0),
        instance_hours / (cpu / 60.0),
    );
}

/// Instance `i`'s sidecar config: the flags are parsed once and only the address
/// differs (a parse is a fifth of a millisecond: at 10,000 instances, seconds of
/// start-up and restarts that are no part of the world).
fn config(i: u32) -> Config {
    static BASE: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
    let base = BASE
        .get_or_init(|| Config::from_flags(["--register-addr", addr(0).as_str()]).expect("flags"));
    Config {
        register_addr: addr(i),
        ..base.clone()
    }
}

/// One random fault every `every` simulated seconds, scheduled ahead as world actions.
struct Faults {
    rng: StdRng,
    n: u32,
    every: u64,
    next: u64,
    count: u64,
    by_kind: BTreeMap<&'static str, u64>,
    /// When the master last restarted (shared with the checker through `fleet`).
    master_restarted: Option<Duration>,
}

impl Faults {
    fn new(a: &Args) -> Faults {
        Faults {
            rng: StdRng::seed_from_u64(0xfa17),
            n: a.n,
            every: a.fault_every,
            next: a.fault_every,
            count: 0,
            by_kind: BTreeMap::new(),
            master_restarted: None,
        }
    }

    /// Schedule the faults due up to `until` (the checker is told when the master
    /// restarts).
    fn inject_until(&mut self, world: &mut World, until: Duration) {
        while self.every > 0 && self.n > 0 && Duration::from_secs(self.next) <= until {
            let at = Duration::from_secs(self.next);
            self.next += self.every;
            let i = self.rng.gen_range(0..self.n);
            let kind = self.pick(world, at, i);
            self.count += 1;
            *self.by_kind.entry(kind).or_default() += 1;
        }
    }

    fn pick(&mut self, world: &mut World, at: Duration, i: u32) -> &'static str {
        let vllm = NodeId::Vllm(i);
        let draw = self.rng.gen_range(0..40);
        match draw % 6 {
            _ if draw == 39 => {
                world.at(at, restart_master);
                self.master_restarted = Some(at);
                "master_restart"
            }
            0 => {
                world.at(at, move |w| set_health(w, vllm, Health::Down));
                world.at(at + Duration::from_secs(10), move |w| {
                    set_health(w, vllm, Health::Up)
                });
                "vllm_down_10s"
            }
            1 => {
                world.at(at, move |w| {
                    if let Some(v) = w.server_as_mut::<VllmNode>(vllm) {
                        v.add_fault(Fault::MetricsGarbage { lines: 5 }, Some(3));
                    }
                });
                "metrics_garbage_x3"
            }
            2 => {
                world.at(at, move |w| {
                    if let Some(v) = w.server_as_mut::<VllmNode>(vllm) {
                        v.add_fault(Fault::MetricsHang, Some(1));
                    }
                });
                "metrics_hang_x1"
            }
            3 => {
                let (c, s) = (NodeId::Sidecar(i), NodeId::Etcd);
                world.set_link_at(at, c, s, LinkFault::Blackhole);
                world.set_link_at(at + Duration::from_secs(4), c, s, LinkFault::Heal);
                "etcd_blackhole_4s"
            }
            4 => {
                world.at(at, move |w| expire_lease(w, i));
                "lease_expired"
            }
            _ => {
                world.at(at, move |w| w.kill_sidecar(i));
                world.at(at + Duration::from_secs(2), move |w| {
                    w.restart_sidecar(i, &config(i))
                });
                "sidecar_kill_restart_2s"
            }
        }
    }
}

fn set_health(w: &mut World, vllm: NodeId, h: Health) {
    if let Some(v) = w.server_as_mut::<VllmNode>(vllm) {
        v.set_health(h);
    }
}

/// Expire the lease that holds sidecar `i`'s key (as `etcd_expire_lease` does).
fn expire_lease(w: &mut World, i: u32) {
    let lease = w
        .sidecars()
        .get(i as usize)
        .and_then(|s| s.core().status().registration)
        .map(|r| r.lease);
    if let (Some(lease), Some(etcd)) = (lease, w.server_as_mut::<EtcdNode>(NodeId::Etcd)) {
        etcd.core().expire_lease(lease);
    }
}

/// The master process restarts: it forgets every instance, lists etcd again and
/// watches from there, over its link (the scenarios' `master_restart { relist = true }`).
fn restart_master(w: &mut World) {
    let now = w.now();
    if let Some(m) = w.server_as_mut::<MasterNode>(NodeId::Master) {
        m.restart(now, true);
    }
}

/// What the checker remembers of one instance.
struct Seen {
    /// The instance's name (its address).
    name: String,
    /// Its etcd key.
    key: String,
    /// The etcd key's mod revision and incarnation at the last check.
    etcd: Option<(i64, String)>,
    /// Incarnations in etcd, in the order first seen, with when.
    incarnations: Vec<(String, Duration)>,
    /// The (etcd, master) incarnations that differed, and the check that first saw it.
    split: Option<(String, String, Duration)>,
    /// Accepted heartbeats at the last check.
    accepted: u64,
    /// When the instance was last checked.
    last_check: Duration,
}

/// The fleet invariants, each instance checked every `stride` simulated seconds.
struct Checker {
    seen: Vec<Seen>,
    stride: u32,
    tick: u32,
    checked: u64,
    violations: BTreeMap<&'static str, u64>,
    first: Vec<String>,
}

impl Checker {
    fn new(n: u32, checks: u32) -> Checker {
        Checker {
            seen: (0..n)
                .map(|i| Seen {
                    name: addr(i),
                    key: format!("XLLM:DEFAULT:{}", addr(i)),
                    etcd: None,
                    incarnations: Vec::new(),
                    split: None,
                    accepted: 0,
                    last_check: Duration::ZERO,
                })
                .collect(),
            stride: (n / checks.max(1)).max(1),
            tick: 0,
            checked: 0,
            violations: BTreeMap::new(),
            first: Vec::new(),
        }
    }

    fn check(&mut self, world: &mut World, master_restarted: Option<Duration>) {
        let now = world.now();
        let excused = master_restarted.is_some_and(|t| now < t + MASTER_EXCUSE);
        let slice = self.tick % self.stride;
        self.tick += 1;
        let n = self.seen.len() as u32;
        for i in (slice..n).step_by(self.stride as usize) {
            self.check_one(world, i, now, excused);
        }
        if now.as_secs().is_multiple_of(60) {
            self.one_key_each(world, now);
        }
    }

    /// Every instance name has at most one key in etcd, whatever its type prefix (the
    /// whole listing, once a simulated minute).
    fn one_key_each(&mut self, world: &mut World, now: Duration) {
        let Some(Ok((_, kvs))) = world
            .server_as::<EtcdNode>(NodeId::Etcd)
            .map(|e| e.list_prefix(b"XLLM:"))
        else {
            return;
        };
        let mut keys: BTreeMap<&str, u32> = BTreeMap::new();
        for kv in &kvs {
            if let Some(name) = mock_master::instances::instance_name("", &kv.key) {
                *keys.entry(name).or_default() += 1;
            }
        }
        let doubled: Vec<String> = keys
            .into_iter()
            .filter(|(_, k)| *k > 1)
            .map(|(name, k)| format!("{name}: {k} keys at {now:?}"))
            .collect();
        for d in doubled {
            self.violate("one_key", d);
        }
    }

    fn check_one(&mut self, world: &mut World, i: u32, now: Duration, excused: bool) {
        self.checked += 1;
        let Some(seen) = self.seen.get_mut(i as usize) else {
            return;
        };
        let (name, key) = (&seen.name, &seen.key);
        // The key read straight from etcd's store (a range of one key, without
        // building the request and copying the answer); parsed when it changed.
        let prev = seen.etcd.take();
        seen.etcd = world.server_as_mut::<EtcdNode>(NodeId::Etcd).and_then(|e| {
            let kv = e.core().data().get(key.as_bytes())?;
            match prev {
                Some(p) if p.0 == kv.mod_revision => Some(p),
                _ => mock_master::instances::InstanceMeta::parse(&kv.value)
                    .ok()
                    .map(|m| (kv.mod_revision, m.incarnation_id)),
            }
        });
        if let Some((_, inc)) = &seen.etcd {
            if !seen.incarnations.iter().any(|(x, _)| x == inc) {
                seen.incarnations.push((inc.clone(), now));
            }
        }
        let view = world
            .server_as::<MasterNode>(NodeId::Master)
            .and_then(|m| m.instances().get(name));
        let accepted = view
            .as_ref()
            .and_then(|v| v.heartbeats.get(&200).copied())
            .unwrap_or(0);
        // Heartbeats accepted since the last check: all of them after `since`.
        let grew = accepted > seen.accepted;
        let since = seen.last_check;
        seen.accepted = accepted;
        seen.last_check = now;
        let tracked = view
            .as_ref()
            .filter(|v| v.state != InstanceState::Suspect)
            .map(|v| v.incarnation);
        let split = match (&seen.etcd, tracked) {
            (Some((_, e)), Some(m)) if e != m && !excused => Some((e.clone(), m.to_string())),
            _ => None,
        };
        // A split seen at two checks at least the grace apart (the same split).
        seen.split = match (split, seen.split.take()) {
            (Some((e, m)), Some((e0, m0, t))) if e == e0 && m == m0 => Some((e, m, t)),
            (Some((e, m)), _) => Some((e, m, now)),
            (None, _) => None,
        };
        let mut found = Vec::new();
        if let Some((e, m, t)) = &seen.split {
            if now >= *t + GRACE {
                found.push((
                    "single_incarnation",
                    format!(
                        "{name}: etcd has {e}, the master tracks {m}, since {t:?} (at {now:?})"
                    ),
                ));
            }
        }
        if let Some(m) = view.as_ref().map(|v| v.incarnation) {
            let pos = seen.incarnations.iter().position(|(x, _)| x == m);
            let newer = pos.and_then(|p| seen.incarnations.get(p + 1));
            if let Some((newer, t)) = newer {
                if grew && !excused && since >= *t + GRACE {
                    found.push(("no_stale_heartbeat_accepted", format!("{name}: heartbeats of {m} accepted between {since:?} and {now:?}, etcd replaced it by {newer} at {t:?}")));
                }
            }
        }
        for (kind, detail) in found {
            self.violate(kind, detail);
        }
    }

    fn violate(&mut self, kind: &'static str, detail: String) {
        *self.violations.entry(kind).or_default() += 1;
        if self.first.len() < 10 {
            self.first.push(format!("{kind}: {detail}"));
        }
    }
}

/// One scrape and heartbeat, all real code, timed over many rounds.
fn page_path(dialect: Dialect) {
    let config = Config::from_flags(["--register-addr", "10.0.0.1:8000"]).expect("flags");
    let mut mapper = Mapper::new(CoreConfig::from_config(&config, 0).mapper);
    let mut vllm = VllmNode::with_dialect(dialect, 0, Duration::ZERO);
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    let format = if dialect == Dialect::OpenMetrics {
        Format::OpenMetrics
    } else {
        Format::Prometheus
    };
    let rounds = 20_000u32;
    let (mut render, mut map, mut beat, mut bytes) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0);
    for r in 0..rounds {
        let now = Duration::from_secs(u64::from(r) * 3);
        let t = Instant::now();
        let Some(Reply::Page { body, .. }) = vllm.serve(now, NodeId::Sidecar(0), &Request::Metrics)
        else {
            panic!("mock-vllm gave no page");
        };
        let text = body.into_text().expect("a UTF-8 page");
        let t1 = Instant::now();
        let metrics = mapper.observe_text(&text, format);
        let body = HeartbeatBody::new("10.0.0.1:8000", "vllm-0", metrics).to_json();
        let t2 = Instant::now();
        let request = Request::Heartbeat {
            body,
            token: String::new(),
        };
        let _ = master.serve(now, NodeId::Sidecar(0), &request);
        let t3 = Instant::now();
        render += t1 - t;
        map += t2 - t1;
        beat += t3 - t2;
        bytes += text.len();
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(rounds);
    let total = per(render + map + beat);
    // 1,200 scrapes and heartbeats per instance-hour at a 3 s heartbeat.
    let ceiling = 60.0 / (total * 1e-6 * 1200.0);
    println!(
        "page path ({dialect}, {} bytes/page): render {:.1} us, parse+map+body {:.1} us, master read {:.1} us; {:.1} us per heartbeat -> at most {:.0} instance-hours per wall minute on one core from this path alone",
        bytes / rounds as usize,
        per(render),
        per(map),
        per(beat),
        total,
        ceiling,
    );
}

/// A digest of the pages every dialect writes under load over 10 simulated minutes
/// (one with the non-finite fault): a renderer that changes is compared by it.
fn page_digests() {
    let mut rng = StdRng::seed_from_u64(7);
    for dialect in [
        Dialect::Compact,
        Dialect::V0,
        Dialect::V0_10,
        Dialect::V0_11,
        Dialect::OpenMetrics,
    ] {
        let mut vllm = VllmNode::with_dialect(dialect, 3, Duration::ZERO);
        let load =
            Load::new(NodeId::Vllm(0), &vllm, 3.0, Duration::MAX, "digest", 24).expect("load");
        let (mut digest, mut bytes) = (0xcbf2_9ce4_8422_2325u64, 0usize);
        let mut now = Duration::ZERO;
        for s in 0..600u64 {
            while now < Duration::from_secs(s) {
                now += load.next_gap(&mut rng);
                vllm.submit(now, load.request());
            }
            if s == 300 {
                vllm.add_fault(Fault::MetricsNonfinite, Some(1));
            }
            let Some(Reply::Page { body, .. }) =
                vllm.serve(now, NodeId::Sidecar(0), &Request::Metrics)
            else {
                continue;
            };
            bytes += body.len();
            for &b in body.as_bytes() {
                digest = (digest ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        println!("pages ({dialect}): {bytes} bytes, digest {digest:016x}");
    }
}

/// User + system CPU seconds of this process (the machine is shared: wall time alone
/// says little).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn addr(i: u32) -> String {
    format!("10.{}.{}.{}:8000", i >> 16, (i >> 8) & 255, i & 255)
}

fn vm_hwm() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}
