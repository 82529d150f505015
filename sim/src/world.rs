//! The simulated cluster: virtual time, the event queue, the one seeded generator, the
//! event log, the links, and the nodes. [`World::run_until`] is the whole engine.
//!
//! Every step is a function of the state and the next event, by the crate's determinism
//! rules (no clock, [`World`]'s one `StdRng` in event order, tables walked in key
//! order): a seed replays a run exactly, and the log says so byte for byte.
//!
//! An exchange is a request over the link client → server and its answer back. The
//! request reaches the server whatever the caller does meanwhile (a late keepalive still
//! refreshes the lease); the answer only reaches a caller still waiting for it. The
//! caller's timeout is an event of its own.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sidecar::config::Config;
use sidecar::core::Input;

use crate::link::{Direction, Leg, LinkFault, Links, OnChange};
use mock_vllm::validate::Req;

use crate::load::Load;
use crate::log::EventLog;
use crate::master_node::MasterNode;
use crate::node::{Failure, NodeId, Outcome, Reply, Request, Server};
use crate::pause::{throttle_pauses, Pauses};
use crate::planted::PlantedBug;
use crate::queue::Queue;
use crate::sequential::Sequential;
use crate::servers::Servers;
use crate::sidecar_node::{Outgoing, SidecarNode, Tag};
use crate::summary;
use crate::vllm_node::VllmNode;

/// A scripted change to the world (a scenario action), run at its time.
type Action = Box<dyn FnOnce(&mut World)>;

/// Something due at a virtual time.
enum Event {
    /// A sidecar's core asked to be woken at `at` (now, unless it was paused).
    SidecarWake { index: u32, at: Duration },
    /// A server's timer, due at `at`.
    ServerWake { id: NodeId, at: Duration },
    /// A request reaches its server (if the link was not reset since it was sent).
    Arrive(Arrival),
    /// An answer reaches its caller.
    Return {
        exchange: u64,
        generation: u64,
        reply: Reply,
    },
    /// The exchange fails (at the caller's timeout: [`Failure::Timeout`]).
    Fail { exchange: u64, failure: Failure },
    /// The fault on the link client → server (the first two) changes.
    SetLink(NodeId, NodeId, LinkFault),
    /// Outside input for a sidecar (shutdown, drain, undrain).
    Input(u32, Input),
    /// A scripted action.
    Act(Action),
    /// The next request of load `n` arrives.
    Arrival(usize),
    /// A load's request reaches `to` (the master: to be routed by it); held while `to`
    /// is paused.
    Offer { to: NodeId, request: Req },
    /// `node` stops running until `until` (see [`crate::pause`]).
    Pause { node: NodeId, until: Duration },
    /// `node`'s pause may be over: it runs what was held for it.
    Resume(NodeId),
    /// The streams `from` → `to` end (closed by `from`, or their connection died).
    StreamEnd {
        from: NodeId,
        to: NodeId,
        reason: &'static str,
        /// `to`'s process then: the end of a stream of an earlier process is no news
        /// to a later one.
        epoch: u64,
    },
    /// A stream line (a watch answer) reaches `to`.
    Push {
        from: NodeId,
        to: NodeId,
        generation: u64,
        line: String,
        /// The processes of `from` and `to` when it was sent.
        epochs: (u64, u64),
    },
}

/// A request on its way to its server.
struct Arrival {
    exchange: u64,
    client: NodeId,
    server: NodeId,
    generation: u64,
    request: Request,
    /// Arriving again after the server's [`Reply::Deferred`].
    deferred: bool,
    /// The server's process when the request was sent ([`World::kill_server`]):
    /// a request never reaches a later process in the slot.
    epoch: u64,
}

/// Who waits for an exchange, and what for.
#[derive(Debug)]
enum Caller {
    /// A sidecar's command.
    Sidecar(u32, Tag),
    /// A server's own call (the master's health probe), named by its token.
    Server(NodeId, u64),
}

impl Caller {
    fn node(&self) -> NodeId {
        match self {
            Caller::Sidecar(i, _) => NodeId::Sidecar(*i),
            Caller::Server(id, _) => *id,
        }
    }

    /// The number the caller knows the exchange by (command id or token).
    fn number(&self) -> u64 {
        match self {
            Caller::Sidecar(_, tag) => tag.id.0,
            Caller::Server(_, token) => *token,
        }
    }
}

/// An exchange whose caller still waits.
#[derive(Debug)]
struct Exchange {
    caller: Caller,
    server: NodeId,
    /// Swallowed by a blackhole: fails when the link heals.
    stuck: bool,
}

