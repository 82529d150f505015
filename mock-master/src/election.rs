//! Which replica is master, decided as xllm-service's scheduler decides it
//! (docs/contract.md, "Election"), with no socket and no clock: time is an argument,
//! etcd calls go out as [`Call`]s and come back as [`Outcome`]s by id.
//!
//! A replica first registers `<ns>XLLM:SERVICE:<service_name>` under a lease of its own
//! (grant, then put), then runs for master: grant a second lease, then a txn
//! `create_revision(<ns>XLLM:SERVICE:MASTER) == 0 → put MASTER = <service_name>` on it.
//! The txn's winner is [`Role::Master`]; a loser is [`Role::Standby`] and runs again when
//! the watch reports the MASTER key deleted (or a listing finds it gone). Both leases are
//! kept alive every third of the TTL.
//!
//! Losing the lease: a master whose keepalives have not succeeded for a whole TTL
//! (counted from when the last successful keepalive was *sent*, so never later than
//! etcd could expire it), or whose keepalive etcd answers with TTL 0, or whose MASTER
//! key is deleted or rewritten by another, stops being master at once
//! ([`RoleChange::LostMastership`]) and runs for master again as a candidate. The real
//! scheduler never steps down; this mock does, so that two replicas never both publish.
//!
//! Results that arrive for calls made before a [`Election::restart`] are ignored (the
//! ids are forgotten), as are watch events at or below the revision the last txn saw.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::etcd::{EventKind, KeyValue, WatchEvent};
use crate::role_event::{RoleChange, RoleEvent};

/// The MASTER key's last part (`<ns>XLLM:SERVICE:MASTER`).
pub const MASTER_NAME: &str = "MASTER";
/// The service keys' prefix after the namespace.
pub const SERVICE_PREFIX: &str = "XLLM:SERVICE:";
/// How long a failed call waits before it is tried again.
pub const RETRY: Duration = Duration::from_millis(250);

/// A replica's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Not master, and not yet sure who is (start, after losing mastership, after the
    /// MASTER key went away): running for master.
    Candidate,
    /// Its txn created the MASTER key and its lease is alive: it publishes LOADMETRICS.
    Master,
    /// Another replica holds the MASTER key: it follows that master's LOADMETRICS.
    Standby,
}

impl Role {
    /// The role as `/_mock/role` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Candidate => "candidate",
            Role::Master => "master",
            Role::Standby => "standby",
        }
    }
}

/// Which of the two leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The lease of the replica's own service key.
    Service,
    /// The lease of the MASTER key (granted for each run for master).
    Master,
}

/// An etcd call the election wants made now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `/v3/lease/grant` with `ttl_secs`; answer [`Outcome::Granted`].
    Grant { purpose: Purpose, ttl_secs: i64 },
    /// `/v3/kv/put` of the service key on `lease`; answer [`Outcome::Put`].
    PutService {
        key: String,
        value: String,
        lease: i64,
    },
    /// `/v3/kv/txn`: if `key`'s create_revision is 0, put `value` on `lease`, else read
    /// `key`; answer [`Outcome::Won`] or [`Outcome::Lost`] with the value read.
    CreateMaster {
        key: String,
        value: String,
        lease: i64,
    },
    /// `/v3/lease/keepalive` of `lease`; answer [`Outcome::Alive`].
    KeepAlive { purpose: Purpose, lease: i64 },
}

/// One call: carry out `op`, then [`Election::on_result`]`(now, id, outcome)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Names the call in its answer; never reused, not even across a restart.
    pub id: u64,
    /// What to do.
    pub op: Op,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The lease etcd granted.
    Granted { lease: i64 },
    /// The put is done, at `revision`.
    Put { revision: i64 },
    /// The txn put the MASTER key, at `revision`.
    Won { revision: i64 },
    /// The MASTER key existed with value `holder` (if readable); `revision` is the
    /// txn's header revision.
    Lost {
        holder: Option<String>,
        revision: i64,
    },
    /// A keepalive answer: the lease's remaining TTL (0 or less: etcd no longer knows it).
    Alive { ttl_secs: i64 },
    /// No answer etcd vouched for (timeout, refused connection, an error status).
    Failed { error: String },
}

