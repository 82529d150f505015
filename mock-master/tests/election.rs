//! Replica mode against a real etcd (and against mock-etcd): three replicas elect exactly
//! one master, only it publishes LOADMETRICS, a stopped master is replaced once its lease
//! expires, and a master cut off from etcd steps down.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mock_kit::events::RingSink;
use mock_master::{MockMaster, Role, RoleChange, RoleEvent};
use serde_json::Value;

const TTL: Duration = Duration::from_secs(3);
/// A keepalive goes out every third of the TTL: the last one before a stop renewed the
/// lease at most this long before it.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// etcd's expiry check, the delete event, a grant and a txn, on a loaded machine.
const MARGIN: Duration = Duration::from_millis(1500);
const WAIT: Duration = Duration::from_secs(15);

struct Replica {
    name: String,
    master: MockMaster,
    ring: Arc<RingSink>,
}

async fn replica(etcd_url: &str, ns: &str, port: u16) -> Replica {
    let (events, ring) = ring_events();
    let name = format!("127.0.0.1:{port}");
    let cfg = mock_master::Config {
        elect: true,
        service_name: name.clone(),
        election_ttl: TTL,
        ..fast_config(etcd_url, ns)
    };
    let master = mock_master::start(cfg, events).await.unwrap();
    Replica { name, master, ring }
}

fn role_changes(ring: &RingSink) -> Vec<RoleChange> {
    ring.snapshot()
        .iter()
        .filter_map(|e| RoleEvent::read(&e.kind, &e.detail))
        .map(|e| e.change)
        .collect()
}

