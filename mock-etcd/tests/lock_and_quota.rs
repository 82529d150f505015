//! The fake's own rules where real etcd is not compared step by step: the space quota
//! raising NOSPACE (a real etcd's database file grows in bbolt's steps, not the
//! fake's), a lock waiter that goes away, and a lock freed by its holder's lease.

use std::time::{Duration, Instant};

use mock_etcd::{Config, EtcdCore};

fn put(core: &mut EtcdCore, key: &str, bytes: usize) -> (u16, String) {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        b64(key.as_bytes()),
        b64(&vec![b'v'; bytes])
    );
    let a = core.handle_json("/v3/kv/put", None, body.as_bytes(), Duration::ZERO);
    (a.status, String::from_utf8_lossy(&a.body).into_owned())
}

fn call(core: &mut EtcdCore, path: &str, body: &str) -> (u16, String) {
    let a = core.handle_json(path, None, body.as_bytes(), Duration::ZERO);
    (a.status, String::from_utf8_lossy(&a.body).into_owned())
}

#[test]
fn a_write_past_the_quota_raises_nospace_until_disarmed() {
    let config = Config {
        quota_backend_bytes: 40 * 1024,
        ..Config::default()
    };
    let member = config.member_id;
    let mut core = EtcdCore::new(config, 1_764_590_000_000, 7);
    let mut stored = 0;
    let refused = loop {
        let (status, body) = put(&mut core, &format!("k{stored}"), 4096);
        if status != 200 {
            break (status, body);
        }
        stored += 1;
        assert!(stored < 10, "quota never reached");
    };
    // Three values of 4 KiB + their 2-byte keys fill four 4 KiB pages (20480 + 16384
    // = 36864 bytes); the fourth costs 256 + 2 + 4096 more, reaching 40 KiB.
    assert_eq!(stored, 3);
    assert_eq!(refused.0, 429, "{}", refused.1);
    assert!(
        refused.1.contains("database space exceeded"),
        "{}",
        refused.1
    );
    let alarms = call(&mut core, "/v3/maintenance/alarm", "{}");
    assert_eq!(
        alarms.1,
        format!(r#"{{"alarms":[{{"memberID":"{member}","alarm":"NOSPACE"}}]}}"#)
    );
    // Raised: even a tiny put is refused, until the alarm is disarmed; reads and
    // deletes go on.
    assert_eq!(put(&mut core, "tiny", 1).0, 429);
    assert_eq!(call(&mut core, "/v3/kv/range", r#"{"key":"azA="}"#).0, 200);
    assert_eq!(
        call(&mut core, "/v3/kv/deleterange", r#"{"key":"azA="}"#).0,
        200
    );
    let disarm = format!(r#"{{"action":"DEACTIVATE","alarm":"NOSPACE","memberID":"{member}"}}"#);
    assert_eq!(call(&mut core, "/v3/maintenance/alarm", &disarm).0, 200);
    assert_eq!(put(&mut core, "tiny", 1).0, 200);
}

/// Wait (bounded) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_takes_its_key_and_an_expired_holder_frees_the_lock() {
    let fake = mock_etcd::start(Config::default(), mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let post =
        |path: &str, body: String| http.post(format!("{}{path}", fake.url())).body(body).send();
    for id in [7001, 7002, 7003] {
        let r = post("/v3/lease/grant", format!(r#"{{"TTL":60,"ID":{id}}}"#));
        assert_eq!(r.await.unwrap().status().as_u16(), 200);
    }
    let lock = |lease: i64| format!(r#"{{"name":"bQ==","lease":{lease}}}"#);
    assert_eq!(
        post("/v3/lock/lock", lock(7001)).await.unwrap().status(),
        200
    );
    // A waiter that gives up (its client times out and closes the connection).
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = quick
        .post(format!("{}/v3/lock/lock", fake.url()))
        .body(lock(7002))
        .send()
        .await;
    assert!(gone.is_err(), "the lock is held: {gone:?}");
    until("the leaving waiter's key is deleted", || {
        fake.get("m/1b5a").is_none() && fake.get("m/1b59").is_some()
    })
    .await;
    // A waiter that stays gets the lock when the holder's lease expires.
    let waiter = tokio::spawn(post("/v3/lock/lock", lock(7003)));
    until("the waiter queued", || fake.get("m/1b5b").is_some()).await;
    assert!(fake.expire_lease(7001));
    let resp = waiter.await.unwrap().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains(r#""key":"bS8xYjVi""#), "{body}");
    fake.stop().await;
}
