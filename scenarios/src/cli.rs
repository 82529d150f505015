//! The runner's commands (`run`, `list`, `up`, `explore`) and the flags they share with
//! `conform`, called by the thin `main.rs`.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::library::{self, Loaded};
use crate::profile::Profile;
use crate::real_cluster::{ClusterOptions, EtcdChoice, EtcdKind, RealCluster};
use crate::report::{any_failed, default_report_dir, tally, Status};
use crate::run::{prepare, run_many, RunOptions};

/// `r`'s value, or `None` once its error was said on stderr (`scenarios: …`).
pub(crate) fn said<T, E: Display>(r: Result<T, E>) -> Option<T> {
    r.map_err(|e| eprintln!("scenarios: {e}")).ok()
}

/// Write JUnit XML to `path`, if one was asked for.
fn write_junit(path: Option<&Path>, xml: impl FnOnce() -> String) {
    if let Some(p) = path {
        said(std::fs::write(p, xml()).map_err(|e| format!("cannot write {}: {e}", p.display())));
    }
}

/// Which etcd to run against (`run`, `conform`, `up`).
#[derive(clap::Args, Clone, Debug)]
pub struct EtcdArgs {
    /// fake, real (the Debian etcd binary on loopback) or the URL of an existing etcd.
    #[arg(long, default_value = "fake")]
    pub etcd: EtcdChoice,
    /// With `--etcd real`: members of the real cluster (1 or 3).
    #[arg(long, default_value = "1", value_parser = ["1", "3"])]
    pub etcd_cluster: String,
}

impl EtcdArgs {
    /// The etcd they name: `--etcd real --etcd-cluster 3` is a real 3-member cluster.
    pub fn choice(&self) -> EtcdChoice {
        match (&self.etcd, self.etcd_cluster.as_str()) {
            (EtcdChoice::Real, "3") => EtcdChoice::Real3,
            (e, _) => e.clone(),
        }
    }
}

/// The flags of `scenarios conform`, which `run` shares: which scenarios run, against
/// which sidecar and etcd, reported where.
#[derive(clap::Args, Debug)]
pub struct LibraryArgs {
    /// Scenario files, or names of built-in scenarios (default: the whole library).
    pub files: Vec<String>,
    /// Another sidecar (real mode): its profile, a TOML file or a built-in
    /// (`vllm-sidecar`, `reference-python`). Default: `vllm-sidecar`.
    #[arg(long, conflicts_with = "sidecar_cmd")]
    pub profile: Option<String>,
    /// Another sidecar as a command line (real mode), given our flags and declaring no
    /// capability.
    #[arg(long)]
    pub sidecar_cmd: Option<String>,
    /// Which etcd.
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Report directory (default: `target/scenario-reports/<time>`); `conform` writes
    /// its report there as `conformance.md` and `conformance.html`.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Scenarios run at once.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
}

impl LibraryArgs {
    /// The scenarios and the sidecar's profile (`None`: ours) the flags name, or `None`
    /// once what does not check was said.
    pub(crate) fn load(&self) -> Option<(Vec<Loaded>, Option<Profile>)> {
        let list = said(library::load(&self.files))?;
        let profile = said(Profile::from_args(&self.profile, &self.sidecar_cmd))?;
        Some((list, profile))
    }

    /// How to run the scenarios with `profile`, reporting under `--report` (or a new
    /// directory).
    pub(crate) fn options(&self, profile: Option<Profile>) -> RunOptions {
        RunOptions {
            etcd: self.etcd.choice(),
            report_dir: Some(self.report.clone().unwrap_or_else(default_report_dir)),
            profile: profile.map(Arc::new),
            ..RunOptions::default()
        }
    }
}

/// The flags of `scenarios run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The scenarios, the sidecar, the etcd and the report, as `conform` takes them.
    #[command(flatten)]
    pub library: LibraryArgs,
    /// Override every scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// The vllm-sidecar binary (default: $VLLM_SIDECAR_BIN, next to this binary, or built).
    #[arg(long)]
    pub sidecar_bin: Option<PathBuf>,
    /// Run in virtual time: the sidecar's decision core and the fakes' cores in the
    /// deterministic simulator (no processes, no sockets; same seed, same events).
    #[arg(long, conflicts_with_all = ["profile", "sidecar_cmd"])]
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
    /// Which etcd.
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// The vllm-sidecar binary (default: $VLLM_SIDECAR_BIN, next to this binary, or built).
    #[arg(long)]
    pub sidecar_bin: Option<PathBuf>,
}

/// `scenarios run`: exit code 0 if nothing failed, 1 if something did, 2 on bad input.
pub async fn run(args: RunArgs) -> u8 {
    let lib = &args.library;
    let Some((list, profile)) = lib.load() else {
        return 2;
    };
    let opts = RunOptions {
        seed: args.seed,
        sidecar_bin: args.sidecar_bin.clone(),
        planted_bug: args.planted_bug,
        ..lib.options(profile)
    };
    let report = opts.report_dir.clone().unwrap_or_default();
    let started = Instant::now();
    let outcomes = if args.sim {
        crate::simrun::run_many_sim(&list, &opts, lib.jobs.min(2), true)
    } else {
        let Some(opts) = said(prepare(opts, &list)) else {
            return 1;
        };
        run_many(&list, &opts, lib.jobs, true).await
    };
    let wall = started.elapsed();
    println!("\nSTATUS   SCENARIO                           WALL INSTANCES  NOTE");
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
            "{:8} {:30} {:>7.1}s {:>9}  {note}",
            o.status.as_str().to_uppercase(),
            o.name,
            o.wall_ms as f64 / 1000.0,
            o.instances,
        );
    }
    let largest = outcomes
        .iter()
        .filter(|o| o.status == Status::Passed)
        .map(|o| o.instances)
        .max()
        .unwrap_or(0);
    println!(
        "\n{} in {:.1}s wall; largest passing scenario held {largest} instances",
        tally(&outcomes, "failed"),
        wall.as_secs_f64()
    );
    println!("report: {}", report.display());
    write_junit(args.junit.as_deref(), || crate::report::junit(&outcomes));
    for o in outcomes.iter().filter(|o| o.status == Status::Failed) {
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
        let timeline = report.join(&o.name).join("timeline.html");
        println!("  timeline: {}", timeline.display());
        println!("  re-run:   {}", o.rerun);
    }
    u8::from(any_failed(&outcomes))
}

