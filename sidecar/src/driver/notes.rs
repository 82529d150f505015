//! The core's notes as log lines and counters: the one place that knows which counter
//! each note feeds and how loud its line is (the text is [`Note::message`]).

use crate::core::{Note, RevokeReason};
use crate::telemetry::Telemetry;

/// Log and count one note.
pub fn record(t: &Telemetry, note: &Note) {
    let msg = note.message();
    match note {
        Note::WaitingForHealth { retry_in, error } => {
            tracing::info!(%error, ?retry_in, "{msg}")
        }
        Note::HealthFailed { error, .. } => {
            t.health_probe_failures.inc();
            tracing::warn!(%error, "{msg}");
        }
        Note::HealthRecovered { failed_probes } => tracing::info!(failed_probes, "{msg}"),
        Note::Registered {
            key,
            incarnation,
            lease,
            ttl,
        } => {
            t.registrations.inc();
            t.lease_ttl_remaining.set(*ttl);
            tracing::info!(%key, %incarnation, lease, ttl_s = ttl, "{msg}");
        }
        Note::RegistrationFailed { error, retry_in } => {
            t.registration_failures.inc();
            tracing::warn!(%error, ?retry_in, "{msg}");
        }
        Note::KeepaliveOk { lease, ttl } => {
            t.keepalives.inc();
            t.lease_ttl_remaining.set(*ttl);
            tracing::trace!(lease, ttl, "{msg}");
        }
        Note::KeepaliveFailed {
            lease,
            error,
            retry_in,
        } => {
            t.keepalive_failures.inc();
            tracing::warn!(lease, %error, ?retry_in, "{msg}");
        }
        Note::LeaseLost { lease, .. } => {
            t.leases_lost.inc();
            t.lease_ttl_remaining.set(0);
            tracing::warn!(lease, "{msg}");
        }
        Note::Revoking { lease, why } => {
            t.lease_ttl_remaining.set(0);
            match why {
                RevokeReason::Unhealthy => tracing::error!(lease, "{msg}"),
                _ => tracing::info!(lease, why = reason(*why), "{msg}"),
            }
        }
        Note::Deregistered { lease, why } => {
            if *why == RevokeReason::Replaced {
                tracing::debug!(lease, "{msg}");
            } else {
                t.deregistrations.inc();
                tracing::info!(lease, why = reason(*why), "{msg}");
            }
        }
        Note::RevokeFailed { lease, why, error } => {
            tracing::warn!(lease, why = reason(*why), %error, "{msg}")
        }
        Note::ScrapeFailed { reason, detail } => {
            t.scrape_errors.inc();
            if matches!(reason.as_str(), "parse" | "not_utf8") {
                t.parse_errors.inc();
            }
            tracing::warn!(%reason, error = %detail, "{msg}");
        }
        Note::LinesSkipped { lines } => {
            t.parse_errors.inc_by(*lines as u64);
            tracing::debug!(lines, "{msg}");
        }
        Note::Heartbeat {
            answer,
            status,
            error,
        } => heartbeat(t, &msg, answer, *status, error.as_deref()),
        Note::Draining | Note::Undraining | Note::EngineAsleep | Note::EngineAwake => {
            tracing::info!("{msg}")
        }
        Note::ShuttingDown { timeout } => tracing::info!(?timeout, "{msg}"),
        Note::ShutdownTimedOut => tracing::warn!("{msg}"),
        Note::HeartbeatTargetChanged { from, to, master } => {
            t.master_switches.inc();
            let master = master.as_deref().unwrap_or("");
            tracing::info!(old_url = %from, new_url = %to, master = %master, "{msg}");
        }
        Note::MasterValueUnusable { value, error } => {
            tracing::warn!(value = %value, %error, "{msg}")
        }
        Note::MasterReadFailed { error } => tracing::warn!(%error, "{msg}"),
    }
}

fn heartbeat(t: &Telemetry, msg: &str, answer: &str, status: Option<u16>, error: Option<&str>) {
    t.heartbeat(answer);
    match answer {
        "ok" => tracing::debug!("{msg}"),
        "unauthorized" => tracing::error!("{msg}"),
        "error" => tracing::warn!(error = error.unwrap_or(""), "{msg}"),
        _ => tracing::warn!(status, "{msg}"),
    }
}

fn reason(why: RevokeReason) -> &'static str {
    match why {
        RevokeReason::Unhealthy => "unhealthy",
        RevokeReason::Drain => "drain",
        RevokeReason::Shutdown => "shutdown",
        RevokeReason::Replaced => "replaced",
        RevokeReason::Asleep => "asleep",
    }
}
