//! The core's notes as log lines and counters: the one place that knows which counter
//! each event feeds and how loud its line is.

use crate::core::{LeaseLoss, Note, RevokeReason};
use crate::telemetry::Telemetry;

/// Log and count one note.
pub fn record(t: &Telemetry, note: &Note) {
    match note {
        Note::WaitingForHealth { retry_in, error } => {
            tracing::info!(%error, ?retry_in, "waiting for vLLM to become healthy ...")
        }
        Note::HealthFailed {
            fails,
            threshold,
            error,
        } => {
            t.health_probe_failures.inc();
            tracing::warn!(%error, "vLLM health probe failed ({fails}/{threshold})");
        }
        Note::HealthRecovered { failed_probes } => {
            tracing::info!(failed_probes, "vLLM healthy again")
        }
        Note::Registered {
            key,
            incarnation,
            lease,
            ttl,
        } => {
            t.registrations.inc();
            t.lease_ttl_remaining.set(*ttl);
            tracing::info!(%key, %incarnation, lease, ttl_s = ttl, "registered");
        }
        Note::RegistrationFailed { error, retry_in } => {
            t.registration_failures.inc();
            tracing::warn!(%error, ?retry_in, "register failed, will retry");
        }
        Note::KeepaliveOk { lease, ttl } => {
            t.keepalives.inc();
            t.lease_ttl_remaining.set(*ttl);
            tracing::trace!(lease, ttl, "keepalive");
        }
        Note::KeepaliveFailed {
            lease,
            error,
            retry_in,
        } => {
            t.keepalive_failures.inc();
            tracing::warn!(lease, %error, ?retry_in, "keepalive failed; the lease may still be alive, retrying");
        }
        Note::LeaseLost { lease, why } => {
            t.leases_lost.inc();
            t.lease_ttl_remaining.set(0);
            let why = match why {
                LeaseLoss::Gone => "etcd says it is gone",
                LeaseLoss::Expired => "its TTL ran out since the last refresh",
            };
            tracing::warn!(lease, why, "lease lost, re-registering");
        }
        Note::Revoking { lease, why } => {
            t.lease_ttl_remaining.set(0);
            match why {
                RevokeReason::Unhealthy => tracing::error!(lease, "vLLM unhealthy, deregistering"),
                _ => tracing::info!(lease, why = reason(*why), "revoking the lease"),
            }
        }
        Note::Deregistered { lease, why } => {
            if *why == RevokeReason::Replaced {
                tracing::debug!(lease, "replaced lease revoked");
            } else {
                t.deregistrations.inc();
                tracing::info!(lease, why = reason(*why), "deregistered (lease revoked)");
            }
        }
        Note::RevokeFailed { lease, why, error } => tracing::warn!(
            lease,
            why = reason(*why),
            %error,
            "revoke failed (the lease expires by itself within its TTL)"
        ),
        Note::ScrapeFailed { reason, detail } => {
            t.scrape_errors.inc();
            if matches!(reason.as_str(), "parse" | "not_utf8") {
                t.parse_errors.inc();
            }
            tracing::warn!(%reason, error = %detail, "metrics scrape failed; heartbeat skipped");
        }
        Note::LinesSkipped { lines } => {
            t.parse_errors.inc_by(*lines as u64);
            tracing::debug!(lines, "/metrics lines skipped by the parser");
        }
        Note::Heartbeat {
            answer,
            status,
            error,
        } => heartbeat(t, answer, *status, error.as_deref()),
        Note::Draining => tracing::info!("draining: revoking the lease and staying deregistered"),
        Note::Undraining => tracing::info!("undrained: registering again once vLLM is healthy"),
        Note::ShuttingDown { timeout } => {
            tracing::info!(?timeout, "shutting down: revoking the lease")
        }
        Note::ShutdownTimedOut => tracing::warn!(
            "the lease revoke did not finish within --shutdown-timeout; exiting (the key expires with its lease)"
        ),
    }
}

fn heartbeat(t: &Telemetry, answer: &str, status: Option<u16>, error: Option<&str>) {
    t.heartbeat(answer);
    match answer {
        "ok" => tracing::debug!("heartbeat ok"),
        "conflict" => {
            tracing::warn!("heartbeat 409 (stale/unknown incarnation), re-registering")
        }
        "unauthorized" => {
            tracing::error!("heartbeat 401: the master rejected --internal-token")
        }
        "error" => tracing::warn!(error = error.unwrap_or(""), "heartbeat POST failed"),
        _ => tracing::warn!(status, "heartbeat answered HTTP {}", status.unwrap_or(0)),
    }
}

fn reason(why: RevokeReason) -> &'static str {
    match why {
        RevokeReason::Unhealthy => "unhealthy",
        RevokeReason::Drain => "drain",
        RevokeReason::Shutdown => "shutdown",
        RevokeReason::Replaced => "replaced",
    }
}