/// What the election needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Normalized namespace (`""` or `/ns/`).
    pub namespace: String,
    /// `<ip>:<rpc port>`: the service key's last part and the MASTER key's value.
    pub service_name: String,
    /// Both leases' TTL.
    pub ttl: Duration,
}

/// A lease the election holds and keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    id: i64,
    /// The lease lives at least until `alive_at + ttl`: the send time of the grant or of
    /// the last keepalive etcd answered with a positive TTL.
    alive_at: Duration,
    next_keepalive: Duration,
    /// A keepalive under way.
    renewing: bool,
}

/// One lease's progress: held lease, whether its key is written, a call under way.
#[derive(Debug, Clone, Default)]
struct Slot {
    lease: Option<Held>,
    /// Service: the key is put. Master: unused (the role says it).
    done: bool,
    /// A grant, put or txn under way.
    busy: bool,
    /// Not before this (after a failure).
    retry_at: Duration,
    /// A txn on the current lease failed without an answer: it may have succeeded.
    uncertain: bool,
}

/// A call under way: when it was sent and what it was.
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Duration,
    purpose: Purpose,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Grant,
    Put,
    Txn,
    KeepAlive { lease: i64 },
}

/// One replica's election.
#[derive(Debug, Clone)]
pub struct Election {
    settings: Settings,
    role: Role,
    /// The master as seen: the MASTER key's value (`None`: absent or unknown).
    holder: Option<String>,
    /// The revision of the last txn answer or MASTER event applied; older events are
    /// history this replica has already acted on.
    known: i64,
    /// The revision the service key was put at.
    service_rev: i64,
    service: Slot,
    master: Slot,
    sent: BTreeMap<u64, Sent>,
    next_id: u64,
    calls: Vec<Call>,
    notes: Vec<RoleEvent>,
    /// Act at the next tick whatever the timers say (after a restart).
    kick: bool,
}

impl Election {
    /// A fresh candidate; its first calls go out at the first [`Election::tick`].
    pub fn new(settings: Settings) -> Election {
        Election {
            settings,
            role: Role::Candidate,
            holder: None,
            known: 0,
            service_rev: 0,
            service: Slot::default(),
            master: Slot::default(),
            sent: BTreeMap::new(),
            next_id: 1,
            calls: Vec::new(),
            notes: Vec::new(),
            kick: true,
        }
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Master: the only role that publishes LOADMETRICS.
    pub fn is_master(&self) -> bool {
        self.role == Role::Master
    }

    /// This replica's name in etcd.
    pub fn service_name(&self) -> &str {
        &self.settings.service_name
    }

    /// The master as this replica sees it (the MASTER key's value).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Whether the service key is written (as far as this replica knows).
    pub fn registered(&self) -> bool {
        self.service.done
    }

    /// `<ns>XLLM:SERVICE:MASTER`.
    pub fn master_key(&self) -> String {
        format!("{}{SERVICE_PREFIX}{MASTER_NAME}", self.settings.namespace)
    }

    /// `<ns>XLLM:SERVICE:<service_name>`.
    pub fn service_key(&self) -> String {
        let s = &self.settings;
        format!("{}{SERVICE_PREFIX}{}", s.namespace, s.service_name)
    }

    /// Whether `key` is `<ns>XLLM:SERVICE:<name>` (read where it lies: every event of the
    /// watch is asked about two keys).
    fn is_service_key(&self, key: &[u8], name: &str) -> bool {
        let rest = key.strip_prefix(self.settings.namespace.as_bytes());
        rest.and_then(|k| k.strip_prefix(SERVICE_PREFIX.as_bytes())) == Some(name.as_bytes())
    }

    /// The calls to make, in order, since the last call.
    pub fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    /// The role changes since the last call, in order.
    pub fn take_notes(&mut self) -> Vec<RoleEvent> {
        std::mem::take(&mut self.notes)
    }

    fn ttl_secs(&self) -> i64 {
        i64::try_from(self.settings.ttl.as_secs())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs().unsigned_abs())
    }

    fn keepalive_period(&self) -> Duration {
        (self.ttl() / 3).max(Duration::from_millis(100))
    }

