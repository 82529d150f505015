//! The core alone, as a simulator drives it: no server, no socket, no clock. Times are
//! durations since an arbitrary start; bodies are the JSON the sidecar sends (the
//! shapes of `sidecar/src/etcd.rs`, written here from the wire, not imported).

use std::sync::Arc;
use std::time::Duration;

use mock_etcd::faults::{Fault, FaultDecision};
use mock_etcd::{Config, EtcdCore, LineSink, WatchSink};
use mock_kit::FakeEvent;
use serde_json::Value;

const EPOCH_MS: u64 = 1_764_590_000_000;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn core() -> EtcdCore {
    EtcdCore::new(Config::default(), EPOCH_MS, 42)
}

fn with_users(ttl: Duration) -> EtcdCore {
    let config = Config {
        users: vec![("root".into(), "pw".into())],
        token_ttl: ttl,
        ..Config::default()
    };
    EtcdCore::new(config, EPOCH_MS, 42)
}

/// POST `body` to `path` at `now`; answers (status, JSON).
fn call(
    core: &mut EtcdCore,
    path: &str,
    token: Option<&str>,
    body: &str,
    now: Duration,
) -> (u16, Value) {
    let a = core.handle_json(path, token, body.as_bytes(), now);
    let v = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
    (a.status, v)
}

