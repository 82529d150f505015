//! The decision core following the elected master (`--follow-master`): which URL each
//! heartbeat goes to, and how often the MASTER key is read. Virtual time: every
//! command is answered at once by a small world whose MASTER key and master answers
//! the test sets.

use std::time::Duration;

use sidecar::config::Config;
use sidecar::core::{Answer, Command, Core, CoreConfig, HeartbeatTarget, Input, MasterName, Note};

const PAGE: &str = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n";
const CONFIGURED: &str = "http://svc:9998/v1/internal/heartbeat";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// What the master at a target answers: a status, or no answer at all.
type Master = Box<dyn Fn(&HeartbeatTarget) -> Option<u16>>;

/// One core and everything it asked for, each command answered at once.
struct World {
    core: Core,
    now: Duration,
    /// The MASTER key's value (`None`: no key); `Err`: etcd fails the read.
    master_key: Result<Option<String>, String>,
    master: Master,
    /// Heartbeats to a target this says hang go unanswered until [`World::time_out`].
    hangs: Box<dyn Fn(&HeartbeatTarget) -> bool>,
    held: Vec<sidecar::core::CommandId>,
    /// When each read went out, and the key it asked for.
    reads: Vec<(Duration, String)>,
    /// When each heartbeat went out, and where.
    posts: Vec<(Duration, HeartbeatTarget)>,
    notes: Vec<(Duration, Note)>,
}

