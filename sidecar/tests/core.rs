//! Exact tests of the decision core alone: inputs at given times, the commands it
//! answers with. No sockets, no clocks.

use std::time::Duration;

use sidecar::config::Config;
use sidecar::core::{
    Answer, Command, CommandId, Core, CoreConfig, Input, LeaseLoss, Note, Registration,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A core under test, the time it was last given and every command it issued.
struct Run {
    core: Core,
    now: Duration,
    seen: Vec<Command>,
}

impl Run {
    fn new(flags: &[&str]) -> Run {
        let mut all = vec!["--lease-ttl", "6", "--keepalive-interval", "2"];
        all.extend_from_slice(flags);
        let config = Config::from_flags(all).unwrap();
        let core = Core::new(
            CoreConfig::from_config(&config, 1_000_000),
            1,
            Duration::ZERO,
        );
        let mut run = Run {
            core,
            now: Duration::ZERO,
            seen: Vec::new(),
        };
        run.collect();
        run
    }

    fn collect(&mut self) -> Vec<Command> {
        let fresh: Vec<Command> = std::iter::from_fn(|| self.core.poll_command()).collect();
        self.seen.extend(fresh.iter().cloned());
        fresh
    }

    fn at(&mut self, t: Duration, input: Input) -> Vec<Command> {
        assert!(t >= self.now);
        self.now = t;
        self.core.handle(t, input);
        self.collect()
    }

    fn answer(&mut self, t: Duration, id: CommandId, answer: Answer) -> Vec<Command> {
        self.at(t, Input::Answer(id, answer))
    }

    /// Timer inputs at every wake-up up to `t`, answering nothing.
    fn idle_until(&mut self, t: Duration) -> Vec<Command> {
        let mut out = Vec::new();
        while let Some(w) = self.core.next_wakeup().filter(|w| *w <= t) {
            out.extend(self.at(w.max(self.now), Input::Timer));
        }
        self.now = self.now.max(t);
        out
    }

    /// Healthy at start-up, lease 7 granted and the key put: registered at 10 ms.
    fn registered(flags: &[&str]) -> Run {
        let mut run = Run::new(flags);
        let probe = probe_id(&run.seen);
        let out = run.answer(ms(1), probe, Answer::HealthOk);
        let grant = grant_id(&out).expect("a grant after the first healthy probe");
        let out = run.answer(ms(2), grant, Answer::LeaseGranted { lease: 7, ttl: 6 });
        let put = put_id(&out).expect("a put after the grant");
        run.answer(ms(3), put, Answer::PutDone);
        assert!(matches!(
            run.core.registration(),
            Registration::Registered(_)
        ));
        run
    }

    fn incarnation(&self) -> String {
        self.core.status().registration.unwrap().incarnation
    }
}

fn probe_id(cmds: &[Command]) -> CommandId {
    cmds.iter()
        .rev()
        .find_map(|c| match c {
            Command::ProbeHealth { id } => Some(*id),
            _ => None,
        })
        .expect("a probe")
}

fn grant_id(cmds: &[Command]) -> Option<CommandId> {
    cmds.iter().find_map(|c| match c {
        Command::GrantLease { id, .. } => Some(*id),
        _ => None,
    })
}

fn put_id(cmds: &[Command]) -> Option<CommandId> {
    cmds.iter().find_map(|c| match c {
        Command::PutKey { id, .. } => Some(*id),
        _ => None,
    })
}

fn keepalives(cmds: &[Command]) -> Vec<CommandId> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Keepalive { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

fn revokes(cmds: &[Command]) -> Vec<(CommandId, i64)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Revoke { id, lease } => Some((*id, *lease)),
            _ => None,
        })
        .collect()
}