/// `scenarios list`.
pub fn list() -> u8 {
    let Some(l) = said(library::builtin()) else {
        return 2;
    };
    for s in l {
        let etcd = format!("{:?}", s.scenario.topology.etcd).to_lowercase();
        let sim = match crate::simrun::unsupported(&s.scenario) {
            None => "both".to_string(),
            Some(why) => format!("real only ({why})"),
        };
        println!(
            "{:30} {:>4} inst  etcd={:8} {}\n{:30} modes: {sim}",
            s.scenario.name, s.scenario.topology.instances, etcd, s.scenario.description, ""
        );
    }
    0
}

/// `scenarios up`: a cluster to poke at by hand.
pub async fn up(args: UpArgs) -> u8 {
    let loaded = said(library::load(std::slice::from_ref(&args.scenario)));
    let Some(mut sc) = loaded
        .and_then(|l| l.into_iter().next())
        .map(|l| l.scenario)
    else {
        return 2;
    };
    if let Some(n) = args.instances {
        sc.topology.instances = n.clamp(1, 500);
        sc.topology.overrides.clear();
    }
    let choice = args.etcd.choice();
    let Some(kind) = said(EtcdKind::resolve(sc.topology.etcd, &choice)) else {
        return 1;
    };
    // Our binary, found (or built) once for every sidecar the cluster starts.
    let bin = args.sidecar_bin.clone().map(Ok);
    let Some(bin) = said(bin.unwrap_or_else(crate::sidecar::locate_binary)) else {
        return 1;
    };
    let timeline = crate::timeline::Timeline::new();
    let opts = ClusterOptions {
        etcd: choice,
        profile: Arc::new(Profile::ours(Some(bin))),
        sidecar_overrides: Vec::new(),
    };
    let start = RealCluster::start(&sc.name, &sc.topology, sc.seed, kind, opts, timeline);
    let Some(cluster) = said(start.await) else {
        return 1;
    };
    for (k, v) in cluster.endpoints() {
        println!("{k:28} {v}");
    }
    println!(
        "\nmock control APIs: GET <url>/_mock/state, POST <url>/_mock/faults. Ctrl-C to stop."
    );
    mock_kit::cli::stop_signal().await;
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

/// `scenarios explore`: exit 0 if nothing was found, 1 if something was, 2 on bad input.
pub fn explore(args: ExploreArgs, runner: &crate::explore::sweep::Runner) -> u8 {
    use crate::explore::generate::Params;
    use crate::explore::sweep::{sweep, write_summary, Budget, SweepOptions};
    if let Some(ExploreCommand::Merge { dirs, out, junit }) = args.command {
        return explore_merge(&dirs, out.as_deref(), junit.as_deref());
    }
    if args.instances == 0 || args.duration < std::time::Duration::from_secs(1) {
        eprintln!("scenarios: explore needs --instances >= 1 and --duration >= 1s");
        return 2;
    }
    let params = Params {
        max_instances: args.instances,
        duration_ms: args.duration.as_millis() as u64,
        faults: args
            .faults
            .map_or_else(|| Params::default().faults, |f| f.0),
        dialect: args.dialect,
        draw: args.draw,
    };
    let new_dir = || crate::new_run_dir("target/explore");
    let out = args.out.unwrap_or_else(new_dir);
    let cores = || std::thread::available_parallelism().map_or(1, usize::from);
    let opts = SweepOptions {
        params,
        budget: args
            .time
            .map_or(Budget::Seeds(args.seeds.unwrap_or(100)), Budget::Time),
        seed_start: args.seed_start,
        shard: args.shard,
        out: out.clone(),
        jobs: args.jobs.unwrap_or_else(cores),
        planted_bug: args.planted_bug,
        shrink_budget: args.shrink_budget,
        progress: true,
    };
    if let Some(b) = opts.planted_bug {
        eprintln!("scenarios: TEST-ONLY: planted bug `{b}` in every simulated sidecar");
    }
    let summary = sweep(&opts, runner);
    said(write_summary(&out, &summary));
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
    root: &Path,
    written: Option<&Path>,
    junit: Option<&Path>,
) -> u8 {
    println!("\ncoverage (fault kind x sidecar phase when it hit):");
    print!("{}", s.coverage.table());
    println!("\nrecovery (virtual ms from a disturbance's end until the instance was back; LATE: past its bound):");
    print!("{}", s.recovery.table());
    print!("\n{}", s.table(root));
    if let Some(dir) = written {
        println!("summary: {}", dir.join("summary.json").display());
    }
    write_junit(junit, || s.junit());
    u8::from(!s.findings.is_empty() || !s.errors.is_empty())
}

fn explore_merge(dirs: &[PathBuf], out: Option<&Path>, junit: Option<&Path>) -> u8 {
    let Some((merged, files)) = said(crate::explore::summary::merge_dirs(dirs)) else {
        return 2;
    };
    println!("merged {} summaries", files.len());
    if let Some(dir) = out {
        said(crate::explore::sweep::write_summary(dir, &merged));
    }
    // The merged findings' files already name their shard directories.
    report_summary(&merged, Path::new(""), out, junit)
}