fn grant(core: &mut EtcdCore, ttl: i64, now: Duration) -> String {
    let (status, v) = call(
        core,
        "/v3/lease/grant",
        None,
        &format!(r#"{{"TTL":{ttl},"ID":0}}"#),
        now,
    );
    assert_eq!(status, 200, "{v}");
    v["ID"].as_str().unwrap().to_string()
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn get(core: &mut EtcdCore, key: &str, now: Duration) -> Value {
    let (status, v) = call(
        core,
        "/v3/kv/range",
        None,
        &format!(r#"{{"key":"{}"}}"#, b64(key)),
        now,
    );
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn the_sidecars_calls_round_trip_through_the_wire_form() {
    let mut c = core();
    let t0 = secs(0.0);
    let id = grant(&mut c, 6, t0);
    assert!(id.parse::<i64>().unwrap() > 0, "{id}");
    let put = format!(
        r#"{{"key":"{}","value":"{}","lease":"{id}"}}"#,
        b64("/xllm/instances/a"),
        b64(r#"{"addr":"10.0.0.1:8000"}"#)
    );
    let (status, v) = call(&mut c, "/v3/kv/put", None, &put, t0);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["header"]["revision"], "2");
    let kv = &get(&mut c, "/xllm/instances/a", t0)["kvs"][0];
    assert_eq!(kv["value"], b64(r#"{"addr":"10.0.0.1:8000"}"#));
    assert_eq!(kv["lease"], id.as_str());

    let ka = c.handle_json(
        "/v3/lease/keepalive",
        None,
        format!(r#"{{"ID":"{id}"}}"#).as_bytes(),
        secs(2.0),
    );
    assert_eq!(ka.status, 200);
    let text = String::from_utf8(ka.body).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    let line: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line["result"]["ID"], id.as_str());
    assert_eq!(line["result"]["TTL"], "6");

    let revoke = c.handle_json(
        "/v3/lease/revoke",
        None,
        format!(r#"{{"ID":"{id}"}}"#).as_bytes(),
        secs(3.0),
    );
    assert_eq!(revoke.status, 200);
    assert_eq!(revoke.report.map(|r| r.kind()), Some("lease_revoked"));
    assert!(get(&mut c, "/xllm/instances/a", secs(3.0))
        .get("kvs")
        .is_none());
    // A keepalive of a lease that is gone: no TTL, as etcd.
    let (_, v) = call(
        &mut c,
        "/v3beta/lease/keepalive",
        None,
        &format!(r#"{{"ID":"{id}"}}"#),
        secs(3.0),
    );
    assert!(v["result"].get("TTL").is_none(), "{v}");
    let (status, v) = call(
        &mut c,
        "/v3/lease/revoke",
        None,
        &format!(r#"{{"ID":"{id}"}}"#),
        secs(3.0),
    );
    assert_eq!((status, v["code"].as_u64()), (404, Some(5)), "{v}");
}

#[test]
fn bad_bodies_and_unknown_paths_get_the_gateways_answers() {
    let mut c = core();
    let (status, v) = call(
        &mut c,
        "/v3/kv/put",
        None,
        r#"{"key":"YQ==","lease":"x"}"#,
        secs(0.0),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["code"], 3);
    let (status, v) = call(&mut c, "/v3/kv/put", None, r#"{"value":"YQ=="}"#, secs(0.0));
    assert_eq!(
        (status, v["message"].as_str()),
        (400, Some("etcdserver: key is not provided"))
    );
    let a = c.handle_json("/v3/kv/nothing", None, b"{}", secs(0.0));
    assert_eq!((a.status, a.body.as_slice()), (404, &b"Not Found\n"[..]));
    let a = c.handle_json("/elsewhere", None, b"{}", secs(0.0));
    assert_eq!(
        (a.status, a.body.as_slice()),
        (404, &b"404 page not found\n"[..])
    );
    let a = c.handle_json("/v3/lease/keepalive", None, b"{nope", secs(0.0));
    assert_eq!(a.status, 500);
}

#[test]
fn leases_expire_at_the_time_given_and_not_before() {
    let mut c = core();
    let id = grant(&mut c, 6, secs(10.0));
    let put = format!(
        r#"{{"key":"{}","value":"{}","lease":"{id}"}}"#,
        b64("k"),
        b64("v")
    );
    assert_eq!(call(&mut c, "/v3/kv/put", None, &put, secs(10.0)).0, 200);
    assert_eq!(c.next_expiry(), Some(secs(16.0)));
    // A keepalive at 14 s moves the deadline to 20 s.
    call(
        &mut c,
        "/v3/lease/keepalive",
        None,
        &format!(r#"{{"ID":"{id}"}}"#),
        secs(14.0),
    );
    assert_eq!(c.next_expiry(), Some(secs(20.0)));
    let (_, ttl) = call(
        &mut c,
        "/v3/lease/timetolive",
        None,
        &format!(r#"{{"ID":"{id}","keys":true}}"#),
        secs(16.5),
    );
    assert_eq!(ttl["TTL"], "3", "{ttl}");
    assert_eq!(ttl["grantedTTL"], "6");
    assert_eq!(ttl["keys"][0], b64("k"));
    let snap = c.snapshot(secs(16.5));
    assert_eq!(snap["leases"][0]["remaining_ms"], 3500, "{snap}");
    assert_eq!(snap["keys"][0]["key"], "k");
    assert!(c.expire_due(secs(19.999)).is_empty());
    let rev = c.revision();
    let gone = c.expire_due(secs(20.0));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].id.to_string(), id);
    assert_eq!(c.revision(), rev + 1, "the lease's keys go in one revision");
    assert!(get(&mut c, "k", secs(20.0)).get("kvs").is_none());
    assert_eq!(c.next_expiry(), None);
    let (_, ttl) = call(
        &mut c,
        "/v3/lease/timetolive",
        None,
        &format!(r#"{{"ID":"{id}"}}"#),
        secs(21.0),
    );
    assert_eq!(ttl["TTL"], "-1");
}

#[test]
fn watch_events_go_to_the_sink_in_revision_order() {
    let mut c = core();
    let sink = Arc::new(LineSink::default());
    let as_sink: Arc<dyn WatchSink> = sink.clone();
    let mut ws = c.watch_open(None, as_sink, secs(0.0));
    let create = format!(
        r#"{{"create_request":{{"key":"{}","range_end":"{}","prev_kv":true}}}}"#,
        b64("/xllm/"),
        b64("/xllm0")
    );
    c.watch_json(&mut ws, create.as_bytes()).unwrap();
    let lines: Vec<Value> = sink
        .drain()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["result"]["created"], true);

    let id = grant(&mut c, 2, secs(0.0));
    let put = |k: &str| {
        format!(
            r#"{{"key":"{}","value":"{}","lease":"{id}"}}"#,
            b64(k),
            b64("v")
        )
    };
    call(&mut c, "/v3/kv/put", None, &put("/xllm/a"), secs(0.1));
    call(&mut c, "/v3/kv/put", None, &put("/other"), secs(0.2));
    call(&mut c, "/v3/kv/put", None, &put("/xllm/b"), secs(0.3));
    c.expire_due(secs(2.3));
    let lines: Vec<Value> = sink
        .drain()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["result"]["events"][0]["kv"]["key"], b64("/xllm/a"));
    assert_eq!(lines[0]["result"]["header"]["revision"], "2");
    assert_eq!(lines[1]["result"]["header"]["revision"], "4");
    // Expiry deletes both watched keys in one revision: one answer, two DELETE events.
    let expired = &lines[2]["result"];
    assert_eq!(expired["header"]["revision"], "5");
    assert_eq!(expired["events"][0]["type"], "DELETE");
    assert_eq!(expired["events"][1]["type"], "DELETE");
    assert_eq!(expired["events"][1]["prev_kv"]["key"], b64("/xllm/b"));

    c.watch_json(&mut ws, br#"{"cancel_request":{"watch_id":"0"}}"#)
        .unwrap();
    assert!(sink.drain()[0].contains(r#""canceled":true"#));
    assert!(c.watch_ids(ws.id()).is_empty());
    assert!(c.watch_json(&mut ws, b"[1]").is_err());
    c.watch_close(&ws);
    assert!(c.data().watchers.is_empty());
}

/// The lines of one watcher per `(range start, range end, prev_kv)` in `specs`, all on
/// one core, after the same writes (a put, a put over it, a delete).
fn watch_lines(specs: &[(&str, &str, bool)]) -> Vec<Vec<String>> {
    let mut c = core();
    let sinks: Vec<Arc<LineSink>> = specs
        .iter()
        .map(|(from, to, prev_kv)| {
            let sink = Arc::new(LineSink::default());
            let as_sink: Arc<dyn WatchSink> = sink.clone();
            let mut ws = c.watch_open(None, as_sink, secs(0.0));
            let create = format!(
                r#"{{"create_request":{{"key":"{}","range_end":"{}","prev_kv":{prev_kv}}}}}"#,
                b64(from),
                b64(to)
            );
            c.watch_json(&mut ws, create.as_bytes()).unwrap();
            sink
        })
        .collect();
    let put = |k: &str, v: &str| format!(r#"{{"key":"{}","value":"{}"}}"#, b64(k), b64(v));
    call(
        &mut c,
        "/v3/kv/put",
        None,
        &put("/xllm/a", "one"),
        secs(0.1),
    );
    call(
        &mut c,
        "/v3/kv/put",
        None,
        &put("/xllm/a", "two"),
        secs(0.2),
    );
    call(
        &mut c,
        "/v3/kv/put",
        None,
        &put("/xllm/b", "é\"x"),
        secs(0.3),
    );
    let del = format!(r#"{{"key":"{}"}}"#, b64("/xllm/a"));
    call(&mut c, "/v3/kv/deleterange", None, &del, secs(0.4));
    sinks.iter().map(|s| s.drain()).collect()
}

#[test]
fn every_watcher_of_a_revision_gets_the_lines_it_would_get_alone() {
    let specs = [
        ("/xllm/", "/xllm0", true),
        ("/xllm/", "/xllm0", false),
        ("/xllm/b", "/xllm/c", true),
        ("/xllm/", "/xllm0", true),
    ];
    let together = watch_lines(&specs);
    for (k, spec) in specs.iter().enumerate() {
        let alone = watch_lines(&[*spec]);
        assert_eq!(alone.len(), 1);
        assert!(alone[0].len() >= 2, "{spec:?}: {:?}", alone[0]);
        assert_eq!(together[k], alone[0], "watcher {k} {spec:?}");
    }
    assert!(together[0].iter().any(|l| l.contains("prev_kv")));
    assert!(!together[1].iter().any(|l| l.contains("prev_kv")));
}

#[test]
fn tokens_expire_after_idle_time_at_the_times_given() {
    let mut c = with_users(Duration::from_secs(2));
    let (status, v) = call(
        &mut c,
        "/v3/auth/authenticate",
        None,
        r#"{"name":"root","password":"pw"}"#,
        secs(0.0),
    );
    assert_eq!(status, 200, "{v}");
    let token = v["token"].as_str().unwrap().to_string();
    let put = format!(r#"{{"key":"{}","value":"{}"}}"#, b64("k"), b64("v"));
    assert_eq!(
        call(&mut c, "/v3/kv/put", Some(&token), &put, secs(1.5)).0,
        200
    );
    // Each use slides the idle TTL: 3.4 s is 1.9 s after the last use.
    assert_eq!(
        call(&mut c, "/v3/kv/put", Some(&token), &put, secs(3.4)).0,
        200
    );
    let (status, v) = call(&mut c, "/v3/kv/put", Some(&token), &put, secs(5.5));
    assert_eq!(
        (status, v["message"].as_str()),
        (401, Some("etcdserver: invalid auth token"))
    );
    let (status, v) = call(&mut c, "/v3/kv/put", None, &put, secs(5.5));
    assert_eq!(
        (status, v["message"].as_str()),
        (400, Some("etcdserver: user name is empty"))
    );
    let (status, _) = call(
        &mut c,
        "/v3/auth/authenticate",
        None,
        r#"{"name":"root","password":"no"}"#,
        secs(6.0),
    );
    assert_eq!(status, 400);
    // A watch opened with a bad token refuses each create with the reason.
    let sink = Arc::new(LineSink::default());
    let mut ws = c.watch_open(Some(&token), sink.clone(), secs(6.0));
    c.watch_json(&mut ws, br#"{"create_request":{"key":"aw=="}}"#)
        .unwrap();
    let line = sink.drain().remove(0);
    assert!(
        line.contains("invalid auth token") && line.contains(r#""canceled":true"#),
        "{line}"
    );
}

/// Same seed, same calls, same times: the same bytes; another seed: other tokens.
#[test]
fn runs_are_replayable_by_seed() {
    let run = |seed: u64| {
        let config = Config {
            users: vec![("root".into(), "pw".into())],
            ..Config::default()
        };
        let mut c = EtcdCore::new(config, EPOCH_MS, seed);
        let mut out = Vec::new();
        let auth = c.handle_json(
            "/v3/auth/authenticate",
            None,
            br#"{"name":"root","password":"pw"}"#,
            secs(0.0),
        );
        let token: Value = serde_json::from_slice(&auth.body).unwrap();
        let token = token["token"].as_str().unwrap().to_string();
        out.push(auth.body);
        for i in 0..3 {
            let a = c.handle_json(
                "/v3/lease/grant",
                Some(&token),
                br#"{"TTL":5}"#,
                secs(i as f64),
            );
            out.push(a.body);
        }
        c.expire_due(secs(6.5));
        out.push(
            c.handle_json("/v3/lease/leases", None, b"{}", secs(6.5))
                .body,
        );
        out
    };
    let a = run(7);
    assert_eq!(a, run(7));
    assert_ne!(a[0], run(8)[0], "tokens differ with the seed");
    let leases: Value = serde_json::from_slice(a.last().unwrap()).unwrap();
    assert_eq!(
        leases["leases"].as_array().map(Vec::len),
        Some(1),
        "{leases}"
    );
}

#[test]
fn faults_are_decisions_for_the_caller_to_apply() {
    let fail: Fault =
        serde_json::from_str(r#"{"kind":"fail","path":"/v3/lease/keepalive"}"#).unwrap();
    assert!(fail.matches("/v3beta/lease/keepalive"));
    match fail.decision() {
        FaultDecision::Fail(e) => {
            assert_eq!((e.status.as_u16(), e.code), (503, 14));
            assert_eq!(
                e.body(),
                r#"{"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14}"#
            );
        }
        other => panic!("{other:?}"),
    }
    let slow = Fault::Latency {
        path: "*".into(),
        ms: 1500,
    };
    assert_eq!(
        slow.decision(),
        FaultDecision::Delay(Duration::from_millis(1500))
    );
    assert_eq!(
        Fault::Hang { path: "*".into() }.decision(),
        FaultDecision::Hang
    );

    let mut c = core();
    let id = grant(&mut c, 60, secs(0.0));
    let gone = c.expire_lease(id.parse().unwrap()).unwrap();
    assert_eq!(gone.id.to_string(), id);
    assert!(c.expire_lease(gone.id).is_none());
    let put = format!(r#"{{"key":"{}","value":"{}"}}"#, b64("k"), b64("v"));
    call(&mut c, "/v3/kv/put", None, &put, secs(1.0));
    c.lose_data(true, EPOCH_MS + 1_000);
    assert_eq!(c.revision(), 1);
    assert!(get(&mut c, "k", secs(1.0)).get("kvs").is_none());
}
