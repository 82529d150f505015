//! What goes into the core and what comes out of it: plain values, so a run can be
//! logged, compared and replayed.
//!
//! Every command that expects an answer carries a [`CommandId`]; the answer names it.
//! An answer whose id the core no longer waits for (the registration it was for is gone)
//! is ignored, so a slow answer can never act on a newer state.

use std::time::Duration;

use super::target::HeartbeatTarget;

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
    /// etcd granted a lease.
    LeaseGranted {
        /// The lease's id.
        lease: i64,
        /// Seconds etcd granted (it may raise a TTL below its minimum).
        ttl: i64,
    },
    /// The grant got no lease, with why.
    GrantFailed(String),
    /// The key is in etcd under the lease it was put with.
    PutDone,
    /// The put failed, with why.
    PutFailed(String),
    /// etcd refreshed the lease and says how many seconds it has left (0: it is gone).
    KeepaliveTtl(i64),
    /// etcd says the lease does not exist any more.
    LeaseNotFound,
    /// No usable answer from any endpoint: the lease may well still be alive.
    KeepaliveFailed(String),
    /// The `/metrics` page; `openmetrics` when it was served as OpenMetrics text.
    ScrapePage {
        /// The whole page, decoded.
        text: String,
        /// The `Content-Type` named OpenMetrics.
        openmetrics: bool,
    },
    /// No page: `reason` is a short stable label, `detail` the message.
    ScrapeFailed {
        /// A short stable label (a counter's label value).
        reason: String,
        /// The message, for the log.
        detail: String,
    },
    /// The master answered the heartbeat with this HTTP status.
    HeartbeatStatus(u16),
    /// The heartbeat got no answer (transport error, timeout).
    HeartbeatFailed(String),
    /// etcd revoked the lease: the key is gone.
    RevokeDone,
    /// The revoke failed, with why; the key goes when the lease runs out.
    RevokeFailed(String),
    /// The MASTER key's value (`None`: there is no such key), as text.
    MasterValue(Option<String>),
    /// The MASTER key could not be read (no etcd endpoint answered, auth refused, ...).
    MasterReadFailed(String),
}

/// What the core wants done. The driver runs each one as it comes and answers those that
/// have an id; it decides nothing itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `GET /health` on vLLM; answered [`Answer::HealthOk`] or [`Answer::HealthFailed`].
    ProbeHealth {
        /// Names the answer.
        id: CommandId,
    },
    /// Ask etcd for a lease; answered [`Answer::LeaseGranted`] or [`Answer::GrantFailed`].
    GrantLease {
        /// Names the answer.
        id: CommandId,
        /// Seconds asked for (`--lease-ttl`).
        ttl: i64,
    },
    /// Put `key` = `value` (the `InstanceMetaInfo` JSON) with `lease`.
    PutKey {
        /// Names the answer.
        id: CommandId,
        /// The instance key (docs/contract.md §1).
        key: String,
        /// The registration value, JSON.
        value: String,
        /// The lease the key lives under.
        lease: i64,
    },
    /// Refresh `lease` once; answered [`Answer::KeepaliveTtl`], [`Answer::LeaseNotFound`]
    /// or [`Answer::KeepaliveFailed`].
    Keepalive {
        /// Names the answer.
        id: CommandId,
        /// The lease to refresh.
        lease: i64,
    },
    /// Read vLLM's `/metrics`; answered [`Answer::ScrapePage`] or
    /// [`Answer::ScrapeFailed`].
    Scrape {
        /// Names the answer.
        id: CommandId,
    },
    /// POST this exact JSON body to the master's heartbeat endpoint at `target`.
    PostHeartbeat {
        /// Names the answer.
        id: CommandId,
        /// The heartbeat's JSON (docs/contract.md §3).
        body: String,
        /// Where it goes: the configured URL, or the elected master's.
        target: HeartbeatTarget,
    },
    /// Read `key` (the MASTER key, docs/contract.md §7) from etcd, over the same
    /// endpoints, auth and failover as every etcd call; answered
    /// [`Answer::MasterValue`] or [`Answer::MasterReadFailed`]. Only with
    /// `--follow-master`.
    ReadMasterKey {
        /// Names the answer.
        id: CommandId,
        /// `<namespace>XLLM:SERVICE:MASTER`.
        key: String,
    },
    /// Revoke `lease`, which deletes its key; answered [`Answer::RevokeDone`] or
    /// [`Answer::RevokeFailed`].
    Revoke {
        /// Names the answer.
        id: CommandId,
        /// The lease to revoke.
        lease: i64,
    },
    /// Look up the served model and log it (once, before the first registration); no
    /// answer is expected.
    LogServedModel,
    /// Something to log and count; see [`Note`].
    Note(Note),
    /// Stop: the driver returns this exit code. Nothing follows it.
    Exit {
        /// The process exit code (0 after a signal).
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
    /// `--health-fail-threshold` probes failed in a row.
    Unhealthy,
    /// A drain was asked for.
    Drain,
    /// The process is stopping.
    Shutdown,
    /// A lease replaced after a 409 (or one granted for a registration given up).
    Replaced,
    /// vLLM reports every engine asleep (sleep mode).
    Asleep,
}

