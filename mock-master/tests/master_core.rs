//! `MasterCore` alone, in virtual time: docs/contract.md §2 and §3 driven through its
//! inputs (watch events as the gateway decodes them, heartbeats as header values and body
//! bytes, probe outcomes, ticks) with no socket, no clock and no task.

use std::time::Duration;

use mock_kit::FakeEvent;
use mock_master::core::{Command, MasterCore, Note};
use mock_master::etcd::{EventKind, KeyValue, WatchEvent, WatchResponse};
use mock_master::follow::Verdict;
use mock_master::instances::Notice;
use mock_master::{Config, Fault, InstanceState};

const NS: &str = "/v/";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(token: Option<&str>) -> Config {
    Config {
        etcd_namespace: "v".into(),
        token: token.map(str::to_string),
        ..Config::default()
    }
}

fn reg(name: &str, inc: &str) -> Vec<u8> {
    format!(r#"{{"name":"{name}","rpc_address":"{name}","type":0,"backend_type":"vllm","incarnation_id":"{inc}"}}"#)
        .into_bytes()
}

fn kv(name: &str, value: Vec<u8>) -> KeyValue {
    KeyValue {
        key: format!("{NS}XLLM:DEFAULT:{name}").into_bytes(),
        value,
        mod_revision: 1,
    }
}

fn put(name: &str, inc: &str) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Put,
        kv: kv(name, reg(name, inc)),
        prev_kv: None,
    }
}

fn delete(name: &str, inc: &str) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Delete,
        kv: kv(name, Vec::new()),
        prev_kv: Some(kv(name, reg(name, inc))),
    }
}

fn hb(name: &str, inc: &str, waiting: u64) -> Vec<u8> {
    format!(r#"{{"name":"{name}","incarnationId":"{inc}","loadMetrics":{{"waitingRequestsNum":"{waiting}","gpuCacheUsagePerc":0.25}}}}"#)
        .into_bytes()
}

fn state(core: &MasterCore, name: &str, now: Duration) -> Option<InstanceState> {
    core.view(name, now).map(|v| v.state)
}

/// The id of the one probe command in `cmds`.
fn only_probe(cmds: Vec<Command>) -> u64 {
    match cmds.as_slice() {
        [Command::Probe { id, .. }] => *id,
        other => panic!("expected one probe, got {other:?}"),
    }
}

fn transitions(notes: &[Note]) -> Vec<String> {
    notes
        .iter()
        .filter_map(|n| match n {
            Note::Table(Notice::Transition { from, to, .. }) => Some(format!("{from}>{to}")),
            _ => None,
        })
        .collect()
}

/// Token header values, body, expected status and body.
type Case<'a> = (&'a [&'a [u8]], Vec<u8>, u16, &'a str);

/// The heartbeat table of docs/contract.md §3, in its order of checks.
#[test]
fn heartbeat_answers_in_the_contract_order() {
    let mut core = MasterCore::new(&config(Some("tok")), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "i1"));
    let good = hb("a:1", "i1", 2);
    let cases: Vec<Case> = vec![
        (
            &[],
            good.clone(),
            401,
            r#"{"error":"invalid internal token"}"#,
        ),
        (
            &[b"nope"],
            good.clone(),
            401,
            r#"{"error":"invalid internal token"}"#,
        ),
        // Two copies are joined as brpc joins them: "tok,tok" is not the token.
        (
            &[b"tok", b"tok"],
            good.clone(),
            401,
            r#"{"error":"invalid internal token"}"#,
        ),
        (
            &[b"nope"],
            b"{".to_vec(),
            401,
            r#"{"error":"invalid internal token"}"#,
        ),
        (
            &[b"tok"],
            b"{".to_vec(),
            400,
            r#"{"error":"invalid heartbeat json"}"#,
        ),
        (
            &[b"tok"],
            br#"{"name":""}"#.to_vec(),
            400,
            r#"{"error":"missing instance name"}"#,
        ),
        (
            &[b"tok"],
            hb("b:1", "i1", 0),
            409,
            r#"{"error":"instance not registered or stale incarnation"}"#,
        ),
        (
            &[b"tok"],
            hb("a:1", "i0", 0),
            409,
            r#"{"error":"instance not registered or stale incarnation"}"#,
        ),
        (&[b"tok"], good.clone(), 200, r#"{"ok":true}"#),
    ];
    for (tokens, body, status, answer) in cases {
        let r = core.on_heartbeat(ms(10), tokens, &body);
        assert_eq!((r.status, r.body), (status, answer), "{tokens:?}");
        assert_eq!(r.delay, None);
        // The name is known once the body was read (400 missing name: empty).
        let read = status == 409 || status == 200;
        assert_eq!(r.name.is_some(), read, "{status}");
    }
    let v = core.view("a:1", ms(10)).unwrap();
    assert_eq!(v.load.map(|l| l.waiting_requests_num), Some(2));
    assert_eq!(v.heartbeats.get(&409), Some(&1));

    // Past the cap: 413, after the token check.
    let mut small = MasterCore::new(
        &Config {
            max_body_bytes: 8,
            ..config(None)
        },
        ms(0),
    );
    assert_eq!(small.on_heartbeat(ms(0), &[], &good).status, 413);
    // No token configured: the header is not read at all.
    small.on_watch_event(ms(0), &put("a:1", "i1"));
    assert_eq!(
        small
            .on_heartbeat(
                ms(0),
                &[b"x", b"y"],
                b"{\"name\":\"a:1\",\"incarnation_id\":\"i1\"}"
            )
            .status,
        413
    );
    let mut open = MasterCore::new(&config(None), ms(0));
    open.on_watch_event(ms(0), &put("a:1", "i1"));
    assert_eq!(open.on_heartbeat(ms(0), &[b"x", b"y"], &good).status, 200);
}

/// Faults armed in virtual time act before the table and run out on time.
#[test]
fn heartbeat_faults_in_virtual_time() {
    let mut core = MasterCore::new(&config(None), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "i1"));
    let faults = &core.gate().faults;
    faults.add_at(
        ms(1000),
        Fault::HeartbeatStatus { status: 503 },
        None,
        Some(ms(500)),
    );
    faults.add_at(ms(1000), Fault::Latency { ms: 300 }, Some(1), None);
    let r = core.on_heartbeat(ms(1200), &[], &hb("a:1", "i1", 0));
    assert_eq!((r.status, r.delay), (503, Some(ms(300))));
    assert_eq!(
        core.on_heartbeat(ms(1499), &[], &hb("a:1", "i1", 0)).status,
        503
    );
    let r = core.on_heartbeat(ms(1500), &[], &hb("a:1", "i1", 0));
    assert_eq!((r.status, r.delay), (200, None));
}

