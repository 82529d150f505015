//! Planted bugs: test-only distortions of how the simulated driver runs the production
//! core, so that `scenarios explore` can show it finds the classes of bug it is meant
//! to find.
//!
//! Why here and not in `sidecar/`: the production core must stay exactly what ships.
//! Each bug is what a faulty *driver* (or a faulty rewrite of the core) would do, made
//! by lying to the core or to its peers at the boundary the simulator already owns, and
//! only through its one seam ([`crate::distortion::Distortion`]): a command not sent
//! and answered as done, an answer replaced by another, a copy of an old heartbeat sent
//! again, a restarted process given its old seed or no token. With no bug planted
//! ([`World::plant_bug`](crate::World::plant_bug) never called) nothing here runs.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sidecar::core::{
    AfterRevoke, Answer, Command, CommandId, CoreConfig, HeartbeatTarget, Registration,
};

use crate::command_kind::{EtcdCall, Kind};
use crate::distortion::{Distortion, Start, Verdict, STRAY};

/// One class of bug, planted in every sidecar of a world (current and future).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlantedBug {
    /// A heartbeat answered 409 is handed to the core as 200: it never re-registers.
    #[serde(rename = "no_reregister_on_409")]
    NoReregisterOn409,
    /// While the sidecar's last `/health` probe or last `/metrics` scrape failed,
    /// keepalives are not sent but answered as if etcd had refreshed the lease (a
    /// keepalive coupled to the heartbeat path): the key expires while the core believes
    /// it is registered.
    NoKeepaliveWhileUnhealthy,
    /// On shutdown the final revoke is not sent but answered as done: the key outlives
    /// the process until its TTL runs out.
    NoRevokeOnShutdown,
    /// Once an incarnation's lease is lost or replaced, a stale heartbeat loop keeps
    /// posting that incarnation's last heartbeat body every heartbeat interval.
    HeartbeatAfterLeaseLost,
    /// A restarted sidecar gets the same core seed as its previous life, so its
    /// incarnation ids repeat.
    ReuseIncarnation,
    /// etcd's "lease not found" (or TTL 0) on a keepalive is handed to the core as a
    /// refreshed lease: a lease expired or lost in etcd is never noticed.
    IgnoreLeaseNotFound,
    /// A restarted sidecar sends no token (its token lost across the restart).
    TokenLostOnRestart,
    /// The KV cache usage goes out as a percentage (0..100) where the contract wants a
    /// fraction (vLLM's `*_usage_perc` gauges are fractions despite their name).
    CacheUsageAsPercent,
    /// The shell tells its core the time by its own ticks, which stop while the process
    /// is stopped: after a pause the core believes no time passed, so it trusts its last
    /// keepalive answer however long ago it came, and heartbeats a lease etcd has
    /// already dropped.
    ClockStopsWhilePaused,
    /// After a re-registration (any incarnation but a process's first), a minute of
    /// heartbeats is answered 200 without being sent: the key is back at once, but the
    /// master hears nothing from the instance; a recovery that is only slow.
    HeartbeatsHeldAfterReregister,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 10] = [
        PlantedBug::NoReregisterOn409,
        PlantedBug::NoKeepaliveWhileUnhealthy,
        PlantedBug::NoRevokeOnShutdown,
        PlantedBug::HeartbeatAfterLeaseLost,
        PlantedBug::ReuseIncarnation,
        PlantedBug::IgnoreLeaseNotFound,
        PlantedBug::TokenLostOnRestart,
        PlantedBug::CacheUsageAsPercent,
        PlantedBug::ClockStopsWhilePaused,
        PlantedBug::HeartbeatsHeldAfterReregister,
    ];

    /// The snake_case name (as in TOML, JSON and on the command line).
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::NoReregisterOn409 => "no_reregister_on_409",
            PlantedBug::NoKeepaliveWhileUnhealthy => "no_keepalive_while_unhealthy",
            PlantedBug::NoRevokeOnShutdown => "no_revoke_on_shutdown",
            PlantedBug::HeartbeatAfterLeaseLost => "heartbeat_after_lease_lost",
            PlantedBug::ReuseIncarnation => "reuse_incarnation",
            PlantedBug::IgnoreLeaseNotFound => "ignore_lease_not_found",
            PlantedBug::TokenLostOnRestart => "token_lost_on_restart",
            PlantedBug::CacheUsageAsPercent => "cache_usage_as_percent",
            PlantedBug::ClockStopsWhilePaused => "clock_stops_while_paused",
            PlantedBug::HeartbeatsHeldAfterReregister => "heartbeats_held_after_reregister",
        }
    }

    /// The bug as the distortion of a sidecar whose core runs with `config`.
    pub fn distortion(self, config: &CoreConfig) -> Box<dyn Distortion> {
        let (ttl, interval) = (config.lease_ttl, config.heartbeat_interval);
        Box::new(Planted::new(self, ttl, interval))
    }
}