fn notes(cmds: &[Command]) -> Vec<Note> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Note(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

const PAGE: &str = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2.0\nvllm:gpu_cache_usage_perc 0.25\n";

#[test]
fn registers_with_the_masters_value_after_the_first_healthy_probe() {
    let mut run = Run::new(&["--instance-name", "vllm", "--register-addr", "h:1"]);
    assert_eq!(run.seen, vec![Command::ProbeHealth { id: CommandId(1) }]);
    let out = run.answer(ms(1), CommandId(1), Answer::HealthOk);
    assert!(out.contains(&Command::LogServedModel));
    let grant = grant_id(&out).unwrap();
    let out = run.answer(ms(250), grant, Answer::LeaseGranted { lease: 7, ttl: 6 });
    let Some(Command::PutKey {
        key, value, lease, ..
    }) = out.iter().find(|c| matches!(c, Command::PutKey { .. }))
    else {
        panic!("no put in {out:?}")
    };
    assert_eq!(key, "XLLM:DEFAULT:h:1");
    assert_eq!(*lease, 7);
    let v: serde_json::Value = serde_json::from_str(value).unwrap();
    assert_eq!(v["name"], "h:1");
    assert_eq!(v["type"], 0);
    assert_eq!(v["backend_type"], "vllm");
    assert_eq!(v["register_ts_ms"], 1_000_250u64);
    let inc = v["incarnation_id"].as_str().unwrap();
    let hex = inc.strip_prefix("vllm-").unwrap();
    assert_eq!(hex.len(), 12);
    assert!(hex
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
}

#[test]
fn start_up_probes_back_off_from_1s_doubling_up_to_the_ttl() {
    let mut run = Run::new(&[]);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let id = probe_id(&run.seen);
        let t = run.now;
        run.answer(t, id, Answer::HealthFailed("down".into()));
        let next = run.core.next_wakeup().unwrap();
        waits.push((next - t).as_secs());
        run.idle_until(next);
    }
    assert_eq!(waits, vec![1, 2, 4, 6, 6]);
    assert!(grant_id(&run.seen).is_none());
}

#[test]
fn a_keepalive_error_is_retried_and_keeps_the_incarnation() {
    let mut run = Run::registered(&[]);
    let inc = run.incarnation();
    let out = run.idle_until(ms(2_000));
    let ka = keepalives(&out);
    assert_eq!(ka.len(), 1, "{out:?}");
    let out = run.answer(
        ms(2_100),
        ka[0],
        Answer::KeepaliveFailed("etcd down".into()),
    );
    assert!(matches!(
        notes(&out)[..],
        [Note::KeepaliveFailed { retry_in, .. }] if retry_in < Duration::from_secs(2)
    ));
    // The retry comes sooner than the next period.
    let retry = run.core.next_wakeup().unwrap();
    assert!(retry < ms(4_000), "{retry:?}");
    let out = run.idle_until(retry);
    let ka = keepalives(&out);
    assert_eq!(ka.len(), 1);
    run.answer(retry, ka[0], Answer::KeepaliveTtl(6));
    assert_eq!(run.incarnation(), inc);
    let grants = run
        .seen
        .iter()
        .filter(|c| matches!(c, Command::GrantLease { .. }));
    assert_eq!(grants.count(), 1, "no second registration");
}

#[test]
fn lease_not_found_or_ttl_0_registers_again_at_once() {
    for gone in [Answer::LeaseNotFound, Answer::KeepaliveTtl(0)] {
        let mut run = Run::registered(&[]);
        let out = run.idle_until(ms(2_000));
        let ka = keepalives(&out)[0];
        let before = run.seen.len();
        let out = run.answer(ms(2_010), ka, gone.clone());
        assert!(notes(&out).contains(&Note::LeaseLost {
            lease: 7,
            why: LeaseLoss::Gone
        }));
        assert!(grant_id(&out).is_some(), "{gone:?}: {out:?}");
        assert!(run.seen.len() > before);
    }
}

#[test]
fn a_lease_is_given_up_only_once_its_ttl_has_certainly_run_out() {
    let mut run = Run::registered(&[]);
    // The grant came in at 2 ms: refreshed at the latest then, TTL 6 s.
    let mut t = ms(2_000);
    loop {
        let out = run.idle_until(t);
        for id in keepalives(&out) {
            run.answer(t, id, Answer::KeepaliveFailed("timeout".into()));
        }
        if grant_id(&out).is_some() {
            break;
        }
        assert!(t <= ms(6_002), "not given up by {t:?}");
        t += ms(100);
    }
    assert!(t >= ms(6_002), "given up too early, at {t:?}");
    assert!(notes(&run.seen).contains(&Note::LeaseLost {
        lease: 7,
        why: LeaseLoss::Expired
    }));
    // A keepalive whose answer never came may still have kept it alive: revoked too.
    assert!(revokes(&run.seen).iter().any(|&(_, lease)| lease == 7));
}

/// A keepalive's answer held while the process was stopped comes in after the TTL: etcd
/// refreshed the lease no earlier than when the keepalive was sent, so
/// the lease may be gone, and is given up (revoked, registered anew), never trusted.
#[test]
fn a_keepalive_answer_that_comes_in_after_the_ttl_refreshes_nothing() {
    let mut run = Run::registered(&[]);
    let out = run.idle_until(ms(2_100));
    let ka = keepalives(&out);
    assert_eq!(ka.len(), 1, "{out:?}");
    // Sent at about 2 s; answered (TTL 6 s) only at 9 s, past 2 s + 6 s.
    let late = run.answer(ms(9_000), ka[0], Answer::KeepaliveTtl(6));
    assert!(grant_id(&late).is_some(), "not registered anew: {late:?}");
    assert!(notes(&run.seen).contains(&Note::LeaseLost {
        lease: 7,
        why: LeaseLoss::Expired
    }));
    assert!(revokes(&run.seen).iter().any(|&(_, lease)| lease == 7));
}

#[test]
fn a_page_answered_once_the_lease_has_certainly_run_out_is_not_posted() {
    let mut run = Run::registered(&["--heartbeat-interval", "3"]);
    // Every keepalive fails; the scrape of about 3 s is answered only at 6.002 s, the
    // lease's certain expiry (granted at 2 ms, TTL 6 s), before any timer at that instant.
    let mut scrape = None;
    let mut t = ms(100);
    while t <= ms(6_000) {
        let out = run.idle_until(t);
        for id in keepalives(&out) {
            run.answer(t, id, Answer::KeepaliveFailed("timeout".into()));
        }
        scrape = scrape.or(out.iter().find_map(|c| match c {
            Command::Scrape { id } => Some(*id),
            _ => None,
        }));
        t += ms(100);
    }
    let page = Answer::ScrapePage {
        text: PAGE.into(),
        openmetrics: false,
    };
    let out = run.answer(ms(6_002), scrape.expect("a scrape"), page);
    assert!(!out
        .iter()
        .any(|c| matches!(c, Command::PostHeartbeat { .. })));
    assert!(notes(&out).contains(&Note::LeaseLost {
        lease: 7,
        why: LeaseLoss::Expired
    }));
}

#[test]
fn a_page_with_no_vllm_sample_is_a_scrape_error_and_no_heartbeat() {
    let mut run = Run::registered(&["--heartbeat-interval", "3"]);
    let out = run.idle_until(ms(3_000));
    let scrape = out
        .iter()
        .find_map(|c| match c {
            Command::Scrape { id } => Some(*id),
            _ => None,
        })
        .expect("a scrape");
    let html = Answer::ScrapePage {
        text: "<html><body>bad gateway</body></html>".into(),
        openmetrics: false,
    };
    let out = run.answer(ms(3_010), scrape, html);
    assert!(
        matches!(&notes(&out)[..], [Note::ScrapeFailed { reason, .. }] if reason == "no_vllm_sample")
    );
    assert!(!out
        .iter()
        .any(|c| matches!(c, Command::PostHeartbeat { .. })));
}

#[test]
fn a_page_becomes_the_exact_heartbeat_body() {
    let mut run = Run::registered(&["--register-addr", "h:1"]);
    let out = run.idle_until(ms(3_000));
    let scrape = out
        .iter()
        .find_map(|c| match c {
            Command::Scrape { id } => Some(*id),
            _ => None,
        })
        .unwrap();
    let page = Answer::ScrapePage {
        text: PAGE.into(),
        openmetrics: false,
    };
    let out = run.answer(ms(3_010), scrape, page);
    let body = out
        .iter()
        .find_map(|c| match c {
            Command::PostHeartbeat { body, .. } => Some(body.clone()),
            _ => None,
        })
        .unwrap();
    let expected = format!(
        r#"{{"name":"h:1","incarnation_id":"{}","load_metrics":{{"waiting_requests_num":2,"gpu_cache_usage_perc":0.25}},"latency_metrics":{{"recent_max_ttft":0,"recent_max_tbt":0}}}}"#,
        run.incarnation()
    );
    assert_eq!(body, expected);
}

#[test]
fn conflict_409_registers_a_new_incarnation_and_revokes_the_old_lease_after() {
    let mut run = Run::registered(&[]);
    let old = run.incarnation();
    let out = run.idle_until(ms(3_000));
    let scrape = out
        .iter()
        .find_map(|c| match c {
            Command::Scrape { id } => Some(*id),
            _ => None,
        })
        .unwrap();
    let page = Answer::ScrapePage {
        text: PAGE.into(),
        openmetrics: false,
    };
    let out = run.answer(ms(3_010), scrape, page);
    let post = out
        .iter()
        .find_map(|c| match c {
            Command::PostHeartbeat { id, .. } => Some(*id),
            _ => None,
        })
        .unwrap();
    let out = run.answer(ms(3_020), post, Answer::HeartbeatStatus(409));
    let grant = grant_id(&out).expect("re-registers at once");
    assert!(
        revokes(&out).is_empty(),
        "the old lease holds the key until replaced"
    );
    let out = run.answer(ms(3_030), grant, Answer::LeaseGranted { lease: 8, ttl: 6 });
    let put = put_id(&out).unwrap();
    let out = run.answer(ms(3_040), put, Answer::PutDone);
    assert_eq!(
        revokes(&out).iter().map(|r| r.1).collect::<Vec<_>>(),
        vec![7]
    );
    assert_ne!(run.incarnation(), old);
}

#[test]
fn unhealthy_past_the_threshold_revokes_and_registers_again_on_recovery() {
    let mut run = Run::registered(&["--health-fail-threshold", "2"]);
    let mut failed = 0;
    while failed < 2 {
        let t = run.core.next_wakeup().unwrap().max(run.now);
        let out = run.idle_until(t);
        for id in keepalives(&out) {
            run.answer(t, id, Answer::KeepaliveTtl(6));
        }
        if out.iter().any(|c| matches!(c, Command::ProbeHealth { .. })) {
            run.answer(
                t + ms(1),
                probe_id(&out),
                Answer::HealthFailed("503".into()),
            );
            failed += 1;
        }
    }
    let (revoke, lease) = revokes(&run.seen)[0];
    assert_eq!(lease, 7);
    assert!(run.core.status().registration.is_none());
    let t = run.now + ms(5);
    run.answer(t, revoke, Answer::RevokeDone);
    assert!(matches!(
        run.core.registration(),
        Registration::Unregistered { .. }
    ));
    // Recovery: the next probe answers OK and a new grant goes out.
    let t = run.core.next_wakeup().unwrap();
    let out = run.idle_until(t);
    let out = run.answer(t + ms(1), probe_id(&out), Answer::HealthOk);
    assert!(grant_id(&out).is_some());
}

#[test]
fn drain_revokes_and_stays_deregistered_until_undrain() {
    let mut run = Run::registered(&[]);
    let out = run.at(ms(100), Input::Drain);
    let (revoke, _) = revokes(&out)[0];
    assert!(run.core.status().draining);
    run.answer(ms(110), revoke, Answer::RevokeDone);
    assert_eq!(run.core.registration(), &Registration::Drained);
    // Healthy probes for a while: no grant.
    let mut t = ms(110);
    while t < ms(10_000) {
        t = run.core.next_wakeup().unwrap();
        let out = run.idle_until(t);
        if out.iter().any(|c| matches!(c, Command::ProbeHealth { .. })) {
            run.answer(t, probe_id(&out), Answer::HealthOk);
        }
    }
    assert_eq!(grant_id(&run.seen[5..]), None);
    let out = run.at(t, Input::Undrain);
    assert!(grant_id(&out).is_some(), "{out:?}");
    assert!(!run.core.status().draining);
}

#[test]
fn shutdown_revokes_then_exits_and_exits_at_the_deadline_if_etcd_hangs() {
    let mut run = Run::registered(&["--shutdown-timeout", "2"]);
    let out = run.at(ms(100), Input::Shutdown);
    let (revoke, lease) = revokes(&out)[0];
    assert_eq!(lease, 7);
    let out = run.answer(ms(150), revoke, Answer::RevokeDone);
    assert_eq!(out.last(), Some(&Command::Exit { code: 0 }));
    assert_eq!(run.core.next_wakeup(), None);

    let mut run = Run::registered(&["--shutdown-timeout", "2"]);
    run.at(ms(100), Input::Shutdown);
    assert_eq!(run.core.next_wakeup(), Some(ms(2_100)));
    let out = run.idle_until(ms(2_100));
    assert!(notes(&out).contains(&Note::ShutdownTimedOut));
    assert_eq!(out.last(), Some(&Command::Exit { code: 0 }));
}

#[test]
fn shutdown_before_registering_exits_at_once() {
    let mut run = Run::new(&[]);
    let out = run.at(ms(10), Input::Shutdown);
    assert!(revokes(&out).is_empty());
    assert_eq!(out.last(), Some(&Command::Exit { code: 0 }));
}

#[test]
fn stale_and_unknown_answers_are_ignored() {
    let mut run = Run::registered(&[]);
    let before = run.core.registration().clone();
    // The grant (id 2) and put (id 3) were answered already; 999 was never issued.
    run.answer(
        ms(20),
        CommandId(2),
        Answer::LeaseGranted { lease: 9, ttl: 6 },
    );
    run.answer(ms(21), CommandId(999), Answer::LeaseNotFound);
    run.answer(ms(22), CommandId(3), Answer::PutFailed("late".into()));
    assert_eq!(run.core.registration(), &before);
}

#[test]
fn same_seed_same_inputs_same_commands() {
    let script = |seed: u64| {
        let config = Config::from_flags(["--lease-ttl", "6"]).unwrap();
        let mut core = Core::new(CoreConfig::from_config(&config, 0), seed, Duration::ZERO);
        core.handle(ms(1), Input::Answer(CommandId(1), Answer::HealthOk));
        core.handle(
            ms(2),
            Input::Answer(CommandId(2), Answer::GrantFailed("x".into())),
        );
        core.handle(ms(3_000), Input::Timer);
        std::iter::from_fn(|| core.poll_command())
            .map(|c| format!("{c:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(script(5), script(5));
    assert_ne!(
        script(5),
        script(6),
        "the incarnation and jitter follow the seed"
    );
}

#[test]
fn a_failed_probe_during_the_shutdown_revoke_still_exits() {
    // A probe failing while the shutdown revoke is out must not turn "revoke, then exit"
    // into "revoke, then register again" (a case the property test shrank to).
    let mut run = Run::registered(&["--health-fail-threshold", "1"]);
    let out = run.idle_until(ms(2_000));
    let probe = probe_id(&out);
    let out = run.at(ms(2_010), Input::Shutdown);
    let (revoke, _) = revokes(&out)[0];
    run.answer(ms(2_020), probe, Answer::HealthFailed("503".into()));
    let out = run.answer(ms(2_030), revoke, Answer::RevokeDone);
    assert_eq!(out.last(), Some(&Command::Exit { code: 0 }));
}

#[test]
fn drained_stays_drained_through_health_failures() {
    let mut run = Run::registered(&["--health-fail-threshold", "1"]);
    let out = run.at(ms(100), Input::Drain);
    run.answer(ms(110), revokes(&out)[0].0, Answer::RevokeDone);
    let out = run.idle_until(ms(2_000));
    run.answer(
        ms(2_010),
        probe_id(&out),
        Answer::HealthFailed("503".into()),
    );
    assert_eq!(run.core.registration(), &Registration::Drained);
}

/// Two engines of a 0.33 page; `awake` says whether engine 1 is awake (engine 0 sleeps).
fn sleep_page(awake: bool) -> String {
    let one = if awake { "1.0" } else { "0.0" };
    format!(
        "vllm:num_requests_waiting{{engine=\"0\"}} 1.0\n\
         vllm:engine_sleep_state{{engine=\"0\",sleep_state=\"awake\"}} 0.0\n\
         vllm:engine_sleep_state{{engine=\"1\",sleep_state=\"awake\"}} {one}\n\
         vllm:engine_sleep_state{{engine=\"0\",sleep_state=\"weights_offloaded\"}} 1.0\n\
         vllm:engine_sleep_state{{engine=\"1\",sleep_state=\"weights_offloaded\"}} 0.0\n"
    )
}

/// Run to `t` as a well-behaved world would: every probe healthy, every etcd call done
/// (leases numbered from 20), every heartbeat 200, every scrape answered with `page`.
/// Answers the commands issued.
fn serve_until(run: &mut Run, t: Duration, page: &str, lease: &mut i64) -> Vec<Command> {
    let mut all = Vec::new();
    while let Some(w) = run.core.next_wakeup().filter(|w| *w <= t) {
        let mut out = run.at(w.max(run.now), Input::Timer);
        while !out.is_empty() {
            all.extend(out.iter().cloned());
            let now = run.now;
            let mut next = Vec::new();
            for c in out {
                let answer = match c {
                    Command::ProbeHealth { id } => Some((id, Answer::HealthOk)),
                    Command::GrantLease { id, .. } => {
                        *lease += 1;
                        Some((
                            id,
                            Answer::LeaseGranted {
                                lease: *lease,
                                ttl: 6,
                            },
                        ))
                    }
                    Command::PutKey { id, .. } => Some((id, Answer::PutDone)),
                    Command::Keepalive { id, .. } => Some((id, Answer::KeepaliveTtl(6))),
                    Command::Scrape { id } => Some((
                        id,
                        Answer::ScrapePage {
                            text: page.to_string(),
                            openmetrics: false,
                        },
                    )),
                    Command::PostHeartbeat { id, .. } => Some((id, Answer::HeartbeatStatus(200))),
                    Command::Revoke { id, .. } => Some((id, Answer::RevokeDone)),
                    _ => None,
                };
                if let Some((id, a)) = answer {
                    next.extend(run.answer(now, id, a));
                }
            }
            out = next;
        }
    }
    run.now = run.now.max(t);
    all
}

fn posts(cmds: &[Command]) -> usize {
    cmds.iter()
        .filter(|c| matches!(c, Command::PostHeartbeat { .. }))
        .count()
}

#[test]
fn a_sleeping_engine_is_deregistered_until_it_wakes_then_registered_anew() {
    let mut run = Run::registered(&[]);
    let first = run.incarnation();
    let mut lease = 20;
    // Awake (one engine of two is enough): heartbeats as usual.
    let out = serve_until(&mut run, ms(5_000), &sleep_page(true), &mut lease);
    assert!(posts(&out) > 0);
    // Every engine asleep: the lease is revoked, nothing is posted, it stays so.
    let out = serve_until(&mut run, ms(15_000), &sleep_page(false), &mut lease);
    assert!(notes(&out).contains(&Note::EngineAsleep), "{out:?}");
    assert_eq!(revokes(&out).len(), 1, "{out:?}");
    assert_eq!(posts(&out), 0, "{out:?}");
    assert_eq!(grant_id(&out), None);
    assert_eq!(run.core.registration(), &Registration::Asleep);
    assert!(run.core.status().registration.is_none());
    // Awake again: a new lease and a new incarnation, heartbeats resume.
    let out = serve_until(&mut run, ms(25_000), &sleep_page(true), &mut lease);
    assert!(notes(&out).contains(&Note::EngineAwake), "{out:?}");
    assert!(grant_id(&out).is_some(), "{out:?}");
    assert!(posts(&out) > 0);
    assert_ne!(run.incarnation(), first);
}

#[test]
fn no_sleep_deregister_keeps_a_sleeping_engine_registered() {
    let mut run = Run::registered(&["--no-sleep-deregister"]);
    let first = run.incarnation();
    let mut lease = 20;
    let out = serve_until(&mut run, ms(10_000), &sleep_page(false), &mut lease);
    assert!(revokes(&out).is_empty(), "{out:?}");
    assert!(posts(&out) > 0);
    assert_eq!(run.incarnation(), first);
}

#[test]
fn a_page_without_the_sleep_family_never_deregisters() {
    let mut run = Run::registered(&[]);
    let first = run.incarnation();
    let mut lease = 20;
    let out = serve_until(&mut run, ms(10_000), PAGE, &mut lease);
    assert!(revokes(&out).is_empty(), "{out:?}");
    assert!(posts(&out) > 0);
    assert_eq!(run.incarnation(), first);
}
