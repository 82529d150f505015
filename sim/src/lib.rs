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
//! # What runs today
//!
//! - sidecars: the production core, every command mapped as the driver maps it; killed
//!   and restarted at will;
//! - etcd: mock-etcd's core (`mock_etcd::EtcdCore`): the sidecar's calls as gateway JSON
//!   through `handle_json`, lease expiry at virtual times, watch streams, auth with
//!   simple tokens that idle out in virtual time;
//! - each sidecar's etcd client: the production call plan (`sidecar::peers::etcd::plan`:
//!   the request bodies, endpoint order and failover, authentication and one
//!   re-authentication), each endpoint a link of its own to the one etcd
//!   ([`node::NodeId::EtcdEndpoint`]);
//! - the master: mock-master's core (`mock_master::core::MasterCore`: gate, heartbeat
//!   rules, instance table, watch cursor, probe attempts, ticker); it follows etcd by
//!   mock-master's own watch plan over its link ([`master_watch`]: a dead stream is
//!   re-opened, lost data re-listed), authenticating as mock-master's client does when
//!   etcd auth is on (before its first call, once more on a refused token, again after
//!   a watch refused for it), and probes a deleted instance's vLLM over its own link;
//!   a load aimed at it is routed by its core's pick;
//! - master replicas ([`node::NodeId::master`]): mock-master's replica mode, each
//!   replica carrying out its core's election over its own link to etcd (mock-master's
//!   request bodies and parsers), the elected one writing the LOADMETRICS rounds its
//!   core plans; a sidecar's heartbeat goes to the replica its target's URL host names
//!   ([`World::set_master_hosts`]); a server's process is killed and started again with
//!   [`World::kill_server`] and [`World::start_server`];
//! - vLLM: mock-vllm's virtual-time core (`mock_vllm::core::VllmCore`: load model,
//!   health modes, startup delay, crash/restart, `metrics_*`/`completion_*` faults, the
//!   page of every dialect, `compact` included), under open-loop request load;
//! - the scenario language on top: `scenarios run --sim` (crate `scenarios`).
//!
//! Not yet: LOADMETRICS written by a single master (no election: the round is planned
//! and dropped, so that the logs of single-master worlds stay as they were), real etcd
//! members.
//!
//! # Layout
//!
//! - [`queue`]: the event queue ordered by (time, sequence): [`queue::Queue::push`].
//! - `servers`, `sequential`: the world's tables (servers by id, exchanges by id),
//!   indexed rather than searched.
//! - [`log`]: the event log, one JSON line per event, kept or digested:
//!   [`log::EventLog::record`]; `summary`: what an exchange's lines say, typed.
//! - [`link`]: links with the TCP fault proxy's vocabulary, and what a fault does to one
//!   message and to the exchanges under way: [`link::LinkFault::leg`], [`link::Links::set`].
//! - [`pause`]: paused and throttled nodes (a stopped process): what reaches one is
//!   held and handed to it when it resumes: [`pause::Pauses::hold`].
//! - [`node`]: node ids, the requests and answers between nodes, how an exchange ended
//!   ([`node::Outcome`]), and the [`node::Server`] trait a fake's core is wrapped in
//!   (serve, timers, its own calls to other nodes).
//! - [`sidecar_node`]: one sidecar core driven as the production driver drives it:
//!   [`sidecar_node::SidecarNode::poll`] (commands → exchanges) and
//!   [`sidecar_node::answer_of`] (outcomes → the core's answers).
//! - [`etcd_node`]: the fake etcd: mock-etcd's `EtcdCore`, watch lines pushed to their
//!   reader ([`etcd_node::EtcdNode::watch`]).
//! - [`etcd_client`]: the sidecar's etcd client, its call plan's steps carried out as
//!   exchanges ([`etcd_client::EtcdClient`]).
//! - [`vllm_node`]: a fake vLLM: mock-vllm's `VllmCore`, its answers as replies
//!   ([`vllm_node::VllmNode`]).
//! - [`master_watch`]: how the master follows etcd (mock-master's `WatchPlan` as calls,
//!   outcomes and timers): [`master_watch::Follower`].
//! - [`master_node`]: the fake master: mock-master's `MasterCore`, fed heartbeats and
//!   watch lines ([`master_node::MasterNode::on_watch_line`]), its probes sent as calls.
//! - [`load`]: open-loop completions on a fake vLLM, validated by mock-vllm's rules:
//!   [`load::Load::new`], started with [`World::add_load`].
//! - [`command_kind`]: which sidecar command an exchange carries ([`command_kind::Kind`]).
//! - [`distortion`]: the one seam through which a sidecar's shell may lie to its core
//!   or its peers ([`distortion::Distortion`]), test-only.
//! - [`planted`]: test-only planted bugs (a 409 read as 200, a revoke not sent, …),
//!   distortions of how the driver runs the core: [`World::plant_bug`].
//! - [`world`]: the engine (time, queue, generator, log, links, nodes, exchanges and
//!   their timeouts): [`World::run_until`].

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
