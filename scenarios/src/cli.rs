//! The runner's commands (`run`, `list`, `up`), called by the thin `main.rs`.

use std::path::PathBuf;
use std::time::Instant;

use crate::cluster::{Cluster, ClusterOptions, EtcdChoice, EtcdKind};
use crate::library;
use crate::run::{run_many, RunOptions};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Scenario files, or names of built-in scenarios (default: the whole library).
    pub files: Vec<String>,
    /// Override every scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// fake, real (the Debian etcd binary on loopback) or the URL of an existing etcd.
    #[arg(long, default_value = "fake")]
    pub etcd: EtcdChoice,
    /// With `--etcd real`: members of the real cluster (1 or 3).
    #[arg(long, default_value = "1", value_parser = ["1", "3"])]
    pub etcd_cluster: String,
    /// Report directory (default: target/scenario-reports/<time>).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Also write JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Scenarios run at once.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// The vllm-sidecar binary (default: $VLLM_SIDECAR_BIN, next to this binary, or built).
    #[arg(long)]
    pub sidecar_bin: Option<PathBuf>,
    /// Run in virtual time: the sidecar's decision core and the fakes' cores in the
    /// deterministic simulator (no processes, no sockets; same seed, same events).
    #[arg(long)]
    pub sim: bool,
}

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Take the topology from this scenario (file or built-in name).
    #[arg(long, default_value = "happy-path")]
    pub scenario: String,
    /// Number of instances (overrides the scenario's).
    #[arg(long)]
    pub instances: Option<usize>,
    #[arg(long, default_value = "fake")]
    pub etcd: EtcdChoice,
    /// With `--etcd real`: members of the real cluster (1 or 3).
    #[arg(long, default_value = "1", value_parser = ["1", "3"])]
    pub etcd_cluster: String,
    #[arg(long)]
    pub sidecar_bin: Option<PathBuf>,
}

/// `--etcd real --etcd-cluster 3` means a real 3-member cluster.
fn etcd_choice(etcd: &EtcdChoice, members: &str) -> EtcdChoice {
    match (etcd, members) {
        (EtcdChoice::Real, "3") => EtcdChoice::Real3,
        (e, _) => e.clone(),
    }
}

fn default_report_dir() -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .unwrap_or(manifest)
        .join("target/scenario-reports");
    root.join(format!("run-{}", mock_kit::events::now_ms()))
}

/// `scenarios run`: exit code 0 if nothing failed, 1 if something did, 2 on bad input.
pub async fn run(args: RunArgs) -> u8 {
    let list = match library::load(&args.files) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("scenarios: {e}");
            return 2;
        }
    };
    let report = args.report.clone().unwrap_or_else(default_report_dir);
    let opts = RunOptions {
        seed: args.seed,
        etcd: etcd_choice(&args.etcd, &args.etcd_cluster),
        report_dir: Some(report.clone()),
        sidecar_bin: args.sidecar_bin.clone(),
        sidecar_overrides: Vec::new(),
        command: "cargo run -p scenarios --".into(),
    };
    let started = Instant::now();
    let outcomes = if args.sim {
        let opts = RunOptions {
            command: "cargo run -p scenarios --".into(),
            ..opts
        };
        crate::simrun::run_many_sim(&list, &opts, args.jobs.min(2), true)
    } else {
        let opts = match prepare(opts, &list) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("scenarios: {e}");
                return 1;
            }
        };
        run_many(&list, &opts, args.jobs, true).await
    };
    let wall = started.elapsed();
    println!();
    println!("STATUS   SCENARIO                           WALL INSTANCES  NOTE");
    for o in &outcomes {
        let note = match o.status.as_str() {
            "skipped" => o.skip_reason.clone().unwrap_or_default(),
            "failed" => o
                .failures()
                .next()
                .map(|v| format!("{}: {}", v.name, v.detail))
                .unwrap_or_default(),
            _ => String::new(),
        };
        println!(
            "{:8} {:30} {:>7.1}s {:>9}  {}",
            o.status.to_uppercase(),
            o.name,
            o.wall_ms as f64 / 1000.0,
            o.instances,
            note
        );
    }
    let failed: Vec<_> = outcomes.iter().filter(|o| o.status == "failed").collect();
    let largest = outcomes
        .iter()
        .filter(|o| o.status == "passed")
        .map(|o| o.instances)
        .max()
        .unwrap_or(0);
    println!(
        "\n{} scenarios: {} passed, {} failed, {} skipped in {:.1}s wall; largest passing scenario held {largest} instances",
        outcomes.len(),
        outcomes.iter().filter(|o| o.status == "passed").count(),
        failed.len(),
        outcomes.iter().filter(|o| o.status == "skipped").count(),
        wall.as_secs_f64()
    );
    println!("report: {}", report.display());
    if let Some(j) = &args.junit {
        if let Err(e) = std::fs::write(j, crate::report::junit(&outcomes)) {
            eprintln!("scenarios: cannot write {}: {e}", j.display());
        }
    }
    if failed.is_empty() {
        0
    } else {
        for o in failed {
            println!("\nFAILED {} ({}):", o.name, o.file);
            for v in o.failures() {
                let at = v
                    .first_violation_ms
                    .map(|t| format!(" at t={:.2}s", t as f64 / 1000.0))
                    .unwrap_or_default();
                println!("  {} {}{at}: {}", v.kind, v.name, v.detail);
            }
            println!(
                "  timeline: {}",
                report.join(&o.name).join("timeline.html").display()
            );
            println!("  re-run:   {}", o.rerun);
        }
        1
    }
}

