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
//! - [`sidecar_node`]: sidecars, the production core driven as the production driver
//!   drives it, every command mapped as the driver maps it:
//!   [`sidecar_node::SidecarNode::poll`] (commands → exchanges) and
//!   [`sidecar_node::answer_of`] (outcomes → the core's answers); killed and restarted
//!   at will.
//! - [`etcd_client`]: each sidecar's etcd client, the production call plan
//!   (`sidecar::peers::etcd::plan`: the request bodies, endpoint order and failover,
//!   authentication and one re-authentication) carried out as exchanges
//!   ([`etcd_client::EtcdClient`]), each endpoint a link of its own to the one etcd
//!   ([`node::NodeId::EtcdEndpoint`]).
//! - [`etcd_node`]: etcd, mock-etcd's core (`mock_etcd::EtcdCore`): the sidecar's calls
//!   as gateway JSON through `handle_json`, lease expiry at virtual times, watch lines
//!   pushed to their reader ([`etcd_node::EtcdNode::watch`]), auth with simple tokens
//!   that idle out in virtual time.
//! - [`master_node`]: the master, mock-master's core (`mock_master::core::MasterCore`:
//!   gate, heartbeat rules, instance table, watch cursor, probe attempts, ticker), fed
//!   heartbeats and watch lines ([`master_node::MasterNode::on_watch_line`]), probing a
//!   deleted instance's vLLM over its own link; a load aimed at it is routed by its
//!   core's pick. Master replicas ([`node::NodeId::master`]): mock-master's replica
//!   mode, each replica carrying out its core's election over its own link to etcd
//!   (mock-master's request bodies and parsers), the elected one writing the
//!   LOADMETRICS rounds its core plans; a sidecar's heartbeat goes to the replica its
//!   target's URL host names ([`World::set_master_hosts`]); a server's process is
//!   killed and started again with [`World::kill_server`] and [`World::start_server`].
//! - [`master_watch`]: how the master follows etcd, mock-master's own `WatchPlan` as
//!   calls, outcomes and timers over its link ([`master_watch::Follower`]): a dead
//!   stream is re-opened, lost data re-listed; with etcd auth on, it authenticates as
//!   mock-master's client does (before its first call, once more on a refused token,
//!   again after a watch refused for it).
//! - [`vllm_node`]: vLLM, mock-vllm's virtual-time core (`mock_vllm::core::VllmCore`:
//!   load model, health modes, startup delay, crash/restart, `metrics_*`/`completion_*`
//!   faults, the page of every dialect, `compact` included), its answers as replies
//!   ([`vllm_node::VllmNode`]); [`load`]: open-loop completions on it, validated by
//!   mock-vllm's rules: [`load::Load::new`], started with [`World::add_load`].
//! - [`world`]: the engine (time, queue, generator, log, links, nodes, exchanges and
//!   their timeouts): [`World::run_until`]; the scenario language on top is
//!   `scenarios run --sim` (crate `scenarios`). Its parts: [`queue`], the event queue
//!   ordered by (time, sequence) ([`queue::Queue::push`]); `servers` and `sequential`,
//!   its tables (servers by id, exchanges by id), indexed rather than searched;
//!   [`log`], the event log, one JSON line per event, kept or digested
//!   ([`log::EventLog::record`]), and `summary`, what an exchange's lines say, typed;
//!   [`link`], links with the TCP fault proxy's vocabulary, and what a fault does to one
//!   message and to the exchanges under way ([`link::LinkFault::leg`],
//!   [`link::Links::set`]); [`pause`], paused and throttled nodes (a stopped process):
//!   what reaches one is held and handed to it when it resumes
//!   ([`pause::Pauses::hold`]).
//! - [`node`]: node ids, the requests and answers between nodes, how an exchange ended
//!   ([`node::Outcome`]), and the [`node::Server`] trait a fake's core is wrapped in
//!   (serve, timers, its own calls to other nodes); [`command_kind`]: which sidecar
//!   command an exchange carries ([`command_kind::Kind`]).
//! - Test-only: [`distortion`], the one seam through which a sidecar's shell may lie to
//!   its core or its peers ([`distortion::Distortion`]); [`planted`], planted bugs (a
//!   409 read as 200, a revoke not sent, …), distortions of how the driver runs the
//!   core: [`World::plant_bug`].
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
