//! The election core alone, in virtual time: each test plays etcd's answers by hand.

use std::time::Duration;

use mock_master::core::{MasterCore, Note};
use mock_master::election::{Call, Election, Op, Outcome, Purpose, Role, Settings};
use mock_master::etcd::{EventKind, KeyValue, WatchEvent};
use mock_master::{Config, RoleChange};

const ME: &str = "127.0.0.1:9001";
const OTHER: &str = "127.0.0.1:9002";
const TTL: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn election() -> Election {
    Election::new(Settings {
        namespace: "/ns/".into(),
        service_name: ME.into(),
        ttl: TTL,
    })
}

/// The one call `e` wants now; panics (the test fails) on none or several.
fn one(e: &mut Election) -> Call {
    let mut calls = e.take_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls.remove(0)
}

/// Grant and put the service key, grant the master lease: answers the txn call.
fn up_to_txn(e: &mut Election, now: Duration) -> Call {
    e.tick(now);
    let g = one(e);
    assert_eq!(
        g.op,
        Op::Grant {
            purpose: Purpose::Service,
            ttl_secs: 3
        }
    );
    e.on_result(now, g.id, Outcome::Granted { lease: 10 });
    let p = one(e);
    assert_eq!(
        p.op,
        Op::PutService {
            key: format!("/ns/XLLM:SERVICE:{ME}"),
            value: ME.into(),
            lease: 10
        }
    );
    e.on_result(now, p.id, Outcome::Put { revision: 2 });
    assert!(e.registered());
    let g = one(e);
    assert!(matches!(
        g.op,
        Op::Grant {
            purpose: Purpose::Master,
            ..
        }
    ));
    e.on_result(now, g.id, Outcome::Granted { lease: 20 });
    let t = one(e);
    assert_eq!(
        t.op,
        Op::CreateMaster {
            key: "/ns/XLLM:SERVICE:MASTER".into(),
            value: ME.into(),
            lease: 20
        }
    );
    assert_eq!(e.role(), Role::Candidate);
    t
}

fn master_event(kind: EventKind, value: &str, rev: i64) -> WatchEvent {
    WatchEvent {
        kind,
        kv: KeyValue {
            key: b"/ns/XLLM:SERVICE:MASTER".to_vec(),
            value: value.as_bytes().to_vec(),
            mod_revision: rev,
        },
        prev_kv: None,
    }
}

fn changes(e: &mut Election) -> Vec<RoleChange> {
    e.take_notes().into_iter().map(|n| n.change).collect()
}

#[test]
fn the_txn_winner_is_master_and_keeps_both_leases_alive() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(ms(5), t.id, Outcome::Won { revision: 3 });
    assert_eq!(e.role(), Role::Master);
    assert_eq!(e.holder(), Some(ME));
    assert_eq!(changes(&mut e), [RoleChange::Elected]);
    // Keepalives every third of the TTL, one per lease.
    assert_eq!(e.next_wakeup(), Some(ms(1000)));
    e.tick(ms(1000));
    let calls = e.take_calls();
    let leases: Vec<i64> = calls
        .iter()
        .filter_map(|c| match c.op {
            Op::KeepAlive { lease, .. } => Some(lease),
            _ => None,
        })
        .collect();
    assert_eq!(leases, [10, 20]);
    for c in calls {
        e.on_result(ms(1010), c.id, Outcome::Alive { ttl_secs: 3 });
    }
    assert_eq!(e.next_wakeup(), Some(ms(2000)));
    assert_eq!(e.role(), Role::Master);
}

#[test]
fn the_txn_loser_is_standby_and_runs_again_when_the_key_is_deleted() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(
        ms(5),
        t.id,
        Outcome::Lost {
            holder: Some(OTHER.into()),
            revision: 7,
        },
    );
    assert_eq!(e.role(), Role::Standby);
    assert_eq!(e.holder(), Some(OTHER));
    assert_eq!(changes(&mut e), [RoleChange::Standby]);
    assert!(e.take_calls().is_empty());
    // A delete from before the txn's revision is history: nothing happens.
    e.on_watch_event(ms(10), &master_event(EventKind::Delete, "", 6));
    assert_eq!(e.role(), Role::Standby);
    assert!(e.take_calls().is_empty());
    // The holder's key is deleted: run again, on a new lease.
    e.on_watch_event(ms(20), &master_event(EventKind::Delete, "", 9));
    assert_eq!(e.role(), Role::Candidate);
    assert_eq!(e.holder(), None);
    let g = one(&mut e);
    assert!(matches!(
        g.op,
        Op::Grant {
            purpose: Purpose::Master,
            ..
        }
    ));
    e.on_result(ms(25), g.id, Outcome::Granted { lease: 30 });
    let t = one(&mut e);
    assert!(matches!(t.op, Op::CreateMaster { lease: 30, .. }));
    e.on_result(ms(30), t.id, Outcome::Won { revision: 10 });
    assert_eq!(e.role(), Role::Master);
    assert_eq!(changes(&mut e), [RoleChange::Elected]);
}