/// DELETE -> probe commands (2 attempts, 100 ms apart, 1000 ms each) -> LEASE_LOST or
/// SUSPECT; 3000 ms without heartbeat -> SUSPECT; 15 s SUSPECT -> forgotten.
#[test]
fn delete_probe_and_timeouts() {
    let mut core = MasterCore::new(&config(None), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "ia"));
    core.on_watch_event(ms(0), &put("b:1", "ib"));
    assert!(core.take_commands().is_empty());

    // a: first attempt fails, the second (100 ms later) answers: LEASE_LOST.
    core.on_watch_event(ms(1000), &delete("a:1", "ia"));
    let first = Command::Probe {
        id: 1,
        name: "a:1".into(),
        url: "http://a:1/health".into(),
        attempt: 1,
        at: ms(1000),
        timeout: ms(1000),
    };
    assert_eq!(core.take_commands(), [first]);
    assert_eq!(state(&core, "a:1", ms(1000)), Some(InstanceState::Active));
    core.on_probe_result(ms(2000), 1, false);
    let cmds = core.take_commands();
    assert!(
        matches!(cmds.as_slice(), [Command::Probe { id: 1, attempt: 2, at, .. }] if *at == ms(2100))
    );
    core.on_probe_result(ms(2100), 1, true);
    assert!(core.take_commands().is_empty());
    assert_eq!(
        state(&core, "a:1", ms(2100)),
        Some(InstanceState::LeaseLost)
    );
    // An unasked result changes nothing.
    core.on_probe_result(ms(2100), 1, false);
    assert_eq!(
        state(&core, "a:1", ms(2100)),
        Some(InstanceState::LeaseLost)
    );

    // b: both attempts fail: SUSPECT, no traffic; route goes to a.
    core.on_watch_event(ms(1000), &delete("b:1", "ib"));
    let b = only_probe(core.take_commands());
    core.on_probe_result(ms(2000), b, false);
    assert_eq!(only_probe(core.take_commands()), b);
    core.on_probe_result(ms(3100), b, false);
    assert!(core.take_commands().is_empty());
    assert_eq!(state(&core, "b:1", ms(3100)), Some(InstanceState::Suspect));
    assert_eq!(core.route().as_deref(), Some("a:1"));

    // a: LEASE_LOST since 2100 with no heartbeat: SUSPECT at exactly 5100.
    core.tick(ms(5099));
    assert_eq!(
        state(&core, "a:1", ms(5099)),
        Some(InstanceState::LeaseLost)
    );
    core.tick(ms(5100));
    assert_eq!(state(&core, "a:1", ms(5100)), Some(InstanceState::Suspect));
    assert_eq!(core.route(), None);
    // A heartbeat brings a back to LEASE_LOST (routable).
    assert_eq!(
        core.on_heartbeat(ms(5200), &[], &hb("a:1", "ia", 0)).status,
        200
    );
    assert_eq!(
        state(&core, "a:1", ms(5200)),
        Some(InstanceState::LeaseLost)
    );
    // b: SUSPECT since 3100, forgotten at exactly 18100; its heartbeats get 409.
    core.tick(ms(18_099));
    assert!(core.view("b:1", ms(18_099)).is_some());
    core.tick(ms(18_100));
    assert!(core.view("b:1", ms(18_100)).is_none());
    assert_eq!(
        core.on_heartbeat(ms(18_100), &[], &hb("b:1", "ib", 0))
            .status,
        409
    );

    let notes = core.take_notes();
    let probes: Vec<(&str, bool)> = notes
        .iter()
        .filter_map(|n| match n {
            Note::Probe { name, healthy, .. } => Some((name.as_str(), *healthy)),
            _ => None,
        })
        .collect();
    assert_eq!(probes, [("a:1", true), ("b:1", false)]);
    assert_eq!(
        transitions(&notes),
        [
            "DEREGISTERED>ACTIVE",
            "DEREGISTERED>ACTIVE",
            "ACTIVE>LEASE_LOST",
            "ACTIVE>SUSPECT",
            "LEASE_LOST>SUSPECT",
            "SUSPECT>LEASE_LOST",
            // a again, 3000 ms after its heartbeat at 5200.
            "LEASE_LOST>SUSPECT",
            "SUSPECT>DEREGISTERED",
        ]
    );
}

