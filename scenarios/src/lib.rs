#![warn(missing_docs)]
//! scenarios: the mock cluster, the scenario language and runner, and the fault library.
//!
//! A developer of the sidecar (or of the master) runs `cargo run -p scenarios -- run` and
//! sees, for a library of realistic failures, whether registration and heartbeats keep
//! each instance correctly routable — and, when they do not, a timeline that shows why.
//!
//! # Layout
//!
//! - [`spec`]: the TOML scenario language and its strict validation:
//!   `Scenario::parse(file, text)`; below it [`topology`] (the cluster a scenario runs
//!   on, instance names) and [`dur`] (durations as written).
//! - [`actions`]: what a step does, one module per family (sidecar, vllm, etcd, master,
//!   link, load): how each is written, checked, described, done on any [`cluster::Cluster`]
//!   (`action.apply(&mut cluster)`), and which fault episodes it opens.
//! - [`cluster`]: the verbs a scenario acts through, whichever mode runs it;
//!   [`engine`]: the one play loop over them and the one path to an outcome.
//! - [`library`]: the built-in scenarios (`library/*.toml`, embedded) and file loading:
//!   `library::load(args)`.
//! - [`real_cluster`]: fake or real etcd, the fake master, N × (fake vLLM +
//!   `vllm-sidecar` process), every link through a proxy: `RealCluster::start`,
//!   `observe()`, `shutdown()`; its verbs in [`real_verbs`]; pauses and throttles as
//!   `SIGSTOP`/`SIGCONT` of a sidecar or a frozen in-process fake in `real_pause`.
//! - [`sim_cluster`]: the same topology in the `sim` crate's virtual-time world, its
//!   verbs in [`sim_verbs`]; [`fakes_config`]: how a topology configures the fakes in
//!   both.
//! - [`proxy`]: the TCP fault proxy on every link: `Proxy::start(name, listen, target, seed, events)`.
//! - [`sidecar`]: the real sidecar binary as a child process: `SidecarProc::spawn`.
//! - [`real_etcd`]: the Debian `etcd` on loopback, 1 or 3 members: `RealEtcd::start(n, events)`.
//! - [`etcd_view`]: reading registrations through the v3 JSON gateway (the observer's eyes).
//! - [`load`]: the open-loop load generator: `LoadGen::start`.
//! - [`timeline`]: the one merged event timeline of a run (an `EventSink`): `Timeline::new`.
//! - [`observe`]: what one sample of the cluster holds (`Sample`, `InstanceObs`).
//! - [`episode`]: fault episodes, the intervals in which a fault excuses what an
//!   invariant would otherwise flag; each action family writes its own.
//! - [`verdict`]: awaits and time to recover; [`invariants`]: the properties of a
//!   whole run; [`exits`]: sidecars that exited unasked; [`recovery`]: each
//!   instance back within a bound made of its timers, `recovery::checks`.
//! - [`run`]: one scenario end to end in real mode, and many in parallel:
//!   `run::run_scenario`, `run::run_many`; [`simrun`]: the same in virtual time.
//! - [`report`]: the report directory (verdicts, events.jsonl, timeline.html) and JUnit.
//! - [`explore`]: random fault schedules in virtual time, shrunk violations, coverage,
//!   sharded sweeps: `explore::sweep::sweep`.
//! - [`cli`]: the `run`, `list`, `up` and `explore` commands behind the thin `main.rs`;
//!   [`conform`]: the library against any sidecar ([`profile`], [`capability`],
//!   [`settings`]) and its conformance report.

pub mod actions;
pub mod capability;
pub mod cli;
pub mod cluster;
pub mod conform;
pub mod dur;
pub mod engine;
pub mod episode;
pub mod etcd_view;
pub mod exits;
pub mod explore;
pub mod fakes_config;
pub mod invariants;
pub mod library;
pub mod load;
pub mod observe;
pub mod profile;
pub mod proxy;
pub mod real_cluster;
pub mod real_etcd;
mod real_pause;
pub mod real_verbs;
pub mod recovery;
pub mod report;
pub mod run;
pub mod settings;
pub mod sidecar;
pub mod sim_cluster;
mod sim_observe;
pub mod sim_verbs;
pub mod simrun;
pub mod spec;
pub mod timeline;
pub mod topology;
pub mod verdict;

/// A new run's directory under the workspace: `<under>/run-<now in ms>`.
pub(crate) fn new_run_dir(under: &str) -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().unwrap_or(manifest).join(under);
    root.join(format!("run-{}", mock_kit::events::now_ms()))
}

/// Lock `m`, even if a thread panicked holding it: what it guards is only ever
/// replaced whole or appended to, so it is never left half-written.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
