//! The master's rules without sockets or clocks: watch messages, heartbeats, probe
//! results and the passing of time fed as values to the cores (`follow`, `instances`,
//! `beat`, `pick`, `publish`), in virtual time, through docs/contract.md §2 end to end.

use std::time::Duration;

use mock_master::beat::{self, Answer};
use mock_master::etcd::{EventKind, KeyValue, WatchEvent, WatchResponse};
use mock_master::follow::{self, Change, Cursor, Verdict};
use mock_master::instances::{Instances, Notice};
use mock_master::{pick, publish, InstanceState};

const NS: &str = "/v/";
const LEASE_LOST: Duration = Duration::from_millis(3000);
const SUSPECT: Duration = Duration::from_secs(15);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn reg(name: &str, inc: &str) -> Vec<u8> {
    format!(r#"{{"name":"{name}","rpc_address":"{name}","type":0,"backend_type":"vllm","incarnation_id":"{inc}"}}"#)
        .into_bytes()
}

fn event(kind: EventKind, name: &str, inc: &str, rev: i64) -> WatchEvent {
    let kv = KeyValue {
        key: format!("{NS}XLLM:DEFAULT:{name}").into_bytes(),
        value: if kind == EventKind::Put {
            reg(name, inc)
        } else {
            Vec::new()
        },
        mod_revision: rev,
    };
    let prev_kv = (kind == EventKind::Delete).then(|| KeyValue {
        value: reg(name, inc),
        ..kv.clone()
    });
    WatchEvent { kind, kv, prev_kv }
}

/// Feed one watch message; answers the probes the table asked for (by name).
fn watch(
    t: &mut Instances,
    c: &mut Cursor,
    resp: WatchResponse,
    now: Duration,
    out: &mut Vec<Notice>,
) -> Vec<mock_master::registry::ProbeTicket> {
    let Verdict::Events(evs) = c.on_response(resp) else {
        panic!("not events")
    };
    let mut probes = Vec::new();
    for ev in &evs {
        match follow::change(NS, ev) {
            Some(Change::Put { name, meta }) => t.apply_put(name, meta.unwrap(), now, out),
            Some(Change::Delete { name, deleted }) => {
                probes.extend(t.apply_delete(name, deleted.as_deref(), out));
            }
            None => {}
        }
    }
    probes
}

fn heartbeat(t: &mut Instances, body: &str, now: Duration, out: &mut Vec<Notice>) -> Answer {
    match beat::read_request(body.as_bytes()) {
        Err(a) => a,
        Ok(r) => Answer::of(t.heartbeat(
            &r.name,
            &r.incarnation_id,
            r.load_metrics,
            r.latency_metrics,
            now,
            out,
        )),
    }
}

fn state(t: &Instances, name: &str, now: Duration) -> Option<InstanceState> {
    t.view(name, now).map(|v| v.state)
}

#[test]
fn contract_section_2_in_virtual_time() {
    let (mut t, mut out) = (Instances::new(), Vec::new());
    let mut c = Cursor::listed(10);
    let (a, b) = ("10.0.0.1:8000", "10.0.0.2:8000");
    let resp = |rev, evs| WatchResponse {
        revision: rev,
        events: evs,
        ..Default::default()
    };

    // Both register; each sends load; the less loaded one gets the traffic.
    watch(
        &mut t,
        &mut c,
        resp(
            12,
            vec![
                event(EventKind::Put, a, "ia", 11),
                event(EventKind::Put, b, "ib", 12),
            ],
        ),
        ms(0),
        &mut out,
    );
    let hb = |name: &str, inc: &str, waiting: u64| {
        format!(
            r#"{{"name":"{name}","incarnation_id":"{inc}","load_metrics":{{"waiting_requests_num":"{waiting}","gpu_cache_usage_perc":0.5}}}}"#
        )
    };
    assert_eq!(
        heartbeat(&mut t, &hb(a, "ia", 4), ms(100), &mut out),
        Answer::Ok
    );
    assert_eq!(
        heartbeat(&mut t, &hb(b, "ib", 1), ms(100), &mut out),
        Answer::Ok
    );
    assert_eq!(
        heartbeat(&mut t, &hb(b, "stale", 1), ms(100), &mut out).status(),
        409
    );
    let routable = t.routable();
    assert_eq!(
        pick::pick(&routable, 0).map(|i| routable[i].0.as_str()),
        Some(b)
    );
    let (updated, removed) = t.take_publish();
    let plan = publish::plan(NS, updated, removed);
    assert_eq!(plan.puts.len(), 2);

    // b's key is deleted and its probe fails: SUSPECT, no traffic; a probe of a is ok.
    let probes = watch(
        &mut t,
        &mut c,
        resp(13, vec![event(EventKind::Delete, b, "ib", 13)]),
        ms(1000),
        &mut out,
    );
    assert_eq!(probes.len(), 1);
    t.apply_probe(&probes[0], false, ms(1200), &mut out);
    assert_eq!(state(&t, b, ms(1200)), Some(InstanceState::Suspect));
    let routable = t.routable();
    assert_eq!(
        pick::pick(&routable, 0).map(|i| routable[i].0.as_str()),
        Some(a)
    );

    // A heartbeat brings b to LEASE_LOST; 3 s of silence make it SUSPECT again, and
    // 15 s of SUSPECT forget it; the next round deletes its LOADMETRICS entry.
    assert_eq!(
        heartbeat(&mut t, &hb(b, "ib", 0), ms(2000), &mut out),
        Answer::Ok
    );
    assert_eq!(state(&t, b, ms(2000)), Some(InstanceState::LeaseLost));
    t.tick(ms(4999), LEASE_LOST, SUSPECT, &mut out);
    assert_eq!(state(&t, b, ms(4999)), Some(InstanceState::LeaseLost));
    t.tick(ms(5000), LEASE_LOST, SUSPECT, &mut out);
    assert_eq!(state(&t, b, ms(5000)), Some(InstanceState::Suspect));
    t.tick(ms(20_000), LEASE_LOST, SUSPECT, &mut out);
    assert_eq!(state(&t, b, ms(20_000)), None);
    assert_eq!(
        heartbeat(&mut t, &hb(b, "ib", 0), ms(20_001), &mut out),
        Answer::NotRegistered
    );
    let (updated, removed) = t.take_publish();
    let plan = publish::plan(NS, updated, removed);
    assert_eq!(
        plan.deletes,
        [(b.to_string(), format!("{NS}XLLM:LOADMETRICS:{b}"))]
    );

    // A replayed message changes nothing; the instance a is untouched throughout.
    let before = out.len();
    watch(
        &mut t,
        &mut c,
        resp(13, vec![event(EventKind::Delete, b, "ib", 13)]),
        ms(21_000),
        &mut out,
    );
    assert_eq!(out.len(), before);
    assert_eq!(state(&t, a, ms(21_000)), Some(InstanceState::Active));
    let moves: Vec<String> = out
        .iter()
        .filter_map(|n| match n {
            Notice::Transition { name, from, to, .. } if name == b => Some(format!("{from}>{to}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        moves,
        [
            "DEREGISTERED>ACTIVE",
            "ACTIVE>SUSPECT",
            "SUSPECT>LEASE_LOST",
            "LEASE_LOST>SUSPECT",
            "SUSPECT>DEREGISTERED"
        ]
    );
}