/// A DELETE naming a replaced incarnation is ignored: no probe, no change.
#[test]
fn stale_incarnation_delete_is_ignored() {
    let mut core = MasterCore::new(&config(None), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "old"));
    core.on_watch_event(ms(10), &put("a:1", "new"));
    core.take_notes();
    core.on_watch_event(ms(20), &delete("a:1", "old"));
    assert!(core.take_commands().is_empty());
    assert_eq!(state(&core, "a:1", ms(20)), Some(InstanceState::Active));
    assert_eq!(
        core.view("a:1", ms(20)).map(|v| v.incarnation),
        Some("new".into())
    );
    let notes = core.take_notes();
    assert!(
        matches!(notes.as_slice(), [Note::Table(Notice::StaleDelete { deleted, tracked, .. })] if deleted == "old" && tracked == "new")
    );
    // As the real shell reports it.
    assert_eq!(
        notes.first().map(|n| {
            let ev = n.event();
            (ev.kind(), ev.detail())
        }),
        Some((
            "stale_delete",
            serde_json::json!({"name": "a:1", "deleted": "old", "tracked": "new"})
        ))
    );
    // A probe result for a stale delete that was never asked is ignored.
    core.on_probe_result(ms(30), 1, false);
    assert_eq!(state(&core, "a:1", ms(30)), Some(InstanceState::Active));
    // An unreadable registration is a note, not a registration.
    let mut bad = put("c:1", "x");
    bad.kv.value = b"{".to_vec();
    core.on_watch_event(ms(40), &bad);
    assert!(core.view("c:1", ms(40)).is_none());
    assert!(
        matches!(core.take_notes().as_slice(), [Note::BadRegistration { name, .. }] if name == "c:1")
    );
}