impl fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PlantedBug {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlantedBug::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = PlantedBug::ALL.iter().map(|b| b.name()).collect();
                format!("unknown planted bug `{s}` (known: {})", names.join(", "))
            })
    }
}

/// A planted bug's state in one sidecar: what it has seen, and the stale heartbeat it
/// keeps sending.
#[derive(Clone, Debug)]
struct Planted {
    bug: PlantedBug,
    /// The TTL the core asks for (what a faked refresh answers).
    ttl: i64,
    heartbeat_interval: Duration,
    /// The last `/health` probe failed.
    health_failed: bool,
    /// The last `/metrics` scrape failed.
    scrape_failed: bool,
    /// The last heartbeat body posted, with its incarnation.
    last_beat: Option<(String, String)>,
    /// When the stale heartbeat loop last posted.
    zombie_at: Option<Duration>,
    /// The process's first incarnation, and the later one whose heartbeats are held
    /// with how many held so far.
    first_incarnation: Option<String>,
    held: Option<(String, u32)>,
}

/// How long [`PlantedBug::HeartbeatsHeldAfterReregister`] holds heartbeats.
const HELD_FOR: Duration = Duration::from_secs(60);

impl Planted {
    /// `bug`, in a sidecar with lease `ttl` (s) and `heartbeat_interval`, before it ran.
    fn new(bug: PlantedBug, ttl: i64, heartbeat_interval: Duration) -> Planted {
        Planted {
            bug,
            ttl,
            heartbeat_interval,
            health_failed: false,
            scrape_failed: false,
            last_beat: None,
            zombie_at: None,
            first_incarnation: None,
            held: None,
        }
    }

    /// Whether this heartbeat of `incarnation` is one to hold: among the first
    /// [`HELD_FOR`] worth of heartbeats of an incarnation after the first.
    fn hold(&mut self, incarnation: &str) -> bool {
        let first = self
            .first_incarnation
            .get_or_insert_with(|| incarnation.into());
        if first == incarnation {
            return false;
        }
        let limit = HELD_FOR.as_millis() / self.heartbeat_interval.as_millis().max(1);
        let held = match &mut self.held {
            Some((inc, n)) if inc == incarnation => n,
            slot => &mut slot.insert((incarnation.into(), 0)).1,
        };
        *held += 1;
        u128::from(*held) <= limit
    }
}

impl Distortion for Planted {
    /// A swallowed keepalive or revoke is answered as done; a heartbeat is remembered
    /// for the stale loop, or sent with its cache usage as a percentage.
    fn command(&mut self, mut command: Command, reg: &Registration) -> Verdict {
        let unhealthy = self.health_failed || self.scrape_failed;
        let exiting = matches!(
            reg,
            Registration::Revoking {
                then: AfterRevoke::Exit { .. },
                ..
            }
        );
        match (self.bug, &mut command) {
            (PlantedBug::HeartbeatAfterLeaseLost, Command::PostHeartbeat { body, .. }) => {
                if let Some(lease) = reg.registered() {
                    self.last_beat = Some((lease.incarnation.clone(), body.clone()));
                    self.zombie_at = None;
                }
            }
            (PlantedBug::NoKeepaliveWhileUnhealthy, Command::Keepalive { id, .. }) if unhealthy => {
                return Verdict::Answered(*id, Answer::KeepaliveTtl(self.ttl));
            }
            (PlantedBug::NoRevokeOnShutdown, Command::Revoke { id, .. }) if exiting => {
                return Verdict::Answered(*id, Answer::RevokeDone);
            }
            (PlantedBug::HeartbeatsHeldAfterReregister, Command::PostHeartbeat { id, .. }) => {
                let incarnation = reg.registered().map(|l| l.incarnation.clone());
                if incarnation.is_some_and(|inc| self.hold(&inc)) {
                    return Verdict::Answered(*id, Answer::HeartbeatStatus(200));
                }
            }
            (PlantedBug::CacheUsageAsPercent, Command::PostHeartbeat { body, .. }) => {
                if let Some(percent) = cache_as_percent(body) {
                    *body = percent;
                }
            }
            _ => {}
        }
        Verdict::Run(command)
    }

