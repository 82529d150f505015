//! Following the elected master (`--follow-master`): where heartbeats go.
//!
//! Only the master publishes the load heartbeats feed (docs/contract.md §7); a standby
//! answers 200 too, so a heartbeat's answer alone cannot say it went to the wrong
//! replica. The master holds `<namespace>XLLM:SERVICE:MASTER`, whose value is its
//! `service_name`, `<ip>:<rpc port>`. The core reads that key (never watches it) and
//! posts to the host it names, with the scheme, path and port of `--xllm-service-url`
//! (or `--master-http-port`): the value names the RPC port, not the HTTP one.
//!
//! When it reads:
//! - once at start, then every read interval (`--master-read-interval`, on its grid):
//!   the only way to see a switch while the old master keeps answering 200;
//! - while heartbeats fail with no answer or a 5xx (a dead master), at once and then at
//!   most once per `min(heartbeat interval, read interval)`, until one is answered.
//!
//! So reads cost one per read interval in steady state, whatever the heartbeat rate.
//! A change of target while heartbeats fail posts to the new one at once (or as soon as
//! the post under way to the old one ends), not after the failure backoff. The follow
//! delay (sidecar/README.md, "Several xllm-service replicas"), with `hb` the heartbeat
//! interval, `T` its timeout, `N` the read interval and `R` one read:
//! - the master dies: `max(master lease TTL + election, hb + T) + min(hb, N) + R + T`;
//! - mastership moves while the old master answers: `N + R + hb`.
//!
//! What a read says decides the target alone, with no memory of earlier reads: a value
//! that names a master → that master; no key, or a value that names none (logged) → the
//! configured URL, as at start-up and with following off. A failed read changes nothing.

use std::time::Duration;

use url::Url;

use super::io::{Answer, Command, CommandId, Note};
use super::state::Pending;
use super::target::{FollowConfig, HeartbeatTarget, MasterName};
use super::{grid, Core};

/// What the last successful read said, so each change is noted once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Nothing,
    Absent,
    Value(String),
}

/// The follower's state.
#[derive(Debug, Clone)]
pub struct Follow {
    cfg: FollowConfig,
    target: HeartbeatTarget,
    seen: Seen,
    in_flight: Option<CommandId>,
    /// The next steady read.
    next_read: Duration,
    /// When the last read went out.
    last_read: Option<Duration>,
    /// The last heartbeat got no answer or a 5xx.
    failing: bool,
    /// The target changed while a heartbeat cycle was under way: if that cycle's post
    /// (to the old target) fails, the next goes at once, not after the backoff.
    switched_in_flight: bool,
}

impl Follow {
    /// A follower that reads at once (at `now`).
    pub fn new(cfg: FollowConfig, now: Duration) -> Follow {
        Follow {
            cfg,
            target: HeartbeatTarget::Configured,
            seen: Seen::Nothing,
            in_flight: None,
            next_read: now,
            last_read: None,
            failing: false,
            switched_in_flight: false,
        }
    }

    /// Where heartbeats go now.
    pub fn target(&self) -> &HeartbeatTarget {
        &self.target
    }

    /// When the next read falls due, unless one is in flight.
    pub fn read_due(&self, failure_gap: Duration) -> Option<Duration> {
        if self.in_flight.is_some() {
            return None;
        }
        let after_failure = match (self.failing, self.last_read) {
            (false, _) => None,
            (true, None) => Some(Duration::ZERO),
            (true, Some(at)) => Some(at + failure_gap),
        };
        Some(after_failure.map_or(self.next_read, |t| t.min(self.next_read)))
    }
}

impl Core {
    /// The gap between reads while heartbeats fail.
    fn failure_gap(&self) -> Duration {
        let period = self.follow.as_ref().map(|f| f.cfg.read_interval);
        period.map_or(self.cfg.heartbeat_interval, |p| {
            p.min(self.cfg.heartbeat_interval)
        })
    }

    /// When the core next wants to read the MASTER key, if following.
    pub(super) fn follow_wakeup(&self) -> Option<Duration> {
        let gap = self.failure_gap();
        self.follow.as_ref()?.read_due(gap)
    }

    /// Read the MASTER key when a read is due.
    pub(super) fn read_master_if_due(&mut self, now: Duration) {
        if self.shutting_down() {
            return;
        }
        match self.follow_wakeup() {
            Some(due) if due <= now => {}
            _ => return,
        }
        let id = self.issue(Pending::MasterRead);
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        follow.in_flight = Some(id);
        follow.last_read = Some(now);
        follow.next_read = grid::after(follow.cfg.read_interval, now);
        let key = follow.cfg.master_key.clone();
        self.push(Command::ReadMasterKey { id, key });
    }

    /// Where the post about to go out goes.
    pub(super) fn target_for_post(&mut self) -> HeartbeatTarget {
        match self.follow.as_mut() {
            None => HeartbeatTarget::Configured,
            Some(follow) => {
                follow.switched_in_flight = false;
                follow.target.clone()
            }
        }
    }