/// A LOADMETRICS round every 3 s from the start: puts what arrived, deletes what was
/// forgotten, nothing before it is due; a failed write comes back next round.
#[test]
fn loadmetrics_every_three_seconds() {
    let mut core = MasterCore::new(&config(None), ms(0));
    assert_eq!(core.next_wakeup(), ms(150)); // the ticker: 3000 ms / 20
    core.tick(ms(150));
    assert_eq!(core.next_wakeup(), ms(300));
    core.on_watch_event(ms(0), &put("a:1", "ia"));
    core.on_watch_event(ms(0), &put("b:1", "ib"));
    core.on_heartbeat(ms(500), &[], &hb("a:1", "ia", 4));
    core.on_heartbeat(ms(500), &[], &hb("b:1", "ib", 1));
    assert_eq!(core.publish_round(ms(2999)), None);
    let plan = core.publish_round(ms(3000)).unwrap();
    let puts: Vec<(&str, &str)> = plan
        .puts
        .iter()
        .map(|(_, k, v, _)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        puts,
        [
            (
                "/v/XLLM:LOADMETRICS:a:1",
                r#"{"gpu_cache_usage_perc":0.25,"waiting_requests_num":4}"#
            ),
            (
                "/v/XLLM:LOADMETRICS:b:1",
                r#"{"gpu_cache_usage_perc":0.25,"waiting_requests_num":1}"#
            ),
        ]
    );
    assert_eq!(core.route().as_deref(), Some("b:1"));
    // The write of b failed: it comes back in the next round (at 6000), a does not.
    core.publish_failed(&plan, &["b:1".to_string()], &[]);
    assert_eq!(core.publish_round(ms(5999)), None);
    let plan = core.publish_round(ms(6000)).unwrap();
    assert_eq!(
        plan.puts.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        ["b:1"]
    );

    // a is forgotten (delete, failed probe, 15 s): its entry is deleted at the next round.
    core.on_watch_event(ms(6000), &delete("a:1", "ia"));
    let a = only_probe(core.take_commands());
    core.on_probe_result(ms(6000), a, false);
    core.on_probe_result(ms(6100), a, false);
    for t in (9000..=21_000).step_by(3000) {
        core.tick(ms(t));
        assert!(core.view("a:1", ms(t)).is_some());
        assert!(core.publish_round(ms(t)).is_some_and(|p| p.is_empty()));
    }
    core.tick(ms(21_100));
    assert!(core.view("a:1", ms(21_100)).is_none());
    let plan = core.publish_round(ms(24_000)).unwrap();
    assert_eq!(
        plan.deletes,
        [("a:1".to_string(), "/v/XLLM:LOADMETRICS:a:1".to_string())]
    );
}

/// A round nobody writes changes the core as a written one does: due at the same
/// times, and what was pending is no longer pending afterwards.
#[test]
fn an_unwritten_round_leaves_the_core_as_a_planned_one() {
    let mut planned = MasterCore::new(&config(None), ms(0));
    let mut unwritten = MasterCore::new(&config(None), ms(0));
    for core in [&mut planned, &mut unwritten] {
        core.on_watch_event(ms(0), &put("a:1", "ia"));
        core.on_watch_event(ms(0), &put("b:1", "ib"));
        core.on_heartbeat(ms(500), &[], &hb("a:1", "ia", 4));
    }
    for t in [2999, 3000, 3001, 5999, 6000] {
        if t == 3001 {
            for core in [&mut planned, &mut unwritten] {
                core.on_heartbeat(ms(t), &[], &hb("b:1", "ib", 2));
            }
        }
        let due = planned.publish_round(ms(t)).is_some();
        assert_eq!(unwritten.publish_round_unwritten(ms(t)), due, "{t}");
        assert_eq!(planned.next_wakeup(), unwritten.next_wakeup(), "{t}");
        assert_eq!(planned.publish_now(), unwritten.publish_now(), "{t}");
    }
}

/// A listing re-learns instances after a restart; a tracked one missing from it takes
/// the delete path; the watch goes on from the listing's revision + 1.
#[test]
fn restart_and_listing() {
    let both = [kv("a:1", reg("a:1", "ia")), kv("b:1", reg("b:1", "ib"))];
    let mut core = MasterCore::new(&config(None), ms(0));
    assert_eq!(core.on_listing(ms(0), 5, &both), 2);
    assert_eq!(core.watch_from(), 6);
    core.restart();
    assert!(core.views(ms(1)).is_empty());
    let r = core.on_heartbeat(ms(1), &[], &hb("a:1", "ia", 0));
    assert_eq!(r.status, 409);
    core.on_listing(ms(2), 6, &both);
    core.on_listing(ms(3), 7, &[kv("a:1", reg("a:1", "ia"))]);
    assert_eq!(core.watch_from(), 8);
    let cmds = core.take_commands();
    assert!(matches!(cmds.as_slice(), [Command::Probe { name, attempt: 1, .. }] if name == "b:1"));
    let r = core.on_heartbeat(ms(4), &[], &hb("a:1", "ia", 0));
    assert_eq!(r.status, 200);
}

