//! The registration's decisions: grant, put, keep alive, give up, revoke; and the
//! requests that move it (drain, undrain, shutdown).
//!
//! A keepalive error is not a lost lease: the keepalive is retried (backing off, never
//! more than a keepalive period apart) while the lease may still be alive. The lease is
//! given up only when etcd says it is gone (TTL 0, not found) or when its TTL has
//! certainly run out since the last successful refresh, counted from the moment that
//! refresh's answer came in (the latest etcd can have done it). So an etcd blackout
//! shorter than the lease's remaining TTL keeps the same incarnation.

use std::time::Duration;

use super::io::{Answer, Command, CommandId, LeaseLoss, Note, RevokeReason};
use super::state::{AfterRevoke, Lease, Pending, Registration};
use super::{grid, Core};
use crate::instance::InstanceMeta;

impl Core {
    /// Unregistered, healthy, past any backoff and not draining: grant a lease.
    pub(super) fn register_if_due(&mut self, now: Duration) {
        match self.reg {
            Registration::Unregistered { retry_at } if self.may_register() && now >= retry_at => {
                self.start_registration(None)
            }
            _ => {}
        }
    }

    /// Grant a lease for a fresh incarnation; `replacing` still holds the key.
    fn start_registration(&mut self, replacing: Option<i64>) {
        if !self.model_logged {
            self.model_logged = true;
            self.push(Command::LogServedModel);
        }
        let incarnation = self.new_incarnation();
        let grant = self.issue(Pending::Grant);
        self.push(Command::GrantLease {
            id: grant,
            ttl: self.cfg.lease_ttl,
        });
        self.reg = Registration::Granting {
            grant,
            incarnation,
            replacing,
        };
    }

    pub(super) fn on_granted(&mut self, now: Duration, id: CommandId, lease: i64, ttl: i64) {
        let Registration::Granting {
            grant,
            incarnation,
            replacing,
        } = &self.reg
        else {
            return self.side_revoke(lease); // a registration given up: the lease is orphan
        };
        if *grant != id {
            return self.side_revoke(lease);
        }
        let (incarnation, replacing) = (incarnation.clone(), *replacing);
        let register_ts_ms = self
            .cfg
            .unix_ms_at_start
            .saturating_add(u64::try_from(now.as_millis()).unwrap_or(u64::MAX));
        let meta = InstanceMeta::new(
            &self.cfg.register_addr,
            self.cfg.instance_type,
            &self.cfg.backend_type,
            &incarnation,
            register_ts_ms,
        );
        let put = self.issue(Pending::Put);
        self.push(Command::PutKey {
            id: put,
            key: self.cfg.key.clone(),
            value: meta.to_json(),
            lease,
        });
        self.reg = Registration::Putting {
            put,
            lease,
            ttl: if ttl > 0 { ttl } else { self.cfg.lease_ttl },
            granted_at: now,
            incarnation,
            replacing,
        };
    }

    pub(super) fn on_grant_failed(&mut self, now: Duration, id: CommandId, error: String) {
        if matches!(&self.reg, Registration::Granting { grant, .. } if *grant == id) {
            self.registration_failed(now, error);
        }
    }

    pub(super) fn on_put(&mut self, now: Duration, id: CommandId, error: Option<String>) {
        let Registration::Putting {
            put,
            lease,
            ttl,
            granted_at,
            incarnation,
            replacing,
        } = &self.reg
        else {
            return;
        };
        if *put != id {
            return;
        }
        let (lease, ttl, granted_at) = (*lease, *ttl, *granted_at);
        let (incarnation, replacing) = (incarnation.clone(), *replacing);
        if let Some(error) = error {
            // The granted lease holds nothing and expires by itself.
            return self.registration_failed(now, error);
        }
        self.note(Note::Registered {
            key: self.cfg.key.clone(),
            incarnation: incarnation.clone(),
            lease,
            ttl,
        });
        self.reg = Registration::Registered(Lease {
            id: lease,
            incarnation,
            ttl,
            last_refresh: granted_at,
            next_keepalive: self.first_keepalive(granted_at),
        });
        self.reg_backoff.reset();
        self.keepalive_backoff.reset();
        self.first_beat(now);
        if let Some(old) = replacing.filter(|old| *old != lease) {
            self.side_revoke(old);
        }
    }

