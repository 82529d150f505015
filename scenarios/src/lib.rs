//! scenarios: the mock cluster, the scenario language and runner, and the fault library.
//!
//! A developer of the sidecar (or of the master) runs `cargo run -p scenarios -- run` and
//! sees, for a library of realistic failures, whether registration and heartbeats keep
//! each instance correctly routable — and, when they do not, a timeline that shows why.
//!
//! # Layout
//!
//! - [`spec`]: the TOML scenario language and its strict validation:
//!   `Scenario::parse(file, text)`.
//! - [`library`]: the built-in scenarios (`library/*.toml`, embedded) and file loading:
//!   `library::load(args)`.
//! - [`cluster`]: fake or real etcd, the fake master, N × (fake vLLM + `vllm-sidecar`
//!   process), every link through a proxy: `Cluster::start`, `apply(action)`, `observe()`.
//! - [`proxy`]: the TCP fault proxy on every link: `Proxy::start(name, target, seed, events)`.
//! - [`sidecar`]: the real sidecar binary as a child process: `SidecarProc::spawn`.
//! - [`real_etcd`]: the Debian `etcd` on loopback, 1 or 3 members: `RealEtcd::start(n, events)`.
//! - [`etcd_view`]: reading registrations through the v3 JSON gateway (the observer's eyes).
//! - [`load`]: the open-loop load generator: `LoadGen::start`.
//! - [`timeline`]: the one merged event timeline of a run (an `EventSink`): `Timeline::new`.
//! - [`observe`]: what one sample of the cluster holds (`Sample`, `InstanceObs`).
//! - [`verdict`]: awaits, invariants, fault episodes and time to recover.
//! - [`run`]: one scenario end to end, and many in parallel: `run::run_scenario`, `run::run_many`.
//! - [`report`]: the report directory (verdicts, events.jsonl, timeline.html) and JUnit.
//! - [`cli`]: the `run`, `list` and `up` commands behind the thin `main.rs`.

pub mod actions;
pub mod cli;
pub mod cluster;
pub mod dur;
pub mod episode;
pub mod etcd_view;
pub mod library;
pub mod load;
pub mod observe;
pub mod proxy;
pub mod real_etcd;
pub mod report;
pub mod run;
pub mod sidecar;
pub mod sidecar_flags;
pub mod sim_cluster;
pub mod simrun;
pub mod spec;
pub mod timeline;
pub mod topology;
pub mod verdict;