/// Watch messages as the stream gives them: new events applied once (a replay after a
/// re-open changes nothing), a lower revision answered as a reset to re-list.
#[test]
fn watch_messages_follow_revisions() {
    let at = |mut ev: WatchEvent, rev: i64| {
        ev.kv.mod_revision = rev;
        ev
    };
    let msg = |revision: i64, events: Vec<WatchEvent>| WatchResponse {
        revision,
        events,
        ..Default::default()
    };
    let mut core = MasterCore::new(&config(None), ms(0));
    core.listed_at(10);
    let v = core.on_watch_response(
        ms(0),
        msg(
            12,
            vec![at(put("a:1", "i1"), 11), at(delete("a:1", "i1"), 12)],
        ),
    );
    assert!(matches!(&v, Verdict::Events(e) if e.len() == 2));
    assert_eq!(core.watch_from(), 13);
    assert_eq!(core.take_commands().len(), 1);
    // The same message again (a re-opened stream replaying): nothing applied.
    let v = core.on_watch_response(
        ms(1),
        msg(
            12,
            vec![at(put("a:1", "i1"), 11), at(delete("a:1", "i1"), 12)],
        ),
    );
    assert_eq!(v, Verdict::Events(vec![]));
    assert!(core.take_commands().is_empty());
    // etcd lost its data: revisions start over.
    let v = core.on_watch_response(ms(2), msg(3, vec![]));
    assert_eq!(
        v,
        Verdict::RevisionReset {
            seen: 12,
            revision: 3
        }
    );
}

/// Two probes of one name overlap (DELETE, PUT, DELETE within a probe's time): each is
/// decided on its own; the first one's verdict is moot after the PUT.
#[test]
fn overlapping_probes_of_one_name() {
    let mut core = MasterCore::new(&config(None), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "i1"));
    core.on_watch_event(ms(100), &delete("a:1", "i1"));
    let first = only_probe(core.take_commands());
    core.on_watch_event(ms(200), &put("a:1", "i1"));
    core.on_watch_event(ms(300), &delete("a:1", "i1"));
    let second = only_probe(core.take_commands());
    assert_ne!(first, second);
    // The first probe fails twice: moot (a PUT came since), the instance stays ACTIVE.
    core.on_probe_result(ms(1100), first, false);
    assert_eq!(only_probe(core.take_commands()), first);
    core.on_probe_result(ms(1200), first, false);
    assert_eq!(state(&core, "a:1", ms(1200)), Some(InstanceState::Active));
    // The second one answers: LEASE_LOST.
    core.on_probe_result(ms(1300), second, true);
    assert_eq!(
        state(&core, "a:1", ms(1300)),
        Some(InstanceState::LeaseLost)
    );
}

/// The gate alone (what arrives) and the rest (what the held heartbeat does when its
/// latency is over), as the HTTP shell and a simulator run them apart.
#[test]
fn the_gate_then_the_admitted_body_answer_as_one_call_does() {
    let mut core = MasterCore::new(&config(Some("tok")), ms(0));
    core.on_watch_event(ms(0), &put("a:1", "i1"));
    core.gate()
        .faults
        .add_at(ms(0), Fault::Latency { ms: 300 }, Some(2), None);
    // Held 300 ms, admitted: nothing stored until the body is read.
    let (delay, refused) = core.heartbeat_gate(ms(10), &[b"tok"]);
    assert_eq!((delay, refused.is_none()), (Some(ms(300)), true));
    assert_eq!(core.view("a:1", ms(10)).unwrap().heartbeats.get(&200), None);
    let body = String::from_utf8(hb("a:1", "i1", 3)).unwrap();
    let r = core.on_heartbeat_admitted_text(ms(310), &body);
    assert_eq!(
        (r.status, r.delay, r.name.as_deref()),
        (200, None, Some("a:1"))
    );
    let view = core.view("a:1", ms(310)).unwrap();
    assert_eq!(view.load.map(|l| l.waiting_requests_num), Some(3));
    // Held and refused by the token: the refusal is decided on arrival.
    let (delay, refused) = core.heartbeat_gate(ms(400), &[b"wrong"]);
    assert_eq!(delay, Some(ms(300)));
    assert_eq!(refused.map(|r| r.status), Some(401));
    // The latency ran out (two fires): one call answers at once, as before.
    let r = core.on_heartbeat(ms(500), &[b"tok"], &hb("a:1", "i1", 0));
    assert_eq!((r.status, r.delay), (200, None));
}