    /// On the keepalive grid, at most one period after the grant (which refreshed it).
    fn first_keepalive(&self, granted_at: Duration) -> Duration {
        let period = self.cfg.keepalive_period;
        let next = grid::at_or_after(period, granted_at + period / 2);
        if next > granted_at + period {
            next.saturating_sub(period)
        } else {
            next
        }
    }

    fn registration_failed(&mut self, now: Duration, error: String) {
        let retry_in = self.reg_backoff.next_delay(&mut self.rng);
        self.note(Note::RegistrationFailed { error, retry_in });
        self.reg = Registration::Unregistered {
            retry_at: now + retry_in,
        };
    }

    /// While registered: give the lease up once it has certainly expired, else send the
    /// keepalive that is due.
    pub(super) fn check_lease(&mut self, now: Duration) {
        let Registration::Registered(lease) = &mut self.reg else {
            return;
        };
        if now >= lease.certain_expiry() {
            let id = lease.id;
            // Certain only from what came back: a keepalive whose answer was lost or late
            // may have reached etcd and kept the lease (and the key) alive. Revoke it
            // anyway, so that the key goes now instead of at an unknown later time.
            self.side_revoke(id);
            return self.lease_lost(now, id, LeaseLoss::Expired);
        }
        if now < lease.next_keepalive {
            return;
        }
        let id = lease.id;
        lease.next_keepalive = grid::after(self.cfg.keepalive_period, now);
        let cmd = self.issue(Pending::Keepalive {
            lease: id,
            sent: now,
        });
        self.push(Command::Keepalive { id: cmd, lease: id });
    }

    /// A keepalive's answer (`sent`: when it went out). A refresh counts from when it was
    /// sent, not from when its answer came in: an answer held while the process was
    /// stopped says nothing of the time since.
    pub(super) fn on_keepalive(
        &mut self,
        now: Duration,
        lease_id: i64,
        sent: Duration,
        answer: Answer,
    ) {
        let Registration::Registered(lease) = &mut self.reg else {
            return;
        };
        if lease.id != lease_id {
            return; // a keepalive of a lease given up since
        }
        match answer {
            Answer::KeepaliveTtl(ttl) if ttl > 0 => {
                lease.ttl = ttl;
                lease.last_refresh = lease.last_refresh.max(sent);
                self.keepalive_backoff.reset();
                self.note(Note::KeepaliveOk {
                    lease: lease_id,
                    ttl,
                });
            }
            Answer::KeepaliveTtl(_) | Answer::LeaseNotFound => {
                self.lease_lost(now, lease_id, LeaseLoss::Gone)
            }
            Answer::KeepaliveFailed(error) => {
                let retry_in = self
                    .keepalive_backoff
                    .next_delay(&mut self.rng)
                    .min(self.cfg.keepalive_period);
                lease.next_keepalive = lease.next_keepalive.min(now + retry_in);
                self.note(Note::KeepaliveFailed {
                    lease: lease_id,
                    error,
                    retry_in,
                });
            }
            _ => {}
        }
    }

    /// The lease is gone: register again at once (if healthy).
    fn lease_lost(&mut self, now: Duration, lease: i64, why: LeaseLoss) {
        self.note(Note::LeaseLost { lease, why });
        self.reg = Registration::Unregistered { retry_at: now };
    }

    /// The master does not know `incarnation` (409): if it is still ours, register a new
    /// one at once; the old lease is revoked once the new one holds the key.
    pub(super) fn replace_after_conflict(&mut self, incarnation: &str) {
        let Registration::Registered(lease) = &self.reg else {
            return;
        };
        if lease.incarnation != incarnation {
            return; // already replaced since that heartbeat
        }
        let old = lease.id;
        self.beat.after_conflict = true;
        self.start_registration(Some(old));
    }

