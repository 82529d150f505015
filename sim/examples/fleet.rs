//! A first fleet benchmark: N sidecars with the defaults (TTL 6 s, keepalive 2 s,
//! heartbeat 3 s), each with its mock-vllm under a steady 2 completions per second,
//! one mock-master, for a simulated hour.
//! Reports simulated instance-hours per wall minute and peak memory (VmHWM). Measures;
//! asserts nothing about speed.
//!
//! ```text
//! cargo run --release -p sim --example fleet -- [INSTANCES] [SIM_SECONDS] [DIALECT] [PART]
//! ```
//!
//! DIALECT is mock-vllm's (`compact`, `v0.10`, ...); PART is `fleet`, `page` or `both`
//! (the default), to profile one part alone. The cluster: mock-etcd's core, mock-master
//! watching it, each sidecar with its mock-vllm. The second part times the per-heartbeat
//! path alone, all of it real code: mock-vllm writes a page, the sidecar's mapping
//! reads it, the sidecar's heartbeat body is read by mock-master's heartbeat rules.

use std::time::{Duration, Instant};

use mock_vllm::Dialect;
use sidecar::config::Config;
use sidecar::core::{CoreConfig, HeartbeatBody};
use sidecar::mapping::Mapper;
use sidecar::prom::Format;
use sim::etcd_node::EtcdNode;
use sim::load::Load;
use sim::master_node::MasterNode;
use sim::node::Server;
use sim::vllm_node::VllmNode;
use sim::{EventLog, NodeId, Reply, Request, World};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3600);
    let dialect: Dialect = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(Dialect::Compact);
    let part = args.get(3).map_or("both", String::as_str);
    if part != "page" {
        fleet(n, secs, dialect, EventLog::digest_only());
        fleet(n, secs, dialect, EventLog::counting());
    }
    if part != "fleet" {
        page_path(dialect);
    }
    println!("peak RSS (VmHWM): {}", vm_hwm());
}

fn fleet(n: u32, secs: u64, dialect: Dialect, log: EventLog) {
    let started = Instant::now();
    let cpu_start = cpu_secs();
    let mut world = World::new(1, log);
    let etcd = EtcdNode::new(mock_etcd::Config::default(), 1);
    world.add_server(NodeId::Etcd, Box::new(etcd));
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    for i in 0..n {
        master.route(&addr(i), NodeId::Vllm(i));
    }
    world.add_server(NodeId::Master, Box::new(master));
    world.open_master_watch().expect("watch");
    for i in 0..n {
        let vllm = VllmNode::with_dialect(dialect, u64::from(i), Duration::ZERO);
        let until = Duration::from_secs(secs);
        let load = Load::new(NodeId::Vllm(i), &vllm, 2.0, until, "hello fleet", 32).expect("load");
        world.add_load(Duration::ZERO, load);
        world.add_server(NodeId::Vllm(i), Box::new(vllm));
        let addr = addr(i);
        let config = Config::from_flags(["--register-addr", addr.as_str()]).expect("flags");
        world.add_sidecar(&config);
    }
    let built = started.elapsed();
    world.run_until(Duration::from_secs(secs));
    let wall = started.elapsed();
    let cpu = cpu_secs() - cpu_start;
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
        "fleet: {n} instances x {secs} simulated s ({dialect}): {:.2} s wall, {cpu:.2} s CPU ({:.2} s to build), {} events, {} log lines (digest {:016x}); {:.0} instance-hours per wall minute, {:.0} per CPU minute",
        wall.as_secs_f64(),
        built.as_secs_f64(),
        world.events(),
        world.log().lines(),
        world.log().digest(),
        instance_hours / (wall.as_secs_f64() / 60.0),
        instance_hours / (cpu / 60.0),
    );
}

/// One scrape and heartbeat, all real code, timed over many rounds.
fn page_path(dialect: Dialect) {
    let config = Config::from_flags(["--register-addr", "10.0.0.1:8000"]).expect("flags");
    let mut mapper = Mapper::new(CoreConfig::from_config(&config, 0).mapper);
    let mut vllm = VllmNode::with_dialect(dialect, 0, Duration::ZERO);
    let mut master = MasterNode::new(mock_master::Config::default(), Duration::ZERO);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
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
        let Some(Reply::Page { body, .. }) =
            vllm.serve(now, NodeId::Sidecar(0), &Request::Metrics, &mut rng)
        else {
            panic!("mock-vllm gave no page");
        };
        let text = String::from_utf8(body).expect("a UTF-8 page");
        let t1 = Instant::now();
        let metrics = mapper.observe_text(&text, format);
        let body = HeartbeatBody::new("10.0.0.1:8000", "vllm-0", metrics).to_json();
        let t2 = Instant::now();
        let request = Request::Heartbeat {
            body,
            token: String::new(),
        };
        let _ = master.serve(now, NodeId::Sidecar(0), &request, &mut rng);
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