    /// Every answer is watched (the last probe's and scrape's health); a 409 or a lost
    /// lease is replaced by its bug; a stale heartbeat's answer is dropped.
    fn answer(&mut self, id: CommandId, kind: Kind, answer: Answer) -> Option<Answer> {
        if id == STRAY {
            return None; // a stale heartbeat's answer: nobody waits for it
        }
        match &answer {
            Answer::HealthOk => self.health_failed = false,
            Answer::HealthFailed(_) => self.health_failed = true,
            Answer::ScrapePage { .. } => self.scrape_failed = false,
            Answer::ScrapeFailed { .. } => self.scrape_failed = true,
            _ => {}
        }
        Some(match (self.bug, kind, answer) {
            (PlantedBug::NoReregisterOn409, Kind::Heartbeat, Answer::HeartbeatStatus(409)) => {
                Answer::HeartbeatStatus(200)
            }
            (
                PlantedBug::IgnoreLeaseNotFound,
                Kind::Etcd(EtcdCall::Keepalive),
                Answer::LeaseNotFound | Answer::KeepaliveTtl(0),
            ) => Answer::KeepaliveTtl(self.ttl),
            (_, _, answer) => answer,
        })
    }

    /// The stale heartbeat loop: the last body posted again, if its incarnation is no
    /// longer the registered one and an interval has passed since its last post.
    fn unasked(&mut self, now: Duration, reg: &Registration) -> Option<Command> {
        if self.bug != PlantedBug::HeartbeatAfterLeaseLost {
            return None;
        }
        let (incarnation, body) = self.last_beat.as_ref()?;
        let current = reg.registered().map(|l| &l.incarnation) == Some(incarnation);
        let due = self.zombie_at.map_or(now, |t| t + self.heartbeat_interval);
        if current || now < due {
            return None;
        }
        self.zombie_at = Some(now);
        Some(Command::PostHeartbeat {
            id: STRAY,
            body: body.clone(),
            target: HeartbeatTarget::Configured,
        })
    }

    /// The stopped time is lost to a clock that counts its own ticks.
    fn resumed(&mut self, stopped: Duration) -> Duration {
        match self.bug {
            PlantedBug::ClockStopsWhilePaused => stopped,
            _ => Duration::ZERO,
        }
    }

    /// The old seed or no token, for the two bugs that lose what a restart keeps.
    fn restart(
        &self,
        config: &CoreConfig,
        previous: u64,
        start: &mut Start,
    ) -> Box<dyn Distortion> {
        match self.bug {
            PlantedBug::ReuseIncarnation => start.seed = previous,
            PlantedBug::TokenLostOnRestart => start.token.clear(),
            _ => {}
        }
        self.bug.distortion(config)
    }
}

