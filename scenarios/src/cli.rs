//! The runner's commands (`run`, `list`, `up`), called by the thin `main.rs`.

use std::path::PathBuf;
use std::time::Instant;

use crate::library;
use crate::profile::Profile;
use crate::real_cluster::{ClusterOptions, EtcdChoice, EtcdKind, RealCluster};
use crate::report::default_report_dir;
use crate::report::Status;
use crate::run::{etcd_choice, prepare, run_many, RunOptions};

/// The flags of `scenarios run`.
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
    /// Report directory (default: `target/scenario-reports/<time>`).
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
    /// Another sidecar: a profile file or a built-in profile's name (real mode; see
    /// `conform`).
    #[arg(long, conflicts_with_all = ["sidecar_cmd", "sim"])]
    pub profile: Option<String>,
    /// Another sidecar as a command line, given our flags (real mode).
    #[arg(long, conflicts_with = "sim")]
    pub sidecar_cmd: Option<String>,
    /// Run in virtual time: the sidecar's decision core and the fakes' cores in the
    /// deterministic simulator (no processes, no sockets; same seed, same events).
    #[arg(long)]
    pub sim: bool,
    /// TEST-ONLY, with --sim: plant this bug in every simulated sidecar (see
    /// sim::planted), to replay what `explore --planted-bug` found.
    #[arg(long, requires = "sim")]
    pub planted_bug: Option<sim::planted::PlantedBug>,
}

/// The flags of `scenarios up`.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Take the topology from this scenario (file or built-in name).
    #[arg(long, default_value = "happy-path")]
    pub scenario: String,
    /// Number of instances (overrides the scenario's).
    #[arg(long)]
    pub instances: Option<usize>,
    /// fake, real (the Debian etcd binary on loopback) or the URL of an existing etcd.
    #[arg(long, default_value = "fake")]
    pub etcd: EtcdChoice,
    /// With `--etcd real`: members of the real cluster (1 or 3).
    #[arg(long, default_value = "1", value_parser = ["1", "3"])]
    pub etcd_cluster: String,
    /// The vllm-sidecar binary (default: $VLLM_SIDECAR_BIN, next to this binary, or built).
    #[arg(long)]
    pub sidecar_bin: Option<PathBuf>,
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
    let profile = match Profile::from_args(&args.profile, &args.sidecar_cmd) {
        Ok(p) => p.map(std::sync::Arc::new),
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
        profile,
        sidecar_overrides: Vec::new(),
        command: "cargo run -p scenarios --".into(),
        planted_bug: args.planted_bug,
        sample_period: None,
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
        let note = match o.status {
            Status::Skipped => o.skip_reason.clone().unwrap_or_default(),
            Status::Failed => o
                .failures()
                .next()
                .map(|v| format!("{}: {}", v.name, v.detail))
                .unwrap_or_default(),
            _ => String::new(),
        };
        println!(
            "{:8} {:30} {:>7.1}s {:>9}  {}",
            o.status.as_str().to_uppercase(),
            o.name,
            o.wall_ms as f64 / 1000.0,
            o.instances,
            note
        );
    }
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|o| o.status == Status::Failed)
        .collect();
    let largest = outcomes
        .iter()
        .filter(|o| o.status == Status::Passed)
        .map(|o| o.instances)
        .max()
        .unwrap_or(0);
    println!(
        "\n{} scenarios: {} passed, {} failed, {} skipped in {:.1}s wall; largest passing scenario held {largest} instances",
        outcomes.len(),
        outcomes.iter().filter(|o| o.status == Status::Passed).count(),
        failed.len(),
        outcomes.iter().filter(|o| o.status == Status::Skipped).count(),
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
                let event = v
                    .first_violation_event
                    .map(|n| format!(" (event {n})"))
                    .unwrap_or_default();
                let at = v
                    .first_violation_ms
                    .map(|t| format!(" at t={:.3}s{event}", t as f64 / 1000.0))
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
    // Our binary, found (or built) once for every sidecar the cluster starts.
    let bin = match args.sidecar_bin.clone() {
        Some(b) => b,
        None => match crate::sidecar::locate_binary() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("scenarios: {e}");
                return 1;
            }
        },
    };
    let timeline = crate::timeline::Timeline::new();
    let opts = ClusterOptions {
        etcd: choice.clone(),
        profile: std::sync::Arc::new(Profile::ours(Some(bin))),
        sidecar_overrides: Vec::new(),
    };
    let cluster =
        match RealCluster::start(&sc.name, &sc.topology, sc.seed, kind, opts, timeline).await {
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

/// `--faults a,b,c`: fault kinds to draw from.
#[derive(Clone, Debug)]
pub struct FaultList(pub Vec<String>);

impl std::str::FromStr for FaultList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::explore::generate::parse_fault_list(s).map(FaultList)
    }
}