/// The cluster in virtual time.
pub struct World {
    now: Duration,
    queue: Queue<Event>,
    rng: StdRng,
    log: EventLog,
    links: Links,
    sidecars: Vec<SidecarNode>,
    servers: Servers,
    exchanges: Sequential<Exchange>,
    /// Per link: bumped when a fault kills its open connections.
    generations: BTreeMap<(NodeId, NodeId), u64>,
    next_exchange: u64,
    events: u64,
    loads: Vec<Load>,
    /// Test-only: the bug planted in every sidecar, current and future.
    planted: Option<PlantedBug>,
    /// Streams (reader, server) that lost a line to a blackhole: the proxy closes
    /// their connection when the link heals.
    stuck_streams: std::collections::BTreeSet<(NodeId, NodeId)>,
    /// A sidecar step's commands, a buffer kept between steps.
    outgoing: Vec<Outgoing>,
    /// Paused nodes and what reached them meanwhile.
    pauses: Pauses<Event>,
    /// Per server: how many of its processes were killed ([`World::kill_server`]);
    /// absent for one never killed (every world without kills: an empty table).
    epochs: BTreeMap<NodeId, u64>,
    /// A heartbeat URL's host → the master replica there (shared with every sidecar).
    master_hosts: Arc<BTreeMap<String, NodeId>>,
    /// The nodes the last event stepped, in the order they ran ([`World::step_due`]).
    stepped: Vec<NodeId>,
}

impl World {
    /// An empty cluster at time zero, its randomness seeded with `seed`.
    pub fn new(seed: u64, log: EventLog) -> World {
        World {
            now: Duration::ZERO,
            queue: Queue::default(),
            rng: StdRng::seed_from_u64(seed),
            log,
            links: Links::new(Duration::from_micros(200)),
            sidecars: Vec::new(),
            servers: Servers::default(),
            exchanges: Sequential::default(),
            generations: BTreeMap::new(),
            next_exchange: 0,
            events: 0,
            loads: Vec::new(),
            planted: None,
            stuck_streams: std::collections::BTreeSet::new(),
            outgoing: Vec::new(),
            pauses: Pauses::default(),
            epochs: BTreeMap::new(),
            master_hosts: Arc::default(),
            stepped: Vec::new(),
        }
    }

    /// Where heartbeats go in a world of several master replicas: `hosts` maps the host
    /// of a heartbeat target's URL (`127.0.0.2` of `http://127.0.0.2:8888/…`) to the
    /// replica node there. For every sidecar, current and future; a heartbeat to the
    /// configured URL, or to a host not in `hosts`, goes to [`NodeId::Master`] (see
    /// [`crate::sidecar_node::heartbeat_node_in`]).
    pub fn set_master_hosts(&mut self, hosts: BTreeMap<String, NodeId>) {
        self.master_hosts = Arc::new(hosts);
        for node in &mut self.sidecars {
            node.set_master_hosts(self.master_hosts.clone());
        }
    }

    /// The process of server `id` now (0 until it is first killed).
    fn epoch(&self, id: NodeId) -> u64 {
        if self.epochs.is_empty() {
            return 0;
        }
        self.epochs.get(&id.server()).copied().unwrap_or(0)
    }

    /// Kill the process of server `id` now (a crash, SIGKILL): its slot is empty until
    /// [`World::start_server`]. Requests to it are refused from now on; those it was
    /// serving or holding (or that are on their way to it) are never answered: their
    /// callers see the connection closed, as the kernel closes a dead process's
    /// sockets; answers to its own calls vanish with it; the streams it served end for
    /// their readers (closed), the streams it read are forgotten by their servers; a
    /// pause of it ends. A sidecar id is [`World::kill_sidecar`]; an id with no server
    /// does nothing.
    pub fn kill_server(&mut self, id: NodeId) {
        if let NodeId::Sidecar(i) = id {
            self.kill_sidecar(i);
            return;
        }
        let id = id.server();
        let Some(slot) = self.servers.remove(id) else {
            return;
        };
        self.end_pause(id);
        *self.epochs.entry(id).or_default() += 1;
        self.record(id, "killed", || json!({}));
        self.exchanges
            .retain(|x| !matches!(x.caller, Caller::Server(c, _) if c == id));
        let served: Vec<u64> = self
            .exchanges
            .iter()
            .filter(|(_, x)| x.server.server() == id)
            .map(|(x, _)| x)
            .collect();
        for x in served {
            self.fail_now(x, Failure::Closed);
        }
        self.stuck_streams
            .retain(|(reader, server)| *reader != id && server.server() != id);
        for reader in slot.node.stream_readers() {
            self.stream_end_after(self.links.base, id, reader, "connection closed");
        }
        // The streams it read: their servers drop them (no call, note or timer comes
        // of that: nothing to collect from them).
        for other in self.servers.ids() {
            if let Some(node) = self.servers.node_mut(other) {
                node.on_link_reset(self.now, id);
            }
        }
    }