/// What happened, as data: the driver turns each into a log line and its counters.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Start-up: `/health` not 2xx yet; the next probe in `retry_in`.
    WaitingForHealth {
        /// Until the next probe.
        retry_in: Duration,
        /// Why this probe failed.
        error: String,
    },
    /// A probe failed after start-up (`fails` in a row out of `threshold`).
    HealthFailed {
        /// Failures in a row, this one included.
        fails: u32,
        /// `--health-fail-threshold`.
        threshold: u32,
        /// Why this probe failed.
        error: String,
    },
    /// A probe passed after failed ones.
    HealthRecovered {
        /// How many had failed in a row.
        failed_probes: u32,
    },
    /// The key is in etcd: a new incarnation is live.
    Registered {
        /// The instance key.
        key: String,
        /// The new incarnation id.
        incarnation: String,
        /// The lease the key lives under.
        lease: i64,
        /// Its TTL in seconds, as granted.
        ttl: i64,
    },
    /// A grant or put failed; the registration starts over after `retry_in`.
    RegistrationFailed {
        /// Why.
        error: String,
        /// The backoff until the next attempt.
        retry_in: Duration,
    },
    /// etcd refreshed the lease.
    KeepaliveOk {
        /// The lease.
        lease: i64,
        /// Seconds it has left, as etcd says.
        ttl: i64,
    },
    /// A keepalive got no usable answer; it is retried while the lease may still live.
    KeepaliveFailed {
        /// The lease.
        lease: i64,
        /// Why.
        error: String,
        /// Until the retry.
        retry_in: Duration,
    },
    /// The lease is given up for lost; a new registration follows.
    LeaseLost {
        /// The lease.
        lease: i64,
        /// What says it is lost.
        why: LeaseLoss,
    },
    /// The lease is being revoked (the key disappears once etcd answers).
    Revoking {
        /// The lease.
        lease: i64,
        /// Why it is revoked.
        why: RevokeReason,
    },
    /// etcd revoked the lease: the key is gone.
    Deregistered {
        /// The lease.
        lease: i64,
        /// Why it was revoked.
        why: RevokeReason,
    },
    /// A revoke failed; the key stays until the lease runs out.
    RevokeFailed {
        /// The lease.
        lease: i64,
        /// Why it was to be revoked.
        why: RevokeReason,
        /// Why the revoke failed.
        error: String,
    },
    /// A scrape gave no usable page; no heartbeat this round.
    ScrapeFailed {
        /// A short stable label (a counter's label value).
        reason: String,
        /// The message, for the log.
        detail: String,
    },
    /// The lenient parser skipped lines of an audited page.
    LinesSkipped {
        /// How many.
        lines: usize,
    },
    /// The master's answer to a heartbeat: `"ok"`, `"conflict"`, `"unauthorized"`,
    /// `"other"` (with the status) or `"error"` (no answer, with why).
    Heartbeat {
        /// One of the labels above.
        answer: &'static str,
        /// The HTTP status, when there was an answer.
        status: Option<u16>,
        /// Why there was no answer.
        error: Option<String>,
    },
    /// A drain began: the lease is revoked and the instance stays deregistered.
    Draining,
    /// A drain ended: the instance registers again once healthy.
    Undraining,
    /// vLLM reports every engine asleep: the lease is revoked until it wakes.
    EngineAsleep,
    /// vLLM is awake again: the instance registers with a new incarnation.
    EngineAwake,
    /// Shutdown began: the final revoke, bounded by `timeout`.
    ShuttingDown {
        /// `--shutdown-timeout`.
        timeout: Duration,
    },
    /// The final revoke did not finish within `--shutdown-timeout`.
    ShutdownTimedOut,
    /// Heartbeats go to another URL from now on (following the elected master).
    HeartbeatTargetChanged {
        /// The URL they went to.
        from: String,
        /// The URL they go to now.
        to: String,
        /// The master the MASTER key names (`None`: back to the configured URL).
        master: Option<String>,
    },
    /// The MASTER key's value names no master (noted once per value); heartbeats go
    /// to the configured URL.
    MasterValueUnusable {
        /// The value.
        value: String,
        /// Why it names no master.
        error: String,
    },
    /// A read of the MASTER key failed; heartbeats keep their target.
    MasterReadFailed {
        /// Why.
        error: String,
    },
}