impl World {
    fn new(flags: &[&str]) -> World {
        let mut all = vec![
            "--lease-ttl",
            "6",
            "--keepalive-interval",
            "2",
            "--xllm-service-url",
            "http://svc:9998",
        ];
        all.extend_from_slice(flags);
        let config = Config::from_flags(all).unwrap();
        let core = Core::new(CoreConfig::from_config(&config, 0), 1, Duration::ZERO);
        World {
            core,
            now: Duration::ZERO,
            master_key: Ok(None),
            master: Box::new(|_| Some(200)),
            hangs: Box::new(|_| false),
            held: Vec::new(),
            reads: Vec::new(),
            posts: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn following(flags: &[&str]) -> World {
        let mut all = vec!["--follow-master"];
        all.extend_from_slice(flags);
        World::new(&all)
    }

    /// Answer every command the core has issued, until it issues none.
    fn answer_all(&mut self) {
        while let Some(command) = self.core.poll_command() {
            let (id, answer) = match command {
                Command::ProbeHealth { id } => (id, Answer::HealthOk),
                Command::GrantLease { id, ttl } => (id, Answer::LeaseGranted { lease: 7, ttl }),
                Command::PutKey { id, .. } => (id, Answer::PutDone),
                Command::Keepalive { id, .. } => (id, Answer::KeepaliveTtl(6)),
                Command::Scrape { id } => (
                    id,
                    Answer::ScrapePage {
                        text: PAGE.into(),
                        openmetrics: false,
                    },
                ),
                Command::PostHeartbeat { id, target, .. } if (self.hangs)(&target) => {
                    self.posts.push((self.now, target));
                    self.held.push(id);
                    continue;
                }
                Command::PostHeartbeat { id, target, .. } => {
                    let answer = match (self.master)(&target) {
                        Some(status) => Answer::HeartbeatStatus(status),
                        None => Answer::HeartbeatFailed("connection refused".into()),
                    };
                    self.posts.push((self.now, target));
                    (id, answer)
                }
                Command::ReadMasterKey { id, key } => {
                    self.reads.push((self.now, key));
                    let answer = match &self.master_key {
                        Ok(value) => Answer::MasterValue(value.clone()),
                        Err(e) => Answer::MasterReadFailed(e.clone()),
                    };
                    (id, answer)
                }
                Command::Revoke { id, .. } => (id, Answer::RevokeDone),
                Command::Note(note) => {
                    self.notes.push((self.now, note));
                    continue;
                }
                Command::LogServedModel | Command::Exit { .. } => continue,
            };
            self.core.handle(self.now, Input::Answer(id, answer));
        }
    }

    /// What is issued now, then every wake-up up to `t`.
    fn run_until(&mut self, t: Duration) {
        self.answer_all();
        while let Some(at) = self.core.next_wakeup().filter(|at| *at <= t) {
            self.now = self.now.max(at);
            self.core.handle(self.now, Input::Timer);
            self.answer_all();
        }
        self.now = t;
    }

    /// The held heartbeats time out at `t`.
    fn time_out(&mut self, t: Duration) {
        self.run_until(t);
        for id in std::mem::take(&mut self.held) {
            let answer = Answer::HeartbeatFailed("heartbeat: no answer within 3s".into());
            self.core.handle(t, Input::Answer(id, answer));
        }
        self.answer_all();
    }

    fn reads_between(&self, from: Duration, to: Duration) -> usize {
        self.reads
            .iter()
            .filter(|(t, _)| from <= *t && *t < to)
            .count()
    }

    fn last_target(&self) -> &HeartbeatTarget {
        &self.posts.last().expect("a heartbeat went out").1
    }

    fn switches(&self) -> Vec<(Duration, String, String)> {
        self.notes
            .iter()
            .filter_map(|(t, n)| match n {
                Note::HeartbeatTargetChanged { from, to, .. } => {
                    Some((*t, from.clone(), to.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

fn elected(host: &str, rpc_port: u16, url: &str) -> HeartbeatTarget {
    HeartbeatTarget::Elected {
        master: MasterName {
            host: host.into(),
            rpc_port,
        },
        url: url.parse().unwrap(),
    }
}

#[test]
fn off_by_default_no_read_and_every_heartbeat_to_the_configured_url() {
    let mut w = World::new(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(60));
    assert!(w.reads.is_empty());
    assert!(w.posts.len() > 10);
    assert!(w
        .posts
        .iter()
        .all(|(_, t)| *t == HeartbeatTarget::Configured));
    assert!(w.switches().is_empty());
}

#[test]
fn no_master_key_keeps_the_configured_url() {
    let mut w = World::following(&[]);
    w.run_until(secs(35));
    assert_eq!(w.reads.first().map(|r| r.0), Some(Duration::ZERO));
    assert!(w
        .posts
        .iter()
        .all(|(_, t)| *t == HeartbeatTarget::Configured));
    assert!(w.switches().is_empty());
}

#[test]
fn the_key_is_the_namespaced_master_key() {
    let mut w = World::following(&["--etcd-namespace", "prod/"]);
    w.run_until(secs(1));
    assert_eq!(w.reads[0].1, "/prod/XLLM:SERVICE:MASTER");
    let mut w = World::following(&[]);
    w.run_until(secs(1));
    assert_eq!(w.reads[0].1, "XLLM:SERVICE:MASTER");
}

#[test]
fn a_key_switches_heartbeats_to_the_host_it_names_with_the_configured_port() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(20));
    let want = elected(
        "10.0.0.1",
        9999,
        "http://10.0.0.1:9998/v1/internal/heartbeat",
    );
    // The read at start comes before the first heartbeat: none goes elsewhere.
    assert!(w.posts.iter().all(|(_, t)| *t == want));
    assert_eq!(
        w.switches(),
        vec![(
            Duration::ZERO,
            CONFIGURED.to_string(),
            "http://10.0.0.1:9998/v1/internal/heartbeat".to_string()
        )]
    );
}

#[test]
fn master_http_port_replaces_the_configured_port() {
    let mut w = World::following(&["--master-http-port", "8080"]);
    w.master_key = Ok(Some("[fd00::5]:9999".into()));
    w.run_until(secs(5));
    let want = elected(
        "[fd00::5]",
        9999,
        "http://[fd00::5]:8080/v1/internal/heartbeat",
    );
    assert_eq!(w.last_target(), &want);
}

#[test]
fn a_changed_key_switches_again_within_one_read_interval_and_a_heartbeat() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(12));
    // The old master stays up and answers 200: only the steady read sees the switch.
    w.master_key = Ok(Some("10.0.0.2:9999".into()));
    w.run_until(secs(40));
    let second = elected(
        "10.0.0.2",
        9999,
        "http://10.0.0.2:9998/v1/internal/heartbeat",
    );
    let first_to_second = w
        .posts
        .iter()
        .find(|(_, t)| *t == second)
        .map(|(at, _)| *at)
        .unwrap();
    // Read interval 10 s + heartbeat interval 3 s after the change at 12 s.
    assert!(first_to_second <= secs(12 + 10 + 3), "{first_to_second:?}");
    assert!(w
        .posts
        .iter()
        .skip_while(|(_, t)| *t != second)
        .all(|(_, t)| *t == second));
    assert_eq!(w.switches().len(), 2);
}

#[test]
fn a_deleted_key_goes_back_to_the_configured_url() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(12));
    w.master_key = Ok(None);
    w.run_until(secs(30));
    assert_eq!(w.last_target(), &HeartbeatTarget::Configured);
    let last = w.switches().pop().unwrap();
    assert_eq!(last.2, CONFIGURED);
    assert_eq!(last.1, "http://10.0.0.1:9998/v1/internal/heartbeat");
}

#[test]
fn an_unusable_value_keeps_the_configured_url_and_is_noted_once() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("not a master".into()));
    w.run_until(secs(45));
    assert!(w.reads.len() >= 4);
    assert!(w
        .posts
        .iter()
        .all(|(_, t)| *t == HeartbeatTarget::Configured));
    let unusable: Vec<_> = w
        .notes
        .iter()
        .filter(|(_, n)| matches!(n, Note::MasterValueUnusable { .. }))
        .collect();
    assert_eq!(unusable.len(), 1, "{unusable:?}");
}

#[test]
fn a_failed_read_keeps_the_target() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(5));
    w.master_key = Err("etcd unavailable: all endpoints failed".into());
    w.run_until(secs(30));
    assert_eq!(
        w.last_target(),
        &elected(
            "10.0.0.1",
            9999,
            "http://10.0.0.1:9998/v1/internal/heartbeat"
        )
    );
    assert!(w
        .notes
        .iter()
        .any(|(_, n)| matches!(n, Note::MasterReadFailed { .. })));
}

