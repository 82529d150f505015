//! What goes into the core and what comes out of it: plain values, so a run can be
//! logged, compared and replayed.
//!
//! Every command that expects an answer carries a [`CommandId`]; the answer names it.
//! An answer whose id the core no longer waits for (the registration it was for is gone)
//! is ignored, so a slow answer can never act on a newer state.

use std::time::Duration;

/// Names one command and its answer. Ids grow from 1 and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u64);

/// Something that happened, given to [`crate::core::Core::handle`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Only time passed (the wake-up [`crate::core::Core::next_wakeup`] asked for, or any
    /// other): the core issues what has fallen due.
    Timer,
    /// The outcome of the command `CommandId`.
    Answer(CommandId, Answer),
    /// Revoke the lease and exit (SIGTERM / SIGINT).
    Shutdown,
    /// Revoke the lease and stay deregistered (SIGUSR1, `POST /drain`).
    Drain,
    /// Register again after a drain (SIGUSR2, `POST /undrain`).
    Undrain,
}

/// How a command went. Each variant answers one kind of [`Command`]; an answer of the
/// wrong kind for its id is ignored.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `/health` answered 2xx.
    HealthOk,
    /// `/health` failed (status, transport, timeout), with why.
    HealthFailed(String),
    LeaseGranted {
        lease: i64,
        ttl: i64,
    },
    GrantFailed(String),
    PutDone,
    PutFailed(String),
    /// etcd refreshed the lease and says how many seconds it has left (0: it is gone).
    KeepaliveTtl(i64),
    /// etcd says the lease does not exist any more.
    LeaseNotFound,
    /// No usable answer from any endpoint: the lease may well still be alive.
    KeepaliveFailed(String),
    /// The `/metrics` page; `openmetrics` when it was served as OpenMetrics text.
    ScrapePage {
        text: String,
        openmetrics: bool,
    },
    /// No page: `reason` is a short stable label, `detail` the message.
    ScrapeFailed {
        reason: String,
        detail: String,
    },
    /// The master answered the heartbeat with this HTTP status.
    HeartbeatStatus(u16),
    /// The heartbeat got no answer (transport error, timeout).
    HeartbeatFailed(String),
    RevokeDone,
    RevokeFailed(String),
}

/// What the core wants done. The driver runs each one as it comes and answers those that
/// have an id; it decides nothing itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    ProbeHealth {
        id: CommandId,
    },
    GrantLease {
        id: CommandId,
        ttl: i64,
    },
    /// Put `key` = `value` (the `InstanceMetaInfo` JSON) with `lease`.
    PutKey {
        id: CommandId,
        key: String,
        value: String,
        lease: i64,
    },
    Keepalive {
        id: CommandId,
        lease: i64,
    },
    Scrape {
        id: CommandId,
    },
    /// POST this exact JSON body to the master's heartbeat endpoint.
    PostHeartbeat {
        id: CommandId,
        body: String,
    },
    Revoke {
        id: CommandId,
        lease: i64,
    },
    /// Look up the served model and log it (once, before the first registration); no
    /// answer is expected.
    LogServedModel,
    /// Something to log and count; see [`Note`].
    Note(Note),
    /// Stop: the driver returns this exit code. Nothing follows it.
    Exit {
        code: i32,
    },
}

/// Why a lease was given up for lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLoss {
    /// etcd said so (TTL 0 or lease not found).
    Gone,
    /// Its TTL certainly ran out since the last successful refresh.
    Expired,
}

/// Why the core revokes its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeReason {
    Unhealthy,
    Drain,
    Shutdown,
    /// A lease replaced after a 409 (or one granted for a registration given up).
    Replaced,
}

/// What happened, as data: the driver turns each into a log line and its counters.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Start-up: `/health` not 2xx yet; the next probe in `retry_in`.
    WaitingForHealth {
        retry_in: Duration,
        error: String,
    },
    /// A probe failed after start-up (`fails` in a row out of `threshold`).
    HealthFailed {
        fails: u32,
        threshold: u32,
        error: String,
    },
    HealthRecovered {
        failed_probes: u32,
    },
    Registered {
        key: String,
        incarnation: String,
        lease: i64,
        ttl: i64,
    },
    RegistrationFailed {
        error: String,
        retry_in: Duration,
    },
    KeepaliveOk {
        lease: i64,
        ttl: i64,
    },
    KeepaliveFailed {
        lease: i64,
        error: String,
        retry_in: Duration,
    },
    LeaseLost {
        lease: i64,
        why: LeaseLoss,
    },
    /// The lease is being revoked (the key disappears once etcd answers).
    Revoking {
        lease: i64,
        why: RevokeReason,
    },
    Deregistered {
        lease: i64,
        why: RevokeReason,
    },
    RevokeFailed {
        lease: i64,
        why: RevokeReason,
        error: String,
    },
    /// A scrape gave no usable page; no heartbeat this round.
    ScrapeFailed {
        reason: String,
        detail: String,
    },
    /// The lenient parser skipped lines of an audited page.
    LinesSkipped {
        lines: usize,
    },
    /// The master's answer to a heartbeat: `"ok"`, `"conflict"`, `"unauthorized"`,
    /// `"other"` (with the status) or `"error"` (no answer, with why).
    Heartbeat {
        answer: &'static str,
        status: Option<u16>,
        error: Option<String>,
    },
    Draining,
    Undraining,
    ShuttingDown {
        timeout: Duration,
    },
    /// The final revoke did not finish within `--shutdown-timeout`.
    ShutdownTimedOut,
}
