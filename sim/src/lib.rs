//! A deterministic discrete-event simulator of the cluster: the production sidecar's
//! decision core and the fakes' own cores, with time and the network simulated around
//! them.
//!
//! Why: `scenarios run` drives real processes in real time, which is the last word on
//! the binary but cannot replay a timing, reach fleet scale or search for rare races.
//! Here one seed is one run, exactly; a simulated hour of one instance takes
//! milliseconds. Nothing here re-models a sidecar or a fake: the sidecar is
//! `sidecar::core::Core`, the peers are the fakes' clock-free cores, and values cross
//! between them in their wire encoding (the etcd value and the heartbeat body as the
//! JSON the sidecar writes, the `/metrics` page as the text the fake writes).
//!
//! # Determinism rules
//!
//! A run must be a pure function of its seed and its inputs, so that the event log of
//! two runs compares byte for byte:
//!
//! - nothing reads a clock: time is [`World::now`], a `Duration` since the start,
//!   advanced only by the event queue; cores get it as an argument;
//! - every random draw goes through the world's one `StdRng` (seeded from the run's
//!   seed), in event order; each sidecar core's own seed is drawn from it when the
//!   sidecar is added;
//! - no `HashMap`/`HashSet` iteration order reaches anything observable: tables are
//!   `BTreeMap`s or `Vec`s, and nothing here walks a fake's hash maps;
//! - ties in time are broken by the order events were scheduled (a sequence number),
//!   never by the payload.
//!
//! # What runs today, and where
//!
//! Each module's own doc says what of its peer runs and how.
//!
//! - [`sidecar_node`]: a sidecar, the production core driven as the production driver
//!   drives it, killed and restarted at will; [`etcd_client`]: its etcd client, the
//!   production call plan carried out as exchanges.
//! - [`etcd_node`]: etcd, mock-etcd's core (`mock_etcd::EtcdCore`).
//! - [`master_node`]: the master, mock-master's core (`mock_master::core::MasterCore`),
//!   one or several replicas (their election, the LOADMETRICS rounds, heartbeats routed
//!   by [`World::set_master_hosts`]); [`master_watch`]: how it follows etcd.
//! - [`vllm_node`]: vLLM, mock-vllm's virtual-time core (`mock_vllm::core::VllmCore`),
//!   under [`load`], open-loop completions ([`World::add_load`]).
//! - [`world`]: the engine (time, queue, generator, log, links, nodes, exchanges and
//!   their timeouts): [`World::run_until`]; the scenario language on top is `scenarios
//!   run --sim` (crate `scenarios`). Its parts: [`queue`] (events by time and
//!   sequence), `servers` and `sequential` (its tables, indexed rather than searched),
//!   [`log`] and `summary` (the event log, one JSON line per event), [`link`] (links
//!   with the TCP fault proxy's vocabulary), [`pause`] (paused and throttled nodes).
//! - [`node`]: node ids, the requests and answers between nodes, how an exchange ended,
//!   and the [`node::Server`] trait a fake's core is wrapped in; [`command_kind`]: which
//!   sidecar command an exchange carries.
//! - Test-only: [`distortion`], the one seam through which a sidecar's shell may lie to
//!   its core or its peers; [`planted`], planted bugs ([`World::plant_bug`]).
//!
//! Not yet: LOADMETRICS written by a single master (no election: the round is planned
//! and dropped, so that the logs of single-master worlds stay as they were), real etcd
//! members.

pub mod command_kind;
pub mod distortion;
pub mod etcd_client;
pub mod etcd_node;
pub mod link;
pub mod load;
pub mod log;
pub mod master_node;
pub mod master_watch;
pub mod node;
pub mod pause;
pub mod planted;
pub mod queue;
mod sequential;
mod servers;
pub mod sidecar_node;
mod summary;
pub mod vllm_node;
pub mod world;

pub use link::{Direction, LinkFault};
pub use log::EventLog;
pub use node::{Body, NodeId, Reply, Request, Server};
pub use world::World;
