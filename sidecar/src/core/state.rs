//! The core's state as enums, so no two fields can disagree about where the instance
//! stands.

use std::time::Duration;

use super::io::{CommandId, RevokeReason};

/// Where the registration stands: exactly one of these at any time.
#[derive(Debug, Clone, PartialEq)]
pub enum Registration {
    /// Nothing of ours holds the key; register once vLLM is healthy and `retry_at` has
    /// passed (a failed attempt backs off).
    Unregistered {
        /// Not before this time.
        retry_at: Duration,
    },
    /// A lease grant is out. `replacing`: a lease that still holds the key (after a 409)
    /// and is revoked once the new one does.
    Granting {
        /// The grant's command.
        grant: CommandId,
        /// The incarnation this registration will carry.
        incarnation: String,
        /// The lease to revoke once the new one holds the key.
        replacing: Option<i64>,
    },
    /// The key is being put with `lease`, granted at `granted_at` with `ttl` seconds.
    Putting {
        /// The put's command.
        put: CommandId,
        /// The new lease.
        lease: i64,
        /// Its TTL in seconds, as granted.
        ttl: i64,
        /// When the grant was answered: the lease lives at least `ttl` from then.
        granted_at: Duration,
        /// The incarnation the value carries.
        incarnation: String,
        /// The lease to revoke once the new one holds the key.
        replacing: Option<i64>,
    },
    /// The key is in etcd under `lease`.
    Registered(Lease),
    /// `lease` is being revoked; then the core goes on as `then` says.
    Revoking {
        /// The revoke's command.
        revoke: CommandId,
        /// The lease being revoked.
        lease: i64,
        /// Why.
        why: RevokeReason,
        /// What the core does once etcd answers.
        then: AfterRevoke,
    },
    /// Deregistered on request (drain): stays so until undrained.
    Drained,
    /// Deregistered because vLLM sleeps: its page is still read, and the instance
    /// registers again once it says an engine is awake.
    Asleep,
    /// The exit command has been issued.
    Exited,
}

/// What follows a revoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRevoke {
    /// Register again once vLLM is healthy.
    Register,
    /// Stay deregistered (drain).
    Drain,
    /// Stay deregistered while vLLM sleeps.
    Asleep,
    /// Exit, at the latest at `deadline`.
    Exit {
        /// Exit by then even if etcd has not answered.
        deadline: Duration,
    },
}

impl AfterRevoke {
    /// Which wins when two reasons to revoke meet: exit over drain over sleep over
    /// register.
    pub fn rank(&self) -> u8 {
        match self {
            AfterRevoke::Register => 0,
            AfterRevoke::Asleep => 1,
            AfterRevoke::Drain => 2,
            AfterRevoke::Exit { .. } => 3,
        }
    }
}

/// A lease that holds the key, and how sure the core is that it is alive.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub id: i64,
    pub incarnation: String,
    /// Seconds etcd last said the lease had.
    pub ttl: i64,
    /// When etcd last refreshed it, at the earliest: when the keepalive it answered was
    /// sent (its answer may come in much later, after the process was stopped).
    pub last_refresh: Duration,
    /// When the next keepalive goes out.
    pub next_keepalive: Duration,
}

impl Lease {
    /// When the lease may have expired, unless refreshed before (its TTL from the
    /// earliest time etcd may have last refreshed it).
    pub fn certain_expiry(&self) -> Duration {
        self.last_refresh + Duration::from_secs(self.ttl.unsigned_abs())
    }
}

impl Registration {
    /// The lease of ours that may hold the key, if any (a grant in flight has none yet).
    pub fn lease(&self) -> Option<i64> {
        match self {
            Registration::Putting { lease, .. } | Registration::Revoking { lease, .. } => {
                Some(*lease)
            }
            Registration::Registered(l) => Some(l.id),
            _ => None,
        }
    }

    /// The incarnation in etcd, while registered.
    pub fn registered(&self) -> Option<&Lease> {
        match self {
            Registration::Registered(l) => Some(l),
            _ => None,
        }
    }
}

/// The start-up gate on `/health`, then steady probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Never healthy yet: after a failed probe wait `wait` (1 s, doubling, capped at the
    /// TTL), as the reference does.
    Starting { wait: Duration },
    /// Healthy once: probe every probe interval.
    Running,
}

/// What the core knows of vLLM's health and its probe schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    pub gate: Gate,
    /// The last probe answered 2xx.
    pub healthy: bool,
    /// Failed probes in a row.
    pub fails: u32,
    /// When the next probe goes out (unless one is in flight).
    pub next: Duration,
    pub in_flight: Option<CommandId>,
}

/// The heartbeat cycle (scrape, then post): at most one in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// When the next cycle starts.
    pub due: Duration,
    pub in_flight: Option<CommandId>,
    /// The last registration was caused by a 409: its first heartbeat backs off.
    pub after_conflict: bool,
}

/// What an in-flight command was for, so its answer is read in the right context.
#[derive(Debug, Clone, PartialEq)]
pub enum Pending {
    Probe,
    Grant,
    Put,
    Keepalive {
        lease: i64,
        /// When it was sent: etcd refreshed the lease then at the earliest.
        sent: Duration,
    },
    Scrape {
        incarnation: String,
    },
    Post {
        incarnation: String,
    },
    /// A revoke the registration does not wait on (a replaced or orphaned lease).
    SideRevoke {
        lease: i64,
    },
    Revoke,
    /// A read of the MASTER key.
    MasterRead,
}