/// Locate (or build) the sidecar binary once, before any scenario starts.
fn prepare(mut opts: RunOptions, list: &[library::Loaded]) -> Result<RunOptions, String> {
    let needs_sidecar = list
        .iter()
        .any(|l| !l.scenario.steps.is_empty() || l.scenario.topology.start_sidecars);
    if opts.sidecar_bin.is_none() && needs_sidecar {
        opts.sidecar_bin = Some(crate::sidecar::locate_binary()?);
    }
    Ok(opts)
}

/// `scenarios list`.
pub fn list() -> u8 {
    match library::builtin() {
        Ok(l) => {
            for s in l {
                let etcd = format!("{:?}", s.scenario.topology.etcd).to_lowercase();
                let sim = match crate::simrun::unsupported(&s.scenario) {
                    None => "both".to_string(),
                    Some(why) => format!("real only ({why})"),
                };
                println!(
                    "{:30} {:>4} inst  etcd={:8} {}\n{:30} modes: {sim}",
                    s.scenario.name,
                    s.scenario.topology.instances,
                    etcd,
                    s.scenario.description,
                    ""
                );
            }
            0
        }
        Err(e) => {
            eprintln!("scenarios: {e}");
            2
        }
    }
}

/// `scenarios up`: a cluster to poke at by hand.
pub async fn up(args: UpArgs) -> u8 {
    let mut sc = match library::load(std::slice::from_ref(&args.scenario)) {
        Ok(mut l) if !l.is_empty() => l.remove(0).scenario,
        Ok(_) => return 2,
        Err(e) => {
            eprintln!("scenarios: {e}");
            return 2;
        }
    };
    if let Some(n) = args.instances {
        sc.topology.instances = n.clamp(1, 500);
        sc.topology.overrides.clear();
    }
    let choice = etcd_choice(&args.etcd, &args.etcd_cluster);
    let kind = match EtcdKind::resolve(sc.topology.etcd, &choice) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("scenarios: {e}");
            return 1;
        }
    };
    let timeline = crate::timeline::Timeline::new();
    let opts = ClusterOptions {
        etcd: choice.clone(),
        sidecar_bin: args.sidecar_bin.clone(),
        sidecar_overrides: Vec::new(),
    };
    let cluster = match Cluster::start(&sc.name, &sc.topology, sc.seed, kind, opts, timeline).await
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("scenarios: {e}");
            return 1;
        }
    };
    for (k, v) in cluster.endpoints() {
        println!("{k:28} {v}");
    }
    println!(
        "\nmock control APIs: GET <url>/_mock/state, POST <url>/_mock/faults. Ctrl-C to stop."
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    cluster.shutdown().await;
    0
}