    /// Start a fresh process `server` in the slot `id` now (after
    /// [`World::kill_server`]; a process still running there is killed first), e.g. a
    /// new [`MasterNode`] that registers and runs for master again.
    pub fn start_server(&mut self, id: NodeId, server: Box<dyn Server>) {
        let id = id.server();
        if self.servers.contains(id) {
            self.kill_server(id);
        }
        self.record(id, "start", || json!({}));
        self.add_server(id, server);
    }

    /// The one-way delay of every healthy link (default 0.2 ms). Call it before the run
    /// starts: the links' faults are kept.
    pub fn set_link_delay(&mut self, delay: Duration) {
        self.links.base = delay;
    }

    /// Test-only: plant `bug` in every sidecar, current and future (see
    /// [`crate::planted`]). Call it before the run starts.
    pub fn plant_bug(&mut self, bug: PlantedBug) {
        self.planted = Some(bug);
        for node in &mut self.sidecars {
            plant(Some(bug), node);
        }
        self.log
            .record(self.now, "world", "planted_bug", || json!(bug));
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// The events recorded since the last call (a [`EventLog::recording`] log).
    pub fn take_records(&mut self) -> Vec<crate::log::Record> {
        self.log.take_records()
    }

    /// The fault on the link `client` → `server` now.
    pub fn link_fault(&self, client: NodeId, server: NodeId) -> LinkFault {
        self.links.fault(client, server).clone()
    }

    /// End every load now (requests already submitted run their course).
    pub fn end_loads(&mut self) {
        for load in &mut self.loads {
            load.until = load.until.min(self.now);
        }
    }

    /// Events handled so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn sidecars(&self) -> &[SidecarNode] {
        &self.sidecars
    }

    /// The server at `id`, to inspect it in tests and reports.
    pub fn server(&self, id: NodeId) -> Option<&dyn Server> {
        self.servers.get(id).map(|s| s.node.as_ref())
    }