async fn role_json(r: &Replica) -> Value {
    let url = format!("{}/_mock/role", r.master.url());
    let resp = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Wait until exactly one of `rs` is master and every other a standby that sees it;
/// answers the master's index.
async fn settled(rs: &[&Replica]) -> Option<usize> {
    let ok = poll(WAIT, || async {
        let masters = rs.iter().filter(|r| r.master.is_master()).count();
        let standbys = rs
            .iter()
            .filter(|r| r.master.role() == Role::Standby)
            .count();
        masters == 1 && standbys + 1 == rs.len()
    })
    .await;
    let i = rs.iter().position(|r| r.master.is_master())?;
    let seen = poll(WAIT, || async {
        rs.iter()
            .all(|r| r.master.master_seen().as_deref() == Some(rs[i].name.as_str()))
    })
    .await;
    (ok && seen).then_some(i)
}

async fn three_replicas(etcd_url: &str) {
    let ns = unique_ns("elect");
    let gw = Gw::new(etcd_url);
    let mut rs = Vec::new();
    for port in [9101, 9102, 9103] {
        rs.push(replica(etcd_url, &ns, port).await);
    }
    let all: Vec<&Replica> = rs.iter().collect();
    let Some(m) = settled(&all).await else {
        let errors: Vec<_> = rs[0]
            .ring
            .snapshot()
            .into_iter()
            .filter(|e| e.kind == "etcd_error")
            .take(3)
            .collect();
        panic!(
            "no single master: {:?}; {errors:?}",
            rs.iter().map(|r| r.master.role()).collect::<Vec<_>>()
        );
    };
    let master_key = format!("{ns}XLLM:SERVICE:MASTER");
    assert_eq!(
        gw.get(&master_key).await.as_deref(),
        Some(rs[m].name.as_str())
    );
    for r in &rs {
        let service = gw.get(&format!("{ns}XLLM:SERVICE:{}", r.name)).await;
        assert_eq!(service.as_deref(), Some(r.name.as_str()));
        let v = role_json(r).await;
        assert_eq!(v["service_name"], r.name.as_str());
        assert_eq!(v["master"], rs[m].name.as_str());
        let want = if r.master.is_master() {
            "master"
        } else {
            "standby"
        };
        assert_eq!(v["role"], want);
    }
    assert_eq!(role_changes(&rs[m].ring), [RoleChange::Elected]);

    // One instance per replica, each heartbeating to its own replica: only the
    // master's heartbeats reach LOADMETRICS.
    let names: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", 9201 + i)).collect();
    for n in &names {
        gw.put(&key(&ns, "DEFAULT", n), &reg_value(n, 0, "i1"))
            .await;
    }
    for (r, n) in rs.iter().zip(&names) {
        let known = poll(WAIT, || async { r.master.instance(n).is_some() }).await;
        assert!(known, "{} never learned {n}", r.name);
        assert_eq!(
            beat(&r.master.url(), None, hb(n, "i1", 5, 0.5)).await.0,
            200
        );
    }
    let lm = |n: &str| format!("{ns}XLLM:LOADMETRICS:{n}");
    let published = poll(WAIT, || async { gw.get(&lm(&names[m])).await.is_some() }).await;
    assert!(published, "the master never published its instance's load");
    // Several publish rounds later, still nothing from the standbys.
    let rounds = |r: &Replica| {
        let ring = r.ring.clone();
        move || {
            ring.snapshot()
                .iter()
                .filter(|e| e.kind == "loadmetrics_publish")
                .count()
        }
    };
    let master_rounds = rounds(&rs[m]);
    let before = master_rounds();
    // The master's instance beats again, so its next rounds have something to write.
    for _ in 0..3 {
        assert_eq!(
            beat(&rs[m].master.url(), None, hb(&names[m], "i1", 6, 0.5))
                .await
                .0,
            200
        );
        let more = poll(WAIT, || async { master_rounds() > before }).await;
        assert!(more);
    }
    // Every standby follows the master's numbers for the master's instance, whose
    // heartbeats it never received.
    for r in rs.iter().filter(|r| !r.master.is_master()) {
        let follows = poll(WAIT, || async {
            r.master
                .followed_load()
                .get(&names[m])
                .map(|l| l.waiting_requests_num)
                == Some(6)
        })
        .await;
        assert!(
            follows,
            "{} does not follow the master's load: {:?}",
            r.name,
            r.master.followed_load()
        );
    }
    for (i, (r, n)) in rs.iter().zip(&names).enumerate().filter(|(i, _)| *i != m) {
        assert_eq!(gw.get(&lm(n)).await, None, "standby {i} published");
        assert_eq!(rounds(r)(), 0, "standby {i} ran a publish round");
    }

    // Stop the master: a standby takes over once its lease expires, not before.
    let stopped = Instant::now();
    rs[m].master.stop().await;
    let rest: Vec<&Replica> = rs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != m)
        .map(|(_, r)| r)
        .collect();
    let elected = poll(TTL + MARGIN + Duration::from_secs(2), || async {
        rest.iter().any(|r| r.master.is_master())
    })
    .await;
    let took = stopped.elapsed();
    assert!(elected, "no new master after {took:?}");
    eprintln!("new master {took:?} after the stop");
    assert!(took <= TTL + MARGIN, "new master after {took:?}");
    assert!(
        took >= TTL - KEEPALIVE - Duration::from_millis(200),
        "new master too soon: {took:?}"
    );
    let Some(n) = settled(&rest).await else {
        panic!("the two left did not settle");
    };
    assert_eq!(
        gw.get(&master_key).await.as_deref(),
        Some(rest[n].name.as_str())
    );
    assert_eq!(
        role_changes(&rest[n].ring),
        [RoleChange::Standby, RoleChange::Elected]
    );
    for r in rs {
        r.master.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_against_real_etcd() {
    let Some(url) = shared_etcd().await else {
        return; // start_etcd said SKIPPED and why
    };
    three_replicas(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_against_mock_etcd() {
    let etcd = mock_etcd::start(mock_etcd::Config::default(), mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    three_replicas(&etcd.url()).await;
}

/// A master cut off from etcd steps down within the TTL of its last renewal (it stops
/// publishing), the other replica takes over, and the cut-off one comes back a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_cut_off_from_etcd_steps_down() {
    let etcd = any_etcd().await;
    let url = etcd.url();
    let ns = unique_ns("cut");
    let proxy = CutProxy::start(&url).await;
    let a = replica(&proxy.url, &ns, 9301).await;
    let first = poll(WAIT, || async { a.master.is_master() }).await;
    let errors: Vec<_> = a
        .ring
        .snapshot()
        .into_iter()
        .map(|e| (e.kind, e.detail))
        .collect();
    assert!(first, "a alone never became master: {errors:?}");
    let b = replica(&url, &ns, 9302).await;
    assert_eq!(settled(&[&a, &b]).await, Some(0));
    let inst = "127.0.0.1:9401";
    Gw::new(&url)
        .put(&key(&ns, "DEFAULT", inst), &reg_value(inst, 0, "i1"))
        .await;
    let known = poll(WAIT, || async { a.master.instance(inst).is_some() }).await;
    assert!(known, "a never learned the instance");

    let cut = Instant::now();
    proxy.cut(true);
    let stepped = poll(TTL + MARGIN, || async { !a.master.is_master() }).await;
    let took = cut.elapsed();
    assert!(stepped, "a still master {took:?} after the cut");
    eprintln!("stepped down {took:?} after the cut");
    assert!(
        took <= TTL + Duration::from_millis(500),
        "stepped down after {took:?}"
    );
    assert_eq!(
        role_changes(&a.ring),
        [RoleChange::Elected, RoleChange::LostMastership]
    );
    // A heartbeat still answered, but a round finds nothing to write.
    assert_eq!(
        beat(&a.master.url(), None, hb(inst, "i1", 1, 0.1)).await.0,
        200
    );
    a.master.publish_now().await;
    let rounds = a
        .ring
        .snapshot()
        .iter()
        .filter(|e| e.kind == "loadmetrics_publish")
        .count();
    assert_eq!(rounds, 0, "a demoted master published");
    let b_master = poll(WAIT, || async { b.master.is_master() }).await;
    assert!(b_master, "b never took over");

    proxy.unblock();
    assert_eq!(settled(&[&a, &b]).await, Some(1));
    a.master.stop().await;
    b.master.stop().await;
}