    /// A heartbeat's answer: no answer or a 5xx makes reads come sooner, any other
    /// answer ends that.
    pub(super) fn follow_heartbeat(&mut self, status: Option<u16>) {
        if let Some(follow) = self.follow.as_mut() {
            follow.failing = status.is_none_or(|s| s >= 500);
        }
    }

    /// A heartbeat cycle ended with its post: one that failed while the target changed
    /// under it is followed by a post to the new target at once.
    pub(super) fn follow_post_ended(&mut self, now: Duration, failed: bool) {
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        if std::mem::take(&mut follow.switched_in_flight) && failed {
            self.beat_backoff.reset();
            self.beat.due = self.beat.due.min(now);
        }
    }

    pub(super) fn on_master_read(&mut self, now: Duration, id: CommandId, answer: Answer) {
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        if follow.in_flight == Some(id) {
            follow.in_flight = None;
        }
        let seen = match answer {
            Answer::MasterValue(Some(value)) => Seen::Value(value),
            Answer::MasterValue(None) => Seen::Absent,
            Answer::MasterReadFailed(error) => return self.note(Note::MasterReadFailed { error }),
            _ => return,
        };
        let (target, unusable) = follow.target_of(&seen);
        let changed_value = follow.seen != seen;
        follow.seen = seen;
        if let (Some(note), true) = (unusable, changed_value) {
            self.note(note);
        }
        self.retarget(now, target);
    }

    /// Post to `target` from now on, noting the change.
    fn retarget(&mut self, now: Duration, target: HeartbeatTarget) {
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        if follow.target == target {
            return;
        }
        let from = shown(follow.cfg.url_of(&follow.target));
        let to = shown(follow.cfg.url_of(&target));
        let master = match &target {
            HeartbeatTarget::Elected { master, .. } => Some(master.to_string()),
            HeartbeatTarget::Configured => None,
        };
        let failing = follow.failing;
        follow.target = target;
        follow.switched_in_flight = self.beat.in_flight.is_some();
        self.note(Note::HeartbeatTargetChanged { from, to, master });
        if failing && self.beat.in_flight.is_none() {
            // The old target did not answer: the new one is tried now, not after the
            // failure backoff.
            self.beat_backoff.reset();
            self.beat.due = self.beat.due.min(now);
        }
    }
}

/// `url` as a log line shows it: without user info, which may hold a password.
fn shown(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

impl Follow {
    /// The target a read that saw `seen` gives, and the note of a value that names no
    /// master.
    fn target_of(&self, seen: &Seen) -> (HeartbeatTarget, Option<Note>) {
        let Seen::Value(value) = seen else {
            return (HeartbeatTarget::Configured, None);
        };
        let named = MasterName::parse(value)
            .and_then(|master| self.cfg.url_for(&master).map(|url| (master, url)));
        match named {
            Ok((master, url)) => (HeartbeatTarget::Elected { master, url }, None),
            Err(error) => {
                let value = value.clone();
                let note = Note::MasterValueUnusable { value, error };
                (HeartbeatTarget::Configured, Some(note))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::target::master_key;
    use super::*;

    #[test]
    fn a_master_is_named_host_colon_port() {
        let name = |host: &str, rpc_port| MasterName {
            host: host.into(),
            rpc_port,
        };
        assert_eq!(
            MasterName::parse("10.0.0.1:9999"),
            Ok(name("10.0.0.1", 9999))
        );
        assert_eq!(
            MasterName::parse(" master-0.svc:1 \n"),
            Ok(name("master-0.svc", 1))
        );
        assert_eq!(MasterName::parse("[::1]:80"), Ok(name("[::1]", 80)));
        for bad in [
            "",
            "10.0.0.1",
            "10.0.0.1:",
            ":9999",
            "10.0.0.1:0",
            "10.0.0.1:65536",
            "10.0.0.1:+80",
            "::1:80",
            "[::1:80",
            "[nope]:80",
            "a b:1",
            "http://a:1",
            "a/b:1",
            "u@a:1",
        ] {
            assert!(MasterName::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(name("[::1]", 80).to_string(), "[::1]:80");
    }

    #[test]
    fn the_url_keeps_scheme_path_and_port_unless_the_port_is_given() {
        let cfg = |http_port| FollowConfig {
            master_key: master_key(""),
            configured_url: Url::parse("https://svc/base/v1/internal/heartbeat").unwrap(),
            http_port,
            read_interval: Duration::from_secs(10),
        };
        let m = MasterName::parse("10.0.0.1:9999").unwrap();
        assert_eq!(
            cfg(None).url_for(&m).unwrap().as_str(),
            "https://10.0.0.1/base/v1/internal/heartbeat"
        );
        assert_eq!(
            cfg(Some(8443)).url_for(&m).unwrap().as_str(),
            "https://10.0.0.1:8443/base/v1/internal/heartbeat"
        );
        assert_eq!(master_key("/a/b/"), "/a/b/XLLM:SERVICE:MASTER");
        let secret = Url::parse("http://u:pw@10.0.0.1:1/v1/internal/heartbeat").unwrap();
        assert_eq!(shown(&secret), "http://10.0.0.1:1/v1/internal/heartbeat");
    }
}