/// The heartbeat body with `load_metrics.gpu_cache_usage_perc` times 100.
fn cache_as_percent(body: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(body).ok()?;
    let usage = v.get_mut("load_metrics")?.get_mut("gpu_cache_usage_perc")?;
    *usage = serde_json::json!(usage.as_f64()? * 100.0);
    Some(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bug`'s state with a 6 s TTL and 3 s heartbeats, as `PlantedBug::distortion` builds it.
    fn planted(bug: PlantedBug) -> Planted {
        Planted::new(bug, 6, Duration::from_secs(3))
    }

    #[test]
    fn names_round_trip_through_from_str_and_serde() {
        for bug in PlantedBug::ALL {
            assert_eq!(bug.name().parse::<PlantedBug>(), Ok(bug));
            let json = serde_json::to_string(&bug).unwrap();
            assert_eq!(json, format!("\"{}\"", bug.name()));
        }
        let e = "no_such_bug".parse::<PlantedBug>().unwrap_err();
        assert!(e.contains("reuse_incarnation"), "{e}");
    }

    #[test]
    fn a_409_is_read_as_200_only_with_its_bug() {
        let mut d = planted(PlantedBug::NoReregisterOn409);
        let a = d.answer(CommandId(1), Kind::Heartbeat, Answer::HeartbeatStatus(409));
        assert_eq!(a, Some(Answer::HeartbeatStatus(200)));
        let mut d = planted(PlantedBug::IgnoreLeaseNotFound);
        let a = d.answer(CommandId(1), Kind::Heartbeat, Answer::HeartbeatStatus(409));
        assert_eq!(a, Some(Answer::HeartbeatStatus(409)));
        assert_eq!(
            d.answer(
                CommandId(2),
                Kind::Etcd(EtcdCall::Keepalive),
                Answer::LeaseNotFound
            ),
            Some(Answer::KeepaliveTtl(6))
        );
    }

    #[test]
    fn a_restart_keeps_the_old_seed_or_loses_the_token_only_with_its_bug() {
        let flags = ["--register-addr", "a:1"];
        let config = sidecar::config::Config::from_flags(flags).unwrap();
        let config = CoreConfig::from_config(&config, 0);
        let start = || Start {
            seed: 2,
            token: "t".into(),
        };
        for bug in PlantedBug::ALL {
            let mut s = start();
            let _fresh = bug.distortion(&config).restart(&config, 1, &mut s);
            let want = match bug {
                PlantedBug::ReuseIncarnation => Start { seed: 1, ..start() },
                PlantedBug::TokenLostOnRestart => Start {
                    token: String::new(),
                    ..start()
                },
                _ => start(),
            };
            assert_eq!(s, want, "{bug}");
        }
    }

    #[test]
    fn a_stale_heartbeat_is_sent_unasked_and_its_answer_is_nobodys() {
        let mut d = planted(PlantedBug::HeartbeatAfterLeaseLost);
        let got = d.answer(STRAY, Kind::Heartbeat, Answer::HeartbeatStatus(200));
        assert_eq!(got, None);
        let got = d.answer(CommandId(4), Kind::Heartbeat, Answer::HeartbeatStatus(200));
        assert_eq!(got, Some(Answer::HeartbeatStatus(200)));
        let reg = Registration::Unregistered {
            retry_at: Duration::ZERO,
        };
        // Nothing posted yet: nothing to repeat.
        assert_eq!(d.unasked(Duration::ZERO, &reg), None);
        d.last_beat = Some(("old".into(), "{}".into()));
        let beat = Command::PostHeartbeat {
            id: STRAY,
            body: "{}".into(),
            target: HeartbeatTarget::Configured,
        };
        assert_eq!(d.unasked(Duration::ZERO, &reg), Some(beat.clone()));
        assert_eq!(d.unasked(Duration::from_secs(1), &reg), None);
        assert_eq!(d.unasked(Duration::from_secs(3), &reg), Some(beat));
    }

    #[test]
    fn heartbeats_are_held_for_a_minute_only_after_a_reregistration() {
        let bug = PlantedBug::HeartbeatsHeldAfterReregister;
        let mut d = planted(bug);
        // The first incarnation's heartbeats go out.
        assert!(!d.hold("a") && !d.hold("a"));
        // A later one's first 20 (60 s / 3 s) are held, then they go out.
        let held = (0..25).filter(|_| d.hold("b")).count();
        assert_eq!(held, 20);
        assert!(d.hold("c"), "each new incarnation is held again");
    }

    #[test]
    fn the_cache_usage_goes_out_as_a_percentage() {
        let mut d = planted(PlantedBug::CacheUsageAsPercent);
        let reg = Registration::Unregistered {
            retry_at: Duration::ZERO,
        };
        let body = r#"{"name":"a","incarnation_id":"i","load_metrics":{"waiting_requests_num":1,"gpu_cache_usage_perc":0.25},"latency_metrics":{"recent_max_ttft":0,"recent_max_tbt":0}}"#;
        let beat = Command::PostHeartbeat {
            id: CommandId(1),
            body: body.into(),
            target: HeartbeatTarget::Configured,
        };
        let Verdict::Run(Command::PostHeartbeat { body, .. }) = d.command(beat, &reg) else {
            panic!()
        };
        assert!(body.contains("\"gpu_cache_usage_perc\":25.0"), "{body}");
    }

    #[test]
    fn keepalives_are_swallowed_only_after_a_failed_scrape_or_probe() {
        let mut d = planted(PlantedBug::NoKeepaliveWhileUnhealthy);
        let ka = Command::Keepalive {
            id: CommandId(3),
            lease: 9,
        };
        let reg = Registration::Unregistered {
            retry_at: Duration::ZERO,
        };
        let run = Verdict::Run(ka.clone());
        assert_eq!(d.command(ka.clone(), &reg), run);
        d.answer(
            CommandId(1),
            Kind::Scrape,
            Answer::ScrapeFailed {
                reason: "status".into(),
                detail: "500".into(),
            },
        );
        let swallowed = Verdict::Answered(CommandId(3), Answer::KeepaliveTtl(6));
        assert_eq!(d.command(ka.clone(), &reg), swallowed);
        d.answer(
            CommandId(2),
            Kind::Scrape,
            Answer::ScrapePage {
                text: String::new(),
                openmetrics: false,
            },
        );
        assert_eq!(d.command(ka, &reg), run);
    }
}
