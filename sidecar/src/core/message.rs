//! The log message of each note: one text for the production driver's log line and
//! for a simulator's log, so a scenario that waits for a log line ("check
//! --internal-token") means the same in both modes.

use std::borrow::Cow;

use super::io::{LeaseLoss, Note, RevokeReason};

impl Note {
    /// The message the driver logs for this note (its fields are logged beside it).
    pub fn message(&self) -> Cow<'static, str> {
        let text = match self {
            Note::WaitingForHealth { .. } => "waiting for vLLM to become healthy ...",
            Note::HealthFailed {
                fails, threshold, ..
            } => return format!("vLLM health probe failed ({fails}/{threshold})").into(),
            Note::HealthRecovered { .. } => "vLLM healthy again",
            Note::Registered { .. } => "registered",
            Note::RegistrationFailed { .. } => "register failed, will retry",
            Note::KeepaliveOk { .. } => "keepalive",
            Note::KeepaliveFailed { .. } => {
                "keepalive failed; the lease may still be alive, retrying"
            }
            Note::LeaseLost { why, .. } => {
                let why = match why {
                    LeaseLoss::Gone => "etcd says it is gone",
                    LeaseLoss::Expired => "its TTL ran out since the last refresh",
                };
                return format!("lease lost ({why}), re-registering").into();
            }
            Note::Revoking {
                why: RevokeReason::Unhealthy,
                ..
            } => "vLLM unhealthy, deregistering",
            Note::Revoking { .. } => "revoking the lease",
            Note::Deregistered {
                why: RevokeReason::Replaced,
                ..
            } => "replaced lease revoked",
            Note::Deregistered { .. } => "deregistered (lease revoked)",
            Note::RevokeFailed { .. } => {
                "revoke failed (the lease expires by itself within its TTL)"
            }
            Note::ScrapeFailed { .. } => "metrics scrape failed; heartbeat skipped",
            Note::LinesSkipped { .. } => "/metrics lines skipped by the parser",
            Note::Heartbeat { answer, status, .. } => match *answer {
                "ok" => "heartbeat ok",
                "conflict" => "heartbeat 409 (stale/unknown incarnation), re-registering",
                "unauthorized" => "heartbeat 401: the master rejected --internal-token",
                "error" => "heartbeat POST failed",
                _ => return format!("heartbeat answered HTTP {}", status.unwrap_or(0)).into(),
            },
            Note::Draining => "draining: revoking the lease and staying deregistered",
            Note::Undraining => "undrained: registering again once vLLM is healthy",
            Note::EngineAsleep => {
                "vLLM is asleep (engine_sleep_state awake = 0): deregistering until it wakes"
            }
            Note::EngineAwake => "vLLM is awake again: registering",
            Note::ShuttingDown { .. } => "shutting down: revoking the lease",
            Note::HeartbeatTargetChanged { master: Some(_), .. } => {
                "following the elected master: heartbeats go to a new URL"
            }
            Note::HeartbeatTargetChanged { master: None, .. } => {
                "no usable master key: heartbeats go to --xllm-service-url"
            }
            Note::MasterValueUnusable { .. } => {
                "the master key's value is not <host>:<port>; using --xllm-service-url"
            }
            Note::MasterReadFailed { .. } => {
                "reading the master key failed; heartbeats keep their target"
            }
            Note::ShutdownTimedOut => {
                "the lease revoke did not finish within --shutdown-timeout; exiting (the key expires with its lease)"
            }
        };
        Cow::Borrowed(text)
    }
}