    /// Give the registration up: revoke whatever lease may hold the key, then go on as
    /// `then` says. A grant still in flight is revoked when (if) it answers.
    pub(super) fn deregister(&mut self, now: Duration, why: RevokeReason, then: AfterRevoke) {
        let (main, side) = match &self.reg {
            Registration::Granting { replacing, .. } => (*replacing, None),
            Registration::Putting {
                lease, replacing, ..
            } => (Some(*lease), *replacing),
            Registration::Registered(l) => (Some(l.id), None),
            Registration::Revoking { .. } => {
                // Already on its way out: only what follows may change, and never from
                // exit to anything else, or from drain back to register.
                if let Registration::Revoking { then: before, .. } = &mut self.reg {
                    if then.rank() > before.rank() {
                        *before = then;
                    }
                }
                return;
            }
            // Drained stays drained, unless the sidecar exits.
            Registration::Drained if !matches!(then, AfterRevoke::Exit { .. }) => return,
            Registration::Unregistered { .. } | Registration::Drained | Registration::Asleep => {
                (None, None)
            }
            Registration::Exited => return,
        };
        if let Some(side) = side {
            self.side_revoke(side);
        }
        match main {
            Some(lease) => {
                self.note(Note::Revoking { lease, why });
                let revoke = self.issue(Pending::Revoke);
                self.push(Command::Revoke { id: revoke, lease });
                self.reg = Registration::Revoking {
                    revoke,
                    lease,
                    why,
                    then,
                };
            }
            None => self.after_revoke(now, then),
        }
    }

    fn after_revoke(&mut self, now: Duration, then: AfterRevoke) {
        match then {
            AfterRevoke::Register => {
                self.reg_backoff.reset();
                self.reg = Registration::Unregistered { retry_at: now };
            }
            AfterRevoke::Drain => self.reg = Registration::Drained,
            AfterRevoke::Asleep => self.reg = Registration::Asleep,
            AfterRevoke::Exit { .. } => self.exit(),
        }
    }

    pub(super) fn on_revoke(&mut self, now: Duration, id: CommandId, answer: Answer) {
        let Registration::Revoking {
            revoke,
            lease,
            why,
            then,
        } = self.reg
        else {
            return;
        };
        if revoke != id {
            return;
        }
        match answer {
            Answer::RevokeDone => self.note(Note::Deregistered { lease, why }),
            Answer::RevokeFailed(error) => self.note(Note::RevokeFailed { lease, why, error }),
            _ => return,
        }
        self.after_revoke(now, then);
    }

    /// Revoke a lease nothing waits on (replaced, or granted for a registration given up).
    fn side_revoke(&mut self, lease: i64) {
        if self.reg == Registration::Exited {
            return;
        }
        let id = self.issue(Pending::SideRevoke { lease });
        self.push(Command::Revoke { id, lease });
    }

    pub(super) fn on_side_revoke(&mut self, lease: i64, answer: Answer) {
        let why = RevokeReason::Replaced;
        match answer {
            Answer::RevokeDone => self.note(Note::Deregistered { lease, why }),
            Answer::RevokeFailed(error) => self.note(Note::RevokeFailed { lease, why, error }),
            _ => {}
        }
    }

    pub(super) fn shutdown(&mut self, now: Duration) {
        if self.shutting_down() {
            return;
        }
        let timeout = self.cfg.shutdown_timeout;
        self.note(Note::ShuttingDown { timeout });
        let deadline = now + timeout;
        self.deregister(now, RevokeReason::Shutdown, AfterRevoke::Exit { deadline });
    }

    pub(super) fn drain(&mut self, now: Duration) {
        if self.shutting_down() || self.status().draining {
            return;
        }
        self.note(Note::Draining);
        self.deregister(now, RevokeReason::Drain, AfterRevoke::Drain);
    }

    pub(super) fn undrain(&mut self, now: Duration) {
        match &mut self.reg {
            Registration::Drained => {
                self.reg_backoff.reset();
                self.reg = Registration::Unregistered { retry_at: now };
            }
            Registration::Revoking {
                then: then @ AfterRevoke::Drain,
                ..
            } => *then = AfterRevoke::Register,
            _ => return,
        }
        self.note(Note::Undraining);
    }

    /// The final revoke got no answer within `--shutdown-timeout`: exit anyway (the key
    /// expires with its lease).
    pub(super) fn check_exit_deadline(&mut self, now: Duration) {
        if let Registration::Revoking {
            then: AfterRevoke::Exit { deadline },
            ..
        } = self.reg
        {
            if now >= deadline {
                self.note(Note::ShutdownTimedOut);
                self.exit();
            }
        }
    }

    fn exit(&mut self) {
        self.push(Command::Exit { code: 0 });
        self.reg = Registration::Exited;
    }
}