#[test]
fn a_master_whose_keepalives_fail_for_a_ttl_steps_down_and_runs_again() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(ms(0), t.id, Outcome::Won { revision: 3 });
    let mut now = ms(0);
    // Every keepalive fails from here on: still master until a whole TTL has passed
    // since the lease was last known alive (its grant, sent at 0).
    while now < TTL {
        e.tick(now);
        assert_eq!(e.role(), Role::Master, "at {now:?}");
        for c in e.take_calls() {
            let error = "connection refused".to_string();
            e.on_result(now, c.id, Outcome::Failed { error });
        }
        now += ms(50);
    }
    e.tick(TTL);
    assert_ne!(e.role(), Role::Master);
    assert_eq!(
        changes(&mut e),
        [RoleChange::Elected, RoleChange::LostMastership]
    );
    // Both leases are given up: it registers again and runs for master.
    let calls = e.take_calls();
    assert!(matches!(
        calls.first().map(|c| &c.op),
        Some(Op::Grant {
            purpose: Purpose::Service,
            ..
        })
    ));
}

#[test]
fn a_keepalive_etcd_answers_with_ttl_zero_demotes_at_once() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(ms(0), t.id, Outcome::Won { revision: 3 });
    e.tick(ms(1000));
    for c in e.take_calls() {
        let ttl_secs = match c.op {
            Op::KeepAlive {
                purpose: Purpose::Master,
                ..
            } => 0,
            _ => 3,
        };
        e.on_result(ms(1001), c.id, Outcome::Alive { ttl_secs });
    }
    assert_eq!(e.role(), Role::Candidate);
    assert_eq!(
        changes(&mut e),
        [RoleChange::Elected, RoleChange::LostMastership]
    );
    // The service key is still registered: straight to a new master lease.
    let g = one(&mut e);
    assert!(matches!(
        g.op,
        Op::Grant {
            purpose: Purpose::Master,
            ..
        }
    ));
}

#[test]
fn an_unanswered_txn_that_succeeded_is_recognised_and_an_old_lease_is_waited_out() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(
        ms(500),
        t.id,
        Outcome::Failed {
            error: "timeout".into(),
        },
    );
    e.tick(ms(500) + ms(250));
    let calls = e.take_calls();
    let t = calls
        .iter()
        .find(|c| matches!(c.op, Op::CreateMaster { lease: 20, .. }))
        .cloned();
    let Some(t) = t else {
        panic!("no txn retry in {calls:?}");
    };
    let holder = Some(ME.to_string());
    e.on_result(
        ms(800),
        t.id,
        Outcome::Lost {
            holder,
            revision: 4,
        },
    );
    assert_eq!(e.role(), Role::Master);

    // A fresh run that finds its own name from an older lease waits as a standby.
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    let holder = Some(ME.to_string());
    e.on_result(
        ms(5),
        t.id,
        Outcome::Lost {
            holder,
            revision: 4,
        },
    );
    assert_eq!(e.role(), Role::Standby);
}

/// Driven only at its wakeups, as a simulator drives it, it never asks for a time
/// already gone, whatever fails.
#[test]
fn wakeups_always_lie_ahead() {
    let mut e = election();
    let mut now = ms(0);
    for step in 0..200u64 {
        e.tick(now);
        for c in e.take_calls() {
            let outcome = match (step % 3, &c.op) {
                (0, _) => Outcome::Failed {
                    error: "refused".into(),
                },
                (_, Op::Grant { .. }) => Outcome::Granted { lease: 1 },
                (_, Op::PutService { .. }) => Outcome::Put { revision: 2 },
                (_, Op::CreateMaster { .. }) => Outcome::Lost {
                    holder: Some(OTHER.into()),
                    revision: 3,
                },
                (_, Op::KeepAlive { .. }) => Outcome::Alive { ttl_secs: 3 },
            };
            e.on_result(now, c.id, outcome);
        }
        let Some(next) = e.next_wakeup() else {
            break;
        };
        assert!(next > now, "step {step}: wakeup {next:?} at {now:?}");
        now = next;
    }
    assert_eq!(e.role(), Role::Standby);
}

#[test]
fn restart_forgets_calls_under_way_and_stops_being_master() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(ms(0), t.id, Outcome::Won { revision: 3 });
    e.tick(ms(1000));
    let old = e.take_calls();
    assert!(!old.is_empty());
    e.restart();
    assert_eq!(e.role(), Role::Candidate);
    assert_eq!(
        changes(&mut e),
        [RoleChange::Elected, RoleChange::LostMastership]
    );
    assert_eq!(e.next_wakeup(), Some(Duration::ZERO));
    e.tick(ms(1100));
    let g = one(&mut e);
    assert!(old.iter().all(|c| c.id != g.id), "ids are never reused");
    for c in old {
        e.on_result(ms(1101), c.id, Outcome::Alive { ttl_secs: 3 });
    }
    assert!(e.take_calls().is_empty());
    assert_eq!(e.role(), Role::Candidate);
}