    fn slot(&mut self, p: Purpose) -> &mut Slot {
        match p {
            Purpose::Service => &mut self.service,
            Purpose::Master => &mut self.master,
        }
    }
}

/// Time, and the calls it makes due.
impl Election {
    /// The earliest time [`Election::tick`] has something to do (`None`: it waits for
    /// an answer or an event).
    pub fn next_wakeup(&self) -> Option<Duration> {
        if self.kick {
            return Some(Duration::ZERO);
        }
        let ttl = self.ttl();
        let mut at: Option<Duration> = None;
        let mut at_least = |t: Duration| at = Some(at.map_or(t, |a| a.min(t)));
        for slot in [&self.service, &self.master] {
            if let Some(h) = slot.lease {
                at_least(h.alive_at + ttl);
                if !h.renewing {
                    at_least(h.next_keepalive);
                }
            }
            if !slot.busy && slot.retry_at > Duration::ZERO {
                at_least(slot.retry_at);
            }
        }
        at
    }

    /// Expire what has expired at `now` and make the calls that are due.
    pub fn tick(&mut self, now: Duration) {
        self.kick = false;
        self.expire(now);
        self.drive(now);
        // A retry time that has passed is spent, whether or not the slot still needed
        // it: [`Election::next_wakeup`] never answers a time already gone.
        for slot in [&mut self.service, &mut self.master] {
            if slot.retry_at <= now {
                slot.retry_at = Duration::ZERO;
            }
        }
    }

    /// Leases with no successful keepalive for a whole TTL are gone.
    fn expire(&mut self, now: Duration) {
        let ttl = self.ttl();
        for p in [Purpose::Service, Purpose::Master] {
            let gone = self.slot(p).lease.is_some_and(|h| now >= h.alive_at + ttl);
            if gone {
                self.lease_gone(p, "keepalive failed for the lease TTL");
            }
        }
    }

    /// The lease of `p` is gone: its key with it.
    fn lease_gone(&mut self, p: Purpose, why: &str) {
        let slot = self.slot(p);
        slot.lease = None;
        slot.done = false;
        if p == Purpose::Master && self.role == Role::Master {
            self.holder = None;
            self.demote(why);
        }
    }

    /// Master no more: a candidate again, at once.
    fn demote(&mut self, why: &str) {
        self.role = Role::Candidate;
        self.note(RoleChange::LostMastership, why);
    }

    fn note(&mut self, change: RoleChange, reason: &str) {
        self.notes.push(RoleEvent {
            change,
            service_name: self.settings.service_name.clone(),
            master: self.holder.clone(),
            reason: reason.to_string(),
        });
    }

    fn call(&mut self, now: Duration, purpose: Purpose, kind: Kind, op: Op) {
        let id = self.next_id;
        self.next_id += 1;
        self.sent.insert(
            id,
            Sent {
                at: now,
                purpose,
                kind,
            },
        );
        self.calls.push(Call { id, op });
    }

    /// Make every call that is due and not under way.
    fn drive(&mut self, now: Duration) {
        self.keepalives(now);
        if !self.service.done {
            self.step(now, Purpose::Service);
        } else if self.role == Role::Candidate {
            self.step(now, Purpose::Master);
        }
    }

    fn keepalives(&mut self, now: Duration) {
        for p in [Purpose::Service, Purpose::Master] {
            let Some(h) = self.slot(p).lease else {
                continue;
            };
            if h.renewing || now < h.next_keepalive {
                continue;
            }
            if let Some(l) = self.slot(p).lease.as_mut() {
                l.renewing = true;
            }
            let op = Op::KeepAlive {
                purpose: p,
                lease: h.id,
            };
            self.call(now, p, Kind::KeepAlive { lease: h.id }, op);
        }
    }