#[test]
fn steady_reads_are_one_per_read_interval_whatever_the_heartbeat_rate() {
    let mut w = World::following(&["--heartbeat-interval", "0.5"]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(100));
    assert!(w.posts.len() > 150, "{}", w.posts.len());
    // At 0, 10, ..., 100.
    assert_eq!(w.reads.len(), 11, "{:?}", w.reads);
}

#[test]
fn one_failed_heartbeat_triggers_one_read_at_once() {
    let mut w = World::following(&["--heartbeat-interval", "1", "--master-read-interval", "60"]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(20));
    assert_eq!(w.reads.len(), 1);
    let before = w.posts.len();
    let failed = std::cell::Cell::new(false);
    w.master = Box::new(move |_| Some(if failed.replace(true) { 200 } else { 503 }));
    w.run_until(secs(50));
    // The 503 read the key once, at once; the 200s after it read nothing.
    assert_eq!(w.reads.len(), 2, "{:?}", w.reads);
    let failure = w.posts[before].0;
    assert_eq!(w.reads[1].0, failure);
}

#[test]
fn failing_heartbeats_read_at_most_once_per_heartbeat_interval() {
    let mut w = World::following(&["--heartbeat-interval", "1", "--master-read-interval", "60"]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(10));
    w.master = Box::new(|_| None);
    w.run_until(secs(40));
    // While they fail: one read per second (the heartbeat interval), never more, even
    // as the heartbeats themselves back off.
    let reads = w.reads_between(secs(10), secs(40));
    assert!(
        (25..=30).contains(&reads),
        "{reads} reads in 30 s: {:?}",
        w.reads
    );
    // Once one is answered again, back to the read interval.
    w.master = Box::new(|_| Some(200));
    w.run_until(secs(45));
    let settled = w.reads.len();
    w.run_until(secs(100));
    assert!(w.reads.len() - settled <= 1, "{:?}", w.reads);
    for pair in w.reads.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= secs(1), "{:?}", w.reads);
    }
}

#[test]
fn a_dead_master_is_left_within_the_bound_once_the_key_names_another() {
    // Heartbeat 3 s, read interval 10 s: a dead master's successor is posted to within
    // min(heartbeat, read interval) of the key changing (the world answers at once).
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(10));
    let dead = "10.0.0.1".to_string();
    w.master = Box::new(move |t| match t {
        HeartbeatTarget::Elected { master, .. } if master.host == dead => None,
        _ => Some(200),
    });
    w.run_until(secs(14));
    // The master lease runs out 3 s after its death; the standby takes over.
    w.master_key = Ok(Some("10.0.0.2:9999".into()));
    w.run_until(secs(40));
    let second = elected(
        "10.0.0.2",
        9999,
        "http://10.0.0.2:9998/v1/internal/heartbeat",
    );
    let first = w.posts.iter().find(|(_, t)| *t == second).unwrap().0;
    assert!(first <= secs(14 + 3), "{first:?}");
}

#[test]
fn a_switch_during_a_hanging_heartbeat_posts_to_the_new_master_as_it_times_out() {
    let mut w = World::following(&[]);
    w.master_key = Ok(Some("10.0.0.1:9999".into()));
    w.run_until(secs(11));
    // The first master's host goes silent: its heartbeats hang until their timeout.
    let dead = |t: &HeartbeatTarget| matches!(t, HeartbeatTarget::Elected { master, .. } if master.host == "10.0.0.1");
    w.hangs = Box::new(dead);
    w.run_until(secs(13));
    let hung_at = w.posts.last().unwrap().0;
    assert_eq!(hung_at, secs(12));
    w.time_out(hung_at + secs(3));
    // Failing: the key is read at once, and again at most a heartbeat interval later.
    let next = w.posts.last().unwrap().0;
    w.master_key = Ok(Some("10.0.0.2:9999".into()));
    // The next post (after the backoff) hangs too; the read after it names the second.
    w.run_until(next.max(secs(15)) + secs(4));
    assert!(w.switches().len() == 2, "{:?}", w.switches());
    let switched_at = w.switches()[1].0;
    let hung = w.held.len();
    assert_eq!(hung, 1, "a post to the first master is still hanging");
    let timeout_at = w.posts.last().unwrap().0 + secs(3);
    assert!(switched_at < timeout_at);
    w.time_out(timeout_at);
    let second = elected(
        "10.0.0.2",
        9999,
        "http://10.0.0.2:9998/v1/internal/heartbeat",
    );
    // At once, not after the failure backoff.
    assert_eq!(w.posts.last().unwrap(), &(timeout_at, second));
}