/// The flags of `scenarios explore` (a sweep), or its `merge` subcommand.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ExploreArgs {
    /// `merge`: combine the summaries of a sharded sweep instead of sweeping.
    #[command(subcommand)]
    pub command: Option<ExploreCommand>,
    /// At most this many instances per schedule (each draws between half of it and it).
    #[arg(long, default_value_t = 10)]
    pub instances: usize,
    /// Simulated length of each schedule.
    #[arg(long, default_value = "2m", value_parser = crate::spec::parse_duration)]
    pub duration: std::time::Duration,
    /// Seeds in the sweep (default 100 unless --time is given).
    #[arg(long, conflicts_with = "time")]
    pub seeds: Option<u64>,
    /// Run seeds for this long (wall time) instead of a number of seeds.
    #[arg(long, value_parser = crate::spec::parse_duration)]
    pub time: Option<std::time::Duration>,
    /// First seed of the sweep.
    #[arg(long, default_value_t = 0)]
    pub seed_start: u64,
    /// Run shard K of N (seeds start + K + N·j), e.g. `--shard 3/8`.
    #[arg(long, default_value = "0/1")]
    pub shard: crate::explore::summary::Shard,
    /// Fault kinds to draw from, comma-separated (default: all).
    #[arg(long)]
    pub faults: Option<FaultList>,
    /// Output directory (default: `target/explore/<time>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Worker threads (results do not depend on it).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Also write JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// One metrics dialect for every schedule (default: drawn per seed).
    #[arg(long, value_parser = crate::explore::generate::DIALECTS)]
    pub dialect: Option<String>,
    /// How each seed draws its faults: `swarm` (a random subset of the allowed kinds,
    /// each with its own weight and duration scale) or `uniform` (every kind alike).
    #[arg(long, value_enum, default_value_t = crate::explore::swarm::Draw::default())]
    pub draw: crate::explore::swarm::Draw,
    /// Runs the shrinker may spend on one finding.
    #[arg(long, default_value_t = 300)]
    pub shrink_budget: usize,
    /// Exit 0 even when something was found, once the summary is written (a batch
    /// shard whose merge step reports; flag errors still exit 2).
    #[arg(long)]
    pub exit_zero: bool,
    /// TEST-ONLY: plant this bug in every simulated sidecar (see sim::planted), to check
    /// that explore finds its class of bug. Never a statement about the shipped sidecar.
    #[arg(long)]
    pub planted_bug: Option<sim::planted::PlantedBug>,
}

/// The subcommands of `scenarios explore`.
#[derive(clap::Subcommand, Debug)]
pub enum ExploreCommand {
    /// Merge the summaries of a sharded sweep (each DIR a shard's --out, or a directory
    /// of them).
    Merge {
        /// The shards' output directories, or directories of them.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Write the merged summary.json and coverage.json here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write JUnit XML here.
        #[arg(long)]
        junit: Option<PathBuf>,
    },
}

fn default_explore_dir() -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().unwrap_or(manifest).join("target/explore");
    root.join(format!("run-{}", mock_kit::events::now_ms()))
}

/// `scenarios explore`: exit 0 if nothing was found, 1 if something was, 2 on bad input.
pub fn explore(args: ExploreArgs, runner: &crate::explore::sweep::Runner) -> u8 {
    use crate::explore::sweep::{sweep, write_summary, Budget, SweepOptions};
    if let Some(ExploreCommand::Merge { dirs, out, junit }) = args.command {
        return explore_merge(&dirs, out.as_deref(), junit.as_deref());
    }
    if args.instances == 0 || args.duration < std::time::Duration::from_secs(1) {
        eprintln!("scenarios: explore needs --instances >= 1 and --duration >= 1s");
        return 2;
    }
    let params = crate::explore::generate::Params {
        max_instances: args.instances,
        duration_ms: args.duration.as_millis() as u64,
        faults: match args.faults {
            Some(f) => f.0,
            None => crate::explore::generate::Params::default().faults,
        },
        dialect: args.dialect,
        draw: args.draw,
    };
    let out = args.out.unwrap_or_else(default_explore_dir);
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = SweepOptions {
        params,
        budget: match args.time {
            Some(t) => Budget::Time(t),
            None => Budget::Seeds(args.seeds.unwrap_or(100)),
        },
        seed_start: args.seed_start,
        shard: args.shard,
        out: out.clone(),
        jobs,
        planted_bug: args.planted_bug,
        shrink_budget: args.shrink_budget,
        progress: true,
    };
    if let Some(b) = opts.planted_bug {
        eprintln!("scenarios: TEST-ONLY: planted bug `{b}` in every simulated sidecar");
    }
    let summary = sweep(&opts, runner);
    if let Err(e) = write_summary(&out, &summary) {
        eprintln!("scenarios: {e}");
    }
    let code = report_summary(&summary, &out, Some(&out), args.junit.as_deref());
    if args.exit_zero {
        0
    } else {
        code
    }
}

/// Print the summary and coverage, write JUnit; the exit code. Findings' files are
/// relative to `root`; the summary was written to `written` (if anywhere).
fn report_summary(
    s: &crate::explore::summary::Summary,
    root: &std::path::Path,
    written: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
) -> u8 {
    println!("\ncoverage (fault kind x sidecar phase when it hit):");
    print!("{}", s.coverage.table());
    println!("\nrecovery (virtual ms from a disturbance's end until the instance was back; LATE: past its bound):");
    print!("{}", s.recovery.table());
    println!();
    print!("{}", s.table(root));
    if let Some(dir) = written {
        println!("summary: {}", dir.join("summary.json").display());
    }
    if let Some(j) = junit {
        if let Err(e) = std::fs::write(j, s.junit()) {
            eprintln!("scenarios: cannot write {}: {e}", j.display());
        }
    }
    if s.findings.is_empty() && s.errors.is_empty() {
        0
    } else {
        1
    }
}

fn explore_merge(
    dirs: &[PathBuf],
    out: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
) -> u8 {
    let (merged, files) = match crate::explore::summary::merge_dirs(dirs) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("scenarios: {e}");
            return 2;
        }
    };
    println!("merged {} summaries", files.len());
    if let Some(dir) = out {
        if let Err(e) = crate::explore::sweep::write_summary(dir, &merged) {
            eprintln!("scenarios: {e}");
        }
    }
    // The merged findings' files already name their shard directories.
    report_summary(&merged, std::path::Path::new(""), out, junit)
}