    /// The next step of `p`'s registration: a grant, then the put or the txn.
    fn step(&mut self, now: Duration, p: Purpose) {
        let slot = self.slot(p);
        if slot.busy || now < slot.retry_at {
            return;
        }
        slot.busy = true;
        let lease = slot.lease.map(|h| h.id);
        let value = self.settings.service_name.clone();
        match (lease, p) {
            (None, _) => {
                let ttl_secs = self.ttl_secs();
                let op = Op::Grant {
                    purpose: p,
                    ttl_secs,
                };
                self.call(now, p, Kind::Grant, op);
            }
            (Some(lease), Purpose::Service) => {
                let key = self.service_key();
                let op = Op::PutService { key, value, lease };
                self.call(now, p, Kind::Put, op);
            }
            (Some(lease), Purpose::Master) => {
                let key = self.master_key();
                let op = Op::CreateMaster { key, value, lease };
                self.call(now, p, Kind::Txn, op);
            }
        }
    }
}

/// Answers and events.
impl Election {
    /// How call `id` ended. Unknown ids (from before a restart, or answered) are ignored.
    pub fn on_result(&mut self, now: Duration, id: u64, outcome: Outcome) {
        let Some(sent) = self.sent.remove(&id) else {
            return;
        };
        match sent.kind {
            Kind::KeepAlive { lease } => self.on_keepalive(now, sent, lease, outcome),
            _ => {
                self.slot(sent.purpose).busy = false;
                if let Outcome::Failed { .. } = outcome {
                    let slot = self.slot(sent.purpose);
                    slot.retry_at = now + RETRY;
                    slot.uncertain |= sent.kind == Kind::Txn;
                } else {
                    self.slot(sent.purpose).retry_at = Duration::ZERO;
                    self.on_answer(sent, outcome);
                }
            }
        }
        self.drive(now);
    }

    /// A grant, put or txn answered by etcd.
    fn on_answer(&mut self, sent: Sent, outcome: Outcome) {
        let period = self.keepalive_period();
        match (sent.kind, outcome) {
            (Kind::Grant, Outcome::Granted { lease }) => {
                self.slot(sent.purpose).uncertain = false;
                self.slot(sent.purpose).lease = Some(Held {
                    id: lease,
                    alive_at: sent.at,
                    next_keepalive: sent.at + period,
                    renewing: false,
                });
            }
            (Kind::Put, Outcome::Put { revision }) => {
                self.service.done = true;
                self.service_rev = revision;
            }
            (Kind::Txn, Outcome::Won { revision }) => self.won(revision),
            (Kind::Txn, Outcome::Lost { holder, revision }) => self.lost(holder, revision),
            _ => {}
        }
    }

    fn won(&mut self, revision: i64) {
        self.known = self.known.max(revision);
        self.holder = Some(self.settings.service_name.clone());
        self.role = Role::Master;
        self.note(RoleChange::Elected, "txn won");
    }

    /// The MASTER key exists. If it names this replica after a txn on this lease went
    /// unanswered, that txn succeeded: master on this lease. If it names this replica
    /// otherwise, it is a key of an older lease, which this replica no longer keeps
    /// alive: wait as a standby for it to expire.
    fn lost(&mut self, holder: Option<String>, revision: i64) {
        self.known = self.known.max(revision);
        let mine = holder.as_deref() == Some(self.settings.service_name.as_str());
        if mine && self.master.uncertain {
            self.won(revision);
            return;
        }
        self.holder = holder;
        // The lease of a lost txn is not kept alive (it holds nothing).
        self.master.lease = None;
        self.role = Role::Standby;
        let why = match mine {
            true => "an older lease of this replica holds the MASTER key",
            false => "txn lost",
        };
        self.note(RoleChange::Standby, why);
    }

    fn on_keepalive(&mut self, now: Duration, sent: Sent, lease: i64, outcome: Outcome) {
        let period = self.keepalive_period();
        let p = sent.purpose;
        let Some(h) = self.slot(p).lease.as_mut().filter(|h| h.id == lease) else {
            return; // a lease given up since
        };
        h.renewing = false;
        match outcome {
            Outcome::Alive { ttl_secs } if ttl_secs > 0 => {
                h.alive_at = h.alive_at.max(sent.at);
                h.next_keepalive = (sent.at + period).max(now);
            }
            Outcome::Alive { .. } => self.lease_gone(p, "etcd no longer knows the lease"),
            _ => h.next_keepalive = now + RETRY.min(period),
        }
    }