    /// The server at `id` as its own type, to inspect it.
    pub fn server_as<T: 'static>(&self, id: NodeId) -> Option<&T> {
        (self.servers.get(id)?.node.as_ref() as &dyn Any).downcast_ref()
    }

    /// The server at `id` as its own type, to change it now (a health mode, a fault).
    pub fn server_as_mut<T: 'static>(&mut self, id: NodeId) -> Option<&mut T> {
        (self.servers.node_mut(id)?.as_mut() as &mut dyn Any).downcast_mut()
    }

    /// Add a server node (a fake's core in its simulated shell).
    pub fn add_server(&mut self, id: NodeId, server: Box<dyn Server>) {
        self.servers.insert(id, server);
        self.after_server_step(id);
    }

    /// Add the next sidecar with `config`; its core's seed is drawn from the world's
    /// generator. Answers its index.
    pub fn add_sidecar(&mut self, config: &Config) -> u32 {
        let seed = self.rng.gen();
        let index = self.push_sidecar(config, seed);
        self.sidecar_started(index, seed);
        index
    }

    /// Add the next sidecar as a process not started yet (a scenario starts it later
    /// with [`World::restart_sidecar`]). Answers its index.
    pub fn add_stopped_sidecar(&mut self, config: &Config) -> u32 {
        let index = self.push_sidecar(config, 0);
        if let Some(node) = self.sidecars.last_mut() {
            node.kill();
            node.ran = false;
        }
        index
    }

    /// The next sidecar slot, its process made with `config` and `seed` (not run yet).
    fn push_sidecar(&mut self, config: &Config, seed: u64) -> u32 {
        let index = u32::try_from(self.sidecars.len()).unwrap_or(u32::MAX);
        let mut node = SidecarNode::new(index, config, seed, self.now);
        plant(self.planted, &mut node);
        node.set_master_hosts(self.master_hosts.clone());
        self.sidecars.push(node);
        index
    }

    /// Sidecar `index`'s process started now with `seed`: logged, and its first step run.
    fn sidecar_started(&mut self, index: u32, seed: u64) {
        self.record(NodeId::Sidecar(index), "start", || json!({ "seed": seed }));
        self.after_sidecar_step(index);
    }

    /// Pause `node` at `at` for `lasting` (see [`crate::pause`]): it handles nothing
    /// meanwhile, and everything that reached it happens when it resumes.
    pub fn pause_at(&mut self, at: Duration, node: NodeId, lasting: Duration) {
        let until = at + lasting;
        self.queue.push(at, Event::Pause { node, until });
    }

    /// Throttle `node` from `at` for `lasting`: in every `period` it runs for `run` and
    /// is paused for the rest, as a process whose CPU quota is spent early in each
    /// period.
    pub fn throttle_at(
        &mut self,
        at: Duration,
        node: NodeId,
        lasting: Duration,
        run: Duration,
        period: Duration,
    ) {
        for (from, until) in throttle_pauses(at, lasting, run, period) {
            self.queue.push(from, Event::Pause { node, until });
        }
    }

    /// Whether `node` is paused now.
    pub fn is_paused(&self, node: NodeId) -> bool {
        self.pauses.is_paused(node)
    }

    /// The process behind `node` ended (killed, crashed, restarted): a pause of it ends,
    /// and what it held is gone with the process.
    pub fn end_pause(&mut self, node: NodeId) {
        if let Some(dropped) = self.pauses.forget(node) {
            self.record(node, "pause_ended", || json!({ "dropped": dropped }));
        }
    }

    /// Kill sidecar `index` now (SIGKILL): no revoke; answers to its open exchanges
    /// vanish with the process (requests already sent still reach their servers).
    pub fn kill_sidecar(&mut self, index: u32) {
        self.end_pause(NodeId::Sidecar(index));
        self.exchanges
            .retain(|x| !matches!(x.caller, Caller::Sidecar(i, _) if i == index));
        if let Some(node) = self.sidecars.get_mut(index as usize) {
            node.kill();
        }
        self.record(NodeId::Sidecar(index), "killed", || json!({}));
    }

    /// Start sidecar `index` again now with `config`: a new process, a new core seed
    /// drawn from the world's generator.
    pub fn restart_sidecar(&mut self, index: u32, config: &Config) {
        self.kill_sidecar(index);
        let seed = self.rng.gen();
        let Some(slot) = self.sidecars.get_mut(index as usize) else {
            return;
        };
        let seed = slot.restart(config, seed, self.now);
        self.sidecar_started(index, seed);
    }

    /// Set the fault of the link `client` → `server` at `at`.
    pub fn set_link_at(&mut self, at: Duration, client: NodeId, server: NodeId, fault: LinkFault) {
        self.queue.push(at, Event::SetLink(client, server, fault));
    }

    /// Start `load` at `at` (its arrivals drawn from the world's generator).
    pub fn add_load(&mut self, at: Duration, load: Load) {
        self.loads.push(load);
        self.queue.push(at, Event::Arrival(self.loads.len() - 1));
    }

    /// Hand sidecar `index` an outside input at `at`.
    pub fn input_at(&mut self, at: Duration, index: u32, input: Input) {
        self.queue.push(at, Event::Input(index, input));
    }

    /// Run `action` on the world at `at` (after the events already due then): how a
    /// scenario changes a node, e.g. a vLLM's health mode.
    pub fn at(&mut self, at: Duration, action: impl FnOnce(&mut World) + 'static) {
        self.queue.push(at, Event::Act(Box::new(action)));
    }

    /// Log a line for a scripted action (so that the log shows what was done).
    pub fn note(&mut self, node: &str, kind: &str, detail: serde_json::Value) {
        self.log.record(self.now, node, kind, || detail);
    }

    /// Run every event due up to `until`; time then stands at `until`.
    pub fn run_until(&mut self, until: Duration) {
        while self.step_due(until) {}
        self.now = until;
    }

    /// Run the next event if one is due by `until` (time then stands at that event's);
    /// answers whether one ran. [`World::stepped`] then names the nodes it ran.
    pub fn step_due(&mut self, until: Duration) -> bool {
        let Some((at, _, event)) = self.queue.pop_due(until) else {
            return false;
        };
        self.now = at;
        self.events += 1;
        self.stepped.clear();
        self.step(event);
        true
    }

    /// The nodes the last event of [`World::step_due`] ran (a sidecar or a server that
    /// handled it, or whatever else it ran on the way), in order; one may repeat.
    pub fn stepped(&self) -> &[NodeId] {
        &self.stepped
    }

    fn step(&mut self, event: Event) {
        let Some(event) = self.held_by_pause(event) else {
            return;
        };
        match event {
            Event::SidecarWake { index, at } => self.sidecar_wake(index, at),
            Event::ServerWake { id, at } => self.server_wakes(id, at),
            Event::Offer { to, request } => self.offer(to, request),
            Event::Pause { node, until } => self.pause_now(node, until),
            Event::Resume(node) => self.resume(node),
            Event::Arrive(a) => self.arrive(a),
            Event::Return {
                exchange,
                generation,
                reply,
            } => {
                let live = self
                    .exchanges
                    .get(exchange)
                    .is_some_and(|x| self.generation(x.caller.node(), x.server) == generation);
                if live {
                    self.finish(exchange, Outcome::Reply(reply));
                }
            }
            Event::Fail { exchange, failure } => self.finish(exchange, Outcome::Failed(failure)),
            Event::SetLink(client, server, fault) => self.set_link(client, server, fault),
            Event::Input(i, input) => {
                self.record(NodeId::Sidecar(i), "input", || format!("{input:?}"));
                if let Some(node) = self.sidecars.get_mut(i as usize) {
                    node.handle(self.now, input);
                }
                self.after_sidecar_step(i);
            }
            Event::Arrival(n) => self.arrival(n),
            Event::StreamEnd {
                from,
                to,
                reason,
                epoch,
            } => {
                if self.epoch(to) != epoch {
                    return; // a stream of a process gone since
                }
                self.record(
                    to,
                    "stream_end",
                    || json!({ "from": from.to_string(), "reason": reason }),
                );
                if let Some(node) = self.servers.node_mut(to) {
                    node.on_stream_end(self.now, from, reason);
                }
                self.after_server_step(to);
            }
            Event::Push {
                from,
                to,
                generation,
                line,
                epochs,
            } => {
                if self.generation(to, from) != generation {
                    return; // the stream's connection was reset
                }
                if (self.epoch(from), self.epoch(to)) != epochs {
                    return; // sent by or to a process gone since
                }
                if let Some(node) = self.servers.node_mut(to) {
                    node.on_push(self.now, from, &line);
                }
                self.after_server_step(to);
            }
            Event::Act(action) => {
                action(self);
                // It may have stopped or started a sidecar.
                let sidecars = u32::try_from(self.sidecars.len()).unwrap_or(u32::MAX);
                self.stepped.extend((0..sidecars).map(NodeId::Sidecar));
                // The action may have changed a server's timers.
                for id in self.servers.ids() {
                    self.after_server_step(id);
                }
            }
        }
    }

    /// One request of load `n` reaches its vLLM; the next is scheduled.
    fn arrival(&mut self, n: usize) {
        let Some(load) = self.loads.get(n) else {
            return;
        };
        if self.now >= load.until {
            return;
        }
        let (to, req) = (load.to, load.request());
        let gap = load.next_gap(&mut self.rng);
        self.step(Event::Offer { to, request: req });
        self.queue.push(self.now + gap, Event::Arrival(n));
    }

    /// A load's request reaches `to`: a vLLM takes it; a master replica routes it by its
    /// pick to the vLLM it names (none, or no master there: the request is dropped, as
    /// nothing is routable). A paused node holds it until it resumes (the offer is an
    /// event of its own: [`World::step`] holds it). A load aimed at
    /// [`NodeId::Master`] is routed by replica 0, one aimed at
    /// [`NodeId::master`]`(k)` by replica `k`.
    fn offer(&mut self, to: NodeId, request: Req) {
        let now = self.now;
        if to.is_master() {
            let picked = self
                .server_as_mut::<MasterNode>(to)
                .and_then(MasterNode::pick);
            let picked_name = || json!({ "to": picked.map(|n| n.to_string()) });
            self.record(to, "route", picked_name);
            // The vLLM picked takes it as an offer of its own (held if it is paused).
            if let Some(vllm) = picked {
                self.step(Event::Offer { to: vllm, request });
            }
            return;
        }
        match self.server_as_mut::<VllmNode>(to) {
            // An offer changes nothing the world sees (no note, call or timer) until
            // the node is next used: nothing to collect from it now.
            Some(v) => v.offer(now, request),
            None => self.after_server_step(to),
        }
    }

    /// Pause `node` from now until `until`; what reaches it meanwhile is held.
    fn pause_now(&mut self, node: NodeId, until: Duration) {
        if self.pauses.pause(node, self.now, until) {
            self.record(node, "paused", || json!({ "until_ms": until.as_millis() }));
        }
        self.queue.push(until, Event::Resume(node));
    }

    /// `node` runs again if its pause is over: what was held for it happens now, in
    /// the order it was due (a timer fires late, a request is served late).
    fn resume(&mut self, node: NodeId) {
        let Some((stopped, held)) = self.pauses.resume_due(node, self.now) else {
            return;
        };
        self.record(node, "resumed", || json!({ "held": held.len() }));
        if let NodeId::Sidecar(i) = node {
            if let Some(s) = self.sidecars.get_mut(i as usize) {
                s.resumed(stopped);
            }
        }
        for event in held {
            self.step(event);
        }
    }

    /// What a paused node would have handled is held for it; anything else is answered
    /// back to be handled now.
    fn held_by_pause(&mut self, event: Event) -> Option<Event> {
        if !self.pauses.any() {
            return Some(event);
        }
        match self.handler(&event) {
            Some(node) => self.pauses.hold(node, event),
            None => Some(event),
        }
    }

    /// The node that handles `event`, where a node does (not the network, not the
    /// script, not a load's clock).
    fn handler(&self, event: &Event) -> Option<NodeId> {
        match event {
            Event::SidecarWake { index, .. } | Event::Input(index, _) => {
                Some(NodeId::Sidecar(*index))
            }
            Event::ServerWake { id, .. } => Some(*id),
            Event::Arrive(a) => Some(a.server.server()),
            Event::Return { exchange, .. } | Event::Fail { exchange, .. } => {
                self.exchanges.get(*exchange).map(|x| x.caller.node())
            }
            Event::StreamEnd { to, .. } | Event::Push { to, .. } | Event::Offer { to, .. } => {
                Some(*to)
            }
            _ => None,
        }
    }

    fn sidecar_wake(&mut self, i: u32, at: Duration) {
        let Some(node) = self.sidecars.get_mut(i as usize) else {
            return;
        };
        if node.wake_at != Some(at) {
            return; // superseded by a later schedule
        }
        node.wake_at = None;
        node.last_timer = Some(self.now);
        node.handle(self.now, Input::Timer);
        self.after_sidecar_step(i);
    }

    /// Run what the sidecar's core issued, then schedule its next wake-up.
    fn after_sidecar_step(&mut self, i: u32) {
        self.stepped.push(NodeId::Sidecar(i));
        let Some(node) = self.sidecars.get_mut(i as usize) else {
            return;
        };
        let mut out = std::mem::take(&mut self.outgoing);
        node.poll(&mut out);
        let name = NodeId::Sidecar(i);
        for o in out.drain(..) {
            match o {
                Outgoing::Send {
                    to,
                    request,
                    timeout,
                    tag,
                } => self.send(Caller::Sidecar(i, tag), to, request, timeout),
                Outgoing::Note(note) => self.record(
                    name,
                    "note",
                    || json!({ "message": note.message(), "note": format!("{note:?}") }),
                ),
                Outgoing::Log(line) => {
                    self.record(name, "note", || json!({ "message": line, "level": "info" }))
                }
                Outgoing::LogServedModel => self.record(name, "log_served_model", || json!({})),
                Outgoing::Exit(code) => self.record(name, "exit", || json!({ "code": code })),
            }
        }
        self.outgoing = out;
        let Some(node) = self.sidecars.get_mut(i as usize) else {
            return;
        };
        let Some(at) = node.next_wakeup() else {
            node.wake_at = None;
            return;
        };
        // A core that asks for "now" again right after a timer at "now" would spin the
        // driver; here it is woken a millisecond later instead.
        let at = if at <= self.now && node.last_timer == Some(self.now) {
            self.now + Duration::from_millis(1)
        } else {
            at.max(self.now)
        };
        if node.wake_at != Some(at) {
            node.wake_at = Some(at);
            self.queue.push(at, Event::SidecarWake { index: i, at });
        }
    }

    fn generation(&self, client: NodeId, server: NodeId) -> u64 {
        self.generations
            .get(&(client, server))
            .copied()
            .unwrap_or(0)
    }

    /// Start an exchange from `caller` to `server`.
    fn send(&mut self, caller: Caller, server: NodeId, request: Request, timeout: Duration) {
        let exchange = self.next_exchange;
        self.next_exchange += 1;
        let client = caller.node();
        let number = caller.number();
        self.record(client, "send", || summary::Send {
            x: exchange,
            to: server,
            cmd: number,
            request: &request,
        });
        let failure = Failure::Timeout;
        self.queue
            .push_after(self.now, timeout, Event::Fail { exchange, failure });
        let size = request.size();
        let leg = match self.servers.contains(server) {
            true => self
                .links
                .leg(client, server, Direction::ToTarget, size, &mut self.rng),
            // Nothing listens: no link is crossed.
            false => Leg::Refused,
        };
        let stuck = matches!(leg, Leg::Lost { stuck: true });
        match leg {
            Leg::Deliver(d) => {
                let arrival = Arrival {
                    exchange,
                    client,
                    server,
                    generation: self.generation(client, server),
                    request,
                    deferred: false,
                    epoch: self.epoch(server),
                };
                self.queue.push_after(self.now, d, Event::Arrive(arrival));
            }
            Leg::Lost { .. } => {}
            Leg::Reset => self.fail_now(exchange, Failure::Reset),
            Leg::Refused => self.fail_now(exchange, Failure::Refused),
        }
        self.exchanges.insert(
            exchange,
            Exchange {
                caller,
                server,
                stuck,
            },
        );
    }

    /// A request reaches its server: it acts, and its answer goes back over the link.
    fn arrive(&mut self, a: Arrival) {
        // Not if its process is gone since, nor if its connection was reset on the way.
        if self.epoch(a.server) != a.epoch || self.generation(a.client, a.server) != a.generation {
            return;
        }
        let id = a.exchange;
        if a.deferred && self.exchanges.get(id).is_none() {
            return; // its caller gave up while the server held it: never served
        }
        // The link is `server`'s (an etcd endpoint's own); the node is the one behind it.
        let node_id = a.server.server();
        let Some(node) = self.servers.node_mut(node_id) else {
            return;
        };
        let reply = match a.deferred {
            false => node.serve(self.now, a.client, &a.request),
            true => node.serve_deferred(self.now, a.client, &a.request),
        };
        self.record(node_id, "serve", || summary::Serve {
            x: id,
            from: a.client,
            reply: reply.as_ref(),
        });
        self.after_server_step(node_id);
        let (extra, reply) = match reply {
            None => return, // a hang: the caller meets its timeout
            Some(Reply::Reset) => return self.fail_now(id, Failure::Reset),
            // Only as a server's own answer (a crashed vLLM).
            Some(Reply::Refused) => return self.fail_now(id, Failure::Refused),
            Some(Reply::Slow { after, reply }) => (after, *reply),
            Some(Reply::Deferred { after }) => {
                let again = Arrival {
                    deferred: true,
                    // The process the request reached (checked before it was served).
                    epoch: self.epoch(a.server),
                    ..a
                };
                return self.queue.push_after(self.now, after, Event::Arrive(again));
            }
            Some(reply) => (Duration::ZERO, reply),
        };
        match self.links.leg(
            a.client,
            a.server,
            Direction::FromTarget,
            reply.size(),
            &mut self.rng,
        ) {
            Leg::Deliver(d) => self.queue.push_after(
                self.now,
                extra + d,
                Event::Return {
                    exchange: id,
                    generation: a.generation,
                    reply,
                },
            ),
            Leg::Lost { stuck } => {
                if let Some(x) = self.exchanges.get_mut(id) {
                    x.stuck |= stuck;
                }
            }
            Leg::Reset | Leg::Refused => self.fail_now(id, Failure::Reset),
        }
    }

    fn fail_now(&mut self, exchange: u64, failure: Failure) {
        self.queue
            .push_after(self.now, Duration::ZERO, Event::Fail { exchange, failure });
    }

    /// The exchange ends (if its caller still waits): the caller gets the outcome.
    fn finish(&mut self, id: u64, outcome: Outcome) {
        let Some(x) = self.exchanges.remove(id) else {
            return;
        };
        let number = x.caller.number();
        self.record(x.caller.node(), "outcome", || summary::Ended {
            x: id,
            cmd: number,
            outcome: &outcome,
        });
        match x.caller {
            Caller::Sidecar(i, tag) => {
                if let Some(node) = self.sidecars.get_mut(i as usize) {
                    node.complete(self.now, &tag, outcome);
                }
                self.after_sidecar_step(i);
            }
            Caller::Server(id, token) => {
                if let Some(node) = self.servers.node_mut(id) {
                    node.on_outcome(self.now, token, outcome);
                }
                self.after_server_step(id);
            }
        }
    }

    /// Set the fault of the link `client` → `server` now.
    pub fn set_link(&mut self, client: NodeId, server: NodeId, fault: LinkFault) {
        self.log.record(self.now, "links", "set", || {
            json!({ "client": client.to_string(), "server": server.to_string(), "fault": fault })
        });
        let change = self.links.set(client, server, fault);
        let on_link: Vec<(u64, bool)> = self
            .exchanges
            .iter()
            .filter(|(_, x)| x.caller.node() == client && x.server == server)
            .map(|(id, x)| (id, x.stuck))
            .collect();
        let stuck_stream = self.stuck_streams.remove(&(client, server));
        match change {
            OnChange::Nothing => {}
            OnChange::ResetOpen => {
                self.end_streams(client, server, "connection reset");
                for (id, _) in on_link {
                    self.fail_now(id, Failure::Reset);
                }
            }
            OnChange::CloseStuck => {
                if stuck_stream {
                    self.end_streams(client, server, "connection closed");
                }
                for (id, _) in on_link.into_iter().filter(|(_, stuck)| *stuck) {
                    self.fail_now(id, Failure::Closed);
                }
            }
        }
    }

    /// The connection of the streams between `client` and `server` is gone: the
    /// server forgets them now, the client learns it as a stream end, and what was on
    /// its way over the link is lost (a new generation).
    fn end_streams(&mut self, client: NodeId, server: NodeId, reason: &'static str) {
        *self.generations.entry((client, server)).or_default() += 1;
        if let Some(node) = self.servers.node_mut(server) {
            node.on_link_reset(self.now, client);
        }
        if self.servers.contains(client) {
            self.stream_end_after(Duration::ZERO, server, client, reason);
        }
    }

    /// The streams `from` → `to` end `after` from now, for `reason` (news only to the
    /// process `to` runs now).
    fn stream_end_after(
        &mut self,
        after: Duration,
        from: NodeId,
        to: NodeId,
        reason: &'static str,
    ) {
        let epoch = self.epoch(to);
        let end = Event::StreamEnd {
            from,
            to,
            reason,
            epoch,
        };
        self.queue.push_after(self.now, after, end);
    }

    fn server_wakes(&mut self, id: NodeId, at: Duration) {
        let Some(slot) = self.servers.get_mut(id).filter(|s| s.wake == Some(at)) else {
            return;
        };
        slot.wake = None;
        slot.node.on_timer(self.now);
        self.after_server_step(id);
    }

    /// Log what a server reported, start the calls it wants made, and schedule its
    /// next timer.
    fn after_server_step(&mut self, id: NodeId) {
        self.stepped.push(id);
        self.log_server_notes(id);
        let Some(node) = self.servers.node_mut(id) else {
            return;
        };
        let (calls, pushes, ended) = (
            node.take_calls(),
            node.take_pushes(),
            node.take_stream_ends(),
        );
        for call in calls {
            let caller = Caller::Server(id, call.token);
            self.send(caller, call.to, call.request, call.timeout);
        }
        for (to, line) in pushes {
            self.push_line(id, to, line);
        }
        for to in ended {
            self.stream_end_after(self.links.base, id, to, "stream ended");
        }
        self.schedule_server_wake(id);
    }

    /// Send a stream line from server `from` to its reader `to` over their link (the
    /// reader is the client). A line lost to a fault is lost; re-opening a dead stream
    /// is not simulated yet.
    fn push_line(&mut self, from: NodeId, to: NodeId, line: String) {
        let leg = self
            .links
            .leg(to, from, Direction::FromTarget, line.len(), &mut self.rng);
        if let Leg::Lost { stuck: true } = leg {
            self.stuck_streams.insert((to, from));
        }
        if let Leg::Deliver(d) = leg {
            let push = Event::Push {
                from,
                to,
                generation: self.generation(to, from),
                line,
                epochs: (self.epoch(from), self.epoch(to)),
            };
            self.queue.push_after(self.now, d, push);
        }
    }

    fn log_server_notes(&mut self, id: NodeId) {
        let Some(node) = self.servers.node_mut(id) else {
            return;
        };
        if !self.log.writes() {
            // Counted, not built: a counting log never reads them.
            for _ in 0..node.drop_notes() {
                self.record(id, "note", || serde_json::Value::Null);
            }
            return;
        }
        for note in node.take_notes() {
            self.record(id, "note", || note);
        }
    }

    /// Log an event of `node` now (see [`EventLog::record`]); its name is
    /// only written out when the log writes lines (a counting log only counts).
    fn record<D: serde::Serialize>(
        &mut self,
        node: NodeId,
        kind: &str,
        detail: impl FnOnce() -> D,
    ) {
        let name = match self.log.writes() {
            true => node.to_string(),
            false => String::new(),
        };
        self.log.record(self.now, &name, kind, detail);
    }

    fn schedule_server_wake(&mut self, id: NodeId) {
        let Some(slot) = self.servers.get_mut(id) else {
            return;
        };
        let Some(at) = slot.node.next_wakeup() else {
            slot.wake = None;
            return;
        };
        let at = at.max(self.now);
        if slot.wake != Some(at) {
            slot.wake = Some(at);
            self.queue.push(at, Event::ServerWake { id, at });
        }
    }
}

/// Test-only: `node`'s shell distorted by `bug`, if there is one.
fn plant(bug: Option<PlantedBug>, node: &mut SidecarNode) {
    if let Some(bug) = bug {
        node.distort(bug.distortion(node.core().config()));
    }
}