#[test]
fn a_listing_without_the_master_key_starts_a_run_and_one_with_it_makes_a_standby() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(
        ms(0),
        t.id,
        Outcome::Lost {
            holder: Some(OTHER.into()),
            revision: 5,
        },
    );
    let service = KeyValue {
        key: format!("/ns/XLLM:SERVICE:{ME}").into_bytes(),
        value: ME.as_bytes().to_vec(),
        mod_revision: 2,
    };
    e.on_listing(ms(10), 8, std::slice::from_ref(&service));
    assert_eq!(e.role(), Role::Candidate);
    assert!(matches!(
        one(&mut e).op,
        Op::Grant {
            purpose: Purpose::Master,
            ..
        }
    ));

    let mut e = election();
    e.tick(ms(0));
    let _ = e.take_calls();
    let holder = master_event(EventKind::Put, OTHER, 4).kv;
    e.on_listing(ms(0), 4, &[holder]);
    assert_eq!(e.role(), Role::Standby);
    assert_eq!(e.holder(), Some(OTHER));
}

#[test]
fn after_etcd_lost_its_data_a_listing_at_a_low_revision_counts() {
    let mut e = election();
    let t = up_to_txn(&mut e, ms(0));
    e.on_result(
        ms(0),
        t.id,
        Outcome::Lost {
            holder: Some(OTHER.into()),
            revision: 50,
        },
    );
    // A listing at a lower revision is old news, until etcd is known to have reset.
    e.on_listing(ms(10), 3, &[]);
    assert_eq!(e.role(), Role::Standby);
    e.on_revision_reset();
    e.on_listing(ms(20), 3, &[]);
    assert_eq!(e.role(), Role::Candidate);
    // Its service key is gone with the data: registered again first.
    assert!(!e.registered());
    assert!(matches!(one(&mut e).op, Op::PutService { lease: 10, .. }));
}

/// The core publishes only while master, and a standby routes by what etcd holds.
#[test]
fn the_role_gates_publishing_and_picks_the_load_routing_weighs() {
    let cfg = Config {
        elect: true,
        service_name: ME.into(),
        etcd_namespace: "ns".into(),
        publish_interval: ms(100),
        ..Default::default()
    };
    let mut core = MasterCore::new(&cfg, ms(0));
    assert_eq!(core.role(), Role::Candidate);
    for (name, rev) in [("a:1", 2), ("b:1", 3)] {
        let value =
            format!(r#"{{"name":"{name}","rpc_address":"{name}","type":0,"incarnation_id":"i"}}"#);
        let ev = WatchEvent {
            kind: EventKind::Put,
            kv: KeyValue {
                key: format!("/ns/XLLM:DEFAULT:{name}").into_bytes(),
                value: value.into_bytes(),
                mod_revision: rev,
            },
            prev_kv: None,
        };
        core.on_watch_event(ms(1), &ev);
    }
    let beat = |name: &str, waiting: u64| {
        format!(
            r#"{{"name":"{name}","incarnation_id":"i","load_metrics":{{"waiting_requests_num":{waiting},"gpu_cache_usage_perc":0.1}}}}"#
        )
    };
    assert_eq!(
        core.on_heartbeat_admitted_text(ms(2), &beat("a:1", 9))
            .status,
        200
    );
    assert_eq!(
        core.on_heartbeat_admitted_text(ms(2), &beat("b:1", 0))
            .status,
        200
    );
    // Not master: nothing to publish, and the master's numbers (a idle, b busy) rule.
    assert_eq!(core.publish_round(ms(100)), Some(Default::default()));
    let published = WatchEvent {
        kind: EventKind::Put,
        kv: KeyValue {
            key: b"/ns/XLLM:LOADMETRICS:b:1".to_vec(),
            value: br#"{"gpu_cache_usage_perc":0.5,"waiting_requests_num":4}"#.to_vec(),
            mod_revision: 9,
        },
        prev_kv: None,
    };
    core.on_watch_event(ms(3), &published);
    assert_eq!(core.route().as_deref(), Some("a:1"));

    // Elected: its own heartbeats rule, and what they brought is published.
    core.tick(ms(4));
    for _ in 0..4 {
        for c in core.take_election_calls() {
            let outcome = match c.op {
                Op::Grant { .. } => Outcome::Granted { lease: 1 },
                Op::PutService { .. } => Outcome::Put { revision: 10 },
                Op::CreateMaster { .. } => Outcome::Won { revision: 11 },
                Op::KeepAlive { .. } => Outcome::Alive { ttl_secs: 3 },
            };
            core.on_election_result(ms(5), c.id, outcome);
        }
    }
    assert!(core.is_master());
    assert!(core
        .take_notes()
        .iter()
        .any(|n| matches!(n, Note::Role(ev) if ev.change == RoleChange::Elected)));
    assert_eq!(core.route().as_deref(), Some("b:1"));
    let plan = core.publish_round(ms(200)).unwrap_or_default();
    let names: Vec<&str> = plan.puts.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["a:1", "b:1"]);
}