    /// One event of the watch on `<ns>XLLM:`: the MASTER key's and this replica's
    /// service key's changes matter; others are ignored.
    pub fn on_watch_event(&mut self, now: Duration, ev: &WatchEvent) {
        let rev = ev.kv.mod_revision;
        if self.is_service_key(&ev.kv.key, MASTER_NAME) {
            if rev != 0 && rev <= self.known {
                return;
            }
            self.known = self.known.max(rev);
            match ev.kind {
                EventKind::Delete => self.master_gone("the MASTER key was deleted"),
                EventKind::Put => self.master_is(text(&ev.kv.value)),
            }
        } else if self.is_service_key(&ev.kv.key, &self.settings.service_name)
            && ev.kind == EventKind::Delete
            && rev > self.service_rev
        {
            self.service.done = false;
        }
        self.drive(now);
    }

    /// A fresh listing of `<ns>XLLM:` at `revision`: the MASTER key's value, or its
    /// absence, and this replica's service key.
    pub fn on_listing(&mut self, now: Duration, revision: i64, kvs: &[KeyValue]) {
        let master_key = self.master_key();
        let service_key = self.service_key();
        if revision > self.known {
            self.known = revision;
            match kvs.iter().find(|kv| kv.key == master_key.as_bytes()) {
                Some(kv) => self.master_is(text(&kv.value)),
                None => self.master_gone("no MASTER key in a listing"),
            }
        }
        let listed = kvs.iter().any(|kv| kv.key == service_key.as_bytes());
        if !listed && revision > self.service_rev {
            self.service.done = false;
        }
        self.drive(now);
    }

    /// etcd lost its data and its revisions started over: revisions seen before mean
    /// nothing now, so the next listing and every event after it count.
    pub fn on_revision_reset(&mut self) {
        self.known = 0;
        self.service_rev = 0;
    }

    /// Nobody holds the MASTER key: run for it.
    fn master_gone(&mut self, why: &str) {
        self.holder = None;
        if self.role == Role::Master {
            self.demote(why);
        }
        self.role = Role::Candidate;
    }

    /// The MASTER key names `holder`.
    fn master_is(&mut self, holder: String) {
        let mine = holder == self.settings.service_name;
        self.holder = Some(holder);
        match self.role {
            Role::Master if !mine => {
                self.master.lease = None;
                self.demote("another replica holds the MASTER key");
                self.role = Role::Standby;
            }
            Role::Candidate if !mine && !self.master.busy => {
                self.master.lease = None;
                self.role = Role::Standby;
                self.note(RoleChange::Standby, "another replica holds the MASTER key");
            }
            _ => {}
        }
    }

    /// The process restarts: every call under way forgotten, both leases dropped (not
    /// revoked: they expire), a candidate again from the next tick.
    pub fn restart(&mut self) {
        if self.role == Role::Master {
            self.holder = None;
            self.demote("restart");
        }
        let notes = std::mem::take(&mut self.notes);
        // Ids keep growing, so that no answer to a forgotten call matches a new one.
        let next_id = self.next_id;
        *self = Election::new(self.settings.clone());
        self.notes = notes;
        self.next_id = next_id;
    }
}

fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_key_is_the_namespace_the_prefix_and_the_name_exactly() {
        let e = Election::new(Settings {
            namespace: "/ns/".into(),
            service_name: "10.0.0.1:9999".into(),
            ttl: Duration::from_secs(3),
        });
        for (key, name, is) in [
            ("/ns/XLLM:SERVICE:MASTER", MASTER_NAME, true),
            ("/ns/XLLM:SERVICE:10.0.0.1:9999", "10.0.0.1:9999", true),
            ("/ns/XLLM:SERVICE:MASTER2", MASTER_NAME, false),
            ("/ns/XLLM:SERVICE:MASTE", MASTER_NAME, false),
            ("/other/XLLM:SERVICE:MASTER", MASTER_NAME, false),
            ("XLLM:SERVICE:MASTER", MASTER_NAME, false),
            ("/ns/XLLM:LOADMETRICS:MASTER", MASTER_NAME, false),
        ] {
            assert_eq!(e.is_service_key(key.as_bytes(), name), is, "{key}");
            let built = match name {
                MASTER_NAME => e.master_key(),
                _ => e.service_key(),
            };
            assert_eq!(key == built, is, "{key}");
        }
    }
}
